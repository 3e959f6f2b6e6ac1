//! Index tests: objects applied directly, no cluster, no runtime.

mod common;

use std::sync::Arc;

use clusterdns_kubeindex::k8s_openapi::api::core::v1 as core;
use clusterdns_kubeindex::k8s_openapi::api::discovery::v1 as discovery;
use clusterdns_kubeindex::{
    Counters, EventKind, Index, Kind, Protocol, ReverseHit, Scope, ServiceKind, SkipReason,
    Snapshot,
};
use common::*;
use kube::runtime::watcher::Event;

fn index() -> (Index, Arc<Counters>) {
    let counters = Arc::new(Counters::default());
    (Index::with_hooks(counters.clone()), counters)
}

fn published(index: &mut Index) -> Arc<Snapshot> {
    index.publish();
    index.snapshots().load_full()
}

fn reverse_names(snap: &Snapshot, addr: &str) -> Vec<String> {
    snap.reverse(ip(addr))
        .map(|hit| match hit {
            ReverseHit::Service(s) => format!("svc {}/{}", s.namespace(), s.name()),
            ReverseHit::Endpoint {
                namespace,
                service,
                endpoint,
            } => format!(
                "ep {namespace}/{service} {}",
                endpoint.hostname().unwrap_or("-")
            ),
        })
        .collect()
}

#[test]
fn service_lookup_ignores_case_and_publishes_once_per_change() {
    let (mut index, counters) = index();
    index.apply(svc(
        "default",
        "kubernetes",
        &["10.96.0.1"],
        &[("https", "TCP", 443)],
    ));
    assert!(
        index
            .snapshots()
            .load()
            .service("default", "kubernetes")
            .is_none(),
        "not yet published"
    );
    let snap = published(&mut index);
    assert_eq!(snap.generation(), 1);
    let s = snap
        .service("DeFault", "KUBERNETES")
        .expect("found ignoring case");
    assert_eq!(s.kind(), ServiceKind::ClusterIp);
    assert!(!s.is_headless());
    assert_eq!(s.cluster_ips(), &[ip("10.96.0.1")]);
    assert_eq!(s.ports()[0].name(), Some("https"));
    assert_eq!(s.ports()[0].protocol(), Protocol::Tcp);
    assert_eq!(s.ports()[0].port(), 443);
    assert!(snap.serial() > 0);

    // Same object again (a resync, or a change to fields DNS ignores): nothing to publish.
    index.apply(svc(
        "default",
        "kubernetes",
        &["10.96.0.1"],
        &[("https", "TCP", 443)],
    ));
    assert!(!index.is_dirty());
    assert_eq!(index.publish(), None);
    assert_eq!(counters.events(Kind::Service, EventKind::Apply), 2);
    assert_eq!(counters.published(), 1);
}

#[test]
fn old_snapshots_never_change() {
    let (mut index, _) = index();
    for i in 0..300 {
        index.apply(svc(
            "ns",
            &format!("s{i}"),
            &[&format!("10.0.{}.{}", i / 250, i % 250)],
            &[],
        ));
    }
    let before = published(&mut index);
    index.apply(svc("ns", "s7", &["10.9.9.9"], &[]));
    index.delete(&svc("ns", "s8", &[], &[]));
    let after = published(&mut index);
    assert_eq!(
        before.service("ns", "s7").unwrap().cluster_ips(),
        &[ip("10.0.0.7")]
    );
    assert!(before.service("ns", "s8").is_some());
    assert_eq!(before.services().count(), 300);
    assert_eq!(
        after.service("ns", "s7").unwrap().cluster_ips(),
        &[ip("10.9.9.9")]
    );
    assert!(after.service("ns", "s8").is_none());
    assert_eq!(after.services().count(), 299);
    assert_eq!(reverse_names(&after, "10.0.0.7"), Vec::<String>::new());
    assert_eq!(reverse_names(&before, "10.0.0.7"), ["svc ns/s7"]);
    assert_eq!(after.generation(), before.generation() + 1);
}

#[test]
fn headless_dual_stack_and_external_name() {
    let (mut index, _) = index();
    index.apply(svc("ns", "headless", &["None"], &[("http", "TCP", 80)]));
    index.apply(svc(
        "ns",
        "dual",
        &["10.0.0.10", "fd00::10"],
        &[("dns", "UDP", 53)],
    ));
    index.apply(external("ns", "ext", "www.example.com"));
    let snap = published(&mut index);
    let h = snap.service("ns", "headless").unwrap();
    assert!(h.is_headless());
    assert!(h.cluster_ips().is_empty());
    let d = snap.service("ns", "dual").unwrap();
    assert_eq!(d.cluster_ips(), &[ip("10.0.0.10"), ip("fd00::10")]);
    assert_eq!(reverse_names(&snap, "fd00::10"), ["svc ns/dual"]);
    assert_eq!(reverse_names(&snap, "10.0.0.10"), ["svc ns/dual"]);
    let e = snap.service("ns", "ext").unwrap();
    assert_eq!(e.kind(), ServiceKind::ExternalName);
    assert_eq!(e.external_name(), Some("www.example.com"));
    assert!(!e.is_headless());
    assert_eq!(snap.services_in("NS").count(), 3);
    assert_eq!(snap.services_in("other").count(), 0);
}

#[test]
fn slices_of_a_service_are_merged_and_reverse_follows() {
    let (mut index, _) = index();
    index.apply(svc("ns", "web", &["None"], &[("http", "TCP", 80)]));
    let a = slice(
        "ns",
        "web-a",
        "web",
        &[
            Ep {
                hostname: Some("web-0"),
                ..ep("10.1.0.1")
            },
            ep("10.1.0.2"),
        ],
        &[("http", "TCP", 80)],
    );
    let b = slice(
        "ns",
        "web-b",
        "web",
        &[ep("10.1.0.2"), ep("10.1.0.3")],
        &[("http", "TCP", 80)],
    );
    let v6 = slice(
        "ns",
        "web-c",
        "web",
        &[ep("fd00::1:1")],
        &[("http", "TCP", 80)],
    );
    index.apply(a.clone());
    index.apply(b.clone());
    index.apply(v6);
    let snap = published(&mut index);
    let eps = snap.endpoints("ns", "WEB").unwrap();
    assert_eq!(
        eps.slices().iter().map(|s| s.name()).collect::<Vec<_>>(),
        ["web-a", "web-b", "web-c"]
    );
    let ips: Vec<String> = eps.ready().map(|(_, e)| e.ip().to_string()).collect();
    assert_eq!(
        ips,
        ["10.1.0.1", "10.1.0.2", "10.1.0.2", "10.1.0.3", "fd00::1:1"]
    );
    assert_eq!(
        eps.slices()[2].address_type(),
        clusterdns_kubeindex::AddressType::V6
    );
    assert_eq!(reverse_names(&snap, "10.1.0.1"), ["ep ns/web web-0"]);
    // One entry per slice occurrence: the adapter de-duplicates by target name.
    assert_eq!(
        reverse_names(&snap, "10.1.0.2"),
        ["ep ns/web -", "ep ns/web -"]
    );

    // 10.1.0.2 stays known through slice b when slice a goes.
    index.delete(&a);
    let snap = published(&mut index);
    assert_eq!(reverse_names(&snap, "10.1.0.1"), Vec::<String>::new());
    assert_eq!(reverse_names(&snap, "10.1.0.2"), ["ep ns/web -"]);
    index.delete(&b);
    let snap = published(&mut index);
    assert_eq!(reverse_names(&snap, "10.1.0.2"), Vec::<String>::new());
    assert_eq!(snap.endpoints("ns", "web").unwrap().slices().len(), 1);
    assert_eq!(snap.counts().reverse_ips, 1);
}

#[test]
fn conditions_and_readiness() {
    let (mut index, _) = index();
    let s = slice(
        "ns",
        "s-1",
        "s",
        &[
            ep("10.2.0.1"), // all nil: ready and serving
            Ep {
                ready: Some(false),
                serving: Some(true),
                terminating: Some(true),
                ..ep("10.2.0.2")
            },
            Ep {
                ready: Some(true),
                ..ep("10.2.0.3")
            },
        ],
        &[],
    );
    index.apply(s);
    let snap = published(&mut index);
    let eps = snap.endpoints("ns", "s").unwrap();
    let all: Vec<_> = eps.iter().map(|(_, e)| e.conditions()).collect();
    assert!(all[0].ready() && all[0].serving() && !all[0].terminating());
    assert!(!all[1].ready() && all[1].serving() && all[1].terminating());
    assert_eq!(eps.ready().count(), 2);
    assert!(eps.has_ready());
    assert!(eps.slices()[0].ports().is_empty());
    assert_eq!(
        reverse_names(&snap, "10.2.0.2"),
        Vec::<String>::new(),
        "not-ready IPs get no PTR"
    );

    // Becoming ready adds the PTR.
    let s = slice(
        "ns",
        "s-1",
        "s",
        &[Ep {
            ready: Some(true),
            ..ep("10.2.0.2")
        }],
        &[],
    );
    index.apply(s);
    let snap = published(&mut index);
    assert_eq!(reverse_names(&snap, "10.2.0.2"), ["ep ns/s -"]);
    assert_eq!(reverse_names(&snap, "10.2.0.1"), Vec::<String>::new());
}

/// The fuzzer's find (`fuzz/regressions/k8s_objects/slice-name-case`):
/// a slice applied again with its name in other letter case replaces the
/// first (the index's keys ignore case, as DNS does) and its deletion
/// leaves nothing behind, reverse index included.
#[test]
fn a_slice_renamed_in_case_replaces_it_and_goes_with_its_deletion() {
    let (mut index, _) = index();
    index.apply(slice("ns", "web-b", "web", &[ep("10.4.0.1")], &[]));
    let renamed = slice("ns", "wEb-b", "web", &[ep("10.4.0.2")], &[]);
    index.apply(renamed.clone());
    let snap = published(&mut index);
    let eps = snap.endpoints("ns", "web").unwrap();
    assert_eq!(
        eps.slices().iter().map(|s| s.name()).collect::<Vec<_>>(),
        ["wEb-b"]
    );
    assert_eq!(reverse_names(&snap, "10.4.0.1"), Vec::<String>::new());
    index.delete(&renamed);
    let snap = published(&mut index);
    assert!(snap.endpoints("ns", "web").is_none());
    assert_eq!(snap.counts(), clusterdns_kubeindex::Counts::default());
}

#[test]
fn slice_moving_to_another_service() {
    let (mut index, _) = index();
    index.apply(slice("ns", "x-1", "old", &[ep("10.3.0.1")], &[]));
    index.apply(slice("ns", "x-1", "new", &[ep("10.3.0.1")], &[]));
    let snap = published(&mut index);
    assert!(snap.endpoints("ns", "old").is_none());
    assert_eq!(reverse_names(&snap, "10.3.0.1"), ["ep ns/new -"]);
}

#[test]
fn relist_replaces_state_in_its_scope_only() {
    let (mut index, counters) = index();
    index.apply(svc("a", "keep", &["10.4.0.1"], &[]));
    index.apply(svc("a", "gone", &["10.4.0.2"], &[]));
    index.apply(svc("b", "other", &["10.4.0.3"], &[]));
    index.apply(slice("a", "gone-1", "gone", &[ep("10.4.1.1")], &[]));
    let first = published(&mut index);

    // A relist of namespace a through watcher events: keep is updated, gone is not listed.
    let scope = Scope::namespace("a");
    index.handle_event::<core::Service>(&scope, Event::Init);
    index.handle_event(
        &scope,
        Event::InitApply(svc("a", "keep", &["10.4.0.9"], &[])),
    );
    // Mid-relist: the update is in, nothing is removed yet.
    assert!(index.working().service("a", "gone").is_some());
    index.handle_event::<core::Service>(&scope, Event::InitDone);
    index.reset::<discovery::EndpointSlice>(&scope, []);
    let snap = published(&mut index);
    assert_eq!(
        snap.service("a", "keep").unwrap().cluster_ips(),
        &[ip("10.4.0.9")]
    );
    assert!(snap.service("a", "gone").is_none());
    assert!(
        snap.service("b", "other").is_some(),
        "other namespace untouched"
    );
    assert!(snap.endpoints("a", "gone").is_none());
    assert!(reverse_names(&snap, "10.4.0.2").is_empty());
    assert!(reverse_names(&snap, "10.4.1.1").is_empty());
    assert!(reverse_names(&snap, "10.4.0.1").is_empty());
    assert_eq!(reverse_names(&snap, "10.4.0.9"), ["svc a/keep"]);
    assert_eq!(first.services().count(), 3, "the old snapshot is intact");
    assert_eq!(counters.events(Kind::Service, EventKind::InitDone), 1);

    // A relist of everything.
    index.reset(&Scope::All, [svc("c", "only", &["10.4.0.4"], &[])]);
    let snap = published(&mut index);
    assert_eq!(
        snap.services()
            .map(|s| s.name().to_owned())
            .collect::<Vec<_>>(),
        ["only"]
    );
    assert_eq!(snap.counts().reverse_ips, 1);
}

#[test]
fn relist_restarted_midway_starts_over() {
    let (mut index, _) = index();
    index.apply(svc("a", "x", &["10.5.0.1"], &[]));
    index.apply(svc("a", "y", &["10.5.0.2"], &[]));
    index.relist_begin(Kind::Service, &Scope::All);
    index.relist_apply(&Scope::All, svc("a", "x", &["10.5.0.1"], &[]));
    // The stream failed (e.g. 410 during the list) and the watcher starts a new list.
    index.relist_begin(Kind::Service, &Scope::All);
    index.relist_apply(&Scope::All, svc("a", "y", &["10.5.0.2"], &[]));
    index.relist_end(Kind::Service, &Scope::All);
    let snap = published(&mut index);
    assert!(snap.service("a", "x").is_none());
    assert!(snap.service("a", "y").is_some());
}

#[test]
fn synced_after_every_expected_watcher_listed() {
    let (mut index, _) = index();
    index.expect_sync(Kind::Service, Scope::All);
    index.expect_sync(Kind::Namespace, Scope::All);
    let snapshots = index.snapshots();
    let rx = snapshots.synced();
    index.reset::<core::Service>(&Scope::All, [svc("default", "k", &["10.6.0.1"], &[])]);
    index.publish();
    assert!(!snapshots.is_synced());
    assert!(!snapshots.load().synced());
    index.reset(&Scope::All, [ns("default", &[])]);
    assert!(!snapshots.is_synced(), "only after publish");
    index.publish();
    assert!(snapshots.is_synced());
    assert!(snapshots.load().synced());
    assert!(*rx.borrow());
}

#[test]
fn pods_by_ip() {
    let (mut index, _) = index();
    index.apply(pod("ns", "p1", &["10.7.0.1", "fd00::7:1"]));
    index.apply(pod("ns", "hostnet-a", &["192.168.0.10"]));
    index.apply(pod("kube-system", "hostnet-b", &["192.168.0.10"]));
    let mut pending = pod("ns", "pending", &[]);
    pending.status.as_mut().unwrap().phase = Some("Pending".to_owned());
    index.apply(pending);
    let snap = published(&mut index);
    assert_eq!(snap.pod("NS", ip("10.7.0.1")).unwrap().name(), "p1");
    assert_eq!(
        snap.pod("ns", ip("fd00::7:1")).unwrap().primary_ip(),
        ip("10.7.0.1")
    );
    assert!(snap.pod("other", ip("10.7.0.1")).is_none());
    assert_eq!(snap.pods_at(ip("192.168.0.10")).count(), 2);
    assert_eq!(
        snap.pod("kube-system", ip("192.168.0.10")).unwrap().name(),
        "hostnet-b"
    );
    assert_eq!(snap.counts().pods, 3);

    // IP change, then deletion via deletionTimestamp, then a finished pod.
    index.apply(pod("ns", "p1", &["10.7.0.2"]));
    let mut deleting = pod("ns", "hostnet-a", &["192.168.0.10"]);
    deleting.metadata.deletion_timestamp = Some(
        clusterdns_kubeindex::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            clusterdns_kubeindex::k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ),
    );
    index.apply(deleting);
    let mut done = pod("kube-system", "hostnet-b", &["192.168.0.10"]);
    done.status.as_mut().unwrap().phase = Some("Succeeded".to_owned());
    index.apply(done);
    let snap = published(&mut index);
    assert!(snap.pods_at(ip("10.7.0.1")).next().is_none());
    assert!(snap.pods_at(ip("fd00::7:1")).next().is_none());
    assert_eq!(snap.pod("ns", ip("10.7.0.2")).unwrap().name(), "p1");
    assert_eq!(snap.pods_at(ip("192.168.0.10")).count(), 0);
    index.delete(&pod("ns", "p1", &[]));
    let snap = published(&mut index);
    assert_eq!(snap.counts().pods, 0);
}

#[test]
fn namespaces_and_labels() {
    let (mut index, _) = index();
    index.apply(ns("team-a", &[("env", "prod")]));
    index.apply(ns("team-b", &[]));
    let snap = published(&mut index);
    assert_eq!(snap.namespace("TEAM-A").unwrap().label("env"), Some("prod"));
    assert!(snap.namespace("team-c").is_none());
    index.delete(&ns("team-a", &[]));
    index.reset(&Scope::All, [ns("team-b", &[]), ns("team-c", &[])]);
    let snap = published(&mut index);
    let mut names: Vec<_> = snap.namespaces().map(|n| n.name().to_owned()).collect();
    names.sort();
    assert_eq!(names, ["team-b", "team-c"]);
}

#[test]
fn programming_duration_observed_on_publish() {
    let (mut index, counters) = index();
    index.apply(svc("ns", "web", &["10.8.0.1"], &[]));
    // Each slice with a trigger time.
    let triggered = |mut s: discovery::EndpointSlice| {
        s.metadata.annotations = Some(
            [(
                clusterdns_kubeindex::TRIGGER_TIME_ANNOTATION.to_owned(),
                "2026-01-01T00:00:00Z".to_owned(),
            )]
            .into(),
        );
        s
    };
    let web = slice("ns", "web-1", "web", &[ep("10.8.1.1")], &[]);
    index.apply(triggered(web));
    // A slice of an unknown service: no observation (CoreDNS needs exactly one service).
    let orphan = slice("ns", "nosvc-1", "nosvc", &[ep("10.8.1.2")], &[]);
    index.apply(triggered(orphan));
    assert_eq!(counters.programming_observations(), 0);
    let snap = published(&mut index);
    assert_eq!(counters.programming_observations(), 1);
    assert!(snap.endpoints("ns", "web").unwrap().last_change().is_some());
}

#[test]
fn odd_objects_are_skipped_and_counted() {
    let (mut index, counters) = index();
    // No name / no namespace.
    index.apply(svc("", "nons", &["10.9.0.1"], &[]));
    let mut noname = svc("ns", "x", &["10.9.0.2"], &[]);
    noname.metadata.name = None;
    index.apply(noname);
    index.apply(core::Service::default());
    index.apply(discovery::EndpointSlice::default());
    index.apply(core::Pod::default());
    index.apply(core::Namespace::default());
    assert_eq!(counters.skipped_total(SkipReason::MissingName), 6);

    // Names longer than a DNS label.
    let long = "a".repeat(64);
    index.apply(svc("ns", &long, &["10.9.0.3"], &[]));
    index.apply(ns(&long, &[]));
    index.apply(slice("ns", "long-1", &long, &[ep("10.9.0.4")], &[]));
    assert_eq!(counters.skipped_total(SkipReason::NameTooLong), 3);

    // Invalid IPs: the address goes, the object stays.
    index.apply(svc("ns", "badip", &["10.9.0.300", "fd00::1"], &[]));
    index.apply(slice(
        "ns",
        "badip-1",
        "badip",
        &[ep("not-an-ip"), ep("10.9.1.1"), ep("")],
        &[],
    ));
    index.apply(pod("ns", "badpod", &["999.1.1.1"]));
    assert_eq!(counters.skipped_total(SkipReason::InvalidIp), 4);
    assert_eq!(counters.skipped(Kind::Pod, SkipReason::PodWithoutIp), 1);

    // Thousands of ports, some invalid.
    let mut ports: Vec<(String, &str, i32)> =
        (1..=5000).map(|p| (format!("p{p}"), "TCP", p)).collect();
    ports.push(("neg".into(), "TCP", -1));
    ports.push(("big".into(), "TCP", 70000));
    ports.push(("zero".into(), "TCP", 0));
    ports.push(("quic".into(), "QUIC", 443));
    let port_refs: Vec<(&str, &str, i32)> =
        ports.iter().map(|(n, p, x)| (n.as_str(), *p, *x)).collect();
    index.apply(svc("ns", "manyports", &["10.9.0.5"], &port_refs));
    assert_eq!(counters.skipped_total(SkipReason::InvalidPort), 4);

    // Duplicate slices (same endpoints under two names), a slice without the service label,
    // an invalid hostname.
    let dup = [ep("10.9.2.1"), ep("10.9.2.2")];
    index.apply(slice("ns", "dup-a", "dup", &dup, &[("http", "TCP", 80)]));
    index.apply(slice("ns", "dup-b", "dup", &dup, &[("http", "TCP", 80)]));
    let mut unlabelled = slice("ns", "nolabel", "x", &[ep("10.9.3.1")], &[]);
    unlabelled.metadata.labels = None;
    index.apply(unlabelled);
    index.apply(slice(
        "ns",
        "badhost-1",
        "badhost",
        &[Ep {
            hostname: Some("Not_A_Label!"),
            ..ep("10.9.4.1")
        }],
        &[],
    ));
    // An FQDN slice: addresses are not IPs.
    index.apply(slice_with(
        "ns",
        "fqdn-1",
        "fqdn",
        "FQDN",
        vec![endpoint(&ep("example.com"))],
        &[],
    ));
    assert_eq!(counters.skipped_total(SkipReason::NoServiceLabel), 1);
    assert_eq!(counters.skipped_total(SkipReason::InvalidHostname), 1);

    let snap = published(&mut index);
    assert_eq!(
        snap.service("ns", "badip").unwrap().cluster_ips(),
        &[ip("fd00::1")]
    );
    assert_eq!(snap.endpoints("ns", "badip").unwrap().iter().count(), 1);
    assert_eq!(snap.service("ns", "manyports").unwrap().ports().len(), 5000);
    assert!(snap.service("ns", &long).is_none());
    assert!(snap.namespace(&long).is_none());
    assert_eq!(snap.endpoints("ns", "dup").unwrap().ready().count(), 4);
    assert_eq!(
        reverse_names(&snap, "10.9.2.1"),
        ["ep ns/dup -", "ep ns/dup -"]
    );
    assert_eq!(
        snap.endpoints("ns", "badhost")
            .unwrap()
            .iter()
            .next()
            .unwrap()
            .1
            .hostname(),
        None
    );
    assert_eq!(snap.endpoints("ns", "fqdn").unwrap().iter().count(), 0);
    assert_eq!(snap.counts().services, 2);
}

#[test]
fn a_valid_object_turning_invalid_is_removed() {
    let (mut index, _) = index();
    index.apply(slice("ns", "s-1", "s", &[ep("10.10.0.1")], &[]));
    let mut unlabelled = slice("ns", "s-1", "s", &[ep("10.10.0.1")], &[]);
    unlabelled.metadata.labels = None;
    index.apply(unlabelled);
    let snap = published(&mut index);
    assert!(snap.endpoints("ns", "s").is_none());
    assert!(reverse_names(&snap, "10.10.0.1").is_empty());
}

#[test]
fn endpoint_pod_names_and_hostnames() {
    let (mut index, _) = index();
    let long_pod: &'static str = Box::leak("p".repeat(64).into_boxed_str());
    index.apply(slice(
        "ns",
        "sts-1",
        "sts",
        &[
            Ep {
                hostname: Some("sts-0"),
                pod: Some("sts-0"),
                ..ep("10.11.0.1")
            },
            Ep {
                pod: Some("web-7d9f-abcde"),
                ..ep("10.11.0.2")
            },
            Ep {
                pod: Some(long_pod),
                ..ep("10.11.0.3")
            },
        ],
        &[],
    ));
    let snap = published(&mut index);
    let eps: Vec<_> = snap
        .endpoints("ns", "sts")
        .unwrap()
        .iter()
        .map(|(_, e)| e.clone())
        .collect();
    assert_eq!(eps[0].hostname(), Some("sts-0"));
    assert_eq!(eps[1].target_pod(), Some("web-7d9f-abcde"));
    assert_eq!(eps[1].node_name(), Some("node-1"));
    assert_eq!(
        eps[2].target_pod(),
        None,
        "pod names of 64+ bytes are not usable as labels"
    );
}

#[test]
fn the_external_serial_moves_only_on_updates_of_external_ips_or_ports() {
    let (mut index, _) = index();
    let with_ext = |ips: &[&str], port: i32| {
        let mut s = svc("default", "web", &["10.96.0.9"], &[("http", "TCP", port)]);
        if let Some(spec) = s.spec.as_mut() {
            spec.external_ips = Some(ips.iter().map(|s| (*s).to_owned()).collect());
        }
        s
    };
    index.apply(with_ext(&["192.0.2.1"], 80));
    let snap = published(&mut index);
    assert!(snap.serial() > 0);
    assert_eq!(snap.external_serial(), 0, "an addition is not counted");
    // A change DNS sees elsewhere (cluster IP) but not in external zones.
    let mut other = with_ext(&["192.0.2.1"], 80);
    if let Some(spec) = other.spec.as_mut() {
        spec.cluster_ip = Some("10.96.0.10".into());
        spec.cluster_ips = Some(vec!["10.96.0.10".into()]);
    }
    index.apply(other);
    assert_eq!(published(&mut index).external_serial(), 0);
    index.apply(with_ext(&["192.0.2.2"], 80));
    let moved = published(&mut index).external_serial();
    assert!(moved > 0, "new external IP");
    index.delete(&with_ext(&["192.0.2.2"], 80));
    assert_eq!(
        published(&mut index).external_serial(),
        moved,
        "a deletion is not counted"
    );
    index.apply(with_ext(&["192.0.2.2"], 81));
    assert_eq!(
        published(&mut index).external_serial(),
        moved,
        "re-added: not counted"
    );
}
