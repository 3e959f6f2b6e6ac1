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
    /// The upstream Service's ClusterIP, where the link-local addresses'
    /// queries go while no socket of ours exists.
    fallback: Option<IpAddr>,
}

/// The packet and conntrack mark bit of a query the fallback rewrote, so
/// its replies get the link-local source back. Chosen clear of the bits
/// kube-proxy (0x4000, 0x8000), Calico (0xffff0000), Cilium (0x0f00),
/// the AWS VPC CNI (0x80) and Istio (0x539) use.
pub const FALLBACK_MARK: u32 = 0x2000;

/// Whether `ip` is link-local (169.254.0.0/16, fe80::/10): the addresses
/// nothing but us answers, which need the fallback (a ClusterIP among
/// `-localip` falls back through kube-proxy by itself).
pub fn link_local(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => a.is_link_local(),
        IpAddr::V6(a) => a.segments()[0] & 0xffc0 == 0xfe80,
    }
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
            fallback: None,
        }
    }

    /// With the link-local fallback to `upstream` (the upstream Service's
    /// ClusterIP, of the same family) for the first link-local address,
    /// when there is one.
    pub fn with_fallback(mut self, upstream: Option<IpAddr>) -> Self {
        self.fallback = upstream
            .filter(|u| u.is_ipv6() == (self.family == "ip6") && self.ips.iter().any(link_local));
        self
    }

    /// The upstream Service the link-local addresses fall back to.
    pub fn fallback(&self) -> Option<IpAddr> {
        self.fallback
    }

    /// The table's body, as `nft list table` prints it (so a listing can
    /// be compared with it).
    pub fn table(&self) -> String {
        // nft lists a set's elements sorted.
        let set = |ips: &[IpAddr]| {
            let mut ips = ips.to_vec();
            ips.sort();
            ips.dedup();
            let set = ips
                .iter()
                .map(IpAddr::to_string)
                .collect::<Vec<_>>()
                .join(", ");
            if ips.len() == 1 {
                set
            } else {
                format!("{{ {set} }}")
            }
        };
        let all = set(&self.ips);
        let a = self.family;
        let (p, h) = (self.dns_port, self.health_port);
        // prerouting: a query is untracked (so kube-proxy's DNAT does not
        // apply and it is delivered to the address on our link) only if a
        // socket is bound for it; `accept` then skips the fallback below.
        // output: our replies, and the health probe, untracked as
        // upstream does. Host-originated queries get no NOTRACK: at the
        // output hook the socket match would find the client's own
        // socket, so it cannot tell whether we are alive.
        let mut t = format!(
            "table {a} {TABLE} {{\n\
             \tchain prerouting {{\n\
             \t\ttype filter hook prerouting priority raw; policy accept;\n\
             \t\t{a} daddr {all} udp dport {p} socket transparent 0 notrack accept\n\
             \t\t{a} daddr {all} tcp dport {p} socket transparent 0 notrack accept\n"
        );
        let mut chains = String::new();
        if let Some(up) = self.fallback {
            // The link-local fallback: with no socket of ours, the query's
            // destination becomes the upstream Service before conntrack
            // sees it (so kube-proxy's DNAT sends it on: a DNAT of ours
            // could not be translated again), marked so that its
            // connection is; the replies, once conntrack has put the
            // ClusterIP back as their source, get the link-local address
            // the client asked.
            // One address only: the reply's source must be the one asked,
            // and the mark cannot say which of several it was.
            let ll = self.ips.iter().copied().find(link_local).unwrap_or(up);
            let m = format!("0x{FALLBACK_MARK:08x}");
            let keep = format!("0x{:08x}", !FALLBACK_MARK);
            for proto in ["udp", "tcp"] {
                t.push_str(&format!(
                    "\t\t{a} daddr {ll} {proto} dport {p} meta mark set meta mark | {m} {a} daddr set {up}\n"
                ));
            }
            chains = format!(
                "\n\
                 \tchain fallback_mark {{\n\
                 \t\ttype filter hook prerouting priority mangle; policy accept;\n\
                 \t\tmeta mark & {m} == {m} ct mark set ct mark | {m} meta mark set meta mark & {keep}\n\
                 \t}}\n\
                 \n\
                 \tchain fallback_reply {{\n\
                 \t\ttype filter hook postrouting priority srcnat + 1; policy accept;\n\
                 \t\tct direction reply ct mark & {m} == {m} {a} saddr set {ll}\n\
                 \t}}\n"
            );
        }
        t.push_str(&format!(
            "\t}}\n\
             {chains}\
             \n\
             \tchain output {{\n\
             \t\ttype filter hook output priority raw; policy accept;\n\
             \t\t{a} saddr {all} udp sport {p} notrack\n\
             \t\t{a} saddr {all} tcp sport {p} notrack\n\
             \t\t{a} saddr {all} tcp sport {h} notrack\n\
             \t\t{a} daddr {all} tcp dport {h} notrack\n\
             \t}}\n\
             }}\n"
        ));
        t
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
            "\t\tip daddr { 10.96.0.10, 169.254.20.10 } udp dport 53 socket transparent 0 notrack accept\n"
        ));
        assert!(!t.contains("fallback"));
        let up = Some("10.96.0.11".parse().expect("ip"));
        let f = CrashSafe::new(&ips, 53, 8080).with_fallback(up).table();
        assert!(f.contains(
            "\t\tip daddr 169.254.20.10 tcp dport 53 meta mark set meta mark | 0x00002000 ip daddr set 10.96.0.11\n"
        ));
        assert!(f.contains(
            "\t\tct direction reply ct mark & 0x00002000 == 0x00002000 ip saddr set 169.254.20.10\n"
        ));
        // No link-local address, or another family: no fallback.
        let cluster_only = CrashSafe::new(&ips[1..], 53, 8080).with_fallback(up);
        assert_eq!(cluster_only.fallback(), None);
        let v6up = Some("fd00::11".parse().expect("ip"));
        assert_eq!(
            CrashSafe::new(&ips, 53, 8080)
                .with_fallback(v6up)
                .fallback(),
            None
        );
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
