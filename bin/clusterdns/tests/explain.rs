//! `clusterdns explain`: the real binary on a Corefile, against a
//! `kubectl get -o yaml` dump and against the rig's API server; its reply
//! compared with what the same Corefile serves to `dig`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use clusterdns_test_support::Rig;

use common::{Server, binary, free_port};

/// The demo's dump: Services (ClusterIP, headless, ExternalName) in
/// namespaces default, kube-system and demo.
fn dump() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../demo/cluster.yaml")
}

/// A cluster Corefile whose kubernetes block points at a cluster that
/// does not exist: `-objects` or `-kubeconfig` must replace it.
fn corefile(port: u16, extra: &str) -> String {
    format!(
        ".:{port} {{\n    bind 127.0.0.1\n    errors\n    log\n    loop\n\
         \x20   kubernetes cluster.local in-addr.arpa ip6.arpa {{\n\
         \x20       kubeconfig /nonexistent/kubeconfig\n\
         \x20       pods insecure\n\
         \x20       fallthrough in-addr.arpa ip6.arpa\n    }}\n{extra}}}\n"
    )
}

struct Run {
    code: Option<i32>,
    out: String,
    err: String,
}

fn explain(dir: &Path, args: &[&str]) -> Run {
    let out = Command::new(binary())
        .arg("explain")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run clusterdns explain");
    Run {
        code: out.status.code(),
        out: String::from_utf8_lossy(&out.stdout).into_owned(),
        err: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `explain NAME A` on the Corefile at `cf`, the demo dump as the cluster.
fn explain_in_dump(dir: &Path, cf: &str, port: u16, name: &str) -> Run {
    let objects = dump().display().to_string();
    let port = port.to_string();
    explain(
        dir,
        &["-conf", cf, "-objects", &objects, "-port", &port, name, "A"],
    )
}

fn with_corefile(text: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("Corefile");
    std::fs::write(&path, text).expect("write Corefile");
    let p = path.display().to_string();
    (dir, p)
}

/// The answer lines of a reply, as dig prints them and as explain does:
/// name, TTL, class, type, data with whitespace collapsed.
fn answers(text: &str) -> Vec<String> {
    let mut out = common::dig_section(text, "ANSWER");
    out.sort();
    out
}

#[test]
fn names_in_a_dump_with_the_reason_for_each_answer() {
    let port = free_port();
    let (dir, cf) = with_corefile(&corefile(port, ""));
    let objects = dump().display().to_string();
    let p = port.to_string();
    let run = |name: &str, qtype: &str| {
        let r = explain(
            dir.path(),
            &["-conf", &cf, "-objects", &objects, "-port", &p, name, qtype],
        );
        assert_eq!(r.code, Some(0), "{name} {qtype}: {}{}", r.out, r.err);
        r.out
    };

    let out = run("kubernetes.default.svc.cluster.local", "A");
    assert!(
        out.contains(&format!("server block: . on dns://127.0.0.1:{port}")),
        "{out}"
    );
    assert!(
        out.contains("plugins: errors kubernetes"),
        "log and loop left out: {out}"
    );
    assert!(out.contains("answered by: kubernetes"), "{out}");
    assert!(out.contains("the index is synced"), "{out}");
    assert!(
        out.contains("Service default/kubernetes: ClusterIP 10.96.0.1; ports 443/TCP (https)"),
        "{out}"
    );
    assert!(out.contains("status: NOERROR, flags: qr aa rd"), "{out}");
    assert_eq!(
        answers(&out),
        ["kubernetes.default.svc.cluster.local. 5 IN A 10.96.0.1"]
    );

    let out = run("nope.default.svc.cluster.local", "A");
    assert!(
        out.contains(r#"no Service "nope" in namespace "default" (the namespace exists)"#),
        "{out}"
    );
    assert!(out.contains("so: NXDOMAIN"), "{out}");
    assert!(out.contains("status: NXDOMAIN"), "{out}");

    let out = run("web.nowhere.svc.cluster.local", "A");
    assert!(out.contains(r#"(the namespace does not exist)"#), "{out}");
    assert!(out.contains("status: NXDOMAIN"), "{out}");

    let out = run("kubernetes.default.svc.cluster.local", "AAAA");
    assert!(
        out.contains("so: NODATA (the name exists; none of its addresses is IPv6)"),
        "{out}"
    );
    assert!(out.contains("status: NOERROR"), "{out}");
    assert!(answers(&out).is_empty(), "{out}");

    let out = run("db.demo.svc.cluster.local", "A");
    assert!(out.contains("Service demo/db: headless"), "{out}");
    assert!(out.contains("addresses ready"), "{out}");

    let out = run("a.b.c.d.e.svc.cluster.local", "A");
    assert!(out.contains("not a cluster name"), "{out}");
    assert!(out.contains("status: NXDOMAIN"), "{out}");

    let out = run("example.org", "A");
    assert!(
        out.contains("example.org. is in none of its zones"),
        "{out}"
    );
    assert!(
        out.contains(
            "answered by: the server, as kubernetes failed: plugin/kubernetes: no next plugin found"
        ),
        "the chain ends there: {out}"
    );
    assert!(out.contains("SERVFAIL"), "nothing after kubernetes: {out}");
}

#[test]
fn the_reply_is_what_the_served_corefile_answers() {
    // The same Corefile served for real, with `snapshot` in place of the
    // missing kubeconfig, as explain's -objects sets it up.
    let objects = dump().display().to_string();
    let served = corefile(0, "").replace(
        "kubeconfig /nonexistent/kubeconfig",
        &format!("snapshot {objects}"),
    );
    let served = served.replacen(".:0 {", ".:{PORT} {", 1);
    let server = Server::start(&served);
    let port = server.port.to_string();
    let (dir, cf) = with_corefile(&corefile(server.port, ""));
    for (name, qtype) in [
        ("kubernetes.default.svc.cluster.local", "A"),
        ("db.demo.svc.cluster.local", "A"),
        ("_http._tcp.web.demo.svc.cluster.local", "SRV"),
        ("docs.demo.svc.cluster.local", "A"),
        ("1.0.96.10.in-addr.arpa", "PTR"),
    ] {
        let r = explain(
            dir.path(),
            &[
                "-conf", &cf, "-objects", &objects, "-port", &port, name, qtype,
            ],
        );
        assert_eq!(r.code, Some(0), "{}{}", r.out, r.err);
        let dug = server.dig(&[name, qtype]);
        assert!(
            !answers(&dug).is_empty(),
            "{name} {qtype}: dig got no answer: {dug}"
        );
        assert_eq!(
            answers(&r.out),
            answers(&dug),
            "{name} {qtype}:\n{}\n{dug}",
            r.out
        );
    }
}

#[test]
fn a_forwarded_name_names_its_upstreams() {
    let upstream = Server::start(".:{PORT} {\n    bind 127.0.0.1\n    whoami\n}\n");
    let port = free_port();
    let to = format!("127.0.0.1:{}", upstream.port);
    let (dir, cf) = with_corefile(&corefile(port, &format!("    forward . {to}\n")));
    let r = explain_in_dump(dir.path(), &cf, port, "example.org");
    assert_eq!(r.code, Some(0), "{}{}", r.out, r.err);
    assert!(r.out.contains("answered by: forward"), "{}", r.out);
    assert!(
        r.out
            .contains(&format!("sent upstream to one of {to} (policy random)")),
        "{}",
        r.out
    );
    // whoami's reply came back through the forward.
    assert!(r.out.contains("status: NOERROR"), "{}", r.out);
    assert!(r.out.contains("_udp.example.org."), "{}", r.out);
}

/// stdout is the explanation alone: the line *errors* logs for a failed
/// forward goes to stderr (a watch error written in the middle of the
/// answer section once broke a reading of stdout).
#[test]
fn log_lines_go_to_stderr_not_into_the_explanation() {
    // Nothing listens on the upstream's port: the forward fails.
    let dead = free_port();
    let port = free_port();
    let (dir, cf) = with_corefile(&corefile(
        port,
        &format!("    forward . 127.0.0.1:{dead}\n"),
    ));
    let r = explain_in_dump(dir.path(), &cf, port, "example.org");
    assert_eq!(r.code, Some(0), "{}{}", r.out, r.err);
    assert!(r.out.contains("status: SERVFAIL"), "{}", r.out);
    assert!(
        r.err.contains("[ERROR] plugin/errors: 2 example.org. A:"),
        "stderr: {}",
        r.err
    );
    assert!(!r.out.contains("[ERROR]"), "stdout: {}", r.out);
}

#[test]
fn bad_command_lines_and_corefiles_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let r = explain(dir.path(), &["-port", "x", "a"]);
    assert_eq!(r.code, Some(2));
    assert!(
        r.err.contains(r#"invalid value "x" for flag -port"#),
        "{}",
        r.err
    );
    assert!(r.err.contains("Usage:"), "{}", r.err);
    let r = explain(dir.path(), &["-objects", "a", "-kubeconfig", "b", "n"]);
    assert_eq!(r.code, Some(2), "{}", r.err);
    let r = explain(dir.path(), &["name", "NOTATYPE"]);
    assert_eq!(r.code, Some(2), "{}", r.err);
    assert!(
        r.err.contains(r#"unknown query type "NOTATYPE""#),
        "{}",
        r.err
    );

    let (dir, cf) = with_corefile(".:53 {\n    forward\n}\n");
    let r = explain(dir.path(), &["-conf", &cf, "example.org"]);
    assert_eq!(r.code, Some(1), "{}{}", r.out, r.err);
    assert!(
        r.err.contains(&format!("{cf}:2 - Error during parsing")),
        "{}",
        r.err
    );

    let port = free_port();
    let (dir, cf) = with_corefile(&corefile(port, ""));
    let r = explain(
        dir.path(),
        &[
            "-conf",
            &cf,
            "-objects",
            "/nonexistent.yaml",
            "-port",
            &port.to_string(),
            "a",
        ],
    );
    assert_eq!(r.code, Some(1), "{}{}", r.out, r.err);
    assert!(r.err.contains("snapshot /nonexistent.yaml"), "{}", r.err);

    let r = explain(
        dir.path(),
        &[
            "-conf",
            &cf,
            "-objects",
            &dump().display().to_string(),
            "-port",
            "1",
            "a",
        ],
    );
    assert_eq!(r.code, Some(1), "{}{}", r.out, r.err);
    assert!(
        r.err.contains(&format!(
            "no server block listens on port 1 (ports: {port})"
        )),
        "{}",
        r.err
    );
}

#[test]
fn a_live_cluster_through_its_kubeconfig() {
    let Some(rig) = Rig::get() else { return };
    let port = free_port();
    let (dir, cf) = with_corefile(&corefile(port, ""));
    let kubeconfig = rig.kubeconfig().display().to_string();
    let r = explain(
        dir.path(),
        &[
            "-conf",
            &cf,
            "-kubeconfig",
            &kubeconfig,
            "-port",
            &port.to_string(),
            "kubernetes.default.svc.cluster.local",
            "A",
        ],
    );
    assert_eq!(r.code, Some(0), "{}{}", r.out, r.err);
    assert!(r.out.contains("the index is synced"), "{}", r.out);
    assert!(
        r.out
            .contains("Service default/kubernetes: ClusterIP 10.96.0.1"),
        "{}",
        r.out
    );
    assert_eq!(
        answers(&r.out),
        ["kubernetes.default.svc.cluster.local. 5 IN A 10.96.0.1"]
    );
}

/// An argument that is not UTF-8 is a bad flag for every job, not a panic.
#[test]
fn a_non_utf8_argument_is_refused_for_every_job() {
    use std::os::unix::ffi::OsStrExt;
    let bad = std::ffi::OsStr::from_bytes(b"\xff\xfe");
    for job in [
        &[][..],
        &["explain"][..],
        &["node-cache"][..],
        &["autoscaler"][..],
    ] {
        let out = Command::new(binary())
            .args(job)
            .arg("-conf")
            .arg(bad)
            .output()
            .expect("run clusterdns");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{job:?}: {err}");
        assert!(err.contains("not UTF-8"), "{job:?}: {err}");
        assert!(!err.contains("panicked"), "{job:?}: {err}");
    }
}

/// Namespace `z`: Nodes in zones a and b and one without a zone label, a
/// client Pod on each, and the headless Service `db` with one ready
/// endpoint in zone a and two in zone b.
const ZONE_DUMP: &str = "apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Namespace
  metadata: {name: z}
- {apiVersion: v1, kind: Node, metadata: {name: n-a, labels: {topology.kubernetes.io/zone: a}}}
- {apiVersion: v1, kind: Node, metadata: {name: n-b, labels: {topology.kubernetes.io/zone: b}}}
- {apiVersion: v1, kind: Node, metadata: {name: n-none}}
- {apiVersion: v1, kind: Pod, metadata: {name: client-a, namespace: z},
   spec: {nodeName: n-a, containers: [{name: c, image: none}]},
   status: {phase: Running, podIP: 10.244.0.5, podIPs: [{ip: 10.244.0.5}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: client-b, namespace: z},
   spec: {nodeName: n-b, containers: [{name: c, image: none}]},
   status: {phase: Running, podIP: 10.244.2.5, podIPs: [{ip: 10.244.2.5}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: client-none, namespace: z},
   spec: {nodeName: n-none, containers: [{name: c, image: none}]},
   status: {phase: Running, podIP: 10.244.3.5, podIPs: [{ip: 10.244.3.5}]}}
- apiVersion: v1
  kind: Service
  metadata: {name: db, namespace: z}
  spec: {clusterIP: None, ports: [{name: sql, port: 5432, protocol: TCP}]}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {name: db-1, namespace: z, labels: {kubernetes.io/service-name: db}}
  addressType: IPv4
  ports: [{name: sql, port: 5432, protocol: TCP}]
  endpoints:
  - {addresses: [10.244.1.1], conditions: {ready: true}, zone: a}
  - {addresses: [10.244.1.2], conditions: {ready: true}, zone: b}
  - {addresses: [10.244.1.3], conditions: {ready: true}, zone: b}
";

/// With `zone_aware`, explain names the client's zone and where it came
/// from (its Pod's Node label, a CIDR map entry, or why it has none) and
/// the endpoints kept, and the reply holds exactly those; with `client_index
/// compact` the Pod count is the compact index's.
#[test]
fn zone_aware_and_compact_are_explained() {
    let port = free_port();
    let dir = tempfile::tempdir().expect("tempdir");
    let objects = dir.path().join("objects.yaml");
    std::fs::write(&objects, ZONE_DUMP).expect("write dump");
    let objects = objects.display().to_string();
    let p = port.to_string();
    let run = |option: &str, from: &str, name: &str, qtype: &str| {
        let cf = dir.path().join("Corefile");
        let text = corefile(port, "").replace(
            "pods insecure\n",
            &format!("pods insecure\n        {option}\n"),
        );
        std::fs::write(&cf, text).expect("write Corefile");
        let cf = cf.display().to_string();
        let r = explain(
            dir.path(),
            &[
                "-conf", &cf, "-objects", &objects, "-port", &p, "-from", from, name, qtype,
            ],
        );
        assert_eq!(
            r.code,
            Some(0),
            "{option} {from} {name}: {}{}",
            r.out,
            r.err
        );
        r.out
    };
    let db = "db.z.svc.cluster.local";
    let (all, in_b) = (&["1", "2", "3"][..], &["2", "3"][..]);
    let map = "zone_aware 10.244.0.0/24 b 10.244.0.0/16 a";
    // (option, client, what explain says, the endpoints answered: 10.244.1.N)
    let cases: [(&str, &str, &[&str], &[&str]); 8] = [
        (
            "zone_aware",
            "10.244.0.5",
            &[
                "zone_aware: the client 10.244.0.5 is in zone a: Pod z/client-a is on Node n-a, \
                 labelled topology.kubernetes.io/zone=a",
                "kept the 1 of 3 ready endpoints meant for zone a (hints.forZones, else the \
                 endpoint's zone): 10.244.1.1\n",
                "so: 1 A record(s)",
            ],
            &["1"],
        ),
        (
            "zone_aware",
            "10.244.2.5",
            &[
                "is in zone b: Pod z/client-b is on Node n-b",
                "kept the 2 of 3 ready endpoints meant for zone b",
            ],
            in_b,
        ),
        (
            "zone_aware",
            "10.244.3.5",
            &[
                "has no zone: Pod z/client-none is on Node n-none, which has no \
                 topology.kubernetes.io/zone label",
                "every ready endpoint kept (the client's zone is unknown)",
            ],
            all,
        ),
        (
            "zone_aware",
            "10.9.9.9",
            &["has no zone: no Pod has that address"],
            all,
        ),
        // The CIDR map: the first network holding the client wins.
        (
            map,
            "10.244.0.5",
            &["the client 10.244.0.5 is in zone b: the CIDR map entry `10.244.0.0/24 b`"],
            in_b,
        ),
        (
            map,
            "10.9.9.9",
            &["it is in none of the CIDR map's networks"],
            all,
        ),
        // A zone with no endpoint of the family: all of them.
        (
            "zone_aware 10.244.0.0/16 c",
            "10.244.0.5",
            &[
                "every ready endpoint kept (none of the asked family is meant for the client's \
               zone)",
            ],
            all,
        ),
        // Without the option nothing about zones is said.
        ("", "10.244.0.5", &[", 3 Pods, "], all),
    ];
    for (option, from, says, kept) in cases {
        let out = run(option, from, db, "A");
        for line in says {
            assert!(
                out.contains(line),
                "{option} from {from}: {line:?} in\n{out}"
            );
        }
        assert_eq!(option.is_empty(), !out.contains("zone_aware"), "{out}");
        let want: Vec<String> = kept
            .iter()
            .map(|n| format!("{db}. 5 IN A 10.244.1.{n}"))
            .collect();
        assert_eq!(answers(&out), want, "{option} from {from}");
    }

    // The compact index keeps no Pod objects: its own count is shown.
    let out = run("client_index compact", "10.244.0.5", db, "A");
    assert!(out.contains(", 3 Pods in the compact index, "), "{out}");
}

// The README's example: in demo/, whose Corefile has one port (1053), no
// `-port` is needed; the listener is that port's.
#[test]
fn the_demo_corefile_needs_no_port() {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../demo");
    let r = explain(&demo, &["nope.default.svc.cluster.local"]);
    assert_eq!(r.code, Some(0), "{}{}", r.out, r.err);
    assert!(r.out.contains("on dns://127.0.0.1:1053"), "{}", r.out);
    assert!(r.out.contains("answered by: kubernetes"), "{}", r.out);
    assert!(r.out.contains("status: NXDOMAIN"), "{}", r.out);
}
