//! The operational side of the differential harness: what operators,
//! dashboards and scripts see besides the DNS answers. Query log lines
//! compared field by field, process log lines, metric values and labels,
//! admin HTTP status codes and headers, and one-shot runs of a binary
//! (`-plugins`, `-version`, a broken Corefile).
//!
//! These run the reference CoreDNS binary directly on loopback ports, so
//! they need no Kubernetes rig: [`reference_coredns`] finds the binary
//! `scripts/rig build` links into `.rig/bin/` (the test skips without it,
//! unless `CLUSTERDNS_REQUIRE_RIG=1`, as with the rig itself).

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::process::ScratchDir;
use crate::rig::{REQUIRE_RIG_ENV, rig_dir, rig_required};

/// The reference CoreDNS binary (`.rig/bin/coredns`), or `None` with a
/// message on stderr when it has not been built. Panics instead when
/// `CLUSTERDNS_REQUIRE_RIG=1`.
pub fn reference_coredns() -> Option<PathBuf> {
    let p = rig_dir().join("bin").join("coredns");
    if p.exists() {
        return Some(p);
    }
    let msg = format!(
        "no reference CoreDNS at {}: run `scripts/rig build`",
        p.display()
    );
    if rig_required() {
        panic!("{msg} ({REQUIRE_RIG_ENV}=1 makes this a failure)");
    }
    eprintln!("SKIPPED: {msg}");
    None
}

/// Skips the current test (returns from it) when the reference CoreDNS
/// binary is absent; fails it when `CLUSTERDNS_REQUIRE_RIG=1`.
///
/// ```ignore
/// let coredns = clusterdns_test_support::coredns_or_skip!();
/// ```
#[macro_export]
macro_rules! coredns_or_skip {
    () => {
        match $crate::reference_coredns() {
            Some(path) => path,
            None => return,
        }
    };
}

/// One query log line in CoreDNS's common format, split into its fields:
/// `[INFO] REMOTE:PORT - ID "TYPE CLASS NAME PROTO SIZE DO BUFSIZE" RCODE
/// RFLAGS RSIZE DURATION`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// The whole line.
    pub line: String,
    /// Field name and value, in order.
    pub fields: Vec<(&'static str, String)>,
}

/// The names of the common format's fields, in order.
const LOG_FIELDS: [&str; 14] = [
    "level", "remote", "port", "id", "type", "class", "name", "proto", "size", "do", "bufsize",
    "rcode", "rflags", "rsize",
];

impl LogLine {
    /// Parses a line of the common log format; `None` for other lines.
    pub fn parse(line: &str) -> Option<LogLine> {
        let (level, rest) = line.split_once(' ')?;
        if !level.starts_with('[') {
            return None;
        }
        let (client, rest) = rest.split_once(" - ")?;
        let (remote, port) = client.rsplit_once(':')?;
        let (id, rest) = rest.split_once(" \"")?;
        let (question, rest) = rest.split_once("\" ")?;
        let q: Vec<&str> = question.split(' ').collect();
        let r: Vec<&str> = rest.split(' ').collect();
        if q.len() != 7 || r.len() != 4 || !r[3].ends_with('s') {
            return None;
        }
        let values = [level, remote, port, id]
            .into_iter()
            .chain(q)
            .chain(r[..3].iter().copied());
        let mut fields: Vec<(&'static str, String)> = LOG_FIELDS
            .iter()
            .copied()
            .zip(values.map(str::to_string))
            .collect();
        fields.push(("duration", r[3].to_string()));
        Some(LogLine {
            line: line.to_string(),
            fields,
        })
    }

    /// The value of `field`.
    pub fn get(&self, field: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| *k == field)
            .map(|(_, v)| v.as_str())
    }
}

/// The query log lines of a server's output, in order.
pub fn log_lines(output: &str) -> Vec<LogLine> {
    output.lines().filter_map(LogLine::parse).collect()
}

/// The question part of a line (type to bufsize): what pairs the lines of
/// the same query in two logs.
fn question_key(l: &LogLine) -> Vec<&str> {
    l.fields
        .iter()
        .filter(|(k, _)| {
            matches!(
                *k,
                "type" | "class" | "name" | "proto" | "size" | "do" | "bufsize"
            )
        })
        .map(|(_, v)| v.as_str())
        .collect()
}

/// Compares two query logs field by field. `ID` and `duration` never
/// count (they differ between any two runs), nor `port` unless
/// `fixed_port` (the queries were sent from the same source port).
/// Lines are paired by their question (the n-th line of a question with
/// the n-th of the same question), since both servers may print the line
/// of one query after the client has its reply and has sent the next.
/// Returns one line per difference, empty when they agree.
pub fn compare_log_lines(
    reference: &[LogLine],
    candidate: &[LogLine],
    fixed_port: bool,
) -> Vec<String> {
    let sorted = |lines: &[LogLine]| {
        let mut v = lines.to_vec();
        v.sort_by(|a, b| question_key(a).cmp(&question_key(b)));
        v
    };
    let (reference, candidate) = (&sorted(reference)[..], &sorted(candidate)[..]);
    let mut out = Vec::new();
    if reference.len() != candidate.len() {
        out.push(format!(
            "{} log lines in the reference, {} in the candidate",
            reference.len(),
            candidate.len()
        ));
    }
    for (i, (r, c)) in reference.iter().zip(candidate).enumerate() {
        for ((k, a), (_, b)) in r.fields.iter().zip(&c.fields) {
            let skip = matches!(*k, "id" | "duration") || (*k == "port" && !fixed_port);
            if !skip && a != b {
                out.push(format!(
                    "line {i} field {k}: reference {a:?}, candidate {b:?}\n  reference: {}\n  candidate: {}",
                    r.line, c.line
                ));
            }
        }
    }
    out
}

/// The lines of a server's output that are not query log lines (start-up,
/// reload and shutdown messages), in order.
pub fn process_lines(output: &str) -> Vec<String> {
    output
        .lines()
        .filter(|l| LogLine::parse(l).is_none())
        .map(str::to_string)
        .collect()
}

/// A metric sample's identity: its name and its labels, sorted.
pub type SeriesKey = (String, Vec<(String, String)>);

/// Parses the Prometheus text format into samples (label values without
/// escapes, as CoreDNS's are).
pub fn metric_samples(text: &str) -> BTreeMap<SeriesKey, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (name, labels) = match series.split_once('{') {
            Some((n, rest)) => (n, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        let mut ls: Vec<(String, String)> = labels
            .split("\",")
            .filter(|s| !s.is_empty())
            .filter_map(|kv| kv.split_once("=\""))
            .map(|(k, v)| (k.to_string(), v.trim_end_matches('"').to_string()))
            .collect();
        ls.sort();
        out.insert((name.to_string(), ls), value.parse().unwrap_or(f64::NAN));
    }
    out
}

/// Compares the samples of every metric whose name starts with one of
/// `prefixes`, labels and values. In label values each server's own DNS
/// port is replaced by `PORT` first (the two listen on different ports).
/// Samples of `_seconds` histograms compare only their `_count` (times
/// differ). Returns one line per difference.
pub fn compare_metrics(
    reference: &str,
    reference_port: u16,
    candidate: &str,
    candidate_port: u16,
    prefixes: &[&str],
) -> Vec<String> {
    let pick = |text: &str, port: u16| -> BTreeMap<SeriesKey, f64> {
        metric_samples(text)
            .into_iter()
            .filter(|((n, _), _)| prefixes.iter().any(|p| n.starts_with(p)))
            .filter(|((n, _), _)| {
                !(n.contains("_seconds") && (n.ends_with("_bucket") || n.ends_with("_sum")))
            })
            .map(|((n, ls), v)| {
                let ls = ls
                    .into_iter()
                    .map(|(k, v)| (k, v.replace(&format!(":{port}"), ":PORT")))
                    .collect();
                ((n, ls), v)
            })
            .collect()
    };
    let (r, c) = (
        pick(reference, reference_port),
        pick(candidate, candidate_port),
    );
    let show = |(n, ls): &SeriesKey| {
        let ls: Vec<String> = ls.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
        format!("{n}{{{}}}", ls.join(","))
    };
    let mut out = Vec::new();
    for (k, a) in &r {
        match c.get(k) {
            None => out.push(format!("only in reference: {} {a}", show(k))),
            Some(b) if a != b => out.push(format!("{}: reference {a}, candidate {b}", show(k))),
            Some(_) => {}
        }
    }
    for (k, b) in &c {
        if !r.contains_key(k) {
            out.push(format!("only in candidate: {} {b}", show(k)));
        }
    }
    out
}

/// An HTTP response: status, headers (names lowercase, in order), body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpResponse {
    /// The status code; 0 when the connection failed or was refused.
    pub status: u16,
    /// Header names (lowercase) and values.
    pub headers: Vec<(String, String)>,
    /// The body as sent (not decoded).
    pub body: Vec<u8>,
    /// Whether the server closed the connection (end of file or a reset)
    /// before a whole response came; `false` when it came, or when the
    /// wait ran out with the connection still open.
    pub closed: bool,
}

impl HttpResponse {
    /// The body as text (lossy UTF-8).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The value of header `name` (any case), if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// `GET path` at `addr`: [`http_request`] with no extra headers.
pub fn http_get(addr: SocketAddr, path: &str) -> HttpResponse {
    http_request(addr, "GET", path, &[])
}

/// Sends one HTTP/1.1 request with `headers` and reads one response: to
/// its `Content-Length`, the last chunk of a chunked body, the end of the
/// head for `HEAD`, else until the server closes.
pub fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> HttpResponse {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    http_exchange(
        addr,
        req.as_bytes(),
        method == "HEAD",
        Duration::from_secs(3),
    )
}

/// Sends `request`, any bytes (the hostile tests' malformed and oversized
/// heads), and reads one response as [`http_request`] does (the head only
/// when `head`), each read waiting at most `wait`. What the server does
/// not read is not waited for: a write that fails or blocks for `wait`
/// ends the sending, and the reading starts.
pub fn http_exchange(addr: SocketAddr, request: &[u8], head: bool, wait: Duration) -> HttpResponse {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else {
        return HttpResponse::default();
    };
    let _ = s.set_read_timeout(Some(wait));
    let _ = s.set_write_timeout(Some(wait));
    let _ = s.write_all(request);
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut closed = false;
    loop {
        match s.read(&mut chunk) {
            Ok(0) => closed = true,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            // The wait ran out: the connection is still open.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                break;
            }
            Err(_) => closed = true,
        }
        if closed || complete(&buf, head) == Some(true) {
            break;
        }
    }
    let mut r = parse_http(&buf);
    r.closed = closed;
    r
}

/// Whether `buf` holds a whole response (headers, and a body as long as
/// its Content-Length); `None` while the headers are incomplete.
fn complete(buf: &[u8], head: bool) -> Option<bool> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    if head {
        return Some(true);
    }
    let text = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    if text.contains("\r\ntransfer-encoding: chunked") {
        return Some(buf.ends_with(b"\r\n0\r\n\r\n") || buf[end + 4..].starts_with(b"0\r\n\r\n"));
    }
    let len = text
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok());
    // Neither length nor chunks: the body ends when the server closes.
    Some(len.is_some_and(|n| buf.len() >= end + 4 + n))
}

fn parse_http(buf: &[u8]) -> HttpResponse {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return HttpResponse::default();
    };
    let head = String::from_utf8_lossy(&buf[..end]);
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut r = HttpResponse {
        status,
        headers,
        body: buf[end + 4..].to_vec(),
        closed: false,
    };
    if r.header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        r.body = dechunk(&r.body);
    }
    r
}

/// The body of a chunked transfer encoding (chunk extensions and
/// trailers ignored).
fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = body.windows(2).position(|w| w == b"\r\n") {
        let size = String::from_utf8_lossy(&body[..eol]);
        let size = size.split(';').next().unwrap_or("").trim();
        let Ok(n) = usize::from_str_radix(size, 16) else {
            break;
        };
        let start = eol + 2;
        if n == 0 || body.len() < start + n {
            break;
        }
        out.extend_from_slice(&body[start..start + n]);
        body = body.get(start + n + 2..).unwrap_or(&[]);
    }
    out
}

/// The result of running a binary to completion.
#[derive(Debug, Clone)]
pub struct RunOutput {
    /// The exit code (`None` when killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// Runs `program args…` to completion (for `-plugins`, `-version`).
pub fn run(program: &Path, args: &[&str]) -> io::Result<RunOutput> {
    let out = Command::new(program).args(args).output()?;
    Ok(RunOutput {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// Drops `FILE:LINE - Error during parsing: ` from `line`: clusterdns
/// names the place of every setup error, CoreDNS of some (README,
/// Differences from CoreDNS).
pub fn without_location(line: &str) -> String {
    match line.find(" - Error during parsing: ") {
        Some(i) => {
            let head = &line[..i];
            let start = head.rfind(' ').map_or(0, |j| j + 1);
            let rest = &line[i + " - Error during parsing: ".len()..];
            format!("{}{rest}", &line[..start])
        }
        None => line.to_string(),
    }
}

/// Runs `program -conf FILE` on `corefile` that is expected to fail, and
/// returns what it printed, stdout then stderr, with the Corefile's path
/// replaced by `Corefile`. `None` when the program was still running
/// after `wait` (it accepted the Corefile), in which case it is killed.
pub fn run_corefile(program: &Path, corefile: &str, wait: Duration) -> io::Result<Option<String>> {
    let dir = ScratchDir::new("corefile-error")?;
    let path = dir.path().join("Corefile");
    std::fs::write(&path, corefile)?;
    let mut child = Command::new(program)
        .arg("-conf")
        .arg(&path)
        .current_dir(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let deadline = std::time::Instant::now() + wait;
    loop {
        if child.try_wait()?.is_some() {
            break;
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(Some(text.replace(&path.display().to_string(), "Corefile")))
}

/// What a server printed about a Corefile it refused: its first line that
/// is not Go's start-up noise (`maxprocs:`) or blank.
pub fn error_line(out: &str) -> String {
    out.lines()
        .find(|l| !l.starts_with("maxprocs:") && !l.trim().is_empty())
        .unwrap_or("")
        .to_string()
}

/// [`error_line`] with CoreDNS's doubled `plugin/NAME: ` prefix (its
/// setups wrap their parse errors twice) said once, a difference the
/// plugins' READMEs list.
pub fn refusal_line(out: &str) -> String {
    let line = error_line(out);
    match line.split_once(": ") {
        Some((head, rest))
            if head.starts_with("plugin/") && rest.starts_with(&format!("{head}: ")) =>
        {
            rest.to_string()
        }
        _ => line,
    }
}

/// Runs each Corefile of `cases` (`@P@` replaced by a free port) with the
/// reference and the candidate: both must refuse it with the same text
/// ([`refusal_line`]) or both start. The cases that differ. The candidate
/// names the place of every setup error, CoreDNS of some (`c.Errf`, with
/// ` - `): without a place in CoreDNS's text, ours is compared without it.
pub fn setup_errors_differ(reference: &Path, candidate: &Path, cases: &[&str]) -> Vec<String> {
    let mut failed = Vec::new();
    for case in cases {
        let run = |program: &Path| {
            let port = crate::free_port().expect("a free port").to_string();
            let text = case.replace("@P@", &port);
            run_corefile(program, &text, Duration::from_millis(1500)).expect("run")
        };
        let (theirs, ours) = (run(reference), run(candidate));
        let (t, o) = (
            theirs.map_or("started".into(), |t| refusal_line(&t)),
            ours.map_or("started".into(), |o| refusal_line(&o)),
        );
        let o = if t.contains(" - ") {
            o
        } else {
            without_location(&o)
        };
        if t != o {
            failed.push(format!("{case:?}\n  coredns:    {t}\n  clusterdns: {o}"));
        }
    }
    failed
}

/// Asserts that [`setup_errors_differ`] finds no case of `cases` that
/// differs (the failure lists those that do).
#[track_caller]
pub fn assert_setup_errors_agree(reference: &Path, candidate: &Path, cases: &[&str]) {
    let d = setup_errors_differ(reference, candidate, cases);
    assert!(d.is_empty(), "{}", d.join("\n"));
}

/// Asserts that [`block_setup_errors_differ`] finds no body of `bodies`
/// that differs (the failure lists those that do).
#[track_caller]
pub fn assert_block_setup_errors_agree(reference: &Path, candidate: &Path, bodies: &[&str]) {
    let d = block_setup_errors_differ(reference, candidate, bodies);
    assert!(d.is_empty(), "{}", d.join("\n"));
}

/// [`setup_errors_differ`] on each of `bodies` (directives, lines after
/// the first indented by four) in a block `.:PORT { BODY whoami }`.
pub fn block_setup_errors_differ(
    reference: &Path,
    candidate: &Path,
    bodies: &[&str],
) -> Vec<String> {
    let cases: Vec<String> = bodies
        .iter()
        .map(|body| format!(".:@P@ {{\n    {body}\n    whoami\n}}\n"))
        .collect();
    let cases: Vec<&str> = cases.iter().map(String::as_str).collect();
    setup_errors_differ(reference, candidate, &cases)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = r#"[INFO] 127.0.0.1:40001 - 2797 "A IN a.test. udp 47 false 1232" NOERROR qr,aa,rd 46 0.000030307s"#;

    #[test]
    fn log_lines_split_into_fields() {
        let l = LogLine::parse(LINE).expect("parses");
        assert_eq!(l.get("remote"), Some("127.0.0.1"));
        assert_eq!(l.get("port"), Some("40001"));
        assert_eq!(l.get("name"), Some("a.test."));
        assert_eq!(l.get("rsize"), Some("46"));
        assert_eq!(l.get("duration"), Some("0.000030307s"));
        assert!(LogLine::parse("[INFO] plugin/reload: Running configuration SHA512 = x").is_none());
        assert!(LogLine::parse("CoreDNS-1.14.7").is_none());
    }

    #[test]
    fn only_id_port_and_duration_may_differ() {
        let a = log_lines(LINE);
        let b = log_lines(
            &LINE
                .replace("2797", "1")
                .replace("40001", "5")
                .replace("0.000030307s", "1s"),
        );
        assert!(compare_log_lines(&a, &b, false).is_empty());
        assert_eq!(
            compare_log_lines(&a, &b, true).len(),
            1,
            "the port counts when fixed"
        );
        let c = log_lines(&LINE.replace(" 46 ", " 40 "));
        let d = compare_log_lines(&a, &c, false);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(d[0].contains("rsize"), "{d:?}");
        assert_eq!(compare_log_lines(&a, &[], false).len(), 1);
    }

    #[test]
    fn metrics_compare_values_and_labels() {
        let a = "# TYPE x counter\nx{server=\"dns://:53\",plugin=\"cache\"} 3\ny 1\nd_seconds_sum{a=\"1\"} 0.1\nd_seconds_count{a=\"1\"} 2\n";
        let b = "x{plugin=\"cache\",server=\"dns://:54\"} 3\nd_seconds_sum{a=\"1\"} 0.3\nd_seconds_count{a=\"1\"} 2\n";
        assert!(compare_metrics(a, 53, b, 54, &["x", "d_"]).is_empty());
        let c = "x{plugin=\"log\",server=\"dns://:54\"} 3\nd_seconds_count{a=\"1\"} 1\n";
        let d = compare_metrics(a, 53, c, 54, &["x", "d_"]);
        assert_eq!(d.len(), 3, "{d:#?}");
    }

    #[test]
    fn http_responses_parse() {
        let r = parse_http(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nDate: x\r\n\r\nOK");
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-length"), Some("2"));
        assert_eq!(r.body, b"OK");
        assert_eq!(
            complete(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nO", false),
            Some(false)
        );
        assert_eq!(complete(b"HTTP/1.1 200 OK\r\n", false), None);
        let r = parse_http(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x\r\nde\r\n0\r\n\r\n",
        );
        assert_eq!(r.body, b"abcde");
    }
}
