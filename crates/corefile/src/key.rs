//! Server keys `[SCHEME://]ZONE[:PORT]` and zone names (CoreDNS `normalize.go`, `cidr.go`).

use std::fmt;
use std::net::IpAddr;

use crate::{ConfigError, Token};

/// The transport a server block listens on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// `dns://`, the default: UDP and TCP.
    Dns,
    /// `tls://`: DNS over TLS.
    Tls,
    /// `quic://`: DNS over QUIC.
    Quic,
    /// `grpc://`.
    Grpc,
    /// `https://`: DNS over HTTPS.
    Https,
    /// `https3://`: DNS over HTTP/3.
    Https3,
    /// `unix://`: a Unix socket.
    Unix,
}

impl Scheme {
    /// Every scheme.
    pub const ALL: [Scheme; 7] = [
        Self::Dns,
        Self::Tls,
        Self::Quic,
        Self::Grpc,
        Self::Https,
        Self::Https3,
        Self::Unix,
    ];

    /// The name before `://`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Dns => "dns",
            Self::Tls => "tls",
            Self::Quic => "quic",
            Self::Grpc => "grpc",
            Self::Https => "https",
            Self::Https3 => "https3",
            Self::Unix => "unix",
        }
    }

    /// The port used when a key has none (`None` for `unix://`).
    pub fn default_port(self) -> Option<u16> {
        match self {
            Self::Dns => Some(53),
            Self::Tls | Self::Quic => Some(853),
            Self::Grpc | Self::Https | Self::Https3 => Some(443),
            Self::Unix => None,
        }
    }

    /// Splits a `scheme://` prefix off `s` (case-sensitive, as in CoreDNS); `dns` without one.
    pub fn split(s: &str) -> (Scheme, &str) {
        Self::ALL
            .into_iter()
            .find_map(|scheme| {
                let rest = s.strip_prefix(scheme.as_str())?.strip_prefix("://")?;
                Some((scheme, rest))
            })
            .unwrap_or((Self::Dns, s))
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.as_str())
    }
}

/// A parsed server-block key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerKey {
    /// Its transport.
    pub scheme: Scheme,
    /// Lowercase FQDNs; a CIDR key expands to one or more reverse zones.
    pub zones: Vec<String>,
    /// The port written in the key, if any.
    pub port: Option<u16>,
    /// The key as written, for errors.
    pub token: Token,
}

impl ServerKey {
    /// The written port, else the scheme's default.
    pub fn port_or_default(&self) -> Option<u16> {
        self.port.or(self.scheme.default_port())
    }
}

/// Parses a server-block key such as `.:53`, `tls://example.org`, or `10.0.0.0/24`.
pub fn parse_key(tok: &Token) -> Result<ServerKey, ConfigError> {
    let (scheme, rest) = Scheme::split(&tok.text);
    let (zones, port) = split_zones_port(rest).map_err(|msg| tok.err(msg))?;
    Ok(ServerKey {
        scheme,
        zones,
        port,
        token: tok.clone(),
    })
}

/// Normalises one zone argument of a plugin (`plugin.Host(s).NormalizeExact()`): a lowercase
/// FQDN. A CIDR on an octet (IPv4) or nibble (IPv6) boundary gives its reverse zone; one
/// that would expand to several zones is an error here, see [`normalize_zones`].
pub fn normalize_zone(s: &str) -> Result<String, String> {
    let mut zones = normalize_zones(s)?;
    match zones.pop() {
        Some(zone) if zones.is_empty() => Ok(zone),
        _ => Err(format!("{s} expands to {} reverse zones", zones.len() + 1)),
    }
}

/// Normalises a zone argument that may be a CIDR expanding to several reverse zones.
/// A scheme and port, if present, are accepted and dropped, as CoreDNS does.
pub fn normalize_zones(s: &str) -> Result<Vec<String>, String> {
    split_zones_port(Scheme::split(s).1).map(|(zones, _)| zones)
}

/// CoreDNS `SplitHostPort`: the port is a trailing `:digits`; the rest is a domain or a CIDR.
fn split_zones_port(s: &str) -> Result<(Vec<String>, Option<u16>), String> {
    let mut host = s;
    let mut port = None;
    if let Some(colon) = s.rfind(':') {
        let digits = &s[colon + 1..];
        if digits.is_empty() {
            return Err(format!("expecting data after last colon: {s:?}"));
        }
        let unsigned = digits.strip_prefix(['+', '-']).unwrap_or(digits);
        if !unsigned.is_empty() && unsigned.bytes().all(|b| b.is_ascii_digit()) {
            let parsed = digits
                .parse::<u16>()
                .map_err(|_| format!("address {digits}: invalid port"))?;
            port = Some(parsed);
            host = &s[..colon];
        }
    }
    if host.len() > 255 {
        return Err(format!("specified zone is too long: {} > 255", host.len()));
    }
    if let Some((addr, prefix)) = crate::cidr::parse(host) {
        if host.starts_with(':') || (host.starts_with('0') && host.contains(':')) {
            return Err(format!("invalid CIDR {host}"));
        }
        return Ok((reverse_zones_for_cidr(addr, prefix), port));
    }
    if !is_domain_name(host) {
        return Err(format!("zone is not a valid domain name: {host}"));
    }
    Ok((vec![fqdn(&host.to_lowercase())], port))
}

/// The reverse zones covering `addr/prefix` (CoreDNS `cidr.Split` + `cidr.Reverse`).
///
/// A prefix on an octet (IPv4) or nibble (IPv6) boundary is one zone, e.g. `10.0.0.0/24` is
/// `0.0.10.in-addr.arpa.`. Any other prefix is rounded up to the next boundary and gives
/// every zone in between: `10.0.0.0/27` is the 32 zones `0.0.0.10.in-addr.arpa.` to
/// `31.0.0.10.in-addr.arpa.`. Host bits of `addr` are ignored; a prefix longer than the
/// address counts as the full length.
pub fn reverse_zones_for_cidr(addr: IpAddr, prefix: u8) -> Vec<String> {
    let (value, bits, digit, suffix) = match addr {
        IpAddr::V4(v4) => (u128::from(u32::from(v4)), 32u32, 8u32, "in-addr.arpa."),
        IpAddr::V6(v6) => (u128::from(v6), 128, 4, "ip6.arpa."),
    };
    let prefix = u32::from(prefix).min(bits);
    let rounded = prefix.div_ceil(digit) * digit;
    let keep = |len: u32| {
        if len == 0 {
            0
        } else {
            u128::MAX << (128 - len) >> (128 - bits)
        }
    };
    let network = value & keep(prefix);
    (0..1u128 << (rounded - prefix))
        .map(|i| {
            let net = network | i.checked_shl(bits - rounded).unwrap_or(0);
            let mut zone = String::new();
            for d in (0..rounded / digit).rev() {
                let part = (net >> (bits - (d + 1) * digit)) & ((1 << digit) - 1);
                zone.push_str(&if digit == 8 {
                    part.to_string()
                } else {
                    format!("{part:x}")
                });
                zone.push('.');
            }
            zone + suffix
        })
        .collect()
}

/// miekg/dns `IsDomainName`: labels of 1 to 63 octets (`\DDD` and `\X` escapes count as
/// one), at most 255 octets in all, no empty label except the root. Unlike CoreDNS we also
/// reject `:`, which in a key only comes from a malformed port or address.
fn is_domain_name(s: &str) -> bool {
    if s == "." {
        return true;
    }
    if s.is_empty() || s.contains(':') {
        return false;
    }
    let bytes = s.as_bytes();
    let (mut label, mut total, mut i) = (0usize, 1usize, 0usize);
    while i < bytes.len() {
        match bytes[i] {
            b'.' if label == 0 => return false,
            b'.' => {
                total += label + 1;
                label = 0;
            }
            b'\\' => {
                let ddd = bytes
                    .get(i + 1..i + 4)
                    .is_some_and(|d| d.iter().all(u8::is_ascii_digit));
                i += if ddd { 3 } else { 1 };
                label += 1;
            }
            _ => label += 1,
        }
        if label > 63 {
            return false;
        }
        i += 1;
    }
    // Wire length: each label plus its length octet, plus the root.
    let last = if label > 0 { label + 1 } else { 0 };
    total + last <= 255
}

/// Appends the final dot unless `s` already ends in an unescaped one.
fn fqdn(s: &str) -> String {
    match s.strip_suffix('.') {
        Some(body) if body.bytes().rev().take_while(|&b| b == b'\\').count() % 2 == 0 => {
            s.to_owned()
        }
        _ => format!("{s}."),
    }
}
