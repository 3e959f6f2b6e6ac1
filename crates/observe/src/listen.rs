//! The admin HTTP listeners' sockets (health, ready, metrics of every
//! job): their addresses in Go's `host:port` syntax ([`addr`]) and the
//! socket bound as Go's `net.Listen("tcp", addr)` binds it ([`tcp`]), so
//! the kubelet's probes and Prometheus reach them over whichever family
//! the Pod has. Knows nothing of HTTP: whatever serves the listener takes
//! a plain [`std::net::TcpListener`].

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, ToSocketAddrs};

use socket2::{Domain, Protocol, Socket, Type};

/// Splits `host:port` like Go's `net.SplitHostPort`.
fn split_host_port(s: &str) -> Result<(&str, &str), String> {
    let err = |why: &str| format!("address {s}: {why}");
    let Some(colon) = s.rfind(':') else {
        return Err(err("missing port in address"));
    };
    let (host, port) = (&s[..colon], &s[colon + 1..]);
    if let Some(rest) = host.strip_prefix('[') {
        let Some(inner) = rest.strip_suffix(']') else {
            return Err(err("missing ']' in address"));
        };
        if inner.contains(['[', ']']) {
            return Err(err("unexpected '[' in address"));
        }
        return Ok((inner, port));
    }
    if host.contains(':') {
        return Err(err("too many colons in address"));
    }
    if host.contains(['[', ']']) {
        return Err(err("unexpected ']' in address"));
    }
    Ok((host, port))
}

/// Checks `s` as Go does (`net.SplitHostPort`, then the port) and
/// resolves it to the address to listen on, with Go's error texts (which
/// CoreDNS prints for a bad `health`, `ready` or `prometheus` address).
/// An empty host is the IPv4 wildcard, which [`tcp`] makes dual-stack as
/// Go does; `localhost` is 127.0.0.1; of a name's addresses the first
/// IPv4 one is taken, as Go's `Listen` takes it.
pub fn addr(s: &str) -> Result<SocketAddr, String> {
    let (host, port) = split_host_port(s)?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("listen tcp {s}: unknown port {port:?}"))?;
    if host.is_empty() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port));
    }
    if host.eq_ignore_ascii_case("localhost") {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    let found: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map(Iterator::collect)
        .unwrap_or_default();
    found
        .iter()
        .find(|a| a.is_ipv4())
        .or(found.first())
        .copied()
        .ok_or_else(|| format!("listen tcp {s}: lookup {host}: no such host"))
}

/// A listening TCP socket for `addr`, as Go's `net.Listen("tcp", addr)`
/// makes it (`favoriteAddrFamily`): a wildcard address, `0.0.0.0` as much
/// as `[::]` (and so `:8080`), gets one IPv6 socket with `IPV6_V6ONLY`
/// off, which takes connections of both families; where the host has no
/// IPv6 the IPv4 wildcard gets an IPv4 socket instead, and `[::]` fails
/// as it does in Go. Any other address is bound as given. Non-blocking,
/// with `SO_REUSEADDR` and Go's backlog, as Go's listeners are, and
/// `SO_REUSEPORT`, as CoreDNS's (see [`exact`]).
pub fn tcp(addr: SocketAddr) -> io::Result<TcpListener> {
    // Go reads `::ffff:a.b.c.d` as the IPv4 address it holds.
    let addr = SocketAddr::new(addr.ip().to_canonical(), addr.port());
    if !addr.ip().is_unspecified() {
        return exact(addr, false);
    }
    let any = SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), addr.port());
    match exact(any, false) {
        Err(e) if addr.is_ipv4() && without_ipv6(&e) => exact(addr, false),
        bound => bound,
    }
}

/// A listening TCP socket on exactly `addr`: an IPv6 one with
/// `IPV6_V6ONLY` set to `only_v6`. With `SO_REUSEPORT`, as CoreDNS binds
/// its DNS, health, ready and metrics listeners (its `reuseport.Listen`):
/// a process of the same user that does the same, such as the
/// node-local-dns Pod a DaemonSet update starts beside the running one,
/// shares the port instead of failing to start.
pub fn exact(addr: SocketAddr, only_v6: bool) -> io::Result<TcpListener> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if addr.is_ipv6() {
        s.set_only_v6(only_v6)?;
    }
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    s.listen(backlog())?;
    Ok(s.into())
}

/// Whether binding an IPv6 socket failed because the host has no IPv6:
/// the kernel was built or booted without it (no AF_INET6 sockets), or
/// it cannot give the socket an address. Go finds the same out with a
/// probe socket before it picks the family.
fn without_ipv6(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EAFNOSUPPORT | libc::EPROTONOSUPPORT | libc::EADDRNOTAVAIL)
    )
}

/// The TCP accept backlog: the kernel's maximum, as Go (and so CoreDNS)
/// asks for, so a burst of connections waits in the queue rather than
/// having its SYNs dropped (a dropped SYN costs a client a 1 s retransmit).
pub fn backlog() -> i32 {
    std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(1024)
        .min(65535)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;
    use std::net::TcpStream;

    #[test]
    fn addresses_parse_and_fail_like_go() {
        let ok = |s: &str| addr(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(ok(":8080"), "0.0.0.0:8080".parse().unwrap());
        assert_eq!(ok("localhost:9153"), "127.0.0.1:9153".parse().unwrap());
        assert_eq!(ok("127.0.0.2:1"), "127.0.0.2:1".parse().unwrap());
        assert_eq!(ok("[::1]:8181"), "[::1]:8181".parse().unwrap());
        assert_eq!(ok("[::]:8181"), "[::]:8181".parse().unwrap());
        let err = |s: &str| addr(s).unwrap_err();
        assert_eq!(err("8080"), "address 8080: missing port in address");
        assert_eq!(err("::1:80"), "address ::1:80: too many colons in address");
        assert_eq!(err("[::1:80"), "address [::1:80: missing ']' in address");
        assert_eq!(err(":http2"), "listen tcp :http2: unknown port \"http2\"");
        assert_eq!(err(":99999"), "listen tcp :99999: unknown port \"99999\"");
    }

    /// Whether this host can bind an IPv6 socket at all (the machine's
    /// own answer, not one we choose).
    fn host_has_ipv6() -> bool {
        exact("[::1]:0".parse().unwrap(), true).is_ok()
    }

    /// What a client at `to` reads from a connection `l` accepted.
    fn round_trip(l: &TcpListener, to: SocketAddr) -> String {
        use std::io::Write as _;
        let mut c = TcpStream::connect(to).unwrap_or_else(|e| panic!("{to}: {e}"));
        l.set_nonblocking(false).unwrap();
        let (mut a, _) = l.accept().unwrap();
        a.write_all(format!("via {to}").as_bytes()).unwrap();
        drop(a);
        let mut got = String::new();
        c.read_to_string(&mut got).unwrap();
        got
    }

    #[test]
    fn wildcards_take_both_families() {
        for asked in [":0", "0.0.0.0:0", "[::]:0"] {
            let l = tcp(addr(asked).unwrap()).unwrap();
            let local = l.local_addr().unwrap();
            if !host_has_ipv6() {
                // Go's fallback: the IPv4 wildcard alone.
                assert_eq!(local.ip(), Ipv4Addr::UNSPECIFIED, "{asked}");
                continue;
            }
            assert_eq!(local.ip(), Ipv6Addr::UNSPECIFIED, "{asked}");
            assert!(!socket2::SockRef::from(&l).only_v6().unwrap(), "{asked}");
            for client in ["127.0.0.1", "::1"] {
                let to = SocketAddr::new(client.parse().unwrap(), local.port());
                assert_eq!(round_trip(&l, to), format!("via {to}"), "{asked}");
            }
        }
    }

    #[test]
    fn explicit_addresses_stay_as_given() {
        let l = tcp("127.0.0.1:0".parse().unwrap()).unwrap();
        assert_eq!(l.local_addr().unwrap().ip(), Ipv4Addr::LOCALHOST);
        let mapped = tcp("[::ffff:127.0.0.1]:0".parse().unwrap()).unwrap();
        assert_eq!(mapped.local_addr().unwrap().ip(), Ipv4Addr::LOCALHOST);
        if host_has_ipv6() {
            let l = tcp("[::1]:0".parse().unwrap()).unwrap();
            assert_eq!(l.local_addr().unwrap().ip(), Ipv6Addr::LOCALHOST);
        }
    }

    #[test]
    fn only_a_missing_ipv6_falls_back() {
        let os = io::Error::from_raw_os_error;
        assert!(without_ipv6(&os(libc::EAFNOSUPPORT)));
        assert!(without_ipv6(&os(libc::EPROTONOSUPPORT)));
        assert!(without_ipv6(&os(libc::EADDRNOTAVAIL)));
        // A port in use or a privileged port is the answer, not a reason
        // to try IPv4 alone.
        assert!(!without_ipv6(&os(libc::EADDRINUSE)));
        assert!(!without_ipv6(&os(libc::EACCES)));
    }

    #[test]
    fn a_port_in_use_is_an_error_not_a_fallback() {
        // Held without SO_REUSEPORT (as Go's plain `net.Listen` holds it).
        let held = TcpListener::bind("[::]:0").unwrap();
        let port = held.local_addr().unwrap().port();
        let e = tcp(SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), port)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
    }

    #[test]
    fn a_port_is_shared_with_reuseport_listeners() {
        // Another listener of ours, or CoreDNS's: both take connections.
        let first = tcp("0.0.0.0:0".parse().unwrap()).unwrap();
        let port = first.local_addr().unwrap().port();
        let second = tcp(SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), port)).unwrap();
        assert_eq!(second.local_addr().unwrap().port(), port);
        let exact_too = exact(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port), false).unwrap();
        drop((first, second, exact_too));
    }
}
