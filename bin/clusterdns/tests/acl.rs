//! The *acl* plugin against the reference CoreDNS: the same Corefile to
//! both, queries from several 127.0.0.0/8 source addresses, every answer
//! (rcode, OPT, extended error, silence for `drop`) and the acl counters
//! compared; bad arguments refused with the same text. Skips when the
//! reference binary is not built, unless `CLUSTERDNS_REQUIRE_RIG=1`.

mod common;

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use clusterdns_test_support::{
    Differential, Outcome, Query, TtlMode, compare, compare_metrics, coredns_or_skip, exchange_from,
};

/// `q` over UDP from `from` to both servers; a description of each
/// disagreement, and the reference's outcome.
fn ask_from(diff: &Differential, from: &str, q: &Query) -> (Vec<String>, Outcome) {
    let ip: IpAddr = from.parse().expect("source address");
    let msg = q.to_wire().expect("query encodes");
    let timeout = Duration::from_millis(700);
    // The servers listen on ::1 too, at the same port.
    let at = |s: &clusterdns_test_support::RunningServer| {
        SocketAddr::new(
            if ip.is_ipv6() {
                IpAddr::V6(Ipv6Addr::LOCALHOST)
            } else {
                s.addr.ip()
            },
            s.addr.port(),
        )
    };
    let r = exchange_from(at(&diff.reference), ip, &msg, timeout);
    let c = exchange_from(at(&diff.candidate), ip, &msg, timeout);
    let d = compare(&r, &c, TtlMode::Exact)
        .iter()
        .map(|d| {
            format!(
                "{q} from {from}: {d}\n  ref: {}\n  ours: {}",
                r.summary(),
                c.summary()
            )
        })
        .collect();
    (d, r)
}

const COREFILE: &str = ".:@PORT@ {
    bind 127.0.0.1 ::1
    prometheus 127.0.0.1:@PORT_METRICS@
    acl example.org {
        allow net 127.0.0.10
        block type A net 127.0.0.2 127.0.1.0/24
        filter type AAAA MX net 127.0.0.0/16
        drop type TXT net 127.0.0.3
        block type A net ::1
        filter net ::/0
    }
    acl {
        block type SRV
        filter net 127.0.0.4
    }
    hosts {
        10.0.0.1 a.example.org a.example.net
        fd00::1 a.example.org a.example.net
        fallthrough
    }
    whoami
}
";

#[test]
fn policies_answer_as_coredns() {
    let coredns = coredns_or_skip!();
    let diff = common::differential(&coredns, COREFILE);
    let mut bad = Vec::new();
    let mut saw_block = false;
    let mut saw_silence = false;
    for from in [
        "127.0.0.1",
        "127.0.0.2",
        "127.0.0.3",
        "127.0.0.4",
        "127.0.0.10",
        "127.0.1.7",
        "127.1.0.1",
        "::1",
    ] {
        for (name, t) in [
            ("a.example.org", "A"),
            ("a.example.org", "AAAA"),
            ("a.example.org", "MX"),
            ("a.example.org", "TXT"),
            ("a.example.org", "SRV"),
            ("a.example.net", "A"),
            ("a.example.net", "SRV"),
        ] {
            for q in [
                Query::new(name, t),
                Query::new(name, t).edns(1232),
                Query::new(name, t).edns(4096).dnssec_ok(),
            ] {
                let (d, r) = ask_from(&diff, from, &q);
                bad.extend(d);
                match r {
                    Outcome::Response(r) if r.rcode_name() == "REFUSED" => saw_block = true,
                    Outcome::Timeout => saw_silence = true,
                    _ => {}
                }
            }
        }
    }
    assert!(
        saw_block && saw_silence,
        "the corpus exercises block and drop"
    );
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    // Over TCP too (from 127.0.0.1: filter for AAAA, block for SRV).
    for q in [
        Query::new("a.example.org", "AAAA").tcp(),
        Query::new("a.example.net", "SRV").tcp(),
        Query::new("a.example.org", "A").tcp(),
    ] {
        let c = diff.query(&q);
        assert!(c.agree(), "{c}");
    }
    // The counters of what was asked, label for label.
    let theirs = diff.reference.scrape("PORT_METRICS");
    for family in ["blocked", "filtered", "dropped", "allowed"] {
        let name = format!("coredns_acl_{family}_requests_total{{");
        assert!(theirs.contains(&name), "{name} missing:\n{theirs}");
    }
    let d = compare_metrics(
        &theirs,
        diff.reference.addr.port(),
        &diff.candidate.scrape("PORT_METRICS"),
        diff.candidate.addr.port(),
        &["coredns_acl_", "coredns_dns_responses_total"],
    );
    assert!(d.is_empty(), "{}", d.join("\n"));
}

#[test]
fn bad_arguments_read_as_coredns() {
    common::block_setup_errors_read_as_coredns(&[
        "acl {\n        deny net 10.0.0.0/8\n    }",
        "acl {\n        block foo\n    }",
        "acl {\n        block type\n    }",
        "acl {\n        block net\n    }",
        "acl {\n        block type a\n    }",
        "acl {\n        block type TYPE65\n    }",
        "acl {\n        block net 10.0.0.0/33\n    }",
        "acl {\n        block net 10.0.0\n    }",
        "acl {\n        block net 10.0.0.0/08\n    }",
        "acl {\n        block net 2001:db8::/129\n    }",
        "acl {\n        BLOCK TYPE A NET 10.0.0.0/8\n    }",
        "acl {\n        block type * foo\n    }",
        "acl example.org {\n        allow\n    }",
    ]);
}
