//! `apiserver_qps`/`apiserver_burst` against a real kube-apiserver: the requests the watch
//! makes, as the API server logged them (`RIG_APISERVER_V=3`: one klog `httplog` line per
//! request, with its latency, so its arrival time is known).
//!
//! With streaming lists off (the LIST + WATCH path, what clusterdns falls back to when the
//! API server refuses `sendInitialEvents`), each kind's LIST takes a token: at 1 QPS with a
//! burst of 1, three LISTs arrive about a second apart; without limits, at once. Watch
//! requests are not throttled (as in client-go), which the binary's test
//! (`bin/clusterdns/tests/k8s_ratelimit.rs`) checks next to CoreDNS.
//!
//! Runs on a private rig (the shared rig's binaries, free ports), taken down at the end;
//! skipped with a message when the binaries are missing, unless `CLUSTERDNS_REQUIRE_RIG=1`.

mod common;

use std::time::Duration;

use clusterdns_kubeindex::{ClientLimits, ClientSource, RateLimit};
use clusterdns_test_support::{ApiRequest, PrivateRig};

/// The LIST requests of the run tagged `tag` (its label selector), in arrival order; waits
/// up to 10 s for `n` of them to be logged.
async fn lists(rig: &PrivateRig, tag: &str, n: usize) -> Vec<ApiRequest> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut found: Vec<ApiRequest> = rig
            .apiserver_requests()
            .into_iter()
            .filter(|r| r.verb == "LIST" && r.uri.contains(&format!("labelSelector={tag}")))
            .collect();
        if found.len() >= n || tokio::time::Instant::now() >= deadline {
            found.sort_by_key(|r| r.received);
            return found;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Lists Services, EndpointSlices and Namespaces with `limits`, tagged with a label
/// selector, until synced; returns the gaps between the LISTs' arrivals.
async fn list_gaps(rig: &PrivateRig, limits: &ClientLimits, tag: &str) -> Vec<Duration> {
    let source = ClientSource::Kubeconfig {
        path: rig.rig().kubeconfig(),
        context: None,
    };
    let client = source.client_with(limits).await.expect("client");
    let watch = common::synced_watch(client, tag, tag).await;
    drop(watch);
    let found = lists(rig, tag, 3).await;
    let uris: Vec<&str> = found.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(
        found.len(),
        3,
        "{tag}: one LIST per kind expected: {uris:?}"
    );
    found
        .windows(2)
        .map(|w| w[1].received.saturating_sub(w[0].received))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_obey_qps_and_burst_on_a_real_apiserver() {
    let Some(rig) = PrivateRig::start(&[("RIG_KCM", "0"), ("RIG_APISERVER_V", "3")]) else {
        return;
    };
    let unlimited = list_gaps(&rig, &ClientLimits::NONE, "rl-unlimited").await;
    assert!(
        unlimited.iter().all(|g| *g < Duration::from_millis(500)),
        "without limits the LISTs go at once: {unlimited:?}"
    );
    let limited = ClientLimits {
        rate: Some(RateLimit { qps: 1.0, burst: 1 }),
        max_inflight: None,
    };
    let gaps = list_gaps(&rig, &limited, "rl-limited").await;
    // One token a second: the second and third LIST wait a second each (the log's clock
    // and the latency subtraction leave a few ms of jitter).
    assert!(
        gaps.iter()
            .all(|g| *g >= Duration::from_millis(900) && *g < Duration::from_millis(1500)),
        "at 1 QPS, burst 1, the LISTs arrive a second apart: {gaps:?}"
    );
    // The default CoreDNS gets without the options (5 QPS, burst 10) does not delay three.
    let gaps = list_gaps(&rig, &ClientLimits::coredns(0.0, 0, 0), "rl-default").await;
    assert!(
        gaps.iter().all(|g| *g < Duration::from_millis(500)),
        "5 QPS, burst 10: three LISTs at once: {gaps:?}"
    );
}
