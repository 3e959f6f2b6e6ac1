//! *autopath* against the reference CoreDNS on the same Corefile: the
//! server-side search walk of a Pod (`autopath @kubernetes`, `pods
//! verified`, on the shared rig) and of a `resolv.conf` file, and the
//! setup errors.
//!
//! A Pod's address is a loopback address (`status.podIP` set to
//! 127.171.X.Y through the status subresource; the rig runs no kubelet),
//! so a test's client socket bound to it is that Pod to both servers.
//! Every reply is compared record by record (TTLs included).

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use clusterdns_test_support::{
    Differential, Query, Rig, ServerSpec, TtlMode, compare, compare_metrics, coredns_or_skip,
    metric_samples,
};

mod common;
use common::ask_query_from as ask_from;
use common::autopath::{
    HomeAndOther, UPSTREAM, assert_walked, differs, lookups_of_each, pod_corefile, wait_both,
    walk_cases, walk_differences,
};
use common::netns::PodNetns;
use common::{pod_at, rcode_name, rig_differential, start_upstream};

/// [`common::autopath::COREFILE`] with `pods verified`.
fn corefile() -> String {
    common::autopath::COREFILE.replace("@PODS@", "pods verified")
}

/// A Pod address for this test process: 127.171.X.Y (not
/// [`common::pod_addr`]'s 127.172: `autopath_compact.rs` uses those).
fn pod_ip(n: u8) -> Ipv4Addr {
    let pid = std::process::id();
    Ipv4Addr::new(127, 171, (pid % 250) as u8, n)
}

#[test]
fn a_pods_search_walk_is_answered_as_coredns_answers_it() {
    let Some(rig) = Rig::get() else { return };
    let coredns = rig.coredns();
    let up = start_upstream(&coredns, UPSTREAM);
    let ns = HomeAndOther::create(&rig, "ap17-home", "ap17-other");
    let (h, o) = (ns.home.clone(), ns.other.clone());
    let client = pod_ip(2);
    pod_at(&rig, &h, "client", None, client.into());

    let port = up.addr.port().to_string();
    let d = rig_differential(&rig, &corefile(), &[("UPSTREAM", &port)]);

    // Both must know the pod and the other namespace's service first.
    let probe = Query::new(&format!("web.{o}.{h}.svc.cluster.local."), "A");
    let deadline = Instant::now() + Duration::from_secs(30);
    wait_both(&d, client, &probe, deadline, |r| rcode_name(r) == "NOERROR");

    let cases = walk_cases(&h, &o);
    // Each also from an address that is no Pod's: no walk either.
    let failed = walk_differences(&d, client, &cases);
    // The walk happened (not just agreement on NXDOMAIN): a CNAME first.
    assert_walked(&d, client, &probe);
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// A `resolv.conf` file as the search path, for any client.
#[test]
fn a_resolv_conf_search_walk_is_answered_as_coredns_answers_it() {
    let coredns = coredns_or_skip!();
    let up = start_upstream(&coredns, UPSTREAM);
    let port = up.addr.port().to_string();
    let dir = clusterdns_test_support::ScratchDir::new("autopath-resolv").expect("dir");
    let resolv = dir.path().join("resolv.conf");
    std::fs::write(
        &resolv,
        "nameserver 10.0.0.1\nsearch Example.TEST test\noptions ndots:5\n",
    )
    .expect("resolv.conf");
    let corefile = format!(
        ".:@PORT@ {{\n    bind 127.0.0.1\n    prometheus 127.0.0.1:@PORT_METRICS@\n    autopath {}\n    forward . 127.0.0.1:@UPSTREAM@\n}}\n",
        resolv.display()
    );
    let d = Differential::between(
        None,
        ServerSpec::coredns_at(&coredns, &corefile).var("UPSTREAM", &port),
        ServerSpec::clusterdns_at(common::binary(), &corefile).var("UPSTREAM", &port),
    )
    .expect("start both");
    let mut failed = Vec::new();
    for (name, qtype) in [
        ("ext.example.test.", "A"),
        ("ext.example.test.", "AAAA"),
        ("EXT.example.test.", "A"),
        ("ext.example.test.example.test.", "A"),
        ("nothing.example.test.", "A"),
        ("example.test.", "A"),
        ("ext.test.", "A"),
        ("other.org.", "A"),
    ] {
        failed.extend(differs(&d, Ipv4Addr::LOCALHOST, &Query::new(name, qtype)));
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    // coredns_autopath_success_total counts the same walks.
    let (r, c) = (d.reference.metrics(), d.candidate.metrics());
    assert!(c.contains("coredns_autopath_success_total{"), "{c}");
    let m = compare_metrics(
        &r,
        d.reference.addr.port(),
        &c,
        d.candidate.addr.port(),
        &["coredns_autopath_"],
    );
    assert!(m.is_empty(), "{}", m.join("\n"));
}

#[test]
fn setup_errors_read_as_coredns() {
    common::setup_errors_read_as_coredns(&[
        ".:@P@ {\n    autopath\n    whoami\n}\n",
        ".:@P@ {\n    autopath /nonexistent/resolv.conf\n    whoami\n}\n",
        ".:@P@ {\n    autopath example.org /nonexistent/resolv.conf\n    whoami\n}\n",
        ".:@P@ {\n    autopath @whoami\n    whoami\n}\n",
        ".:@P@ {\n    autopath @kubernetes\n    whoami\n}\n",
        ".:@P@ {\n    autopath @cache\n    cache\n    whoami\n}\n",
        ".:@P@ {\n    autopath @kubernetes\n    autopath @whoami\n    whoami\n}\n",
    ]);
}

/// glibc (`getent`) and musl (a static getaddrinfo client) in a Pod's
/// network namespace (ndots:5) against each server in turn on the Pod's
/// nameserver address: the same results and the same number of queries
/// per lookup (one when the walk finds the name).
#[test]
fn glibc_and_musl_in_a_pod_walk_in_one_round_trip_as_with_coredns() {
    let Some(rig) = Rig::get() else { return };
    let coredns = rig.coredns();
    let ns = HomeAndOther::create(&rig, "ap17-glibc", "ap17-gother");
    let (h, o) = (ns.home.clone(), ns.other.clone());
    let s = (std::process::id() % 250) as u8;
    let Some(pod) = PodNetns::create("ap17", &h, s) else {
        return;
    };
    let up = start_upstream(&coredns, UPSTREAM);
    pod_at(&rig, &h, "client", None, pod.pod_ip().into());
    let corefile = pod_corefile(&corefile(), &pod, &up, &rig);
    let names = [
        format!("web.{o}"),
        "web".to_string(),
        "ext.example.test".to_string(),
        "nothing.example.test".to_string(),
    ];
    let dir = clusterdns_test_support::ScratchDir::new("autopath-glibc").expect("dir");
    let runs = [
        ("coredns", coredns.as_path(), corefile.clone()),
        ("clusterdns", common::binary(), corefile),
    ];
    let (seen, musl) = lookups_of_each(&pod, dir.path(), &runs, &names);
    assert_eq!(
        seen[0], seen[1],
        "coredns (left) and clusterdns (right) differ"
    );
    // The walk saved the round trips: one query for the name found, from
    // each client.
    assert!(seen[1][0].ends_with("queries=1"), "{:?}", seen[1]);
    if musl {
        assert!(seen[1][1].ends_with("queries=1"), "{:?}", seen[1]);
    }
}

/// The upstream of the memo test: an A record for every name (TTL 60),
/// NXDOMAIN with a SOA for every other type.
const UPSTREAM_ANY_A: &str = r#".:@PORT@ {
    bind 127.0.0.1
    template IN A . {
        answer "{{ .Name }} 60 IN A 10.1.2.3"
    }
    template ANY ANY . {
        rcode NXDOMAIN
        authority ". 60 IN SOA a.root. b.root. 1 7200 1800 86400 30"
    }
}
"#;

/// The cluster Corefile with `cache 30` (behind autopath, as plugin.cfg
/// orders them) and the metrics.
const COREFILE_CACHED: &str = "
.:@PORT@ {
    bind 127.0.0.1
    errors
    prometheus 127.0.0.1:@PORT_METRICS@
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig @KUBECONFIG@
        pods verified
    }
    autopath @kubernetes
    forward . 127.0.0.1:@UPSTREAM@
    cache 30
}
";

/// Walks answered wholly from the cache are served again in one step
/// (autopath's memo): for two Pods in two namespaces, asked again and
/// again over several seconds, every reply is CoreDNS's (TTLs counting
/// down alike, within the second the two caches stored at apart), the
/// cache and autopath counters move alike, and a Service created after
/// its name's NXDOMAIN was cached is found once that entry expires.
#[test]
fn walks_served_from_the_cache_again_count_down_and_expire_as_coredns() {
    let Some(rig) = Rig::get() else { return };
    let coredns = rig.coredns();
    let up = start_upstream(&coredns, UPSTREAM_ANY_A);
    let ns = HomeAndOther::create(&rig, "ap17m-a", "ap17m-b");
    let (na, nb) = (ns.home.clone(), ns.other.clone());
    let (ca, cb) = (pod_ip(30), pod_ip(31));
    pod_at(&rig, &na, "client", None, ca.into());
    pod_at(&rig, &nb, "client", None, cb.into());
    let port = up.addr.port().to_string();
    let d = rig_differential(&rig, COREFILE_CACHED, &[("UPSTREAM", &port)]);
    // Both know both Pods (a walk's CNAME) and the Services. The names
    // probed are not the ones measured below, so their entries stay
    // unseen until then.
    let deadline = Instant::now() + Duration::from_secs(30);
    for (client, ns, other) in [(ca, &na, &nb), (cb, &nb, &na)] {
        let probe = Query::new(&format!("web.{other}.{ns}.svc.cluster.local."), "A");
        wait_both(&d, client, &probe, deadline, |o| {
            o.response()
                .and_then(|r| r.answer.first().map(|x| x.rtype == "CNAME"))
                .unwrap_or(false)
        });
    }
    // What the probes stored expires (5 s), so both caches start alike.
    std::thread::sleep(Duration::from_secs(6));
    let before = (d.reference.metrics(), d.candidate.metrics());
    // Three walks per name and client within a second: misses first, then
    // hits (clusterdns keeps the second and serves the third from it).
    // (An ExternalName on the way is compared for its answers after the
    // counters: CoreDNS resolves its target through the whole server, the
    // cache in front included, which counts one hit more on a miss.)
    let names = |ns: &str, other: &str| {
        [
            format!("ext.example.test.{ns}.svc.cluster.local."),
            format!("Web.{other}.{ns}.svc.cluster.local."),
        ]
    };
    let mut failed = Vec::new();
    let t0 = Instant::now();
    for _ in 0..3 {
        for (client, ns, other) in [(ca, &na, &nb), (cb, &nb, &na)] {
            for n in names(ns, other) {
                failed.extend(within_a_second(&d, client, &n));
            }
        }
    }
    assert!(
        t0.elapsed() < Duration::from_secs(4),
        "too slow to stay within the entries' TTLs"
    );
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    let (r, c) = (d.reference.metrics(), d.candidate.metrics());
    // The counters moved alike (the probes before moved them alike too,
    // but took their own time: compare the difference).
    let moved = |after: &str, before: &str, port: u16| {
        let pick = |t: &str| {
            metric_samples(t)
                .into_iter()
                .filter(|((n, _), _)| {
                    [
                        "coredns_cache_hits_total",
                        "coredns_cache_misses_total",
                        "coredns_cache_requests_total",
                        "coredns_autopath_success_total",
                    ]
                    .iter()
                    .any(|p| n.starts_with(p))
                })
                .map(|((n, ls), v)| {
                    let ls: Vec<_> = ls
                        .into_iter()
                        .map(|(k, v)| (k, v.replace(&format!(":{port}"), ":PORT")))
                        .collect();
                    ((n, ls), v)
                })
                .collect::<std::collections::BTreeMap<_, _>>()
        };
        let (a, b) = (pick(after), pick(before));
        a.into_iter()
            .map(|(k, v)| {
                let was = b.get(&k).copied().unwrap_or(0.0);
                (k, v - was)
            })
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let rm = moved(&r, &before.0, d.reference.addr.port());
    let cm = moved(&c, &before.1, d.candidate.addr.port());
    assert!(!rm.is_empty(), "{r}");
    assert_eq!(rm, cm, "the counters moved alike");
    for _ in 0..3 {
        for (client, ns, other) in [(ca, &na, &nb), (cb, &nb, &na)] {
            let n = format!("alias.{other}.{ns}.svc.cluster.local.");
            failed.extend(within_a_second(&d, client, &n));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));

    // A name that walks out to the upstream, asked until it is kept; then
    // a Service of that name is created in the first namespace.
    let late = format!("late.{na}.svc.cluster.local.");
    let q = Query::new(&late, "A");
    for _ in 0..3 {
        let c = ask_from(ca, d.candidate.addr, &q);
        let first = c.response().and_then(|r| r.answer.first().cloned());
        assert_eq!(first.map(|r| r.rtype), Some("CNAME".to_string()), "{c:?}");
    }
    rig.apply_yaml(&format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: late, namespace: {na}}}\nspec:\n  ports: [{{name: http, port: 80, protocol: TCP}}]\n"
    ))
    .expect("service");
    // Found once the cached NXDOMAIN (5 s) expires and the watch told of
    // it; until then the kept walk, counting down.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let c = ask_from(ca, d.candidate.addr, &q);
        let first = c.response().and_then(|r| r.answer.first().cloned());
        if first
            .as_ref()
            .is_some_and(|r| r.rtype == "A" && r.name == late)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the late Service never found: {c:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    // And CoreDNS (never asked for it) agrees once clusterdns's entry
    // expired too.
    std::thread::sleep(Duration::from_secs(6));
    let r = ask_from(ca, d.reference.addr, &q);
    let c = ask_from(ca, d.candidate.addr, &q);
    let diffs = compare(&r, &c, TtlMode::Within(1));
    assert!(diffs.is_empty(), "{diffs:?}");
}

/// How the two servers' replies to `name`/`A` from `client` differ, TTLs
/// compared within a second.
fn within_a_second(d: &Differential, client: Ipv4Addr, name: &str) -> Vec<String> {
    let q = Query::new(name, "A");
    let r = ask_from(client, d.reference.addr, &q);
    let c = ask_from(client, d.candidate.addr, &q);
    compare(&r, &c, TtlMode::Within(1))
        .into_iter()
        .map(|x| format!("{name}: {x}"))
        .collect()
}
