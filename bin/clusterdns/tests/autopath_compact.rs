//! `client_index compact` (beyond CoreDNS): *autopath* without `pods
//! verified`. The same UDP search walks as `tests/autopath.rs`, from a Pod's
//! address on loopback, against CoreDNS with `pods verified` + autopath:
//! clusterdns with `client_index compact` and `pods disabled` must give the
//! same replies (TTLs included), and stop walking when the Pod goes away.
//! Pod names keep the answers of the `pods` mode in force.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use clusterdns_test_support::{
    Differential, Outcome, Query, Response, Rig, RunningServer, ServerSpec, TtlMode, compare,
};

mod common;
use common::netns::{PodNetns, musl_client, pod_lookups};

/// `ext.example.test` has an A record and no AAAA; every other name is
/// NXDOMAIN.
const UPSTREAM: &str = r#".:@PORT@ {
    bind 127.0.0.1
    template IN A ext.example.test {
        answer "{{ .Name }} 60 IN A 10.1.2.3"
    }
    template IN AAAA ext.example.test {
        authority "example.test. 60 IN SOA ns.example.test. host.example.test. 1 7200 1800 86400 30"
    }
    template ANY ANY . {
        rcode NXDOMAIN
        authority ". 60 IN SOA a.root. b.root. 1 7200 1800 86400 30"
    }
}
"#;

/// The cluster Corefile; `@PODS@` is the kubernetes block's Pod option.
const COREFILE: &str = "
.:@PORT@ {
    bind 127.0.0.1
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig @KUBECONFIG@
        @PODS@
    }
    autopath @kubernetes
    forward . 127.0.0.1:@UPSTREAM@
}
";

fn ask_from(src: Ipv4Addr, server: SocketAddr, q: &Query) -> Outcome {
    let msg = q.to_wire().expect("query builds");
    clusterdns_test_support::exchange_from(server, src.into(), &msg, Duration::from_secs(3))
}

fn differs(d: &Differential, src: Ipv4Addr, q: &Query) -> Option<String> {
    let r = ask_from(src, d.reference.addr, q);
    let c = ask_from(src, d.candidate.addr, q);
    let diffs = compare(&r, &c, TtlMode::Exact);
    (!diffs.is_empty()).then(|| {
        format!(
            "{q} from {src}: {diffs:?}\n  coredns: {}\n  clusterdns: {}",
            r.summary(),
            c.summary()
        )
    })
}

fn rcode(o: &Outcome) -> String {
    o.response()
        .map_or_else(|| o.summary(), Response::rcode_name)
}

/// Waits until `ok` holds for the replies of both servers to `q` from `src`.
fn wait_both(d: &Differential, src: Ipv4Addr, q: &Query, ok: impl Fn(&Outcome) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = ask_from(src, d.reference.addr, q);
        let c = ask_from(src, d.candidate.addr, q);
        if ok(&r) && ok(&c) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{q}: coredns {}, clusterdns {}",
            r.summary(),
            c.summary()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A Pod address for this test process: 127.172.X.Y.
fn pod_ip(n: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 172, (std::process::id() % 250) as u8, n)
}

fn objects(home: &str, other: &str) -> String {
    let mut y = String::new();
    for ns in [other, home] {
        y.push_str(&format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: {ns}}}\nspec:\n  ports: [{{name: http, port: 80, protocol: TCP}}]\n---\n\
             apiVersion: v1\nkind: Service\nmetadata: {{name: alias, namespace: {ns}}}\nspec:\n  type: ExternalName\n  externalName: ext.example.test\n---\n"
        ));
    }
    y.push_str(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: client, namespace: {home}}}\nspec:\n  containers: [{{name: c, image: none}}]\n"
    ));
    y
}

fn between(rig: &Rig, up: &RunningServer, reference: &str, candidate: &str) -> Differential {
    let port = up.addr.port().to_string();
    Differential::between(
        Some(rig),
        ServerSpec::coredns(rig, COREFILE)
            .var("UPSTREAM", &port)
            .var("PODS", reference),
        ServerSpec::clusterdns_at(common::binary(), COREFILE)
            .var("UPSTREAM", &port)
            .var("PODS", candidate),
    )
    .expect("start both")
}

#[test]
fn compact_walks_answer_as_coredns_with_pods_verified() {
    let Some(rig) = Rig::get() else { return };
    let up =
        RunningServer::start(&ServerSpec::coredns_at(&rig.coredns(), UPSTREAM).named("upstream"))
            .expect("upstream");
    let home = rig.namespace("apc19-home").expect("namespace");
    let other = rig.namespace("apc19-other").expect("namespace");
    let (h, o) = (home.name().to_string(), other.name().to_string());
    rig.apply_yaml(&objects(&h, &o)).expect("objects");
    let client = pod_ip(2);
    rig.set_pod_ip(&h, "client", client.into())
        .expect("set the pod's IP");

    let d = between(&rig, &up, "pods verified", "client_index compact");
    let first = format!("{h}.svc.cluster.local.");
    let probe = Query::new(&format!("web.{o}.{first}"), "A");
    wait_both(&d, client, &probe, |o| rcode(o) == "NOERROR");

    let cases: Vec<(String, &str)> = vec![
        (format!("web.{first}"), "A"),
        (format!("web.{o}.{first}"), "A"),
        (format!("Web.{}.{}", o.to_uppercase(), first), "A"),
        (format!("web.{o}.svc.{first}"), "A"),
        (format!("web.{o}.svc.cluster.local.{first}"), "A"),
        (format!("web.{o}.{first}"), "AAAA"),
        (format!("_http._tcp.web.{o}.{first}"), "SRV"),
        (format!("alias.{o}.{first}"), "A"),
        (format!("alias.{first}"), "A"),
        (format!("ext.example.test.{first}"), "A"),
        (format!("nothing.example.test.{first}"), "A"),
        (format!("nothing.{first}"), "TXT"),
        (first.clone(), "A"),
        (format!("web.{o}.svc.cluster.local."), "A"),
        ("ext.example.test.".to_string(), "A"),
        ("1.0.96.10.in-addr.arpa.".to_string(), "PTR"),
    ];
    let mut failed = Vec::new();
    for (name, qtype) in &cases {
        let q = Query::new(name, qtype);
        failed.extend(differs(&d, client, &q));
        // An address that is no Pod's: no walk from either.
        failed.extend(differs(&d, Ipv4Addr::LOCALHOST, &q));
    }
    // The walk happened: a CNAME first.
    let got = ask_from(client, d.candidate.addr, &probe);
    let answer = &got.response().expect("answer").answer;
    assert_eq!(
        answer.first().map(|r| (r.rtype.as_str(), r.name.as_str())),
        Some(("CNAME", probe.name.as_str())),
        "{got:?}"
    );
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
    wait_both(&d, client, &probe, |o| rcode(o) == "NXDOMAIN");
    assert_eq!(differs(&d, client, &probe), None);
}

#[test]
fn pod_names_keep_the_pods_mode_answers_with_compact() {
    let Some(rig) = Rig::get() else { return };
    let up =
        RunningServer::start(&ServerSpec::coredns_at(&rig.coredns(), UPSTREAM).named("upstream"))
            .expect("upstream");
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
    let home = rig.namespace("apc19-glibc").expect("namespace");
    let other = rig.namespace("apc19-gother").expect("namespace");
    let (h, o) = (home.name().to_string(), other.name().to_string());
    // Another /30 than tests/autopath.rs's for the same process id.
    let s = ((std::process::id() + 125) % 250) as u8;
    let Some(pod) = PodNetns::create("apc19", &h, s) else {
        return;
    };
    let up = RunningServer::start(&ServerSpec::coredns_at(&coredns, UPSTREAM).named("upstream"))
        .expect("upstream");
    rig.apply_yaml(&objects(&h, &o)).expect("objects");
    rig.set_pod_ip(&h, "client", pod.pod_ip().into())
        .expect("set the pod's IP");
    let corefile = |pods: &str| {
        COREFILE
            .replace(".:@PORT@", ".:53")
            .replace(
                "bind 127.0.0.1",
                &format!("bind {}\n    log", pod.nameserver()),
            )
            .replace("@UPSTREAM@", &up.addr.port().to_string())
            .replace("@KUBECONFIG@", &rig.kubeconfig().display().to_string())
            .replace("@PODS@", pods)
    };
    let names = [
        format!("web.{o}"),
        "web".to_string(),
        "alias".to_string(),
        "ext.example.test".to_string(),
        "nothing.example.test".to_string(),
    ];
    let dir = clusterdns_test_support::ScratchDir::new("autopath-compact-glibc").expect("dir");
    let musl = musl_client(dir.path());
    if musl.is_none() {
        clusterdns_test_support::skip("no musl-gcc (musl-tools): testing glibc only");
    }
    let musl = musl.as_ref().map(|p| p.display().to_string());
    let runs = [
        ("coredns", coredns.as_path(), corefile("pods verified")),
        (
            "clusterdns",
            common::binary(),
            corefile("client_index compact"),
        ),
    ];
    let mut seen = Vec::new();
    for (label, program, corefile) in &runs {
        seen.push(pod_lookups(
            &pod,
            dir.path(),
            label,
            program,
            corefile,
            &names,
            musl.as_deref(),
        ));
    }
    eprintln!("{seen:#?}");
    assert_eq!(
        seen[0], seen[1],
        "coredns with pods verified (left) and clusterdns with client_index compact (right) differ"
    );
    // The walk happened: one query for a Service of another namespace, of
    // the Pod's own and for an external name, from each client.
    let per_client = if musl.is_some() { 2 } else { 1 };
    for (i, line) in seen[1].iter().enumerate() {
        if [0, 1, 3].contains(&(i / per_client)) {
            assert!(
                line.ends_with("queries=1") && line.contains(": 0 "),
                "{line}"
            );
        }
    }
}
