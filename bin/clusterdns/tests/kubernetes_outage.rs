//! The *kubernetes* plugin through the real binary while the API server goes
//! away: known names keep their answers under query load, changes made after
//! the restart appear, and a forced `410 Gone` relist converges to the exact
//! object set with peak RSS within 1.5× the steady state.
//!
//! Each test starts a private rig of its own (the shared rig's binaries, a
//! scratch directory, free ports; `clusterdns_test_support::PrivateRig`) and
//! the reference CoreDNS next to clusterdns on it, so stopping the apiserver
//! and compacting etcd disturb no other test. Skipped with a message when the
//! rig's binaries are missing, unless `CLUSTERDNS_REQUIRE_RIG=1`.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clusterdns_test_support::{Differential, Outcome, PrivateRig, Query, Rig, Transport, exchange};
use common::torture::vmrss_kib;

/// Both tests start a private rig (etcd + apiserver): one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// The rig's CoreDNS (reference) and this package's clusterdns on
/// [`common::kubernetes_ready_corefile`].
fn servers(rig: &Rig) -> Differential {
    common::rig_differential(rig, &common::kubernetes_ready_corefile(""), &[])
}

fn private_rig() -> Option<PrivateRig> {
    // No controller-manager: the tests write EndpointSlices themselves.
    PrivateRig::start(&[("RIG_KCM", "0")])
}

/// What a known name answers: the rcode and the answer section (sorted, with
/// TTLs), or the failure.
fn answer(addr: SocketAddr, q: &Query) -> String {
    let msg = q.to_wire().expect("query to wire");
    match exchange(addr, &msg, Transport::Udp, Duration::from_secs(2)) {
        Outcome::Response(r) => {
            let mut rrs: Vec<String> = r.answer.iter().map(ToString::to_string).collect();
            rrs.sort();
            format!("{} {}", r.rcode_name(), rrs.join(" | "))
        }
        other => other.summary(),
    }
}

/// The A (or other) records' data in the candidate's answer, sorted.
fn rdata(addr: SocketAddr, name: &str, qtype: &str) -> (String, Vec<String>) {
    let msg = Query::new(name, qtype).to_wire().expect("query to wire");
    match exchange(addr, &msg, Transport::Udp, Duration::from_secs(2)) {
        Outcome::Response(r) => {
            let mut v: Vec<String> = r.answer.iter().map(|rr| rr.rdata.clone()).collect();
            v.sort();
            (r.rcode_name(), v)
        }
        other => (other.summary(), Vec::new()),
    }
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill {sig} {pid}");
}

/// The outage test's objects: web (see [`web_objects`]) and a headless db
/// with two endpoints.
fn outage_objects() -> String {
    let db = common::headless_service_yaml("outage", "db", "pg", 5432);
    let endpoints = [("10.200.1.1", None, true), ("10.200.1.2", None, true)];
    let slice = common::endpoint_slice_yaml("outage", "db", "db-1", &endpoints, PG);
    let web = web_objects(80, "10.200.0.1");
    format!("{NAMESPACE}---\n{web}---\n{db}---\n{slice}")
}

const PG: &str = "[{name: pg, port: 5432, protocol: TCP}]";

const NAMESPACE: &str = "
apiVersion: v1
kind: Namespace
metadata: {name: outage}
";

/// The changes made once the apiserver is back: a new Service, web's port
/// and endpoint moved, db deleted.
fn after_objects() -> String {
    format!("{AFTER}---\n{}", web_objects(81, "10.200.0.9"))
}

const AFTER: &str = "
apiVersion: v1
kind: Service
metadata: {name: after, namespace: outage}
spec:
  clusterIP: 10.96.50.20
  ports: [{name: http, port: 80, protocol: TCP}]
";

/// The Service web (ClusterIP 10.96.50.10, port `http` = `port`) and its
/// EndpointSlice: one ready endpoint `web-0` at `endpoint`, target port 8080.
fn web_objects(port: u16, endpoint: &str) -> String {
    let slice = common::endpoint_slice_yaml(
        "outage",
        "web",
        "web-1",
        &[(endpoint, Some("web-0"), true)],
        "[{name: http, port: 8080, protocol: TCP}]",
    );
    format!(
        "apiVersion: v1
kind: Service
metadata: {{name: web, namespace: outage}}
spec:
  clusterIP: 10.96.50.10
  ports: [{{name: http, port: {port}, protocol: TCP}}]
---
{slice}"
    )
}

/// The known names of the outage test: `(name, type)`.
const KNOWN: &[(&str, &str)] = &[
    ("web.outage.svc.cluster.local", "A"),
    ("db.outage.svc.cluster.local", "A"),
    ("web-0.web.outage.svc.cluster.local", "A"),
    ("_http._tcp.web.outage.svc.cluster.local", "SRV"),
    ("10.50.96.10.in-addr.arpa", "PTR"),
    ("1.0.200.10.in-addr.arpa", "PTR"),
    ("kubernetes.default.svc.cluster.local", "A"),
    ("outage.svc.cluster.local", "A"),
];

/// Parses dnsperf's `Queries lost:` count and its `Response codes:` line.
fn dnsperf_summary(out: &str) -> (Option<u64>, String, Option<u64>) {
    let field = |prefix: &str| {
        out.lines()
            .find_map(|l| l.trim().strip_prefix(prefix))
            .map(|s| s.trim().to_string())
    };
    let lost = field("Queries lost:")
        .and_then(|s| s.split_whitespace().next().and_then(|n| n.parse().ok()));
    let completed = field("Queries completed:")
        .and_then(|s| s.split_whitespace().next().and_then(|n| n.parse().ok()));
    (
        lost,
        field("Response codes:").unwrap_or_default(),
        completed,
    )
}

#[test]
fn known_names_survive_an_apiserver_outage_under_load_and_changes_follow_the_restart() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(private) = private_rig() else {
        return;
    };
    let rig = private.rig();
    rig.apply_yaml(&outage_objects())
        .expect("create the objects");
    let diff = servers(rig);
    let cand = diff.candidate.addr;

    // Before the outage: both servers agree on every known name, and the
    // names mean what the objects say.
    let queries: Vec<Query> = KNOWN.iter().map(|(n, t)| Query::new(n, t)).collect();
    for q in &queries {
        diff.query_settled(q, Duration::from_secs(10))
            .assert_agree();
    }
    assert_eq!(
        rdata(cand, "web.outage.svc.cluster.local", "A"),
        ("NOERROR".into(), vec!["10.96.50.10".to_string()])
    );
    assert_eq!(
        rdata(cand, "db.outage.svc.cluster.local", "A"),
        (
            "NOERROR".into(),
            vec!["10.200.1.1".to_string(), "10.200.1.2".to_string()]
        )
    );
    assert_eq!(
        rdata(cand, "nothere.outage.svc.cluster.local", "A").0,
        "NXDOMAIN"
    );
    let baseline: Vec<String> = queries.iter().map(|q| answer(cand, q)).collect();
    let nx = Query::new("nothere.outage.svc.cluster.local", "A");
    let nx_baseline = answer(cand, &nx);

    // Query load: dnsperf for 15 s on the known (positive) names, and a
    // checker comparing every answer (NXDOMAIN included) with the baseline.
    let dir = diff.candidate.dir().to_path_buf();
    let qfile = dir.join("queries.txt");
    let mut text = String::new();
    for (n, t) in KNOWN {
        let _ = writeln!(text, "{n} {t}");
    }
    std::fs::write(&qfile, text).expect("write the query file");
    let mut dnsperf = Command::new("dnsperf");
    dnsperf
        .args(["-s", "127.0.0.1", "-p", &cand.port().to_string()])
        .arg("-d")
        .arg(&qfile)
        .args(["-l", "15", "-c", "2", "-Q", "3000", "-t", "2"]);
    let stop = Arc::new(AtomicBool::new(false));
    let checked = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let (dnsperf, mismatches) = std::thread::scope(|s| {
        let checker = s.spawn(|| {
            let mut bad = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                for (q, want) in queries.iter().zip(&baseline).chain([(&nx, &nx_baseline)]) {
                    let got = answer(cand, q);
                    checked.fetch_add(1, Ordering::Relaxed);
                    if &got != want && bad.len() < 20 {
                        bad.push(format!(
                            "{:?} {q}: got {got}, want {want}",
                            started.elapsed()
                        ));
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            bad
        });
        let perf = s.spawn(move || dnsperf.output());
        // The outage starts 2 s into the load and lasts past its end.
        std::thread::sleep(Duration::from_secs(2));
        rig.apiserver_stop().expect("apiserver-stop");
        let down_at = started.elapsed();
        assert!(
            rig.kubectl(&["get", "ns", "--request-timeout=2s"]).is_err(),
            "the apiserver is down"
        );
        let perf = perf.join().expect("dnsperf thread");
        // A few more seconds of outage without load.
        std::thread::sleep(Duration::from_secs(3));
        stop.store(true, Ordering::Relaxed);
        let bad = checker.join().expect("checker thread");
        eprintln!(
            "apiserver down at {down_at:?}; outage until {:?}",
            started.elapsed()
        );
        (perf, bad)
    });
    let dnsperf = dnsperf.expect("run dnsperf (apt-get install dnsperf)");
    let out = String::from_utf8_lossy(&dnsperf.stdout);
    eprintln!("{out}");
    assert!(dnsperf.status.success(), "dnsperf failed: {out}");
    let (lost, rcodes, completed) = dnsperf_summary(&out);
    assert_eq!(lost, Some(0), "dnsperf lost queries:\n{out}");
    assert!(
        completed.is_some_and(|n| n > 1000),
        "dnsperf completed too few queries:\n{out}"
    );
    assert!(
        rcodes.starts_with("NOERROR") && !rcodes.contains(','),
        "only NOERROR expected during the outage, got {rcodes:?}"
    );
    eprintln!(
        "checker: {} answers compared",
        checked.load(Ordering::Relaxed)
    );
    assert!(
        mismatches.is_empty(),
        "answers changed during the outage:\n{}\nclusterdns log:\n{}",
        mismatches.join("\n"),
        diff.candidate.log()
    );
    assert!(checked.load(Ordering::Relaxed) > 100);

    // Back up: changes made now appear in clusterdns, as in CoreDNS.
    rig.apiserver_start().expect("apiserver-start");
    rig.apply_yaml(&after_objects()).expect("apply the changes");
    rig.kubectl(&["delete", "-n", "outage", "service/db", "endpointslice/db-1"])
        .expect("delete db");
    let changed = Instant::now();
    let expect: &[(&str, &str, &str, &[&str])] = &[
        (
            "after.outage.svc.cluster.local",
            "A",
            "NOERROR",
            &["10.96.50.20"],
        ),
        (
            "web-0.web.outage.svc.cluster.local",
            "A",
            "NOERROR",
            &["10.200.0.9"],
        ),
        (
            "_http._tcp.web.outage.svc.cluster.local",
            "SRV",
            "NOERROR",
            &["0 100 81 web.outage.svc.cluster.local."],
        ),
        ("db.outage.svc.cluster.local", "A", "NXDOMAIN", &[]),
        ("1.0.200.10.in-addr.arpa", "PTR", "NXDOMAIN", &[]),
        (
            "9.0.200.10.in-addr.arpa",
            "PTR",
            "NOERROR",
            &["web-0.web.outage.svc.cluster.local."],
        ),
    ];
    let deadline = Duration::from_secs(60);
    let pending_at = |addr: SocketAddr| -> Vec<String> {
        expect
            .iter()
            .filter_map(|(n, t, rc, want)| {
                let got = rdata(addr, n, t);
                let want = (
                    rc.to_string(),
                    want.iter().map(ToString::to_string).collect(),
                );
                (got != want).then(|| format!("{n} {t}: got {got:?}, want {want:?}"))
            })
            .collect()
    };
    // CoreDNS's time for the same, for the record (not asserted).
    let mut reference_done = None;
    loop {
        if reference_done.is_none() && pending_at(diff.reference.addr).is_empty() {
            reference_done = Some(changed.elapsed());
        }
        let pending = pending_at(cand);
        if pending.is_empty() {
            break;
        }
        assert!(
            changed.elapsed() < deadline,
            "changes after the restart not seen within {deadline:?}:\n{}\nclusterdns log:\n{}",
            pending.join("\n"),
            diff.candidate.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "changes after the restart answered by clusterdns {:?} after the writes (CoreDNS: {reference_done:?})",
        changed.elapsed()
    );
    for (n, t, _, _) in expect {
        diff.query_settled(&Query::new(n, t), Duration::from_secs(30))
            .assert_agree();
    }
    for q in &queries {
        diff.query_settled(q, Duration::from_secs(30))
            .assert_agree();
    }
}

const RELIST_NS: &str = "relist";

/// Service `i` of the relist test: every tenth one headless.
fn relist_objects(i: usize, generation: u8) -> String {
    let name = format!("s{i:04}");
    let (hi, lo) = (i / 250, i % 250 + 1);
    let cluster_ip = if i.is_multiple_of(10) {
        "None".to_string()
    } else {
        format!("10.96.{}.{lo}", 100 + hi)
    };
    format!(
        "---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: {RELIST_NS}}}
spec:
  clusterIP: {cluster_ip}
  ports: [{{name: http, port: 80, protocol: TCP}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-a
  namespace: {RELIST_NS}
  labels: {{kubernetes.io/service-name: {name}}}
addressType: IPv4
endpoints:
- addresses: [10.{a}.{hi}.{lo}]
  hostname: h{i}
  conditions: {{ready: true}}
- addresses: [10.{b}.{hi}.{lo}]
  conditions: {{ready: true}}
ports: [{{name: http, port: 8080, protocol: TCP}}]
",
        a = 200 + 2 * generation,
        b = 201 + 2 * generation,
    )
}

/// What `s{i}.relist.svc.cluster.local A` answers for generation `g` of its slice.
fn relist_expected(i: usize, generation: u8) -> Vec<String> {
    let (hi, lo) = (i / 250, i % 250 + 1);
    if i.is_multiple_of(10) {
        let mut v = vec![
            format!("10.{}.{hi}.{lo}", 200 + 2 * generation),
            format!("10.{}.{hi}.{lo}", 201 + 2 * generation),
        ];
        v.sort();
        v
    } else {
        vec![format!("10.96.{}.{lo}", 100 + hi)]
    }
}

/// Creates objects with `kubectl create` in chunks (one apiserver write per object).
fn create_all(rig: &Rig, objects: impl Iterator<Item = String>) {
    let all: Vec<String> = objects.collect();
    for chunk in all.chunks(400) {
        rig.kubectl_with_input(&["create", "-f", "-", "-o", "name"], &chunk.concat())
            .expect("kubectl create");
    }
}

/// The model: service name → (rcode, sorted A rdata).
type Model = BTreeMap<String, (String, Vec<String>)>;

/// Waits until clusterdns answers every name of the model as the model says;
/// returns how long that took.
fn converge(
    addr: SocketAddr,
    model: &Model,
    timeout: Duration,
    log: impl Fn() -> String,
) -> Duration {
    let start = Instant::now();
    let mut pending: BTreeSet<&String> = model.keys().collect();
    loop {
        pending.retain(|name| {
            let want = &model[*name];
            rdata(addr, &format!("{name}.{RELIST_NS}.svc.cluster.local"), "A") != *want
        });
        if pending.is_empty() {
            return start.elapsed();
        }
        if start.elapsed() > timeout {
            let sample: Vec<String> = pending
                .iter()
                .take(10)
                .map(|name| {
                    format!(
                        "{name}: got {:?}, want {:?}",
                        rdata(addr, &format!("{name}.{RELIST_NS}.svc.cluster.local"), "A"),
                        model[*name]
                    )
                })
                .collect();
            panic!(
                "{} names not converged after {timeout:?}, e.g.\n{}\nclusterdns log:\n{}",
                pending.len(),
                sample.join("\n"),
                log()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn gone_410_relists_to_the_exact_object_set_within_1_5x_steady_rss() {
    const N: usize = 2000;
    const CHANGED: usize = 200;
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(private) = private_rig() else {
        return;
    };
    let rig = private.rig();
    rig.kubectl(&["create", "namespace", RELIST_NS])
        .expect("create namespace");
    let diff = servers(rig);
    let cand = diff.candidate.addr;
    let pid = diff.candidate.pid().expect("clusterdns's pid");
    let log = || diff.candidate.log();

    // Many writes while clusterdns watches.
    let t = Instant::now();
    create_all(rig, (0..N).map(|i| relist_objects(i, 0)));
    eprintln!("created {N} services and {N} slices in {:?}", t.elapsed());
    let mut model: Model = (0..N)
        .map(|i| {
            (
                format!("s{i:04}"),
                ("NOERROR".to_string(), relist_expected(i, 0)),
            )
        })
        .collect();
    let t = converge(cand, &model, Duration::from_secs(120), log);
    eprintln!("watch converged {t:?} after the last write");

    // Steady state: the median of 20 samples over 2 s, after 2 s of quiet.
    std::thread::sleep(Duration::from_secs(2));
    let mut samples: Vec<u64> = (0..20)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(100));
            vmrss_kib(pid).expect("clusterdns's VmRSS")
        })
        .collect();
    samples.sort_unstable();
    let steady = samples[samples.len() / 2];

    // Freeze clusterdns, change the cluster behind its back, compact etcd and
    // restart the apiserver: its watches can only resume from a compacted
    // resourceVersion (410 Gone), so the changes reach it only by a relist.
    signal(pid, "-STOP");
    let frozen = scopeguard(pid);
    let deleted: String = (0..CHANGED).map(|i| relist_objects(i, 0)).collect();
    rig.delete_yaml(&deleted).expect("delete services");
    let moved: Vec<String> = (CHANGED..2 * CHANGED)
        .map(|i| relist_objects(i, 1))
        .collect();
    rig.kubectl_with_input(&["replace", "-f", "-", "-o", "name"], &moved.concat())
        .expect("replace slices");
    create_all(rig, (N..N + CHANGED).map(|i| relist_objects(i, 0)));
    for i in 0..CHANGED {
        model.insert(format!("s{i:04}"), ("NXDOMAIN".to_string(), Vec::new()));
    }
    for i in CHANGED..2 * CHANGED {
        model.insert(
            format!("s{i:04}"),
            ("NOERROR".to_string(), relist_expected(i, 1)),
        );
    }
    for i in N..N + CHANGED {
        model.insert(
            format!("s{i:04}"),
            ("NOERROR".to_string(), relist_expected(i, 0)),
        );
    }
    rig.apiserver_stop().expect("apiserver-stop");
    let revision = rig.etcd_compact().expect("etcd-compact");
    rig.apiserver_start().expect("apiserver-start");
    eprintln!("compacted etcd at revision {revision}, apiserver restarted");

    // Sample RSS every 5 ms from the moment clusterdns runs again until 3 s
    // after it has converged.
    let done = AtomicBool::new(false);
    let (peak, converged) = std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut peak = 0;
            let mut n = 0u64;
            while !done.load(Ordering::Relaxed) {
                if let Some(rss) = vmrss_kib(pid) {
                    peak = peak.max(rss);
                    n += 1;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            (peak, n)
        });
        drop(frozen); // SIGCONT
        let t = converge(cand, &model, Duration::from_secs(180), log);
        std::thread::sleep(Duration::from_secs(3));
        done.store(true, Ordering::Relaxed);
        (sampler.join().expect("sampler"), t)
    });
    let (peak, samples) = peak;
    let t = converged;
    eprintln!(
        "relist converged {t:?} after SIGCONT; VmRSS steady {steady} KiB, peak during relist {peak} KiB ({samples} samples, ratio {:.2})",
        peak as f64 / steady as f64
    );
    assert!(samples > 100, "too few RSS samples: {samples}");
    assert!(
        peak * 2 <= steady * 3,
        "peak RSS {peak} KiB during the relist exceeds 1.5 x the steady {steady} KiB"
    );

    // The whole object set, also against CoreDNS (which relisted too).
    for name in model.keys() {
        let q = Query::new(&format!("{name}.{RELIST_NS}.svc.cluster.local"), "A");
        diff.query_settled(&q, Duration::from_secs(30))
            .assert_agree();
    }
    // The moved and new endpoints' reverse records.
    for i in (CHANGED..2 * CHANGED).chain(N..N + CHANGED).step_by(7) {
        let g = u8::from(i < 2 * CHANGED);
        let (hi, lo) = (i / 250, i % 250 + 1);
        let ptr = format!("{lo}.{hi}.{}.10.in-addr.arpa", 200 + 2 * g);
        let c = diff.query_settled(&Query::new(&ptr, "PTR"), Duration::from_secs(30));
        c.assert_agree();
        assert_eq!(
            rdata(cand, &ptr, "PTR"),
            (
                "NOERROR".to_string(),
                vec![format!("h{i}.s{i:04}.{RELIST_NS}.svc.cluster.local.")]
            )
        );
    }
}

/// Sends SIGCONT to `pid` when dropped (also when the test fails while the
/// process is stopped).
struct Cont(u32);

impl Drop for Cont {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.0.to_string()])
            .status();
    }
}

fn scopeguard(pid: u32) -> Cont {
    Cont(pid)
}
