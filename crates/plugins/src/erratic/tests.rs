use std::sync::Arc;
use std::time::{Duration, Instant};

use clusterdns_contract::{Plugin, Proto, testing};
use clusterdns_wire::{Name, Rcode, Rtype};

use super::{Config, DEF, parse};
use crate::testutil::{directives, run_raw, run_raw_async, setup, setup_err};

fn config(corefile: &str) -> Config {
    let dirs = directives(corefile, "erratic");
    let dirs: Vec<_> = dirs.iter().collect();
    parse(&dirs).unwrap_or_else(|e| panic!("{corefile}: {e}"))
}

fn block(body: &str) -> String {
    format!(". {{\n erratic {{\n{body}\n }}\n}}")
}

const MS100: Duration = Duration::from_millis(100);

#[test]
fn setup_table() {
    // (body of the erratic block, drop, delay, duration, truncate, large)
    let ok: [(&str, u64, u64, Duration, u64, bool); 13] = [
        ("", 2, 0, Duration::ZERO, 0, false),
        ("drop", 2, 0, Duration::ZERO, 0, false),
        ("drop 3", 3, 0, Duration::ZERO, 0, false),
        ("drop 0", 0, 0, Duration::ZERO, 0, false),
        ("delay", 0, 2, MS100, 0, false),
        ("delay 3", 0, 3, MS100, 0, false),
        ("delay 3 50ms", 0, 3, Duration::from_millis(50), 0, false),
        ("delay 3 -5ms", 0, 3, Duration::ZERO, 0, false),
        // `delay 0` delays nothing, so the default drop stays.
        ("delay 0", 2, 0, MS100, 0, false),
        ("truncate", 0, 0, Duration::ZERO, 2, false),
        (
            "truncate 5\n delay 3 5ms",
            0,
            3,
            Duration::from_millis(5),
            5,
            false,
        ),
        // A `drop` without amount does not keep the default drop.
        ("drop\n truncate 2", 0, 0, Duration::ZERO, 2, false),
        ("drop 2\n truncate 2\n large", 2, 0, Duration::ZERO, 2, true),
    ];
    for (body, drop, delay, duration, truncate, large) in ok {
        let want = Config {
            drop,
            delay,
            duration,
            truncate,
            large,
        };
        assert_eq!(config(&block(body)), want, "{body}");
    }
    // Two directives make one configuration, the later lines winning.
    let two = ". {\n erratic {\n  drop 5\n }\n erratic {\n  drop 7\n }\n}";
    assert_eq!(config(two).drop, 7);
    let r = setup(DEF, two).unwrap();
    assert_eq!(r.plugins.len(), 1);

    let bad = [
        (
            "drop 1 2",
            "Wrong argument count or unexpected line ending after '2'",
        ),
        (
            "truncate 1 2",
            "Wrong argument count or unexpected line ending after '2'",
        ),
        (
            "delay 1 2ms 3",
            "Wrong argument count or unexpected line ending after '3'",
        ),
        ("drop x", "strconv.ParseInt: parsing \"x\": invalid syntax"),
        (
            "drop 2147483648",
            "strconv.ParseInt: parsing \"2147483648\": value out of range",
        ),
        ("truncate -1", "illegal amount value given \"-1\""),
        ("delay -2", "illegal amount value given \"-2\""),
        ("delay 2 1d", "time: unknown unit \"d\" in duration \"1d\""),
        ("delay 2 fast", "time: invalid duration \"fast\""),
        ("large 3", "unknown property '3'"),
        ("bogus", "unknown property 'bogus'"),
    ];
    for (body, want) in bad {
        assert_eq!(setup_err(DEF, &block(body)), want, "{body}");
    }
    assert_eq!(
        setup_err(DEF, ". {\n erratic foo\n}"),
        "Wrong argument count or unexpected line ending after 'foo'"
    );
}

/// Sends `n` queries of `qtype` for `name` (synchronous and asynchronous
/// path alike) and returns each reply, empty when the query was dropped.
fn replies(body: &str, name: &str, qtype: Rtype, n: usize) -> Vec<Vec<u8>> {
    let r = setup(DEF, &block(body)).unwrap();
    (0..n)
        .map(|_| run_raw_async(&r.plugins, &testing::query(name, qtype), Proto::Udp))
        .collect()
}

#[test]
fn answers_a_and_aaaa_with_the_test_addresses_keeping_case() {
    let r = setup(DEF, &block("drop 0")).unwrap();
    let a = testing::reply(&run_raw(
        &r.plugins,
        &testing::query("ExAmple.ORG.", Rtype::A),
        Proto::Udp,
    ));
    assert_eq!(a.rcode, Rcode::NOERROR);
    assert!(a.header.aa() && !a.header.tc());
    assert_eq!(a.answer, ["ExAmple.ORG.\t0\tIN\tA\t192.0.2.53"]);
    let aaaa = testing::reply(&run_raw(
        &r.plugins,
        &testing::query("x.example.org.", Rtype::AAAA),
        Proto::Udp,
    ));
    assert_eq!(aaaa.answer, ["x.example.org.\t0\tIN\tAAAA\t2001:db8::53"]);
}

#[test]
fn other_types_are_servfail_without_an_error() {
    let r = setup(DEF, &block("drop 0")).unwrap();
    for t in [Rtype::MX, Rtype::TXT, Rtype::ANY] {
        let reply = testing::reply(&run_raw(
            &r.plugins,
            &testing::query("example.org.", t),
            Proto::Udp,
        ));
        assert_eq!(reply.rcode, Rcode::SERVFAIL, "{t}");
        assert!(reply.answer.is_empty() && !reply.header.aa());
    }
}

#[test]
fn large_repeats_the_a_record_thirty_times() {
    let r = setup(DEF, &block("drop 0\n large")).unwrap();
    let a = testing::reply(&run_raw(
        &r.plugins,
        &testing::query("example.org.", Rtype::A),
        Proto::Tcp,
    ));
    assert_eq!(a.answer.len(), 30);
    let aaaa = testing::reply(&run_raw(
        &r.plugins,
        &testing::query("example.org.", Rtype::AAAA),
        Proto::Tcp,
    ));
    assert_eq!(aaaa.answer.len(), 1);
}

#[test]
fn the_default_drops_every_second_query_starting_with_the_first() {
    let got: Vec<bool> = replies("", "example.org.", Rtype::A, 6)
        .iter()
        .map(|r| r.is_empty())
        .collect();
    assert_eq!(got, [true, false, true, false, true, false]);
    // Plain `erratic`, no block, is the same.
    let r = setup(DEF, ". {\n erratic\n}").unwrap();
    let pkt = testing::query("example.org.", Rtype::A);
    assert!(run_raw(&r.plugins, &pkt, Proto::Udp).is_empty());
    assert!(!run_raw(&r.plugins, &pkt, Proto::Udp).is_empty());
}

#[test]
fn truncation_follows_corednss_bitwise_rule() {
    // truncate 5: the query numbers n with n & 5 == 0 (0, 2, 8, 10).
    let got: Vec<usize> = replies("truncate 5", "example.org.", Rtype::A, 12)
        .iter()
        .enumerate()
        .filter(|(_, r)| testing::reply(r).header.tc())
        .map(|(i, _)| i)
        .collect();
    assert_eq!(got, [0, 2, 8, 10]);
    // A truncated reply keeps its answer.
    let r = replies("truncate 2", "example.org.", Rtype::A, 1);
    let first = testing::reply(&r[0]);
    assert!(first.header.tc());
    assert_eq!(first.answer.len(), 1);
}

#[test]
fn delay_holds_every_nth_reply_and_drop_wins_over_it() {
    let start = Instant::now();
    let r = replies("delay 2 30ms", "example.org.", Rtype::A, 4);
    // Queries 0 and 2 waited.
    assert!(start.elapsed() >= Duration::from_millis(60));
    assert!(r.iter().all(|r| testing::reply(r).answer.len() == 1));
    // Query 0 is dropped and delayed: dropped at once.
    let start = Instant::now();
    let r = replies("drop 2\n delay 2 5s", "example.org.", Rtype::A, 1);
    assert!(r[0].is_empty());
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[test]
fn axfr_sends_the_small_zone_without_the_closing_soa_when_truncated() {
    let r = replies("truncate 2", "Example.org.", Rtype::AXFR, 3);
    let whole = testing::reply(&r[2]);
    let soa = "Example.org.\t0\tIN\tSOA\tsns.dns.icann.org. noc.dns.icann.org. 2018050825 7200 3600 1209600 3600";
    assert!(whole.header.aa() && !whole.header.tc());
    assert_eq!(
        whole.answer,
        [
            soa,
            "Example.org.\t0\tIN\tNS\tb.Example.org.",
            "Example.org.\t0\tIN\tNS\ta.Example.org.",
            "a.Example.org.\t0\tIN\tAAAA\t2001:bd8::53",
            "b.Example.org.\t0\tIN\tAAAA\t2001:500::54",
            soa,
        ]
    );
    let cut = testing::reply(&r[0]);
    assert!(!cut.header.tc());
    assert_eq!(cut.answer[..], whole.answer[..5]);
    // The root has no names to form: nothing is sent.
    assert!(replies("drop 0", ".", Rtype::AXFR, 1)[0].is_empty());
}

#[test]
fn ready_while_it_has_seen_three_or_four_queries() {
    let r = setup(DEF, &block("drop 0")).unwrap();
    let checks = r.shared.readiness.0.lock().clone();
    let [(name, ready)] = checks.as_slice() else {
        panic!("one readiness check")
    };
    assert_eq!(*name, "erratic");
    let pkt = testing::query("example.org.", Rtype::A);
    let mut seen = Vec::new();
    for _ in 0..6 {
        seen.push(ready());
        run_raw(&r.plugins, &pkt, Proto::Udp);
    }
    assert_eq!(seen, [false, false, false, true, true, false]);
}

#[test]
fn gives_autopath_a_fixed_search_path() {
    let r = setup(DEF, ". {\n erratic\n}").unwrap();
    let p: &Arc<dyn Plugin> = &r.plugins[0];
    let ap = p.auto_pather().expect("an AutoPather");
    let pkt = testing::query("example.org.", Rtype::A);
    let q = clusterdns_wire::Query::parse(&pkt).unwrap();
    let zone = Name::root();
    let mut out = Vec::new();
    ap.auto_path(&testing::request(&q, &zone), &mut out);
    let names: Vec<String> = out.iter().map(|n| n.to_string()).collect();
    assert_eq!(names, ["a.example.org.", "b.example.org.", "."]);
}
