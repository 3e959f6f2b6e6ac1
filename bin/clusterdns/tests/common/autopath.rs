//! Fixtures of the *autopath* tests (`autopath.rs`, `autopath_compact.rs`):
//! the upstream both servers forward to, the Services a walk finds, and
//! the comparison of walks asked from a Pod's address.

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::{Duration, Instant};

use clusterdns_test_support::{
    Differential, Outcome, Query, Rig, RunningServer, TestNamespace, TtlMode, compare,
};

use super::ask_query_from as ask;
use super::netns::{PodNetns, musl_client, pod_lookups};

/// The upstream both servers forward to (the reference CoreDNS):
/// `ext.example.test` has an A record and no AAAA; every other name is
/// NXDOMAIN with a SOA.
pub const UPSTREAM: &str = r#".:@PORT@ {
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

/// A cluster Corefile as kubeadm writes it, with autopath in its usual
/// place; `@PODS@` is the kubernetes block's Pod option.
pub const COREFILE: &str = "
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

/// The names a Pod of namespace `home` asks in a search walk (type, and
/// the name as the client sends it: `first` is `home`'s first search
/// domain), with the Services of [`services_yaml`] in `home` and `other`.
pub fn walk_cases(home: &str, other: &str) -> Vec<(String, &'static str)> {
    let (o, first) = (other, format!("{home}.svc.cluster.local."));
    vec![
        // Found at once: the name as asked, no CNAME.
        (format!("web.{first}"), "A"),
        // Found in another namespace, then by its full name.
        (format!("web.{o}.{first}"), "A"),
        (format!("Web.{}.{}", o.to_uppercase(), first), "A"),
        (format!("web.{o}.svc.{first}"), "A"),
        (format!("web.{o}.svc.cluster.local.{first}"), "A"),
        // NODATA and SRV, found on the way.
        (format!("web.{o}.{first}"), "AAAA"),
        (format!("_http._tcp.web.{o}.{first}"), "SRV"),
        // An ExternalName on the way: its CNAME and the upstream's answer.
        (format!("alias.{o}.{first}"), "A"),
        (format!("alias.{first}"), "A"),
        // Out to the upstream: the name as given is the last step.
        (format!("ext.example.test.{first}"), "A"),
        (format!("ext.example.test.{first}"), "AAAA"),
        // Nothing anywhere: the first reply as it was.
        (format!("nothing.example.test.{first}"), "A"),
        (format!("nothing.{first}"), "TXT"),
        // Exactly the first search domain: CoreDNS's TrimZone error.
        (first.clone(), "A"),
        // Not in the first search domain: no walk.
        (format!("web.{o}.svc.cluster.local."), "A"),
        ("ext.example.test.".to_string(), "A"),
        (format!("web.{o}.svc.cluster.local.other.test."), "A"),
        // Reverse zones are the plugin's too, but never a search domain.
        ("1.0.96.10.in-addr.arpa.".to_string(), "PTR"),
    ]
}

/// Two namespaces of the rig, `home` and `other` (name prefixes), each
/// with the Services of [`services_yaml`]; deleted when this drops.
pub struct HomeAndOther {
    _guards: [TestNamespace; 2],
    pub home: String,
    pub other: String,
}

impl HomeAndOther {
    pub fn create(rig: &Rig, home: &str, other: &str) -> HomeAndOther {
        let guards = [home, other].map(|p| rig.namespace(p).expect("namespace"));
        let [home, other] = [0, 1].map(|i| guards[i].name().to_string());
        for ns in [&other, &home] {
            rig.apply_yaml(&services_yaml(ns)).expect("services");
        }
        HomeAndOther {
            _guards: guards,
            home,
            other,
        }
    }
}

/// The Services of namespace `ns` a walk finds: `web` (ClusterIP, port
/// `http`) and `alias` (ExternalName `ext.example.test`).
pub fn services_yaml(ns: &str) -> String {
    format!(
        "{}---\n{}",
        super::web_service_yaml(ns),
        super::external_name_yaml(ns, "alias", "ext.example.test")
    )
}

/// Asks both servers `q` from `src`; the report of a disagreement (TTLs
/// compared exactly).
pub fn differs(d: &Differential, src: Ipv4Addr, q: &Query) -> Option<String> {
    let r = ask(src, d.reference.addr, q);
    let c = ask(src, d.candidate.addr, q);
    let diffs = compare(&r, &c, TtlMode::Exact);
    if diffs.is_empty() {
        return None;
    }
    let show = |o: &Outcome| match o {
        Outcome::Response(r) => r.to_string(),
        other => other.summary(),
    };
    Some(format!(
        "{q} from {src}: {diffs:?}\n  coredns:\n{}\n  clusterdns:\n{}",
        show(&r),
        show(&c)
    ))
}

/// Every `(name, type)` of `cases` asked from the Pod's `client` address
/// and from 127.0.0.1 (no Pod's: no walk): the disagreements.
pub fn walk_differences(
    d: &Differential,
    client: Ipv4Addr,
    cases: &[(String, &str)],
) -> Vec<String> {
    let mut failed = Vec::new();
    for (name, qtype) in cases {
        let q = Query::new(name, qtype);
        failed.extend(differs(d, client, &q));
        failed.extend(differs(d, Ipv4Addr::LOCALHOST, &q));
    }
    failed
}

/// Asserts that the candidate walked for `probe` from `client` (not just
/// agreed on NXDOMAIN): its answer starts with a CNAME from the name asked.
pub fn assert_walked(d: &Differential, client: Ipv4Addr, probe: &Query) {
    let got = ask(client, d.candidate.addr, probe);
    let answer = &got.response().expect("answer").answer;
    assert_eq!(
        answer.first().map(|r| (r.rtype.as_str(), r.name.as_str())),
        Some(("CNAME", probe.name.as_str())),
        "{got:?}"
    );
}

/// Waits until `ok` holds for the replies of both servers to `q` from
/// `src`, failing at `deadline`.
pub fn wait_both(
    d: &Differential,
    src: Ipv4Addr,
    q: &Query,
    deadline: Instant,
    ok: impl Fn(&Outcome) -> bool,
) {
    loop {
        let r = ask(src, d.reference.addr, q);
        let c = ask(src, d.candidate.addr, q);
        if ok(&r) && ok(&c) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not synced, {q} from {src}: coredns {}, clusterdns {}",
            r.summary(),
            c.summary()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `corefile` served on port 53 of `pod`'s nameserver address with `log`
/// on (for [`pod_lookups`]), forwarding to `up`, on the rig's kubeconfig.
pub fn pod_corefile(corefile: &str, pod: &PodNetns, up: &RunningServer, rig: &Rig) -> String {
    corefile
        .replace(".:@PORT@", ".:53")
        .replace(
            "bind 127.0.0.1",
            &format!("bind {}\n    log", pod.nameserver()),
        )
        .replace("@UPSTREAM@", &up.addr.port().to_string())
        .replace("@KUBECONFIG@", &rig.kubeconfig().display().to_string())
}

/// [`pod_lookups`] of `names` for each `(label, program, corefile)` of
/// `runs` in turn, with glibc and (when `musl-gcc` builds it in `dir`)
/// musl; the lines of each run, and whether musl took part.
pub fn lookups_of_each(
    pod: &PodNetns,
    dir: &Path,
    runs: &[(&str, &Path, String)],
    names: &[String],
) -> (Vec<Vec<String>>, bool) {
    let musl = musl_client(dir);
    if musl.is_none() {
        clusterdns_test_support::skip("no musl-gcc (musl-tools): testing glibc only");
    }
    let musl = musl.as_ref().map(|p| p.display().to_string());
    let seen: Vec<_> = runs
        .iter()
        .map(|(label, program, corefile)| {
            pod_lookups(pod, dir, label, program, corefile, names, musl.as_deref())
        })
        .collect();
    eprintln!("{seen:#?}");
    (seen, musl.is_some())
}
