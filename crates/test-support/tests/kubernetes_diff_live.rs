//! The *kubernetes* plugin following a live API server: objects are
//! created, updated and deleted with kubectl on the rig while CoreDNS and
//! clusterdns watch it; after each change both must converge to the
//! expected answer (and agree with each other). Several slices per
//! service, dual-stack, not-ready and terminating endpoints.
//!
//! Skips (with a message) when no rig runs, unless CLUSTERDNS_REQUIRE_RIG=1.

use std::time::{Duration, Instant};

use clusterdns_test_support::{Differential, Outcome, Query, Rig};

const COREFILE: &str = ".:@PORT@ {
    bind 127.0.0.1
    ready 127.0.0.1:@PORT_READY@
    prometheus 127.0.0.1:@PORT_PROM@
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig @KUBECONFIG@
    }
}
";

const NS: &str = "apiVersion: v1\nkind: Namespace\nmetadata: {name: kplive}\n";

/// How long a change may take to show in both servers.
const SETTLE: Duration = Duration::from_secs(10);

/// Answer records as `name type rdata`, sorted; `None` for NXDOMAIN.
fn answers(o: &Outcome) -> Option<Vec<String>> {
    let Outcome::Response(r) = o else {
        return Some(vec![format!("no response: {}", o.summary())]);
    };
    if r.rcode == 3 {
        return None;
    }
    let mut v: Vec<String> = r
        .answer
        .iter()
        .map(|rr| format!("{} {}", rr.rtype, rr.rdata))
        .collect();
    v.sort();
    Some(v)
}

/// Waits until clusterdns answers `want` (sorted `TYPE rdata` lines, `None`
/// for NXDOMAIN) and CoreDNS agrees.
#[track_caller]
fn converge(d: &Differential, name: &str, qtype: &str, want: Option<&[&str]>) {
    let q = Query::new(name, qtype);
    let want: Option<Vec<String>> = want.map(|w| {
        let mut v: Vec<String> = w.iter().map(|s| (*s).to_string()).collect();
        v.sort();
        v
    });
    let start = Instant::now();
    loop {
        let c = d.query(&q);
        let got = answers(&c.candidate);
        if got == want && c.agree() {
            eprintln!("{name} {qtype}: converged in {:?}", start.elapsed());
            return;
        }
        if start.elapsed() > SETTLE {
            panic!("{name} {qtype}: want {want:?}, clusterdns has {got:?}\n{c}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `..._count{service_kind="KIND"}` of clusterdns's programming histogram.
fn programming_count(d: &Differential, kind: &str) -> u64 {
    let port = d
        .candidate
        .ports
        .get("PORT_PROM")
        .copied()
        .expect("metrics port");
    let metrics = clusterdns_test_support::http_get(([127, 0, 0, 1], port).into(), "/metrics");
    assert_eq!(metrics.status, 200, "metrics");
    let body = metrics.text();
    let key = format!(
        "coredns_kubernetes_dns_programming_duration_seconds_count{{service_kind=\"{kind}\"}} "
    );
    body.lines()
        .find_map(|l| l.strip_prefix(&key))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Now, RFC 3339 in UTC with seconds (as the controller writes it).
fn rig_time() -> String {
    let out = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .expect("date");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn slice(name: &str, family: &str, endpoints: &str) -> String {
    format!(
        "apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}
  namespace: kplive
  labels: {{kubernetes.io/service-name: h}}
addressType: {family}
endpoints:
{endpoints}
ports:
- {{name: http, port: 80, protocol: TCP}}
"
    )
}

fn svc_a(port_name: &str) -> String {
    format!(
        "apiVersion: v1
kind: Service
metadata: {{name: a, namespace: kplive}}
spec:
  clusterIP: 10.96.78.1
  ports: [{{name: {port_name}, port: 80, protocol: TCP}}]
"
    )
}

const HEADLESS: &str = "apiVersion: v1
kind: Service
metadata: {name: h, namespace: kplive}
spec:
  clusterIP: None
  ports: [{name: http, port: 80, protocol: TCP}]
";

const DUAL: &str = "apiVersion: v1
kind: Service
metadata: {name: d, namespace: kplive}
spec:
  ipFamilyPolicy: RequireDualStack
  ipFamilies: [IPv4, IPv6]
  clusterIP: 10.96.78.2
  clusterIPs: [10.96.78.2, \"fd00:10:96::7802\"]
  ports: [{name: http, port: 80, protocol: TCP}]
";

#[test]
fn answers_follow_the_api_server() {
    let Some(rig) = Rig::get() else {
        eprintln!("no rig running (scripts/rig up): skipping the live kubernetes test");
        return;
    };
    let _ = rig.kubectl(&[
        "delete",
        "namespace",
        "kplive",
        "--wait=true",
        "--ignore-not-found",
    ]);
    rig.apply_yaml(NS).expect("namespace");
    let d = Differential::new(&rig, COREFILE).expect("servers start");
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| scenario(&rig, &d)));
    drop(d);
    let _ = rig.kubectl(&["delete", "namespace", "kplive", "--wait=false"]);
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
}

fn scenario(rig: &Rig, d: &Differential) {
    let a = "a.kplive.svc.cluster.local";
    let h = "h.kplive.svc.cluster.local";
    converge(d, a, "A", None);

    // Create a ClusterIP service.
    rig.apply_yaml(&svc_a("http")).expect("svc a");
    converge(d, a, "A", Some(&["A 10.96.78.1"]));
    converge(
        d,
        &format!("_http._tcp.{a}"),
        "SRV",
        Some(&["SRV 0 100 80 a.kplive.svc.cluster.local."]),
    );
    converge(
        d,
        "1.78.96.10.in-addr.arpa",
        "PTR",
        Some(&["PTR a.kplive.svc.cluster.local."]),
    );

    // An EndpointSlice with a trigger time feeds the programming-duration
    // histogram (ClusterIP service, exactly one service).
    let before = programming_count(d, "cluster_ip");
    let now = rig_time();
    rig.apply_yaml(&format!(
        "apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: a-1
  namespace: kplive
  labels: {{kubernetes.io/service-name: a}}
  annotations: {{endpoints.kubernetes.io/last-change-trigger-time: \"{now}\"}}
addressType: IPv4
endpoints:
- addresses: [10.244.8.9]
  conditions: {{ready: true}}
ports:
- {{name: http, port: 8080, protocol: TCP}}
"
    ))
    .expect("slice a-1");
    converge(d, &format!("10-244-8-9.{a}"), "A", Some(&["A 10.244.8.9"]));
    let after = programming_count(d, "cluster_ip");
    assert!(after > before, "programming histogram: {before} -> {after}");

    // Update it: the port is renamed.
    rig.apply_yaml(&svc_a("web")).expect("svc a update");
    converge(
        d,
        &format!("_web._tcp.{a}"),
        "SRV",
        Some(&["SRV 0 100 80 a.kplive.svc.cluster.local."]),
    );
    converge(d, &format!("_http._tcp.{a}"), "SRV", None);

    // A headless service with two IPv4 slices and an IPv6 slice; one
    // endpoint not ready.
    rig.apply_yaml(HEADLESS).expect("svc h");
    converge(d, h, "A", None);
    let h1 = slice(
        "h-1",
        "IPv4",
        "- addresses: [10.244.8.1]\n  hostname: h-0\n  conditions: {ready: true}\n- addresses: [10.244.8.2]\n  conditions: {ready: false}\n",
    );
    let h2 = slice(
        "h-2",
        "IPv4",
        "- addresses: [10.244.8.3]\n  conditions: {ready: true}\n",
    );
    let h6 = slice(
        "h-6",
        "IPv6",
        "- addresses: [\"fd00:10:244::8:1\"]\n  conditions: {ready: true}\n",
    );
    rig.apply_yaml(&format!("{h1}---\n{h2}---\n{h6}"))
        .expect("slices");
    converge(d, h, "A", Some(&["A 10.244.8.1", "A 10.244.8.3"]));
    converge(d, h, "AAAA", Some(&["AAAA fd00:10:244::8:1"]));
    converge(d, &format!("h-0.{h}"), "A", Some(&["A 10.244.8.1"]));
    converge(
        d,
        &format!("_http._tcp.{h}"),
        "SRV",
        Some(&[
            "SRV 0 33 80 h-0.h.kplive.svc.cluster.local.",
            "SRV 0 33 80 10-244-8-3.h.kplive.svc.cluster.local.",
            "SRV 0 33 80 fd00-10-244--8-1.h.kplive.svc.cluster.local.",
        ]),
    );
    converge(d, "2.8.244.10.in-addr.arpa", "PTR", None);

    // The not-ready endpoint becomes ready, the ready one terminates.
    let h1 = slice(
        "h-1",
        "IPv4",
        "- addresses: [10.244.8.1]\n  hostname: h-0\n  conditions: {ready: false, serving: true, terminating: true}\n- addresses: [10.244.8.2]\n  conditions: {ready: true}\n",
    );
    rig.apply_yaml(&h1).expect("slice h-1 update");
    converge(d, h, "A", Some(&["A 10.244.8.2", "A 10.244.8.3"]));
    converge(d, &format!("h-0.{h}"), "A", None);
    converge(
        d,
        "2.8.244.10.in-addr.arpa",
        "PTR",
        Some(&["PTR 10-244-8-2.h.kplive.svc.cluster.local."]),
    );

    // Delete a slice.
    rig.delete_yaml(&h2).expect("delete h-2");
    converge(d, h, "A", Some(&["A 10.244.8.2"]));

    // Dual-stack ClusterIP service.
    rig.apply_yaml(DUAL).expect("svc d");
    converge(
        d,
        "d.kplive.svc.cluster.local",
        "A",
        Some(&["A 10.96.78.2"]),
    );
    converge(
        d,
        "d.kplive.svc.cluster.local",
        "AAAA",
        Some(&["AAAA fd00:10:96::7802"]),
    );

    // Delete the services.
    rig.delete_yaml(&svc_a("web")).expect("delete a");
    converge(d, a, "A", None);
    rig.delete_yaml(HEADLESS).expect("delete h");
    converge(d, h, "A", None);
    // The slices of a deleted service still name their endpoints for PTR.
    converge(
        d,
        "2.8.244.10.in-addr.arpa",
        "PTR",
        Some(&["PTR 10-244-8-2.h.kplive.svc.cluster.local."]),
    );
}
