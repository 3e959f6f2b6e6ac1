//! *kubernetes* `isolate` (beyond CoreDNS) on a private rig: a client is
//! known by its Pod's address (`status.podIP` set to a 127.172.X.Y
//! loopback address through the status subresource; the rig runs no
//! kubelet), so a client socket bound to that address is the Pod.
//!
//! With `isolate`, a Pod resolves its own namespace's names and the
//! allowed ones; another namespace's are NXDOMAIN with the zone's SOA, as
//! a name that does not exist; a client that is no Pod follows
//! `isolate_unknown`; `cache` in front never hands one client's answer to
//! another. Allowed answers, and every answer with the option off, are the
//! reference CoreDNS's record for record.

mod common;

use common::{ask_from as ask, pod_addr as addr, rcode_name as rcode};

use clusterdns_test_support::{
    Outcome, PrivateRig, Rig, RunningServer, TtlMode, compare, eventually,
};

/// The plain cluster Corefile; `@ISOLATE@` is replaced by the policy's lines.
const COREFILE: &str = "
.:@PORT@ {
    bind 127.0.0.1
    @CACHE@
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig @KUBECONFIG@
        @ISOLATE@
    }
}
";

/// A ClusterIP Service `web` and a headless `db` with one ready endpoint
/// at `db_ip`.
fn services(rig: &Rig, ns: &str, db_ip: &str) {
    rig.apply_yaml(&format!(
        "{web}---\n{db}---\n{slice}",
        web = common::web_service_yaml(ns),
        db = common::headless_service_yaml(ns, "db", "sql", 5432),
        slice = common::endpoint_slice_yaml(
            ns,
            "db",
            "db-1",
            &[(db_ip, None, true)],
            "[{name: sql, port: 5432, protocol: TCP}]"
        ),
    ))
    .expect("services");
}

fn cluster_ip(rig: &Rig, ns: &str) -> String {
    rig.kubectl(&[
        "-n",
        ns,
        "get",
        "svc",
        "web",
        "-o",
        "jsonpath={.spec.clusterIP}",
    ])
    .expect("cluster IP")
    .trim()
    .to_string()
}

fn reverse(ip: &str) -> String {
    let mut o: Vec<&str> = ip.split('.').collect();
    o.reverse();
    format!("{}.in-addr.arpa.", o.join("."))
}

fn start(rig: &Rig, cache: &str, isolate: &str) -> RunningServer {
    common::start_on_rig(rig, COREFILE, &[("CACHE", cache), ("ISOLATE", isolate)])
}

/// Asserts `o` is NXDOMAIN with no answer and the same authority as
/// `like`, the server's NXDOMAIN for a name that does not exist.
fn assert_hidden(what: &str, o: &Outcome, like: &Outcome) {
    let (Some(r), Some(l)) = (o.response(), like.response()) else {
        panic!("{what}: {} / {}", o.summary(), like.summary());
    };
    assert_eq!(r.rcode_name(), "NXDOMAIN", "{what}: {r}");
    assert!(r.answer.is_empty(), "{what}: {r}");
    assert_eq!(r.authority.len(), 1, "{what}: {r}");
    assert_eq!(r.authority[0].rtype, "SOA", "{what}: {r}");
    assert_eq!(r.authority, l.authority, "{what}: {r}\nlike:\n{l}");
}

#[test]
fn isolate_hides_other_namespaces_from_pods() {
    let Some(private) = PrivateRig::start(&[]) else {
        return;
    };
    let rig = private.rig();
    let a_ns = rig.namespace("iso-a").expect("namespace");
    let b_ns = rig.namespace("iso-b").expect("namespace");
    let c_ns = rig.namespace("iso-c").expect("namespace");
    let (a, b, c) = (a_ns.name(), b_ns.name(), c_ns.name());
    services(rig, a, "10.91.0.1");
    services(rig, b, "10.91.0.2");
    services(rig, c, "10.91.0.3");
    let (ca, cb, stranger) = (addr(2), addr(3), addr(9));
    common::pod_at(rig, a, "client", None, ca.into());
    common::pod_at(rig, b, "client", None, cb.into());
    // Host-network Pods of two namespaces share their node's address.
    let node = addr(5);
    common::pod_at(rig, a, "agent", None, node.into());
    common::pod_at(rig, b, "agent", None, node.into());
    let b_ip = cluster_ip(rig, b);
    let a_ip = cluster_ip(rig, a);

    // `cache` in front: a reply must never reach another client through it.
    let open = start(rig, "cache 30", &format!("isolate {c}"));
    let strict = start(
        rig,
        "",
        &format!("isolate {c}\n        isolate_unknown deny"),
    );
    let name = |svc: &str, ns: &str| format!("{svc}.{ns}.svc.cluster.local.");

    // Synced once the Pods are known: A's client no longer sees B.
    for s in [&open, &strict] {
        eventually(60, "pods and services known", || {
            let seen = ask(ca, s.addr, &name("web", b), "A");
            let own = ask(ca, s.addr, &name("db", a), "A");
            let ptr = ask(ca, s.addr, &reverse(&a_ip), "PTR");
            match (
                rcode(&seen).as_str(),
                rcode(&own).as_str(),
                rcode(&ptr).as_str(),
            ) {
                ("NXDOMAIN", "NOERROR", "NOERROR") => Ok(()),
                other => Err(format!("{other:?}")),
            }
        });
    }

    // Each server's NXDOMAIN for a name that does not exist (SOA serials
    // are each index's own).
    let nosuch = ask(ca, open.addr, &name("nosuch", a), "A");
    let nosuch_strict = ask(ca, strict.addr, &name("nosuch", a), "A");
    assert_eq!(rcode(&nosuch), "NXDOMAIN", "{}", nosuch.summary());
    let nosuch_ptr = ask(ca, open.addr, &reverse("10.91.255.254"), "PTR");
    let nosuch_ptr_strict = ask(ca, strict.addr, &reverse("10.91.255.254"), "PTR");
    assert_eq!(rcode(&nosuch_ptr), "NXDOMAIN", "{}", nosuch_ptr.summary());
    for (qname, qtype) in [
        (name("web", b), "A"),
        (name("web", b), "AAAA"),
        (name("web", b), "TXT"),
        (format!("_http._tcp.{}", name("web", b)), "SRV"),
        (name("db", b), "A"),
        (format!("10-91-0-2.{}", name("db", b)), "A"),
        // The namespace itself: NODATA to a client that may see it.
        (format!("{b}.svc.cluster.local."), "A"),
        (reverse(&b_ip), "PTR"),
        (reverse("10.91.0.2"), "PTR"),
    ] {
        let what = format!("{qname} {qtype} from A");
        let (like, like_strict) = if qtype == "PTR" {
            (&nosuch_ptr, &nosuch_ptr_strict)
        } else {
            (&nosuch, &nosuch_strict)
        };
        assert_hidden(&what, &ask(ca, open.addr, &qname, qtype), like);
        assert_hidden(&what, &ask(ca, strict.addr, &qname, qtype), like_strict);
    }

    // B's own client sees them (after A was refused them through the
    // cache), and A is still refused after B was answered.
    for _ in 0..2 {
        let o = ask(cb, open.addr, &name("web", b), "A");
        assert_eq!(rcode(&o), "NOERROR", "{}", o.summary());
        assert_eq!(
            o.response().map_or(0, |r| r.answer.len()),
            1,
            "{}",
            o.summary()
        );
        let o = ask(cb, open.addr, &reverse(&b_ip), "PTR");
        assert_eq!(
            o.response().map_or(0, |r| r.answer.len()),
            1,
            "{}",
            o.summary()
        );
        assert_hidden(
            "web.B again",
            &ask(ca, open.addr, &name("web", b), "A"),
            &nosuch,
        );
        let o = ask(ca, open.addr, &reverse(&b_ip), "PTR");
        assert_hidden("PTR of web.B again", &o, &nosuch_ptr);
    }

    // A client that is no Pod: everything with `isolate_unknown allow`
    // (the default), only the allowed namespace's names with `deny`.
    let o = ask(stranger, open.addr, &name("web", b), "A");
    assert_eq!(rcode(&o), "NOERROR", "{}", o.summary());
    assert_hidden(
        "web.B from a stranger, deny",
        &ask(stranger, strict.addr, &name("web", b), "A"),
        &nosuch_strict,
    );
    assert_hidden(
        "web.A from a stranger, deny",
        &ask(stranger, strict.addr, &name("web", a), "A"),
        &nosuch_strict,
    );
    let o = ask(stranger, strict.addr, &name("web", c), "A");
    assert_eq!(rcode(&o), "NOERROR", "{}", o.summary());
    let o = ask(stranger, strict.addr, "cluster.local.", "SOA");
    assert_eq!(rcode(&o), "NOERROR", "{}", o.summary());
    // An address of Pods of several namespaces is no one namespace's.
    let o = ask(node, open.addr, &name("web", b), "A");
    assert_eq!(rcode(&o), "NOERROR", "{}", o.summary());
    assert_hidden(
        "web.A from a shared address, deny",
        &ask(node, strict.addr, &name("web", a), "A"),
        &nosuch_strict,
    );
    assert_hidden(
        "web.B from a shared address, deny",
        &ask(node, strict.addr, &name("web", b), "A"),
        &nosuch_strict,
    );

    // What a client may see is answered as CoreDNS answers it (no cache
    // in `strict`, so TTLs compare exactly too); with the option off every
    // name is, whoever asks.
    let d = common::rig_differential(rig, COREFILE, &[("CACHE", ""), ("ISOLATE", "")]);
    let mut seen: Vec<(String, &str)> = Vec::new();
    for ns in [a, c] {
        seen.extend([
            (name("web", ns), "A"),
            (name("web", ns), "AAAA"),
            (format!("_http._tcp.{}", name("web", ns)), "SRV"),
            (name("db", ns), "A"),
            (format!("_sql._tcp.{}", name("db", ns)), "SRV"),
            (format!("{ns}.svc.cluster.local."), "A"),
        ]);
    }
    seen.extend([
        (reverse(&a_ip), "PTR"),
        (reverse("10.91.0.1"), "PTR"),
        ("cluster.local.".into(), "SOA"),
        ("cluster.local.".into(), "NS"),
        ("dns-version.cluster.local.".into(), "TXT"),
    ]);
    let mut unseen = vec![
        (name("web", b), "A"),
        (name("db", b), "A"),
        (reverse(&b_ip), "PTR"),
    ];
    eventually(30, "the reference synced", || {
        match rcode(&ask(ca, d.reference.addr, &name("db", b), "A")).as_str() {
            "NOERROR" => Ok(()),
            other => Err(other.to_string()),
        }
    });
    let mut failures = Vec::new();
    for (qname, qtype) in &seen {
        let r = ask(ca, d.reference.addr, qname, qtype);
        let s = ask(ca, strict.addr, qname, qtype);
        let diffs = compare(&r, &s, TtlMode::Exact);
        if !diffs.is_empty() {
            failures.push(format!("isolate, {qname} {qtype}: {diffs:?}"));
        }
    }
    unseen.extend(seen);
    failures.extend(common::differences(
        "off",
        d.reference.addr,
        d.candidate.addr,
        &[ca, cb, stranger],
        &unseen,
    ));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn isolate_setup_errors_name_the_line() {
    for (body, want) in [
        (
            "isolate_unknown maybe",
            "wrong value for isolate_unknown: maybe, must be one of: allow, deny",
        ),
        ("isolate_unknown", "Wrong argument count"),
        ("isolate_unknown allow deny", "Wrong argument count"),
        ("isolate_unknown deny", "isolate_unknown needs isolate"),
    ] {
        let isolate = if want.contains("needs") {
            ""
        } else {
            "isolate\n        "
        };
        let corefile = format!(
            ".:{{PORT}} {{\n    kubernetes cluster.local {{\n        {isolate}{body}\n    }}\n}}\n"
        );
        let out = common::config_error(&corefile);
        assert!(out.contains(want), "{body}: {out}");
        assert!(out.contains("Corefile:"), "{body}: no file:line in {out}");
    }
}
