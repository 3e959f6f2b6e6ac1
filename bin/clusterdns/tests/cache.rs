//! *cache* in front of *forward* (the fault upstream) and of answering
//! plugins: TTL decrement, denial and SERVFAIL caching, serve_stale,
//! prefetch, keepttl, bounded size.

mod common;
mod fault;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::{Server, lines, status};
use fault::{Fault, Mode};

fn ttl_of(dig_answer: &str) -> u32 {
    lines(dig_answer)
        .first()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no TTL in {dig_answer}"))
}

fn cached(f: &Fault, opts: &str) -> Server {
    Server::start(&format!(
        ".:{{PORT}} {{\n cache {opts}\n forward . {}\n}}\n",
        f.to()
    ))
}

#[test]
fn hits_count_down_the_ttl_and_keep_the_client_case() {
    let f = Fault::start(1);
    f.state.ttl.store(100, Ordering::SeqCst);
    let s = cached(&f, "");
    let first = s.dig(&["+noall", "+answer", "a.example"]);
    assert_eq!(ttl_of(&first), 100, "{first}");
    std::thread::sleep(Duration::from_millis(2100));
    let out = s.dig(&["A.EXAMPLE"]);
    assert!(out.contains(";A.EXAMPLE.\t\t\tIN\tA"), "{out}");
    assert!(out.contains("flags: qr aa rd ra"), "{out}");
    let second = s.dig(&["+noall", "+answer", "a.example"]);
    let ttl = ttl_of(&second);
    assert!((97..=98).contains(&ttl), "{second}");
    assert_eq!(f.queries(), 1);
}

#[test]
fn denial_and_servfail_are_cached() {
    let f = Fault::start(2);
    f.state.ttl.store(30, Ordering::SeqCst);
    f.set(Mode::Nxdomain);
    let s = cached(&f, "");
    assert_eq!(status(&s.dig(&["nx.example"])), "NXDOMAIN");
    assert_eq!(status(&s.dig(&["nx.example"])), "NXDOMAIN");
    assert_eq!(f.queries(), 1);
    f.set(Mode::Servfail);
    assert_eq!(status(&s.dig(&["sf.example"])), "SERVFAIL");
    f.set(Mode::Answer);
    // SERVFAIL is kept 5s by default.
    assert_eq!(status(&s.dig(&["sf.example"])), "SERVFAIL");
    assert_eq!(f.queries(), 2);
    let no_sf = cached(&f, "{\n servfail 0\n }");
    f.set(Mode::Servfail);
    assert_eq!(status(&no_sf.dig(&["sf2.example"])), "SERVFAIL");
    f.set(Mode::Answer);
    assert_eq!(status(&no_sf.dig(&["sf2.example"])), "NOERROR");
}

#[test]
fn serve_stale_immediate_answers_while_the_upstream_is_down() {
    let f = Fault::start(3);
    f.state.ttl.store(1, Ordering::SeqCst);
    // cache 1: entries live one second.
    let s = cached(&f, "1 {\n serve_stale\n }");
    let first = s.dig(&["+noall", "+answer", "st.example"]);
    assert_eq!(ttl_of(&first), 1, "{first}");
    f.set(Mode::Stall);
    std::thread::sleep(Duration::from_millis(2200));
    let t = Instant::now();
    let out = s.dig(&["+noall", "+answer", "st.example"]);
    assert_eq!(lines(&out), vec!["st.example. 0 IN A 192.0.2.3"], "{out}");
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    // The background refresh reached the (stalled) upstream.
    std::thread::sleep(Duration::from_millis(200));
    assert!(f.queries() >= 2, "{}", f.queries());
}

#[test]
fn serve_stale_verify_asks_upstream_first() {
    let f = Fault::start(4);
    f.state.ttl.store(1, Ordering::SeqCst);
    let s = cached(&f, "1 {\n serve_stale 1h verify\n }");
    s.dig(&["v.example"]);
    std::thread::sleep(Duration::from_millis(2200));
    // Upstream alive: a fresh answer (TTL 1), not the stale one.
    f.state.octet.store(44, Ordering::SeqCst);
    let out = s.dig(&["+noall", "+answer", "v.example"]);
    assert_eq!(lines(&out), vec!["v.example. 1 IN A 192.0.2.44"], "{out}");
    // Upstream failing: after the upstream deadline, the stale answer.
    f.set(Mode::Servfail);
    std::thread::sleep(Duration::from_millis(2200));
    let out = s.dig(&["+time=8", "+noall", "+answer", "v.example"]);
    assert_eq!(lines(&out), vec!["v.example. 0 IN A 192.0.2.44"], "{out}");
}

#[test]
fn prefetch_refreshes_popular_entries_before_they_expire() {
    let f = Fault::start(5);
    f.state.ttl.store(10, Ordering::SeqCst);
    let s = cached(&f, "10 {\n prefetch 1 1m 90%\n }");
    s.dig(&["p.example"]);
    assert_eq!(f.queries(), 1);
    std::thread::sleep(Duration::from_millis(1200));
    // TTL 9 ≤ ceil(90% × 10): this hit triggers a refresh.
    s.dig(&["p.example"]);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(f.queries(), 2);
    let out = s.dig(&["+noall", "+answer", "p.example"]);
    assert_eq!(ttl_of(&out), 10, "refreshed entry: {out}");
}

#[test]
fn keepttl_keeps_the_stored_ttl() {
    let f = Fault::start(6);
    f.state.ttl.store(100, Ordering::SeqCst);
    let s = cached(&f, "{\n keepttl\n }");
    s.dig(&["k.example"]);
    std::thread::sleep(Duration::from_millis(2100));
    assert_eq!(ttl_of(&s.dig(&["+noall", "+answer", "k.example"])), 100);
}

#[test]
fn disable_success_skips_positive_answers() {
    let f = Fault::start(7);
    let s = cached(&f, "{\n disable success\n }");
    s.dig(&["d.example"]);
    s.dig(&["d.example"]);
    assert_eq!(f.queries(), 2);
}

#[test]
fn answers_of_local_plugins_are_cached_too() {
    // whoami reports the client's port: a cached reply shows the first
    // client's port to the second.
    let s = Server::start(".:{PORT} {\n cache\n whoami\n}\n");
    let a = s.dig(&["+noall", "+additional", "w.example"]);
    let b = s.dig(&["+noall", "+additional", "w.example"]);
    let srv = |o: &str| {
        lines(o)
            .into_iter()
            .find(|l| l.contains("SRV"))
            .map(|l| l.split(' ').skip(4).collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    };
    assert!(!srv(&a).is_empty(), "{a}");
    assert_eq!(srv(&a), srv(&b));
}

#[test]
fn a_flood_of_unique_names_keeps_the_process_bounded() {
    let f = Fault::start(8);
    let s = cached(&f, "{\n success 1024\n denial 1024\n }");
    let rss = |pid: u32| -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    sock.set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    let mut buf = [0u8; 2048];
    let mut flood = |from: u32, to: u32| {
        for i in from..to {
            let q = fault::query(&format!("n{i}.flood.example"), i as u16);
            sock.send_to(&q, ("127.0.0.1", s.port)).expect("send");
            let _ = sock.recv(&mut buf);
        }
    };
    flood(0, 3000);
    let after_first = rss(s.child.id());
    flood(3000, 9000);
    let after_second = rss(s.child.id());
    // 1024 entries of ~60 bytes: twice as many names must not grow the
    // process by more than a few MB (allocator noise).
    assert!(
        after_second < after_first + 4096,
        "RSS grew from {after_first} kB to {after_second} kB"
    );
    // Still answering.
    assert_eq!(status(&s.dig(&["n1.flood.example"])), "NOERROR");
}

#[test]
fn same_ttls_flags_and_metrics_as_the_reference_coredns() {
    let Some(cd) = fault::reference_coredns() else {
        eprintln!("skipped: reference CoreDNS not built");
        return;
    };
    let f = Fault::start(30);
    f.state.ttl.store(100, Ordering::SeqCst);
    let (mp_us, mp_them) = (common::free_port(), common::free_port());
    let corefile = |mp: u16| {
        format!(
            ".:{{PORT}} {{\n prometheus 127.0.0.1:{mp}\n cache 60 {{\n denial 100 40\n }}\n forward . {}\n}}\n",
            f.to()
        )
    };
    let us = Server::start(&corefile(mp_us));
    let them = fault::start_binary(&cd, &corefile(mp_them));
    let both = |args: &[&str]| {
        std::thread::scope(|s| {
            let a = s.spawn(|| fault::normalize(&us.dig(args)));
            let b = s.spawn(|| fault::normalize(&them.dig(args)));
            (a.join().expect("join"), b.join().expect("join"))
        })
    };
    let steps: &[(Mode, &[&str], u64)] = &[
        (Mode::Answer, &["a.example"], 0),
        (Mode::Answer, &["a.example"], 2100),
        (Mode::Answer, &["+dnssec", "a.example"], 0),
        (Mode::Nxdomain, &["nx.example"], 0),
        (Mode::Answer, &["nx.example"], 1100),
        (Mode::Servfail, &["sf.example"], 0),
        (Mode::Answer, &["sf.example"], 0),
        (Mode::Truncate, &["+ignore", "tc.example"], 0),
        (Mode::Answer, &["+ignore", "tc.example"], 0),
    ];
    for (mode, args, wait) in steps {
        std::thread::sleep(Duration::from_millis(*wait));
        f.set(*mode);
        let (a, b) = both(args);
        assert!(
            a.iter().any(|l| l.contains("status: ")),
            "{mode:?} {args:?}: no reply: {a:?}"
        );
        assert_eq!(a, b, "{mode:?} {args:?} after {wait}ms");
    }
    // The same coredns_cache_* / coredns_proxy_* / coredns_forward_*
    // series (names and labels; values of the counters too).
    let series = |mp: u16, port: u16| -> Vec<String> {
        let out = std::process::Command::new("curl")
            .args(["-s", &format!("http://127.0.0.1:{mp}/metrics")])
            .output()
            .expect("curl");
        let text = String::from_utf8_lossy(&out.stdout).replace(&format!(":{port}\""), ":PORT\"");
        let mut v: Vec<String> = text
            .lines()
            .filter(|l| {
                (l.starts_with("coredns_cache_")
                    || l.starts_with("coredns_proxy_")
                    || l.starts_with("coredns_forward_"))
                    && !l.contains("_bucket")
                    && !l.contains("_sum")
            })
            .map(str::to_string)
            .collect();
        v.sort();
        v
    };
    let (a, b) = (series(mp_us, us.port), series(mp_them, them.port));
    assert!(
        a.iter().any(|l| l.starts_with("coredns_cache_hits_total")),
        "{a:?}"
    );
    assert_eq!(a, b);
}

#[test]
fn answers_of_hosts_are_cached_and_age() {
    let s =
        Server::start(".:{PORT} {\n cache\n hosts {\n 192.0.2.80 web.example\n ttl 100\n }\n}\n");
    let first = s.dig(&["+noall", "+answer", "web.example"]);
    assert_eq!(
        lines(&first),
        vec!["web.example. 100 IN A 192.0.2.80"],
        "{first}"
    );
    std::thread::sleep(Duration::from_millis(1100));
    // hosts itself always says 100: 99 comes from the cache.
    let second = s.dig(&["+noall", "+answer", "web.example"]);
    assert_eq!(
        lines(&second),
        vec!["web.example. 99 IN A 192.0.2.80"],
        "{second}"
    );
}
