//! *erratic* against the reference CoreDNS: the same Corefile, the same
//! sequence of queries (so the same query numbers), every answer compared,
//! dropped queries included (both silent). Each test skips when the
//! reference binary is not built (`scripts/rig build`), unless
//! `CLUSTERDNS_REQUIRE_RIG=1`.
//!
//! The servers are started with `ServerSpec`/`RunningServer`, which wait
//! for the port with a TCP connect: `common::Server::start` probes with a
//! query, which *erratic* would count (and drop).

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use clusterdns_test_support::{
    Differential, Outcome, Query, RunningServer, ServerSpec, Transport, coredns_or_skip,
    http_request,
};

/// A block on 127.0.0.1 with `body` (lines indented by four).
fn corefile(zone: &str, body: &str) -> String {
    format!("{zone}:@PORT@ {{\n    bind 127.0.0.1\n{body}}}\n")
}

/// The queries each Corefile gets, in order: A, AAAA, another type and a
/// transfer, over UDP and TCP, twice over so that every Nth of the
/// README's amounts comes round.
fn sequence() -> Vec<Query> {
    let mut qs = Vec::new();
    for round in 0..2 {
        for (name, qtype) in [
            ("ExAmple.org", "A"),
            ("www.example.org", "AAAA"),
            ("example.org", "MX"),
            ("example.org", "AXFR"),
            ("a.b.example.org", "A"),
            ("host.a.example.org", "A"),
        ] {
            let q = Query::new(name, qtype).id(0x4000 + round);
            qs.push(q.clone().transport(Transport::Udp));
            qs.push(q.transport(Transport::Tcp));
        }
    }
    qs
}

/// What one Corefile's sequence gave: the disagreements, and how many
/// queries both answered and both left unanswered.
struct Tally {
    differ: Vec<String>,
    answered: usize,
    silent: usize,
    truncated: usize,
}

/// Both servers on `corefile`; a query gets 700ms (a dropped one is
/// waited for that long on each).
fn differential(coredns: &Path, corefile: &str) -> Differential {
    common::differential(coredns, corefile).with_timeout(Duration::from_millis(700))
}

fn run_sequence(coredns: &Path, corefile: &str, queries: &[Query]) -> Tally {
    let diff = differential(coredns, corefile);
    let mut t = Tally {
        differ: Vec::new(),
        answered: 0,
        silent: 0,
        truncated: 0,
    };
    for q in queries {
        let c = diff.query(q);
        if !c.agree() {
            t.differ.push(c.to_string());
            continue;
        }
        match &c.reference {
            Outcome::Response(r) => {
                t.answered += 1;
                t.truncated += usize::from(r.flags.tc);
            }
            _ => t.silent += 1,
        }
    }
    t
}

/// The README's examples and the other options, each on the same query
/// sequence against both servers.
#[test]
fn erratic_answers_drops_and_truncates_as_coredns() {
    let coredns = coredns_or_skip!();
    let cases = [
        "    erratic\n",
        "    erratic {\n        drop 3\n    }\n",
        "    erratic {\n        delay 3 50ms\n    }\n",
        "    erratic {\n        delay 3 5ms\n        truncate 5\n    }\n",
        "    erratic {\n        drop 2\n        truncate 2\n    }\n",
        "    erratic {\n        drop 0\n        truncate\n        large\n    }\n",
        "    erratic {\n        drop\n        delay\n        truncate 3\n    }\n",
        "    erratic {\n        delay 0\n    }\n",
        "    autopath @erratic\n    erratic {\n        drop 0\n    }\n",
    ];
    let queries = sequence();
    let mut failures = Vec::new();
    for body in cases {
        let t = run_sequence(&coredns, &corefile("example.org.", body), &queries);
        eprintln!(
            "{body:?}: {} agree ({} answered, {} truncated, {} silent), {} differ",
            t.answered + t.silent,
            t.answered,
            t.truncated,
            t.silent,
            t.differ.len()
        );
        if !t.differ.is_empty() {
            failures.push(format!("{body}{}", t.differ.join("\n")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// A transfer for the root, whose names cannot be formed (CoreDNS's would
/// be `a..`): nothing comes back from either. For a name of the most
/// bytes a name may have, where `a.NAME` is too long, CoreDNS sends a
/// message that does not parse and clusterdns nothing (README, Differences
/// from CoreDNS).
#[test]
fn erratic_transfers_that_cannot_be_formed_send_nothing() {
    let coredns = coredns_or_skip!();
    let queries: Vec<Query> = [".", "ok.example"]
        .iter()
        .map(|n| Query::new(n, "AXFR").tcp())
        .collect();
    let cf = corefile(".", "    erratic {\n        drop 0\n    }\n");
    let t = run_sequence(&coredns, &cf, &queries);
    eprintln!(
        "{} answered, {} silent, {} differ",
        t.answered,
        t.silent,
        t.differ.len()
    );
    assert!(t.differ.is_empty(), "{}", t.differ.join("\n"));
    assert_eq!((t.answered, t.silent), (1, 1));

    let long = format!(
        "{}.{}.{}.{}",
        "a".repeat(63),
        "b".repeat(63),
        "c".repeat(63),
        "d".repeat(61)
    );
    let diff = differential(&coredns, &cf);
    let c = diff.query(&Query::new(&long, "AXFR").tcp());
    assert!(matches!(c.reference, Outcome::Malformed { .. }), "{c}");
    assert!(matches!(c.candidate, Outcome::Timeout), "{c}");
}

/// Delayed replies take the delay on clusterdns (the reference is only
/// asked for its answers above: timing is not compared).
#[test]
fn erratic_delays_every_nth_reply() {
    let spec = ServerSpec::clusterdns_at(
        common::binary(),
        &corefile(".", "    erratic {\n        delay 2 300ms\n    }\n"),
    );
    let s = RunningServer::start(&spec).expect("start clusterdns");
    let q = Query::new("example.org", "A");
    let mut took = Vec::new();
    for _ in 0..4 {
        let start = Instant::now();
        let o = s.query(&q, Duration::from_secs(2));
        assert!(matches!(o, Outcome::Response(_)), "{}", o.summary());
        took.push(start.elapsed() >= Duration::from_millis(300));
    }
    assert_eq!(took, [true, false, true, false]);
}

/// /ready follows erratic's count of queries as CoreDNS's does: not ready
/// before the third query, ready from then on (once ready, *ready* stops
/// asking).
#[test]
fn erratic_readiness_as_coredns() {
    let coredns = coredns_or_skip!();
    // Not `@PORT_READY@`: the harness would wait for /ready to say 200.
    let cf = corefile(
        ".",
        "    ready 127.0.0.1:@PORT_RDY@\n    erratic {\n        drop 0\n    }\n",
    );
    let r = RunningServer::start(&ServerSpec::coredns_at(&coredns, &cf)).expect("start coredns");
    let c = RunningServer::start(&ServerSpec::clusterdns_at(common::binary(), &cf))
        .expect("start clusterdns");
    let status = |s: &RunningServer| {
        let port = s.port("PORT_RDY").expect("ready port");
        http_request(
            SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            "GET",
            "/ready",
            &[],
        )
        .status
    };
    let q = Query::new("example.org", "A");
    let mut seen = Vec::new();
    for _ in 0..6 {
        seen.push((status(&r), status(&c)));
        s_query(&r, &q);
        s_query(&c, &q);
    }
    let (theirs, ours): (Vec<u16>, Vec<u16>) = seen.into_iter().unzip();
    assert_eq!(ours, theirs);
    assert_eq!(ours, [503, 503, 503, 200, 200, 200]);
}

fn s_query(s: &RunningServer, q: &Query) {
    let o = s.query(q, Duration::from_secs(2));
    assert!(matches!(o, Outcome::Response(_)), "{}", o.summary());
}

/// Corefiles both refuse, with the same text (clusterdns's `FILE:LINE`
/// aside, where CoreDNS names no place).
#[test]
fn erratic_setup_errors_read_as_coredns() {
    common::block_setup_errors_read_as_coredns(&[
        "erratic {\n    drop 1 2\n}",
        "erratic {\n    drop x\n}",
        "erratic {\n    drop 2147483648\n}",
        "erratic {\n    truncate -1\n}",
        "erratic {\n    truncate 1 2\n}",
        "erratic {\n    delay -2\n}",
        "erratic {\n    delay 2 1d\n}",
        "erratic {\n    delay 2 fast\n}",
        "erratic {\n    delay 1 2ms 3\n}",
        "erratic {\n    large 3\n}",
        "erratic {\n    bogus\n}",
    ]);
}
