//! What the torture scenarios (`tests/torture_*.rs`, issue 18) share: the
//! short/long switch, the one line of figures each prints, the process's
//! RSS, and dnsperf as the counting sender.

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// `CLUSTERDNS_TORTURE=long` selects the long form of every scenario; the
/// short form is part of the normal test suite.
pub fn long() -> bool {
    std::env::var("CLUSTERDNS_TORTURE").is_ok_and(|v| v == "long")
}

/// `short` or `long`, for the figures line.
pub fn form() -> &'static str {
    if long() { "long" } else { "short" }
}

/// Prints the scenario's one stdout line: `TORTURE <name>: k=v k=v …`.
pub fn report(name: &str, figures: &[(&str, String)]) {
    let mut line = format!("TORTURE {name}: form={}", form());
    for (k, v) in figures {
        let _ = write!(line, " {k}={v}");
    }
    println!("{line}");
}

/// The resident set size of `pid` in KiB (`VmRSS` of `/proc/PID/status`).
pub fn vmrss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// What dnsperf reported.
#[derive(Debug, Default, Clone)]
pub struct Perf {
    pub sent: u64,
    pub completed: u64,
    pub lost: u64,
    /// The `Response codes:` line (`NOERROR 1234 (100.00%)`).
    pub rcodes: String,
    /// The whole report, for failure messages.
    pub text: String,
}

impl Perf {
    /// Parses dnsperf's final report; `None` when it has none.
    pub fn parse(text: &str) -> Option<Perf> {
        let field = |prefix: &str| {
            text.lines()
                .find_map(|l| l.trim().strip_prefix(prefix))
                .map(|s| s.trim().to_string())
        };
        let count = |prefix: &str| -> Option<u64> {
            field(prefix)?.split_whitespace().next()?.parse().ok()
        };
        Some(Perf {
            sent: count("Queries sent:")?,
            completed: count("Queries completed:")?,
            lost: count("Queries lost:")?,
            rcodes: field("Response codes:").unwrap_or_default(),
            text: text.to_string(),
        })
    }

    /// Only this rcode was answered (or nothing at all).
    pub fn only(&self, rcode: &str) -> bool {
        self.rcodes.is_empty() || (self.rcodes.starts_with(rcode) && !self.rcodes.contains(','))
    }
}

/// dnsperf against `server:port` with the query file `queries` for `secs`
/// seconds at `qps`, over `tcp` or UDP, a 2 s timeout per query (a query
/// unanswered after it counts as lost); `wrap` prefixes the command (e.g.
/// `ip netns exec NS`). Started, not waited for: [`finish`].
pub fn dnsperf(
    wrap: &[&str],
    server: &str,
    port: u16,
    queries: &Path,
    secs: u32,
    qps: u32,
    tcp: bool,
) -> Child {
    let mut args: Vec<String> = wrap.iter().map(ToString::to_string).collect();
    args.push("dnsperf".into());
    for a in [
        "-s",
        server,
        "-p",
        &port.to_string(),
        "-l",
        &secs.to_string(),
    ] {
        args.push(a.into());
    }
    for a in ["-Q", &qps.to_string(), "-c", "2", "-t", "2"] {
        args.push(a.into());
    }
    if tcp {
        args.extend(["-m".into(), "tcp".into()]);
    }
    Command::new(&args[0])
        .args(&args[1..])
        .arg("-d")
        .arg(queries)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run dnsperf (apt-get install dnsperf)")
}

/// Waits for a [`dnsperf`] and parses its report (panics without one).
pub fn finish(child: Child) -> Perf {
    let out = child.wait_with_output().expect("wait for dnsperf");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Perf::parse(&text).unwrap_or_else(|| panic!("no dnsperf report:\n{text}"))
}
