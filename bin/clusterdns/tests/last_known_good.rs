//! Last-known-good (issue 19): when the chain behind *cache* fails, the
//! last good answer past its TTL answers, with a 30 s TTL, without
//! `serve_stale` in the Corefile (RFC 8767); `last_known_good off` gives
//! CoreDNS's answers; and *kubernetes* keeps every Service of its last good
//! snapshot while the API server is unreachable, across the watch's
//! restarts and a relist after the outage.
//!
//! The upstreams are real servers on loopback: the reference CoreDNS
//! (stopped to kill the upstream) and the tests' fault upstream (to
//! blackhole it). The Kubernetes test runs on a private rig whose
//! apiserver it stops. Skipped without the reference CoreDNS or the rig's
//! binaries, unless `CLUSTERDNS_REQUIRE_RIG=1`.

mod common;
mod fault;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use clusterdns_test_support::{
    Differential, Outcome, PrivateRig, Query, Response, RunningServer, ServerSpec, Transport,
    TtlMode, coredns_or_skip, exchange,
};
use fault::{Fault, Mode};

/// The upstream: CoreDNS answering every A under `lkg.test.` with TTL 1.
const UPSTREAM: &str = r#"
lkg.test:@PORT@ {
    bind 127.0.0.1
    template IN A {
        answer "{{ .Name }} 1 IN A 192.0.2.7"
    }
}
"#;

/// *cache* (entries live 1 s) in front of *forward* to `@UPSTREAM@`, with
/// `@CACHE_BLOCK@` as the cache's block.
fn front(cache_block: &str) -> String {
    format!(
        "lkg.test:@PORT@ {{\n    bind 127.0.0.1\n    cache 1 {{\n{cache_block}\n    }}\n    forward . @UPSTREAM@\n}}\n"
    )
}

fn start_upstream(coredns: &Path) -> RunningServer {
    RunningServer::start(&ServerSpec::coredns_at(coredns, UPSTREAM).named("upstream"))
        .expect("start the upstream CoreDNS")
}

fn pair(coredns: &Path, upstream: SocketAddr, reference: &str, candidate: &str) -> Differential {
    let up = upstream.to_string();
    Differential::between(
        None,
        ServerSpec::coredns_at(coredns, reference).var("UPSTREAM", &up),
        ServerSpec::clusterdns_at(common::binary(), candidate).var("UPSTREAM", &up),
    )
    .expect("start CoreDNS and clusterdns")
    .with_timeout(Duration::from_secs(8))
}

fn response(o: &Outcome) -> &Response {
    o.response()
        .unwrap_or_else(|| panic!("no response: {}", o.summary()))
}

fn ttls(r: &Response) -> Vec<u32> {
    r.answer.iter().map(|rr| rr.ttl).collect()
}

#[test]
fn every_upstream_dead_answers_the_stale_answer_with_ttl_30() {
    let coredns = coredns_or_skip!();
    let upstream = start_upstream(&coredns);
    // The reference is CoreDNS with serve_stale in verify mode, the RFC 8767
    // order (upstream first, stale on failure); clusterdns has no option.
    let diff = pair(
        &coredns,
        upstream.addr,
        &front("        serve_stale 1h verify"),
        &front(""),
    );
    let q = Query::new("a.lkg.test", "A");
    let fresh = diff.query(&q);
    fresh.assert_agree();
    assert_eq!(ttls(response(&fresh.candidate)), [1]);

    drop(upstream);
    std::thread::sleep(Duration::from_millis(2200));
    let t = Instant::now();
    let stale = diff.query_with(&q, TtlMode::Ignore);
    stale.assert_agree();
    let cand = response(&stale.candidate);
    assert_eq!(cand.rcode_name(), "NOERROR");
    assert_eq!(cand.answer.len(), 1, "{cand:?}");
    assert_eq!(cand.answer[0].rdata, "192.0.2.7");
    assert_eq!(ttls(cand), [30], "RFC 8767's stale TTL");
    assert_eq!(ttls(response(&stale.reference)), [0], "CoreDNS's stale TTL");
    // A cache hit's flags: the upstream's (an authoritative server without
    // RA), AA set.
    assert_eq!(cand.flags, response(&fresh.candidate).flags);
    assert_eq!(cand.flags.to_string(), "qr aa rd");
    eprintln!("stale answers after {:?}", t.elapsed());

    // A failure moments ago: the stale answer at once, again.
    let t = Instant::now();
    let again = diff.candidate.query(&q, Duration::from_secs(2));
    assert_eq!(ttls(response(&again)), [30]);
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );

    // A name never answered: nothing to fall back on, SERVFAIL as CoreDNS.
    diff.query_with(&Query::new("never.lkg.test", "A"), TtlMode::Ignore)
        .assert_agree();
    assert_eq!(
        response(
            &diff
                .candidate
                .query(&Query::new("never.lkg.test", "A"), Duration::from_secs(8))
        )
        .rcode_name(),
        "SERVFAIL"
    );
}

#[test]
fn last_known_good_off_gives_corednss_answers() {
    let coredns = coredns_or_skip!();
    let upstream = start_upstream(&coredns);
    let reference =
        "lkg.test:@PORT@ {\n    bind 127.0.0.1\n    cache 1\n    forward . @UPSTREAM@\n}\n";
    let diff = pair(
        &coredns,
        upstream.addr,
        reference,
        &front("        last_known_good off"),
    );
    let queries = [Query::new("a.lkg.test", "A"), Query::new("b.lkg.test", "A")];
    for q in &queries {
        diff.query(q).assert_agree();
    }
    drop(upstream);
    std::thread::sleep(Duration::from_millis(2200));
    for q in &queries {
        let c = diff.query(q);
        c.assert_agree();
        assert_eq!(response(&c.candidate).rcode_name(), "SERVFAIL");
    }
}

/// dig-free exchange with the candidate: rcode, answer data and TTLs.
fn ask(addr: SocketAddr, name: &str, timeout: Duration) -> (String, Vec<String>, Vec<u32>) {
    let msg = Query::new(name, "A").to_wire().expect("query to wire");
    match exchange(addr, &msg, Transport::Udp, timeout) {
        Outcome::Response(r) => (
            r.rcode_name(),
            r.answer.iter().map(|rr| rr.rdata.clone()).collect(),
            ttls(&r),
        ),
        other => (other.summary(), Vec::new(), Vec::new()),
    }
}

#[test]
fn a_blackholed_upstream_gets_the_stale_answer_at_the_client_response_timer() {
    let f = Fault::start(3);
    f.state.ttl.store(1, Ordering::SeqCst);
    let corefile = front("").replace(
        "    forward",
        "    prometheus 127.0.0.1:@PORT_METRICS@\n    forward",
    );
    let spec = ServerSpec::clusterdns_at(common::binary(), &corefile).var("UPSTREAM", &f.to());
    let s = RunningServer::start(&spec).expect("start clusterdns");
    let long = Duration::from_secs(8);
    assert_eq!(
        ask(s.addr, "t.lkg.test", long),
        ("NOERROR".into(), vec!["192.0.2.3".into()], vec![1])
    );
    // Expired, upstream alive: its new answer, not the stale one.
    std::thread::sleep(Duration::from_millis(2200));
    f.state.octet.store(4, Ordering::SeqCst);
    assert_eq!(
        ask(s.addr, "t.lkg.test", long),
        ("NOERROR".into(), vec!["192.0.2.4".into()], vec![1])
    );
    // Expired, upstream silent: the stale answer once the 1.8 s timer fires.
    std::thread::sleep(Duration::from_millis(2200));
    f.set(Mode::Stall);
    let t = Instant::now();
    let got = ask(s.addr, "t.lkg.test", long);
    let waited = t.elapsed();
    assert_eq!(got, ("NOERROR".into(), vec!["192.0.2.4".into()], vec![30]));
    assert!(
        waited >= Duration::from_millis(1700) && waited < Duration::from_millis(3000),
        "answered after {waited:?}"
    );

    // An upstream SERVFAIL is a failure too; an NXDOMAIN is an answer, as
    // in CoreDNS.
    f.set(Mode::Answer);
    assert_eq!(ask(s.addr, "sf.lkg.test", long).0, "NOERROR");
    assert_eq!(ask(s.addr, "nx.lkg.test", long).0, "NOERROR");
    std::thread::sleep(Duration::from_millis(2200));
    f.set(Mode::Servfail);
    assert_eq!(
        ask(s.addr, "sf.lkg.test", long),
        ("NOERROR".into(), vec!["192.0.2.4".into()], vec![30])
    );
    f.set(Mode::Nxdomain);
    assert_eq!(ask(s.addr, "nx.lkg.test", long).0, "NXDOMAIN");

    // Two stale answers (t and sf), counted as CoreDNS counts serve_stale's.
    let metrics = s.scrape("PORT_METRICS");
    let served: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("coredns_cache_served_stale_total{"))
        .collect();
    assert_eq!(served.len(), 1, "{metrics}");
    assert!(served[0].ends_with(" 2"), "{}", served[0]);
}

/// The Kubernetes test's objects: a ClusterIP Service and a headless one
/// with an endpoint.
fn objects() -> String {
    let db = common::headless_service_yaml("lkg", "db", "pg", 5432);
    let slice = common::endpoint_slice_yaml(
        "lkg",
        "db",
        "db-1",
        &[("10.200.61.1", None, true)],
        "[{name: pg, port: 5432, protocol: TCP}]",
    );
    format!(
        "
apiVersion: v1
kind: Namespace
metadata: {{name: lkg}}
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: lkg}}
spec:
  clusterIP: 10.96.61.10
  ports: [{{name: http, port: 80, protocol: TCP}}]
---
{db}---
{slice}"
    )
}

const K8S_KNOWN: &[(&str, &str)] = &[
    ("web.lkg.svc.cluster.local", "A"),
    ("db.lkg.svc.cluster.local", "A"),
    ("_http._tcp.web.lkg.svc.cluster.local", "SRV"),
    ("10.61.96.10.in-addr.arpa", "PTR"),
    ("lkg.svc.cluster.local", "A"),
];

fn summary(addr: SocketAddr, q: &Query) -> String {
    let msg = q.to_wire().expect("query to wire");
    match exchange(addr, &msg, Transport::Udp, Duration::from_secs(2)) {
        Outcome::Response(r) => {
            let mut rrs: Vec<String> = r.answer.iter().map(|rr| rr.key()).collect();
            rrs.sort();
            format!("{} {}", r.rcode_name(), rrs.join(" | "))
        }
        other => other.summary(),
    }
}

#[test]
fn services_of_the_last_good_snapshot_are_never_nxdomain_while_the_apiserver_is_unreachable() {
    let Some(private) = PrivateRig::start(&[("RIG_KCM", "0")]) else {
        return;
    };
    let rig = private.rig();
    rig.apply_yaml(&objects()).expect("create the objects");
    let corefile = common::kubernetes_ready_corefile("    cache 5\n");
    let diff = common::rig_differential(rig, &corefile, &[]).with_ttl(TtlMode::Within(5));
    let queries: Vec<Query> = K8S_KNOWN.iter().map(|(n, t)| Query::new(n, t)).collect();
    for q in &queries {
        diff.query_settled(q, Duration::from_secs(10))
            .assert_agree();
    }
    let cand = diff.candidate.addr;
    let baseline: Vec<String> = queries.iter().map(|q| summary(cand, q)).collect();
    for b in &baseline {
        assert!(b.starts_with("NOERROR "), "{b}");
    }

    // Every answer of the candidate, checked against the baseline, while
    // `step` runs (an outage, a restart…).
    let check_during = |what: &str, step: &dyn Fn()| {
        let stop = std::sync::atomic::AtomicBool::new(false);
        let bad = std::thread::scope(|s| {
            let checker = s.spawn(|| {
                let mut bad = Vec::new();
                let mut n = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    for (q, want) in queries.iter().zip(&baseline) {
                        let got = summary(cand, q);
                        n += 1;
                        if &got != want && bad.len() < 10 {
                            bad.push(format!("{q}: got {got}, want {want}"));
                        }
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                (bad, n)
            });
            step();
            stop.store(true, Ordering::Relaxed);
            checker.join().expect("checker")
        });
        assert!(bad.1 > 20, "{what}: only {} answers checked", bad.1);
        assert!(
            bad.0.is_empty(),
            "{what}: answers changed:\n{}\nclusterdns log:\n{}",
            bad.0.join("\n"),
            diff.candidate.log()
        );
    };

    // The outage: the watch fails and retries for 8 s.
    check_during("apiserver down", &|| {
        rig.apiserver_stop().expect("apiserver-stop");
        std::thread::sleep(Duration::from_secs(8));
    });
    // CoreDNS keeps its informers' state too.
    for q in &queries {
        diff.query(q).assert_agree();
    }
    // Back with a compacted etcd (the watch resumes with 410 Gone and
    // relists), down again at once (a relist cut short), back again.
    check_during("relist after compaction, cut short", &|| {
        rig.etcd_compact().expect("etcd-compact");
        rig.apiserver_start().expect("apiserver-start");
        rig.apiserver_stop().expect("apiserver-stop");
        std::thread::sleep(Duration::from_secs(3));
        rig.apiserver_start().expect("apiserver-start");
        std::thread::sleep(Duration::from_secs(3));
    });
    // Deletions are learnt once the API server is back: web goes, as in
    // CoreDNS.
    rig.kubectl(&["delete", "-n", "lkg", "service/web"])
        .expect("delete web");
    let gone = Query::new("web.lkg.svc.cluster.local", "A");
    // The watches may be in a backoff of up to 30 s after the restarts.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        // The caches keep the old answer up to 5 s, each its own.
        let c = diff.query(&gone);
        let rcodes = [&c.reference, &c.candidate].map(|o| response(o).rcode_name());
        if rcodes == ["NXDOMAIN", "NXDOMAIN"] {
            c.assert_agree();
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still {rcodes:?} after the deletion"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn an_entry_expired_longer_than_max_age_is_not_served() {
    let coredns = coredns_or_skip!();
    let upstream = start_upstream(&coredns);
    let spec = ServerSpec::clusterdns_at(
        common::binary(),
        &front("        last_known_good 2s\n        keepttl"),
    )
    .var("UPSTREAM", &upstream.addr.to_string());
    let s = RunningServer::start(&spec).expect("start clusterdns");
    let long = Duration::from_secs(8);
    let t0 = Instant::now();
    assert_eq!(ask(s.addr, "m.lkg.test", long).0, "NOERROR");
    drop(upstream);
    // Expired (TTL 1) for less than 2 s: stale, with TTL 30 (keepttl or not).
    std::thread::sleep(Duration::from_millis(1500).saturating_sub(t0.elapsed()));
    assert_eq!(
        ask(s.addr, "m.lkg.test", long),
        ("NOERROR".into(), vec!["192.0.2.7".into()], vec![30])
    );
    // Expired for more than 2 s: nothing to fall back on.
    std::thread::sleep(Duration::from_millis(4500).saturating_sub(t0.elapsed()));
    assert_eq!(ask(s.addr, "m.lkg.test", long).0, "SERVFAIL");
}
