//! The metrics of *forward* and its proxies, with CoreDNS's names.

use std::sync::Arc;

use clusterdns_contract::metrics::{Counter, Family, HistogramSeries, Registry, TIME_BUCKETS};

/// Handles to the metric families, resolved at setup.
#[derive(Debug, Clone)]
pub(crate) struct Metrics {
    /// `coredns_proxy_request_duration_seconds{proxy_name,rcode,to}`.
    pub duration: Arc<Family<HistogramSeries>>,
    /// `coredns_proxy_healthcheck_failures_total{proxy_name,to}`.
    pub hc_failures: Arc<Family<Counter>>,
    /// `coredns_proxy_conn_cache_hits_total{proto,proxy_name,to}`.
    pub conn_hits: Arc<Family<Counter>>,
    /// `coredns_proxy_conn_cache_misses_total{proto,proxy_name,to}`.
    pub conn_misses: Arc<Family<Counter>>,
    /// `coredns_forward_healthcheck_broken_total`.
    pub broken: Arc<Counter>,
    /// `coredns_forward_max_concurrent_rejects_total`.
    pub rejects: Arc<Counter>,
}

impl Metrics {
    /// Registers (or finds, after a reload) the families.
    pub(crate) fn new(r: &Registry) -> Self {
        let name = "coredns_proxy_request_duration_seconds";
        let duration = r.get_or_register(name, || {
            Family::histogram(
                name,
                "Histogram of the time each request took.",
                &["proxy_name", "rcode", "to"],
                TIME_BUCKETS,
            )
        });
        let counter = |name: &'static str, help: &'static str, labels: &[&'static str]| {
            r.get_or_register(name, || Family::<Counter>::new(name, help, labels))
        };
        let hc_failures = counter(
            "coredns_proxy_healthcheck_failures_total",
            "Counter of the number of failed healthchecks.",
            &["proxy_name", "to"],
        );
        let conn_hits = counter(
            "coredns_proxy_conn_cache_hits_total",
            "Counter of connection cache hits per upstream and protocol.",
            &["proto", "proxy_name", "to"],
        );
        let conn_misses = counter(
            "coredns_proxy_conn_cache_misses_total",
            "Counter of connection cache misses per upstream and protocol.",
            &["proto", "proxy_name", "to"],
        );
        let broken = counter(
            "coredns_forward_healthcheck_broken_total",
            "Counter of the number of complete failures of the healthchecks.",
            &[],
        )
        .with(&[]);
        // Shown from the start, as CoreDNS's plain counters are.
        broken.add(0);
        let rejects = counter(
            "coredns_forward_max_concurrent_rejects_total",
            "Counter of the number of queries rejected because the concurrent queries were at maximum.",
            &[],
        )
        .with(&[]);
        rejects.add(0);
        Self {
            duration,
            hc_failures,
            conn_hits,
            conn_misses,
            broken,
            rejects,
        }
    }
}
