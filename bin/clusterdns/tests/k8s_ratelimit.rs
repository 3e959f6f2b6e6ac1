//! `apiserver_qps`, `apiserver_burst`, `apiserver_max_inflight` through the binary.
//!
//! CoreDNS hands them to client-go: QPS/burst become a token bucket on every request
//! *except watches* (client-go's `Request.Watch` skips the rate limiter), and CoreDNS 1.14
//! lists with streaming lists, which are watches. So at start-up neither server's requests
//! are spaced, whatever the options say; the test checks exactly that on a real API server,
//! for the reference CoreDNS and for clusterdns side by side, from the API server's own
//! request log (`RIG_APISERVER_V=3`). The spacing of throttled LISTs is checked against a
//! real API server in `crates/kubeindex/tests/ratelimit_rig.rs`.
//!
//! Skipped with a message when the rig's binaries are missing, unless
//! `CLUSTERDNS_REQUIRE_RIG=1`.

mod common;

use std::time::Duration;

use clusterdns_test_support::{Differential, PrivateRig, ServerSpec};

#[test]
fn options_are_validated_like_coredns() {
    let bad = [
        ("apiserver_qps abc", "invalid apiserver_qps \"abc\""),
        ("apiserver_qps -1", "non-negative"),
        ("apiserver_qps 1e39", "value out of range"),
        ("apiserver_qps", "Wrong argument count"),
        ("apiserver_burst 1.5", "invalid apiserver_burst \"1.5\""),
        ("apiserver_burst -3", "non-negative"),
        (
            "apiserver_max_inflight x",
            "invalid apiserver_max_inflight \"x\"",
        ),
        ("apiserver_max_inflight -1", "non-negative"),
        ("apiserver_max_inflight 1 2", "Wrong argument count"),
    ];
    for (option, want) in bad {
        let corefile = format!(
            ".:{{PORT}} {{\n    kubernetes cluster.local {{\n        {option}\n    }}\n}}\n"
        );
        let out = common::config_error(&corefile);
        assert!(out.contains(want), "{option}: want {want:?} in {out}");
        assert!(
            out.contains("Corefile:3"),
            "{option}: no file:line in {out}"
        );
    }
}

/// One server's Corefile: QPS 1, burst 1, and a label selector `tag` that marks its
/// Service, EndpointSlice and Pod watches in the API server's log.
fn corefile(tag: &str) -> String {
    format!(
        "
.:@PORT@ {{
    bind 127.0.0.1
    ready 127.0.0.1:@PORT_READY@
    kubernetes cluster.local {{
        kubeconfig @KUBECONFIG@
        pods verified
        labels {tag}
        apiserver_qps 1
        apiserver_burst 1
        apiserver_max_inflight 2
    }}
}}
"
    )
}

#[test]
fn startup_watches_are_not_throttled_as_in_coredns() {
    let Some(rig) = PrivateRig::start(&[("RIG_KCM", "0"), ("RIG_APISERVER_V", "3")]) else {
        return;
    };
    let servers = Differential::between(
        Some(rig.rig()),
        ServerSpec::coredns(rig.rig(), &corefile("rl-coredns")),
        ServerSpec::clusterdns_at(common::binary(), &corefile("rl-clusterdns")),
    )
    .expect("both servers start and sync (ready) with apiserver_qps 1, burst 1");
    // A watch is logged when it ends: stop both servers.
    drop(servers);
    for tag in ["rl-coredns", "rl-clusterdns"] {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let watches = loop {
            let w: Vec<_> = rig
                .apiserver_requests()
                .into_iter()
                .filter(|r| r.uri.contains(&format!("labelSelector={tag}")))
                .collect();
            if w.len() >= 3 || std::time::Instant::now() >= deadline {
                break w;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let seen: Vec<String> = watches
            .iter()
            .map(|r| format!("{} {} at {:?}", r.verb, r.uri, r.received))
            .collect();
        // Services, EndpointSlices, Pods: one streaming list (a watch) each, nothing else.
        assert_eq!(watches.len(), 3, "{tag}: {seen:#?}");
        assert!(
            watches.iter().all(|r| r.verb == "WATCH"),
            "{tag}: {seen:#?}"
        );
        let first = watches.iter().map(|r| r.received).min().unwrap_or_default();
        let last = watches.iter().map(|r| r.received).max().unwrap_or_default();
        // Throttled at 1 QPS, burst 1, they would be two seconds apart.
        assert!(
            last - first < Duration::from_millis(500),
            "{tag}: watches are not rate limited: {seen:#?}"
        );
    }
}
