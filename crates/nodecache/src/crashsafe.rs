//! Crash-safe interception (beyond upstream): an nftables table of our
//! own whose NOTRACK rule matches a query only while a socket of ours is
//! bound to its address (`socket transparent 0`). When the process dies
//! — kill -9, OOM, a panic — its sockets close, the rule stops matching
//! at once, and queries to the ClusterIP go through kube-proxy to the
//! cluster DNS again, with no teardown code running.
//!
//! The table is installed and replaced by one `nft -f` batch, which the
//! kernel applies as one netlink transaction: there is never a moment
//! with half a table.

use std::net::IpAddr;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

/// The table's name (family `ip` or `ip6`).
pub const TABLE: &str = "clusterdns_nodecache";

/// The crash-safe table for one address family.
#[derive(Debug, Clone)]
pub struct CrashSafe {
    family: &'static str,
    ips: Vec<IpAddr>,
    dns_port: u16,
    health_port: u16,
}

impl CrashSafe {
    /// The table for `ips` (one family, as `-localip` guarantees).
    pub fn new(ips: &[IpAddr], dns_port: u16, health_port: u16) -> Self {
        let family = if ips.first().is_some_and(IpAddr::is_ipv6) {
            "ip6"
        } else {
            "ip"
        };
        CrashSafe {
            family,
            ips: ips.to_vec(),
            dns_port,
            health_port,
        }
    }

    /// The table's body, as `nft list table` prints it (so a listing can
    /// be compared with it).
    pub fn table(&self) -> String {
        // nft lists a set's elements sorted.
        let mut ips = self.ips.clone();
        ips.sort();
        ips.dedup();
        let set = ips
            .iter()
            .map(IpAddr::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        let set = if ips.len() == 1 {
            set
        } else {
            format!("{{ {set} }}")
        };
        let a = self.family;
        let (p, h) = (self.dns_port, self.health_port);
        // prerouting: a query is untracked (so kube-proxy's DNAT does not
        // apply and it is delivered to the address on our link) only if a
        // socket is bound for it. output: our replies, and the health
        // probe, untracked as upstream does. Host-originated queries get
        // no NOTRACK: at the output hook the socket match would find the
        // client's own socket, so it cannot tell whether we are alive.
        format!(
            "table {a} {TABLE} {{\n\
             \tchain prerouting {{\n\
             \t\ttype filter hook prerouting priority raw; policy accept;\n\
             \t\t{a} daddr {set} udp dport {p} socket transparent 0 notrack\n\
             \t\t{a} daddr {set} tcp dport {p} socket transparent 0 notrack\n\
             \t}}\n\
             \n\
             \tchain output {{\n\
             \t\ttype filter hook output priority raw; policy accept;\n\
             \t\t{a} saddr {set} udp sport {p} notrack\n\
             \t\t{a} saddr {set} tcp sport {p} notrack\n\
             \t\t{a} saddr {set} tcp sport {h} notrack\n\
             \t\t{a} daddr {set} tcp dport {h} notrack\n\
             \t}}\n\
             }}\n"
        )
    }

    /// The batch that creates or replaces the table atomically: declare
    /// it (so the delete never fails), delete it, define it again.
    pub fn batch(&self) -> String {
        let a = self.family;
        format!(
            "table {a} {TABLE}\ndelete table {a} {TABLE}\n{}",
            self.table()
        )
    }

    async fn nft(args: &[&str], stdin: Option<&str>) -> Result<String, String> {
        let mut cmd = Command::new("nft");
        cmd.args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| format!("nft: {e}"))?;
        if let Some(mut w) = child.stdin.take() {
            if let Some(s) = stdin {
                w.write_all(s.as_bytes())
                    .await
                    .map_err(|e| format!("nft: {e}"))?;
            }
            drop(w);
        }
        let out = child
            .wait_with_output()
            .await
            .map_err(|e| format!("nft: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "nft {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// Whether the kernel and `nft` accept the table (a check-only
    /// transaction: nothing changes).
    pub async fn supported(&self) -> Result<(), String> {
        Self::nft(&["-c", "-f", "-"], Some(&self.batch()))
            .await
            .map(drop)
    }

    /// Installs or replaces the table in one transaction.
    pub async fn install(&self) -> Result<(), String> {
        Self::nft(&["-f", "-"], Some(&self.batch())).await.map(drop)
    }

    /// The table as the kernel lists it, `None` when absent.
    pub async fn listed(&self) -> Option<String> {
        Self::nft(&["list", "table", self.family, TABLE], None)
            .await
            .ok()
    }

    /// Whether the kernel's table is exactly ours.
    pub async fn intact(&self) -> bool {
        self.listed().await.as_deref() == Some(self.table().as_str())
    }

    /// Deletes the table (absent is fine).
    pub async fn remove(&self) -> Result<(), String> {
        if self.listed().await.is_none() {
            return Ok(());
        }
        Self::nft(&["delete", "table", self.family, TABLE], None)
            .await
            .map(drop)
    }
}

/// A socket bound to the wildcard address on `port` (someone else's: our
/// server binds the `-localip` addresses), which would satisfy the socket
/// match for every address and so keep intercepting after we die. Returns
/// the `/proc/net` file and line that show it.
pub fn wildcard_listener(port: u16) -> Option<String> {
    let hex = format!(":{port:04X}");
    for (file, wild) in [
        ("/proc/thread-self/net/udp", "00000000"),
        ("/proc/thread-self/net/tcp", "00000000"),
        (
            "/proc/thread-self/net/udp6",
            "00000000000000000000000000000000",
        ),
        (
            "/proc/thread-self/net/tcp6",
            "00000000000000000000000000000000",
        ),
    ] {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let mut f = line.split_whitespace();
            let (Some(_), Some(local), Some(_), Some(state)) =
                (f.next(), f.next(), f.next(), f.next())
            else {
                continue;
            };
            // TCP: only listeners (state 0A) count; UDP: any bound socket.
            if file.contains("tcp") && state != "0A" {
                continue;
            }
            if local == format!("{wild}{hex}") {
                return Some(format!("{file}: {}", line.trim()));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_text() {
        let ips: Vec<IpAddr> = vec![
            "169.254.20.10".parse().expect("ip"),
            "10.96.0.10".parse().expect("ip"),
        ];
        let t = CrashSafe::new(&ips, 53, 8080).table();
        assert!(t.contains(
            "\t\tip daddr { 10.96.0.10, 169.254.20.10 } udp dport 53 socket transparent 0 notrack\n"
        ));
        let one = CrashSafe::new(&["fd00::10".parse().expect("ip")], 53, 8080);
        assert!(one.table().starts_with("table ip6 clusterdns_nodecache {"));
        assert!(
            one.table()
                .contains("ip6 saddr fd00::10 udp sport 53 notrack")
        );
        assert!(one.batch().starts_with(
            "table ip6 clusterdns_nodecache\ndelete table ip6 clusterdns_nodecache\ntable ip6"
        ));
    }
}
