//! *loop*: a Corefile that forwards to itself stops the process with
//! CoreDNS's fatal message; one that does not keeps running.

mod common;

use std::io::Read;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Server, free_port, status};

/// Runs `bin` on `corefile` until it exits or `limit` passes; returns
/// (exit code, stdout).
fn run_until_exit(bin: &Path, corefile: &str, limit: Duration) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("Corefile");
    std::fs::write(&path, corefile).expect("write");
    let mut child = common::spawn_conf(Command::new(bin), &path);
    let deadline = Instant::now() + limit;
    let code = loop {
        if let Ok(Some(st)) = child.try_wait() {
            break st.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut out = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut out);
    }
    (code, out)
}

fn check_fatal(code: Option<i32>, out: &str, port: u16) {
    assert_eq!(code, Some(1), "{out}");
    let line = out
        .lines()
        .find(|l| l.starts_with("[FATAL] plugin/loop: Loop (127.0.0.1:"))
        .unwrap_or_else(|| panic!("no fatal line in {out}"));
    let tail = format!(
        " -> :{port}) detected for zone \".\", see https://coredns.io/plugins/loop#troubleshooting. Query: \"HINFO "
    );
    assert!(line.contains(&tail), "{line}");
    assert!(line.ends_with(".\""), "{line}");
}

#[test]
fn forwarding_to_itself_exits_with_coredns_message() {
    let port = free_port();
    let corefile = format!(".:{port} {{\n loop\n forward . 127.0.0.1:{port}\n}}\n");
    let (code, out) = run_until_exit(common::binary(), &corefile, Duration::from_secs(20));
    check_fatal(code, &out, port);
}

#[test]
fn the_reference_coredns_says_the_same() {
    let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.rig/bin/coredns");
    if !bin.exists() {
        eprintln!("skipped: {} not built", bin.display());
        return;
    }
    let port = free_port();
    let corefile = format!(".:{port} {{\n loop\n forward . 127.0.0.1:{port}\n}}\n");
    let (code, out) = run_until_exit(&bin, &corefile, Duration::from_secs(20));
    check_fatal(code, &out, port);
}

#[test]
fn no_loop_keeps_serving() {
    let upstream = Server::start(".:{PORT} {\n whoami\n}\n");
    let mut s = Server::start(&format!(
        ".:{{PORT}} {{\n loop\n forward . 127.0.0.1:{}\n}}\n",
        upstream.port
    ));
    std::thread::sleep(Duration::from_secs(4));
    assert!(
        s.child.try_wait().expect("wait").is_none(),
        "process exited"
    );
    assert_eq!(status(&s.dig(&["x.example"])), "NOERROR");
}

#[test]
fn loop_takes_no_arguments() {
    let port = free_port();
    let (code, out) = run_until_exit(
        common::binary(),
        &format!(".:{port} {{\n loop now\n}}\n"),
        Duration::from_secs(5),
    );
    assert_ne!(code, Some(0));
    assert_ne!(code, None, "{out}");
}
