//! Helpers of the template and dns64 differential tests: both servers on
//! one Corefile, queries over UDP and TCP, setup errors side by side,
//! metric lines with the listeners' ports taken out.
#![allow(dead_code)]

use std::path::Path;

use clusterdns_test_support::{Differential, Query, RunningServer, ServerSpec};

pub fn clusterdns() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_clusterdns"))
}

/// Both servers on `corefile` with `vars` substituted.
pub fn differential(coredns: &Path, corefile: &str, vars: &[(&str, &str)]) -> Differential {
    let mut r = ServerSpec::coredns_at(coredns, corefile);
    let mut c = ServerSpec::clusterdns_at(clusterdns(), corefile);
    for (k, v) in vars {
        r = r.var(k, v);
        c = c.var(k, v);
    }
    Differential::between(None, r, c).expect("start both")
}

/// Every query over UDP and TCP to both; the disagreements.
pub fn disagreements(diff: &Differential, queries: &[Query]) -> Vec<String> {
    let mut out = Vec::new();
    for q in queries {
        for c in diff.query_udp_and_tcp(q) {
            if !c.agree() {
                out.push(c.to_string());
            }
        }
    }
    out
}

/// Both agree on every query over UDP and TCP, and `probe`'s answer holds
/// `want`: compared, not merely silent (the zones are really served).
pub fn assert_agree_and_served(diff: &Differential, queries: &[Query], probe: &Query, want: &str) {
    let d = disagreements(diff, queries);
    assert!(d.is_empty(), "{} disagreements:\n{}", d.len(), d.join("\n"));
    let c = diff.query(probe);
    assert!(c.to_string().contains(want), "{c}");
}

/// The reference as an upstream on `corefile`, and its port.
pub fn upstream(coredns: &Path, corefile: &str) -> (RunningServer, String) {
    let up = RunningServer::start(&ServerSpec::coredns_at(coredns, corefile).named("upstream"))
        .expect("upstream");
    let port = up.addr.port().to_string();
    (up, port)
}

/// The lines of `s`'s /metrics (at `@PORT_METRICS@`) starting with
/// `prefix`, its DNS port written as `PORT`, sorted.
pub fn metric_lines(s: &RunningServer, prefix: &str) -> Vec<String> {
    let port = s.port("PORT_METRICS").expect("a metrics port");
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let r = clusterdns_test_support::http_request(addr, "GET", "/metrics", &[]);
    let dns = format!(":{}\"", s.addr.port());
    let mut v: Vec<String> = String::from_utf8_lossy(&r.body)
        .lines()
        .filter(|l| l.starts_with(prefix))
        .map(|l| l.replace(&dns, ":PORT\""))
        .collect();
    v.sort();
    v
}

/// Asserts both servers' /metrics lines of each family are the same
/// (and that the reference has some); `what` prefixes the failure.
#[track_caller]
pub fn assert_metrics_agree(diff: &Differential, families: &[&str], what: &str) {
    for family in families {
        let (theirs, ours) = (
            metric_lines(&diff.reference, family),
            metric_lines(&diff.candidate, family),
        );
        assert!(!theirs.is_empty(), "{what}{family} missing from CoreDNS");
        assert_eq!(ours, theirs, "{what}{family}");
    }
}

/// A fresh directory holding `files` (name, text): the zone files a
/// Corefile names under `@ZDIR@`.
pub fn zone_dir(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).expect("write zone");
    }
    dir
}

/// [`assert_setup_errors_agree`] against the reference CoreDNS; skips
/// without it (fails with `CLUSTERDNS_REQUIRE_RIG=1`).
#[track_caller]
pub fn setup_errors_read_as_coredns(cases: &[&str]) {
    if let Some(coredns) = clusterdns_test_support::reference_coredns() {
        assert_setup_errors_agree(&coredns, cases);
    }
}

/// Asserts that each Corefile (`@P@` a free port) is refused by the
/// reference CoreDNS and by clusterdns with the same text, or started by
/// both ([`clusterdns_test_support::setup_errors_differ`]).
#[track_caller]
pub fn assert_setup_errors_agree(coredns: &Path, cases: &[&str]) {
    clusterdns_test_support::assert_setup_errors_agree(coredns, clusterdns(), cases);
}
