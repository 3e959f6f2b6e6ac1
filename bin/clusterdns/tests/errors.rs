//! The *errors* plugin through the real binary.

mod common;
mod ops;

use std::time::Duration;

use common::{Server, status};

#[test]
fn logs_errors_like_coredns() {
    // A block whose last plugin passes the query on: SERVFAIL with
    // "no next plugin found", as CoreDNS 1.14.7 prints it.
    let s = Server::start(
        "bad.test:{PORT} {\n    errors\n}\nok.test:{PORT} {\n    errors\n    whoami\n}\n",
    );
    assert_eq!(status(&s.dig(&["x.bad.test", "A"])), "SERVFAIL");
    assert_eq!(status(&s.dig(&["+tcp", "Y.Bad.Test", "AAAA"])), "SERVFAIL");
    assert_eq!(status(&s.dig(&["a.ok.test", "A"])), "NOERROR");
    let (out, _) = s.stop();
    let errs: Vec<&str> = out.lines().filter(|l| l.starts_with("[ERROR]")).collect();
    assert_eq!(
        errs,
        [
            "[ERROR] plugin/errors: 2 x.bad.test. A: plugin/errors: no next plugin found",
            "[ERROR] plugin/errors: 2 y.bad.test. AAAA: plugin/errors: no next plugin found",
        ],
        "{out}"
    );
}

#[test]
fn consolidate_prints_one_summary_per_period() {
    let s = Server::start(
        "bad.test:{PORT} {\n    errors {\n        consolidate 1s \"no next plugin\" warning\n    }\n}\n",
    );
    for _ in 0..3 {
        assert_eq!(status(&s.dig(&["+tcp", "x.bad.test", "A"])), "SERVFAIL");
    }
    std::thread::sleep(Duration::from_millis(1800));
    let (out, _) = s.stop();
    assert!(!out.contains("[ERROR]"), "{out}");
    let summaries: Vec<&str> = out.lines().filter(|l| l.contains("errors like")).collect();
    assert_eq!(
        summaries,
        ["[WARNING] plugin/errors: 3 errors like 'no next plugin' occurred in last 1s"],
        "{out}"
    );
}

#[test]
fn consolidate_show_first() {
    let s = Server::start(
        "bad.test:{PORT} {\n    errors {\n        consolidate 1s ^plugin info show_first\n    }\n}\n",
    );
    s.dig(&["x.bad.test", "A"]);
    s.dig(&["x.bad.test", "A"]);
    std::thread::sleep(Duration::from_millis(1800));
    let (out, _) = s.stop();
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("plugin/errors"))
        .collect();
    assert_eq!(
        lines,
        [
            "[INFO] plugin/errors: 2 x.bad.test. A: plugin/errors: no next plugin found",
            "[INFO] plugin/errors: 2 errors like '^plugin' occurred in last 1s",
        ],
        "{out}"
    );
}

#[test]
fn invalid_errors_config_exits_before_serving() {
    let text =
        common::config_error(".:1 {\n    errors {\n        consolidate 1m re critical\n    }\n}\n");
    assert!(text.contains("plugin/errors"), "{text}");
    assert!(text.contains("Corefile:3"), "{text}");
    assert!(
        text.contains("unknown option in consolidate: critical"),
        "{text}"
    );
}
