//! *forward* against real upstreams on loopback: unbound, dnsmasq, a
//! second clusterdns and the programmable fault upstream.

mod common;
mod fault;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Server, config_error, dig, free_port, lines, status};
use fault::{Fault, Mode};

/// A child process killed on drop.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_answering(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if !status(&dig(port, &["+time=1", "example.org"])).is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("upstream on {port} did not come up");
}

/// Starts Unbound in `dir` with `listen` lines (interface, ports, TLS)
/// and the zone `example.org` holding `data` records.
fn start_unbound(dir: &std::path::Path, listen: &str, data: &[&str]) -> Daemon {
    let mut conf = format!(
        "server:\n{listen}    do-daemonize: no\n    use-syslog: no\n    logfile: \"\"\n    username: \"\"\n    chroot: \"\"\n    directory: \"{}\"\n    pidfile: \"\"\n    do-ip6: no\n    access-control: 127.0.0.0/8 allow\n    local-zone: \"example.org.\" static\n    local-data: \"example.org. 300 IN SOA ns.example.org. h.example.org. 1 2 3 4 60\"\n",
        dir.display()
    );
    for d in data {
        conf.push_str(&format!("    local-data: \"{d}\"\n"));
    }
    conf.push_str("remote-control:\n    control-enable: no\n");
    let path = dir.join("unbound.conf");
    std::fs::write(&path, conf).expect("write unbound.conf");
    Daemon(
        Command::new("unbound")
            .arg("-d")
            .arg("-c")
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start unbound"),
    )
}

/// Unbound with local data on a free port.
fn unbound(dir: &std::path::Path) -> (Daemon, u16) {
    let port = free_port();
    let d = start_unbound(
        dir,
        &format!("    interface: 127.0.0.1\n    port: {port}\n"),
        &["www.example.org. 30 IN A 192.0.2.2"],
    );
    wait_answering(port);
    (d, port)
}

#[test]
fn forwards_to_unbound_restoring_id_and_case() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_u, uport) = unbound(dir.path());
    let s = Server::start(&format!(
        ".:{{PORT}} {{\n forward . 127.0.0.1:{uport}\n}}\n"
    ));
    let out = s.dig(&["WwW.Example.ORG", "A"]);
    assert_eq!(status(&out), "NOERROR", "{out}");
    assert!(out.contains(";WwW.Example.ORG.\t\tIN\tA"), "{out}");
    assert!(out.contains("192.0.2.2"), "{out}");
    assert!(!out.contains("ID mismatch"), "{out}");
    let nx = s.dig(&["nope.example.org", "A"]);
    assert_eq!(status(&nx), "NXDOMAIN", "{nx}");
    // Over TCP as well.
    let tcp = s.dig(&["+tcp", "www.example.org"]);
    assert!(tcp.contains("192.0.2.2"), "{tcp}");
}

#[test]
fn forwards_to_dnsmasq() {
    let port = free_port();
    let child = Command::new("dnsmasq")
        .args([
            "-k",
            "--conf-file=/dev/null",
            "--no-resolv",
            "--no-hosts",
            "--bind-interfaces",
            "--listen-address=127.0.0.1",
            "--user=root",
            "--pid-file=",
            &format!("--port={port}"),
            "--host-record=svc.test,192.0.2.77",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start dnsmasq");
    let _d = Daemon(child);
    wait_answering(port);
    let s = Server::start(&format!(".:{{PORT}} {{\n forward . 127.0.0.1:{port}\n}}\n"));
    let out = s.dig(&["+noall", "+answer", "svc.test"]);
    assert_eq!(lines(&out), vec!["svc.test. 0 IN A 192.0.2.77"], "{out}");
}

#[test]
fn forwards_to_a_second_clusterdns() {
    let inner = Server::start(".:{PORT} {\n whoami\n}\n");
    let outer = Server::start(&format!(
        ".:{{PORT}} {{\n forward . 127.0.0.1:{} {{\n force_tcp\n }}\n}}\n",
        inner.port
    ));
    let out = outer.dig(&["+noall", "+additional", "who.example"]);
    // whoami saw the forwarder's TCP connection, not dig.
    assert!(out.contains("_tcp.who.example."), "{out}");
    assert!(out.contains("127.0.0.1"), "{out}");
}

#[test]
fn every_upstream_failing_is_servfail_within_the_deadline() {
    let f = Fault::start(1);
    f.set(Mode::Stall);
    let s = Server::start(&format!(".:{{PORT}} {{\n forward . {}\n}}\n", f.to()));
    let t = Instant::now();
    let out = s.dig(&["+time=10", "a.example"]);
    let took = t.elapsed();
    assert_eq!(status(&out), "SERVFAIL", "{out}");
    // Two attempts (max_connect_attempts = 2 × upstreams) of 2s each.
    assert!(
        took >= Duration::from_millis(3500) && took < Duration::from_secs(6),
        "{took:?}"
    );
}

#[test]
fn failover_and_health_check_recovery() {
    let bad = Fault::start(1);
    let good = Fault::start(2);
    bad.set(Mode::Stall);
    let s = Server::start(&format!(
        ".:{{PORT}} {{\n forward . {} {} {{\n policy sequential\n }}\n}}\n",
        bad.to(),
        good.to()
    ));
    // The first query waits for the stalled upstream, then fails over.
    let t = Instant::now();
    let out = s.dig(&["+time=8", "+noall", "+answer", "a.example"]);
    assert_eq!(lines(&out), vec!["a.example. 300 IN A 192.0.2.2"], "{out}");
    assert!(t.elapsed() >= Duration::from_secs(2), "{:?}", t.elapsed());
    // Health checks (`. IN NS` every 0.5s, 1s timeout) mark it down
    // after three failures; then queries skip it.
    std::thread::sleep(Duration::from_secs(6));
    assert!(bad.state.ns_root.load(std::sync::atomic::Ordering::SeqCst) >= 3);
    let t = Instant::now();
    let out = s.dig(&["+noall", "+answer", "b.example"]);
    assert_eq!(lines(&out), vec!["b.example. 300 IN A 192.0.2.2"], "{out}");
    assert!(
        t.elapsed() < Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );
    // It recovers: the next health check succeeds and sequential order
    // prefers it again.
    bad.set(Mode::Answer);
    std::thread::sleep(Duration::from_secs(2));
    let out = s.dig(&["+noall", "+answer", "c.example"]);
    assert_eq!(lines(&out), vec!["c.example. 300 IN A 192.0.2.1"], "{out}");
}

#[test]
fn truncated_reply_passes_through_or_is_retried_over_tcp_with_prefer_udp() {
    let f = Fault::start(3);
    f.set(Mode::Truncate);
    let plain = Server::start(&format!(".:{{PORT}} {{\n forward . {}\n}}\n", f.to()));
    let out = plain.dig(&["+ignore", "t.example"]);
    assert!(out.contains("flags: qr tc"), "{out}");
    assert_eq!(f.tcp(), 0);
    let prefer = Server::start(&format!(
        ".:{{PORT}} {{\n forward . {} {{\n prefer_udp\n }}\n}}\n",
        f.to()
    ));
    let out = prefer.dig(&["+ignore", "+noall", "+answer", "+comments", "t.example"]);
    assert!(!out.contains(" tc"), "{out}");
    assert!(out.contains("192.0.2.3"), "{out}");
    assert_eq!(f.tcp(), 1);
}

#[test]
fn force_tcp_and_pooled_connections_closed_by_the_upstream() {
    let f = Fault::start(4);
    f.state
        .one_shot_tcp
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let s = Server::start(&format!(
        ".:{{PORT}} {{\n forward . {} {{\n force_tcp\n }}\n}}\n",
        f.to()
    ));
    for i in 0..5 {
        let out = s.dig(&["+noall", "+answer", &format!("n{i}.example")]);
        assert!(out.contains("192.0.2.4"), "query {i}: {out}");
    }
    assert_eq!(f.udp(), 0);
    assert!(f.tcp() >= 5);
}

#[test]
fn except_names_go_to_the_next_plugin() {
    let f = Fault::start(5);
    let s = Server::start(&format!(
        ".:{{PORT}} {{\n forward . {} {{\n except internal.example\n }}\n}}\n",
        f.to()
    ));
    let out = s.dig(&["x.internal.example"]);
    assert_eq!(status(&out), "SERVFAIL", "{out}");
    let out = s.dig(&["x.other.example"]);
    assert_eq!(status(&out), "NOERROR", "{out}");
    assert_eq!(f.queries(), 1);
}

#[test]
fn next_hands_listed_rcodes_to_the_next_forward() {
    let first = Fault::start(6);
    let second = Fault::start(7);
    first.set(Mode::Nxdomain);
    let s = Server::start(&format!(
        ".:{{PORT}} {{\n forward . {} {{\n next NXDOMAIN\n }}\n forward . {}\n}}\n",
        first.to(),
        second.to()
    ));
    let out = s.dig(&["+noall", "+answer", "n.example"]);
    assert_eq!(lines(&out), vec!["n.example. 300 IN A 192.0.2.7"], "{out}");
    assert_eq!(first.queries(), 1);
    assert_eq!(second.queries(), 1);
}

#[test]
fn max_concurrent_refuses_beyond_the_limit() {
    let f = Fault::start(8);
    f.set(Mode::Slow);
    f.state
        .delay_ms
        .store(1500, std::sync::atomic::Ordering::SeqCst);
    let s = Server::start(&format!(
        ".:{{PORT}} {{\n forward . {} {{\n max_concurrent 1\n }}\n}}\n",
        f.to()
    ));
    let port = s.port;
    let slow = std::thread::spawn(move || dig(port, &["+time=5", "slow.example"]));
    std::thread::sleep(Duration::from_millis(300));
    let out = s.dig(&["other.example"]);
    assert_eq!(status(&out), "REFUSED", "{out}");
    assert_eq!(status(&slow.join().expect("join")), "NOERROR");
}

#[test]
fn policies_spread_or_keep_order() {
    let a = Fault::start(9);
    let b = Fault::start(10);
    let rr = Server::start(&format!(
        ".:{{PORT}} {{\n forward . {} {} {{\n policy round_robin\n }}\n}}\n",
        a.to(),
        b.to()
    ));
    for i in 0..6 {
        rr.dig(&[&format!("rr{i}.example")]);
    }
    assert_eq!((a.queries(), b.queries()), (3, 3));
    let seq = Server::start(&format!(
        ".:{{PORT}} {{\n forward . {} {} {{\n policy sequential\n }}\n}}\n",
        a.to(),
        b.to()
    ));
    for i in 0..4 {
        seq.dig(&[&format!("seq{i}.example")]);
    }
    assert_eq!((a.queries(), b.queries()), (7, 3));
}

#[test]
fn identical_queries_in_flight_are_coalesced() {
    let f = Fault::start(11);
    f.set(Mode::Slow);
    f.state
        .delay_ms
        .store(500, std::sync::atomic::Ordering::SeqCst);
    let s = Server::start(&format!(".:{{PORT}} {{\n forward . {}\n}}\n", f.to()));
    let port = s.port;
    let threads: Vec<_> = (0..20u16)
        .map(|i| {
            std::thread::spawn(move || {
                fault::exchange(
                    port,
                    &fault::query("same.example", 100 + i),
                    Duration::from_secs(3),
                )
            })
        })
        .collect();
    for (i, t) in threads.into_iter().enumerate() {
        let r = t.join().expect("join").expect("reply");
        assert_eq!(
            u16::from_be_bytes([r[0], r[1]]),
            100 + i as u16,
            "ID restored"
        );
        assert_eq!(r[3] & 0x0f, 0);
    }
    assert!(f.queries() <= 2, "upstream saw {} queries", f.queries());
}

#[test]
fn upstream_question_case_is_restored() {
    let f = Fault::start(12);
    f.state
        .lowercase
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let s = Server::start(&format!(".:{{PORT}} {{\n forward . {}\n}}\n", f.to()));
    let out = s.dig(&["MiXeD.Example"]);
    assert!(out.contains(";MiXeD.Example.\t\t\tIN\tA"), "{out}");
}

#[test]
fn resolv_conf_file_upstreams() {
    let f = Fault::start(13);
    let s = Server::start_with(
        ".:{PORT} {\n forward . resolv.conf\n}\n",
        &[(
            "resolv.conf",
            &format!("# test\nsearch example\nnameserver {}\n", f.to()),
        )],
    );
    let out = s.dig(&["+noall", "+answer", "r.example"]);
    assert!(out.contains("192.0.2.13"), "{out}");
}

#[test]
fn configuration_errors() {
    let e = config_error(".:{PORT} {\n forward . https://127.0.0.1\n}\n");
    assert!(
        e.contains("plugin/forward") && e.contains("transport https is not supported"),
        "{e}"
    );
    let e = config_error(
        ".:{PORT} {\n forward . tls://127.0.0.1%a.test {\n tls_servername b.test\n }\n}\n",
    );
    assert!(e.contains("proxy level TLS servername"), "{e}");
    let e = config_error(".:{PORT} {\n forward . 127.0.0.1 {\n policy fastest\n }\n}\n");
    assert!(e.contains("unknown policy 'fastest'"), "{e}");
    let e = config_error(".:{PORT} {\n forward . 127.0.0.1 {\n bogus\n }\n}\n");
    assert!(e.contains("unknown property 'bogus'"), "{e}");
    let many: Vec<String> = (1..=16).map(|i| format!("127.0.0.{i}")).collect();
    let e = config_error(&format!(
        ".:{{PORT}} {{\n forward . {}\n}}\n",
        many.join(" ")
    ));
    assert!(e.contains("more than 15 TOs configured: 16"), "{e}");
    let e = config_error(".:{PORT} {\n forward . 127.0.0.1 {\n next BOGUS\n }\n}\n");
    assert!(e.contains("BOGUS is not a valid rcode"), "{e}");
    let e = config_error(".:{PORT} {\n forward . /nonexistent/resolv.conf\n}\n");
    assert!(e.contains("plugin/forward"), "{e}");
    let e = config_error(".:{PORT} {\n forward .\n}\n");
    assert!(e.contains("Wrong argument count"), "{e}");
}

#[test]
fn same_rcodes_and_flags_as_the_reference_coredns() {
    let Some(cd) = fault::reference_coredns() else {
        eprintln!("skipped: reference CoreDNS not built");
        return;
    };
    let f = Fault::start(20);
    let corefile = format!(".:{{PORT}} {{\n forward . {}\n}}\n", f.to());
    let us = Server::start(&corefile);
    let them = fault::start_binary(&cd, &corefile);
    let cases: &[(Mode, &[&str])] = &[
        (Mode::Answer, &["MiXeD.example"]),
        (Mode::Answer, &["+dnssec", "+bufsize=1400", "a.example"]),
        (Mode::Answer, &["+tcp", "+noedns", "b.example"]),
        (Mode::Answer, &["b.example", "AAAA"]),
        (Mode::Nxdomain, &["nx.example"]),
        (Mode::Servfail, &["sf.example"]),
        (Mode::Truncate, &["+ignore", "tc.example"]),
        (Mode::Stall, &["+time=8", "stall.example"]),
    ];
    for (mode, args) in cases {
        f.set(*mode);
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(|| fault::normalize(&us.dig(args)));
            let b = s.spawn(|| fault::normalize(&them.dig(args)));
            (a.join().expect("join"), b.join().expect("join"))
        });
        assert!(
            a.iter().any(|l| l.contains("status: ")),
            "{mode:?} {args:?}: no reply: {a:?}"
        );
        assert_eq!(a, b, "{mode:?} {args:?}");
    }
}

/// A CA and a certificate for `dot.test` and 127.0.0.1 signed by it.
fn make_certs(dir: &std::path::Path) {
    let run = |args: &[&str]| {
        let ok = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("openssl")
            .success();
        assert!(ok, "openssl {args:?}");
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=test-ca",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "key.pem",
        "-out",
        "leaf.csr",
        "-subj",
        "/CN=dot.test",
    ]);
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=DNS:dot.test,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .expect("ext");
    run(&[
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "cert.pem",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    ]);
}

#[test]
fn dns_over_tls_to_unbound() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    make_certs(d);
    let port = free_port();
    let _u = start_unbound(
        d,
        &format!(
            "    interface: 127.0.0.1@{port}\n    tls-port: {port}\n    tls-service-key: \"{k}\"\n    tls-service-pem: \"{c}\"\n",
            k = d.join("key.pem").display(),
            c = d.join("cert.pem").display()
        ),
        &["dot.example.org. 30 IN A 192.0.2.53"],
    );
    std::thread::sleep(Duration::from_millis(800));
    let ca = d.join("ca.pem");
    let s = Server::start(&format!(
        ".:{{PORT}} {{\n forward . tls://127.0.0.1:{port} {{\n tls {}\n tls_servername dot.test\n }}\n}}\n",
        ca.display()
    ));
    for _ in 0..3 {
        let out = s.dig(&["+time=5", "+noall", "+answer", "dot.example.org"]);
        assert_eq!(
            lines(&out),
            vec!["dot.example.org. 30 IN A 192.0.2.53"],
            "{out}"
        );
    }
    // The name per upstream, and the IP address as the name.
    for to in [
        format!("tls://127.0.0.1%dot.test:{port}"),
        format!("tls://127.0.0.1:{port}"),
    ] {
        let s = Server::start(&format!(
            ".:{{PORT}} {{\n forward . {to} {{\n tls {}\n }}\n}}\n",
            ca.display()
        ));
        let out = s.dig(&["+time=5", "+noall", "+answer", "dot.example.org"]);
        assert_eq!(
            lines(&out),
            vec!["dot.example.org. 30 IN A 192.0.2.53"],
            "{to}: {out}"
        );
    }
    // A certificate the client does not trust (system CAs only): SERVFAIL.
    let untrusted = Server::start(&format!(
        ".:{{PORT}} {{\n forward . tls://127.0.0.1:{port} {{\n tls_servername dot.test\n }}\n}}\n"
    ));
    assert_eq!(
        status(&untrusted.dig(&["+time=8", "dot.example.org"])),
        "SERVFAIL"
    );
}

#[test]
fn failover_tries_the_next_upstream_on_listed_rcodes() {
    let first = Fault::start(21);
    let second = Fault::start(22);
    first.set(Mode::Servfail);
    let s = Server::start(&format!(
        ".:{{PORT}} {{\n forward . {} {} {{\n policy sequential\n failover SERVFAIL\n }}\n}}\n",
        first.to(),
        second.to()
    ));
    let out = s.dig(&["+noall", "+answer", "f.example"]);
    assert_eq!(lines(&out), vec!["f.example. 300 IN A 192.0.2.22"], "{out}");
    // Without failover the SERVFAIL is the answer.
    let plain = Server::start(&format!(
        ".:{{PORT}} {{\n forward . {} {} {{\n policy sequential\n }}\n}}\n",
        first.to(),
        second.to()
    ));
    assert_eq!(status(&plain.dig(&["g.example"])), "SERVFAIL");
}

#[test]
fn health_check_options_shape_the_probe() {
    let bad = Fault::start(23);
    bad.set(Mode::Stall);
    let s = Server::start(&format!(
        ".:{{PORT}} {{\n forward . {} {{\n health_check 200ms no_rec domain Example.NET\n read_timeout 300ms\n }}\n}}\n",
        bad.to()
    ));
    assert_eq!(status(&s.dig(&["+time=5", "h.example"])), "SERVFAIL");
    std::thread::sleep(Duration::from_millis(500));
    let last = bad.state.last_ns.lock().expect("lock").clone();
    let (name, rd) = last.expect("a health check arrived");
    assert_eq!(name, b"\x07Example\x03NET\x00".to_vec());
    assert!(!rd, "no_rec clears RD");
}

#[test]
fn expired_connections_are_not_reused() {
    let f = Fault::start(24);
    let mp = free_port();
    let s = Server::start(&format!(
        ".:{{PORT}} {{\n prometheus 127.0.0.1:{mp}\n forward . {} {{\n expire 1s\n }}\n}}\n",
        f.to()
    ));
    s.dig(&["e1.example"]);
    s.dig(&["e2.example"]);
    std::thread::sleep(Duration::from_millis(1300));
    s.dig(&["e3.example"]);
    let out = Command::new("curl")
        .args(["-s", &format!("http://127.0.0.1:{mp}/metrics")])
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout);
    let to = f.to();
    let hits = format!(
        "coredns_proxy_conn_cache_hits_total{{proto=\"udp\",proxy_name=\"forward\",to=\"{to}\"}} 1"
    );
    let misses = format!(
        "coredns_proxy_conn_cache_misses_total{{proto=\"udp\",proxy_name=\"forward\",to=\"{to}\"}} 2"
    );
    assert!(text.contains(&hits), "{text}");
    assert!(text.contains(&misses), "{text}");
}

#[test]
fn upstream_errors_are_logged_as_coredns_words_them() {
    let closed = free_port();
    let stall = Fault::start(25);
    stall.set(Mode::Stall);
    let s = Server::start(&format!(
        ".:{{PORT}} {{\n errors\n forward . 127.0.0.1:{closed}\n}}\nstall.example:{{PORT}} {{\n errors\n forward . {} {{\n read_timeout 300ms\n }}\n}}\n",
        stall.to()
    ));
    assert_eq!(status(&s.dig(&["a.example"])), "SERVFAIL");
    assert_eq!(status(&s.dig(&["+tcp", "a.example"])), "SERVFAIL");
    assert_eq!(status(&s.dig(&["x.stall.example"])), "SERVFAIL");
    let (out, _) = s.stop();
    let has = |prefix: &str, suffix: &str| {
        out.lines()
            .any(|l| l.starts_with(prefix) && l.ends_with(suffix))
    };
    let refused = format!("->127.0.0.1:{closed}: read: connection refused");
    assert!(
        has(
            "[ERROR] plugin/errors: 2 a.example. A: read udp 127.0.0.1:",
            &refused
        ),
        "{out}"
    );
    let dial = format!(
        "[ERROR] plugin/errors: 2 a.example. A: dial tcp 127.0.0.1:{closed}: connect: connection refused"
    );
    assert!(out.lines().any(|l| l == dial), "{out}");
    let timeout = format!("->{}: i/o timeout", stall.to());
    assert!(
        has(
            "[ERROR] plugin/errors: 2 x.stall.example. A: read udp 127.0.0.1:",
            &timeout
        ),
        "{out}"
    );
}

#[test]
fn tcp_queries_are_pipelined_on_one_connection() {
    let f = Fault::start(26);
    f.set(Mode::Slow);
    f.state
        .delay_ms
        .store(400, std::sync::atomic::Ordering::SeqCst);
    let s = Server::start(&format!(
        ".:{{PORT}} {{\n forward . {} {{\n force_tcp\n }}\n}}\n",
        f.to()
    ));
    // One query opens the connection.
    assert_eq!(status(&s.dig(&["warm.example"])), "NOERROR");
    let port = s.port;
    let t = Instant::now();
    let threads: Vec<_> = (0..20u16)
        .map(|i| {
            std::thread::spawn(move || {
                fault::exchange(
                    port,
                    &fault::query(&format!("p{i}.example"), i),
                    Duration::from_secs(3),
                )
            })
        })
        .collect();
    for (i, t) in threads.into_iter().enumerate() {
        let r = t
            .join()
            .expect("join")
            .unwrap_or_else(|| panic!("query {i}: no reply"));
        assert_eq!(r[3] & 0x0f, 0, "query {i}");
    }
    // Twenty 400ms queries in flight at once on one connection.
    assert!(
        t.elapsed() < Duration::from_millis(1500),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(f.tcp(), 21);
    assert_eq!(f.state.conns.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// A reload that removes a listener stops its UDP workers, but the
/// forwarded queries they had in flight are still answered.
#[test]
fn a_listener_removed_by_reload_still_answers_its_forwarded_queries() {
    let up = Fault::start(9);
    up.state
        .delay_ms
        .store(1500, std::sync::atomic::Ordering::SeqCst);
    up.set(Mode::Slow);
    let p2 = free_port();
    let keep = "example.org:{PORT} {\n    whoami\n}\n";
    let s = Server::start(&format!("{keep}.:{p2} {{\n    forward . {}\n}}\n", up.to()));
    let asked = std::thread::spawn(move || {
        fault::exchange(
            p2,
            &fault::query("slow.test", 0x4242),
            Duration::from_secs(5),
        )
    });
    // The query is upstream (1.5 s away) when the listener goes.
    let t0 = Instant::now();
    while up.queries() == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "query never reached the upstream"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::write(&s.corefile, keep.replace("{PORT}", &s.port.to_string())).unwrap();
    let sent = Command::new("kill")
        .args(["-USR1", &s.child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    // The listener is gone once the reload is through (its port refuses).
    let gone = Instant::now();
    while fault::exchange(
        p2,
        &fault::query("after.test", 1),
        Duration::from_millis(100),
    )
    .is_some()
    {
        assert!(
            gone.elapsed() < Duration::from_secs(1),
            "listener still serving"
        );
    }
    // Well before the upstream's reply is due.
    assert!(
        t0.elapsed() < Duration::from_millis(1200),
        "the listener went only after {:?}",
        t0.elapsed()
    );
    let reply = asked
        .join()
        .unwrap()
        .expect("the in-flight query was not answered");
    assert_eq!(&reply[..2], &[0x42, 0x42]);
    assert_eq!(reply[3] & 0x0f, 0, "rcode {}", reply[3] & 0x0f);
    assert_eq!(&reply[reply.len() - 4..], &[192, 0, 2, 9]);
    let (log, _) = s.stop();
    assert!(log.contains("Reloading complete"), "{log}");
}

#[test]
fn queries_past_the_socket_limit_share_sockets_and_each_gets_its_reply() {
    let f = Fault::start(41);
    f.set(Mode::Slow);
    f.state
        .delay_ms
        .store(700, std::sync::atomic::Ordering::SeqCst);
    let s = Server::start(&format!(".:{{PORT}} {{\n forward . {}\n}}\n", f.to()));
    let port = s.port;
    let pid = s.child.id();
    let open = || {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    let before = open();
    // 800 distinct names in flight at once, from 8 client sockets: past
    // the 256 sockets an upstream gets, queries share them by ID.
    let clients: Vec<_> = (0..8u16)
        .map(|c| {
            let sock = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
            sock.set_read_timeout(Some(Duration::from_secs(4)))
                .expect("timeout");
            for i in 0..100u16 {
                let id = c * 100 + i;
                sock.send_to(
                    &fault::query(&format!("m{id}.example"), id),
                    ("127.0.0.1", port),
                )
                .expect("send");
            }
            sock
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let during = open();
    let readers: Vec<_> = clients
        .into_iter()
        .map(|sock| {
            std::thread::spawn(move || {
                let mut buf = [0u8; 512];
                let mut got = Vec::new();
                while got.len() < 100 {
                    let Ok(n) = sock.recv(&mut buf) else { break };
                    got.push(buf[..n].to_vec());
                }
                got
            })
        })
        .collect();
    let mut ids = std::collections::HashSet::new();
    for r in readers {
        for reply in r.join().expect("join") {
            let id = u16::from_be_bytes([reply[0], reply[1]]);
            // The question is the one sent with this ID, the answer the
            // upstream's.
            let q = fault::query(&format!("m{id}.example"), id);
            assert_eq!(reply[12..q.len()], q[12..], "question of reply {id}");
            assert_eq!(reply[3] & 0x0f, 0, "NOERROR for {id}");
            assert_eq!(reply[reply.len() - 4..], [192, 0, 2, 41], "answer of {id}");
            ids.insert(id);
        }
    }
    assert_eq!(ids.len(), 800, "every query got its own reply");
    assert!(
        during <= before + 256 + 8,
        "{} descriptors opened for 800 queries in flight",
        during - before
    );
}
