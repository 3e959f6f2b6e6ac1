//! What several plugins share, as CoreDNS keeps it in `plugin/pkg`: a
//! plugin that needs a piece another plugin also uses finds it here, never
//! in the other plugin's folder (bin/clusterdns/tests/architecture.rs
//! rejects such an import).

use std::sync::Arc;

use clusterdns_contract::metrics::{Counter, Family, HistogramSeries, Registry};

/// `plugin.SlimTimeBuckets`: 0.25ms × 10^k, five buckets.
const SLIM_TIME_BUCKETS: &[f64] = &[0.00025, 0.0025, 0.025, 0.25, 2.5];

pub(crate) mod every;
pub(crate) mod ifaces;
pub(crate) mod nets;
pub(crate) mod upstream;

/// The machine's host name, as Go's `os.Hostname` finds it on Linux
/// (*chaos*' `hostname.bind`, *nsid*'s default).
pub(crate) fn hostname() -> String {
    let from_proc = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    from_proc
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "localhost".to_string())
}

/// Registers `coredns_health_request_duration_seconds` and
/// `coredns_health_request_failures_total` (CoreDNS always exposes both).
pub(crate) fn health_metrics(r: &Registry) -> (Arc<HistogramSeries>, Arc<Counter>) {
    let d = r
        .get_or_register("coredns_health_request_duration_seconds", || {
            Family::histogram(
                "coredns_health_request_duration_seconds",
                "Histogram of the time (in seconds) each request took.",
                &[],
                SLIM_TIME_BUCKETS,
            )
        })
        .histogram_with(&[]);
    let f = r
        .get_or_register("coredns_health_request_failures_total", || {
            Family::<Counter>::new(
                "coredns_health_request_failures_total",
                "The number of times the health check failed.",
                &[],
            )
        })
        .with(&[]);
    f.add(0);
    (d, f)
}
