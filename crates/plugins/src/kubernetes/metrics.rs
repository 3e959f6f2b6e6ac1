//! `coredns_kubernetes_*` metrics, fed by the index's hooks.

use std::sync::Arc;
use std::time::Duration;

use clusterdns_k8s::{IndexHooks, ProgrammingKind};
use clusterdns_plugin::metrics::{Family, HistogramSeries, Registry};

/// `coredns_kubernetes_dns_programming_duration_seconds`.
pub(super) const PROGRAMMING: &str = "coredns_kubernetes_dns_programming_duration_seconds";

/// CoreDNS's buckets: `prometheus.ExponentialBuckets(0.001, 2, 20)`.
static BUCKETS: [f64; 20] = [
    0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096,
    8.192, 16.384, 32.768, 65.536, 131.072, 262.144, 524.288,
];

/// Index hooks that observe the DNS programming latency.
pub(super) struct MetricsHooks {
    programming: Arc<Family<HistogramSeries>>,
}

impl MetricsHooks {
    /// Registers (or finds) the families in `registry`.
    pub(super) fn new(registry: &Registry) -> MetricsHooks {
        let programming = registry.get_or_register(PROGRAMMING, || {
            Family::histogram(
                PROGRAMMING,
                "Histogram of the time (in seconds) it took to program a dns instance.",
                &["service_kind"],
                &BUCKETS,
            )
        });
        MetricsHooks { programming }
    }
}

impl IndexHooks for MetricsHooks {
    fn dns_programming(&self, kind: ProgrammingKind, latency: Duration) {
        // Series appear on first observation, as with a Prometheus vector.
        self.programming
            .histogram_with(&[kind.as_str()])
            .observe(latency.as_secs_f64());
    }
}
