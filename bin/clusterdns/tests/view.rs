//! The *view* plugin against the reference CoreDNS: several server blocks
//! on one zone and port, each query taken by the first block whose view
//! passes; clients on different 127.0.0.0/8 source addresses get different
//! answers, and both servers must give each the same. Setup errors of bad
//! expressions read as CoreDNS's. Skips when the reference binary is not
//! built, unless `CLUSTERDNS_REQUIRE_RIG=1`.

mod common;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;

use clusterdns_test_support::{
    Differential, Outcome, Query, ServerSpec, TtlMode, assert_block_setup_errors_agree,
    assert_setup_errors_agree, compare, compare_metrics, coredns_or_skip, exchange_from,
};

/// Blocks on one listener: views by client network, by client address or
/// type, by name; a longer zone whose view passes over TCP only; the
/// catch-all last. Each block's hosts answers `test.example.` with its own
/// address, so the answer tells which block took the query.
const COREFILE: &str = r".:@PORT@ {
    bind 127.0.0.1
    prometheus 127.0.0.1:@PORT_METRICS@
    view lan {
        expr incidr(client_ip(), '127.0.0.0/24')
    }
    acl {
        filter type MX
        allow
    }
    cache 30
    hosts {
        10.0.0.1 test.example
    }
}
.:@PORT@ {
    bind 127.0.0.1
    prometheus 127.0.0.1:@PORT_METRICS@
    view picked {
        expr client_ip() == '127.0.1.5' || (type() == 'TXT' and not incidr(client_ip(), '127.9.0.0/16'))
    }
    hosts {
        10.0.0.2 test.example
    }
}
.:@PORT@ {
    bind 127.0.0.1
    prometheus 127.0.0.1:@PORT_METRICS@
    view names {
        expr name() matches '^abc\\..*\\.example\\.$' && type() in ['A', 'AAAA']
    }
    hosts {
        10.0.0.4 abc.x.example abc.y.z.example
    }
}
example.:@PORT@ {
    bind 127.0.0.1
    prometheus 127.0.0.1:@PORT_METRICS@
    view tcp {
        expr proto() == 'tcp' && bufsize() > 512
    }
    hosts {
        10.0.0.5 test.example
    }
}
.:@PORT@ {
    bind 127.0.0.1
    prometheus 127.0.0.1:@PORT_METRICS@
    hosts {
        10.0.0.3 test.example
    }
}
";

/// The first A record of a response, for reporting which block answered.
fn first_answer(o: &Outcome) -> String {
    match o.response() {
        Some(r) => r
            .answer
            .first()
            .map_or_else(|| r.rcode_name(), |rr| rr.to_string()),
        None => o.summary(),
    }
}

#[test]
fn each_client_gets_the_block_its_view_picks() {
    let coredns = coredns_or_skip!();
    let diff = common::differential(&coredns, COREFILE);
    let timeout = Duration::from_secs(2);
    let mut bad = Vec::new();
    let mut answers = BTreeSet::new();
    for from in [
        "127.0.0.1",
        "127.0.0.200",
        "127.0.1.5",
        "127.0.1.6",
        "127.9.1.1",
        "127.3.4.5",
    ] {
        let ip: IpAddr = from.parse().unwrap();
        for q in [
            Query::new("test.example", "A"),
            Query::new("test.example", "TXT"),
            Query::new("TEST.example", "AAAA").edns(1232),
            Query::new("abc.x.example", "A"),
            Query::new("abc.y.z.example", "AAAA"),
            Query::new("abc.x.example", "MX"),
            Query::new("xabc.x.example", "A"),
        ] {
            let msg = q.to_wire().unwrap();
            let r = exchange_from(diff.reference.addr, ip, &msg, timeout);
            let c = exchange_from(diff.candidate.addr, ip, &msg, timeout);
            answers.insert(first_answer(&r));
            for d in compare(&r, &c, TtlMode::Exact) {
                bad.push(format!(
                    "{q} from {from}: {d}\n  ref: {}\n  ours: {}",
                    first_answer(&r),
                    first_answer(&c)
                ));
            }
        }
    }
    // Over TCP (from 127.0.0.1): the `example.` block's view passes.
    for q in [
        Query::new("test.example", "A").tcp(),
        Query::new("test.example", "A").tcp().edns(1232),
        Query::new("abc.x.example", "A").tcp(),
    ] {
        let c = diff.query(&q);
        answers.insert(first_answer(&c.reference));
        if !c.agree() {
            bad.push(c.to_string());
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    // Every block answered someone.
    for ip in ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"] {
        assert!(
            answers.iter().any(|a| a.ends_with(ip)),
            "no client reached the block of {ip}: {answers:?}"
        );
    }
    // The blocks' metrics carry their views' names.
    let theirs = diff.reference.scrape("PORT_METRICS");
    for series in [
        "coredns_dns_requests_total",
        "coredns_cache_requests_total",
        "coredns_acl_allowed_requests_total",
        "coredns_acl_filtered_requests_total",
    ] {
        assert!(
            theirs
                .lines()
                .any(|l| l.starts_with(series) && l.contains("view=\"lan\"")),
            "{series} of the lan view missing:\n{theirs}"
        );
    }
    let d = compare_metrics(
        &theirs,
        diff.reference.addr.port(),
        &diff.candidate.scrape("PORT_METRICS"),
        diff.candidate.addr.port(),
        &[
            "coredns_dns_requests_total",
            "coredns_dns_responses_total",
            "coredns_plugin_enabled",
            "coredns_cache_requests_total",
            "coredns_cache_misses_total",
            "coredns_acl_",
        ],
    );
    assert!(d.is_empty(), "{}", d.join("\n"));
}

#[test]
fn bad_views_read_as_coredns() {
    let coredns = coredns_or_skip!();
    let bodies = [
        "view v {\n        expr foo()\n    }",
        "view v {\n        expr bogus\n    }",
        "view v {\n        expr type() == 1\n    }",
        "view v {\n        expr incidr(client_ip())\n    }",
        "view v {\n        expr incidr(client_ip(), 'a', 'b')\n    }",
        "view v {\n        expr name() matches '['\n    }",
        "view v {\n        expr type() ==\n    }",
        "view v {\n        expr 1 + 'a'\n    }",
        "view v {\n        expr not type() == 'A'\n    }",
        "view v {\n        expr (type() == 'A'\n    }",
        "view v {\n        expr\n    }",
        "view {\n        expr true\n    }",
        "view a b",
        "view v {\n        foo true\n    }",
        "view v\n    view w",
        "view v {\n        expr type() in ['A', 'AAAA'] && do()\n    }",
        "view v {\n        expr type() == 'A' ? true : false\n    }",
        "view v",
    ];
    assert_block_setup_errors_agree(&coredns, common::binary(), &bodies);
    // Blocks with views share a zone and port with each other and with
    // one block without (both start).
    assert_setup_errors_agree(
        &coredns,
        common::binary(),
        &[
            ".:@P@ {\n    view v\n    whoami\n}\n.:@P@ {\n    view w\n    whoami\n}\n.:@P@ {\n    whoami\n}\n",
        ],
    );
    // Two without a view are refused, as CoreDNS refuses them.
    let port = clusterdns_test_support::free_port().expect("port");
    let text = format!(
        ".:{port} {{\n    whoami\n}}\n.:{port} {{\n    view v\n    whoami\n}}\n.:{port} {{\n    whoami\n}}\n"
    );
    for program in [coredns.as_path(), common::binary()] {
        let out =
            clusterdns_test_support::run_corefile(program, &text, Duration::from_millis(1500))
                .expect("run")
                .unwrap_or_else(|| panic!("{} started", program.display()));
        assert!(
            out.contains(&format!(
                "cannot serve dns://.:{port} - it is already defined"
            )),
            "{out}"
        );
    }
}

/// A block without a view declared before blocks with views takes every
/// query: CoreDNS walks the blocks top to bottom (its README's "Server
/// Block Ordering"), it does not keep the catch-all for last.
#[test]
fn a_catch_all_declared_first_shadows_the_views() {
    let coredns = coredns_or_skip!();
    let corefile = ".:@PORT@ {
    bind 127.0.0.1
    hosts {
        10.0.0.3 test.example
    }
}
.:@PORT@ {
    bind 127.0.0.1
    view always {
        expr true
    }
    hosts {
        10.0.0.1 test.example
    }
}
";
    let diff = common::differential(&coredns, corefile);
    for q in [
        Query::new("test.example", "A"),
        Query::new("test.example", "A").tcp(),
    ] {
        let c = diff.query(&q);
        assert!(c.agree(), "{c}");
        assert!(first_answer(&c.reference).ends_with("10.0.0.3"), "{c}");
    }
}

/// Expressions over each query function and operator: for each, a block
/// with that view (hosts: NOERROR) before a catch-all (acl: REFUSED);
/// queries of several names, types, transports and sources must be routed
/// alike by both servers.
#[test]
fn expressions_route_as_coredns() {
    let coredns = coredns_or_skip!();
    let exprs = [
        "type() == 'A'",
        "type() != 'A' && type() in ['TXT', 'MX']",
        "not (type() == 'A') or proto() == 'tcp'",
        "!(proto() == 'udp')",
        "name() == 'test.example.'",
        r"name() matches '^t.*\\.example\\.$'",
        "name() not matches 'other'",
        "name() startsWith 'test' and name() endsWith 'example.' and name() contains 'st.ex'",
        "class() == 'IN' && opcode() == 0 && id() >= 0",
        "client_ip() == '127.0.0.5'",
        "incidr(client_ip(), '127.0.0.4/31')",
        "incidr(client_ip(), 'bogus') || type() == 'MX'",
        "port() != '53' && server_ip() == '127.0.0.1' && server_port() != ''",
        "do() || bufsize() > 1000",
        "size() > 40",
        "len(name()) == 13 && upper(type()) == 'TXT'",
        "1 + 2 * 3 == 7 && 10 % 4 == 2 && 1 / 2 == 0.5 && -1 < 0 && 'a' + 'b' == 'ab'",
        "'abc' < 'abd' && 2 >= 2 && 3 > 2.5",
        "type() == 'A' ? true : false",
        "type() == 'A' ? 'yes' : false",
        "type()",
        "metadata('view/name') == ''",
        "type() in ['A'] and not (name() in ['x.example.'])",
    ];
    let mut bad = Vec::new();
    let mut routes = BTreeSet::new();
    for e in exprs {
        let corefile = format!(
            ".:@PORT@ {{\n    bind 127.0.0.1\n    view v {{\n        expr {e}\n    }}\n    hosts {{\n        10.0.0.1 test.example other.example\n    }}\n}}\n.:@PORT@ {{\n    bind 127.0.0.1\n    acl {{\n        block\n    }}\n    whoami\n}}\n"
        );
        let diff = Differential::between(
            None,
            ServerSpec::coredns_at(&coredns, &corefile),
            ServerSpec::clusterdns_at(common::binary(), &corefile),
        )
        .unwrap_or_else(|err| panic!("{e}: {err}"));
        for from in ["127.0.0.1", "127.0.0.5"] {
            let ip: IpAddr = from.parse().unwrap();
            for q in [
                Query::new("test.example", "A"),
                Query::new("Test.Example", "TXT").edns(4096).dnssec_ok(),
                Query::new("other.example", "MX").edns(1232),
            ] {
                let msg = q.to_wire().unwrap();
                let t = Duration::from_secs(2);
                let r = exchange_from(diff.reference.addr, ip, &msg, t);
                let c = exchange_from(diff.candidate.addr, ip, &msg, t);
                routes.insert(r.response().map(|r| r.rcode_name()));
                if !compare(&r, &c, TtlMode::Exact).is_empty() {
                    bad.push(format!(
                        "{e:?}: {q} from {from}: ref {} ours {}",
                        first_answer(&r),
                        first_answer(&c)
                    ));
                }
            }
        }
        let c = diff.query(&Query::new("test.example", "A").tcp());
        if !c.agree() {
            bad.push(format!("{e:?}: {c}"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    // Both blocks took queries.
    assert!(routes.len() >= 2, "{routes:?}");
}
