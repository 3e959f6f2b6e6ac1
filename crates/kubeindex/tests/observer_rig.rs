//! The request observer (CoreDNS's `coredns_kubernetes_rest_client_*` metrics) against the
//! shared rig's real kube-apiserver, on the LIST + WATCH path (streaming lists off): every
//! LIST is reported to the rate limiter and latency hooks and every request, watches
//! included, to the result hook, with the API server's `host:port`, as client-go reports
//! them. The layer's timing is checked with a paused clock in `crates/kubeclient/src/ratelimit.rs`.
//!
//! Skipped with a message when the rig is not running, unless `CLUSTERDNS_REQUIRE_RIG=1`.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use clusterdns_kubeindex::{ClientLimits, ClientSource, RateLimit, RequestObserver};
use clusterdns_test_support::Rig;

/// One observation.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Rate(String, String, Duration),
    Result(String, String, Option<u16>),
    Latency(String, String, Duration),
}

#[derive(Default)]
struct Log(Mutex<Vec<Seen>>);

impl Log {
    fn seen(&self) -> Vec<Seen> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
    fn push(&self, s: Seen) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(s);
    }
}

impl RequestObserver for Log {
    fn rate_limited(&self, verb: &str, host: &str, wait: Duration) {
        let s = Seen::Rate(verb.into(), host.into(), wait);
        self.push(s);
    }
    fn result(&self, verb: &str, host: &str, code: Option<u16>) {
        let s = Seen::Result(verb.into(), host.into(), code);
        self.push(s);
    }
    fn latency(&self, verb: &str, host: &str, took: Duration) {
        let s = Seen::Latency(verb.into(), host.into(), took);
        self.push(s);
    }
}

/// `host:port` of the `server:` URL in a kubeconfig.
fn server_host(kubeconfig: &str) -> String {
    let line = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("server:"))
        .expect("a server: line");
    let url = line.trim().trim_matches('"');
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_and_watches_are_reported_like_client_go() {
    let Some(rig) = Rig::get() else { return };
    let kubeconfig = rig.kubeconfig();
    let host = server_host(&std::fs::read_to_string(&kubeconfig).expect("kubeconfig"));
    let source = ClientSource::Kubeconfig {
        path: kubeconfig,
        context: None,
    };
    // Burst 1 at 4 QPS: the second and third LIST wait about 250 ms and 500 ms.
    let limits = ClientLimits {
        rate: Some(RateLimit { qps: 4.0, burst: 1 }),
        max_inflight: None,
    };
    let log = Arc::new(Log::default());
    let client = source
        .client_observed(&limits, Some(log.clone()))
        .await
        .expect("client");
    let tag = format!("observer-rig-{}", std::process::id());
    let watch = common::synced_watch(client, &tag, "the watch").await;
    // The three watches start right after their LISTs.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while log
        .seen()
        .iter()
        .filter(|s| matches!(s, Seen::Result(..)))
        .count()
        < 6
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(watch);
    let seen = log.seen();

    let mut waits: Vec<Duration> = seen
        .iter()
        .filter_map(|s| match s {
            Seen::Rate(v, h, d) if v == "GET" && *h == host => Some(*d),
            _ => None,
        })
        .collect();
    waits.sort();
    assert_eq!(waits.len(), 3, "one rate-limiter wait per LIST: {seen:#?}");
    assert!(waits[0] < Duration::from_millis(50), "{waits:?}");
    assert!(
        waits[1] >= Duration::from_millis(200) && waits[2] >= Duration::from_millis(450),
        "throttled LISTs wait: {waits:?}"
    );

    let latencies: Vec<Duration> = seen
        .iter()
        .filter_map(|s| match s {
            Seen::Latency(v, h, d) if v == "GET" && *h == host => Some(*d),
            _ => None,
        })
        .collect();
    assert_eq!(latencies.len(), 3, "one latency per LIST: {seen:#?}");
    // The latency includes the rate-limit wait.
    assert!(
        latencies
            .iter()
            .filter(|d| **d >= Duration::from_millis(450))
            .count()
            >= 1,
        "{latencies:?}"
    );

    let results: Vec<&Seen> = seen
        .iter()
        .filter(|s| matches!(s, Seen::Result(..)))
        .collect();
    assert_eq!(results.len(), 6, "3 LISTs and 3 WATCHes: {seen:#?}");
    assert!(
        results
            .iter()
            .all(|s| **s == Seen::Result("GET".into(), host.clone(), Some(200))),
        "{results:#?}"
    );
}
