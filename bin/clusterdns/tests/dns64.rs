//! *dns64* against the reference CoreDNS: AAAA synthesis for IPv6 and
//! IPv4 clients with each option, over a loopback upstream (the reference
//! with templates: names with only A records, both, a CNAME, NXDOMAIN,
//! NODATA with and without a SOA, SERVFAIL), the metric, and the setup
//! errors. Each test skips when the reference binary is not built, unless
//! `CLUSTERDNS_REQUIRE_RIG=1`.

mod differ;

use std::net::{Ipv6Addr, SocketAddr};
use std::time::Duration;

use clusterdns_test_support::{
    Differential, Query, Transport, TtlMode, compare, coredns_or_skip, exchange,
};
use differ::{
    assert_metrics_agree, differential, disagreements, setup_errors_read_as_coredns, upstream,
};

const UPSTREAM: &str = r#".:@PORT@ {
    bind 127.0.0.1
    template IN A v4.example {
        answer "{{ .Name }} 900 IN A 192.0.2.33" "{{ .Name }} 20 IN A 198.51.100.7"
    }
    template IN AAAA v4.example {
        authority "v4.example. 30 IN SOA ns.v4.example. h.v4.example. 1 60 60 60 30"
    }
    template IN A nosoa.example {
        answer "{{ .Name }} 900 IN A 192.0.2.44"
        additional "extra.nosoa.example. 60 IN TXT \"kept\""
    }
    template IN AAAA nosoa.example {
    }
    template IN A dual.example {
        answer "{{ .Name }} 60 IN A 192.0.2.2"
    }
    template IN AAAA dual.example {
        answer "{{ .Name }} 60 IN AAAA 2001:db8::2"
    }
    template IN ANY alias.example {
        answer "{{ .Name }} 60 IN CNAME www.v4.example."
    }
    template IN ANY nx.example {
        rcode NXDOMAIN
        authority "nx.example. 30 IN SOA ns.nx.example. h.nx.example. 1 60 60 60 30"
    }
    template IN AAAA broken.example {
        rcode SERVFAIL
    }
    template IN A broken.example {
        answer "{{ .Name }} 60 IN A 192.0.2.99"
    }
}
"#;

/// The block under test: listening on 127.0.0.1 and ::1.
fn corefile(dns64: &str, cache: bool) -> String {
    let cache = if cache { "    cache 30\n" } else { "" };
    format!(
        ".:@PORT@ {{\n    bind 127.0.0.1 ::1\n    errors\n    prometheus 127.0.0.1:@PORT_METRICS@\n{dns64}{cache}    forward . 127.0.0.1:@UP@\n}}\n"
    )
}

/// The queries, each over UDP and TCP to both servers' IPv6 address.
fn v6_disagreements(diff: &Differential, queries: &[Query]) -> Vec<String> {
    let v6 = |port: u16| SocketAddr::from((Ipv6Addr::LOCALHOST, port));
    let mut out = Vec::new();
    for q in queries {
        for t in [Transport::Udp, Transport::Tcp] {
            let msg = q.to_wire().expect("query");
            let timeout = Duration::from_secs(3);
            let r = exchange(v6(diff.reference.addr.port()), &msg, t, timeout);
            let c = exchange(v6(diff.candidate.addr.port()), &msg, t, timeout);
            let d = compare(&r, &c, diff.ttl_mode());
            if !d.is_empty() {
                out.push(format!(
                    "{q} over {t:?} from ::1\n  {d:?}\n  reference: {}\n  candidate: {}",
                    r.summary(),
                    c.summary()
                ));
            }
        }
    }
    out
}

fn queries() -> Vec<Query> {
    let mut qs = Vec::new();
    for name in [
        "www.v4.example",
        "www.nosoa.example",
        "www.dual.example",
        "x.alias.example",
        "www.nx.example",
        "www.broken.example",
        "elsewhere.org",
    ] {
        qs.push(Query::new(name, "AAAA"));
        qs.push(Query::new(name, "AAAA").edns(1232).dnssec_ok());
        qs.push(Query::new(name, "A"));
    }
    qs.push(Query::new("www.v4.example", "AAAA").class("CH"));
    qs.push(Query::new("www.v4.example", "AAAA").rd(false));
    qs
}

#[test]
fn synthesis_agrees_for_each_option() {
    let coredns = coredns_or_skip!();
    let (_up, port) = upstream(&coredns, UPSTREAM);
    for (dns64, cache) in [
        ("    dns64\n", false),
        ("    dns64\n", true),
        ("    dns64 64:1337::/96\n", false),
        ("    dns64 2001:db8:122::/48\n", false),
        ("    dns64 {\n        prefix 2001:db8::/32\n    }\n", false),
        ("    dns64 {\n        translate_all\n    }\n", false),
        ("    dns64 {\n        allow_ipv4\n    }\n", true),
        (
            "    dns64 {\n        prefix 64:ff9b:1::/64\n        translate_all\n        allow_ipv4\n    }\n",
            false,
        ),
    ] {
        let mut diff = differential(&coredns, &corefile(dns64, cache), &[("UP", &port)]);
        if cache {
            // Each cache counts its TTLs down by the second on its own.
            diff = diff.with_ttl(TtlMode::Within(1));
        }
        let qs = queries();
        // Twice: with a cache, the second round partly from it.
        for _ in 0..2 {
            let mut d = disagreements(&diff, &qs);
            d.extend(v6_disagreements(&diff, &qs));
            assert!(d.is_empty(), "{dns64}{}", d.join("\n"));
        }
        // The A lookups went through the whole server again: counted as
        // queries of their own.
        let families = [
            "coredns_dns64_requests_translated_total",
            "coredns_dns_requests_total",
            "coredns_dns_responses_total",
        ];
        assert_metrics_agree(&diff, &families, dns64);
        if dns64 == "    dns64\n" {
            // The comparison above saw synthesis, not two servers passing
            // the upstream's NODATA through alike.
            let msg = Query::new("www.v4.example", "AAAA")
                .to_wire()
                .expect("query");
            let to = SocketAddr::from((Ipv6Addr::LOCALHOST, diff.candidate.addr.port()));
            let got = exchange(to, &msg, Transport::Udp, Duration::from_secs(3));
            let text = match got.response() {
                Some(r) => r.to_string(),
                None => got.summary(),
            };
            assert!(text.contains("64:ff9b::c000:221"), "{text}");
        }
    }
}

#[test]
fn dns64_setup_errors_read_as_coredns() {
    setup_errors_read_as_coredns(&[
        ".:@P@ {\n    dns64 a b\n    whoami\n}\n",
        ".:@P@ {\n    dns64 foo\n    whoami\n}\n",
        ".:@P@ {\n    dns64 10.0.0.0/8\n    whoami\n}\n",
        ".:@P@ {\n    dns64 64:ff9b::1/33\n    whoami\n}\n",
        ".:@P@ {\n    dns64 64:ff9b::/24\n    whoami\n}\n",
        ".:@P@ {\n    dns64 64:ff9b::/104\n    whoami\n}\n",
        ".:@P@ {\n    dns64 64:ff9b::/129\n    whoami\n}\n",
        ".:@P@ {\n    dns64 {\n        prefix\n    }\n    whoami\n}\n",
        ".:@P@ {\n    dns64 {\n        prefix foo\n    }\n    whoami\n}\n",
        ".:@P@ {\n    dns64 {\n        bogus\n    }\n    whoami\n}\n",
        ".:@P@ {\n    dns64 64:1337::/96 {\n        translate_all\n    }\n    whoami\n}\n",
        ".:@P@ {\n    dns64 {\n        translate_all\n        allow_ipv4\n    }\n    dns64 64:1337::/96\n    whoami\n}\n",
    ]);
}
