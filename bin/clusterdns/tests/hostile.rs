//! Hostile clients, upstreams and log pipes (issue 13, the probes in
//! ../shared/probes in short form): a blocked stdout, TCP connections
//! that never read or never speak, a stalled upstream under a flood of
//! unique names, pooled upstream sockets after a burst, a UDP query larger
//! than the server reads.
// Test helpers outside #[test] functions fail loudly by design.
#![allow(clippy::unwrap_used)]

mod common;
mod fault;

use std::io::{Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::os::fd::OwnedFd;
use std::process::Command;
use std::time::{Duration, Instant};

use common::torture;
use common::torture::{Sent, heavy, raise_nofile, rss_kib, send_some, tcp_socket};
use common::{Server, frame, free_port};
use fault::{Fault, Mode};

/// Threads spinning on every core until dropped: the test machine as
/// loaded as a CI runner doing other work.
struct Busy {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Busy {
    fn start() -> Busy {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        // Two per core: a runner busy with other work as well.
        let threads = (0..2 * cores)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        Busy { stop, threads }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A query for `name` A with this ID (RD set), no EDNS.
fn query(name: &str, id: u16) -> Vec<u8> {
    fault::query(name, id)
}

/// Sockets `pid` has open.
fn sockets(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
                })
                .count()
        })
        .unwrap_or(0)
}

/// `/metrics` of a prometheus listener.
fn metrics(port: u16) -> String {
    let out = Command::new("curl")
        .args(["-s", "-m", "3", &format!("http://127.0.0.1:{port}/metrics")])
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The value of an unlabelled sample in a metrics page.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} "))?.trim().parse().ok())
}

/// dnsperf against `port` with the queries in `names`, `qps` a second
/// for `secs` seconds, each waited for `timeout` seconds, and `extra`
/// arguments; its socket buffers 4 MiB of replies (a loaded test machine
/// is bursty). Returns its `Queries sent:` and `Queries lost:` counts.
fn dnsperf(
    port: u16,
    names: &std::path::Path,
    secs: u32,
    qps: u32,
    timeout: u32,
    extra: &[&str],
) -> (u64, u64, String) {
    let out = Command::new("dnsperf")
        .args(["-s", "127.0.0.1", "-b", "4096"])
        .args(["-p", &port.to_string()])
        .arg("-d")
        .arg(names)
        .args(["-l", &secs.to_string(), "-Q", &qps.to_string()])
        .args(["-t", &timeout.to_string()])
        .args(extra)
        .output()
        .expect("run dnsperf (apt-get install dnsperf)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let count = |what: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(what))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    (count("Queries sent:"), count("Queries lost:"), text)
}

#[test]
fn a_blocked_stdout_does_not_stop_answers() {
    let _heavy = heavy();
    let mp = free_port();
    // Nobody reads the server's stdout pipe while the load runs.
    let mut s = Server::start(&format!(
        ".:{{PORT}} {{\n bind 127.0.0.1\n prometheus 127.0.0.1:{mp}\n log\n hosts {{\n  192.0.2.10 web.test\n }}\n}}\n"
    ));
    let names = s.dir.path().join("names");
    std::fs::write(&names, "web.test A\n".repeat(1000)).unwrap();
    let (sent, lost, out) = dnsperf(s.port, &names, 5, 5000, 2, &["-c", "2"]);
    assert!(sent > 10_000, "dnsperf sent too little:\n{out}");
    assert!(
        lost * 100 < sent,
        "more than 1% lost with stdout blocked:\n{out}"
    );
    let dropped = sample(&metrics(mp), "coredns_log_lines_dropped_total").unwrap_or(0.0);
    assert!(dropped > 0.0, "the pipe never filled: nothing dropped");
    // Reading again lets the writer go on; it says how many it dropped.
    let mut stdout = s.child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 16];
        let mut tail = String::new();
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 {
                break;
            }
            tail.push_str(&String::from_utf8_lossy(&buf[..n]));
            if let Some(l) = tail.lines().find(|l| l.contains("log lines dropped")) {
                let _ = tx.send(l.to_string());
                return;
            }
            let keep = tail.len().saturating_sub(200);
            tail.drain(..keep);
        }
    });
    // One more query gets the writer a line to write after the backlog.
    s.dig(&["web.test", "+short"]);
    let line = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("a line saying how many log lines were dropped");
    assert!(
        line.starts_with("[WARNING] ") && line.contains(" log lines dropped"),
        "{line}"
    );
}

/// A new TCP client: connect, one query, the reply's length; how long
/// it took, or `None` past `limit`.
fn tcp_probe(port: u16, limit: Duration) -> Option<Duration> {
    let t = Instant::now();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut c = TcpStream::connect_timeout(&addr, limit).ok()?;
    c.set_read_timeout(Some(limit.checked_sub(t.elapsed())?))
        .ok()?;
    c.write_all(&frame(&query("web.test", 0x2222))).ok()?;
    let mut len = [0u8; 2];
    c.read_exact(&mut len).ok()?;
    let took = t.elapsed();
    (took < limit).then_some(took)
}

/// A UDP query: how long the answer took, or `None` past `limit`.
fn udp_probe(port: u16, limit: Duration) -> Option<Duration> {
    fault::exchange(port, &query("web.test", 0x1111), limit)?;
    Some(Duration::ZERO)
}

#[test]
fn stalled_readers_and_idle_connections_do_not_lock_tcp_out() {
    let _heavy = heavy();
    let nofile = raise_nofile();
    assert!(
        nofile >= 8192,
        "open-file limit {nofile} too low for this test"
    );
    let big: Vec<String> = (1..=200)
        .map(|i| format!("10.0.{}.{} big.test", i / 250, i % 250 + 1))
        .collect();
    let s = Server::start(&format!(
        ".:{{PORT}} {{\n bind 127.0.0.1\n hosts {{\n  192.0.2.10 web.test\n  {}\n }}\n}}\n",
        big.join("\n  ")
    ));
    let port = s.port;
    // 1,100 connections pipelining queries for a 200-record answer and
    // never reading a reply.
    let blob: Vec<u8> = (0..200u16)
        .flat_map(|i| frame(&query("big.test", i)))
        .collect();
    let mut stalled: Vec<(OwnedFd, usize)> = (0..1100)
        .filter_map(|_| tcp_socket(port, Some(1024)))
        .map(|fd| (fd, 0))
        .collect();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(3) {
        for (fd, done) in &mut stalled {
            if let Sent::Bytes(n) = send_some(fd, &blob[*done..]) {
                *done += n;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // Then 3,000 connections that say nothing.
    let idle: Vec<OwnedFd> = (0..3000).filter_map(|_| tcp_socket(port, None)).collect();
    assert_eq!(idle.len(), 3000);
    std::thread::sleep(Duration::from_millis(500));
    let limit = Duration::from_secs(1);
    for round in 0..5 {
        let tcp = tcp_probe(port, limit);
        assert!(
            tcp.is_some(),
            "round {round}: a new TCP client waited over 1s (a second one: {:?})",
            tcp_probe(port, Duration::from_secs(5))
        );
        assert!(
            udp_probe(port, limit).is_some(),
            "round {round}: UDP waited over 1s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(stalled);
    drop(idle);
}

#[test]
fn a_stalled_upstream_costs_bounded_memory() {
    let _heavy = heavy();
    raise_nofile();
    // An upstream that reads every query and never answers.
    let up = UdpSocket::bind("127.0.0.1:0").unwrap();
    let upstream = up.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while up.recv_from(&mut buf).is_ok() {}
    });
    let mp = free_port();
    let s = Server::start(&format!(
        ".:{{PORT}} {{\n bind 127.0.0.1\n prometheus 127.0.0.1:{mp}\n forward . {upstream}\n}}\n"
    ));
    let names = s.dir.path().join("names");
    let list: String = (0..30_000).map(|i| format!("n{i}.example A\n")).collect();
    std::fs::write(&names, list).unwrap();
    let pid = s.child.id();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watch = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut peak = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(rss_kib(pid));
                std::thread::sleep(Duration::from_millis(100));
            }
            peak
        })
    };
    // 2,000 unique names a second for 8 s while two threads per core
    // spin; each query is answered: SERVFAIL at forward's deadline (5 s,
    // or 2 s once the upstream counts as down), or REFUSED past the
    // in-flight bound. How late the answers go out depends on the CPU the
    // spinning threads (and whatever else runs on the machine) leave the
    // server, so no timing is asserted here: a debug build falls seconds
    // behind on some runs and not on others (RELIABILITY.md,
    // stalled_upstream; the torture scenario, unloaded, checks the
    // deadlines). What the server guarantees whatever its share of the
    // CPU: every query sent is answered unless the kernel dropped it for a
    // full buffer, and memory stays bounded.
    let busy = Busy::start();
    let dropped_before = torture::udp_rcvbuf_errors();
    let (sent, lost, out) = dnsperf(s.port, &names, 8, 2000, 10, &["-q", "30000", "-c", "1"]);
    drop(busy);
    assert!(sent > 13_000, "dnsperf sent too little:\n{out}");
    // What dnsperf gave up on (answered after its 10 s wait, or never)
    // the server may still be answering: wait until it answered them all
    // (it counts a query, in requests_total as in responses_total, as it
    // answers). The bound only keeps a broken server from hanging the test.
    let deadline = Instant::now() + Duration::from_secs(120);
    let (answered, dropped, page) = loop {
        let page = torture::scrape(mp);
        let answered = torture::metric_sum(&page, "coredns_dns_responses_total", "").unwrap_or(0.0);
        let dropped = torture::udp_rcvbuf_errors() - dropped_before;
        if answered + dropped as f64 >= sent as f64 || Instant::now() > deadline {
            break (answered, dropped, page);
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let peak = watch.join().unwrap();
    eprintln!(
        "stalled upstream on busy cores: {sent} sent, {lost} not answered within dnsperf's 10 s, \
         {dropped} dropped by the kernel, {} of {answered} finished within 8.192 s",
        torture::finished_within(&page, "8.192"),
    );
    assert!(
        answered + dropped as f64 >= sent as f64,
        "{sent} queries sent, {answered} answered, {dropped} dropped by the kernel"
    );
    let counted = torture::metric_sum(&page, "coredns_dns_requests_total", "");
    assert_eq!(
        counted,
        Some(answered),
        "requests and responses counted alike"
    );
    let refused = torture::metric_sum(&page, "coredns_dns_responses_total", "rcode=\"REFUSED\"");
    let servfail = torture::metric_sum(&page, "coredns_dns_responses_total", "rcode=\"SERVFAIL\"");
    assert_eq!(
        refused.unwrap_or(0.0) + servfail.unwrap_or(0.0),
        answered,
        "only SERVFAIL and REFUSED for a silent upstream"
    );
    assert!(
        peak <= 150 * 1024,
        "peak RSS {} MiB over the 150 MiB bound",
        peak / 1024
    );
}

#[test]
fn pooled_upstream_sockets_expire_without_traffic() {
    // Its timings would suffer from the stalled upstream test's spinning.
    let _heavy = heavy();
    raise_nofile();
    let f = Fault::start(31);
    f.state
        .delay_ms
        .store(800, std::sync::atomic::Ordering::SeqCst);
    f.set(Mode::Slow);
    let s = Server::start(&format!(
        ".:{{PORT}} {{\n bind 127.0.0.1\n forward . {} {{\n  expire 2s\n }}\n}}\n",
        f.to()
    ));
    let pid = s.child.id();
    let before = sockets(pid);
    // A burst of 200 distinct queries in flight at once.
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.set_read_timeout(Some(Duration::from_secs(4))).unwrap();
    for i in 0..200u16 {
        c.send_to(&query(&format!("b{i}.example"), i), ("127.0.0.1", s.port))
            .unwrap();
    }
    let mut buf = [0u8; 512];
    let mut got = 0;
    while got < 200 && c.recv_from(&mut buf).is_ok() {
        got += 1;
    }
    assert_eq!(got, 200, "every query of the burst answered");
    let last = Instant::now();
    let during = sockets(pid);
    assert!(
        during >= before + 100,
        "the burst opened {} sockets: too few to tell",
        during - before
    );
    // expire 2s, checked twice per expire: gone within 3 s of last use.
    let handful = before + 4;
    while sockets(pid) > handful && last.elapsed() < Duration::from_secs(4) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let after = sockets(pid);
    assert!(
        after <= handful,
        "{after} sockets open {:?} after the last query (before the burst: {before})",
        last.elapsed()
    );
}

/// A 4.4 KB query: `web.test A` with an EDNS padding option that makes
/// the message longer than the 4,096 bytes the server reads.
fn padded_query(id: u16, pad: usize) -> Vec<u8> {
    let mut q = query("web.test", id);
    q[11] = 1; // ARCOUNT
    q.extend_from_slice(&[0, 0, 41, 0x10, 0, 0, 0, 0, 0]);
    q.extend_from_slice(&((pad + 4) as u16).to_be_bytes());
    q.extend_from_slice(&[0, 12]);
    q.extend_from_slice(&(pad as u16).to_be_bytes());
    q.resize(q.len() + pad, 0);
    q
}

#[test]
fn large_udp_queries_are_answered() {
    const COREFILE: &str = ".:{PORT} {\n bind 127.0.0.1\n hosts {\n  192.0.2.10 web.test\n }\n}\n";
    let s = Server::start(COREFILE);
    let padded = padded_query(0x4242, 4400);
    // A valid question followed by 4,400 bytes beyond the counted records.
    let mut trailing = query("web.test", 0x4343);
    trailing.resize(trailing.len() + 4400, 0);
    assert!(padded.len() > 4400 && trailing.len() > 4400);
    let rcode = |port: u16, q: &[u8]| {
        let r = fault::exchange(port, q, Duration::from_secs(2))?;
        assert_eq!(r[..2], q[..2], "the reply carries the query's ID");
        Some(r[3] & 0x0f)
    };
    // The message does not end within what is read: FORMERR. It does:
    // answered.
    assert_eq!(rcode(s.port, &padded), Some(1), "FORMERR");
    assert_eq!(rcode(s.port, &trailing), Some(0), "NOERROR");
    if let Some(bin) = fault::reference_coredns() {
        let c = fault::start_binary(&bin, COREFILE);
        assert_eq!(rcode(c.port, &padded), Some(1), "CoreDNS: FORMERR");
        assert_eq!(rcode(c.port, &trailing), Some(0), "CoreDNS: NOERROR");
    }
}
