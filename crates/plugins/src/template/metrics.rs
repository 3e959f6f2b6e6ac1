//! *template*'s three counters. A match is counted on the query path, so
//! its series are resolved once per label set and then found without a
//! lock; the failures are rare and go through the family.

use std::sync::Arc;

use arc_swap::ArcSwap;
use clusterdns_contract::metrics::{Counter, Family, Registry};
use parking_lot::Mutex;

/// `(server, zone, class, type)`.
type Key = (Box<str>, Box<str>, Box<str>, Box<str>);

pub(super) struct Metrics {
    matches: Arc<Family<Counter>>,
    template_failures: Arc<Family<Counter>>,
    rr_failures: Arc<Family<Counter>>,
    resolved: ArcSwap<Vec<(Key, Arc<Counter>)>>,
    adding: Mutex<()>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Registers the families (label names sorted, as CoreDNS's
    /// exposition prints them).
    pub(super) fn new(r: &Registry) -> Metrics {
        let failures = [
            "class", "section", "server", "template", "type", "view", "zone",
        ];
        Metrics {
            matches: r.get_or_register("coredns_template_matches_total", || {
                Family::new(
                    "coredns_template_matches_total",
                    "Counter of template regex matches.",
                    &["class", "server", "type", "view", "zone"],
                )
            }),
            template_failures: r.get_or_register(
                "coredns_template_template_failures_total",
                || {
                    Family::new(
                        "coredns_template_template_failures_total",
                        "Counter of go template failures.",
                        &failures,
                    )
                },
            ),
            rr_failures: r.get_or_register("coredns_template_rr_failures_total", || {
                Family::new(
                    "coredns_template_rr_failures_total",
                    "Counter of mis-templated RRs.",
                    &failures,
                )
            }),
            resolved: ArcSwap::from_pointee(Vec::new()),
            adding: Mutex::new(()),
        }
    }

    /// Counts a regex match.
    pub(super) fn matched(&self, server: &str, zone: &str, class: &str, rtype: &str) {
        let is = |k: &Key| &*k.0 == server && &*k.1 == zone && &*k.2 == class && &*k.3 == rtype;
        if let Some((_, c)) = self.resolved.load().iter().find(|(k, _)| is(k)) {
            c.inc();
            return;
        }
        self.resolve(server, zone, class, rtype).inc();
    }

    #[cold]
    fn resolve(&self, server: &str, zone: &str, class: &str, rtype: &str) -> Arc<Counter> {
        let _g = self.adding.lock();
        let mut list = Vec::clone(&self.resolved.load_full());
        let c = self.matches.with(&[class, server, rtype, "", zone]);
        list.push((
            (server.into(), zone.into(), class.into(), rtype.into()),
            c.clone(),
        ));
        self.resolved.store(Arc::new(list));
        c
    }

    /// Counts a template that failed to run.
    pub(super) fn template_failed(&self, l: (&str, &str, &str, &str), section: &str, tpl: &str) {
        let (server, zone, class, rtype) = l;
        self.template_failures
            .with(&[class, section, server, tpl, rtype, "", zone])
            .inc();
    }

    /// Counts a rendered record that did not parse.
    pub(super) fn rr_failed(&self, l: (&str, &str, &str, &str), section: &str, tpl: &str) {
        let (server, zone, class, rtype) = l;
        self.rr_failures
            .with(&[class, section, server, tpl, rtype, "", zone])
            .inc();
    }
}
