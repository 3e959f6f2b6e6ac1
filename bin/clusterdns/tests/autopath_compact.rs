//! `client_index compact` (beyond CoreDNS): *autopath* without `pods
//! verified`. The same UDP search walks as `tests/autopath.rs`, from a Pod's
//! address on loopback, against CoreDNS with `pods verified` + autopath:
//! clusterdns with `client_index compact` and `pods disabled` must give the
//! same replies (TTLs included), and stop walking when the Pod goes away.
//! Pod names keep the answers of the `pods` mode in force.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use clusterdns_test_support::{Differential, Query, Rig, RunningServer};

mod common;
use common::autopath::{
    COREFILE, HomeAndOther, UPSTREAM, assert_walked, differs, lookups_of_each, pod_corefile,
    wait_both, walk_cases, walk_differences,
};
use common::netns::PodNetns;
use common::{pod_addr, pod_at, rcode_name as rcode, rig_differential_each, start_upstream};

/// Both servers on [`COREFILE`], `@PODS@` being `reference` and `candidate`.
fn between(rig: &Rig, up: &RunningServer, reference: &str, candidate: &str) -> Differential {
    let port = up.addr.port().to_string();
    rig_differential_each(
        rig,
        COREFILE,
        &[("UPSTREAM", &port), ("PODS", reference)],
        &[("UPSTREAM", &port), ("PODS", candidate)],
    )
}

/// 30 s from now: how long the servers get to sync.
fn sync_deadline() -> Instant {
    Instant::now() + Duration::from_secs(30)
}

#[test]
fn compact_walks_answer_as_coredns_with_pods_verified() {
    let Some(rig) = Rig::get() else { return };
    let up = start_upstream(&rig.coredns(), UPSTREAM);
    let ns = HomeAndOther::create(&rig, "apc19-home", "apc19-other");
    let (h, o) = (ns.home.clone(), ns.other.clone());
    let client = pod_addr(2);
    pod_at(&rig, &h, "client", None, client.into());

    let d = between(&rig, &up, "pods verified", "client_index compact");
    let first = format!("{h}.svc.cluster.local.");
    let probe = Query::new(&format!("web.{o}.{first}"), "A");
    wait_both(&d, client, &probe, sync_deadline(), |o| {
        rcode(o) == "NOERROR"
    });

    let cases = walk_cases(&h, &o);
    // Each also from an address that is no Pod's: no walk from either.
    let failed = walk_differences(&d, client, &cases);
    // The walk happened: a CNAME first.
    assert_walked(&d, client, &probe);
    assert!(failed.is_empty(), "{}", failed.join("\n"));

    // The Pod goes: neither walks for its address any more.
    rig.kubectl(&[
        "delete",
        "pod",
        "-n",
        &h,
        "client",
        "--wait=false",
        "--grace-period=0",
        "--force",
    ])
    .expect("delete the pod");
    wait_both(&d, client, &probe, sync_deadline(), |o| {
        rcode(o) == "NXDOMAIN"
    });
    assert_eq!(differs(&d, client, &probe), None);
}

#[test]
fn pod_names_keep_the_pods_mode_answers_with_compact() {
    let Some(rig) = Rig::get() else { return };
    let up = start_upstream(&rig.coredns(), UPSTREAM);
    let home = rig.namespace("apc19-names").expect("namespace");
    let h = home.name().to_string();
    let mut failed = Vec::new();
    for mode in ["disabled", "insecure"] {
        let d = between(
            &rig,
            &up,
            &format!("pods {mode}"),
            &format!("pods {mode}\n        client_index compact"),
        );
        wait_both(
            &d,
            Ipv4Addr::LOCALHOST,
            &Query::new("kubernetes.default.svc.cluster.local.", "A"),
            sync_deadline(),
            |o| rcode(o) == "NOERROR",
        );
        for name in [
            format!("1-2-3-4.{h}.pod.cluster.local."),
            "10-0-0-1.default.pod.cluster.local.".to_string(),
            format!("1-2-3-4.nowhere-{h}.pod.cluster.local."),
        ] {
            failed.extend(differs(&d, Ipv4Addr::LOCALHOST, &Query::new(&name, "A")));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// Real clients in a Pod's network namespace (ndots:5): glibc (`getent`)
/// and musl (a static getaddrinfo client) against CoreDNS with `pods
/// verified` + autopath, then clusterdns with `client_index compact` +
/// autopath (no Pod objects kept), each on the Pod's nameserver address:
/// the same results and the same number of queries per lookup, one when
/// the walk finds the name.
#[test]
fn glibc_and_musl_in_a_pod_walk_as_with_coredns_pods_verified() {
    let Some(rig) = Rig::get() else { return };
    let coredns = rig.coredns();
    let ns = HomeAndOther::create(&rig, "apc19-glibc", "apc19-gother");
    let (h, o) = (ns.home.clone(), ns.other.clone());
    // Another /30 than tests/autopath.rs's for the same process id.
    let s = ((std::process::id() + 125) % 250) as u8;
    let Some(pod) = PodNetns::create("apc19", &h, s) else {
        return;
    };
    let up = start_upstream(&coredns, UPSTREAM);
    pod_at(&rig, &h, "client", None, pod.pod_ip().into());
    let corefile = |pods: &str| pod_corefile(COREFILE, &pod, &up, &rig).replace("@PODS@", pods);
    let names = [
        format!("web.{o}"),
        "web".to_string(),
        "alias".to_string(),
        "ext.example.test".to_string(),
        "nothing.example.test".to_string(),
    ];
    let dir = clusterdns_test_support::ScratchDir::new("autopath-compact-glibc").expect("dir");
    let runs = [
        ("coredns", coredns.as_path(), corefile("pods verified")),
        (
            "clusterdns",
            common::binary(),
            corefile("client_index compact"),
        ),
    ];
    let (seen, musl) = lookups_of_each(&pod, dir.path(), &runs, &names);
    assert_eq!(
        seen[0], seen[1],
        "coredns with pods verified (left) and clusterdns with client_index compact (right) differ"
    );
    // The walk happened: one query for a Service of another namespace, of
    // the Pod's own and for an external name, from each client.
    let per_client = if musl { 2 } else { 1 };
    for (i, line) in seen[1].iter().enumerate() {
        if [0, 1, 3].contains(&(i / per_client)) {
            assert!(
                line.ends_with("queries=1") && line.contains(": 0 "),
                "{line}"
            );
        }
    }
}
