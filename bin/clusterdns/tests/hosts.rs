//! *hosts* through the real binary with dig and kdig.

mod common;

use std::time::{Duration, Instant};

use common::{Server, lines, status};

const COREFILE: &str = ".:{PORT} {
    hosts hosts.txt example.org {
        10.0.0.9 inline.example.org
        10.0.0.10 both.example.org
        ttl 300
        reload 100ms
    }
}
fall.test:{PORT} {
    hosts {
        10.1.1.1 a.fall.test
        fallthrough
    }
    whoami
}
";

const HOSTS: &str = "# hosts
10.0.0.1 Example.ORG www.example.org
10.0.0.2 example.org
2001:db8::1 example.org v6only.example.org
10.0.0.11 both.example.org
192.168.1.10 *.wild.example.org
10.9.9.9 outside.net
";

fn start() -> Server {
    Server::start_with(COREFILE, &[("hosts.txt", HOSTS)])
}

#[test]
fn a_aaaa_over_udp_and_tcp_with_dig_and_kdig() {
    let s = start();
    let out = s.dig(&["+noall", "+answer", "example.org", "A"]);
    assert_eq!(
        lines(&out),
        [
            "example.org. 300 IN A 10.0.0.1",
            "example.org. 300 IN A 10.0.0.2"
        ]
    );
    let out = s.dig(&["+tcp", "+noall", "+answer", "example.org", "AAAA"]);
    assert_eq!(lines(&out), ["example.org. 300 IN AAAA 2001:db8::1"]);
    let out = s.kdig(&["+tcp", "+noall", "+answer", "www.example.org", "A"]);
    assert_eq!(lines(&out), ["www.example.org. 300 IN A 10.0.0.1"]);
    let out = s.kdig(&["+noall", "+answer", "inline.example.org", "A"]);
    assert_eq!(lines(&out), ["inline.example.org. 300 IN A 10.0.0.9"]);
    // File entries first, then inline ones.
    let out = s.dig(&["+noall", "+answer", "both.example.org", "A"]);
    assert_eq!(
        lines(&out),
        [
            "both.example.org. 300 IN A 10.0.0.11",
            "both.example.org. 300 IN A 10.0.0.10"
        ]
    );
}

#[test]
fn question_case_kept_answer_lowercase_aa_set() {
    let s = start();
    let out = s.dig(&["ExAmple.ORG", "A"]);
    assert_eq!(status(&out), "NOERROR");
    assert!(out.contains(";ExAmple.ORG.\t\t\tIN\tA"), "{out}");
    assert!(out.contains("flags: qr aa rd;"), "{out}");
    assert!(
        out.contains("example.org.\t\t300\tIN\tA\t10.0.0.1"),
        "{out}"
    );
}

#[test]
fn nodata_servfail_and_zones() {
    let s = start();
    for (name, qtype) in [
        ("v6only.example.org", "A"),
        ("example.org", "MX"),
        ("www.example.org", "AAAA"),
    ] {
        let out = s.dig(&[name, qtype]);
        assert_eq!(status(&out), "NOERROR", "{name} {qtype}: {out}");
        assert!(out.contains("flags: qr aa rd;"), "{out}");
        assert!(out.contains("ANSWER: 0,"), "{out}");
    }
    let out = s.dig(&["nope.example.org", "A"]);
    assert_eq!(status(&out), "SERVFAIL", "{out}");
    // Outside the plugin's zone, nothing after hosts: SERVFAIL (no next plugin).
    let out = s.dig(&["outside.net", "A"]);
    assert_eq!(status(&out), "SERVFAIL", "{out}");
    // Wildcards: one label only.
    let out = s.dig(&["+noall", "+answer", "Apps.wild.example.org", "A"]);
    assert_eq!(
        lines(&out),
        ["apps.wild.example.org. 300 IN A 192.168.1.10"]
    );
    assert_eq!(status(&s.dig(&["a.b.wild.example.org", "A"])), "SERVFAIL");
}

#[test]
fn ptr_records_from_entries() {
    let s = start();
    let out = s.dig(&["+noall", "+answer", "-x", "10.0.0.1"]);
    assert_eq!(
        lines(&out),
        [
            "1.0.0.10.in-addr.arpa. 300 IN PTR example.org.",
            "1.0.0.10.in-addr.arpa. 300 IN PTR www.example.org."
        ]
    );
    let out = s.kdig(&["+noall", "+answer", "-x", "2001:db8::1"]);
    assert_eq!(lines(&out).len(), 2, "{out}");
    // Unknown address: next plugin, none here: SERVFAIL.
    assert_eq!(status(&s.dig(&["-x", "10.0.0.99"])), "SERVFAIL");
}

#[test]
fn fallthrough_reaches_the_next_plugin() {
    let s = start();
    let out = s.dig(&["+noall", "+answer", "a.fall.test", "A"]);
    assert_eq!(lines(&out), ["a.fall.test. 3600 IN A 10.1.1.1"]);
    let out = s.dig(&["b.fall.test", "A"]);
    assert_eq!(status(&out), "NOERROR");
    assert!(out.contains("_udp.b.fall.test."), "whoami answered: {out}");
}

#[test]
fn the_file_is_reloaded() {
    let s = start();
    let path = s.dir.path().join("hosts.txt");
    std::fs::write(&path, "10.7.7.7 new.example.org\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = s.dig(&["+noall", "+answer", "new.example.org", "A"]);
        if lines(&out) == ["new.example.org. 300 IN A 10.7.7.7"] {
            break;
        }
        assert!(Instant::now() < deadline, "reload not seen: {out}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The old file's names are gone, the inline ones stay.
    assert_eq!(status(&s.dig(&["www.example.org", "A"])), "SERVFAIL");
    let out = s.dig(&["+noall", "+answer", "inline.example.org", "A"]);
    assert_eq!(lines(&out), ["inline.example.org. 300 IN A 10.0.0.9"]);
}

#[test]
fn bad_options_stop_the_start_with_file_and_line() {
    let text = common::config_error(".:1053 {\n    hosts {\n        ttl 0\n    }\n}\n");
    assert!(text.contains("plugin/hosts"), "{text}");
    assert!(text.contains("Corefile:3"), "{text}");
    assert!(text.contains("ttl provided is invalid"), "{text}");
}
