//! The API client's metrics (`coredns_kubernetes_rest_client_*`) through the binary, next
//! to the reference CoreDNS on the same Corefile and the same API server, compared line for
//! line.
//!
//! What CoreDNS 1.14.7 prints (seen against the rig): after a normal start-up, only the
//! request counter, one `GET` per watched kind (its initial lists are streaming lists, i.e.
//! watches, which client-go neither rate limits nor times):
//!
//! ```text
//! # HELP coredns_kubernetes_rest_client_requests_total Number of HTTP requests, partitioned by status code, method, and host.
//! # TYPE coredns_kubernetes_rest_client_requests_total counter
//! coredns_kubernetes_rest_client_requests_total{code="200",host="127.0.0.1:16443",method="GET"} 4
//! ```
//!
//! and against a closed port, only `code="<error>"` with the port it tried. The histograms
//! (LIST path) are checked against a real API server in `crates/kubeindex/tests/observer_rig.rs`.
//!
//! Skipped with a message when the rig is not running, unless `CLUSTERDNS_REQUIRE_RIG=1`.

mod common;
mod ops;

use std::time::{Duration, Instant};

use clusterdns_test_support::{Differential, Rig, RunningServer, ServerSpec, free_port};

/// The Corefile template; with `ready`, a server counts as started once synced.
fn corefile(ready: bool) -> String {
    let ready = if ready {
        "ready 127.0.0.1:@PORT_READY@"
    } else {
        ""
    };
    format!(
        "
.:@PORT@ {{
    bind 127.0.0.1
    {ready}
    prometheus 127.0.0.1:@PORT_METRICS@
    kubernetes cluster.local {{
        kubeconfig @KCFG@
        pods verified
    }}
}}
"
    )
}

/// The `coredns_kubernetes_rest_client_*` lines of a server's /metrics.
fn client_lines(server: &RunningServer) -> Vec<String> {
    let port = server.ports["PORT_METRICS"];
    let (code, text) = ops::get_ok(port, "/metrics");
    assert_eq!(code, 200, "{}: /metrics", server.name);
    text.lines()
        .filter(|l| l.contains("coredns_kubernetes_rest_client"))
        .map(str::to_string)
        .collect()
}

/// The `server:` URL's `host:port` in a kubeconfig.
fn server_host(kubeconfig: &str) -> String {
    let url = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("server:"))
        .expect("a server: line")
        .trim()
        .trim_matches('"');
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest).to_string()
}

/// Both servers on the same Corefile and kubeconfig.
fn both(rig: &Rig, kubeconfig: &str, ready: bool) -> Differential {
    let corefile = corefile(ready);
    Differential::between(
        Some(rig),
        ServerSpec::coredns(rig, &corefile).var("KCFG", kubeconfig),
        ServerSpec::clusterdns_at(common::binary(), &corefile).var("KCFG", kubeconfig),
    )
    .expect("both servers start (and sync when `ready`)")
}

#[test]
fn after_sync_only_the_watches_are_counted_as_in_coredns() {
    let Some(rig) = Rig::get() else { return };
    let kubeconfig = rig.kubeconfig();
    let host = server_host(&std::fs::read_to_string(&kubeconfig).expect("kubeconfig"));
    let kc = kubeconfig.display().to_string();
    let servers = both(&rig, &kc, true);
    let want = [
        "# HELP coredns_kubernetes_rest_client_requests_total Number of HTTP requests, partitioned by status code, method, and host.".to_string(),
        "# TYPE coredns_kubernetes_rest_client_requests_total counter".to_string(),
        // Services, EndpointSlices, Pods, Namespaces: one streaming list each.
        format!("coredns_kubernetes_rest_client_requests_total{{code=\"200\",host=\"{host}\",method=\"GET\"}} 4"),
    ];
    assert_eq!(client_lines(&servers.reference), want, "reference CoreDNS");
    assert_eq!(client_lines(&servers.candidate), want, "clusterdns");
}

/// Drops the sample value: the number of retries depends on timing.
fn shape(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .map(|l| match l.rsplit_once(' ') {
            Some((series, _)) if !l.starts_with('#') => series.to_string(),
            _ => l.clone(),
        })
        .collect()
}

#[test]
fn unreachable_api_server_is_counted_as_error_as_in_coredns() {
    let Some(rig) = Rig::get() else { return };
    let dir = clusterdns_test_support::ScratchDir::new("k8s-metrics").expect("scratch dir");
    let real = std::fs::read_to_string(rig.kubeconfig()).expect("kubeconfig");
    let live = server_host(&real);
    // A port nothing listens on (bound and let go).
    let closed = format!("127.0.0.1:{}", free_port().expect("free port"));
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, real.replace(&live, &closed)).expect("write kubeconfig");
    let kc = kubeconfig.display().to_string();
    // Never synced: each starts serving after its 5 s startup timeout.
    let servers = both(&rig, &kc, false);
    let want = [
        "# HELP coredns_kubernetes_rest_client_requests_total Number of HTTP requests, partitioned by status code, method, and host.".to_string(),
        "# TYPE coredns_kubernetes_rest_client_requests_total counter".to_string(),
        format!("coredns_kubernetes_rest_client_requests_total{{code=\"<error>\",host=\"{closed}\",method=\"GET\"}}"),
    ];
    for server in [&servers.reference, &servers.candidate] {
        let deadline = Instant::now() + Duration::from_secs(10);
        let lines = loop {
            let lines = client_lines(server);
            if shape(&lines) == want || Instant::now() > deadline {
                break lines;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        assert_eq!(shape(&lines), want, "{}: {lines:#?}", server.name);
        let count: f64 = lines[2]
            .rsplit_once(' ')
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0.0);
        assert!(count >= 1.0, "{}: {lines:#?}", server.name);
    }
}
