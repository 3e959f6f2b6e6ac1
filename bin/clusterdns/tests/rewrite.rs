//! *rewrite* against the reference CoreDNS 1.14.7: the same cluster-style
//! Corefile (errors, cache, rewrite, hosts, forward to a loopback
//! upstream) to both, the same queries, every answer compared, and for
//! the EDNS0 rules what the upstream received. Each test skips when the
//! reference binary is not built (`scripts/rig build`), unless
//! `CLUSTERDNS_REQUIRE_RIG=1`.

use std::net::UdpSocket;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod differ;

use differ::{clusterdns, disagreements, upstream};

use clusterdns_test_support::{
    Differential, Query, Transport, coredns_or_skip, error_line, run_corefile, without_location,
};

/// An upstream (the reference itself) with answers of every shape the
/// rules rewrite: addresses, MX with glue, SRV, PTR, a CNAME chain into
/// a CDN, NXDOMAIN with a SOA, SERVFAIL.
const UPSTREAM: &str = r#".:@PORT@ {
    bind 127.0.0.1
    template IN A example {
        answer "{{ .Name }} 60 IN A 10.0.0.1"
    }
    template IN AAAA example {
        answer "{{ .Name }} 60 IN AAAA fd00::1"
    }
    template IN MX example {
        answer "{{ .Name }} 60 IN MX 10 mail.{{ .Name }}"
        additional "mail.{{ .Name }} 60 IN A 10.0.0.2"
    }
    template IN SRV example {
        answer "{{ .Name }} 60 IN SRV 0 100 80 web.{{ .Name }}"
    }
    template IN PTR arpa {
        answer "{{ .Name }} 60 IN PTR ftp-us-west-1.service.consul."
    }
    template IN A cdn.net {
        answer "{{ .Name }} 300 IN A 20.2.0.1"
    }
    template IN A other.com {
        answer "{{ .Name }} 100 IN A 30.3.1.2"
    }
    template IN A app.com {
        answer "{{ .Name }} 200 IN CNAME my-app.cdn.net."
        answer "my-app.cdn.net. 300 IN A 20.2.0.1"
    }
    template IN A nx.test {
        rcode NXDOMAIN
        authority "nx.test. 60 IN SOA ns.nx.test. host.nx.test. 1 7200 1800 86400 30"
    }
    template IN A sf.test {
        rcode SERVFAIL
    }
}
"#;

/// A cluster Corefile's shape with `rules` in *rewrite*'s place: hosts
/// for cluster names, the rest forwarded to `@UP@`.
fn cluster_corefile(rules: &str) -> String {
    format!(
        ".:@PORT@ {{
    bind 127.0.0.1
    errors
    cache 30
{rules}
    hosts {{
        10.96.0.1 kubernetes.default.svc.cluster.local
        10.96.0.10 kube-dns.kube-system.svc.cluster.local
        fallthrough
    }}
    forward . 127.0.0.1:@UP@
}}
"
    )
}

/// Both servers on `corefile` with `@UP@` = `up`.
fn differential(coredns: &Path, corefile: &str, up: &str) -> Differential {
    differ::differential(coredns, corefile, &[("UP", up)])
}

/// Runs each `(rules, queries)` case on a fresh pair of servers.
fn cases_differ(coredns: &Path, up: &str, cases: &[(&str, Vec<Query>)]) -> Vec<String> {
    let mut failed = Vec::new();
    for (rules, queries) in cases {
        let diff = differential(coredns, &cluster_corefile(rules), up);
        for d in disagreements(&diff, queries) {
            failed.push(format!("{rules}\n{d}"));
        }
    }
    failed
}

fn q(name: &str, t: &str) -> Query {
    Query::new(name, t)
}

#[test]
fn name_rules_and_their_answers_match_coredns() {
    let coredns = coredns_or_skip!();
    let (_up, port) = upstream(&coredns, UPSTREAM);
    let cases: Vec<(&str, Vec<Query>)> = vec![
        // exact: always rewritten back, to a cluster name and upstream.
        (
            "    rewrite name api.example.org kubernetes.default.svc.cluster.local",
            vec![
                q("api.example.org", "A"),
                q("API.Example.ORG", "A"),
                q("api.example.org", "AAAA"),
                q("other.example.org", "A"),
            ],
        ),
        (
            "    rewrite name exact foo.test. a.example.",
            vec![
                q("foo.test", "A").edns(1232),
                q("foo.test", "MX"),
                q("bar.test", "A"),
            ],
        ),
        // prefix, substring and regex with answer auto.
        (
            "    rewrite name prefix foo a answer auto",
            vec![
                q("foo.x.example", "A"),
                q("foo.x.example", "MX"),
                q("foox.example", "A"),
            ],
        ),
        (
            "    rewrite name substring us-west-1.test b.example answer auto",
            vec![q("ftp.us-west-1.test", "A"), q("ftp.us-west-1.test", "SRV")],
        ),
        (
            r"    rewrite name regex (.*)-(us-west-1)\.test {1}.service.{2}.example answer auto",
            vec![
                q("ftp-us-west-1.test", "A"),
                q("ftp-us-west-1.test", "MX"),
                q("FTP-us-west-1.test", "A"),
                q("ftp-us-east-1.test", "A"),
            ],
        ),
        // suffix: auto is the reverse suffix rewrite.
        (
            "    rewrite name suffix .old.test. .new.example. answer auto",
            vec![
                q("www.old.test", "A"),
                q("mx.old.test", "MX"),
                q("www.old.test", "SRV"),
            ],
        ),
        // Explicit answer name and value rules, in a block.
        (
            r"    rewrite stop {
        name regex (.*)-(us-west-1)\.test {1}.service.{2}.example
        answer name (.*)\.service\.(us-west-1)\.example {1}-{2}.test
        answer value (.*)\.service\.(us-west-1)\.example {1}-{2}.test
    }",
            vec![q("ftp-us-west-1.test", "A"), q("ftp-us-west-1.test", "MX")],
        ),
        // PTR values, README's example.
        (
            r"    rewrite stop {
        name suffix .arpa .arpa
        answer name auto
        answer value (.*)\.service\.consul\. {1}.coredns.rocks.
    }",
            vec![q("30.30.30.10.in-addr.arpa", "PTR")],
        ),
        // No answer rule: the question still goes back, the answer not.
        (
            "    rewrite name prefix www a",
            vec![q("www.x.example", "A")],
        ),
        // continue without answer rules: the reply keeps the new question.
        (
            "    rewrite continue name prefix www a",
            vec![q("www.x.example", "A")],
        ),
        // Several rules: continue then stop, a later rule never reached.
        (
            "    rewrite continue name suffix .one.test. .two.test.
    rewrite name suffix .two.test. .example. answer auto
    rewrite name suffix .example. .never.",
            vec![
                q("a.one.test", "A"),
                q("a.two.test", "A"),
                q("a.example", "A"),
            ],
        ),
        // A rewritten name that is no name: SERVFAIL.
        (
            r"    rewrite name regex (.*)\.bad\.test {1}..example",
            vec![q("a.bad.test", "A")],
        ),
    ];
    let d = cases_differ(&coredns, &port, &cases);
    assert!(d.is_empty(), "{}", d.join("\n\n"));
}

#[test]
fn type_class_ttl_rcode_and_cname_rules_match_coredns() {
    let coredns = coredns_or_skip!();
    let (_up, port) = upstream(&coredns, UPSTREAM);
    let cases: Vec<(&str, Vec<Query>)> = vec![
        (
            "    rewrite type AAAA A",
            vec![
                q("a.example", "AAAA"),
                q("a.example", "A"),
                q("a.example", "AAAA").dnssec_ok(),
            ],
        ),
        (
            "    rewrite class CH IN",
            vec![q("a.example", "A").class("CH"), q("a.example", "A")],
        ),
        // TTLs: one value, ranges open on either side, by regex.
        (
            "    rewrite ttl a.example. 30-50",
            vec![q("a.example", "A"), q("b.example", "A")],
        ),
        ("    rewrite ttl a.example. 100-", vec![q("a.example", "A")]),
        ("    rewrite ttl a.example. -20", vec![q("a.example", "MX")]),
        (
            r"    rewrite ttl regex (.*)\.example 5",
            vec![
                q("x.example", "A"),
                q("x.example", "MX").edns(1232).dnssec_ok(),
            ],
        ),
        (
            "    rewrite ttl suffix .test. 7",
            vec![q("nx.test", "A"), q("x.nx.test", "A")],
        ),
        // rcode, by name and number, on records and on bare replies.
        (
            "    rewrite rcode nx.test NXDOMAIN NOERROR",
            vec![q("nx.test", "A"), q("nx.test", "A").edns(1232)],
        ),
        (
            "    rewrite rcode regex .*sf\\.test 2 0",
            vec![q("sf.test", "A"), q("sf.test", "A").edns(1232)],
        ),
        // continue rules adding up: type, then TTL, then rcode.
        (
            "    rewrite continue type AAAA A
    rewrite continue ttl regex .*\\.example\\. 30-300
    rewrite rcode suffix .test. SERVFAIL NOERROR",
            vec![q("a.example", "AAAA"), q("sf.test", "A"), q("nx.test", "A")],
        ),
        // CNAME targets: the chain up to the target kept, the rest looked up.
        (
            r"    rewrite cname regex (.*)\.cdn\.net\. {1}.other.com.",
            vec![q("www.app.com", "A"), q("a.example", "A")],
        ),
        (
            "    rewrite cname exact my-app.cdn.net. x.other.com.",
            vec![q("www.app.com", "A")],
        ),
        (
            "    rewrite cname suffix .cdn.net. .other.com.",
            vec![q("www.app.com", "A")],
        ),
    ];
    let d = cases_differ(&coredns, &port, &cases);
    assert!(d.is_empty(), "{}", d.join("\n\n"));
}

/// A loopback upstream that records every query it gets and answers it
/// with the query itself as a reply (QR set): the OPT record it received
/// comes back to the client, options and all.
struct Echo {
    port: u16,
    seen: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Echo {
    fn start() -> Echo {
        let sock = UdpSocket::bind("127.0.0.1:0").expect("bind echo upstream");
        let port = sock.local_addr().expect("addr").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 65535];
            while let Ok((n, from)) = sock.recv_from(&mut buf) {
                let mut msg = buf[..n].to_vec();
                if msg.len() < 12 {
                    continue;
                }
                log.lock().expect("log").push(msg.clone());
                msg[2] |= 0x80;
                let _ = sock.send_to(&msg, from);
            }
        });
        Echo { port, seen }
    }

    fn take(&self) -> Vec<Vec<u8>> {
        std::mem::take(&mut *self.seen.lock().expect("log"))
    }
}

/// EDNS0 options as `(code, data)`.
type Options<'a> = Vec<(u16, &'a [u8])>;

/// A query for `name` A with an OPT record carrying `options` (or none
/// at all when `options` is `None`).
fn raw_query(name: &str, options: Option<&[(u16, &[u8])]>) -> Vec<u8> {
    let mut m = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in name.trim_end_matches('.').split('.') {
        m.push(label.len() as u8);
        m.extend_from_slice(label.as_bytes());
    }
    m.extend_from_slice(&[0, 0, 1, 0, 1]);
    if let Some(opts) = options {
        m[11] = 1;
        let mut data = Vec::new();
        for (code, d) in opts {
            data.extend_from_slice(&code.to_be_bytes());
            data.extend_from_slice(&(d.len() as u16).to_be_bytes());
            data.extend_from_slice(d);
        }
        m.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0]);
        m.extend_from_slice(&(data.len() as u16).to_be_bytes());
        m.extend_from_slice(&data);
    }
    m
}

#[test]
fn edns0_rules_send_upstream_what_coredns_sends() {
    let coredns = coredns_or_skip!();
    let echo = Echo::start();
    let up = echo.port.to_string();
    let rules = [
        "    rewrite edns0 local set 0xffee abcd",
        "    rewrite edns0 local set 0xffee 0x61626364 revert",
        "    rewrite edns0 local append 0xffee {client_ip}",
        "    rewrite edns0 local replace 0xffee {qname} revert",
        "    rewrite continue edns0 local set 0xffee {qtype}
    rewrite edns0 local set 65000 {protocol}",
        "    rewrite edns0 local set 0xffee {server_ip}",
        "    rewrite edns0 local unset 0xffee",
        "    rewrite edns0 nsid set",
        "    rewrite edns0 nsid append revert",
        "    rewrite edns0 nsid unset",
        "    rewrite edns0 subnet set 24 56",
        "    rewrite edns0 subnet replace 16 56 revert",
        "    rewrite edns0 subnet append 32 128",
        "    rewrite edns0 subnet unset",
        "    rewrite continue edns0 local set 0xffee abcd
    rewrite edns0 local replace 0xffee bcde revert",
        "    rewrite continue edns0 subnet set 24 56
    rewrite name exact ecs.test. a.example.",
    ];
    let local: &[u8] = b"1234";
    let ecs: &[u8] = &[0, 1, 32, 0, 1, 2, 3, 4];
    let nsid: &[u8] = b"";
    let queries: Vec<(&str, Option<Options<'_>>)> = vec![
        ("plain.example", None),
        ("empty.example", Some(vec![])),
        ("local.example", Some(vec![(0xffee, local)])),
        ("ecs.example", Some(vec![(8, ecs)])),
        ("nsid.example", Some(vec![(3, nsid), (0xffee, local)])),
        ("ecs.test", Some(vec![(8, ecs)])),
    ];
    let mut failed = Vec::new();
    for r in rules {
        // No cache here: each query reaches the upstream from both.
        let corefile = format!(
            ".:@PORT@ {{\n    bind 127.0.0.1\n    errors\n{r}\n    forward . 127.0.0.1:@UP@\n}}\n"
        );
        let diff = differential(&coredns, &corefile, &up);
        echo.take();
        for (name, opts) in &queries {
            let msg = raw_query(name, opts.as_deref());
            let c = diff.query_raw(&msg, Transport::Udp);
            if !c.agree() {
                failed.push(format!("{r}\n{name}: {c}"));
            }
        }
        // The reference went first each time: what it sent, then ours.
        let seen = echo.take();
        if seen.len() != queries.len() * 2 {
            failed.push(format!("{r}: upstream saw {} queries", seen.len()));
            continue;
        }
        for (pair, (name, _)) in seen.chunks(2).zip(&queries) {
            if pair[0][2..] != pair[1][2..] {
                failed.push(format!(
                    "{r}\n{name}: upstream got\n  coredns:    {:02x?}\n  clusterdns: {:02x?}",
                    &pair[0][2..],
                    &pair[1][2..]
                ));
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

#[test]
fn edns0_local_options_reach_replies_without_opt_as_in_coredns() {
    // hosts's reply has no OPT record: the scrub gives it the query's,
    // with the rules' local codes among the options it keeps.
    let coredns = coredns_or_skip!();
    let mut failed = Vec::new();
    for r in [
        "    rewrite edns0 local set 0xffee abcd",
        "    rewrite edns0 local set 0xffee abcd revert",
        "    rewrite continue edns0 local set 0xffee abcd
    rewrite edns0 local replace 0xffee bcde revert",
        "    rewrite edns0 nsid set",
        "    rewrite edns0 subnet set 24 56 revert",
    ] {
        let corefile = format!(
            ".:@PORT@ {{\n    bind 127.0.0.1\n{r}\n    hosts {{\n        10.0.0.5 who.example\n    }}\n}}\n"
        );
        let diff = differential(&coredns, &corefile, "0");
        for opts in [None, Some(vec![]), Some(vec![(0xffeeu16, &b"x"[..])])] {
            let msg = raw_query("who.example", opts.as_deref());
            for t in [Transport::Udp, Transport::Tcp] {
                let c = diff.query_raw(&msg, t);
                if !c.agree() {
                    failed.push(format!("{r}\n{c}"));
                }
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

#[test]
fn bad_arguments_give_coredns_errors_with_the_place() {
    let coredns = coredns_or_skip!();
    let bad = [
        "",
        "stop",
        "continue",
        "answer name a b",
        "foo a b",
        "name a",
        "name foo a b",
        "name exact a b answer",
        "name exact a b foo bar",
        "name exact a b answer foo",
        "name exact a b answer name x",
        "name prefix a b answer auto answer name x y",
        "name regex (a b",
        "name regex (a).b {1}{2}.c",
        "name regex a.b c answer name (x y",
        "class CH",
        "class XX IN",
        "type A",
        "type A BOGUS",
        "ttl a",
        "ttl a b",
        "ttl a 1-2-3",
        "ttl a -",
        "ttl a 50-10",
        "ttl foo a 5",
        "ttl regex (a 5",
        "ttl a b c d",
        "rcode a b",
        "rcode a NOPE 0",
        "rcode a 0 24",
        "rcode a BADVERS 0",
        "rcode foo a 0 0",
        "rcode regex (a 2 0",
        "rcode a b c d e",
        "edns0 local",
        "edns0 local flip 1 2",
        "edns0 local set 1",
        "edns0 local set zz abc",
        "edns0 local set 0x1ffff abc",
        "edns0 local set 1 0xzz",
        "edns0 local set 1 0x616",
        "edns0 local set 1 {bogus}",
        "edns0 local set 1 {/b}",
        "edns0 nsid set x",
        "edns0 subnet set 24",
        "edns0 subnet set 33 56",
        "edns0 subnet set 24 129",
        "edns0 subnet set x 56",
        "edns0 bogus set",
        "edns0 local unset",
        "edns0 nsid unset x",
        "edns0 subnet unset 1",
        "edns0 bogus unset",
        "cname a",
        "cname foo a b",
        "cname regex (a b",
        "cname regex a) b",
        "cname a b c d",
    ];
    let mut failed = Vec::new();
    for rule in bad {
        let corefile_of = |port: u16| format!(".:{port} {{\n    whoami\n    rewrite {rule}\n}}\n");
        let run = |program: &Path| {
            let port = clusterdns_test_support::free_port().expect("a free port");
            run_corefile(program, &corefile_of(port), Duration::from_millis(1500)).expect("run")
        };
        let theirs = run(&coredns).map_or("started".into(), |t| error_line(&t));
        let ours = run(clusterdns()).map_or("started".into(), |o| error_line(&o));
        // clusterdns names the place; CoreDNS does not.
        if !ours.contains("Corefile:3 - Error during parsing: ") {
            failed.push(format!("rewrite {rule}: no place in {ours:?}"));
        }
        if theirs != without_location(&ours) {
            failed.push(format!(
                "rewrite {rule}\n  coredns:    {theirs}\n  clusterdns: {ours}"
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[test]
fn failures_behind_go_through_the_rcode_rules_as_in_coredns() {
    // Nothing listens on the upstream port: forward fails at once
    // (connection refused) and the server or rewrite writes the reply.
    let coredns = coredns_or_skip!();
    let dead = clusterdns_test_support::free_port()
        .expect("a free port")
        .to_string();
    let cases: Vec<(&str, Vec<Query>)> = vec![
        (
            r"    rewrite rcode regex .*\.example\. SERVFAIL NOERROR",
            vec![q("a.example", "A"), q("a.example", "A").edns(1232)],
        ),
        (
            "    rewrite name exact b.example. a.example.",
            vec![q("b.example", "A"), q("b.example", "A").edns(1232)],
        ),
        (
            "    rewrite continue name exact b.example. a.example.
    rewrite rcode a.example. SERVFAIL REFUSED",
            vec![q("b.example", "A"), q("c.example", "A")],
        ),
        // A name hosts answers still comes back rewritten.
        (
            "    rewrite name exact api.test. kubernetes.default.svc.cluster.local.",
            vec![q("api.test", "A")],
        ),
    ];
    let d = cases_differ(&coredns, &dead, &cases);
    assert!(d.is_empty(), "{}", d.join("\n\n"));
}

#[test]
fn dns_metrics_of_rewritten_queries_agree() {
    // CoreDNS's rewrite has no metrics of its own; the server's count the
    // rewritten queries as asked, with the same plugin label.
    let coredns = coredns_or_skip!();
    let (_up, port) = upstream(&coredns, UPSTREAM);
    for head in ["    errors\n", ""] {
        let corefile = format!(
            ".:@PORT@ {{\n    bind 127.0.0.1\n    prometheus 127.0.0.1:@PORT_METRICS@\n{head}    rewrite continue name prefix www a\n    rewrite name exact b.example. a.example.\n    rewrite rcode nx.test. NXDOMAIN NOERROR\n    forward . 127.0.0.1:@UP@\n}}\n"
        );
        let diff = differential(&coredns, &corefile, &port);
        let qs = [
            q("b.example", "A"),
            q("www.x.example", "A"),
            q("c.example", "A").edns(1232),
            q("nx.test", "A"),
            q("sf.test", "A"),
        ];
        let _ = disagreements(&diff, &qs);
        let d = clusterdns_test_support::compare_metrics(
            &diff.reference.metrics(),
            diff.reference.addr.port(),
            &diff.candidate.metrics(),
            diff.candidate.addr.port(),
            &["coredns_dns_", "coredns_plugin_enabled"],
        );
        assert!(d.is_empty(), "{head}:\n{}", d.join("\n"));
    }
}
