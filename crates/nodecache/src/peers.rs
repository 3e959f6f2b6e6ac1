//! Another server on our addresses: a process other than this one with a
//! socket bound to a `-localip` at the DNS port, read from the kernel's
//! socket tables (`/proc/net/{udp,udp6,tcp,tcp6}`, in the agent's network
//! namespace) and this process's descriptors (`/proc/self/fd`).
//!
//! Upstream's node-cache and clusterdns share the node's interface and
//! rules (the same rules, to the comment): during a DaemonSet update from
//! one to the other both run side by side, their CoreDNS sockets sharing
//! the ports through `SO_REUSEPORT`. Whichever stops first must not take
//! the interface and the rules from under the other, and neither may
//! remove the other's live rules as a crashed instance's leftovers. A
//! successor of ours that took our sockets over holds the same sockets,
//! so it does not count as another server; one that bound sockets of its
//! own does, which is as safe (it keeps the interception itself).

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The kernel's socket tables, read in this order.
const TABLES: [(&str, Proto); 4] = [
    ("/proc/net/udp", Proto::Udp),
    ("/proc/net/udp6", Proto::Udp),
    ("/proc/net/tcp", Proto::Tcp),
    ("/proc/net/tcp6", Proto::Tcp),
];

/// TCP_LISTEN in the tables' `st` column; a UDP socket's state is not
/// looked at (a bound one is a server's, whatever its state).
const TCP_LISTEN: u8 = 0x0a;

/// A socket's protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Udp,
    Tcp,
}

/// One socket of another process on one of our addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Socket {
    pub proto: Proto,
    pub local: SocketAddr,
    pub inode: u64,
}

impl std::fmt::Display for Socket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = match self.proto {
            Proto::Udp => "udp",
            Proto::Tcp => "tcp",
        };
        write!(f, "{p} {}", self.local)
    }
}

/// The sockets bound to `ips` at `port` (UDP, and TCP listening) that are
/// not this process's. Tables that cannot be read (a kernel without
/// IPv6) count as empty.
pub fn foreign(ips: &[IpAddr], port: u16) -> Vec<Socket> {
    let ours = own_inodes();
    let mut out = Vec::new();
    for (path, proto) in TABLES {
        if let Ok(text) = std::fs::read_to_string(path) {
            out.extend(
                parse(&text, proto)
                    .into_iter()
                    .filter(|s| s.local.port() == port && ips.contains(&s.local.ip()))
                    .filter(|s| !ours.contains(&s.inode)),
            );
        }
    }
    out
}

/// The inodes of the sockets this process holds.
fn own_inodes() -> HashSet<u64> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return HashSet::new();
    };
    dir.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|target| {
            let t = target.to_str()?;
            t.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect()
}

/// The bound sockets of one table (`/proc/net/tcp` and the like): for
/// TCP only the listening ones. Lines that do not parse are skipped.
pub fn parse(table: &str, proto: Proto) -> Vec<Socket> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local = address(f.get(1)?)?;
            let state = u8::from_str_radix(f.get(3)?, 16).ok()?;
            let inode = f.get(9)?.parse().ok()?;
            (proto == Proto::Udp || state == TCP_LISTEN).then_some(Socket {
                proto,
                local,
                inode,
            })
        })
        .collect()
}

/// `0A1414A9:0035` (IPv4) or 32 hex digits and a port (IPv6): the address
/// as the kernel prints it, its 32-bit words in host byte order.
fn address(s: &str) -> Option<SocketAddr> {
    let (ip, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        let w = u32::from_str_radix(ip.get(i * 8..i * 8 + 8)?, 16).ok()?;
        Some(w.to_ne_bytes())
    };
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip.to_canonical(), port))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A table line for `local`, as this machine's kernel prints it.
    fn hex(local: SocketAddr) -> String {
        let words = |b: &[u8]| -> String {
            b.chunks(4)
                .map(|c| format!("{:08X}", u32::from_ne_bytes([c[0], c[1], c[2], c[3]])))
                .collect()
        };
        let ip = match local.ip() {
            IpAddr::V4(a) => words(&a.octets()),
            IpAddr::V6(a) => words(&a.octets()),
        };
        format!("{ip}:{:04X}", local.port())
    }

    #[test]
    fn reads_bound_udp_and_listening_tcp_sockets() {
        let a: SocketAddr = "169.254.20.10:53".parse().unwrap();
        let b: SocketAddr = "[fd00:169::10]:53".parse().unwrap();
        let head = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n";
        let udp = format!(
            "{head}  1: {} 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4242 2 0 0\n",
            hex(a)
        );
        assert_eq!(
            parse(&udp, Proto::Udp),
            vec![Socket {
                proto: Proto::Udp,
                local: a,
                inode: 4242
            }]
        );
        // A listener, then an established connection on the same port.
        let tcp = format!(
            "{head}  0: {b} 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 7 1\n  \
             1: {b} 00000000000000000000000000000001:D431 01 00000000:00000000 00:00000000 00000000     0        0 8 1\n  \
             2: garbage\n",
            b = hex(b)
        );
        let got = parse(&tcp, Proto::Tcp);
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].local, got[0].inode), (b, 7));
    }

    #[test]
    fn a_socket_of_our_own_is_not_foreign_and_another_process_s_is() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = s.local_addr().unwrap().port();
        let lo = [IpAddr::V4(Ipv4Addr::LOCALHOST)];
        assert_eq!(foreign(&lo, port), Vec::new());
        // A child process holding a socket of its own on the same port.
        let held = std::process::Command::new("python3")
            .args([
                "-c",
                &format!(
                    "import socket,sys,time\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
                     s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\ns.bind(('127.0.0.2',{port}))\n\
                     print('up',flush=True)\ntime.sleep(30)"
                ),
            ])
            .stdout(std::process::Stdio::piped())
            .spawn();
        let Ok(mut held) = held else {
            eprintln!("skipped: no python3");
            return;
        };
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(held.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        let two = [IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))];
        let got = foreign(&two, port);
        let _ = held.kill();
        let _ = held.wait();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].local, SocketAddr::new(two[0], port));
        assert_eq!(foreign(&lo, port), Vec::new());
    }
}
