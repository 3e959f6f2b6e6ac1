//! Differential tests of the *kubernetes* plugin: the rig's CoreDNS and
//! clusterdns watch the same API server with the same Corefile; every query
//! of the corpus must get the same reply from both (SOA serial excepted)
//! unless the case is marked as a documented difference
//! (crates/plugins/src/kubernetes/README.md, "Differences from CoreDNS").
//!
//! Skips (with a message) when no rig runs, unless CLUSTERDNS_REQUIRE_RIG=1.
//! Needs a built clusterdns binary (`cargo build -p clusterdns`).

use clusterdns_test_support::{Case, Outcome, Query, Report, Rig, Table};

/// The fixture shared with the plugin's unit tests (namespace `kplug`).
const OBJECTS: &str = include_str!("../../plugins/src/kubernetes/testdata/objects.yaml");

fn rig() -> Option<Rig> {
    let rig = Rig::get();
    if rig.is_none() {
        eprintln!("no rig running (scripts/rig up): skipping the kubernetes differential tests");
    }
    rig
}

const TYPES: &[&str] = &[
    "A", "AAAA", "SRV", "TXT", "PTR", "CNAME", "MX", "NS", "SOA", "HINFO", "ANY",
];

/// Names under the zone: every record kind and every rcode rule.
const NAMES: &[&str] = &[
    // apex and structure
    "cluster.local",
    "svc.cluster.local",
    "pod.cluster.local",
    "kplug.svc.cluster.local",
    "kplug.pod.cluster.local",
    "nons.svc.cluster.local",
    "foo.cluster.local",
    "dns-version.cluster.local",
    "ns.dns.cluster.local",
    // ClusterIP services
    "kubernetes.default.svc.cluster.local",
    "svc1.kplug.svc.cluster.local",
    "dual.kplug.svc.cluster.local",
    "v6only.kplug.svc.cluster.local",
    "nope.kplug.svc.cluster.local",
    "svc1.nons.svc.cluster.local",
    "_http._tcp.svc1.kplug.svc.cluster.local",
    "_dns._udp.svc1.kplug.svc.cluster.local",
    "_dns._tcp.svc1.kplug.svc.cluster.local",
    "http.tcp.svc1.kplug.svc.cluster.local",
    "_._.svc1.kplug.svc.cluster.local",
    "_http._tcp.dual.kplug.svc.cluster.local",
    "svc2.kplug.svc.cluster.local",
    "10-244-7-1.svc1.kplug.svc.cluster.local",
    "10-244-7-2.svc1.kplug.svc.cluster.local",
    "a.b.c.svc1.kplug.svc.cluster.local",
    "*.kplug.svc.cluster.local",
    "*.svc1.kplug.svc.cluster.local",
    "any.kplug.svc.cluster.local",
    // headless
    "hdls.kplug.svc.cluster.local",
    "web-0.hdls.kplug.svc.cluster.local",
    "web-1.hdls.kplug.svc.cluster.local",
    "10-244-7-11.hdls.kplug.svc.cluster.local",
    "10-244-7-12.hdls.kplug.svc.cluster.local",
    "10-244-7-13.hdls.kplug.svc.cluster.local",
    "fd00-10-244--0.hdls.kplug.svc.cluster.local",
    "fd00-10-244--7-20.hdls.kplug.svc.cluster.local",
    "pod-b.hdls.kplug.svc.cluster.local",
    "_http._tcp.hdls.kplug.svc.cluster.local",
    "_https._tcp.hdls.kplug.svc.cluster.local",
    "_http._udp.hdls.kplug.svc.cluster.local",
    "_http._tcp.web-0.hdls.kplug.svc.cluster.local",
    "notready.kplug.svc.cluster.local",
    "empty.kplug.svc.cluster.local",
    "portless.kplug.svc.cluster.local",
    "_http._tcp.portless.kplug.svc.cluster.local",
    // ExternalName
    "ext.kplug.svc.cluster.local",
    "ext-in.kplug.svc.cluster.local",
    "ext-chain.kplug.svc.cluster.local",
    "ext-loop.kplug.svc.cluster.local",
    "ext-v6.kplug.svc.cluster.local",
    "_http._tcp.ext.kplug.svc.cluster.local",
    "x.ext.kplug.svc.cluster.local",
    // pods (insecure)
    "10-244-7-11.kplug.pod.cluster.local",
    "1-2-3-4.kplug.pod.cluster.local",
    "fd00--1.kplug.pod.cluster.local",
    "1-2-3-4.nons.pod.cluster.local",
    "not-an-ip.kplug.pod.cluster.local",
    "x.1-2-3-4.kplug.pod.cluster.local",
    "--ffff-a00-1.kplug.pod.cluster.local",
    "010-0-0-1.kplug.pod.cluster.local",
    // reverse
    "1.77.96.10.in-addr.arpa",
    "10.7.244.10.in-addr.arpa",
    "1.7.244.10.in-addr.arpa",
    "2.7.244.10.in-addr.arpa",
    "30.7.244.10.in-addr.arpa",
    "9.9.9.9.in-addr.arpa",
    "77.96.10.in-addr.arpa",
    "in-addr.arpa",
    "ip6.arpa",
    "2.0.7.7.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.6.9.0.0.0.1.0.0.0.0.d.f.ip6.arpa",
    "0.2.0.0.7.0.0.0.0.0.0.0.0.0.0.0.4.4.2.0.0.1.0.0.0.0.0.0.0.0.d.f.ip6.arpa",
    "svc1.kplug.svc.0.10.in-addr.arpa",
];

/// Mixed-case spellings: owner names and targets keep the client's case.
const MIXED: &[&str] = &[
    "SVC1.Kplug.SVC.Cluster.Local",
    "svc1.kplug.svc.CLUSTER.LOCAL",
    "Cluster.Local",
    "NS.DNS.cluster.local",
    "ns.dns.Cluster.Local",
    "DNS-Version.cluster.local",
    "_HTTP._TCP.hdls.kplug.svc.Cluster.Local",
    "Web-0.HDLS.kplug.svc.cluster.local",
    "EXT-in.kplug.svc.Cluster.local",
    "Nope.Kplug.Svc.Cluster.Local",
    "1.77.96.10.IN-ADDR.ARPA",
];

/// The partial names a pod in `kplug` with ndots:5 sends while walking its
/// search path (`kplug.svc.cluster.local svc.cluster.local cluster.local`).
fn search_walk() -> Vec<String> {
    let short = [
        "svc1",
        "svc1.kplug",
        "svc1.kplug.svc",
        "hdls.kplug",
        "web-0.hdls.kplug",
        "kubernetes.default",
        "kubernetes.default.svc",
        "_http._tcp.svc1.kplug",
        "_http._tcp.hdls.kplug.svc",
        "www.example.com",
        "nope",
    ];
    let search = [
        "kplug.svc.cluster.local",
        "svc.cluster.local",
        "cluster.local",
    ];
    let mut out = Vec::new();
    for s in short {
        for suffix in search {
            out.push(format!("{s}.{suffix}"));
        }
    }
    out
}

const COREFILE: &str = ".:@PORT@ {
    bind 127.0.0.1
    ready 127.0.0.1:@PORT_READY@
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig @KUBECONFIG@
        pods insecure
    }
}
";

fn qtype_for(name: &str) -> &'static [&'static str] {
    if name.starts_with('_') {
        &["SRV", "A"]
    } else {
        &["A", "AAAA"]
    }
}

/// One test, two tables in sequence: they share the fixture's namespace
/// (and ClusterIPs), which the second deletes at the end.
#[test]
fn kubernetes_matches_coredns() {
    let Some(rig) = rig() else { return };
    corpus(&rig);
    external_names_through_forward(&rig);
    watch_options(&rig);
    options(&rig);
}

const WATCH_OPTIONS_COREFILE: &str = ".:@PORT@ {
    bind 127.0.0.1
    ready 127.0.0.1:@PORT_READY@
    kubernetes cluster.local in-addr.arpa {
        kubeconfig @KUBECONFIG@
        noendpoints
        pods verified
        namespace_labels kubernetes.io/metadata.name=kplug
    }
}
";

/// Options that change what is watched: no EndpointSlices, Pods (none
/// have IPs on the rig), a namespace label selector.
fn watch_options(rig: &Rig) {
    let mut table = Table::new(WATCH_OPTIONS_COREFILE)
        .objects(OBJECTS)
        .keep_objects();
    for name in [
        "svc1.kplug.svc.cluster.local",
        "hdls.kplug.svc.cluster.local",
        "10-244-7-1.svc1.kplug.svc.cluster.local",
        "_http._tcp.hdls.kplug.svc.cluster.local",
        "1.7.244.10.in-addr.arpa",
        "1.77.96.10.in-addr.arpa",
        "kubernetes.default.svc.cluster.local",
        "default.svc.cluster.local",
        "kplug.svc.cluster.local",
        "10-244-7-11.kplug.pod.cluster.local",
        "kplug.pod.cluster.local",
        "ext-in.kplug.svc.cluster.local",
    ] {
        for t in ["A", "SRV", "PTR", "TXT"] {
            table = table.case(Case::new(&format!("watch {name} {t}"), Query::new(name, t)));
        }
    }
    let report = table.run(rig).expect("table runs");
    expect(&report, "watch svc1.kplug.svc.cluster.local A", 0, 1);
    expect(
        &report,
        "watch kubernetes.default.svc.cluster.local A",
        3,
        0,
    );
    report.assert_ok();
}

/// dnsmasq on a free loopback port answering every `example.com` name.
struct Upstream {
    child: std::process::Child,
    port: u16,
}

impl Upstream {
    fn start() -> Option<Upstream> {
        let port = clusterdns_test_support::free_port().ok()?;
        let child = std::process::Command::new("dnsmasq")
            .args([
                "-k",
                "--bind-interfaces",
                "--listen-address=127.0.0.1",
                "--no-resolv",
            ])
            .args(["--no-hosts", "--conf-file=/dev/null", "--pid-file="])
            .arg(format!("-p{port}"))
            .args([
                "--address=/example.com/192.0.2.10",
                "--address=/example.com/2001:db8::10",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .ok()?;
        std::thread::sleep(std::time::Duration::from_millis(300));
        Some(Upstream { child, port })
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// ExternalName targets outside the zone are resolved through `forward`.
fn external_names_through_forward(rig: &Rig) {
    let Some(up) = Upstream::start() else {
        eprintln!("no dnsmasq: skipping the ExternalName-through-forward table");
        return;
    };
    let corefile = COREFILE.replace(
        "        pods insecure\n    }\n",
        &format!(
            "        pods insecure\n    }}\n    forward . 127.0.0.1:{}\n",
            up.port
        ),
    );
    assert!(corefile.contains("forward"));
    let mut table = Table::new(&corefile).objects(OBJECTS).keep_objects();
    for name in [
        "ext.kplug.svc.cluster.local",
        "EXT.kplug.svc.Cluster.Local",
        "ext-in.kplug.svc.cluster.local",
        "ext-chain.kplug.svc.cluster.local",
        "svc1.kplug.svc.cluster.local",
        "nope.kplug.svc.cluster.local",
        "www.example.com",
    ] {
        for t in ["A", "AAAA", "CNAME", "SRV", "TXT"] {
            table = table.case(Case::new(&format!("fwd {name} {t}"), Query::new(name, t)));
        }
    }
    let report = table.run(rig).expect("table runs");
    expect(&report, "fwd ext.kplug.svc.cluster.local A", 0, 2);
    report.assert_ok();
}

fn corpus(rig: &Rig) {
    // Twice: the second reply of every case comes from clusterdns's answer
    // memo, and must match CoreDNS all the same.
    let mut table = Table::new(COREFILE).objects(OBJECTS).keep_objects().twice();
    for name in NAMES {
        for t in TYPES {
            table = table.case(Case::new(&format!("{name} {t}"), Query::new(name, t)));
        }
    }
    for name in MIXED {
        for t in ["A", "AAAA", "SRV", "TXT", "NS", "SOA", "PTR", "CNAME"] {
            table = table.case(Case::new(&format!("{name} {t}"), Query::new(name, t)));
        }
    }
    for name in search_walk() {
        for t in qtype_for(&name) {
            table = table.case(Case::new(
                &format!("search {name} {t}"),
                Query::new(&name, t),
            ));
        }
    }
    // Both transports for a few.
    for name in [
        "hdls.kplug.svc.cluster.local",
        "nope.kplug.svc.cluster.local",
    ] {
        table = table
            .case(Case::new(&format!("{name} A udp+tcp"), Query::new(name, "A")).udp_and_tcp());
    }
    let report = table.run(rig).expect("table runs");
    // Guard against a vacuous pass: both servers answered, with data.
    expect(&report, "svc1.kplug.svc.cluster.local A", 0, 1);
    expect(&report, "_http._tcp.hdls.kplug.svc.cluster.local SRV", 0, 5);
    expect(&report, "nope.kplug.svc.cluster.local A", 3, 0);
    expect(&report, "ext-chain.kplug.svc.cluster.local A", 0, 3);
    report.assert_ok();
}

/// Asserts the candidate's rcode and answer count for case `name`.
#[track_caller]
fn expect(report: &Report, name: &str, rcode: u16, answers: usize) {
    let case = report
        .cases
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no case {name}"));
    for c in &case.comparisons {
        for o in [&c.reference, &c.candidate] {
            let Outcome::Response(r) = o else {
                panic!("{name}: no response: {c}");
            };
            assert_eq!((r.rcode, r.answer.len()), (rcode, answers), "{name}: {c}");
        }
    }
}

const OPTIONS_COREFILE: &str = ".:@PORT@ {
    bind 127.0.0.1
    ready 127.0.0.1:@PORT_READY@
    kubernetes cluster.local 10.96.0.0/16 {
        kubeconfig @KUBECONFIG@ clusterdns-rig
        namespaces kplug
        endpoint_pod_names
        ignore empty_service
        ttl 30
        fallthrough 96.10.in-addr.arpa
    }
}
";

fn options(rig: &Rig) {
    let mut table = Table::new(OPTIONS_COREFILE).objects(OBJECTS);
    let names = [
        "svc1.kplug.svc.cluster.local",
        "kubernetes.default.svc.cluster.local",
        "pod-b.hdls.kplug.svc.cluster.local",
        "10-244-7-11.hdls.kplug.svc.cluster.local",
        "hdls.kplug.svc.cluster.local",
        "dual.kplug.svc.cluster.local",
        "nope.kplug.svc.cluster.local",
        "1-2-3-4.kplug.pod.cluster.local",
        "1.77.96.10.in-addr.arpa",
        "1.0.96.10.in-addr.arpa",
        "9.9.96.10.in-addr.arpa",
        "11.7.244.10.in-addr.arpa",
        "_http._tcp.hdls.kplug.svc.cluster.local",
        "cluster.local",
    ];
    for name in names {
        for t in ["A", "AAAA", "SRV", "PTR", "TXT", "SOA", "NS"] {
            table = table.case(Case::new(&format!("{name} {t}"), Query::new(name, t)));
        }
    }
    let report = table.run(rig).expect("table runs");
    report.assert_ok();
}
