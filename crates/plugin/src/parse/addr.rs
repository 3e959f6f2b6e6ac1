//! Listen addresses of the admin plugins (`health`, `ready`,
//! `prometheus`): Go's `host:port` syntax with its error messages.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};

use clusterdns_corefile::{ConfigError, Directive};

/// The single directive of a once-per-block admin plugin (`ready`,
/// `prometheus`) and its optional `ADDRESS` argument, resolved
/// (`default` when absent).
pub fn once_with_addr<'d>(
    dirs: &[&'d Directive],
    default: &str,
) -> Result<(&'d Directive, SocketAddr), ConfigError> {
    let d = super::once(dirs)?;
    let text = super::optional_arg(d)?.unwrap_or(default);
    let addr = listen_addr(text).map_err(|e| d.err(e))?;
    Ok((d, addr))
}

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

/// Checks `s` as CoreDNS's setup does (`net.SplitHostPort`) and resolves
/// it to the socket address to listen on. An empty host listens on every
/// IPv4 address; `localhost` is 127.0.0.1.
pub fn listen_addr(s: &str) -> Result<SocketAddr, String> {
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
    (host, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| format!("listen tcp {s}: lookup {host}: no such host"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects_like_go() {
        assert_eq!(
            listen_addr(":8080").unwrap(),
            "0.0.0.0:8080".parse().unwrap()
        );
        assert_eq!(
            listen_addr("localhost:9153").unwrap(),
            "127.0.0.1:9153".parse().unwrap()
        );
        assert_eq!(
            listen_addr("127.0.0.2:1").unwrap(),
            "127.0.0.2:1".parse().unwrap()
        );
        assert_eq!(
            listen_addr("[::1]:8181").unwrap(),
            "[::1]:8181".parse().unwrap()
        );
        assert_eq!(
            listen_addr("8080").unwrap_err(),
            "address 8080: missing port in address"
        );
        assert_eq!(
            listen_addr("::1:80").unwrap_err(),
            "address ::1:80: too many colons in address"
        );
        assert_eq!(
            listen_addr("[::1:80").unwrap_err(),
            "address [::1:80: missing ']' in address"
        );
        assert_eq!(
            listen_addr(":http2").unwrap_err(),
            "listen tcp :http2: unknown port \"http2\""
        );
        assert_eq!(
            listen_addr(":99999").unwrap_err(),
            "listen tcp :99999: unknown port \"99999\""
        );
    }
}
