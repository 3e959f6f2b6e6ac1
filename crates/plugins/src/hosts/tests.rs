//! Unit tests of *hosts*: setup table, answers, reload.

use std::sync::Arc;
use std::time::Duration;

use clusterdns_contract::testing;
use clusterdns_contract::{Plugin, Proto};
use clusterdns_wire::{Rcode, Rtype};

use super::DEF;
use crate::testutil::{SetupResult, run, run_raw, setup, setup_err, setup_in};
use crate::whoami::Whoami;

/// The handlers of `corefile` followed by *whoami*, so a query that falls
/// through gets whoami's reply (NOERROR, empty answer, AA, 2 additional).
fn with_next(r: &SetupResult) -> Vec<Arc<dyn Plugin>> {
    let mut v = r.plugins.clone();
    v.push(Arc::new(Whoami));
    v
}

fn fell_through(reply: &testing::Reply) -> bool {
    reply.rcode == Rcode::NOERROR && reply.answer.is_empty() && reply.additional.len() == 2
}

fn start(r: &mut SetupResult) {
    for h in std::mem::take(&mut r.shared.on_startup) {
        h().expect("startup hook");
    }
}

const INLINE: &str = "example.org {
    hosts {
        10.0.0.1 Example.ORG www.example.org
        10.0.0.2 example.org
        ::1 example.org v6only.example.org
        192.168.1.10 *.wild.example.org
        10.9.9.9 outside.net
    }
}";

#[test]
fn setup_table() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hosts.txt"), "10.0.0.1 a.example.org\n").unwrap();
    let ok = [
        ". {\n hosts\n}",
        ". {\n hosts hosts.txt\n}",
        ". {\n hosts hosts.txt example.org example.net\n}",
        ". {\n hosts missing.txt\n}",
        ". {\n hosts {\n  ttl 60\n  reload 0\n  no_reverse\n }\n}",
        ". {\n hosts {\n  reload 1m30s\n  fallthrough\n  fallthrough_unsupported\n }\n}",
        ". {\n hosts {\n  10.0.0.1 a.org\n  fallthrough in-addr.arpa\n }\n}",
        ". {\n hosts {\n  ttl 65535\n }\n}",
    ];
    for c in ok {
        let r = setup_in(DEF, c, dir.path()).unwrap_or_else(|e| panic!("{c}: {e}"));
        assert_eq!(r.plugins.len(), 1, "{c}");
        assert_eq!(r.shared.on_startup.len(), 1);
        assert_eq!(r.shared.on_shutdown.len(), 1);
    }
    let bad = [
        (
            ". {\n hosts\n hosts\n}",
            "this plugin can only be used once per Server Block",
        ),
        (". {\n hosts {\n  ttl\n }\n}", "ttl needs a time in second"),
        (
            ". {\n hosts {\n  ttl abc\n }\n}",
            "ttl needs a number of second",
        ),
        (". {\n hosts {\n  ttl 0\n }\n}", "ttl provided is invalid"),
        (
            ". {\n hosts {\n  ttl 65536\n }\n}",
            "ttl provided is invalid",
        ),
        (
            ". {\n hosts {\n  reload\n }\n}",
            "reload needs a duration (zero seconds to disable)",
        ),
        (
            ". {\n hosts {\n  reload 1s 2s\n }\n}",
            "reload needs a duration",
        ),
        (
            ". {\n hosts {\n  reload abc\n }\n}",
            "invalid duration for reload 'abc'",
        ),
        (
            ". {\n hosts {\n  reload -1s\n }\n}",
            "invalid negative duration for reload '-1s'",
        ),
        (
            ". {\n hosts {\n  fallthrough\n  10.0.0.1 a.org\n }\n}",
            "unknown property '10.0.0.1'",
        ),
        (
            ". {\n hosts {\n  fallthrough_unsupported\n }\n}",
            "fallthrough_unsupported requires fallthrough",
        ),
        (
            ". {\n hosts {\n  fallthrough\n  fallthrough_unsupported x\n }\n}",
            "Wrong argument count",
        ),
    ];
    for (c, want) in bad {
        let e = setup_err(DEF, c);
        assert!(e.contains(want), "{c}: {e}");
    }
}

#[test]
fn a_and_aaaa_case_insensitive_lowercase_owner_aa_ttl() {
    let r = setup(DEF, INLINE).unwrap();
    let reply = run(&r.plugins, &testing::query("EXAMPLE.org.", Rtype::A));
    assert_eq!(reply.rcode, Rcode::NOERROR);
    assert!(reply.header.aa());
    assert_eq!(
        reply.answer,
        vec![
            "example.org.\t3600\tIN\tA\t10.0.0.1".to_string(),
            "example.org.\t3600\tIN\tA\t10.0.0.2".to_string(),
        ]
    );
    let reply = run(&r.plugins, &testing::query("example.org.", Rtype::AAAA));
    assert_eq!(
        reply.answer,
        vec!["example.org.\t3600\tIN\tAAAA\t::1".to_string()]
    );
}

#[test]
fn the_question_keeps_the_clients_case() {
    let r = setup(DEF, INLINE).unwrap();
    let raw = run_raw(
        &r.plugins,
        &testing::query("WwW.Example.Org.", Rtype::A),
        Proto::Udp,
    );
    let m = clusterdns_wire::Message::parse(&raw).unwrap();
    assert_eq!(m.question().unwrap().0.to_string(), "WwW.Example.Org.");
}

#[test]
fn nodata_for_other_types_of_existing_names() {
    let r = setup(DEF, INLINE).unwrap();
    for (name, qtype) in [
        ("v6only.example.org.", Rtype::A),
        ("www.example.org.", Rtype::AAAA),
        ("example.org.", Rtype::MX),
        ("example.org.", Rtype::TXT),
    ] {
        let reply = run(&with_next(&r), &testing::query(name, qtype));
        assert_eq!(reply.rcode, Rcode::NOERROR, "{name} {qtype}");
        assert!(reply.header.aa(), "{name} {qtype}");
        assert!(reply.answer.is_empty(), "{name} {qtype}");
        assert!(reply.additional.is_empty(), "{name} {qtype}: not whoami");
    }
}

#[test]
fn missing_names_are_servfail_without_fallthrough() {
    let r = setup(DEF, INLINE).unwrap();
    let reply = run(
        &with_next(&r),
        &testing::query("nope.example.org.", Rtype::A),
    );
    assert_eq!(reply.rcode, Rcode::SERVFAIL);
    assert!(reply.additional.is_empty());
}

#[test]
fn names_outside_the_zones_go_to_the_next_plugin() {
    let r = setup(DEF, INLINE).unwrap();
    // outside.net is not in the block's zone: dropped at parse time, and
    // a query for it is passed on.
    let reply = run(&with_next(&r), &testing::query("outside.net.", Rtype::A));
    assert!(fell_through(&reply), "{reply:?}");
}

#[test]
fn fallthrough_all_and_by_zone() {
    let c = "example.org example.net {
    hosts {
        10.0.0.1 a.example.org a.example.net
        fallthrough example.net
    }
}";
    let r = setup(DEF, c).unwrap();
    let next = with_next(&r);
    let reply = run(&next, &testing::query("b.example.net.", Rtype::A));
    assert!(fell_through(&reply), "{reply:?}");
    let reply = run(&next, &testing::query("b.example.org.", Rtype::A));
    assert_eq!(reply.rcode, Rcode::SERVFAIL);
    // An existing name is answered even under a fallthrough zone.
    let reply = run(&next, &testing::query("a.example.net.", Rtype::A));
    assert_eq!(reply.answer.len(), 1);
    // Existing name, other type: NODATA, not fallthrough.
    let reply = run(&next, &testing::query("a.example.net.", Rtype::TXT));
    assert!(reply.answer.is_empty() && reply.additional.is_empty() && reply.header.aa());

    let r = setup(DEF, ". {\n hosts {\n  10.0.0.1 a.org\n  fallthrough\n }\n}").unwrap();
    let reply = run(&with_next(&r), &testing::query("b.org.", Rtype::A));
    assert!(fell_through(&reply), "{reply:?}");
}

#[test]
fn fallthrough_unsupported_passes_other_types_of_existing_names() {
    let c = ". {\n hosts {\n  10.0.0.1 a.org\n  fallthrough\n  fallthrough_unsupported\n }\n}";
    let r = setup(DEF, c).unwrap();
    let next = with_next(&r);
    let reply = run(&next, &testing::query("a.org.", Rtype::TXT));
    assert!(fell_through(&reply), "{reply:?}");
    // AAAA is supported: NODATA stays.
    let reply = run(&next, &testing::query("a.org.", Rtype::AAAA));
    assert!(reply.header.aa() && reply.answer.is_empty() && reply.additional.is_empty());
}

#[test]
fn ptr_from_entries_even_outside_the_zones() {
    let r = setup(DEF, INLINE).unwrap();
    let reply = run(
        &r.plugins,
        &testing::query("1.0.0.10.IN-ADDR.ARPA.", Rtype::PTR),
    );
    assert!(reply.header.aa());
    assert_eq!(
        reply.answer,
        vec![
            "1.0.0.10.in-addr.arpa.\t3600\tIN\tPTR\texample.org.".to_string(),
            "1.0.0.10.in-addr.arpa.\t3600\tIN\tPTR\twww.example.org.".to_string(),
        ]
    );
    let v6 = "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.ip6.arpa.";
    let reply = run(&r.plugins, &testing::query(v6, Rtype::PTR));
    assert_eq!(reply.answer.len(), 2, "{reply:?}");
    // Unknown address, wildcard entry, partial name: next plugin.
    for q in [
        "3.0.0.10.in-addr.arpa.",
        "10.1.168.192.in-addr.arpa.",
        "0.10.in-addr.arpa.",
    ] {
        let reply = run(&with_next(&r), &testing::query(q, Rtype::PTR));
        assert!(fell_through(&reply), "{q}: {reply:?}");
    }
}

#[test]
fn no_reverse_and_ttl() {
    let c = "example.org {\n hosts {\n  10.0.0.1 example.org\n  no_reverse\n  ttl 42\n }\n}";
    let r = setup(DEF, c).unwrap();
    let reply = run(
        &with_next(&r),
        &testing::query("1.0.0.10.in-addr.arpa.", Rtype::PTR),
    );
    assert!(fell_through(&reply));
    let reply = run(&r.plugins, &testing::query("example.org.", Rtype::A));
    assert_eq!(
        reply.answer,
        vec!["example.org.\t42\tIN\tA\t10.0.0.1".to_string()]
    );
}

#[test]
fn wildcards_match_one_label_and_exact_names_win() {
    let c = "example.org {
    hosts {
        192.168.1.10 *.example.org
        192.168.1.11 a.example.org
    }
}";
    let r = setup(DEF, c).unwrap();
    let one = |q: &str| run(&with_next(&r), &testing::query(q, Rtype::A));
    assert_eq!(
        one("a.example.org.").answer,
        vec!["a.example.org.\t3600\tIN\tA\t192.168.1.11"]
    );
    assert_eq!(
        one("Apps.example.org.").answer,
        vec!["apps.example.org.\t3600\tIN\tA\t192.168.1.10"]
    );
    assert_eq!(one("deep.apps.example.org.").rcode, Rcode::SERVFAIL);
    assert_eq!(one("example.org.").rcode, Rcode::SERVFAIL);
}

#[test]
fn file_entries_then_inline_entries_and_reload() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hosts");
    std::fs::write(&file, "10.0.0.1 a.example.org # from the file\n").unwrap();
    let c = "example.org {\n hosts hosts {\n  10.0.0.2 a.example.org\n  reload 50ms\n }\n}";
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut r = setup_in(DEF, c, dir.path()).unwrap();
    let q = testing::query("a.example.org.", Rtype::A);
    // Before start-up only the inline entry is known.
    assert_eq!(
        run(&r.plugins, &q).answer,
        vec!["a.example.org.\t3600\tIN\tA\t10.0.0.2"]
    );
    rt.block_on(async { start(&mut r) });
    assert_eq!(
        run(&r.plugins, &q).answer,
        vec![
            "a.example.org.\t3600\tIN\tA\t10.0.0.1",
            "a.example.org.\t3600\tIN\tA\t10.0.0.2"
        ]
    );
    let text = r.shared.metrics.render();
    assert!(
        text.contains("coredns_hosts_entries{hostsfile=\""),
        "{text}"
    );
    assert!(text.contains("/hosts\"} 4"), "{text}");
    // Changing the file (size differs) is picked up by the reload task.
    std::fs::write(&file, "10.0.0.3 a.example.org\n10.0.0.4 b.example.org\n").unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let a = run(&r.plugins, &q).answer;
        if a.first().is_some_and(|l| l.ends_with("10.0.0.3")) {
            assert_eq!(a.len(), 2);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "reload not seen: {a:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // A deleted file keeps the last data (CoreDNS readHosts).
    std::fs::remove_file(&file).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(run(&r.plugins, &q).answer.len(), 2);
    // After shutdown the task stops: a new file is not read any more.
    for h in std::mem::take(&mut r.shared.on_shutdown) {
        h().unwrap();
    }
    std::thread::sleep(Duration::from_millis(100));
    std::fs::write(&file, "10.0.0.5 a.example.org\n").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(run(&r.plugins, &q).answer[0].ends_with("10.0.0.3"));
}
