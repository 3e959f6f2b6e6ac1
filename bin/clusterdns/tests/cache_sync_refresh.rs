//! The cache asks the plugins behind it again for an expired entry on the
//! receiving thread when they answer without I/O (its last-known-good path
//! without a task: kubernetes' and template's answers, the search-path
//! NXDOMAINs autopath walks every 5 s). Against the reference CoreDNS,
//! which has no last-known-good: the fresh answers, exact TTLs, and the
//! cache's counters. Skips when the reference binary is not built
//! (`scripts/rig build`), unless `CLUSTERDNS_REQUIRE_RIG=1`.

mod common;

use std::time::Duration;

use clusterdns_test_support::{Query, compare_metrics, coredns_or_skip};

/// `cache 1` in front of templates answering with TTL 5 (a name) and
/// NXDOMAIN with an SOA of TTL 5 (a missing one): entries live 1 s.
const COREFILE: &str = "\
.:@PORT@ {
    bind 127.0.0.1
    prometheus 127.0.0.1:@PORT_METRICS@
    cache 1
    template IN A there.test {
        match ^there[.]test[.]$
        answer \"{{ .Name }} 5 IN A 10.9.9.9\"
        fallthrough
    }
    template IN A test {
        rcode NXDOMAIN
        authority \"test. 5 IN SOA ns.test. hostmaster.test. 1 2 3 4 5\"
    }
}
";

#[test]
fn expired_entries_are_answered_fresh_by_the_plugins_behind() {
    let coredns = coredns_or_skip!();
    let diff = common::differential(&coredns, COREFILE);
    let queries = [
        Query::new("there.test", "A"),
        Query::new("missing.test", "A"),
    ];
    // Stored, then expired (1 s) three times over: each time a fresh answer
    // with the cache's TTL, never the stale entry (last-known-good's TTL
    // 30) and never a failure.
    for round in 0..4 {
        for q in &queries {
            let c = diff.query(q);
            assert!(c.agree(), "round {round}: {c}");
            let text = c.to_string();
            assert!(
                !text.contains("\t30\t"),
                "round {round}: stale answer: {text}"
            );
        }
        std::thread::sleep(Duration::from_millis(1300));
    }
    let d = compare_metrics(
        &diff.reference.scrape("PORT_METRICS"),
        diff.reference.addr.port(),
        &diff.candidate.scrape("PORT_METRICS"),
        diff.candidate.addr.port(),
        &[
            "coredns_cache_requests_total",
            "coredns_cache_misses_total",
            "coredns_cache_hits_total",
        ],
    );
    assert!(d.is_empty(), "{}", d.join("\n"));
}
