//! The differential harness against the real rig, with two reference CoreDNS
//! servers (no clusterdns needed): identical ones agree, differing ones are
//! reported, and intended differences pass a table.

use std::time::Duration;

use clusterdns_test_support::{
    Case, Difference, Differential, Outcome, Query, Rig, Section, ServerSpec, Table, TestNamespace,
    TtlMode, rig_or_skip,
};

const COREFILE: &str = "\
.:@PORT@ {
    bind 127.0.0.1
    ready 127.0.0.1:@PORT_READY@
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig @KUBECONFIG@
        ttl @TTL@
    }
}
";

/// A ClusterIP Service, a headless Service and its EndpointSlice in `ns`.
fn objects(ns: &str) -> String {
    format!(
        "\
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: {ns}}}
spec:
  ports: [{{name: http, port: 80, protocol: TCP}}]
---
apiVersion: v1
kind: Service
metadata: {{name: db, namespace: {ns}}}
spec:
  clusterIP: None
  ports: [{{name: pg, port: 5432, protocol: TCP}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: db-1
  namespace: {ns}
  labels: {{kubernetes.io/service-name: db}}
addressType: IPv4
ports: [{{name: pg, port: 5432, protocol: TCP}}]
endpoints:
- addresses: [10.244.1.10]
  hostname: db-0
  conditions: {{ready: true}}
- addresses: [10.244.1.11]
  conditions: {{ready: true}}
"
    )
}

fn coredns(rig: &Rig, name: &str, ttl: u32) -> ServerSpec {
    ServerSpec::coredns(rig, COREFILE)
        .named(name)
        .var("TTL", &ttl.to_string())
}

/// A namespace `prefix…` holding [`objects`], and two reference CoreDNS
/// servers on it, `a` and `b` (name, TTL), side by side.
fn two_coredns(
    rig: &Rig,
    prefix: &str,
    a: (&str, u32),
    b: (&str, u32),
) -> (TestNamespace, Differential) {
    let ns = rig.namespace(prefix).expect("namespace");
    rig.apply_yaml(&objects(ns.name())).expect("objects");
    let diff = Differential::between(Some(rig), coredns(rig, a.0, a.1), coredns(rig, b.0, b.1))
        .expect("start both");
    (ns, diff)
}

fn queries(ns: &str) -> Vec<Query> {
    let mut qs = Vec::new();
    for q in [
        Query::new(&format!("web.{ns}.svc.cluster.local"), "A"),
        Query::new(&format!("web.{ns}.svc.cluster.local"), "AAAA"),
        Query::new(&format!("db.{ns}.svc.cluster.local"), "A"),
        Query::new(&format!("db-0.db.{ns}.svc.cluster.local"), "A"),
        Query::new(&format!("_pg._tcp.db.{ns}.svc.cluster.local"), "SRV"),
        Query::new(&format!("_http._tcp.web.{ns}.svc.cluster.local"), "SRV").edns(1232),
        Query::new(&format!("missing.{ns}.svc.cluster.local"), "A"),
        Query::new("kubernetes.default.svc.cluster.local", "A").dnssec_ok(),
        Query::new("cluster.local", "SOA"),
        Query::new("example.org", "A"),
    ] {
        qs.push(q.clone());
        qs.push(q.tcp());
    }
    qs
}

#[test]
fn identical_coredns_servers_agree() {
    let rig = rig_or_skip!();
    let (ns, diff) = two_coredns(&rig, "harness-same", ("coredns-a", 5), ("coredns-b", 5));
    for q in queries(ns.name()) {
        let c = diff.query_settled(&q, Duration::from_secs(3));
        c.assert_agree();
        assert!(
            matches!(c.reference, Outcome::Response(_)),
            "no response to {q}: {}",
            c.reference.summary()
        );
    }
    // The objects really are served (not two servers agreeing on NXDOMAIN).
    let c = diff.query(&Query::new(
        &format!("db.{}.svc.cluster.local", ns.name()),
        "A",
    ));
    let r = c.reference.response().unwrap();
    assert_eq!(r.rcode_name(), "NOERROR");
    let mut ips: Vec<&str> = r.answer.iter().map(|rr| rr.rdata.as_str()).collect();
    ips.sort_unstable();
    assert_eq!(ips, ["10.244.1.10", "10.244.1.11"]);
}

#[test]
fn a_ttl_difference_is_reported() {
    let rig = rig_or_skip!();
    let (ns, diff) = two_coredns(
        &rig,
        "harness-ttl",
        ("coredns-ttl5", 5),
        ("coredns-ttl30", 30),
    );
    let name = format!("web.{}.svc.cluster.local", ns.name());
    let c = diff.query(&Query::new(&name, "A"));
    eprintln!("{c}");
    assert!(
        !c.agree(),
        "a TTL of 5 against 30 must be a difference:\n{c}"
    );
    assert!(
        c.differences.iter().any(|d| matches!(
            d,
            Difference::Ttl { section: Section::Answer, reference: 5, candidate: 30, record } if record.starts_with(&format!("{name}. IN A "))
        )),
        "expected an answer TTL difference 5 vs 30:\n{c}"
    );
    assert!(
        c.differences
            .iter()
            .all(|d| matches!(d, Difference::Ttl { .. })),
        "only TTLs differ:\n{c}"
    );
    // Ignoring TTLs, they agree.
    diff.query_with(&Query::new(&name, "A"), TtlMode::Ignore)
        .assert_agree();
    diff.query_with(&Query::new(&name, "A"), TtlMode::Within(25))
        .assert_agree();
}

#[test]
fn a_zone_difference_is_reported() {
    let rig = rig_or_skip!();
    let ns = rig.namespace("harness-zone").unwrap();
    rig.apply_yaml(&objects(ns.name())).unwrap();
    let other = COREFILE.replace("kubernetes cluster.local", "kubernetes other.local");
    let diff = Differential::between(
        Some(&rig),
        coredns(&rig, "coredns", 5),
        ServerSpec::coredns(&rig, &other)
            .named("coredns-other-zone")
            .var("TTL", "5"),
    )
    .unwrap();
    let c = diff.query(&Query::new(
        &format!("web.{}.svc.cluster.local", ns.name()),
        "A",
    ));
    eprintln!("{c}");
    assert!(
        c.differences.iter().any(|d| matches!(d, Difference::Rcode { reference, candidate } if reference == "NOERROR" && candidate != "NOERROR")),
        "expected an rcode difference:\n{c}"
    );
    assert!(
        c.differences.iter().any(|d| matches!(
            d,
            Difference::OnlyInReference {
                section: Section::Answer,
                ..
            }
        )),
        "expected the A record only in the reference:\n{c}"
    );
}

#[test]
fn table_passes_intended_differences_and_fails_the_others() {
    let rig = rig_or_skip!();
    let ns = rig.namespace("harness-table").unwrap();
    let web = format!("web.{}.svc.cluster.local", ns.name());
    let report = Table::new(COREFILE)
        .objects(&objects(ns.name()))
        .reference(coredns(&rig, "coredns-ttl5", 5))
        .candidate(coredns(&rig, "coredns-ttl30", 30))
        .settle(Duration::from_millis(300))
        .case(
            Case::new("ttl differs, intended", Query::new(&web, "A"))
                .intended_difference("the candidate runs with ttl 30"),
        )
        .case(Case::new("ttl differs, not intended", Query::new(&web, "A")).udp_and_tcp())
        .case(Case::new("ttl ignored", Query::new(&web, "A")).ttl(TtlMode::Ignore))
        .case(Case::new(
            "outside the zones agrees",
            Query::new("example.org", "A"),
        ))
        .case(
            Case::new(
                "soa minimum differs too",
                Query::new("nope.cluster.local", "A"),
            )
            .ttl(TtlMode::Ignore)
            .intended_difference("the SOA minimum follows the ttl option"),
        )
        .run(&rig)
        .unwrap();
    let failed: Vec<&str> = report.failures().map(|c| c.name.as_str()).collect();
    assert_eq!(failed, ["ttl differs, not intended"], "{report}");
    assert_eq!(report.cases[1].comparisons.len(), 2, "udp and tcp");
    assert!(
        report.cases[2].agree() && report.cases[3].agree(),
        "{report}"
    );
    let panic = std::panic::catch_unwind(|| report.assert_ok());
    assert!(
        panic.is_err(),
        "assert_ok must fail on an unintended difference"
    );
}

#[test]
fn servers_are_stopped_on_drop_even_on_panic() {
    let rig = rig_or_skip!();
    let mut addr = None;
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let diff = Differential::between(Some(&rig), coredns(&rig, "a", 5), coredns(&rig, "b", 5))
            .unwrap();
        addr = Some(diff.reference.addr);
        panic!("test failure while the servers run");
    }));
    assert!(result.is_err());
    let addr = addr.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "server on {addr} still runs after the panic"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
