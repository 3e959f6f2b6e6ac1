//! Network namespaces for lab tests (shared/reference/nodelocal-netns-lab.md):
//! namespaces deleted on drop, veth links between them, commands and
//! threads run inside one. Every packet stays in namespaces the test made.

use std::process::Command;

/// Runs `args` and returns (success, stdout then stderr).
pub fn run(args: &[&str]) -> (bool, String) {
    let out = match Command::new(args[0]).args(&args[1..]).output() {
        Ok(out) => out,
        Err(e) => return (false, format!("{}: {e}", args[0])),
    };
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// Runs `cmd` with `sh -c`; panics with its output when it fails.
pub fn must(cmd: &str) {
    let (ok, out) = run(&["sh", "-c", cmd]);
    assert!(ok, "{cmd}: {out}");
}

/// A network namespace, deleted (with its interfaces) on drop.
#[derive(Debug)]
pub struct Netns {
    pub name: String,
}

impl Netns {
    /// `ip netns add NAME` with `lo` up; `None` (after saying why, or a
    /// failure with `CLUSTERDNS_REQUIRE_RIG=1`) where namespaces cannot be
    /// made (not root).
    pub fn new(name: &str) -> Option<Netns> {
        if !clusterdns_test_support::netns_add(name) {
            return None;
        }
        let ns = Netns { name: name.into() };
        ns.sh("ip link set lo up");
        Some(ns)
    }

    /// Runs `cmd` (`sh -c`) inside; panics when it fails.
    pub fn sh(&self, cmd: &str) {
        must(&format!("ip netns exec {} sh -c '{cmd}'", self.name));
    }

    /// Runs `cmd` (`sh -c`) inside: (success, output).
    pub fn try_sh(&self, cmd: &str) -> (bool, String) {
        run(&["ip", "netns", "exec", &self.name, "sh", "-c", cmd])
    }

    /// The words to put before a program to run it inside.
    pub fn exec(&self) -> [&str; 4] {
        ["ip", "netns", "exec", &self.name]
    }

    /// Links `self` (`dev`, `addr/prefix`) to `peer` (`peer_dev`,
    /// `peer_addr/prefix`) with a veth pair, both ends up.
    pub fn link(&self, dev: &str, addr: &str, peer: &Netns, peer_dev: &str, peer_addr: &str) {
        let (a, b) = (&self.name, &peer.name);
        must(&format!(
            "ip -n {a} link add {dev} type veth peer name {peer_dev} netns {b} && \
             ip -n {a} addr add {addr} dev {dev} && ip -n {a} link set {dev} up && \
             ip -n {b} addr add {peer_addr} dev {peer_dev} && ip -n {b} link set {peer_dev} up"
        ));
    }

    /// Runs `f` on a thread of its own moved into this namespace.
    pub fn within<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let ns = std::fs::File::open(format!("/run/netns/{}", self.name)).expect("open netns");
        std::thread::spawn(move || {
            use std::os::fd::AsRawFd;
            #[allow(unsafe_code)]
            // SAFETY: setns with an open namespace file moves only this thread.
            let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns");
            f()
        })
        .join()
        .expect("thread in the namespace")
    }

    /// The status of `GET path` on `addr` from inside (HTTP/1.0), 0 when
    /// the connection fails.
    pub fn http_status(&self, addr: std::net::SocketAddr, path: &str) -> u16 {
        let path = path.to_string();
        self.within(move || {
            use std::io::{Read, Write};
            let timeout = std::time::Duration::from_secs(2);
            let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, timeout) else {
                return 0;
            };
            let _ = s.set_read_timeout(Some(timeout));
            let _ = write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n");
            let mut buf = String::new();
            let _ = s.read_to_string(&mut buf);
            buf.split_whitespace()
                .nth(1)
                .and_then(|c| c.parse().ok())
                .unwrap_or(0)
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run(&["ip", "netns", "del", &self.name]);
    }
}
