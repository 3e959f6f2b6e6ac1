//! Helpers of the operational plugins' tests (health, ready, prometheus,
//! reload, log): plain HTTP GET, metric lookup, the reference CoreDNS.
#![allow(dead_code)]

use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// `GET path` on 127.0.0.1:port over HTTP/1.0 (so Go servers send no
/// chunked body): (status, body). Status 0 when the
/// connection fails.
pub fn get(port: u16, path: &str) -> (u16, String) {
    get_at(SocketAddr::from((Ipv4Addr::LOCALHOST, port)), path)
}

/// [`get`] at any address.
pub fn get_at(addr: SocketAddr, path: &str) -> (u16, String) {
    let r = clusterdns_test_support::http_get(addr, path);
    (r.status, r.text())
}

/// Polls `GET path` until it gives a status, for up to 10 s.
pub fn get_ok(port: u16, path: &str) -> (u16, String) {
    get_ok_at(SocketAddr::from((Ipv4Addr::LOCALHOST, port)), path)
}

/// [`get_ok`] at any address.
pub fn get_ok_at(addr: SocketAddr, path: &str) -> (u16, String) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = get_at(addr, path);
        if r.0 != 0 || Instant::now() > deadline {
            return r;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `GET path` on `port` of 127.0.0.1 and of ::1, each polled as
/// [`get_ok`]: what each family answered, IPv4 first.
pub fn get_both(port: u16, path: &str) -> [(u16, String); 2] {
    [
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(Ipv6Addr::LOCALHOST),
    ]
    .map(|ip| get_ok_at(SocketAddr::new(ip, port), path))
}

/// One sample of a metrics text: name and label set (sorted), value.
pub type Sample = (String, Vec<(String, String)>, f64);

/// Parses the Prometheus text format (the harness's parser).
pub fn samples(text: &str) -> Vec<Sample> {
    clusterdns_test_support::metric_samples(text)
        .into_iter()
        .map(|((name, labels), value)| (name, labels, value))
        .collect()
}

/// The value of `name` with exactly these labels (any order).
pub fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut want: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    want.sort();
    samples(text)
        .into_iter()
        .find(|(n, l, _)| n == name && *l == want)
        .map(|(_, _, v)| v)
}

/// The reference CoreDNS built by `scripts/rig build`, when present.
pub fn coredns() -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.rig/bin/coredns");
    p.exists().then_some(p)
}

/// A running reference CoreDNS, killed on drop.
pub struct CoreDns {
    pub child: Child,
    pub dir: tempfile::TempDir,
}

impl CoreDns {
    /// Starts `bin` on `corefile` and waits until `port` answers over UDP.
    pub fn start(bin: &PathBuf, corefile: &str, port: u16) -> CoreDns {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("Corefile");
        std::fs::write(&path, corefile).expect("write Corefile");
        let child = crate::common::spawn_conf(Command::new(bin), &path);
        let sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .expect("timeout");
        // A query for "." (it may be REFUSED; any answer means up).
        let probe = [0xab, 0xcd, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1];
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut buf = [0u8; 512];
        while Instant::now() < deadline {
            let _ = sock.send_to(&probe, ("127.0.0.1", port));
            if sock.recv_from(&mut buf).is_ok() {
                break;
            }
        }
        CoreDns { child, dir }
    }

    /// Stops it (SIGTERM, so buffered log lines are written) and returns
    /// its standard output.
    pub fn stop(mut self) -> String {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
        let mut out = String::new();
        if let Some(mut o) = self.child.stdout.take() {
            let _ = o.read_to_string(&mut out);
        }
        out
    }
}

impl Drop for CoreDns {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The rcode of a dig or kdig reply (`status: NOERROR,` / `status: NOERROR;`).
pub fn rcode(out: &str) -> String {
    out.split("status: ")
        .nth(1)
        .and_then(|s| s.split([',', ';']).next())
        .unwrap_or("")
        .to_string()
}
