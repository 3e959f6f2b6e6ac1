//! *kubernetes* `zone_aware` (beyond CoreDNS) on a private rig: a client
//! is known by its Pod's address (`status.podIP` set to a 127.172.X.Y
//! loopback address; the rig runs no kubelet, so a client socket bound to
//! it is the Pod), its zone by the `topology.kubernetes.io/zone` label of
//! the Node its Pod is bound to (`spec.nodeName`), or by a CIDR → zone
//! map.
//!
//! A headless Service's name answers a client of a known zone with the
//! ready endpoints meant for its zone (`hints.forZones`, else `zone`), all
//! ready endpoints when none of the query's family is; everything else,
//! and every answer with the option off or to a client of unknown zone,
//! is the reference CoreDNS's record for record.

mod common;

use common::{ask_from as ask, pod_addr as addr, rcode_name as rcode};

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr};

use clusterdns_test_support::{Outcome, PrivateRig, Rig, RunningServer, eventually};

/// The plain cluster Corefile; `@ZONE@` is replaced by the option's line.
const COREFILE: &str = "
.:@PORT@ {
    bind 127.0.0.1
    @CACHE@
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig @KUBECONFIG@
        @ZONE@
    }
}
";

/// The answer's rdata of type `rtype`, as a set ("" entries for none).
fn rdata(o: &Outcome, rtype: &str) -> BTreeSet<String> {
    o.response()
        .map(|r| {
            r.answer
                .iter()
                .filter(|rr| rr.rtype == rtype)
                .map(|rr| rr.rdata.clone())
                .collect()
        })
        .unwrap_or_default()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| (*s).to_string()).collect()
}

/// A Node with `zone` as its zone label (none when empty). Nothing runs
/// on it: the rig has no kubelet, and no controller acts on Nodes.
fn node(rig: &Rig, name: &str, zone: &str) {
    let labels = if zone.is_empty() {
        "{}".to_string()
    } else {
        format!("{{topology.kubernetes.io/zone: {zone}}}")
    };
    rig.apply_yaml(&format!(
        "apiVersion: v1\nkind: Node\nmetadata: {{name: {name}, labels: {labels}}}\n"
    ))
    .expect("node");
}

/// One endpoint of a slice: address, ready, zone, hinted zones.
type Ep<'a> = (&'a str, bool, &'a str, &'a [&'a str]);

fn slice_yaml(ns: &str, svc: &str, name: &str, family: &str, eps: &[Ep<'_>]) -> String {
    let mut y = common::endpoint_slice_head_yaml(ns, svc, name, family);
    y.push_str("ports: [{name: sql, port: 5432, protocol: TCP}]\nendpoints:\n");
    for (ip, ready, zone, hints) in eps {
        y.push_str(&format!(
            "- addresses: [\"{ip}\"]\n  conditions: {{ready: {ready}}}\n"
        ));
        if !zone.is_empty() {
            y.push_str(&format!("  zone: {zone}\n"));
        }
        if !hints.is_empty() {
            let z: Vec<String> = hints.iter().map(|h| format!("{{name: {h}}}")).collect();
            y.push_str(&format!("  hints: {{forZones: [{}]}}\n", z.join(", ")));
        }
    }
    y
}

/// A headless Service with one EndpointSlice per (address family,
/// endpoints), as YAML.
fn headless_yaml(ns: &str, svc: &str, slices: &[(&str, &[Ep<'_>])]) -> String {
    let mut y = common::headless_service_yaml(ns, svc, "sql", 5432);
    for (i, (family, eps)) in slices.iter().enumerate() {
        y.push_str("---\n");
        y.push_str(&slice_yaml(ns, svc, &format!("{svc}-{i}"), family, eps));
    }
    y
}

/// The test's headless Services:
/// * `db`: zone-a .1, zone-b .2 and .3, a zone-a .4 that is not ready,
///   one endpoint of no zone (.5);
/// * `hinted`: hints that send zone-a's clients to the zone-b endpoint and
///   back (hints win over `zone`);
/// * `far`: ready endpoints in zone-b only, a zone-a one not ready;
/// * `split`: zone-a's endpoint is IPv6 only, zone-b's IPv4.
type Slices = &'static [(&'static str, &'static [Ep<'static>])];
const HEADLESS: &[(&str, Slices)] = &[
    (
        "db",
        &[(
            "IPv4",
            &[
                ("10.92.0.1", true, "zone-a", &[]),
                ("10.92.0.2", true, "zone-b", &[]),
                ("10.92.0.3", true, "zone-b", &[]),
                ("10.92.0.4", false, "zone-a", &[]),
                ("10.92.0.5", true, "", &[]),
            ],
        )],
    ),
    (
        "hinted",
        &[(
            "IPv4",
            &[
                ("10.93.0.1", true, "zone-a", &["zone-b"]),
                ("10.93.0.2", true, "zone-b", &["zone-a"]),
            ],
        )],
    ),
    (
        "far",
        &[(
            "IPv4",
            &[
                ("10.94.0.1", true, "zone-b", &[]),
                ("10.94.0.2", true, "zone-b", &[]),
                ("10.94.0.3", false, "zone-a", &[]),
            ],
        )],
    ),
    (
        "split",
        &[
            ("IPv4", &[("10.95.0.2", true, "zone-b", &[])]),
            (
                "IPv6",
                &[
                    ("fd00:95::1", true, "zone-a", &[]),
                    ("fd00:95::2", true, "zone-b", &[]),
                ],
            ),
        ],
    ),
];

/// [`HEADLESS`] and `web`, a ClusterIP Service, in `ns`.
fn services(rig: &Rig, ns: &str) {
    for (svc, slices) in HEADLESS {
        rig.apply_yaml(&headless_yaml(ns, svc, slices))
            .expect("headless service");
    }
    rig.apply_yaml(&common::web_service_yaml(ns)).expect("web");
}

fn start(rig: &Rig, cache: &str, zone: &str) -> RunningServer {
    common::start_on_rig(rig, COREFILE, &[("CACHE", cache), ("ZONE", zone)])
}

/// Every question the test asks of a namespace's names.
fn questions(ns: &str) -> Vec<(String, &'static str)> {
    let name = |svc: &str| format!("{svc}.{ns}.svc.cluster.local.");
    let mut q = Vec::new();
    for svc in ["db", "hinted", "far", "split", "web"] {
        q.push((name(svc), "A"));
        q.push((name(svc), "AAAA"));
        q.push((format!("_sql._tcp.{}", name(svc)), "SRV"));
    }
    q.push((format!("10-92-0-2.{}", name("db")), "A"));
    q.push((name("nosuch"), "A"));
    q.push(("2.0.92.10.in-addr.arpa.".into(), "PTR"));
    q
}

/// One expectation: the server, the client, the question, the answer's
/// records of the question's type.
type Case<'a> = (
    &'a RunningServer,
    Ipv4Addr,
    String,
    &'a str,
    BTreeSet<String>,
);

/// Every ready endpoint of `db`.
const ALL_DB: &[&str] = &["10.92.0.1", "10.92.0.2", "10.92.0.3", "10.92.0.5"];

#[test]
fn zone_aware_answers_headless_names_from_the_clients_zone() {
    let Some(private) = PrivateRig::start(&[]) else {
        return;
    };
    let rig = private.rig();
    let ns_guard = rig.namespace("zone").expect("namespace");
    let ns = ns_guard.name();
    node(rig, "zn-a", "zone-a");
    node(rig, "zn-b", "zone-b");
    node(rig, "zn-none", "");
    let (ca, cb, cn, stranger) = (addr(2), addr(3), addr(4), addr(9));
    common::pod_at(rig, ns, "client-a", Some("zn-a"), ca.into());
    common::pod_at(rig, ns, "client-b", Some("zn-b"), cb.into());
    common::pod_at(rig, ns, "client-none", Some("zn-none"), cn.into());
    services(rig, ns);
    let name = |svc: &str| format!("{svc}.{ns}.svc.cluster.local.");

    // `cache` in front: a reply must never reach another client through it.
    let nodes = start(rig, "cache 30", "zone_aware");
    // A map whose first match wins: client A's /32 is zone-b, the rest of
    // the /24 zone-a. No Pod or Node is looked at.
    let octet = (std::process::id() % 250) as u8;
    let mapped = start(
        rig,
        "",
        &format!("zone_aware 127.172.{octet}.2/32 zone-b 127.172.{octet}.0/24 zone-a"),
    );

    // Synced (NXDOMAIN, not SERVFAIL, for a missing name), every Service
    // known, and the Pods and Nodes: A and B no longer get the same.
    for server in [&nodes, &mapped] {
        eventually(60, "synced, services known", || {
            let mut seen = vec![rcode(&ask(stranger, server.addr, &name("nosuch"), "A"))];
            for svc in ["db", "hinted", "far", "split"] {
                seen.push(rcode(&ask(stranger, server.addr, &name(svc), "A")));
            }
            if seen[0] == "NXDOMAIN" && seen[1..].iter().all(|r| r == "NOERROR") {
                Ok(())
            } else {
                Err(format!("{seen:?}"))
            }
        });
    }
    eventually(60, "pods and nodes known", || {
        let a = rdata(&ask(ca, nodes.addr, &name("db"), "A"), "A");
        let b = rdata(&ask(cb, nodes.addr, &name("db"), "A"), "A");
        if a == set(&["10.92.0.1"]) && b == set(&["10.92.0.2", "10.92.0.3"]) {
            Ok(())
        } else {
            Err(format!("A: {a:?}, B: {b:?}"))
        }
    });

    let c = |server, src, qname, qtype, want: &[&str]| -> Case<'_> {
        (server, src, qname, qtype, set(want))
    };
    let db_sql = format!("_sql._tcp.{}", name("db"));
    let cases = [
        // Twice each, through the cache, interleaved.
        c(&nodes, ca, name("db"), "A", &["10.92.0.1"]),
        c(&nodes, cb, name("db"), "A", &["10.92.0.2", "10.92.0.3"]),
        c(&nodes, ca, name("db"), "A", &["10.92.0.1"]),
        c(&nodes, cb, name("db"), "A", &["10.92.0.2", "10.92.0.3"]),
        // A node without a zone label, an address that is no Pod's: all.
        c(&nodes, cn, name("db"), "A", ALL_DB),
        c(&nodes, stranger, name("db"), "A", ALL_DB),
        // Hints win over the endpoint's own zone.
        c(&nodes, ca, name("hinted"), "A", &["10.93.0.2"]),
        c(&nodes, cb, name("hinted"), "A", &["10.93.0.1"]),
        // None ready in zone-a: everything ready.
        c(&nodes, ca, name("far"), "A", &["10.94.0.1", "10.94.0.2"]),
        // Per family: zone-a has only an IPv6 endpoint.
        c(&nodes, ca, name("split"), "A", &["10.95.0.2"]),
        c(&nodes, ca, name("split"), "AAAA", &["fd00:95::1"]),
        c(&nodes, cb, name("split"), "AAAA", &["fd00:95::2"]),
        // An endpoint's own name is that endpoint, whoever asks.
        c(
            &nodes,
            ca,
            format!("10-92-0-2.{}", name("db")),
            "A",
            &["10.92.0.2"],
        ),
        // The map: A's address is zone-b by its /32, B's zone-a by the /24.
        c(&mapped, ca, name("db"), "A", &["10.92.0.2", "10.92.0.3"]),
        c(&mapped, cb, name("db"), "A", &["10.92.0.1"]),
        c(&mapped, cn, name("db"), "A", &["10.92.0.1"]),
        c(&mapped, Ipv4Addr::LOCALHOST, name("db"), "A", ALL_DB),
    ];
    // SRV: the zone's targets, weights over them.
    let srv = |hosts: &[&str]| -> BTreeSet<String> {
        hosts
            .iter()
            .map(|h| {
                format!(
                    "0 {} 5432 {h}.db.{ns}.svc.cluster.local.",
                    100 / hosts.len()
                )
            })
            .collect()
    };
    let srv_cases = [
        (&nodes, ca, db_sql.clone(), "SRV", srv(&["10-92-0-1"])),
        (&nodes, cb, db_sql, "SRV", srv(&["10-92-0-2", "10-92-0-3"])),
    ];
    let mut failures = Vec::new();
    for (server, src, qname, qtype, want) in cases.iter().chain(&srv_cases) {
        let o = ask(*src, server.addr, qname, qtype);
        let got = rdata(&o, qtype);
        if rcode(&o) != "NOERROR" || got != *want {
            failures.push(format!(
                "{qname} {qtype} from {src} (port {}): got {got:?}, want {want:?}\n{}",
                server.addr.port(),
                o.summary()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{}\nzone_aware log:\n{}\nmap log:\n{}",
        failures.join("\n"),
        nodes.log(),
        mapped.log()
    );

    // What is not a headless Service's name, and everything asked by a
    // client of unknown zone, is CoreDNS's answer exactly; so is every
    // answer with the option off, whoever asks.
    let d = common::rig_differential(rig, COREFILE, &[("CACHE", ""), ("ZONE", "")]);
    let on = start(rig, "", "zone_aware");
    eventually(60, "the three servers synced", || {
        let r = rcode(&ask(ca, d.reference.addr, &name("split"), "AAAA"));
        let c = rcode(&ask(ca, d.candidate.addr, &name("nosuch"), "A"));
        let n = rcode(&ask(ca, on.addr, &name("nosuch"), "A"));
        let o = rdata(&ask(ca, on.addr, &name("db"), "A"), "A");
        if r == "NOERROR" && c == "NXDOMAIN" && n == "NXDOMAIN" && o == set(&["10.92.0.1"]) {
            Ok(())
        } else {
            Err(format!("{r} {c} {n} {o:?}"))
        }
    });
    let all = questions(ns);
    let (dependent, alike): (Vec<_>, Vec<_>) = all.iter().cloned().partition(|(q, _)| {
        !q.starts_with("10-") && HEADLESS.iter().any(|(svc, _)| q.ends_with(&name(svc)))
    });
    assert!(!dependent.is_empty() && !alike.is_empty());
    let every = [ca, cb, cn, stranger];
    failures.extend(common::differences(
        "off",
        d.reference.addr,
        d.candidate.addr,
        &every,
        &all,
    ));
    failures.extend(common::differences(
        "on",
        d.reference.addr,
        on.addr,
        &[cn, stranger],
        &all,
    ));
    failures.extend(common::differences(
        "on",
        d.reference.addr,
        on.addr,
        &every,
        &alike,
    ));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The same rule without a cluster: Nodes, Pods (bound, with their IPs)
/// and the Services from a `snapshot` file, for both ways of knowing the
/// client's zone.
#[test]
fn zone_aware_from_a_snapshot() {
    let ns = "snap";
    let mut objects = format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n");
    for (node, zone) in [("zn-a", "zone-a"), ("zn-b", "zone-b")] {
        objects.push_str(&format!(
            "---\napiVersion: v1\nkind: Node\nmetadata: {{name: {node}, labels: {{topology.kubernetes.io/zone: {zone}}}}}\n"
        ));
    }
    for (pod, node, n) in [("client-a", "zn-a", 2), ("client-b", "zn-b", 3)] {
        objects.push_str(&format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {pod}, namespace: {ns}}}\nspec: {{nodeName: {node}, containers: [{{name: c, image: none}}]}}\nstatus: {{podIP: {}}}\n",
            addr(n)
        ));
    }
    for (svc, slices) in HEADLESS {
        objects.push_str("---\n");
        objects.push_str(&headless_yaml(ns, svc, slices));
    }
    let octet = (std::process::id() % 250) as u8;
    // No Pod's, and in no network of the map.
    let (ca, cb, stranger) = (addr(2), addr(3), Ipv4Addr::LOCALHOST);
    let name = |svc: &str| format!("{svc}.{ns}.svc.cluster.local.");
    for (option, a_gets, b_gets) in [
        ("zone_aware", "zone-a", "zone-b"),
        (
            &*format!("zone_aware 127.172.{octet}.2/32 zone-b 127.172.{octet}.0/24 zone-a"),
            "zone-b",
            "zone-a",
        ),
    ] {
        let corefile = format!(
            ".:{{PORT}} {{\n    kubernetes cluster.local {{\n        snapshot objects.yaml\n        {option}\n    }}\n}}\n"
        );
        let server = common::Server::start_with(&corefile, &[("objects.yaml", &objects)]);
        let at = SocketAddr::from(([127, 0, 0, 1], server.port));
        let db = |zone: &str| -> &[&str] {
            if zone == "zone-a" {
                &["10.92.0.1"]
            } else {
                &["10.92.0.2", "10.92.0.3"]
            }
        };
        let hinted = |zone: &str| {
            if zone == "zone-a" {
                "10.93.0.2"
            } else {
                "10.93.0.1"
            }
        };
        for (src, qname, qtype, want) in [
            (ca, name("db"), "A", set(db(a_gets))),
            (cb, name("db"), "A", set(db(b_gets))),
            (stranger, name("db"), "A", set(ALL_DB)),
            (ca, name("hinted"), "A", set(&[hinted(a_gets)])),
            (cb, name("hinted"), "A", set(&[hinted(b_gets)])),
            (
                ca,
                format!("10-92-0-2.{}", name("db")),
                "A",
                set(&["10.92.0.2"]),
            ),
        ] {
            let o = ask(src, at, &qname, qtype);
            assert_eq!(
                rdata(&o, qtype),
                want,
                "{option}: {qname} from {src}\n{}",
                o.summary()
            );
        }
        // zone-a has no ready IPv4 endpoint of `far`, and only an IPv6
        // one of `split`.
        let za = if a_gets == "zone-a" { ca } else { cb };
        let far = ask(za, at, &name("far"), "A");
        assert_eq!(
            rdata(&far, "A"),
            set(&["10.94.0.1", "10.94.0.2"]),
            "{option}"
        );
        let split = ask(za, at, &name("split"), "A");
        assert_eq!(rdata(&split, "A"), set(&["10.95.0.2"]), "{option}");
        let split6 = ask(za, at, &name("split"), "AAAA");
        assert_eq!(rdata(&split6, "AAAA"), set(&["fd00:95::1"]), "{option}");
    }
}

#[test]
fn zone_aware_setup_errors_name_the_line() {
    for (body, want) in [
        (
            "zone_aware 10.0.0.0/8",
            "zone_aware takes CIDR ZONE pairs: an odd number of arguments was given",
        ),
        (
            "zone_aware 10.0.0.0/33 zone-a",
            "zone_aware: invalid CIDR '10.0.0.0/33'",
        ),
        (
            "zone_aware zone-a 10.0.0.0/8",
            "zone_aware: invalid CIDR 'zone-a'",
        ),
        ("zone_aware\n        zone_aware", "zone_aware given twice"),
    ] {
        let corefile =
            format!(".:{{PORT}} {{\n    kubernetes cluster.local {{\n        {body}\n    }}\n}}\n");
        let out = common::config_error(&corefile);
        assert!(out.contains(want), "{body}: {out}");
        assert!(out.contains("Corefile:"), "{body}: no file:line in {out}");
    }
}
