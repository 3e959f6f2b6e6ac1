//! The `coredns_cache_*` metrics, resolved once per `server` label.

use std::sync::Arc;

use arc_swap::ArcSwap;
use clusterdns_contract::metrics::{Counter, Family, Gauge, Registry};
use parking_lot::Mutex;

/// Counters and gauges of one cache for one `server` label.
#[derive(Debug)]
pub(crate) struct Handles {
    pub requests: Arc<Counter>,
    pub hits_success: Arc<Counter>,
    pub hits_denial: Arc<Counter>,
    pub misses: Arc<Counter>,
    pub prefetch: Arc<Counter>,
    pub drops: Arc<Counter>,
    pub served_stale: Arc<Counter>,
    pub evict_success: Arc<Counter>,
    pub evict_denial: Arc<Counter>,
    pub entries_success: Arc<Gauge>,
    pub entries_denial: Arc<Gauge>,
}

/// The families and the handles resolved so far.
pub(crate) struct Metrics {
    entries: Arc<Family<Gauge>>,
    requests: Arc<Family<Counter>>,
    hits: Arc<Family<Counter>>,
    misses: Arc<Family<Counter>>,
    prefetch: Arc<Family<Counter>>,
    drops: Arc<Family<Counter>>,
    stale: Arc<Family<Counter>>,
    evictions: Arc<Family<Counter>>,
    zones: String,
    /// The block's view name, the `view` label.
    view: String,
    per_server: ArcSwap<Vec<(Box<str>, Arc<Handles>)>>,
    adding: Mutex<()>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("zones", &self.zones)
            .finish_non_exhaustive()
    }
}

impl Metrics {
    /// Registers the families (label names in alphabetical order, as
    /// CoreDNS's exposition prints them); `zones` is the `zones` label (the cache's
    /// zones joined with commas, as CoreDNS writes it), `view` the block's view name.
    pub(crate) fn new(r: &Registry, zones: String, view: String) -> Self {
        let c = |name: &'static str, help: &'static str, labels: &[&'static str]| {
            r.get_or_register(name, || Family::<Counter>::new(name, help, labels))
        };
        let entries = r.get_or_register("coredns_cache_entries", || {
            Family::<Gauge>::new(
                "coredns_cache_entries",
                "The number of elements in the cache.",
                &["server", "type", "view", "zones"],
            )
        });
        Self {
            entries,
            requests: c(
                "coredns_cache_requests_total",
                "The count of cache requests.",
                &["server", "view", "zones"],
            ),
            hits: c(
                "coredns_cache_hits_total",
                "The count of cache hits.",
                &["server", "type", "view", "zones"],
            ),
            misses: c(
                "coredns_cache_misses_total",
                "The count of cache misses. Deprecated, derive misses from cache hits/requests counters.",
                &["server", "view", "zones"],
            ),
            prefetch: c(
                "coredns_cache_prefetch_total",
                "The number of times the cache has prefetched a cached item.",
                &["server", "view", "zones"],
            ),
            drops: c(
                "coredns_cache_drops_total",
                "The number responses that are not cached, because the reply is malformed.",
                &["server", "view", "zones"],
            ),
            stale: c(
                "coredns_cache_served_stale_total",
                "The number of requests served from stale cache entries.",
                &["server", "view", "zones"],
            ),
            evictions: c(
                "coredns_cache_evictions_total",
                "The count of cache evictions.",
                &["server", "type", "view", "zones"],
            ),
            zones,
            view,
            per_server: ArcSwap::from_pointee(Vec::new()),
            adding: Mutex::new(()),
        }
    }

    /// Runs `f` with the handles of `server`, resolving them the first
    /// time (later calls take no lock and allocate nothing).
    #[inline]
    pub(crate) fn with<R>(&self, server: &str, f: impl FnOnce(&Handles) -> R) -> R {
        {
            let list = self.per_server.load();
            if let Some((_, h)) = list.iter().find(|(s, _)| &**s == server) {
                return f(h);
            }
        }
        let h = self.resolve(server);
        f(&h)
    }

    #[cold]
    fn resolve(&self, server: &str) -> Arc<Handles> {
        let _g = self.adding.lock();
        let list = self.per_server.load_full();
        if let Some((_, h)) = list.iter().find(|(s, _)| &**s == server) {
            return h.clone();
        }
        let z = self.zones.as_str();
        let v = self.view.as_str();
        let plain = [server, v, z];
        let typed = |t: &str| [server, t, v, z].map(str::to_string);
        let with_type = |f: &Family<Counter>, t: &str| {
            let v = typed(t);
            f.with(&[&v[0], &v[1], &v[2], &v[3]])
        };
        let gauge = |t: &str| {
            let v = typed(t);
            self.entries.with(&[&v[0], &v[1], &v[2], &v[3]])
        };
        let h = Arc::new(Handles {
            requests: self.requests.with(&plain),
            hits_success: with_type(&self.hits, "success"),
            hits_denial: with_type(&self.hits, "denial"),
            misses: self.misses.with(&plain),
            prefetch: self.prefetch.with(&plain),
            drops: self.drops.with(&plain),
            served_stale: self.stale.with(&plain),
            evict_success: with_type(&self.evictions, "success"),
            evict_denial: with_type(&self.evictions, "denial"),
            entries_success: gauge("success"),
            entries_denial: gauge("denial"),
        });
        let mut next: Vec<(Box<str>, Arc<Handles>)> = (*list).clone();
        next.push((server.into(), h.clone()));
        self.per_server.store(Arc::new(next));
        h
    }
}
