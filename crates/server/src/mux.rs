//! The zone table of one listener: longest-suffix match of the query name
//! against the zones served on that address and port.

use std::sync::Arc;

use clusterdns_contract::metrics::Counter;
use clusterdns_contract::{BlockFilter, Chain};
use clusterdns_wire::Name;

use crate::tcp::TcpLimits;

/// One server block's zone on a listener.
#[derive(Clone)]
struct Entry {
    zone: Name,
    chain: Chain,
    /// The block's view, if it has one.
    filter: Option<Arc<dyn BlockFilter>>,
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("zone", &self.zone)
            .field("chain", &self.chain)
            .field("filtered", &self.filter.is_some())
            .finish()
    }
}

/// One listener's zones and their chains.
#[derive(Debug, Clone)]
pub struct Mux {
    /// The listener's label in metrics and logs, `dns://:53`.
    pub label: String,
    /// Zones sorted by label count, longest first, so the first match is
    /// the longest; blocks of the same zone stay in Corefile order.
    zones: Vec<Entry>,
    /// Some block on this listener loads a plugin that opens non-IN
    /// classes (CoreDNS `EnableChaos`: chaos, forward, proxy).
    class_chaos: bool,
    /// `coredns_panics_total`: a plugin panicked answering a query here.
    pub panics: Arc<Counter>,
    /// The TCP side's timeouts and connection limit (read at every accept
    /// and every query, so a reload that changes them applies at once).
    pub tcp: TcpLimits,
}

impl Mux {
    /// A mux for `label` with no zones.
    pub fn new(label: String) -> Self {
        Self {
            label,
            zones: Vec::new(),
            class_chaos: false,
            panics: Arc::default(),
            tcp: TcpLimits::default(),
        }
    }

    /// Counts recovered panics in `counter`.
    pub fn with_panics(mut self, counter: Arc<Counter>) -> Self {
        self.panics = counter;
        self
    }

    /// Adds `zone`; returns `false` when it is already served here.
    pub fn add(&mut self, zone: Name, chain: Chain) -> bool {
        self.add_filtered(zone, chain, None)
    }

    /// Adds `zone` for a block with `filter` (its view): such blocks may
    /// share a zone with each other and with one block without a filter.
    /// Returns `false` when a second block without a filter would serve
    /// the zone (CoreDNS: "already defined").
    pub fn add_filtered(
        &mut self,
        zone: Name,
        chain: Chain,
        filter: Option<Arc<dyn BlockFilter>>,
    ) -> bool {
        if filter.is_none()
            && self
                .zones
                .iter()
                .any(|e| e.zone == zone && e.filter.is_none())
        {
            return false;
        }
        self.class_chaos |= ["chaos", "forward", "proxy"]
            .iter()
            .any(|p| chain.contains(p));
        self.zones.push(Entry {
            zone,
            chain,
            filter,
        });
        // Stable: blocks of one zone keep their Corefile order.
        self.zones
            .sort_by_key(|e| std::cmp::Reverse(e.zone.label_count()));
        true
    }

    /// The zone and chain for a lowercase query name (CoreDNS: longest
    /// configured suffix, else the root zone, else none → REFUSED),
    /// taking every block's filter as passed.
    #[inline]
    pub fn select(&self, qname_lower: &Name) -> Option<(&Name, &Chain)> {
        self.select_at(qname_lower, |_, _| true)
            .map(|(_, z, c)| (z, c))
    }

    /// The zone and chain for a lowercase query name with its position,
    /// for [`Mux::zone_at`] (a deferred query keeps the position instead of
    /// selecting again): the first block, longest zone first and in
    /// Corefile order within a zone, that has no filter or whose filter
    /// `passes` (asked with the block's zone).
    #[inline]
    pub(crate) fn select_at(
        &self,
        qname_lower: &Name,
        mut passes: impl FnMut(&Name, &dyn BlockFilter) -> bool,
    ) -> Option<(usize, &Name, &Chain)> {
        self.zones
            .iter()
            .enumerate()
            .find(|(_, e)| {
                qname_lower.ends_with(&e.zone)
                    && e.filter.as_deref().is_none_or(|f| passes(&e.zone, f))
            })
            .map(|(i, e)| (i, &e.zone, &e.chain))
    }

    /// The zone and chain at a position [`Mux::select_at`] gave.
    #[inline]
    pub(crate) fn zone_at(&self, i: usize) -> Option<(&Name, &Chain)> {
        self.zones.get(i).map(|e| (&e.zone, &e.chain))
    }

    /// Whether queries of classes other than IN are served on this
    /// listener (CoreDNS decides per listener, not per block).
    #[inline]
    pub fn class_chaos(&self) -> bool {
        self.class_chaos
    }

    /// The zones, longest first (a zone several blocks share as often).
    pub fn zones(&self) -> impl Iterator<Item = &Name> {
        self.zones.iter().map(|e| &e.zone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> Name {
        Name::from_ascii(s).unwrap()
    }

    #[test]
    fn longest_suffix_wins_then_root() {
        let mut m = Mux::new("dns://:53".into());
        assert!(m.add(n("."), Chain::default()));
        assert!(m.add(n("cluster.local."), Chain::default()));
        assert!(m.add(n("svc.cluster.local."), Chain::default()));
        assert!(!m.add(n("cluster.local."), Chain::default()));
        let pick = |q: &str| m.select(&n(q)).map(|(z, _)| z.to_string());
        assert_eq!(
            pick("a.b.svc.cluster.local."),
            Some("svc.cluster.local.".into())
        );
        assert_eq!(pick("x.cluster.local."), Some("cluster.local.".into()));
        assert_eq!(pick("example.org."), Some(".".into()));
        let mut only = Mux::new("dns://:53".into());
        only.add(n("example.org."), Chain::default());
        assert!(only.select(&n("example.net.")).is_none());
        assert!(only.select(&n("notexample.org.")).is_none());
        let (i, z, _) = m
            .select_at(&n("a.svc.cluster.local."), |_, _| true)
            .unwrap();
        assert_eq!(m.zone_at(i).map(|(z, _)| z), Some(z));
        assert!(m.zone_at(3).is_none());
    }
}
