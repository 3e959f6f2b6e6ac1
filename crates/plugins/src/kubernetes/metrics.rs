//! `coredns_kubernetes_*` metrics, fed by the index's hooks and by the API client's
//! request observer.

use std::sync::Arc;
use std::time::Duration;

use clusterdns_contract::metrics::{Counter, Family, HistogramSeries, Registry};
use clusterdns_kubeindex::{IndexHooks, Kind, ProgrammingKind, RequestObserver};

/// `coredns_kubernetes_dns_programming_duration_seconds`.
pub(super) const PROGRAMMING: &str = "coredns_kubernetes_dns_programming_duration_seconds";

/// CoreDNS's buckets: `prometheus.ExponentialBuckets(0.001, 2, 20)`.
static BUCKETS: [f64; 20] = [
    0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096,
    8.192, 16.384, 32.768, 65.536, 131.072, 262.144, 524.288,
];

/// Index hooks that observe the DNS programming latency, and log each failed watch.
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
    /// As CoreDNS's client-go reflector does, once per attempt (the watcher backs off up to
    /// 30 s): without this line a refused list or watch (a ClusterRole without a verb the
    /// plugin needs) would only show as `/ready` never turning 200.
    fn watch_error(&self, kind: Kind, error: &str) {
        let kind = match kind {
            Kind::Service => "*v1.Service",
            Kind::EndpointSlice => "*v1.EndpointSlice",
            Kind::Pod => "*v1.Pod",
            Kind::Namespace => "*v1.Namespace",
            Kind::Node => "*v1.Node",
        };
        clusterdns_contract::error!(super::NAME, "Failed to watch {kind}: {error}");
    }

    fn dns_programming(&self, kind: ProgrammingKind, latency: Duration) {
        // Series appear on first observation, as with a Prometheus vector.
        self.programming
            .histogram_with(&[kind.as_str()])
            .observe(latency.as_secs_f64());
    }
}

/// `coredns_kubernetes_rest_client_request_duration_seconds`.
pub(super) const REQUEST_DURATION: &str = "coredns_kubernetes_rest_client_request_duration_seconds";
/// `coredns_kubernetes_rest_client_rate_limiter_duration_seconds`.
pub(super) const RATE_LIMITER_DURATION: &str =
    "coredns_kubernetes_rest_client_rate_limiter_duration_seconds";
/// `coredns_kubernetes_rest_client_requests_total`.
pub(super) const REQUESTS: &str = "coredns_kubernetes_rest_client_requests_total";

/// Prometheus' `DefBuckets`, which CoreDNS uses for both client histograms.
static DEF_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The API client's request metrics (CoreDNS's adapters of client-go's `tools/metrics`):
/// the client reports each request here (see [`RequestObserver`]). A request to the API
/// server is rare (a few at start-up and per relist), so series are looked up per report.
pub(super) struct ClientMetrics {
    latency: Arc<Family<HistogramSeries>>,
    rate_limiter: Arc<Family<HistogramSeries>>,
    requests: Arc<Family<Counter>>,
}

impl ClientMetrics {
    /// Registers (or finds) the families in `registry`.
    pub(super) fn new(registry: &Registry) -> ClientMetrics {
        let histogram = |name: &'static str, help: &'static str| {
            registry.get_or_register(name, || {
                Family::histogram(name, help, &["verb", "host"], &DEF_BUCKETS)
            })
        };
        ClientMetrics {
            latency: histogram(
                REQUEST_DURATION,
                "Request latency in seconds. Broken down by verb and host.",
            ),
            rate_limiter: histogram(
                RATE_LIMITER_DURATION,
                "Client side rate limiter latency in seconds. Broken down by verb and host.",
            ),
            requests: registry.get_or_register(REQUESTS, || {
                Family::new(
                    REQUESTS,
                    "Number of HTTP requests, partitioned by status code, method, and host.",
                    &["code", "method", "host"],
                )
            }),
        }
    }
}

impl RequestObserver for ClientMetrics {
    fn rate_limited(&self, verb: &str, host: &str, wait: Duration) {
        self.rate_limiter
            .histogram_with(&[verb, host])
            .observe(wait.as_secs_f64());
    }

    fn result(&self, verb: &str, host: &str, code: Option<u16>) {
        // client-go reports a request without a response as `<error>`.
        let code = code.map_or_else(|| "<error>".to_string(), |c| c.to_string());
        self.requests.with(&[&code, verb, host]).inc();
    }

    fn latency(&self, verb: &str, host: &str, took: Duration) {
        self.latency
            .histogram_with(&[verb, host])
            .observe(took.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines CoreDNS 1.14.7 printed against the rig's API server (bad token: each
    /// streaming list and each fallback LIST answered 401; closed port: `<error>`).
    #[test]
    fn client_metrics_render_as_coredns() {
        let registry = Registry::new();
        let m = ClientMetrics::new(&registry);
        // Registered but unused: not shown, as a Prometheus vector without series.
        assert!(!registry.render().contains("rest_client"));
        let host = "127.0.0.1:16443";
        for _ in 0..2 {
            m.result("GET", host, Some(401));
        }
        m.result("GET", "127.0.0.1:16999", None);
        m.rate_limited("GET", host, Duration::from_micros(2));
        m.latency("GET", host, Duration::from_millis(7));
        // A second registration (a reload) shares the series.
        ClientMetrics::new(&registry).result("GET", host, Some(401));
        let text = registry.render();
        for line in [
            "# HELP coredns_kubernetes_rest_client_rate_limiter_duration_seconds Client side rate limiter latency in seconds. Broken down by verb and host.",
            "# TYPE coredns_kubernetes_rest_client_rate_limiter_duration_seconds histogram",
            "coredns_kubernetes_rest_client_rate_limiter_duration_seconds_bucket{host=\"127.0.0.1:16443\",verb=\"GET\",le=\"0.005\"} 1",
            "coredns_kubernetes_rest_client_rate_limiter_duration_seconds_count{host=\"127.0.0.1:16443\",verb=\"GET\"} 1",
            "# HELP coredns_kubernetes_rest_client_request_duration_seconds Request latency in seconds. Broken down by verb and host.",
            "# TYPE coredns_kubernetes_rest_client_request_duration_seconds histogram",
            "coredns_kubernetes_rest_client_request_duration_seconds_bucket{host=\"127.0.0.1:16443\",verb=\"GET\",le=\"0.005\"} 0",
            "coredns_kubernetes_rest_client_request_duration_seconds_bucket{host=\"127.0.0.1:16443\",verb=\"GET\",le=\"0.01\"} 1",
            "coredns_kubernetes_rest_client_request_duration_seconds_bucket{host=\"127.0.0.1:16443\",verb=\"GET\",le=\"10\"} 1",
            "coredns_kubernetes_rest_client_request_duration_seconds_bucket{host=\"127.0.0.1:16443\",verb=\"GET\",le=\"+Inf\"} 1",
            "# HELP coredns_kubernetes_rest_client_requests_total Number of HTTP requests, partitioned by status code, method, and host.",
            "# TYPE coredns_kubernetes_rest_client_requests_total counter",
            "coredns_kubernetes_rest_client_requests_total{code=\"401\",host=\"127.0.0.1:16443\",method=\"GET\"} 3",
            "coredns_kubernetes_rest_client_requests_total{code=\"<error>\",host=\"127.0.0.1:16999\",method=\"GET\"} 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        // Prometheus' DefBuckets: 11 bounds and +Inf per histogram series.
        let buckets = text
            .lines()
            .filter(|l| {
                l.starts_with("coredns_kubernetes_rest_client_request_duration_seconds_bucket")
            })
            .count();
        assert_eq!(buckets, 12, "{text}");
    }
}
