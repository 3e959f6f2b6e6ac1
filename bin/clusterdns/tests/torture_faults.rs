//! Torture scenarios (issue 18), faults: the apiserver going away, a forced
//! `410 Gone` relist at scale, upstreams that SERVFAIL, time out and reset
//! TCP, and a storm of Corefile reloads, each under query load against the
//! real binary. Each prints one `TORTURE <name>: k=v …` line and asserts its
//! targets; `CLUSTERDNS_TORTURE=long` runs the long form (RELIABILITY.md).

mod common;
mod fault;
mod ops;

use std::time::{Duration, Instant};

use common::torture::{self, dnsperf, finish, long, report};
use common::{Server, free_port};

/// The scenarios run one at a time: their latency bounds and RSS figures
/// are about the server under test, not about a private rig starting next
/// to it.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The storm's Corefile number `v`: good ones change the chain (cache,
/// errors, an extra zone) and the answer of `ver.storm.test`; broken ones
/// are refused at parse time (an unknown directive, a brace left open) or
/// only when listening (an address not on this host).
fn storm_corefile(v: u32, mp: u16, port: &str, broken: Option<u32>) -> String {
    let extra = match v % 3 {
        0 => "    cache 30\n",
        1 => "    errors\n",
        _ => "",
    };
    let (bind, tail, inner) = match broken {
        Some(0) => ("127.0.0.1", "}\n", "    nosuchplugin\n"),
        Some(1) => ("127.0.0.1", "", ""),
        Some(_) => ("127.0.0.1 192.0.2.55", "}\n", ""),
        None => ("127.0.0.1", "}\n", ""),
    };
    let zone = if v.is_multiple_of(2) {
        format!("extra{v}.test:{port} {{\n    bind 127.0.0.1\n    whoami\n}}\n")
    } else {
        String::new()
    };
    format!(
        "storm.test:{port} {{
    bind {bind}
    reload 2s 0
    prometheus 127.0.0.1:{mp}
{extra}{inner}    hosts {{
        10.77.0.1 fixed.storm.test
        10.78.{hi}.{lo} ver.storm.test
    }}
{tail}{zone}",
        hi = v / 256,
        lo = v % 256,
    )
}

/// The Corefile is replaced as a ConfigMap volume is (a new file renamed
/// over the old), so the reload poller never reads half a file.
fn replace(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, text).expect("write the Corefile");
    std::fs::rename(&tmp, path).expect("rename the Corefile");
}

/// What `ver.storm.test A` answers.
fn version(port: u16) -> String {
    short(port, "ver.storm.test", "A")
}

/// (d) A reload storm: the Corefile rewritten `N` times (every fourth
/// broken), each rewrite followed by SIGUSR1, under UDP and TCP load.
#[test]
fn reload_storm_loses_no_query_and_keeps_the_last_good_config() {
    let _one = one_at_a_time();
    let (rewrites, gap) = if long() {
        (100, Duration::from_millis(500))
    } else {
        (100, Duration::from_millis(120))
    };
    let mp = free_port();
    let s = Server::start(&storm_corefile(0, mp, "{PORT}", None));
    let port = s.port;
    let pid = s.child.id();
    assert_eq!(version(port), "NOERROR 10.78.0.0");

    let qfile = s.dir.path().join("queries.txt");
    std::fs::write(&qfile, "fixed.storm.test A\nver.storm.test A\n").expect("query file");
    let secs = (gap * rewrites).as_secs() as u32 + 4;
    let udp = dnsperf(&[], "127.0.0.1", port, &qfile, secs, 3000, false);
    let tcp = dnsperf(&[], "127.0.0.1", port, &qfile, secs, 500, true);
    std::thread::sleep(Duration::from_secs(1));
    let mut last_good = 0;
    let mut broken = 0;
    let started = Instant::now();
    for v in 1..=rewrites {
        // Every fourth broken, and the last one too.
        let bad = (v % 4 == 3 || v == rewrites).then_some(v % 3);
        replace(&s.corefile, &storm_corefile(v, mp, &port.to_string(), bad));
        if bad.is_some() {
            broken += 1;
        } else {
            last_good = v;
        }
        let _ = std::process::Command::new("kill")
            .args(["-USR1", &pid.to_string()])
            .status();
        std::thread::sleep(gap);
    }
    let storm = started.elapsed();
    let (udp, tcp) = (finish(udp), finish(tcp));

    // The last good config serves, also after the poller has seen the
    // final (broken) file a few times.
    std::thread::sleep(Duration::from_secs(5));
    let want = format!("NOERROR 10.78.{}.{}", last_good / 256, last_good % 256);
    let got = version(port);
    let (_, metrics) = ops::get(mp, "/metrics");
    let failed = ops::value(&metrics, "coredns_reload_failed_total", &[]).unwrap_or(0.0);
    let rss = torture::vmrss_kib(pid).unwrap_or(0);
    report(
        "reload-storm",
        &[
            ("rewrites", rewrites.to_string()),
            ("broken", broken.to_string()),
            ("storm_s", format!("{:.1}", storm.as_secs_f64())),
            ("udp_sent", udp.sent.to_string()),
            ("udp_lost", udp.lost.to_string()),
            ("tcp_sent", tcp.sent.to_string()),
            ("tcp_lost", tcp.lost.to_string()),
            ("reload_failed", failed.to_string()),
            ("last_good_serving", (got == want).to_string()),
            ("rss_kib", rss.to_string()),
        ],
    );
    let (_, log) = s.stop();
    assert_eq!(got, want, "ver.storm.test after the storm\nlog:\n{log}");
    assert!(
        udp.sent > 1000 && tcp.sent > 100,
        "{}\n{}",
        udp.text,
        tcp.text
    );
    assert_eq!(udp.lost, 0, "UDP queries lost:\n{}\nlog:\n{log}", udp.text);
    assert_eq!(tcp.lost, 0, "TCP queries lost:\n{}\nlog:\n{log}", tcp.text);
    assert!(
        udp.only("NOERROR") && tcp.only("NOERROR"),
        "{} / {}",
        udp.rcodes,
        tcp.rcodes
    );
    assert!(failed >= 1.0, "broken reloads not counted:\n{metrics}");
}

/// What a phase of paced queries saw.
#[derive(Debug, Default)]
struct Seen {
    sent: u64,
    noerror: u64,
    other_rcode: u64,
    unanswered: u64,
    /// Answers whose A record ends in this octet: which upstream (or the
    /// cache's copy of which) answered.
    by_octet: std::collections::BTreeMap<u8, u64>,
    /// Latencies in microseconds, sorted.
    latency_us: Vec<u64>,
    /// The TTL of the last answer.
    last_ttl: Option<u32>,
}

impl Seen {
    fn pct(&self, p: f64) -> f64 {
        if self.latency_us.is_empty() {
            return 0.0;
        }
        let i = ((self.latency_us.len() as f64 - 1.0) * p).round() as usize;
        self.latency_us[i] as f64 / 1000.0
    }

    fn max_ms(&self) -> f64 {
        self.latency_us.last().map_or(0.0, |&u| u as f64 / 1000.0)
    }

    fn from(&self, octet: u8) -> u64 {
        self.by_octet.get(&octet).copied().unwrap_or(0)
    }

    fn figures(&self, phase: &str) -> Vec<(String, String)> {
        vec![
            (format!("{phase}_sent"), self.sent.to_string()),
            (format!("{phase}_noerror"), self.noerror.to_string()),
            (format!("{phase}_lost"), self.unanswered.to_string()),
            (format!("{phase}_p50_ms"), format!("{:.1}", self.pct(0.5))),
            (format!("{phase}_p99_ms"), format!("{:.1}", self.pct(0.99))),
            (format!("{phase}_max_ms"), format!("{:.1}", self.max_ms())),
        ]
    }
}

/// Latency bounds per upstream-faults phase (ms, exclusive): a SERVFAIL
/// or an RST fails over at once; a timeout costs at most one attempt's
/// read timeout (2 s) until the health check takes the upstream out;
/// stale answers come from memory.
const MAX_MS: [(&str, f64); 4] = [
    ("servfail", 1000.0),
    ("tcp_reset", 1000.0),
    ("timeout", 3000.0),
    ("stale", 500.0),
];

/// Sends `names(i)` for `i` in `0..count` over UDP to `port` from 4
/// threads, `rate` queries a second in all, each waiting up to 6 s.
fn paced(port: u16, count: u64, rate: u64, names: impl Fn(u64) -> String + Sync) -> Seen {
    const THREADS: u64 = 4;
    let per = Duration::from_secs_f64(THREADS as f64 / rate as f64);
    let seen = std::sync::Mutex::new(Seen::default());
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (seen, names) = (&seen, &names);
            s.spawn(move || {
                let sock = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
                sock.connect(("127.0.0.1", port)).expect("connect");
                let mut buf = [0u8; 1500];
                let start = Instant::now();
                let mut i = t;
                let mut n = 0u32;
                while i < count {
                    let id = (i & 0xffff) as u16;
                    let q = fault::query(&names(i), id);
                    let sent = Instant::now();
                    let _ = sock.send(&q);
                    let mut reply = None;
                    while sent.elapsed() < Duration::from_secs(6) {
                        let left = Duration::from_secs(6).saturating_sub(sent.elapsed());
                        sock.set_read_timeout(Some(left.max(Duration::from_millis(1))))
                            .expect("timeout");
                        match sock.recv(&mut buf) {
                            Ok(len) if len >= 12 && buf[..2] == id.to_be_bytes() => {
                                reply = Some(len);
                                break;
                            }
                            Ok(_) => {}
                            Err(_) => break,
                        }
                    }
                    let took = sent.elapsed();
                    {
                        let mut seen = seen.lock().expect("lock");
                        seen.sent += 1;
                        match reply {
                            None => seen.unanswered += 1,
                            Some(len) => {
                                seen.latency_us.push(took.as_micros() as u64);
                                let ancount = u16::from_be_bytes([buf[6], buf[7]]);
                                if buf[3] & 0x0f == 0 && ancount > 0 {
                                    seen.noerror += 1;
                                    *seen.by_octet.entry(buf[len - 1]).or_default() += 1;
                                    let ttl = &buf[len - 10..len - 6];
                                    seen.last_ttl =
                                        Some(u32::from_be_bytes([ttl[0], ttl[1], ttl[2], ttl[3]]));
                                } else {
                                    seen.other_rcode += 1;
                                }
                            }
                        }
                    }
                    i += THREADS;
                    n += 1;
                    let due = start + per * n;
                    if let Some(wait) = due.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                }
            });
        }
    });
    let mut seen = seen.into_inner().expect("lock");
    seen.latency_us.sort_unstable();
    seen
}

/// (c) Upstream faults: the first of two upstreams SERVFAILs, then stops
/// answering, then resets every TCP connection; at the end both stall and
/// only the cache's stale copies are left.
#[test]
fn upstream_faults_fail_over_within_bounded_latency_and_serve_stale() {
    let _one = one_at_a_time();
    let (secs, rate) = if long() { (30, 400) } else { (3, 200) };
    let count = secs * rate;
    let a = fault::Fault::start(1);
    let b = fault::Fault::start(2);
    let corefile = format!(
        ".:{{PORT}} {{
    bind 127.0.0.1
    forward . {a} {b} {{
        policy sequential
        failover SERVFAIL
        health_check 200ms
    }}
}}
stale.test:{{PORT}} {{
    bind 127.0.0.1
    cache 30 {{
        serve_stale 1h
    }}
    forward . {a} {b} {{
        policy sequential
        health_check 200ms
    }}
}}
tcp.test:{{PORT}} {{
    bind 127.0.0.1
    forward . {a} {b} {{
        force_tcp
        policy sequential
        health_check 200ms
    }}
}}
",
        a = a.to(),
        b = b.to()
    );
    let s = Server::start(&corefile);
    let port = s.port;

    // Healthy: everything from the first upstream. The stale-phase names
    // are cached now with a TTL of 1 s (kept 5 s, the cache's minimum), in
    // a zone of their own: the unique names of the other phases would
    // otherwise evict them from the cache (capacity 9984) in the long form.
    let healthy = paced(port, count, rate, |i| format!("h{i}.up.test"));
    a.state.ttl.store(1, std::sync::atomic::Ordering::SeqCst);
    let stale_names = 200;
    let warm = paced(port, stale_names, rate, |i| format!("s{i}.stale.test"));
    a.state.ttl.store(300, std::sync::atomic::Ordering::SeqCst);

    a.set(fault::Mode::Servfail);
    let servfail = paced(port, count, rate, |i| format!("f{i}.up.test"));

    a.set(fault::Mode::Stall);
    let stall = paced(port, count, rate, |i| format!("t{i}.up.test"));

    a.set(fault::Mode::Reset);
    let reset = paced(port, count, rate, |i| format!("r{i}.tcp.test"));

    // Both upstreams stall; the warmed names have expired.
    a.set(fault::Mode::Stall);
    b.set(fault::Mode::Stall);
    std::thread::sleep(Duration::from_secs(6));
    let stale = paced(port, stale_names, rate, |i| format!("s{i}.stale.test"));

    let mut figures: Vec<(String, String)> = Vec::new();
    for (phase, seen) in [
        ("healthy", &healthy),
        ("servfail", &servfail),
        ("timeout", &stall),
        ("tcp_reset", &reset),
        ("stale", &stale),
    ] {
        figures.extend(seen.figures(phase));
        if let Some((_, bound)) = MAX_MS.iter().find(|(p, _)| *p == phase) {
            figures.push((format!("{phase}_max_ms.max"), bound.to_string()));
        }
    }
    figures.push(("resets_sent".into(), a.tcp().to_string()));
    let figures: Vec<(&str, String)> = figures
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    report("upstream-faults", &figures);

    let (_, log) = s.stop();
    let all = |seen: &Seen, octet: u8, what: &str| {
        assert_eq!(
            seen.unanswered, 0,
            "{what}: unanswered {seen:?}\nlog:\n{log}"
        );
        assert_eq!(
            seen.noerror, seen.sent,
            "{what}: not all NOERROR {seen:?}\nlog:\n{log}"
        );
        assert_eq!(
            seen.from(octet),
            seen.sent,
            "{what}: answered by {:?}",
            seen.by_octet
        );
    };
    all(&healthy, 1, "healthy");
    all(&warm, 1, "warming");
    all(&servfail, 2, "first upstream SERVFAIL");
    all(&stall, 2, "first upstream timing out");
    all(&reset, 2, "first upstream resetting TCP");
    all(&stale, 1, "both upstreams stalled, stale entries");
    assert_eq!(stale.last_ttl, Some(0), "stale answers carry TTL 0");
    for (phase, seen) in [
        ("servfail", &servfail),
        ("tcp_reset", &reset),
        ("timeout", &stall),
        ("stale", &stale),
    ] {
        let bound = MAX_MS
            .iter()
            .find(|(p, _)| *p == phase)
            .map_or(0.0, |(_, b)| *b);
        assert!(
            seen.max_ms() < bound,
            "{phase}: max {} ms, bound {bound} ms",
            seen.max_ms()
        );
    }
    assert!(stall.pct(0.5) < 100.0, "timeout: p50 {} ms", stall.pct(0.5));
    assert!(a.tcp() > 0, "the first upstream saw no TCP query to reset");
}

/// How soon after the apiserver's return its changes must be served.
const CAUGHT_UP: Duration = Duration::from_secs(5);

const OUTAGE_COREFILE: &str = ".:{PORT} {
    bind 127.0.0.1
    kubernetes cluster.local in-addr.arpa {
        kubeconfig KUBECONFIG
    }
}
";

/// What `name`/`qtype` answers over UDP (2 s): the rcode and the answer
/// records' data, sorted, or the failure.
fn short(port: u16, name: &str, qtype: &str) -> String {
    use clusterdns_test_support::{Outcome, Query, Transport, exchange};
    let msg = Query::new(name, qtype).to_wire().expect("query");
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    match exchange(addr, &msg, Transport::Udp, Duration::from_secs(2)) {
        Outcome::Response(r) => {
            let mut data: Vec<String> = r.answer.iter().map(|rr| rr.rdata.clone()).collect();
            data.sort();
            format!("{} {}", r.rcode_name(), data.join(" "))
        }
        other => other.summary(),
    }
}

/// (a) The apiserver down under load: every known name keeps its answer
/// (dnsperf counts none lost, none but NOERROR; a checker compares every
/// answer with the one before the outage), and once it is back, changes
/// are served within 5 s of the write.
#[test]
fn apiserver_outage_under_load_loses_no_answer_and_catches_up_within_5s() {
    let _one = one_at_a_time();
    let outage = if long() { 600 } else { 20 };
    let Some(private) = clusterdns_test_support::PrivateRig::start(&[("RIG_KCM", "0")]) else {
        return;
    };
    let rig = private.rig();
    rig.kubectl(&["create", "namespace", "outage"])
        .expect("namespace");
    rig.apply_yaml(
        &(0..20)
            .map(|i| service("outage", i, 1, 0))
            .collect::<String>(),
    )
    .expect("objects");
    let kubeconfig = rig.kubeconfig();
    let s = Server::start(&OUTAGE_COREFILE.replace("KUBECONFIG", &kubeconfig.to_string_lossy()));
    let port = s.port;
    let known: Vec<(String, &str)> = (0..20)
        .flat_map(|i| {
            [
                (format!("s{i}.outage.svc.cluster.local"), "A"),
                (format!("e0.s{i}.outage.svc.cluster.local"), "A"),
                (format!("_http._tcp.s{i}.outage.svc.cluster.local"), "SRV"),
                (
                    format!("{}.{}.128.10.in-addr.arpa", i % 250 + 1, i / 250),
                    "PTR",
                ),
            ]
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while short(port, "e0.s19.outage.svc.cluster.local", "A") != relist_answer(19, Some(0)) {
        assert!(Instant::now() < deadline, "objects not served\n");
        std::thread::sleep(Duration::from_millis(100));
    }
    let baseline: Vec<String> = known.iter().map(|(n, t)| short(port, n, t)).collect();
    assert!(
        baseline
            .iter()
            .all(|a| a.starts_with("NOERROR ") && a.len() > 8),
        "{baseline:?}"
    );

    let qfile = s.dir.path().join("queries.txt");
    let text: String = known.iter().map(|(n, t)| format!("{n} {t}\n")).collect();
    std::fs::write(&qfile, text).expect("query file");
    let perf = dnsperf(&[], "127.0.0.1", port, &qfile, outage + 4, 2000, false);
    std::thread::sleep(Duration::from_secs(2));
    rig.apiserver_stop().expect("apiserver-stop");
    let down = Instant::now();
    let mut checked = 0u64;
    let mut changed = Vec::new();
    while down.elapsed() < Duration::from_secs(outage.into()) {
        for ((n, t), want) in known.iter().zip(&baseline) {
            let got = short(port, n, t);
            checked += 1;
            if &got != want && changed.len() < 10 {
                changed.push(format!(
                    "{:?}: {n} {t}: {got:?}, want {want:?}",
                    down.elapsed()
                ));
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    rig.apiserver_start().expect("apiserver-start");
    let back = down.elapsed();
    let perf = finish(perf);

    // After the return: a new Service, a moved endpoint, a deletion.
    let wrote = Instant::now();
    rig.apply_yaml(&service("outage", 20, 1, 0))
        .expect("new service");
    rig.apply_yaml(&service("outage", 1, 1, 1))
        .expect("moved endpoint");
    rig.kubectl(&["delete", "-n", "outage", "service/s2", "endpointslice/s2-a"])
        .expect("delete");
    let writes = wrote.elapsed();
    let caught_up = loop {
        let done = short(port, "s20.outage.svc.cluster.local", "A") == "NOERROR 10.96.100.21"
            && short(port, "e0.s1.outage.svc.cluster.local", "A") == relist_answer(1, Some(1))
            && short(port, "s2.outage.svc.cluster.local", "A") == "NXDOMAIN ";
        if done {
            break wrote.elapsed();
        }
        if wrote.elapsed() > Duration::from_secs(120) {
            break wrote.elapsed();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // The time counts from the last write.
    let caught_up = caught_up.saturating_sub(writes);
    report(
        "apiserver-outage",
        &[
            ("outage_s", format!("{:.0}", back.as_secs_f64())),
            ("known_names", known.len().to_string()),
            ("dnsperf_sent", perf.sent.to_string()),
            ("dnsperf_lost", perf.lost.to_string()),
            ("checked", checked.to_string()),
            ("changed", changed.len().to_string()),
            ("caught_up_s", format!("{:.2}", caught_up.as_secs_f64())),
            ("caught_up_s.max", CAUGHT_UP.as_secs().to_string()),
        ],
    );
    let (_, log) = s.stop();
    assert_eq!(perf.lost, 0, "lost during the outage:\n{}", perf.text);
    assert!(perf.only("NOERROR") && perf.sent > 1000, "{}", perf.text);
    assert!(
        changed.is_empty(),
        "answers changed during the outage:\n{}",
        changed.join("\n")
    );
    assert!(checked > 100, "{checked} checks");
    assert!(
        caught_up <= CAUGHT_UP,
        "changes after the apiserver's return served after {caught_up:?}\nlog:\n{log}"
    );
}

/// Service `i` of namespace `ns` with `pods` endpoints (each one a Pod's
/// address and hostname `e{j}`, at most 16); generation `g` moves the
/// addresses.
fn service(ns: &str, i: u32, pods: u32, g: u32) -> String {
    let (hi, lo) = (i / 250, i % 250 + 1);
    let mut y = format!(
        "---
apiVersion: v1
kind: Service
metadata: {{name: s{i}, namespace: {ns}}}
spec:
  clusterIP: 10.96.{c}.{lo}
  ports: [{{name: http, port: 80, protocol: TCP}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: s{i}-a
  namespace: {ns}
  labels: {{kubernetes.io/service-name: s{i}}}
addressType: IPv4
ports: [{{name: http, port: 8080, protocol: TCP}}]
endpoints:
",
        c = 100 + hi,
    );
    for j in 0..pods {
        y.push_str(&format!(
            "- addresses: [10.{a}.{b}.{d}]\n  hostname: e{j}\n  conditions: {{ready: true}}\n  targetRef: {{kind: Pod, namespace: {ns}, name: s{i}-{j}}}\n",
            a = 128 + g * 16 + j,
            b = i / 250,
            d = i % 250 + 1,
        ));
    }
    y
}

/// The relist scenario's Corefile: Services and, with `pods verified`,
/// every Pod watched as well.
const RELIST_COREFILE: &str = ".:{PORT} {
    bind 127.0.0.1
    kubernetes cluster.local in-addr.arpa {
        kubeconfig KUBECONFIG
        pods verified
    }
}
";

/// Sends `requests` (`METHOD PATH [JSON]` lines) to the rig's API server in
/// parallel, with the loader the benchmark creates its data set with
/// (`scripts/bench.d/k8s.py`; kubectl, one object after the other, took
/// 17 minutes for the long form's objects). Its arguments after `k8s.py`
/// are `args`; the seconds it took.
fn api_load(rig: &clusterdns_test_support::Rig, args: &[&str], requests: &[String]) -> f64 {
    use std::io::Write;
    let script = clusterdns_test_support::workspace_root().join("scripts/bench.d/k8s.py");
    let kubeconfig = rig.kubeconfig();
    let mut child = std::process::Command::new("python3")
        .arg(&script)
        .arg(args[0])
        .arg(&kubeconfig)
        .args(&args[1..])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 scripts/bench.d/k8s.py");
    let mut stdin = child.stdin.take().expect("stdin");
    for r in requests {
        writeln!(stdin, "{r}").expect("write a request");
    }
    drop(stdin);
    let out = child.wait_with_output().expect("k8s.py");
    assert!(out.status.success(), "k8s.py {args:?} failed");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0.0)
}

/// The creation of Service `i` of namespace `relist` with `pods` endpoints
/// (each one a Pod's address and hostname `e{j}`, at most 16): a Service
/// and its EndpointSlice, as request lines for [`api_load`].
fn service_requests(i: u32, pods: u32) -> [String; 2] {
    let (hi, lo) = (i / 250, i % 250 + 1);
    let svc = serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": format!("s{i}"), "namespace": "relist"},
        "spec": {
            "clusterIP": format!("10.96.{}.{lo}", 100 + hi),
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
        },
    });
    let slice = serde_json::json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {
            "name": format!("s{i}-a"), "namespace": "relist",
            "labels": {"kubernetes.io/service-name": format!("s{i}")},
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints(i, pods, 0),
    });
    [
        format!("POST /api/v1/namespaces/relist/services {svc}"),
        format!("POST {SLICES}/relist/endpointslices {slice}"),
    ]
}

const SLICES: &str = "/apis/discovery.k8s.io/v1/namespaces";

/// Service `i`'s endpoints at generation `g` (which moves the addresses).
fn endpoints(i: u32, pods: u32, g: u32) -> serde_json::Value {
    (0..pods)
        .map(|j| {
            serde_json::json!({
                "addresses": [format!("10.{}.{}.{}", 128 + g * 16 + j, i / 250, i % 250 + 1)],
                "hostname": format!("e{j}"),
                "conditions": {"ready": true},
                "targetRef": {"kind": "Pod", "namespace": "relist", "name": format!("s{i}-{j}")},
            })
        })
        .collect()
}

/// The address of Service `i`'s first endpoint at generation `g`.
fn e0_addr(i: u32, g: u32) -> String {
    format!("10.{}.{}.{}", 128 + g * 16, i / 250, i % 250 + 1)
}

/// What `e0.s{i}.NS.svc.cluster.local A` answers at generation `g`
/// (`None`: deleted).
fn relist_answer(i: u32, g: Option<u32>) -> String {
    match g {
        Some(g) => format!("NOERROR {}", e0_addr(i, g)),
        None => "NXDOMAIN ".into(),
    }
}

/// Pod `j` as `k8s.py pods` makes it: its namespace and address.
fn pod(j: u32) -> (String, String) {
    (
        format!("bench-{}", j % 10),
        format!("10.{}.{}.{}", 100 + j / 62_500, j / 250 % 250, j % 250 + 1),
    )
}

/// Whether Pod `j` is deleted while the server is frozen (a tenth, spread
/// over the namespaces).
fn pod_deleted(j: u32) -> bool {
    j % 100 < 10
}

/// The Pods whose `pods verified` name is checked: every 37th.
fn pod_samples(pods: u32) -> impl Iterator<Item = u32> {
    (0..pods).step_by(37)
}

/// Polls until every Service answers as `model` says and every sampled
/// Pod's name answers (or not, once `pods_deleted`) as it should; the time
/// it took.
fn relist_converge(
    port: u16,
    model: &[Option<u32>],
    pods: u32,
    pods_deleted: bool,
    within: Duration,
) -> Duration {
    // (name, the answer it must get)
    let mut pending: Vec<(String, String)> = (0..model.len() as u32)
        .map(|i| {
            (
                format!("e0.s{i}.relist.svc.cluster.local"),
                relist_answer(i, model[i as usize]),
            )
        })
        .chain(pod_samples(pods).map(|j| {
            let (ns, ip) = pod(j);
            let want = if pods_deleted && pod_deleted(j) {
                "NXDOMAIN ".to_string()
            } else {
                format!("NOERROR {ip}")
            };
            (
                format!("{}.{ns}.pod.cluster.local", ip.replace('.', "-")),
                want,
            )
        }))
        .collect();
    let t = Instant::now();
    loop {
        pending.retain(|(name, want)| short(port, name, "A") != *want);
        let Some((name, want)) = pending.first() else {
            return t.elapsed();
        };
        assert!(
            t.elapsed() < within,
            "{} names not converged after {within:?}, e.g. {name}: {} want {want}",
            pending.len(),
            short(port, name, "A"),
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// (b) `410 Gone` relists at scale (long form: 10k Services with 10
/// endpoints each and 100k Pods under `pods verified`; short: 1k Services
/// with 5, 2k Pods; `CLUSTERDNS_RELIST_PODS=N` sets the Pods): clusterdns
/// is frozen (SIGSTOP) while a tenth of the Services are deleted, another
/// tenth move their endpoints and a tenth of the Pods are deleted; etcd is
/// compacted across an apiserver restart, so the resumed watches get 410
/// Gone and only a relist brings the changes. Peak RSS from SIGCONT until
/// converged must stay within 1.5x the steady state before.
#[test]
fn gone_410_relist_at_scale_stays_within_1_5x_steady_rss() {
    let _one = one_at_a_time();
    let (services, eps, mut pods) = if long() {
        (10_000u32, 10u32, 100_000u32)
    } else {
        (1_000, 5, 2_000)
    };
    // Fewer Pods where the API server cannot take 200,000 requests in the
    // time there is (each Pod is a create and a status patch).
    if let Some(n) = std::env::var("CLUSTERDNS_RELIST_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        pods = n;
    }
    let Some(private) = clusterdns_test_support::PrivateRig::start(&[("RIG_KCM", "0")]) else {
        return;
    };
    let rig = private.rig();
    rig.kubectl(&["create", "namespace", "relist"])
        .expect("namespace");
    let creations: Vec<String> = (0..services)
        .flat_map(|i| service_requests(i, eps))
        .collect();
    let created = api_load(rig, &["bulk"], &creations);
    let pods_s = api_load(rig, &["pods", "0", &pods.to_string()], &[]);
    let kubeconfig = rig.kubeconfig();
    let s = Server::start(&RELIST_COREFILE.replace("KUBECONFIG", &kubeconfig.to_string_lossy()));
    let (port, pid) = (s.port, s.child.id());
    let mut model: Vec<Option<u32>> = vec![Some(0); services as usize];
    let listed = relist_converge(port, &model, pods, false, Duration::from_secs(300));

    // Steady state: the median of 20 samples over 2 s, after 2 s of quiet.
    std::thread::sleep(Duration::from_secs(2));
    let mut samples: Vec<u64> = (0..20)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(100));
            torture::vmrss_kib(pid).expect("VmRSS")
        })
        .collect();
    samples.sort_unstable();
    let steady = samples[samples.len() / 2];

    let _ = std::process::Command::new("kill")
        .args(["-STOP", &pid.to_string()])
        .status();
    let tenth = services / 10;
    let mut changes: Vec<String> = Vec::new();
    for i in 0..tenth {
        changes.push(format!("DELETE /api/v1/namespaces/relist/services/s{i}"));
        changes.push(format!("DELETE {SLICES}/relist/endpointslices/s{i}-a"));
        let moved = serde_json::json!({"endpoints": endpoints(tenth + i, eps, 1)});
        changes.push(format!(
            "PATCH {SLICES}/relist/endpointslices/s{}-a {moved}",
            tenth + i
        ));
        model[i as usize] = None;
        model[(tenth + i) as usize] = Some(1);
    }
    // No kubelet confirms a Pod's end: deleted at once.
    changes.extend((0..pods).filter(|&j| pod_deleted(j)).map(|j| {
        format!(
            "DELETE /api/v1/namespaces/{}/pods/pod-{j}?gracePeriodSeconds=0",
            pod(j).0
        )
    }));
    let changed = api_load(rig, &["bulk"], &changes);
    rig.apiserver_stop().expect("apiserver-stop");
    rig.etcd_compact().expect("etcd-compact");
    rig.apiserver_start().expect("apiserver-start");

    let done = std::sync::atomic::AtomicBool::new(false);
    let ((peak, n), relisted) = std::thread::scope(|sc| {
        let sampler = sc.spawn(|| {
            let (mut peak, mut n) = (0, 0u64);
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(rss) = torture::vmrss_kib(pid) {
                    peak = peak.max(rss);
                    n += 1;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            (peak, n)
        });
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &pid.to_string()])
            .status();
        let t = relist_converge(port, &model, pods, true, Duration::from_secs(300));
        std::thread::sleep(Duration::from_secs(2));
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        (sampler.join().expect("sampler"), t)
    });
    let ratio = peak as f64 / steady as f64;
    report(
        "relist-410",
        &[
            ("services", services.to_string()),
            ("endpoints", (services * eps).to_string()),
            ("pods", pods.to_string()),
            ("create_services_s", format!("{created:.0}")),
            ("create_pods_s", format!("{pods_s:.0}")),
            ("changes", changes.len().to_string()),
            ("changes_s", format!("{changed:.0}")),
            ("first_list_s", format!("{:.1}", listed.as_secs_f64())),
            ("relist_s", format!("{:.1}", relisted.as_secs_f64())),
            ("steady_rss_kib", steady.to_string()),
            ("peak_rss_kib", peak.to_string()),
            ("ratio", format!("{ratio:.2}")),
            ("ratio.max", "1.5".to_string()),
            ("samples", n.to_string()),
        ],
    );
    let (_, log) = s.stop();
    assert!(n > 50, "too few RSS samples: {n}");
    assert!(
        peak * 2 <= steady * 3,
        "peak RSS {peak} KiB in the relist is over 1.5x the steady {steady} KiB\nlog:\n{log}"
    );
}
