//! The *bind* plugin through the real binary.

mod common;
mod ops;

use std::process::Command;

use common::{Server, free_port, status};

fn dig_at(ip: &str, port: u16, args: &[&str]) -> String {
    let out = Command::new("dig")
        .arg(format!("@{ip}"))
        .args(["-p", &port.to_string(), "+tries=1", "+time=2"])
        .args(args)
        .output()
        .expect("dig");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn two_addresses_same_port_each_own_zone() {
    let mp = free_port();
    let s = Server::start(&format!(
        "a.test:{{PORT}} {{\n    bind 127.0.0.1\n    prometheus 127.0.0.1:{mp}\n    whoami\n}}\nb.test:{{PORT}} {{\n    bind 127.0.0.2\n    whoami\n}}\n"
    ));
    let p = s.port;
    assert_eq!(
        status(&dig_at("127.0.0.1", p, &["x.a.test", "A"])),
        "NOERROR"
    );
    assert_eq!(
        status(&dig_at("127.0.0.1", p, &["x.b.test", "A"])),
        "REFUSED"
    );
    assert_eq!(
        status(&dig_at("127.0.0.2", p, &["x.b.test", "A"])),
        "NOERROR"
    );
    assert_eq!(
        status(&dig_at("127.0.0.2", p, &["+tcp", "x.b.test", "A"])),
        "NOERROR"
    );
    assert_eq!(
        status(&dig_at("127.0.0.2", p, &["x.a.test", "A"])),
        "REFUSED"
    );
    // The server label carries the address.
    let (_, text) = ops::get_ok(mp, "/metrics");
    let srv = format!("dns://127.0.0.1:{p}");
    let l = [
        ("server", srv.as_str()),
        ("zone", "a.test."),
        ("view", ""),
        ("proto", "udp"),
        ("family", "1"),
        ("type", "A"),
    ];
    assert_eq!(
        ops::value(&text, "coredns_dns_requests_total", &l),
        Some(1.0),
        "{text}"
    );
}

#[test]
fn interface_name_with_except() {
    let s =
        Server::start("a.test:{PORT} {\n    bind lo {\n        except ::1\n    }\n    whoami\n}\n");
    let p = s.port;
    assert_eq!(
        status(&dig_at("127.0.0.1", p, &["x.a.test", "A"])),
        "NOERROR"
    );
    // ::1 was excepted: nothing listens there.
    let r = dig_at("::1", p, &["x.a.test", "A"]);
    assert!(!r.contains("status:"), "{r}");
}

#[test]
fn unknown_interface_is_a_config_error() {
    let text = ops::config_error(".:1 {\n    bind nosuchif0\n}\n");
    assert!(
        text.contains("plugin/bind")
            && text.contains("not a valid IP address or interface name: \"nosuchif0\""),
        "{text}"
    );
}
