//! The small plugins of issue 17 (bufsize, minimal, header, nsid, …)
//! against the reference CoreDNS: the same cluster-style Corefile to both,
//! the same queries, every answer compared. Each test skips when the
//! reference binary is not built (`scripts/rig build`), unless
//! `CLUSTERDNS_REQUIRE_RIG=1`.

use std::time::{Duration, Instant};

mod differ;

use differ::{
    assert_setup_errors_agree, differential, disagreements, setup_errors_read_as_coredns, upstream,
};

use clusterdns_test_support::{Query, RunningServer, coredns_or_skip, log_lines};

/// A hosts block with `n` addresses for `big.cluster.local` (a reply
/// larger than 1232 bytes once past 75 or so) and one for `api`.
fn hosts_block(n: u8) -> String {
    let mut s = String::from("    hosts {\n        10.0.0.1 api.cluster.local\n");
    for i in 0..n {
        s.push_str(&format!("        10.1.0.{i} big.cluster.local\n"));
    }
    s.push_str("        fallthrough\n    }\n");
    s
}

/// A cluster Corefile's head (errors, health, ready as kubeadm writes
/// them) with `plugins` added, then hosts in place of kubernetes.
fn cluster_corefile(plugins: &str, hosts: &str) -> String {
    format!(
        "cluster.local:@PORT@ {{\n    bind 127.0.0.1\n    errors\n{plugins}{hosts}    cache 30\n}}\n"
    )
}

/// Waits until `s` logged `n` query lines; their BUFSIZE fields.
fn logged_bufsizes(s: &RunningServer, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let lines = log_lines(&s.log_all());
        if lines.len() >= n || Instant::now() > deadline {
            return lines
                .iter()
                .map(|l| l.get("bufsize").unwrap_or("?").to_string())
                .collect();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn bufsize_caps_the_reply_and_what_is_forwarded() {
    let coredns = coredns_or_skip!();
    for plugins in ["    bufsize\n", "    bufsize 512\n", "    bufsize 4096\n"] {
        let corefile = cluster_corefile(plugins, &hosts_block(100));
        let diff = differential(&coredns, &corefile, &[]);
        let mut qs = Vec::new();
        for size in [0u16, 512, 1000, 1232, 1400, 4096, 65535] {
            for name in ["api.cluster.local", "big.cluster.local"] {
                let q = Query::new(name, "A");
                qs.push(if size == 0 { q } else { q.edns(size) });
            }
        }
        qs.push(Query::new("big.cluster.local", "A").edns(4096).dnssec_ok());
        let d = disagreements(&diff, &qs);
        assert!(d.is_empty(), "{plugins}{}", d.join("\n"));
    }
}

/// An upstream (the reference itself) that logs each query and answers
/// every A question under `example.` with one address.
const UPSTREAM: &str = ".:@PORT@ {
    bind 127.0.0.1
    log
    template IN A example {
        answer \"{{ .Name }} 60 IN A 10.0.0.1\"
    }
}
";

#[test]
fn bufsize_lowers_the_size_sent_upstream() {
    let coredns = coredns_or_skip!();
    // The upstream logs the payload size each query reached it with.
    let (up, port) = upstream(&coredns, UPSTREAM);
    let corefile = ".:@PORT@ {\n    bind 127.0.0.1\n    errors\n    bufsize 1100\n    forward . 127.0.0.1:@UP@\n}\n";
    let diff = differential(&coredns, corefile, &[("UP", &port)]);
    let qs = [
        Query::new("a.example", "A").edns(4096),
        Query::new("b.example", "A").edns(1000),
        Query::new("c.example", "A"),
    ];
    // Over UDP only: CoreDNS logs 65535 as the size of any TCP query.
    let d: Vec<String> = qs
        .iter()
        .map(|q| diff.query(q))
        .filter(|c| !c.agree())
        .map(|c| c.to_string())
        .collect();
    // The reference went first each time: its size, then ours.
    let sizes = logged_bufsizes(&up, qs.len() * 2);
    assert_eq!(sizes.len(), qs.len() * 2, "{}", up.log_all());
    for pair in sizes.chunks(2) {
        assert_eq!(pair[0], pair[1], "upstream saw {sizes:?}");
    }
    assert_eq!(sizes, ["1100", "1100", "1000", "1000", "512", "512"]);
    assert!(d.is_empty(), "{}", d.join("\n"));
}

#[test]
fn bufsize_setup_errors_read_as_coredns() {
    setup_errors_read_as_coredns(&[
        ".:@P@ {\n    bufsize 511\n    whoami\n}\n",
        ".:@P@ {\n    bufsize 4097\n    whoami\n}\n",
        ".:@P@ {\n    bufsize x\n    whoami\n}\n",
        ".:@P@ {\n    bufsize 1232 1232\n    whoami\n}\n",
        ".:@P@ {\n    bufsize\n    bufsize 600\n    whoami\n}\n",
        ".:@P@ {\n    bufsize 512 {\n        foo\n    }\n    whoami\n}\n",
    ]);
}

/// An upstream (the reference) whose replies have authority and
/// additional sections: a full answer, NXDOMAIN and NODATA with a SOA, a
/// delegation.
const SECTIONS_UPSTREAM: &str = r#".:@PORT@ {
    bind 127.0.0.1
    template IN A full.example {
        answer "{{ .Name }} 60 IN A 10.0.0.1"
        authority "full.example. 60 IN NS ns.full.example."
        additional "ns.full.example. 60 IN A 10.0.0.53"
    }
    template IN A nx.example {
        rcode NXDOMAIN
        authority "nx.example. 60 IN SOA ns.nx.example. host.nx.example. 1 7200 1800 86400 30"
        additional "ns.nx.example. 60 IN A 10.0.0.53"
    }
    template IN A nodata.example {
        authority "nodata.example. 60 IN SOA ns.nodata.example. host.nodata.example. 1 7200 1800 86400 30"
    }
    template IN A deleg.example {
        authority "deleg.example. 60 IN NS ns.deleg.example."
        additional "ns.deleg.example. 60 IN A 10.0.0.54"
    }
}
"#;

#[test]
fn minimal_trims_what_coredns_trims() {
    let coredns = coredns_or_skip!();
    let (_up, port) = upstream(&coredns, SECTIONS_UPSTREAM);
    for plugins in ["    cache 30\n    minimal\n", "    minimal\n"] {
        let corefile = format!(
            ".:@PORT@ {{\n    bind 127.0.0.1\n    errors\n{plugins}    forward . 127.0.0.1:@UP@\n}}\n"
        );
        let diff = differential(&coredns, &corefile, &[("UP", &port)]);
        let mut qs = Vec::new();
        for name in [
            "full.example",
            "nx.example",
            "nodata.example",
            "deleg.example",
        ] {
            qs.push(Query::new(name, "A"));
            qs.push(Query::new(name, "A").edns(1232));
            qs.push(Query::new(name, "A").edns(4096).dnssec_ok());
        }
        // Twice: the second round comes from the cache where there is one.
        for _ in 0..2 {
            let d = disagreements(&diff, &qs);
            assert!(d.is_empty(), "{plugins}{}", d.join("\n"));
        }
    }
}

#[test]
fn minimal_setup_errors_read_as_coredns() {
    setup_errors_read_as_coredns(&[
        ".:@P@ {\n    minimal foo\n    whoami\n}\n",
        ".:@P@ {\n    minimal\n    minimal\n    whoami\n}\n",
        ".:@P@ {\n    minimal {\n        foo\n    }\n    whoami\n}\n",
    ]);
}

#[test]
fn header_rules_agree_on_owned_cached_and_forwarded_replies() {
    let coredns = coredns_or_skip!();
    let (_up, port) = upstream(&coredns, SECTIONS_UPSTREAM);
    let forward = "    forward example 127.0.0.1:@UP@\n";
    for rules in [
        "response set ra aa\n        response clear rd",
        "response clear ra\n        response set rd",
        "query clear rd",
        "query set rd\n        response set aa",
        "query set rd\n        query clear rd\n        response clear aa ra",
    ] {
        let plugins = format!("    header {{\n        {rules}\n    }}\n");
        let corefile = cluster_corefile(&plugins, &hosts_block(3)).replace(
            "    cache 30\n}",
            &format!("    cache 30\n}}\nexample:@PORT@ {{\n    bind 127.0.0.1\n    cache 30\n{plugins}{forward}}}"),
        );
        let diff = differential(&coredns, &corefile, &[("UP", &port)]);
        let mut qs = Vec::new();
        for name in [
            "api.cluster.local",
            "big.cluster.local",
            // Past hosts' fallthrough the chain runs out: the server's
            // SERVFAIL, which the rules leave alone.
            "missing.cluster.local",
            "full.example",
            "nx.example",
        ] {
            qs.push(Query::new(name, "A"));
            qs.push(Query::new(name, "A").rd(false));
            qs.push(Query::new(name, "A").edns(1232));
        }
        // Twice: the second round comes from the cache.
        for _ in 0..2 {
            let d = disagreements(&diff, &qs);
            assert!(d.is_empty(), "{rules}\n{}", d.join("\n"));
        }
    }
}

#[test]
fn header_setup_errors_read_as_coredns() {
    let coredns = coredns_or_skip!();
    let block =
        |rules: &str| format!(".:@P@ {{\n    header {{\n        {rules}\n    }}\n    whoami\n}}\n");
    let mut cases: Vec<String> = [
        "foo set ra",
        "query",
        "response set",
        "query flip rd",
        "response set cd",
        "Response SET RA\n        QUERY Clear RD",
    ]
    .iter()
    .map(|r| block(r))
    .collect();
    cases.push(".:@P@ {\n    header\n    whoami\n}\n".into());
    cases.push(".:@P@ {\n    header foo\n    whoami\n}\n".into());
    let cases: Vec<&str> = cases.iter().map(String::as_str).collect();
    assert_setup_errors_agree(&coredns, &cases);
}

#[test]
fn header_query_rules_reach_the_servers_errors_without_a_cache() {
    let coredns = coredns_or_skip!();
    // No cache before header: CoreDNS's server answers its SERVFAIL from
    // the query as header changed it.
    for rules in ["query clear rd", "query set rd\n        response set aa"] {
        let corefile = format!(
            ".:@PORT@ {{\n    bind 127.0.0.1\n    errors\n    header {{\n        {rules}\n    }}\n{}}}\n",
            hosts_block(2)
        );
        let diff = differential(&coredns, &corefile, &[]);
        let qs = [
            Query::new("api.cluster.local", "A"),
            Query::new("api.cluster.local", "A").rd(false),
            Query::new("missing.cluster.local", "A"),
            Query::new("missing.cluster.local", "A")
                .rd(false)
                .edns(1232),
        ];
        let d = disagreements(&diff, &qs);
        assert!(d.is_empty(), "{rules}\n{}", d.join("\n"));
    }
}

/// A query for `name` A with RD and an OPT record of payload size `size`
/// carrying `options` (`(code, data)`), as bytes.
fn query_with_options(name: &str, size: u16, do_bit: bool, options: &[(u16, &[u8])]) -> Vec<u8> {
    let mut m = vec![0x4a, 0x17, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1];
    for label in name.trim_end_matches('.').split('.') {
        m.push(u8::try_from(label.len()).expect("short label"));
        m.extend_from_slice(label.as_bytes());
    }
    m.extend_from_slice(&[0, 0, 1, 0, 1, 0, 0, 41]);
    m.extend_from_slice(&size.to_be_bytes());
    m.extend_from_slice(&[0, 0, if do_bit { 0x80 } else { 0 }, 0]);
    let rdata: Vec<u8> = options
        .iter()
        .flat_map(|(code, data)| {
            let len = u16::try_from(data.len()).expect("short option");
            [code.to_be_bytes(), len.to_be_bytes()]
                .concat()
                .into_iter()
                .chain(data.iter().copied())
        })
        .collect();
    m.extend_from_slice(&u16::try_from(rdata.len()).expect("short").to_be_bytes());
    m.extend_from_slice(&rdata);
    m
}

#[test]
fn nsid_answers_who_asks_as_coredns() {
    use clusterdns_test_support::Transport;
    let coredns = coredns_or_skip!();
    let (_up, port) = upstream(&coredns, SECTIONS_UPSTREAM);
    let cookie: &[u8] = b"\x01\x02\x03\x04\x05\x06\x07\x08";
    for nsid in [
        "    nsid Use The Force\n",
        "    nsid clusterdns-test\n    bufsize 1232\n",
    ] {
        let corefile = cluster_corefile(nsid, &hosts_block(3)).replace(
            "    cache 30\n}",
            &format!("    cache 30\n}}\nexample:@PORT@ {{\n    bind 127.0.0.1\n{nsid}    cache 30\n    forward . 127.0.0.1:@UP@\n}}"),
        );
        let diff = differential(&coredns, &corefile, &[("UP", &port)]);
        let mut failed = Vec::new();
        for name in [
            "api.cluster.local",
            "missing.cluster.local",
            "full.example",
            "nx.example",
        ] {
            // Twice: the second round of the forwarded names is cached.
            for _ in 0..2 {
                for msg in [
                    query_with_options(name, 4096, false, &[(3, b"")]),
                    query_with_options(name, 1232, true, &[(3, b""), (10, cookie)]),
                    query_with_options(name, 1232, false, &[(10, cookie)]),
                    query_with_options(name, 512, false, &[]),
                ] {
                    for t in [Transport::Udp, Transport::Tcp] {
                        let c = diff.query_raw(&msg, t);
                        if !c.agree() {
                            failed.push(c.to_string());
                        }
                    }
                }
            }
        }
        let d = disagreements(&diff, &[Query::new("api.cluster.local", "A").edns(1232)]);
        failed.extend(d);
        assert!(failed.is_empty(), "{nsid}{}", failed.join("\n"));
    }
}

#[test]
fn nsid_setup_errors_read_as_coredns() {
    setup_errors_read_as_coredns(&[
        ".:@P@ {\n    nsid a\n    nsid b\n    whoami\n}\n",
        ".:@P@ {\n    nsid\n    whoami\n}\n",
        ".:@P@ {\n    nsid \"two words\" three\n    whoami\n}\n",
    ]);
}

#[test]
fn local_answers_as_coredns() {
    let coredns = coredns_or_skip!();
    for plugins in [
        "    local\n",
        "    local {\n        localhost_prefix off\n    }\n",
        "    local {\n        localhost_prefix on\n    }\n",
    ] {
        // A root block, where local usually sits in front of forward.
        let corefile = format!(
            ".:@PORT@ {{\n    bind 127.0.0.1\n    errors\n{plugins}{}}}\n",
            hosts_block(1).replace("api.cluster.local", "localhost.example.org")
        );
        let diff = differential(&coredns, &corefile, &[]);
        let mut qs = Vec::new();
        for name in [
            "localhost",
            "LocalHost",
            "foo.localhost",
            "a.b.LOCALHOST",
            "localhost.example.org",
            "localhost.cluster.local",
            "localhostx",
            "xlocalhost",
            "0.in-addr.arpa",
            "127.in-addr.arpa",
            "255.in-addr.arpa",
            "1.0.0.127.in-addr.arpa",
            "1.0.0.127.IN-ADDR.ARPA",
            "2.0.0.127.in-addr.arpa",
            "5.255.in-addr.arpa",
            "1.0.0.10.in-addr.arpa",
        ] {
            for t in ["A", "AAAA", "PTR", "SOA", "NS", "MX", "ANY"] {
                qs.push(Query::new(name, t));
            }
        }
        qs.push(Query::new("foo.localhost", "A").edns(1232).dnssec_ok());
        let d = disagreements(&diff, &qs);
        assert!(d.is_empty(), "{plugins}{}", d.join("\n"));
    }
}

#[test]
fn local_counts_localhost_names_as_coredns() {
    let coredns = coredns_or_skip!();
    let corefile =
        ".:@PORT@ {\n    bind 127.0.0.1\n    prometheus 127.0.0.1:@PORT_METRICS@\n    local\n}\n";
    let diff = differential(&coredns, corefile, &[]);
    for name in [
        "localhost",
        "a.localhost",
        "localhost.example",
        "b.localhost",
    ] {
        let _ = diff.query(&Query::new(name, "A"));
    }
    let count = |s: &RunningServer| {
        let port = s.port("PORT_METRICS").expect("a metrics port");
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let r = clusterdns_test_support::http_request(addr, "GET", "/metrics", &[]);
        String::from_utf8_lossy(&r.body)
            .lines()
            .find(|l| l.starts_with("coredns_local_localhost_requests_total"))
            .map(str::to_string)
    };
    assert_eq!(count(&diff.candidate), count(&diff.reference));
    assert_eq!(
        count(&diff.reference).as_deref(),
        Some("coredns_local_localhost_requests_total 3")
    );
}

#[test]
fn local_setup_errors_read_as_coredns() {
    setup_errors_read_as_coredns(&[
        ".:@P@ {\n    local foo\n}\n",
        ".:@P@ {\n    local {\n        localhost_prefix\n    }\n}\n",
        ".:@P@ {\n    local {\n        localhost_prefix maybe\n    }\n}\n",
        ".:@P@ {\n    local {\n        localhost_prefix on off\n    }\n}\n",
        ".:@P@ {\n    local {\n        bogus\n    }\n}\n",
        ".:@P@ {\n    local\n    local\n}\n",
    ]);
}

#[test]
fn metadata_changes_no_answer_and_its_errors_read_as_coredns() {
    let coredns = coredns_or_skip!();
    let corefile = cluster_corefile("", &hosts_block(3)).replace(
        "    bind 127.0.0.1\n",
        "    bind 127.0.0.1\n    metadata cluster.local\n",
    );
    let diff = differential(&coredns, &corefile, &[]);
    let qs = [
        Query::new("api.cluster.local", "A"),
        Query::new("big.cluster.local", "A").edns(1232),
        Query::new("missing.cluster.local", "A"),
    ];
    let d = disagreements(&diff, &qs);
    assert!(d.is_empty(), "{}", d.join("\n"));
    assert_setup_errors_agree(
        &coredns,
        &[
            ".:@P@ {\n    metadata\n    whoami\n}\n",
            ".:@P@ {\n    metadata a.example b.example\n    whoami\n}\n",
            ".:@P@ {\n    metadata {\n        foo\n    }\n    whoami\n}\n",
            ".:@P@ {\n    metadata\n    metadata\n    whoami\n}\n",
        ],
    );
}

#[test]
fn cancel_ends_forwards_attempts_as_coredns() {
    let coredns = coredns_or_skip!();
    // An upstream that never answers: each attempt runs to forward's read
    // timeout; without cancel forward keeps trying for five seconds.
    let (_up, port) = upstream(
        &coredns,
        ".:@PORT@ {\n    bind 127.0.0.1\n    erratic {\n        drop 1\n    }\n}\n",
    );
    let corefile =
        ".:@PORT@ {\n    bind 127.0.0.1\n    cancel 100ms\n    forward . 127.0.0.1:@UP@\n}\n";
    let diff =
        differential(&coredns, corefile, &[("UP", &port)]).with_timeout(Duration::from_secs(8));
    let q = Query::new("dropped.example", "A");
    let timed = |s: &RunningServer| {
        let t = Instant::now();
        let o = s.query(&q, Duration::from_secs(8));
        (o.response().map(|r| r.rcode_name()), t.elapsed())
    };
    let (rr, rt) = timed(&diff.reference);
    let (cr, ct) = timed(&diff.candidate);
    assert_eq!(cr, rr);
    assert_eq!(rr.as_deref(), Some("SERVFAIL"));
    // One attempt each (about forward's read timeout), not five seconds.
    assert!(rt < Duration::from_millis(3500), "reference took {rt:?}");
    assert!(ct < Duration::from_millis(3500), "clusterdns took {ct:?}");
}

#[test]
fn cancel_setup_errors_read_as_coredns() {
    setup_errors_read_as_coredns(&[
        ".:@P@ {\n    cancel x\n    whoami\n}\n",
        ".:@P@ {\n    cancel -1s\n    whoami\n}\n",
        ".:@P@ {\n    cancel 0s\n    whoami\n}\n",
        ".:@P@ {\n    cancel 1s 2s\n    whoami\n}\n",
        ".:@P@ {\n    cancel 1s\n    cancel 2s\n    whoami\n}\n",
    ]);
}
