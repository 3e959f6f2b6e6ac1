//! The *health* plugin through the real binary: /health, lameduck on
//! SIGTERM, the poll metrics.

mod common;
mod ops;

use std::time::{Duration, Instant};

use common::{Server, free_port, status};

#[test]
fn health_answers_ok() {
    let hp = free_port();
    let s = Server::start(&format!(
        ".:{{PORT}} {{\n    health 127.0.0.1:{hp}\n    whoami\n}}\n"
    ));
    assert_eq!(ops::get_ok(hp, "/health"), (200, "OK".to_string()));
    assert_eq!(ops::get(hp, "/nope").0, 404);
    assert_eq!(status(&s.dig(&["example.org", "A"])), "NOERROR");
}

/// An address without a host listens on both families, as CoreDNS's Go
/// listener does (the kubelet of an IPv6 cluster probes the Pod's IPv6
/// address); an explicit one only where it says.
#[test]
fn a_wildcard_address_answers_on_both_families() {
    let hp = free_port();
    let lp = free_port();
    let s = Server::start(&format!(
        ".:{{PORT}} {{\n    health :{hp}\n    whoami\n}}\nlocal.test:{{PORT}} {{\n    health 127.0.0.1:{lp}\n    whoami\n}}\n"
    ));
    let ok = (200, "OK".to_string());
    assert_eq!(ops::get_both(hp, "/health"), [ok.clone(), ok.clone()]);
    assert_eq!(ops::get_ok(lp, "/health"), ok);
    let v6 = std::net::SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, lp));
    assert_eq!(ops::get_at(v6, "/health").0, 0, "127.0.0.1 answered on ::1");
    drop(s);
}

#[test]
fn lameduck_keeps_answering_then_exits_zero() {
    let hp = free_port();
    let mut s = Server::start(&format!(
        ".:{{PORT}} {{\n    health 127.0.0.1:{hp} {{\n        lameduck 2s\n    }}\n    whoami\n}}\n"
    ));
    assert_eq!(ops::get_ok(hp, "/health").0, 200);
    let t0 = Instant::now();
    s.terminate();
    let mut answered = 0;
    while t0.elapsed() < Duration::from_millis(1600) {
        assert_eq!(
            status(&s.dig(&["example.org", "A"])),
            "NOERROR",
            "answered during lameduck"
        );
        assert_eq!(
            ops::rcode(&s.kdig(&["+tcp", "example.org", "A"])),
            "NOERROR"
        );
        answered += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(answered >= 3);
    assert_eq!(
        ops::get(hp, "/health").0,
        200,
        "/health stays OK during lameduck"
    );
    let code = loop {
        if let Some(st) = s.child.try_wait().unwrap() {
            break st;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "did not exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = t0.elapsed();
    assert!(code.success(), "{code}");
    assert!(
        took >= Duration::from_millis(1900),
        "exited after {took:?}, before the lameduck ended"
    );
    let (out, _) = s.stop();
    assert!(
        out.contains("[INFO] plugin/health: Going into lameduck mode for 2s"),
        "{out}"
    );
}

#[test]
fn poll_metrics() {
    let hp = free_port();
    let mp = free_port();
    let s = Server::start(&format!(
        ".:{{PORT}} {{\n    health 127.0.0.1:{hp}\n    prometheus 127.0.0.1:{mp}\n    whoami\n}}\n"
    ));
    std::thread::sleep(Duration::from_millis(2500));
    let (code, text) = ops::get_ok(mp, "/metrics");
    assert_eq!(code, 200);
    let n = ops::value(&text, "coredns_health_request_duration_seconds_count", &[]).unwrap();
    assert!(n >= 1.0, "{text}");
    assert_eq!(
        ops::value(&text, "coredns_health_request_failures_total", &[]),
        Some(0.0)
    );
    drop(s);
}
