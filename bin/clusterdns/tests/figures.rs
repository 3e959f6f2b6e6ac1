//! The figures pages: BENCHMARKS.md and RELIABILITY.md stay pages a reader
//! can use (under 30 KB each, issue 36), and `scripts/torture --report`
//! (`scripts/torture.d/report.py`) keeps each run's figures and measures
//! them against the targets the tests print beside them.

mod common;

use std::process::Command;

use clusterdns_test_support::workspace_root;

/// The command `report.py ARGS`.
fn report_cmd(args: &[&str]) -> Command {
    let mut cmd = Command::new("python3");
    cmd.arg(workspace_root().join("scripts/torture.d/report.py"))
        .args(args);
    cmd
}

/// `report.py ARGS`: (exit code, stdout, stderr).
fn report(args: &[&str]) -> (i32, String, String) {
    let out = report_cmd(args).output().expect("python3");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `report.py ARGS` that must succeed: its stdout.
fn report_ok(args: &[&str]) -> String {
    common::run_ok(&mut report_cmd(args))
}

/// `report.py ARGS` that must fail with one line on stderr holding `want`.
fn report_refuses(args: &[&str], want: &str) {
    let (code, _, stderr) = report(args);
    assert_eq!((code, stderr.lines().count()), (1, 1), "{stderr}");
    assert!(stderr.contains(want), "{stderr}");
}

#[test]
fn both_pages_stay_under_30_kb() {
    for page in ["BENCHMARKS.md", "RELIABILITY.md"] {
        let len = std::fs::metadata(workspace_root().join(page))
            .expect(page)
            .len();
        assert!(len <= 30 * 1024, "{page} is {len} bytes, over 30 KB");
    }
}

#[test]
fn a_runs_figures_are_kept_and_measured_against_their_targets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let output = d.join("out.txt");
    std::fs::write(
        &output,
        "running 2 tests\n\
         test a ... TORTURE idle_tcp: form=short peak_rss_mib=30 peak_rss_mib.max=150 udp_ratio=0.980 udp_ratio.min=0.95 tcp_new_ok=35/35 tcp_new_ok.min=0.5 conns=2000\n\
         ok\n\
         TORTURE soak: form=short rss_spread_pct=12.0 rss_spread_pct.max=10 lost=0\n\
         test b ... FAILED\n",
    )
    .expect("write");
    let dirs = d.to_str().expect("utf-8");
    report_ok(&[
        "save",
        output.to_str().expect("utf-8"),
        "--form",
        "short",
        "--binary",
        "debug",
        "--command",
        "scripts/torture",
        "--status",
        "101",
        "--commit",
        "abc1234",
        "--load",
        "0.5",
        "--dir",
        dirs,
    ]);
    let runs: Vec<_> = std::fs::read_dir(d.join("runs")).expect("runs").collect();
    assert_eq!(runs.len(), 1);
    let run = std::fs::read_to_string(runs[0].as_ref().expect("entry").path()).expect("run");
    let run: serde_json::Value = serde_json::from_str(&run).expect("json");
    assert_eq!(run["commit"], "abc1234");
    assert_eq!(run["failed"], serde_json::json!(["b"]));
    assert_eq!(run["scenarios"]["idle_tcp"]["conns"], "2000");

    let stdout = report_ok(&["report", dirs, "--print"]);
    // A ceiling: value over bound; a floor of a fraction: the shortfall
    // from 1 over the shortfall allowed; figures without a target: none.
    for line in [
        "idle_tcp peak_rss_mib (short): 0.20 of the allowance (30 of ≤ 150)",
        "idle_tcp udp_ratio (short): 0.40 of the allowance (0.980 for ≥ 0.95)",
        "idle_tcp tcp_new_ok (short): 0.00 of the allowance (35/35 for ≥ 0.5)",
        "soak rss_spread_pct (short): 1.20 of the allowance (12.0 of ≤ 10)",
    ] {
        assert!(stdout.contains(line), "no `{line}` in:\n{stdout}");
    }
    assert_eq!(stdout.matches(" of the allowance ").count(), 4, "{stdout}");
    assert!(
        stdout.contains("`abc1234`, short form, debug binary"),
        "{stdout}"
    );

    // Into a page, between its markers, leaving the rest alone.
    let page = d.join("PAGE.md");
    std::fs::write(
        &page,
        "# T\n<!-- torture:begin -->\nold\n<!-- torture:end -->\ntail\n",
    )
    .expect("page");
    let svg = d.join("h.svg");
    let page_arg = page.to_str().expect("utf-8");
    let svg_arg = svg.to_str().expect("utf-8");
    report_ok(&[
        "report",
        dirs,
        "--page",
        page_arg,
        "--svg",
        svg_arg,
        "--no-plots",
    ]);
    let written = std::fs::read_to_string(&page).expect("page");
    assert!(
        written.starts_with("# T\n<!-- torture:begin -->\n![")
            && written.ends_with("<!-- torture:end -->\ntail\n")
    );
    assert!(
        !written.contains("old") && written.contains("](h.svg)"),
        "{written}"
    );
}

#[test]
fn bad_runs_and_pages_get_one_line_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let dirs = d.to_str().expect("utf-8");
    report_refuses(&["report", dirs, "--print"], "no saved run");

    std::fs::create_dir(d.join("runs")).expect("mkdir");
    std::fs::write(d.join("runs/x.json"), "{not json").expect("write");
    report_refuses(
        &["report", dirs, "--print"],
        "x.json: not a saved torture run",
    );

    std::fs::write(
        d.join("runs/x.json"),
        r#"{"date": "2026-12-08T00:00:00Z", "form": "short", "scenarios": {"s": {"a": "1", "a.max": "2"}}}"#,
    )
    .expect("write");
    let page = d.join("PAGE.md");
    std::fs::write(&page, "no markers\n").expect("page");
    let page_arg = page.to_str().expect("utf-8");
    report_refuses(
        &["report", dirs, "--page", page_arg, "--no-plots"],
        "wants one `<!-- torture:begin -->` line",
    );
    assert_eq!(
        std::fs::read_to_string(&page).expect("page"),
        "no markers\n"
    );
}
