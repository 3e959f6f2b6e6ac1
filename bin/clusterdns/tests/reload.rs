//! The *reload* plugin through the real binary: a valid change is taken
//! under load without losing a query; an invalid one keeps the old
//! configuration and is counted.

mod common;
mod ops;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{Server, free_port, status};

fn corefile(mp: u16, extra: &str) -> String {
    format!(
        "example.org:{{PORT}} {{\n    reload 2s 0\n    prometheus 127.0.0.1:{mp}\n    whoami\n}}\n{extra}"
    )
}

/// Waits up to `secs` for `cond`.
fn wait_for(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(secs) {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

#[test]
fn reload_applies_valid_and_rejects_invalid() {
    let mp = free_port();
    let s = Server::start(&corefile(mp, ""));
    let port = s.port;
    assert_eq!(status(&s.dig(&["x.other.test", "A"])), "REFUSED");

    // Valid change under load: a new zone, while dnsperf runs.
    let qfile = s.dir.path().join("queries.txt");
    std::fs::write(&qfile, "a.example.org A\nb.example.org AAAA\n").unwrap();
    let perf = Command::new("dnsperf")
        .args(["-s", "127.0.0.1", "-p", &port.to_string(), "-d"])
        .arg(&qfile)
        .args(["-l", "8", "-Q", "5000", "-t", "2"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("dnsperf (apt-get install dnsperf)");
    std::thread::sleep(Duration::from_secs(2));
    let new =
        corefile(mp, "other.test:{PORT} {\n    whoami\n}\n").replace("{PORT}", &port.to_string());
    std::fs::write(&s.corefile, new).unwrap();
    assert!(
        wait_for(8, || status(&s.dig(&["x.other.test", "A"])) == "NOERROR"),
        "new zone not served after reload"
    );
    let out = perf.wait_with_output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    let lost_line = report
        .lines()
        .find(|l| l.contains("Queries lost:"))
        .unwrap_or("")
        .to_string();
    let sent: u64 = report
        .lines()
        .find(|l| l.contains("Queries sent:"))
        .and_then(|l| l.split_whitespace().nth(2))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(sent > 20_000, "{report}");
    assert!(lost_line.contains("Queries lost:         0 "), "{report}");

    // Invalid change: the old configuration keeps serving, counted.
    std::fs::write(&s.corefile, "example.org:1 {\n    nosuchplugin\n}\n").unwrap();
    assert!(
        wait_for(8, || {
            let (_, text) = ops::get(mp, "/metrics");
            ops::value(&text, "coredns_reload_failed_total", &[]) == Some(1.0)
        }),
        "reload failure not counted"
    );
    assert_eq!(status(&s.dig(&["x.other.test", "A"])), "NOERROR");
    assert_eq!(
        ops::rcode(&s.kdig(&["+tcp", "a.example.org", "A"])),
        "NOERROR"
    );
    let (_, text) = ops::get(mp, "/metrics");
    assert!(
        text.contains("coredns_reload_version_info{hash=\"sha512\""),
        "{text}"
    );
    let (log, _) = s.stop();
    assert!(log.contains("[INFO] Reloading complete"), "{log}");
    assert!(
        log.contains("[ERROR] plugin/reload: Corefile changed but reload failed"),
        "{log}"
    );
}
