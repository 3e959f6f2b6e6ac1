//! Unit tests of *kubernetes*: setup table, and answers from an index
//! loaded from `testdata/objects.yaml` (the fixture the binary and
//! differential tests use too), checked as zone-file text.

use std::path::Path;
use std::sync::Arc;

use clusterdns_contract::Plugin;
use clusterdns_contract::testing::{self, Reply};
use clusterdns_wire::{Rcode, Rtype};

use super::DEF;
use crate::testutil::{run, setup_err, setup_in};
use crate::whoami::Whoami;

/// The shared fixture.
pub(crate) const OBJECTS: &str = include_str!("testdata/objects.yaml");

/// What every cluster has, plus a pod with an IP (for `pods verified`).
const BASE: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: default}
---
apiVersion: v1
kind: Namespace
metadata: {name: kube-system}
---
apiVersion: v1
kind: Service
metadata: {name: kubernetes, namespace: default}
spec:
  clusterIP: 10.96.0.1
  ports: [{name: https, port: 443, protocol: TCP}]
---
apiVersion: v1
kind: Pod
metadata: {name: pod-b, namespace: kplug}
spec: {containers: [{name: c, image: x}]}
status: {phase: Running, podIP: 10.244.7.11, podIPs: [{ip: 10.244.7.11}]}
---
"#;

/// Sets up `kubernetes` with `options` on the fixture; `next`: add whoami
/// after it (to see fallthrough).
fn plugins_with(options: &str, next: bool) -> Vec<Arc<dyn Plugin>> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cluster.yaml"), format!("{BASE}{OBJECTS}")).unwrap();
    let cf = format!(
        ".:53 {{\n kubernetes cluster.local in-addr.arpa ip6.arpa {{\n  snapshot cluster.yaml\n{options}\n }}\n}}"
    );
    let r = setup_in(DEF, &cf, dir.path()).unwrap_or_else(|e| panic!("{cf}: {e}"));
    let mut v = r.plugins;
    if next {
        v.push(Arc::new(Whoami));
    }
    v
}

fn plugins(options: &str) -> Vec<Arc<dyn Plugin>> {
    plugins_with(options, false)
}

fn ask(p: &[Arc<dyn Plugin>], name: &str, qtype: Rtype) -> Reply {
    run(p, &testing::query(name, qtype))
}

/// Asserts rcode and answer (zone-file lines, in order); negative replies
/// must carry the SOA.
#[track_caller]
fn check(p: &[Arc<dyn Plugin>], name: &str, qtype: Rtype, rcode: Rcode, answer: &[&str]) -> Reply {
    let r = ask(p, name, qtype);
    assert_eq!(r.rcode, rcode, "{name} {qtype}: {r:#?}");
    assert_eq!(r.answer, answer, "{name} {qtype}");
    assert!(r.header.aa(), "{name} {qtype}: AA");
    if answer.is_empty() {
        assert_eq!(
            r.authority.len(),
            1,
            "{name} {qtype}: SOA in authority: {r:#?}"
        );
        assert!(r.authority[0].contains("\tSOA\t"), "{r:#?}");
    }
    r
}

const NX: Rcode = Rcode::NXDOMAIN;
const OK: Rcode = Rcode::NOERROR;

const Z: &str = "cluster.local.";

fn n(name: &str) -> String {
    format!("{name}.{Z}")
}

#[test]
fn cluster_ip_services() {
    let p = plugins("");
    check(
        &p,
        &n("svc1.kplug.svc"),
        Rtype::A,
        OK,
        &["svc1.kplug.svc.cluster.local.\t5\tIN\tA\t10.96.77.1"],
    );
    // Wrong family: NODATA.
    check(&p, &n("svc1.kplug.svc"), Rtype::AAAA, OK, &[]);
    check(
        &p,
        &n("dual.kplug.svc"),
        Rtype::AAAA,
        OK,
        &["dual.kplug.svc.cluster.local.\t5\tIN\tAAAA\tfd00:10:96::7702"],
    );
    check(
        &p,
        &n("dual.kplug.svc"),
        Rtype::A,
        OK,
        &["dual.kplug.svc.cluster.local.\t5\tIN\tA\t10.96.77.2"],
    );
    check(&p, &n("v6only.kplug.svc"), Rtype::A, OK, &[]);
    // Unknown service, namespace, and bad grammar: NXDOMAIN.
    check(&p, &n("nope.kplug.svc"), Rtype::A, NX, &[]);
    check(&p, &n("svc1.nons.svc"), Rtype::A, NX, &[]);
    check(&p, &n("svc1.kplug"), Rtype::A, NX, &[]);
    check(&p, &n("a.b.c.svc1.kplug.svc"), Rtype::A, NX, &[]);
    // Namespace, svc and apex: NODATA.
    check(&p, &n("kplug.svc"), Rtype::A, OK, &[]);
    check(&p, &n("svc"), Rtype::A, OK, &[]);
    check(&p, Z, Rtype::A, OK, &[]);
    // A on a port name answers the ClusterIP (CoreDNS quirk); an unknown port is NXDOMAIN.
    check(
        &p,
        &n("_http._tcp.svc1.kplug.svc"),
        Rtype::A,
        OK,
        &["_http._tcp.svc1.kplug.svc.cluster.local.\t5\tIN\tA\t10.96.77.1"],
    );
    check(&p, &n("_http._udp.svc1.kplug.svc"), Rtype::A, NX, &[]);
    // Endpoint names of a ClusterIP service come from its slices (ready only).
    check(
        &p,
        &n("10-244-7-1.svc1.kplug.svc"),
        Rtype::A,
        OK,
        &["10-244-7-1.svc1.kplug.svc.cluster.local.\t5\tIN\tA\t10.244.7.1"],
    );
    check(&p, &n("10-244-7-2.svc1.kplug.svc"), Rtype::A, NX, &[]);
}

#[test]
fn case_is_kept() {
    let p = plugins("");
    let r = check(
        &p,
        "SVC1.Kplug.SVC.Cluster.Local.",
        Rtype::A,
        OK,
        &["SVC1.Kplug.SVC.Cluster.Local.\t5\tIN\tA\t10.96.77.1"],
    );
    assert!(r.additional.is_empty());
    let r = check(&p, "nope.kplug.svc.CLUSTER.local.", Rtype::A, NX, &[]);
    assert!(
        r.authority[0].starts_with(
            "CLUSTER.local.\t5\tIN\tSOA\tns.dns.CLUSTER.local. hostmaster.CLUSTER.local. "
        ),
        "{r:?}"
    );
    let r = check(
        &p,
        "_HTTP._tcp.svc1.kplug.svc.Cluster.Local.",
        Rtype::SRV,
        OK,
        &[
            "_HTTP._tcp.svc1.kplug.svc.Cluster.Local.\t5\tIN\tSRV\t0 100 80 svc1.kplug.svc.Cluster.Local.",
        ],
    );
    assert_eq!(
        r.additional,
        ["svc1.kplug.svc.Cluster.Local.\t5\tIN\tA\t10.96.77.1"]
    );
}

#[test]
fn headless_services() {
    let p = plugins("");
    // Ready addresses of every slice, de-duplicated, slice by slice.
    check(
        &p,
        &n("hdls.kplug.svc"),
        Rtype::A,
        OK,
        &[
            "hdls.kplug.svc.cluster.local.\t5\tIN\tA\t10.244.7.10",
            "hdls.kplug.svc.cluster.local.\t5\tIN\tA\t10.244.7.11",
            "hdls.kplug.svc.cluster.local.\t5\tIN\tA\t10.244.7.14",
        ],
    );
    check(
        &p,
        &n("hdls.kplug.svc"),
        Rtype::AAAA,
        OK,
        &[
            "hdls.kplug.svc.cluster.local.\t5\tIN\tAAAA\tfd00:10:244::7:20",
            "hdls.kplug.svc.cluster.local.\t5\tIN\tAAAA\tfd00:10:244::",
        ],
    );
    check(
        &p,
        &n("web-0.hdls.kplug.svc"),
        Rtype::A,
        OK,
        &["web-0.hdls.kplug.svc.cluster.local.\t5\tIN\tA\t10.244.7.10"],
    );
    check(&p, &n("web-0.hdls.kplug.svc"), Rtype::AAAA, OK, &[]);
    check(
        &p,
        &n("fd00-10-244--0.hdls.kplug.svc"),
        Rtype::AAAA,
        OK,
        &["fd00-10-244--0.hdls.kplug.svc.cluster.local.\t5\tIN\tAAAA\tfd00:10:244::"],
    );
    // Not ready, terminating, no slices, unknown endpoint: NXDOMAIN.
    check(&p, &n("10-244-7-12.hdls.kplug.svc"), Rtype::A, NX, &[]);
    check(&p, &n("10-244-7-13.hdls.kplug.svc"), Rtype::A, NX, &[]);
    check(&p, &n("notready.kplug.svc"), Rtype::A, NX, &[]);
    check(&p, &n("empty.kplug.svc"), Rtype::A, NX, &[]);
    check(&p, &n("web-1.hdls.kplug.svc"), Rtype::A, NX, &[]);
    // The pod name is only a label with endpoint_pod_names.
    check(&p, &n("pod-b.hdls.kplug.svc"), Rtype::A, NX, &[]);
    let p = plugins("  endpoint_pod_names");
    check(
        &p,
        &n("pod-b.hdls.kplug.svc"),
        Rtype::A,
        OK,
        &["pod-b.hdls.kplug.svc.cluster.local.\t5\tIN\tA\t10.244.7.11"],
    );
    check(&p, &n("10-244-7-11.hdls.kplug.svc"), Rtype::A, NX, &[]);
}

#[test]
fn srv_records() {
    let p = plugins("");
    let r = check(
        &p,
        &n("_http._tcp.hdls.kplug.svc"),
        Rtype::SRV,
        OK,
        &[
            "_http._tcp.hdls.kplug.svc.cluster.local.\t5\tIN\tSRV\t0 16 80 web-0.hdls.kplug.svc.cluster.local.",
            "_http._tcp.hdls.kplug.svc.cluster.local.\t5\tIN\tSRV\t0 16 80 10-244-7-11.hdls.kplug.svc.cluster.local.",
            "_http._tcp.hdls.kplug.svc.cluster.local.\t5\tIN\tSRV\t0 16 80 10-244-7-14.hdls.kplug.svc.cluster.local.",
            "_http._tcp.hdls.kplug.svc.cluster.local.\t5\tIN\tSRV\t0 16 80 fd00-10-244--7-20.hdls.kplug.svc.cluster.local.",
            "_http._tcp.hdls.kplug.svc.cluster.local.\t5\tIN\tSRV\t0 16 80 fd00-10-244--0.hdls.kplug.svc.cluster.local.",
        ],
    );
    assert_eq!(r.additional.len(), 5);
    // Two ports of one address, weights from the candidate count (2 → 50).
    let r = check(
        &p,
        &n("web-0.hdls.kplug.svc"),
        Rtype::SRV,
        OK,
        &[
            "web-0.hdls.kplug.svc.cluster.local.\t5\tIN\tSRV\t0 33 80 web-0.hdls.kplug.svc.cluster.local.",
            "web-0.hdls.kplug.svc.cluster.local.\t5\tIN\tSRV\t0 33 443 web-0.hdls.kplug.svc.cluster.local.",
        ],
    );
    assert_eq!(
        r.additional,
        ["web-0.hdls.kplug.svc.cluster.local.\t5\tIN\tA\t10.244.7.10"]
    );
    // ClusterIP: every port on the bare name; unnamed ports have SRV there only.
    check(
        &p,
        &n("svc1.kplug.svc"),
        Rtype::SRV,
        OK,
        &[
            "svc1.kplug.svc.cluster.local.\t5\tIN\tSRV\t0 50 80 svc1.kplug.svc.cluster.local.",
            "svc1.kplug.svc.cluster.local.\t5\tIN\tSRV\t0 50 53 svc1.kplug.svc.cluster.local.",
        ],
    );
    check(
        &p,
        &n("svc2.kplug.svc"),
        Rtype::SRV,
        OK,
        &["svc2.kplug.svc.cluster.local.\t5\tIN\tSRV\t0 100 8443 svc2.kplug.svc.cluster.local."],
    );
    check(
        &p,
        &n("_dns._udp.svc1.kplug.svc"),
        Rtype::SRV,
        OK,
        &[
            "_dns._udp.svc1.kplug.svc.cluster.local.\t5\tIN\tSRV\t0 100 53 svc1.kplug.svc.cluster.local.",
        ],
    );
    check(&p, &n("_dns._tcp.svc1.kplug.svc"), Rtype::SRV, NX, &[]);
    // Dual-stack: one SRV, weight 50, A and AAAA in additional.
    let r = check(
        &p,
        &n("_http._tcp.dual.kplug.svc"),
        Rtype::SRV,
        OK,
        &[
            "_http._tcp.dual.kplug.svc.cluster.local.\t5\tIN\tSRV\t0 50 80 dual.kplug.svc.cluster.local.",
        ],
    );
    assert_eq!(
        r.additional,
        [
            "dual.kplug.svc.cluster.local.\t5\tIN\tA\t10.96.77.2",
            "dual.kplug.svc.cluster.local.\t5\tIN\tAAAA\tfd00:10:96::7702",
        ]
    );
    // Portless: NODATA for SRV, addresses for A.
    check(&p, &n("portless.kplug.svc"), Rtype::SRV, OK, &[]);
    check(
        &p,
        &n("portless.kplug.svc"),
        Rtype::A,
        OK,
        &["portless.kplug.svc.cluster.local.\t5\tIN\tA\t10.244.7.30"],
    );
    // ExternalName: NODATA for SRV, NXDOMAIN under it.
    check(&p, &n("ext.kplug.svc"), Rtype::SRV, OK, &[]);
    check(&p, &n("_http._tcp.ext.kplug.svc"), Rtype::SRV, NX, &[]);
}

#[test]
fn external_names() {
    let p = plugins("");
    check(
        &p,
        &n("ext.kplug.svc"),
        Rtype::CNAME,
        OK,
        &["ext.kplug.svc.cluster.local.\t5\tIN\tCNAME\text.example.com."],
    );
    // No chain after this plugin: the CNAME alone.
    check(
        &p,
        &n("ext.kplug.svc"),
        Rtype::A,
        OK,
        &["ext.kplug.svc.cluster.local.\t5\tIN\tCNAME\text.example.com."],
    );
    // In-zone targets are resolved here, through chains.
    check(
        &p,
        &n("ext-in.kplug.svc"),
        Rtype::A,
        OK,
        &[
            "ext-in.kplug.svc.cluster.local.\t5\tIN\tCNAME\tsvc1.kplug.svc.cluster.local.",
            "svc1.kplug.svc.cluster.local.\t5\tIN\tA\t10.96.77.1",
        ],
    );
    check(
        &p,
        &n("ext-chain.kplug.svc"),
        Rtype::A,
        OK,
        &[
            "ext-chain.kplug.svc.cluster.local.\t5\tIN\tCNAME\text-in.kplug.svc.cluster.local.",
            "ext-in.kplug.svc.cluster.local.\t5\tIN\tCNAME\tsvc1.kplug.svc.cluster.local.",
            "svc1.kplug.svc.cluster.local.\t5\tIN\tA\t10.96.77.1",
        ],
    );
    // The target has no address of that family, or loops: NODATA.
    check(&p, &n("ext-in.kplug.svc"), Rtype::AAAA, OK, &[]);
    check(&p, &n("ext-loop.kplug.svc"), Rtype::A, OK, &[]);
    check(
        &p,
        &n("ext-v6.kplug.svc"),
        Rtype::AAAA,
        OK,
        &[
            "ext-v6.kplug.svc.cluster.local.\t5\tIN\tCNAME\tv6only.kplug.svc.cluster.local.",
            "v6only.kplug.svc.cluster.local.\t5\tIN\tAAAA\tfd00:10:96::7703",
        ],
    );
    check(&p, &n("svc1.kplug.svc"), Rtype::CNAME, OK, &[]);
}

#[test]
fn txt_soa_ns_and_other_types() {
    let p = plugins("");
    check(
        &p,
        &n("dns-version"),
        Rtype::TXT,
        OK,
        &["dns-version.cluster.local.\t28800\tIN\tTXT\t\"1.1.0\""],
    );
    check(&p, &n("svc1.kplug.svc"), Rtype::TXT, OK, &[]);
    check(&p, &n("nope.kplug.svc"), Rtype::TXT, NX, &[]);
    // Names that are NODATA for A are NXDOMAIN for TXT.
    check(&p, Z, Rtype::TXT, NX, &[]);
    check(&p, &n("kplug.svc"), Rtype::TXT, NX, &[]);
    check(&p, &n("dns-version"), Rtype::A, NX, &[]);
    let r = ask(&p, Z, Rtype::SOA);
    assert_eq!(r.answer.len(), 1);
    assert!(r.answer[0].starts_with(
        "cluster.local.\t5\tIN\tSOA\tns.dns.cluster.local. hostmaster.cluster.local. "
    ));
    assert!(r.answer[0].ends_with(" 7200 1800 86400 5"));
    // SOA below the apex: NODATA, even for names that do not exist.
    check(&p, &n("nope.kplug.svc"), Rtype::SOA, OK, &[]);
    // MX, HINFO, NS below the apex: like A.
    check(&p, &n("svc1.kplug.svc"), Rtype::MX, OK, &[]);
    check(&p, &n("nope.kplug.svc"), Rtype::MX, NX, &[]);
    check(&p, &n("nope.kplug.svc"), Rtype::HINFO, NX, &[]);
    check(&p, &n("svc1.kplug.svc"), Rtype::NS, OK, &[]);
    // AXFR reaching the plugin is refused.
    assert_eq!(ask(&p, Z, Rtype::AXFR).rcode, Rcode::REFUSED);
}

#[test]
fn apex_soa_ttl_is_capped() {
    let p = plugins("  ttl 3600");
    let r = ask(&p, &n("nope.kplug.svc"), Rtype::A);
    assert!(
        r.authority[0].starts_with("cluster.local.\t300\tIN\tSOA\t"),
        "{r:?}"
    );
    assert!(r.authority[0].ends_with(" 3600"), "{r:?}");
    check(
        &p,
        &n("svc1.kplug.svc"),
        Rtype::A,
        OK,
        &["svc1.kplug.svc.cluster.local.\t3600\tIN\tA\t10.96.77.1"],
    );
}

#[test]
fn reverse_lookups() {
    let p = plugins("");
    check(
        &p,
        "1.77.96.10.in-addr.arpa.",
        Rtype::PTR,
        OK,
        &["1.77.96.10.in-addr.arpa.\t5\tIN\tPTR\tsvc1.kplug.svc.cluster.local."],
    );
    check(
        &p,
        "10.7.244.10.in-addr.arpa.",
        Rtype::PTR,
        OK,
        &["10.7.244.10.in-addr.arpa.\t5\tIN\tPTR\tweb-0.hdls.kplug.svc.cluster.local."],
    );
    check(
        &p,
        "1.7.244.10.in-addr.arpa.",
        Rtype::PTR,
        OK,
        &["1.7.244.10.in-addr.arpa.\t5\tIN\tPTR\t10-244-7-1.svc1.kplug.svc.cluster.local."],
    );
    check(&p, "2.7.244.10.in-addr.arpa.", Rtype::PTR, NX, &[]);
    check(&p, "9.9.9.9.in-addr.arpa.", Rtype::PTR, NX, &[]);
    check(&p, "7.96.10.in-addr.arpa.", Rtype::PTR, NX, &[]);
    check(&p, "in-addr.arpa.", Rtype::PTR, OK, &[]);
    check(&p, "1.77.96.10.in-addr.arpa.", Rtype::A, NX, &[]);
    let v6 = clusterdns_wire::reverse_name("fd00:10:96::7702".parse().unwrap()).to_string();
    check(
        &p,
        &v6,
        Rtype::PTR,
        OK,
        &[&format!("{v6}\t5\tIN\tPTR\tdual.kplug.svc.cluster.local.")],
    );
    // PTR on forward names: NODATA when the name exists.
    check(&p, &n("svc1.kplug.svc"), Rtype::PTR, OK, &[]);
    check(&p, &n("nope.kplug.svc"), Rtype::PTR, NX, &[]);
}

#[test]
fn pods() {
    let p = plugins("");
    check(&p, &n("10-244-7-11.kplug.pod"), Rtype::A, NX, &[]);
    check(&p, &n("kplug.pod"), Rtype::A, NX, &[]);
    let p = plugins("  pods insecure");
    check(
        &p,
        &n("10-244-7-11.kplug.pod"),
        Rtype::A,
        OK,
        &["10-244-7-11.kplug.pod.cluster.local.\t5\tIN\tA\t10.244.7.11"],
    );
    check(
        &p,
        &n("1-2-3-4.kplug.pod"),
        Rtype::A,
        OK,
        &["1-2-3-4.kplug.pod.cluster.local.\t5\tIN\tA\t1.2.3.4"],
    );
    check(&p, &n("1-2-3-4.kplug.pod"), Rtype::AAAA, OK, &[]);
    check(
        &p,
        &n("fd00--1.kplug.pod"),
        Rtype::AAAA,
        OK,
        &["fd00--1.kplug.pod.cluster.local.\t5\tIN\tAAAA\tfd00::1"],
    );
    check(&p, &n("1-2-3-4.nons.pod"), Rtype::A, NX, &[]);
    check(&p, &n("not-an-ip.kplug.pod"), Rtype::A, NX, &[]);
    check(&p, &n("kplug.pod"), Rtype::A, OK, &[]);
    check(&p, &n("pod"), Rtype::A, OK, &[]);
    let r = check(
        &p,
        &n("1-2-3-4.kplug.pod"),
        Rtype::SRV,
        OK,
        &["1-2-3-4.kplug.pod.cluster.local.\t5\tIN\tSRV\t0 100 0 1-2-3-4.kplug.pod.cluster.local."],
    );
    assert_eq!(
        r.additional,
        ["1-2-3-4.kplug.pod.cluster.local.\t5\tIN\tA\t1.2.3.4"]
    );
    let p = plugins("  pods verified");
    check(
        &p,
        &n("10-244-7-11.kplug.pod"),
        Rtype::A,
        OK,
        &["10-244-7-11.kplug.pod.cluster.local.\t5\tIN\tA\t10.244.7.11"],
    );
    check(&p, &n("10-244-7-11.default.pod"), Rtype::A, NX, &[]);
    check(&p, &n("1-2-3-4.kplug.pod"), Rtype::A, NX, &[]);
}

#[test]
fn options_change_answers() {
    let p = plugins("  namespaces default");
    check(&p, &n("svc1.kplug.svc"), Rtype::A, NX, &[]);
    check(
        &p,
        &n("kubernetes.default.svc"),
        Rtype::A,
        OK,
        &["kubernetes.default.svc.cluster.local.\t5\tIN\tA\t10.96.0.1"],
    );
    check(&p, "1.77.96.10.in-addr.arpa.", Rtype::PTR, NX, &[]);
    let p = plugins("  noendpoints");
    // A snapshot file holds what it holds; noendpoints only stops the watch.
    check(
        &p,
        &n("svc1.kplug.svc"),
        Rtype::A,
        OK,
        &["svc1.kplug.svc.cluster.local.\t5\tIN\tA\t10.96.77.1"],
    );
    let p = plugins("  ignore empty_service");
    check(&p, &n("kubernetes.default.svc"), Rtype::A, NX, &[]);
    check(
        &p,
        &n("svc1.kplug.svc"),
        Rtype::A,
        OK,
        &["svc1.kplug.svc.cluster.local.\t5\tIN\tA\t10.96.77.1"],
    );
    check(
        &p,
        &n("ext.kplug.svc"),
        Rtype::CNAME,
        OK,
        &["ext.kplug.svc.cluster.local.\t5\tIN\tCNAME\text.example.com."],
    );
}

#[test]
fn fallthrough() {
    let fell = |r: &Reply| r.rcode == OK && r.answer.is_empty() && r.additional.len() == 2;
    let p = plugins_with("  fallthrough", true);
    assert!(fell(&ask(&p, &n("nope.kplug.svc"), Rtype::A)));
    assert!(fell(&ask(&p, "9.9.9.9.in-addr.arpa.", Rtype::PTR)));
    // NODATA does not fall through.
    assert!(!fell(&ask(&p, &n("svc1.kplug.svc"), Rtype::AAAA)));
    let p = plugins_with("  fallthrough in-addr.arpa ip6.arpa", true);
    assert!(fell(&ask(&p, "9.9.9.9.in-addr.arpa.", Rtype::PTR)));
    assert_eq!(ask(&p, &n("nope.kplug.svc"), Rtype::A).rcode, NX);
    // Outside the zones: next plugin.
    assert!(fell(&ask(&p, "example.org.", Rtype::A)));
}

#[test]
fn apex_ns_without_own_endpoints() {
    // With `bind`, CoreDNS finds no address of its own: NS is NODATA.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("c.yaml"), format!("{BASE}{OBJECTS}")).unwrap();
    let mut r = setup_in(
        DEF,
        ".:53 {\n kubernetes cluster.local {\n  snapshot c.yaml\n }\n}",
        dir.path(),
    )
    .unwrap();
    let _ = &mut r;
    let p = r.plugins;
    let ns = ask(&p, Z, Rtype::NS);
    assert_eq!(ns.rcode, OK);
    // Without bind: one NS per distinct name, ns.dns.<zone>, glue = interface addresses.
    for line in &ns.answer {
        assert_eq!(line, "cluster.local.\t5\tIN\tNS\tns.dns.cluster.local.");
    }
    assert!(ns.answer.len() <= 1);
    assert_eq!(
        ns.additional.len(),
        ask(&p, &n("ns.dns"), Rtype::A).answer.len()
            + ask(&p, &n("ns.dns"), Rtype::AAAA).answer.len()
    );
    // Mixed-case apex: CoreDNS compares the lowercased name with the zone as sent.
    check(&p, "Cluster.Local.", Rtype::NS, OK, &[]);
    check(&p, "ns.dns.Cluster.Local.", Rtype::A, NX, &[]);
}

#[test]
fn not_synced_is_servfail_for_names_only() {
    let r = setup_in(
        DEF,
        ".:53 {\n kubernetes cluster.local {\n  kubeconfig /nonexistent\n }\n}",
        Path::new("."),
    )
    .unwrap();
    assert_eq!(r.shared.readiness.not_ready(), ["kubernetes"]);
    let p = r.plugins;
    let reply = ask(&p, &n("svc1.kplug.svc"), Rtype::A);
    assert_eq!(reply.rcode, Rcode::SERVFAIL);
    assert_eq!(reply.authority.len(), 1);
    check(&p, &n("svc"), Rtype::A, OK, &[]);
}

#[test]
fn snapshot_is_ready() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("c.yaml"), OBJECTS).unwrap();
    let r = setup_in(
        DEF,
        ". {\n kubernetes cluster.local {\n  snapshot c.yaml\n }\n}",
        dir.path(),
    )
    .unwrap();
    assert!(r.shared.readiness.not_ready().is_empty());
    assert!(r.shared.on_startup.is_empty());
}

#[test]
fn setup_table() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("c.yaml"), OBJECTS).unwrap();
    let ok = [
        "cluster.local {\n kubernetes\n}",
        ". {\n kubernetes cluster.local 10.0.0.0/17\n}",
        ". {\n kubernetes cluster.local in-addr.arpa ip6.arpa {\n  pods insecure\n  fallthrough in-addr.arpa ip6.arpa\n  ttl 30\n }\n}",
        ". {\n kubernetes cluster.local {\n  endpoint https://127.0.0.1:6443\n  tls a b c\n  namespaces a b\n  labels app=x,tier!=y\n  pods verified\n  endpoint_pod_names\n  ttl 0\n  noendpoints\n  fallthrough\n  ignore empty_service\n  startup_timeout 2s\n  apiserver_qps 50\n  apiserver_burst 100\n  apiserver_max_inflight 10\n }\n}",
        ". {\n kubernetes cluster.local {\n  kubeconfig /k ctx\n  namespace_labels env in (a, b)\n  ttl 3600\n }\n}",
        ". {\n kubernetes cluster.local {\n  snapshot c.yaml\n }\n}",
    ];
    for c in ok {
        let r = setup_in(DEF, c, dir.path()).unwrap_or_else(|e| panic!("{c}: {e}"));
        assert_eq!(r.plugins.len(), 1, "{c}");
    }
    let bad = [
        (
            ". {\n kubernetes 10.0.0.0/8 1.in-addr.arpa\n}",
            "non-reverse zone name must be used",
        ),
        (
            ". {\n kubernetes cluster.local {\n  ttl 3601\n }\n}",
            "ttl must be in range [0, 3600]: 3601",
        ),
        (
            ". {\n kubernetes cluster.local {\n  ttl -1\n }\n}",
            "ttl must be in range [0, 3600]: -1",
        ),
        (
            ". {\n kubernetes cluster.local {\n  ttl x\n }\n}",
            "invalid syntax",
        ),
        (
            ". {\n kubernetes cluster.local {\n  pods maybe\n }\n}",
            "wrong value for pods: maybe",
        ),
        (
            ". {\n kubernetes cluster.local {\n  tls a b\n }\n}",
            "Wrong argument count",
        ),
        (
            ". {\n kubernetes cluster.local {\n  kubeconfig\n }\n}",
            "Wrong argument count",
        ),
        (
            ". {\n kubernetes cluster.local {\n  endpoint_pod_names x\n }\n}",
            "Wrong argument count",
        ),
        (
            ". {\n kubernetes cluster.local {\n  ignore other\n }\n}",
            "unable to parse ignore value: 'other'",
        ),
        (
            ". {\n kubernetes cluster.local {\n  namespaces a\n  namespace_labels x=y\n }\n}",
            "namespaces and namespace_labels cannot both be set",
        ),
        (
            ". {\n kubernetes cluster.local {\n  startup_timeout soon\n }\n}",
            "invalid duration",
        ),
        (
            ". {\n kubernetes cluster.local {\n  apiserver_qps -1\n }\n}",
            "non-negative",
        ),
        (
            ". {\n kubernetes cluster.local {\n  resyncperiod 5m\n }\n}",
            "unknown property 'resyncperiod'",
        ),
        (
            ". {\n kubernetes cluster.local {\n  snapshot missing.yaml\n }\n}",
            "snapshot",
        ),
        (
            ". {\n kubernetes cluster.local\n kubernetes cluster.local\n}",
            "only be used once",
        ),
    ];
    for (c, want) in bad {
        let dirp = dir.path();
        let e = match setup_in(DEF, c, dirp) {
            Ok(_) => panic!("{c} succeeded"),
            Err(e) => e.msg,
        };
        assert!(e.contains(want), "{c}: {e}");
    }
    let _ = setup_err;
}

#[test]
fn garbage_names_do_not_panic() {
    let p = plugins("  pods insecure");
    for name in [
        "-.kplug.pod.cluster.local.",
        "----.kplug.pod.cluster.local.",
        "_._.svc1.kplug.svc.cluster.local.",
        "*.kplug.svc.cluster.local.",
        "\\000.kplug.svc.cluster.local.",
        "\\255\\255.hdls.kplug.svc.cluster.local.",
        "ffff-ffff-ffff-ffff-ffff-ffff-ffff-ffff-ffff.kplug.pod.cluster.local.",
        "1.2.3.4.5.in-addr.arpa.",
        "x.ip6.arpa.",
    ] {
        for t in [
            Rtype::A,
            Rtype::AAAA,
            Rtype::SRV,
            Rtype::PTR,
            Rtype::TXT,
            Rtype::CNAME,
            Rtype::NS,
            Rtype::SOA,
            Rtype::MX,
        ] {
            let r = ask(&p, name, t);
            assert!(r.rcode == OK || r.rcode == NX, "{name} {t}: {r:?}");
        }
    }
    // `_` alone strips to an empty port: matches every port (CoreDNS).
    check(
        &p,
        "_._.svc1.kplug.svc.cluster.local.",
        Rtype::SRV,
        OK,
        &[
            "_._.svc1.kplug.svc.cluster.local.\t5\tIN\tSRV\t0 50 80 svc1.kplug.svc.cluster.local.",
            "_._.svc1.kplug.svc.cluster.local.\t5\tIN\tSRV\t0 50 53 svc1.kplug.svc.cluster.local.",
        ],
    );
}

#[test]
fn odd_objects_do_not_break_answers() {
    let long = "x".repeat(70);
    let mut ports = String::new();
    for i in 1..=3000 {
        ports.push_str(&format!("  - {{name: p{i}, port: {i}, protocol: TCP}}\n"));
    }
    let yaml = format!(
        r#"apiVersion: v1
kind: Namespace
metadata: {{name: odd}}
---
apiVersion: v1
kind: Service
metadata: {{name: {long}, namespace: odd}}
spec: {{clusterIP: 10.96.9.1, ports: [{{name: http, port: 80}}]}}
---
apiVersion: v1
kind: Service
metadata: {{name: bad-ip, namespace: odd}}
spec: {{clusterIP: 10.96.9.300, ports: [{{name: http, port: 80}}]}}
---
apiVersion: v1
kind: Service
metadata: {{name: many, namespace: odd}}
spec:
  clusterIP: 10.96.9.2
  ports:
{ports}---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: many-a, namespace: odd, labels: {{kubernetes.io/service-name: many}}}}
addressType: IPv4
endpoints:
- addresses: [not-an-ip, 10.244.9.1]
  hostname: "bad_host!"
- addresses: []
- {{}}
ports:
- {{name: http, port: 0}}
- {{name: https, port: 443}}
---
kind: Service
metadata: {{namespace: odd}}
---
apiVersion: v1
kind: Service
metadata: {{name: noports, namespace: odd}}
spec: {{type: ClusterIP}}
"#
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("odd.yaml"), yaml).unwrap();
    let r = setup_in(
        DEF,
        ".:53 {\n kubernetes cluster.local in-addr.arpa {\n  snapshot odd.yaml\n }\n}",
        dir.path(),
    )
    .unwrap();
    let p = r.plugins;
    // The 70-byte name cannot be asked for; the 63-byte prefix is another name.
    check(
        &p,
        &format!("{}.odd.svc.cluster.local.", &long[..63]),
        Rtype::A,
        NX,
        &[],
    );
    check(&p, &n("bad-ip.odd.svc"), Rtype::A, OK, &[]);
    check(
        &p,
        &n("many.odd.svc"),
        Rtype::A,
        OK,
        &["many.odd.svc.cluster.local.\t5\tIN\tA\t10.96.9.2"],
    );
    // 3000 SRV records: capped at the largest message, no panic.
    let srv = ask(&p, &n("many.odd.svc"), Rtype::SRV);
    assert_eq!(srv.rcode, OK);
    assert!(srv.answer.len() > 100, "{}", srv.answer.len());
    assert!(
        srv.answer[0].contains("\tSRV\t0 1 1 many.odd.svc.cluster.local."),
        "{}",
        srv.answer[0]
    );
    check(
        &p,
        &n("_p2999._tcp.many.odd.svc"),
        Rtype::SRV,
        OK,
        &[
            "_p2999._tcp.many.odd.svc.cluster.local.\t5\tIN\tSRV\t0 100 2999 many.odd.svc.cluster.local.",
        ],
    );
    // The valid address of the odd slice is served; the invalid one is not.
    check(
        &p,
        &n("10-244-9-1.many.odd.svc"),
        Rtype::A,
        OK,
        &["10-244-9-1.many.odd.svc.cluster.local.\t5\tIN\tA\t10.244.9.1"],
    );
    check(&p, &n("noports.odd.svc"), Rtype::A, OK, &[]);
}

#[test]
fn name_splitting_helpers() {
    use clusterdns_wire::Name;

    use super::names::{NS_DNS, is_reverse, split, split_at, zone_offset};

    let name = |s: &str| Name::from_ascii(s).unwrap();
    let zone = name("cluster.local.");
    // Exact, label-aligned suffixes only.
    assert_eq!(zone_offset(&name("a.b.cluster.local."), &zone), Some(4));
    assert_eq!(zone_offset(&name("cluster.local."), &zone), Some(0));
    assert_eq!(zone_offset(&name("xcluster.local."), &zone), None);
    assert_eq!(zone_offset(&name("local."), &zone), None);
    // A label whose bytes end like the zone's wire form is not the zone.
    let tricky = Name::from_labels([&b"a\x07cluster\x05local"[..]]).unwrap();
    assert_eq!(
        zone_offset(&tricky, &Name::from_ascii("cluster.local").unwrap()),
        None
    );

    // Only the first MAX_BASE labels are kept; the count is exact.
    let long = name("a.b.c.d.e.f.g.cluster.local.");
    let s = split(&long, &long, &zone);
    assert_eq!(s.n, 7);
    assert!(s.base().is_none());
    assert!(s.parsed().is_err());
    assert_eq!(s.zone_wire(), zone.as_wire());
    assert_eq!(s.under_zone(NS_DNS), Some(name("ns.dns.cluster.local.")));
    let short = name("svc1.kplug.svc.cluster.local.");
    let s = split_at(&short, &short, zone_offset(&short, &zone).unwrap());
    assert_eq!(s.base(), Some(&[&b"svc1"[..], b"kplug", b"svc"][..]));

    assert!(is_reverse(&name("1.0.0.10.in-addr.arpa.")));
    assert!(is_reverse(&name("1.ip6.arpa.")));
    assert!(!is_reverse(&name("in-addr.arpa.")));
    assert!(!is_reverse(&name("ip6.arpa.")));
    assert!(!is_reverse(&name("x.arpa.")));
    assert!(!is_reverse(&name("x.in-addr.arpa.example.")));
    let tricky = Name::from_labels([&b"x\x07in-addr"[..], b"arpa"]).unwrap();
    assert!(!is_reverse(&tricky));
}

/// Names too long for the grammar, and ports listed per protocol, on the
/// paths the profile-driven shortcuts took.
#[test]
fn long_names_and_repeated_addresses() {
    let p = plugins("");
    check(&p, &n("a.b.c.svc1.kplug.svc"), Rtype::A, NX, &[]);
    check(&p, &n("a.b.c.d.e.f.g.h.svc1.kplug.svc"), Rtype::A, NX, &[]);
    check(&p, &n("x.a.b.c.d.e.f.g.h.ns.dns"), Rtype::A, NX, &[]);
    // svc1 has two ports (http/TCP, dns/UDP): its address once, for the
    // port given or any port.
    check(
        &p,
        &n("_dns._udp.svc1.kplug.svc"),
        Rtype::A,
        OK,
        &["_dns._udp.svc1.kplug.svc.cluster.local.\t5\tIN\tA\t10.96.77.1"],
    );
    check(&p, &n("_dns._tcp.svc1.kplug.svc"), Rtype::A, NX, &[]);
}

/// The de-duplication set past its linear-scan size, and reused after a
/// clear, answers as a set does.
#[test]
fn dedup_set_small_and_large() {
    let mut d = super::write::Dedup::<u32>::default();
    for round in 0..2 {
        d.clear();
        let mut seen = std::collections::HashSet::new();
        for i in 0..200u32 {
            let x = (i * 7 + round) % 53;
            assert_eq!(d.insert(x), seen.insert(x), "round {round}, item {i}: {x}");
        }
    }
}

/// A plugin on `index` with the defaults (`pods insecure`), as setup
/// builds it, so that a test can publish changes to the index under it.
fn on_index(index: &clusterdns_kubeindex::Index) -> super::Kubernetes {
    use super::lookup::{LookupOpts, PodMode};
    let zones = ["cluster.local.", "in-addr.arpa.", "ip6.arpa."];
    super::Kubernetes {
        zones: zones
            .iter()
            .map(|z| clusterdns_wire::Name::from_ascii(z).unwrap())
            .collect(),
        primary: clusterdns_wire::Name::from_ascii(zones[0]).unwrap(),
        fall: None,
        no_aaaa: false,
        ttl: super::setup::DEFAULT_TTL,
        opts: LookupOpts {
            namespaces: Vec::new(),
            pods: PodMode::Insecure,
            pod_names: false,
            ignore_empty_service: false,
            endpoints: true,
        },
        snapshots: index.snapshots(),
        local_ips: Vec::new(),
        tail: clusterdns_contract::ChainTail::default(),
        memo_id: super::memo::instance_id(),
        host_search: Vec::new(),
        isolation: None,
        zone_aware: None,
        client_compact: false,
    }
}

/// Runs `name`/`qtype` with `id` and header `flags` through `k` alone;
/// the flow's name and the reply bytes.
fn ask_raw(
    k: &super::Kubernetes,
    name: &str,
    qtype: Rtype,
    id: u16,
    flags: u16,
) -> (String, Vec<u8>) {
    use clusterdns_wire::{Name, Query};
    let pkt = testing::query_with_header(name, qtype, id, flags);
    let q = Query::parse(&pkt).unwrap();
    let zone = Name::root();
    let req = testing::request(&q, &zone);
    let mut w = clusterdns_contract::ResponseWriter::new();
    let flow = k.query(&req, &mut w);
    (format!("{flow:?}"), w.bytes().to_vec())
}

/// The answer memo: a replayed reply is byte for byte what a fresh
/// instance builds for the same query (ID, opcode, RD and CD from the new
/// query), for every shape of answer the fixture has; and a change
/// published to the index is answered from the next query on.
#[test]
fn memo_replays_exactly_and_follows_changes() {
    let mut index = clusterdns_kubeindex::Index::new();
    clusterdns_kubeindex::yaml::load_str(&mut index, &format!("{BASE}{OBJECTS}")).unwrap();
    let cases: &[(&str, Rtype)] = &[
        ("kubernetes.default.svc.cluster.local.", Rtype::A),
        ("svc1.kplug.svc.cluster.local.", Rtype::A),
        ("SVC1.kplug.svc.Cluster.local.", Rtype::A),
        ("svc1.kplug.svc.cluster.local.", Rtype::AAAA),
        ("svc1.kplug.svc.cluster.local.", Rtype::TXT),
        ("svc1.kplug.svc.cluster.local.", Rtype::NS),
        ("_dns._tcp.svc1.kplug.svc.cluster.local.", Rtype::SRV),
        ("svc1.kplug.svc.cluster.local.", Rtype::SRV),
        ("web-0.hdls.kplug.svc.cluster.local.", Rtype::AAAA),
        ("hdls.kplug.svc.cluster.local.", Rtype::A),
        ("hdls.kplug.svc.cluster.local.", Rtype::SRV),
        ("ext.kplug.svc.cluster.local.", Rtype::A),
        ("ext-loop.kplug.svc.cluster.local.", Rtype::A),
        ("nope.kplug.svc.cluster.local.", Rtype::A),
        ("1-2-3-4.kplug.pod.cluster.local.", Rtype::A),
        ("not-an-ip.kplug.pod.cluster.local.", Rtype::A),
        ("dns-version.cluster.local.", Rtype::TXT),
        ("ns.dns.cluster.local.", Rtype::A),
        ("cluster.local.", Rtype::SOA),
        ("1.77.96.10.in-addr.arpa.", Rtype::PTR),
        ("2.7.244.10.in-addr.arpa.", Rtype::PTR),
        ("9.9.9.9.in-addr.arpa.", Rtype::PTR),
        ("svc1.kplug.svc.cluster.local.", Rtype::AXFR),
    ];
    let k = on_index(&index);
    for &(name, qtype) in cases {
        let (flow1, built) = ask_raw(&k, name, qtype, 0x1111, 0x0100);
        let hits = super::memo::hits();
        let (flow2, replayed) = ask_raw(&k, name, qtype, 0x2222, 0x0010);
        assert_eq!(super::memo::hits(), hits + 1, "{name} {qtype}: replayed");
        let (flow3, fresh) = ask_raw(&on_index(&index), name, qtype, 0x2222, 0x0010);
        assert_eq!((&flow1, &flow2), (&flow3, &flow3), "{name} {qtype}");
        assert_eq!(
            replayed,
            fresh,
            "{name} {qtype}: {:#?}",
            testing::reply(&fresh)
        );
        assert_eq!(built[4..], fresh[4..], "{name} {qtype}");
    }

    let api = "kubernetes.default.svc.cluster.local.";
    let answer =
        |k: &super::Kubernetes| testing::reply(&ask_raw(k, api, Rtype::A, 1, 0x0100).1).answer;
    assert_eq!(answer(&k), [format!("{api}\t5\tIN\tA\t10.96.0.1")]);
    clusterdns_kubeindex::yaml::load_str(
        &mut index,
        &format!("{}{OBJECTS}", BASE.replace("10.96.0.1", "10.96.0.2")),
    )
    .unwrap();
    let hits = super::memo::hits();
    assert_eq!(answer(&k), [format!("{api}\t5\tIN\tA\t10.96.0.2")]);
    assert_eq!(
        super::memo::hits(),
        hits,
        "the change was answered by a lookup"
    );
    assert_eq!(answer(&k), [format!("{api}\t5\tIN\tA\t10.96.0.2")]);
    assert_eq!(super::memo::hits(), hits + 1, "then kept again");
}

/// A name that falls through is kept as such: the second query goes to
/// the next plugin too, without a lookup.
#[test]
fn memo_keeps_fallthrough() {
    let p = plugins_with("  fallthrough", true);
    let fell = |r: &Reply| r.rcode == OK && r.answer.is_empty() && r.additional.len() == 2;
    assert!(fell(&ask(&p, &n("nope.kplug.svc"), Rtype::A)));
    let hits = super::memo::hits();
    assert!(fell(&ask(&p, &n("nope.kplug.svc"), Rtype::A)));
    assert_eq!(super::memo::hits(), hits + 1);
}

/// Changes published between queries, questions repeated in random letter
/// case with random header bits: every reply of the memoizing instance is
/// byte for byte the reply of a fresh instance (no memo entries) on the
/// same snapshot, and the memo did serve some of them.
#[test]
fn memo_never_serves_a_stale_or_foreign_reply() {
    let mut rng = fastrand::Rng::with_seed(7);
    let mut index = clusterdns_kubeindex::Index::new();
    let load = |index: &mut clusterdns_kubeindex::Index, ip: u8| {
        let base = BASE.replace("10.96.0.1", &format!("10.96.0.{ip}"));
        clusterdns_kubeindex::yaml::load_str(index, &format!("{base}{OBJECTS}")).unwrap();
    };
    load(&mut index, 1);
    let names: &[(&str, Rtype)] = &[
        ("kubernetes.default.svc.cluster.local.", Rtype::A),
        (
            "_https._tcp.kubernetes.default.svc.cluster.local.",
            Rtype::SRV,
        ),
        ("1.0.96.10.in-addr.arpa.", Rtype::PTR),
        ("2.0.96.10.in-addr.arpa.", Rtype::PTR),
        ("svc1.kplug.svc.cluster.local.", Rtype::A),
        ("nope.kplug.svc.cluster.local.", Rtype::A),
        ("hdls.kplug.svc.cluster.local.", Rtype::SRV),
    ];
    let k = on_index(&index);
    let hits = super::memo::hits();
    for step in 0..600 {
        if step % 50 == 49 {
            load(&mut index, rng.u8(1..=2));
        }
        let (name, qtype) = names[rng.usize(..names.len())];
        // Two spellings only, so that repeats happen.
        let name: String = if rng.bool() {
            name.to_owned()
        } else {
            name.to_ascii_uppercase()
        };
        let id = rng.u16(..);
        let flags = [0x0000, 0x0100, 0x0010, 0x0110][rng.usize(..4)];
        let (flow, got) = ask_raw(&k, &name, qtype, id, flags);
        let (want_flow, want) = ask_raw(&on_index(&index), &name, qtype, id, flags);
        assert_eq!(
            (flow, &got),
            (want_flow, &want),
            "step {step}: {name} {qtype}"
        );
    }
    let served = super::memo::hits() - hits;
    assert!(
        served > 300,
        "only {served} of 600 replies came from the memo"
    );
}
