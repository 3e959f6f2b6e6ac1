//! *template* against the reference CoreDNS: the README's examples, AKS's
//! two templates in a cluster-style Corefile, every field and function
//! the plugin reads, failures, CNAME chasing through the server and a
//! loopback upstream, the metrics, and the setup errors. Each test skips
//! when the reference binary is not built, unless `CLUSTERDNS_REQUIRE_RIG=1`.

mod differ;

use clusterdns_test_support::{Query, coredns_or_skip};
use differ::{
    assert_metrics_agree, assert_setup_errors_agree, differential, disagreements, upstream,
};

/// A loopback upstream (the reference) answering A and AAAA under
/// `example.`, and NXDOMAIN with a SOA for `gone.example.`.
const UPSTREAM: &str = r#".:@PORT@ {
    bind 127.0.0.1
    template IN ANY gone.example {
        rcode NXDOMAIN
        authority "gone.example. 30 IN SOA ns.gone.example. h.gone.example. 1 60 60 60 30"
    }
    template IN A example {
        answer "{{ .Name }} 30 IN A 192.0.2.9"
    }
    template IN AAAA example {
        answer "{{ .Name }} 30 IN AAAA 2001:db8::9"
    }
}
"#;

/// The README's examples in one server block, plus templates for every
/// field, failures and fallthrough zones.
const README: &str = r#".:@PORT@ {
    bind 127.0.0.1
    errors
    prometheus 127.0.0.1:@PORT_METRICS@
    forward . 127.0.0.1:@UP@
    template ANY ANY invalid {
        rcode NXDOMAIN
        authority "invalid. 60 {{ .Class }} SOA ns.invalid. hostmaster.invalid. (1 60 60 60 60)"
        ederror 21 "Blocked according to RFC2606"
    }
    template IN ANY example.com.dc1.example.com {
        rcode NXDOMAIN
        authority "{{ .Zone }} 60 IN SOA ns.example.com hostmaster.example.com (1 60 60 60 60)"
    }
    template IN ANY example.com {
        match "example\.com\.(dc1\.example\.com\.)$"
        rcode NXDOMAIN
        authority "{{ index .Match 1 }} 60 IN SOA ns.{{ index .Match 1 }} hostmaster.{{ index .Match 1 }} (1 60 60 60 60)"
        fallthrough
    }
    template IN A example {
        match (^|[.])ip-(?P<a>[0-9]*)-(?P<b>[0-9]*)-(?P<c>[0-9]*)-(?P<d>[0-9]*)[.]example[.]$
        answer "{{ .Name }} 60 IN A {{ .Group.a }}.{{ .Group.b }}.{{ .Group.c }}.{{ .Group.d }}"
        fallthrough
    }
    template IN A example {
        match "^ip0a(?P<b>[a-f0-9]{2})(?P<c>[a-f0-9]{2})(?P<d>[a-f0-9]{2})[.]example[.]$"
        answer "{{ .Name }} 60 IN A 10.{{ parseInt .Group.b 16 8 }}.{{ parseInt .Group.c 16 8 }}.{{ parseInt .Group.d 16 8 }}"
        fallthrough
    }
    template IN A example {
        match "^ip-(?P<a>10)-(?P<b>[0-9]*)-(?P<c>[0-9]*)-(?P<d>[0-9]*)[.]dc[.]example[.]$"
        match "^(?P<a>[0-9]*)[.](?P<b>[0-9]*)[.](?P<c>[0-9]*)[.](?P<d>[0-9]*)[.]ext[.]example[.]$"
        answer "{{ .Name }} 60 IN A {{ .Group.a}}.{{ .Group.b }}.{{ .Group.c }}.{{ .Group.d }}"
        fallthrough
    }
    template IN MX example {
        match ^ip-10-(?P<b>[0-9]*)-(?P<c>[0-9]*)-(?P<d>[0-9]*)[.]example[.]$
        answer "{{ .Name }} 60 IN MX 10 {{ .Name }}"
        additional "{{ .Name }} 60 IN A 10.{{ .Group.b }}.{{ .Group.c }}.{{ .Group.d }}"
        authority  "example. 60 IN NS ns0.example."
        authority  "example. 60 IN NS ns1.example."
        additional "ns0.example. 60 IN A 203.0.113.8" "ns1.example. 60 IN A 198.51.100.8"
        fallthrough
    }
    template IN TXT example {
        match "^(?P<x>[a-z]+)[.](?P<y>[a-z]+)?[.]?t[.]example[.]$"
        answer "{{ .Name }} 60 IN TXT \"{{ .Group.x }}\" \"{{ .Group.y }}\" \"{{ .Group.nope }}\" \"{{ index .Group \"nope\" }}\" \"{{ .Match }}\" \"{{ .Group }}\" \"{{ index .Match 2 }}\""
        answer "{{ .Name }} 60 IN TXT \"{{ .Remote }}\" \"{{ .Question.Name }}\" \"{{ .Question.Qtype }}\" \"{{ .Question.Qclass }}\" \"{{ .Type }}\" \"{{ .Class }}\" \"{{ .Zone }}\" \"{{ .Regex }}\" \"{{- .Meta \"x\" -}}\"  {{/* comment */}}"
        fallthrough
    }
    template IN A fail.example {
        match "^idx[.]"
        answer "{{ index .Match 3 }}.fail.example. 60 IN A 10.0.0.1"
        fallthrough
    }
    template IN A fail.example {
        match "^hex[.]"
        answer "{{ .Name }} 60 IN A 10.0.0.{{ parseInt \"zz\" 16 8 }}"
        fallthrough
    }
    template IN A fail.example {
        match "^rr[.]"
        answer "{{ .Name }} 60 IN A 10.0.0"
        fallthrough
    }
    template IN ANY foogle.com {
        match "^foogle\.com\.$"
        answer "foogle.com 60 IN CNAME ip-10-1-2-3.example"
    }
    template IN ANY far.com {
        answer "{{ .Name }} 60 IN CNAME www.gone.example." "{{ .Name }} 60 IN CNAME www.up.example."
    }
    template ANY ANY refused.example {
        rcode REFUSED
        ederror 18
    }
    template ANY ANY sf.example {
        rcode SERVFAIL
        answer "{{ .Name }} 60 IN A 10.0.0.1"
    }
    template ANY ANY notimp.example {
        rcode NOTIMP
        additional "x.notimp.example. 5 IN A 10.9.9.9"
    }
    template IN ANY anytype.example {
        answer "{{ .Name }} 60 IN TXT \"{{ .Type }}\" \"{{ .Class }}\""
    }
    template CH TXT chaos.example {
        answer "{{ .Name }} 0 CH TXT \"{{ .Class }}\""
    }
    template IN ANY nomatch.example {
        match "^only[.]"
        fallthrough sub.nomatch.example
    }
    template IN SERVFAIL.example {
    }
}
"#;

#[test]
fn readme_examples_and_every_field_agree() {
    let coredns = coredns_or_skip!();
    let (_up, port) = upstream(&coredns, UPSTREAM);
    // `template IN SERVFAIL.example` is not a type: drop that block.
    let corefile = README.replace("    template IN SERVFAIL.example {\n    }\n", "");
    let diff = differential(&coredns, &corefile, &[("UP", &port)]);
    let mut qs = Vec::new();
    for (name, t) in [
        ("foo.invalid", "A"),
        ("foo.invalid", "MX"),
        ("www.example.com.dc1.example.com", "A"),
        ("www.example.com", "A"),
        ("ip-10-1-2-3.example", "A"),
        ("a.b.ip-192-168-1-2.example", "A"),
        ("ip0a7b7b7b.example", "A"),
        ("ip0a7b7bzz.example", "A"),
        ("ip-10-5-6-7.dc.example", "A"),
        ("1.2.3.4.ext.example", "A"),
        ("ip-10-1-2-3.example", "MX"),
        ("ip-10-1-2-3.example", "ANY"),
        ("IP-10-1-2-3.Example", "A"),
        ("abc.t.example", "TXT"),
        ("abc.def.t.example", "TXT"),
        ("abc.t.example", "ANY"),
        ("idx.fail.example", "A"),
        ("hex.fail.example", "A"),
        ("rr.fail.example", "A"),
        ("foogle.com", "A"),
        ("foogle.com", "AAAA"),
        ("foogle.com", "MX"),
        ("x.far.com", "A"),
        ("x.far.com", "AAAA"),
        ("only.nomatch.example", "A"),
        ("x.nomatch.example", "A"),
        ("x.sub.nomatch.example", "A"),
        ("plain.example", "A"),
        ("plain.example", "AAAA"),
        ("www.gone.example", "A"),
    ] {
        qs.push(Query::new(name, t));
        qs.push(Query::new(name, t).edns(1232).dnssec_ok());
    }
    for (name, t) in [
        ("a.refused.example", "A"),
        ("a.sf.example", "A"),
        ("a.notimp.example", "MX"),
        ("x.anytype.example", "ANY"),
        ("x.anytype.example", "SRV"),
    ] {
        qs.push(Query::new(name, t));
        qs.push(Query::new(name, t).class("ANY"));
    }
    qs.push(Query::new("foo.invalid", "A").class("CH"));
    qs.push(Query::new("x.chaos.example", "TXT").class("CH"));
    qs.push(Query::new("x.chaos.example", "TXT"));
    qs.push(Query::new("ip-10-1-2-3.example", "A").rd(false));
    let d = disagreements(&diff, &qs);
    assert!(d.is_empty(), "{}", d.join("\n"));
    // The template failures *errors* logged, in Go's words.
    let failures = |s: &clusterdns_test_support::RunningServer| {
        let mut v: Vec<String> = s
            .log_all()
            .lines()
            .filter(|l| l.contains("executing"))
            .map(str::to_string)
            .collect();
        v.sort();
        v
    };
    let theirs = failures(&diff.reference);
    assert!(!theirs.is_empty(), "{}", diff.reference.log_all());
    assert_eq!(failures(&diff.candidate), theirs);
    // The lookups of CNAME targets went through the whole server again:
    // counted as queries of their own.
    let families = [
        "coredns_dns_requests_total",
        "coredns_dns_responses_total",
        "coredns_template_matches_total",
        "coredns_template_template_failures_total",
        "coredns_template_rr_failures_total",
    ];
    assert_metrics_agree(&diff, &families, "");
}

/// Number literals in a template read as Go's text/template reads them
/// (`strconv.ParseInt(text, 0, 64)` after its lexer): `010` is octal, base
/// prefixes and underscores are numbers, a sign is part of the literal.
#[test]
fn number_literals_read_as_go_reads_them() {
    let coredns = coredns_or_skip!();
    let literals = [
        "010", "0x1F", "0o17", "0b101", "1_000", "0x_1f", "+7", "-010", "0",
    ];
    let mut corefile = String::from(".:@PORT@ {\n    bind 127.0.0.1\n");
    for (i, n) in literals.iter().enumerate() {
        corefile.push_str(&format!(
            "    template IN TXT n{i}.example {{\n        answer \"{{{{ .Name }}}} 60 IN TXT {{{{ {n} }}}}\"\n    }}\n"
        ));
    }
    corefile.push_str("}\n");
    let diff = differential(&coredns, &corefile, &[]);
    let qs: Vec<Query> = (0..literals.len())
        .map(|i| Query::new(&format!("x.n{i}.example"), "TXT"))
        .collect();
    let d = disagreements(&diff, &qs);
    assert!(d.is_empty(), "{}", d.join("\n"));
    // And the answers are numbers, not errors both servers agree on.
    let a = diff.candidate.addr;
    let out = std::process::Command::new("dig")
        .args([&format!("@{}", a.ip()), "-p", &a.port().to_string()])
        .args(["x.n0.example", "TXT", "+short", "+tries=1"])
        .output()
        .expect("dig");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "\"8\"",
        "{out:?}"
    );
}

/// AKS's Corefile with its two templates, hosts in place of kubernetes.
const AKS: &str = r#".:@PORT@ {
    bind 127.0.0.1
    errors
    ready 127.0.0.1:@PORT_READY@
    hosts {
        10.0.0.1 api.cluster.local
        fallthrough
    }
    forward . 127.0.0.1:@UP@
    cache 30
    loop
    loadbalance
    template ANY ANY internal.cloudapp.net {
        match "^(?:[^.]+\.){4,}internal\.cloudapp\.net\.$"
        rcode NXDOMAIN
        fallthrough
    }
    template ANY ANY reddog.microsoft.com {
        rcode NXDOMAIN
    }
}
"#;

#[test]
fn aks_templates_agree() {
    let coredns = coredns_or_skip!();
    let (_up, port) = upstream(&coredns, UPSTREAM);
    // Each cache counts its TTLs down by the second on its own.
    let diff = differential(&coredns, AKS, &[("UP", &port)])
        .with_ttl(clusterdns_test_support::TtlMode::Within(1));
    let mut qs = Vec::new();
    for name in [
        "api.cluster.local",
        "kubernetes.default.svc.cluster.local.abcd.internal.cloudapp.net",
        "a.b.c.internal.cloudapp.net",
        "vm1.internal.cloudapp.net",
        "www.reddog.microsoft.com",
        "reddog.microsoft.com",
        "www.example",
    ] {
        for t in ["A", "AAAA", "TXT"] {
            qs.push(Query::new(name, t));
        }
    }
    // Twice: the second round partly from the cache.
    for _ in 0..2 {
        let d = disagreements(&diff, &qs);
        assert!(d.is_empty(), "{}", d.join("\n"));
    }
}

#[test]
fn template_setup_errors_read_as_coredns() {
    let coredns = coredns_or_skip!();
    let block = |body: &str| {
        format!(".:@P@ {{\n    template IN A {{\n        {body}\n    }}\n    whoami\n}}\n")
    };
    let mut cases: Vec<String> = [
        "match",
        "answer",
        "additional",
        "authority",
        "rcode",
        "rcode NOPE",
        "rcode nxdomain",
        "rcode NXDOMAIN extra",
        "ederror",
        "ederror x",
        "ederror 70000",
        "ederror 1 2 3",
        "foo",
        "var x 1",
        "upstream 8.8.8.8",
        "fallthrough a.example b.example",
        "answer \"{{ nope }}\"",
        "answer \"{{ .Group.1 }}\"",
        "answer \"{{ .Name }}\" \"{{ nope .Name }}\"",
    ]
    .iter()
    .map(|b| block(b))
    .collect();
    for line in [
        "template",
        "template IN",
        "template in A",
        "template IN a",
        "template FOO A",
        "template IN BOGUS",
        "template ANY ANY example.org 10.0.0.0/8",
    ] {
        cases.push(format!(".:@P@ {{\n    {line}\n    whoami\n}}\n"));
    }
    let cases: Vec<&str> = cases.iter().map(String::as_str).collect();
    assert_setup_errors_agree(&coredns, &cases);
}

/// A kubeadm-style cluster Corefile with templates in their usual place:
/// AAAA NODATA for the cluster zone (a common customisation for IPv4-only
/// clusters), AKS's NXDOMAIN for search-path completions. Needs the rig.
const CLUSTER: &str = r#".:@PORT@ {
    bind 127.0.0.1
    errors
    ready 127.0.0.1:@PORT_READY@
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig @KCFG@
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 30
    loadbalance
    template ANY AAAA cluster.local {
        rcode NOERROR
    }
    template ANY ANY internal.cloudapp.net {
        match "^(?:[^.]+\.){4,}internal\.cloudapp\.net\.$"
        rcode NXDOMAIN
        fallthrough
    }
    template IN ANY cluster.local {
        match "^(?:[^.]+\.)+svc\.cluster\.local\.[^.]+\.svc\.cluster\.local\.$"
        rcode NXDOMAIN
        authority "cluster.local. 30 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 30"
        fallthrough
    }
    forward . 127.0.0.1:@UP@
}
"#;

#[test]
fn templates_in_a_cluster_corefile_agree() {
    let Some(rig) = clusterdns_test_support::Rig::get() else {
        return;
    };
    let kc = rig.kubeconfig().display().to_string();
    let (_up, port) = upstream(&rig.coredns(), UPSTREAM);
    let diff = clusterdns_test_support::Differential::between(
        Some(&rig),
        clusterdns_test_support::ServerSpec::coredns(&rig, CLUSTER)
            .var("KCFG", &kc)
            .var("UP", &port),
        clusterdns_test_support::ServerSpec::clusterdns_at(differ::clusterdns(), CLUSTER)
            .var("KCFG", &kc)
            .var("UP", &port),
    )
    .expect("both servers start and sync");
    let mut qs = Vec::new();
    for name in [
        "kubernetes.default.svc.cluster.local",
        "kubernetes.default.svc.cluster.local.default.svc.cluster.local",
        "missing.default.svc.cluster.local",
        "vm.a.b.c.internal.cloudapp.net",
        "www.example",
    ] {
        for t in ["A", "AAAA", "SRV"] {
            qs.push(Query::new(name, t));
        }
    }
    qs.push(Query::new("1.0.96.10.in-addr.arpa", "PTR"));
    let d = disagreements(&diff, &qs);
    assert!(d.is_empty(), "{}", d.join("\n"));
    // Past the templates, kubernetes answered (not two SERVFAILs alike),
    // and the AAAA template took its query.
    let timeout = std::time::Duration::from_secs(3);
    let a = diff.candidate.query(
        &Query::new("kubernetes.default.svc.cluster.local", "A"),
        timeout,
    );
    let aaaa = diff.candidate.query(
        &Query::new("kubernetes.default.svc.cluster.local", "AAAA"),
        timeout,
    );
    let (Some(a), Some(aaaa)) = (a.response(), aaaa.response()) else {
        panic!("no replies: {} {}", a.summary(), aaaa.summary());
    };
    assert_eq!((a.rcode, a.answer.len()), (0, 1), "{a}");
    assert!(aaaa.flags.aa && aaaa.answer.is_empty(), "{aaaa}");
}

#[test]
fn cname_targets_come_back_as_large_as_the_client_takes() {
    let coredns = coredns_or_skip!();
    // 60 addresses: past 512 bytes, within 4096.
    let answers: Vec<String> = (1..=60)
        .map(|i| format!("\"{{{{ .Name }}}} 60 IN A 10.0.0.{i}\""))
        .collect();
    let up = format!(
        ".:@PORT@ {{\n    bind 127.0.0.1\n    template IN A big.example {{\n        answer {}\n    }}\n}}\n",
        answers.join(" ")
    );
    let (_up, port) = upstream(&coredns, &up);
    let corefile = ".:@PORT@ {\n    bind 127.0.0.1\n    template IN A alias.com {\n        answer \"alias.com 60 IN CNAME big.example\"\n    }\n    forward . 127.0.0.1:@UP@\n}\n";
    let diff = differential(&coredns, corefile, &[("UP", &port)]);
    let qs = [
        Query::new("alias.com", "A"),
        Query::new("alias.com", "A").edns(1232),
        Query::new("alias.com", "A").edns(4096).dnssec_ok(),
    ];
    let d = disagreements(&diff, &qs);
    assert!(d.is_empty(), "{}", d.join("\n"));
}
