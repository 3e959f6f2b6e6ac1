//! The record lookup on a snapshot for a parsed cluster name ([`names`](super::names)):
//! CoreDNS's `kubernetes.go Records/findServices/findPods`, without
//! allocating. Everything here borrows from the (lowercased) query name
//! and from the snapshot.

use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr};

use clusterdns_kubeindex::{Endpoint, Port, Service, ServiceEndpoints, ServiceKind, Snapshot};
use clusterdns_wire::Name;

use super::names::{Invalid, Parsed, PodOrSvc};

/// CoreDNS `match`: an unset query component matches anything.
fn matches(query: &[u8], value: &[u8]) -> bool {
    // The query is lowercase and so are API port names: the exact
    // comparison usually decides.
    query.is_empty() || query == value || query.eq_ignore_ascii_case(value)
}

/// How many of a ClusterIP service's ports match the query's port and
/// protocol; a portless service has one (unnamed) port, matched only when
/// neither is asked for. Each matching port lists every ClusterIP.
fn cluster_ip_ports(svc: &Service, port: &[u8], protocol: &[u8]) -> usize {
    if svc.ports().is_empty() {
        return usize::from(port.is_empty() && protocol.is_empty());
    }
    svc.ports()
        .iter()
        .filter(|p| port_matches(port, protocol, p))
        .count()
}

/// A port of a service or slice matches the query's port and protocol.
pub(crate) fn port_matches(port: &[u8], protocol: &[u8], p: &Port) -> bool {
    matches(port, p.name().unwrap_or("").as_bytes())
        && matches(protocol, p.protocol().as_str().as_bytes())
}

fn as_str(b: &[u8]) -> Option<&str> {
    std::str::from_utf8(b).ok()
}

/// The `endpoint` part of an endpoint's DNS name (CoreDNS `endpointHostname`).
#[derive(Clone, Copy, Debug)]
pub(crate) enum EpLabel<'s> {
    /// `hostname`, or the target pod's name with `endpoint_pod_names`.
    Name(&'s str),
    /// The IP with `.`/`:` replaced by `-` (and `0` after a trailing `-`).
    Ip(IpAddr),
}

/// Room for the longest label [`EpLabel::write`] produces.
pub(crate) type LabelBuf = [u8; 64];

impl<'s> EpLabel<'s> {
    /// The label of `ep`.
    pub(crate) fn of(ep: &'s Endpoint, pod_names: bool) -> EpLabel<'s> {
        if let Some(h) = ep.hostname().filter(|h| !h.is_empty()) {
            return EpLabel::Name(h);
        }
        if pod_names && let Some(p) = ep.target_pod().filter(|p| !p.is_empty()) {
            return EpLabel::Name(p);
        }
        EpLabel::Ip(ep.ip())
    }

    /// The label's bytes, written into `buf` when computed.
    pub(crate) fn write<'b>(&self, buf: &'b mut LabelBuf) -> &'b [u8]
    where
        's: 'b,
    {
        match *self {
            EpLabel::Name(n) => n.as_bytes(),
            EpLabel::Ip(IpAddr::V4(v4)) => {
                let len = write_v4(v4, b'-', buf);
                &buf[..len]
            }
            EpLabel::Ip(ip) => {
                let len = {
                    let mut cur = std::io::Cursor::new(&mut buf[..]);
                    let _ = write!(cur, "{ip}");
                    usize::try_from(cur.position()).unwrap_or(0)
                };
                let mut len = len.min(buf.len());
                let v4 = buf[..len].contains(&b'.');
                for b in &mut buf[..len] {
                    if (v4 && *b == b'.') || (!v4 && *b == b':') {
                        *b = b'-';
                    }
                }
                if !v4 && len > 0 && buf[len - 1] == b'-' && len < buf.len() {
                    buf[len] = b'0';
                    len += 1;
                }
                &buf[..len]
            }
        }
    }

    /// Whether the query label `q` (lowercase) names this endpoint.
    pub(crate) fn matches(&self, q: &[u8]) -> bool {
        let mut buf = [0u8; 64];
        matches(q, self.write(&mut buf))
    }
}

/// Writes `ip` in dotted-decimal form (as `Display` does) with `sep`
/// between the octets, without `fmt`; returns the length (at most 15).
fn write_v4(ip: Ipv4Addr, sep: u8, buf: &mut LabelBuf) -> usize {
    let mut len = 0;
    for (i, o) in ip.octets().into_iter().enumerate() {
        if i > 0 {
            buf[len] = sep;
            len += 1;
        }
        if o >= 100 {
            buf[len] = b'0' + o / 100;
            len += 1;
        }
        if o >= 10 {
            buf[len] = b'0' + o / 10 % 10;
            len += 1;
        }
        buf[len] = b'0' + o % 10;
        len += 1;
    }
    len
}

/// What the address of an entry is (CoreDNS `msg.Service.HostType`).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Host {
    /// An address (IPv4-mapped IPv6 addresses are IPv4, as Go's `To4`).
    Ip(IpAddr),
    /// A name: an ExternalName target.
    Cname,
}

/// Normalises an address as Go's `net.IP.To4` does.
pub(crate) fn host_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Where an SRV record of an entry points: `[label.]name.ns.<kind>.<zone>`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Target<'s> {
    pub label: Option<EpLabel<'s>>,
    pub name: &'s [u8],
    pub namespace: &'s [u8],
    pub kind: &'static [u8],
}

impl Target<'_> {
    /// The target name under `zone`, the zone's uncompressed wire form
    /// (root label included) in the query's case.
    pub(crate) fn name(&self, zone: &[u8]) -> Option<Name> {
        let mut buf = [0u8; 64];
        let label: &[u8] = match &self.label {
            Some(l) => l.write(&mut buf),
            None => &[],
        };
        let mut out = [0u8; 255];
        let mut len = 0;
        for l in [label, self.name, self.namespace, self.kind] {
            if l.is_empty() {
                continue;
            }
            // Room is left for at least the root label.
            if l.len() > 63 || len + 1 + l.len() >= out.len() {
                return None;
            }
            out[len] = l.len() as u8;
            out[len + 1..len + 1 + l.len()].copy_from_slice(l);
            len += 1 + l.len();
        }
        out.get_mut(len..len + zone.len())?.copy_from_slice(zone);
        Name::from_uncompressed(&out[..len + zone.len()]).ok()
    }

    /// Whether two targets are the same name (for de-duplication).
    pub(crate) fn same(&self, other: &Target<'_>) -> bool {
        let (mut a, mut b) = ([0u8; 64], [0u8; 64]);
        let la = self.label.as_ref().map(|l| l.write(&mut a));
        let lb = other.label.as_ref().map(|l| l.write(&mut b));
        la == lb
            && self.name == other.name
            && self.namespace == other.namespace
            && self.kind == other.kind
    }
}

/// One CoreDNS `msg.Service`: an address (or CNAME target), a port, and
/// the SRV target it belongs to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry<'s> {
    pub host: Host,
    /// `None` is CoreDNS's port −1 (no ports): no SRV record.
    pub port: Option<u16>,
    pub target: Target<'s>,
}

/// What a name resolved to (CoreDNS `Records` result with `err == nil`).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Found<'s, 'q> {
    /// `pods insecure|verified`: the address from the name.
    Pod {
        ip: IpAddr,
        name: &'q [u8],
        namespace: &'q [u8],
    },
    /// An ExternalName service: one CNAME.
    External(&'s Service),
    /// A ClusterIP service's addresses for the matching ports.
    ClusterIp {
        svc: &'s Service,
        port: &'q [u8],
        protocol: &'q [u8],
        /// How many ports match (at least one; see `cluster_ip_ports`).
        matching: usize,
    },
    /// Ready endpoint addresses of a headless service, or of any service
    /// when the name has an endpoint label.
    Endpoints {
        svc: &'s Service,
        eps: &'s ServiceEndpoints,
        endpoint: &'q [u8],
        port: &'q [u8],
        protocol: &'q [u8],
        pod_names: bool,
        /// `zone_aware`: only the endpoints meant for this zone.
        zone: Option<&'s str>,
    },
}

/// CoreDNS `Records` (and `findServices`/`findPods`) outcome.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Records<'s, 'q> {
    /// `(nil, nil)`: the name exists, no records (NODATA).
    Empty,
    /// `errNoItems`, `errNsNotExposed`, `errInvalidRequest`.
    NameError,
    /// At least one entry (or a matching port of a ClusterIP service).
    Found(Found<'s, 'q>),
}

/// `pods` option.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PodMode {
    /// Pod names are NXDOMAIN.
    Disabled,
    /// Any IP-shaped name in an existing namespace answers.
    Insecure,
    /// Only a pod with that IP in that namespace answers.
    Verified,
}

/// What the lookup needs from the plugin's configuration.
#[derive(Debug)]
pub(crate) struct LookupOpts {
    /// `namespaces`: empty is all.
    pub namespaces: Vec<String>,
    pub pods: PodMode,
    pub pod_names: bool,
    pub ignore_empty_service: bool,
    /// EndpointSlices are used (`false` with `noendpoints`).
    pub endpoints: bool,
}

impl LookupOpts {
    /// CoreDNS `namespaceExposed`: listed (if a list is set) and existing.
    pub(crate) fn namespace_exposed(&self, snap: &Snapshot, ns: &[u8]) -> bool {
        if !self.namespaces.is_empty() && !self.namespaces.iter().any(|n| n.as_bytes() == ns) {
            return false;
        }
        if !snap.namespaces_watched() {
            return true;
        }
        snap.namespace_bytes(ns).is_some()
    }

    /// CoreDNS `Records` for the parsed name. `reverse`: the query name is
    /// under `in-addr.arpa.` or `ip6.arpa.`.
    pub(crate) fn records<'s, 'q>(
        &self,
        snap: &'s Snapshot,
        parsed: Result<Parsed<'q>, Invalid>,
        reverse: bool,
    ) -> Records<'s, 'q> {
        let Ok(r) = parsed else {
            return Records::NameError;
        };
        let Some(kind) = r.kind else {
            return Records::Empty;
        };
        if reverse || !self.namespace_exposed(snap, r.namespace) {
            return Records::NameError;
        }
        match kind {
            PodOrSvc::Pod => self.find_pod(snap, &r),
            PodOrSvc::Svc => self.find_service(snap, &r),
        }
    }

    fn find_pod<'s, 'q>(&self, snap: &'s Snapshot, r: &Parsed<'q>) -> Records<'s, 'q> {
        if self.pods == PodMode::Disabled {
            return Records::NameError;
        }
        if r.service.is_empty() {
            return Records::Empty;
        }
        let Some(ip) = pod_ip(r.service) else {
            return Records::NameError;
        };
        let found = Records::Found(Found::Pod {
            ip: ip.ip,
            name: r.service,
            namespace: r.namespace,
        });
        match self.pods {
            PodMode::Insecure => found,
            _ => {
                // Verified: a pod with exactly this IP string in this namespace.
                let ok = ip.canonical
                    && as_str(r.namespace).is_some_and(|ns| {
                        snap.pod(ns, ip.parsed)
                            .is_some_and(|p| p.primary_ip() == ip.parsed)
                    });
                if ok { found } else { Records::NameError }
            }
        }
    }

    fn find_service<'s, 'q>(&self, snap: &'s Snapshot, r: &Parsed<'q>) -> Records<'s, 'q> {
        if r.service.is_empty() {
            return Records::Empty;
        }
        let Some(svc) = snap.service_bytes(r.namespace, r.service) else {
            return Records::NameError;
        };
        // Looked up only when needed: a ClusterIP name does not use them.
        let eps = || {
            self.endpoints
                .then(|| snap.endpoints(svc.namespace(), svc.name()))
                .flatten()
        };
        if self.ignore_empty_service
            && svc.kind() != ServiceKind::ExternalName
            && !svc.is_headless()
            && !eps().is_some_and(ServiceEndpoints::has_ready)
        {
            return Records::NameError;
        }
        if svc.kind() == ServiceKind::ExternalName {
            let ok = r.endpoint.is_empty()
                && r.port.is_empty()
                && r.protocol.is_empty()
                && svc
                    .external_name()
                    .is_some_and(|n| !n.is_empty() && n.parse::<IpAddr>().is_err());
            return if ok {
                Records::Found(Found::External(svc))
            } else {
                Records::NameError
            };
        }
        if svc.is_headless() || !r.endpoint.is_empty() {
            let Some(eps) = eps() else {
                return Records::NameError;
            };
            let found = Found::Endpoints {
                svc,
                eps,
                endpoint: r.endpoint,
                port: r.port,
                protocol: r.protocol,
                pod_names: self.pod_names,
                zone: None,
            };
            let mut any = false;
            found.for_each(&mut |_| any = true);
            return if any {
                Records::Found(found)
            } else {
                Records::NameError
            };
        }
        let matching = cluster_ip_ports(svc, r.port, r.protocol);
        if matching > 0 {
            Records::Found(Found::ClusterIp {
                svc,
                port: r.port,
                protocol: r.protocol,
                matching,
            })
        } else {
            Records::NameError
        }
    }
}

/// An IP parsed from a pod label.
struct PodIp {
    /// What the name says, Go `To4`-normalised.
    ip: IpAddr,
    /// As parsed.
    parsed: IpAddr,
    /// The label is the canonical text of the address (CoreDNS compares
    /// strings with `status.podIP`).
    canonical: bool,
}

/// `1-2-3-4` → 1.2.3.4 (exactly three `-`, no `--`), else `-` → `:` for IPv6.
fn pod_ip(label: &[u8]) -> Option<PodIp> {
    if label.len() > 63 {
        return None;
    }
    let dashes = label.iter().filter(|&&b| b == b'-').count();
    let v4 = dashes == 3 && !label.windows(2).any(|w| w == b"--");
    let mut buf = [0u8; 64];
    let buf = &mut buf[..label.len()];
    for (o, &b) in buf.iter_mut().zip(label) {
        *o = if b == b'-' {
            if v4 { b'.' } else { b':' }
        } else {
            b
        };
    }
    let text = std::str::from_utf8(buf).ok()?;
    let parsed: IpAddr = text.parse().ok()?;
    let mut out = [0u8; 64];
    let len = match parsed {
        IpAddr::V4(v4) => write_v4(v4, b'.', &mut out),
        IpAddr::V6(_) => {
            let mut cur = std::io::Cursor::new(&mut out[..]);
            let _ = write!(cur, "{parsed}");
            usize::try_from(cur.position()).unwrap_or(0)
        }
    };
    Some(PodIp {
        ip: host_ip(parsed),
        parsed,
        canonical: out.get(..len) == Some(text.as_bytes()),
    })
}

impl<'s> Found<'s, '_> {
    /// Calls `f` with every entry, in CoreDNS's order.
    pub(crate) fn for_each(&self, f: &mut dyn FnMut(Entry<'s>)) {
        match *self {
            Found::Pod { .. } => {}
            Found::External(svc) => {
                if svc.external_name().is_some() {
                    f(Entry {
                        host: Host::Cname,
                        port: None,
                        target: svc_target(svc),
                    });
                }
            }
            Found::ClusterIp {
                svc,
                port,
                protocol,
                ..
            } => {
                let target = svc_target(svc);
                if svc.ports().is_empty() {
                    if port.is_empty() && protocol.is_empty() {
                        for ip in svc.cluster_ips() {
                            f(Entry {
                                host: Host::Ip(host_ip(*ip)),
                                port: None,
                                target,
                            });
                        }
                    }
                    return;
                }
                for p in svc.ports() {
                    if !port_matches(port, protocol, p) {
                        continue;
                    }
                    for ip in svc.cluster_ips() {
                        f(Entry {
                            host: Host::Ip(host_ip(*ip)),
                            port: Some(p.port()),
                            target,
                        });
                    }
                }
            }
            Found::Endpoints {
                svc,
                eps,
                endpoint,
                port,
                protocol,
                pod_names,
                zone,
            } => {
                for (slice, ep) in eps.ready() {
                    if let Some(z) = zone
                        && !super::zone::in_zone(ep, z)
                    {
                        continue;
                    }
                    let label = EpLabel::of(ep, pod_names);
                    if !endpoint.is_empty() && !label.matches(endpoint) {
                        continue;
                    }
                    let target = Target {
                        label: Some(label),
                        ..svc_target(svc)
                    };
                    let host = Host::Ip(host_ip(ep.ip()));
                    if slice.ports().is_empty() {
                        if port.is_empty() && protocol.is_empty() {
                            f(Entry {
                                host,
                                port: None,
                                target,
                            });
                        }
                        continue;
                    }
                    for p in slice.ports() {
                        if port_matches(port, protocol, p) {
                            f(Entry {
                                host,
                                port: Some(p.port()),
                                target,
                            });
                        }
                    }
                }
            }
        }
    }
}

impl<'s, 'q: 's> Found<'s, 'q> {
    /// [`for_each`](Self::for_each), pods included (their target borrows
    /// from the query name, which outlives the snapshot borrow here).
    pub(crate) fn each(&self, f: &mut dyn FnMut(Entry<'s>)) {
        if let Found::Pod {
            ip,
            name,
            namespace,
        } = *self
        {
            f(Entry {
                host: Host::Ip(ip),
                port: Some(0),
                target: Target {
                    label: None,
                    name,
                    namespace,
                    kind: b"pod",
                },
            });
            return;
        }
        self.for_each(f);
    }

    /// How many entries [`each`](Self::each) yields (a ClusterIP
    /// service's are counted without walking them).
    pub(crate) fn count(&self) -> usize {
        if let Found::ClusterIp { svc, matching, .. } = *self {
            return matching * svc.cluster_ips().len();
        }
        let mut n = 0;
        self.each(&mut |_| n += 1);
        n
    }

    /// The address of every entry of [`each`](Self::each) (repeats
    /// included), in the same order of first appearance. A ClusterIP
    /// service's addresses are the same for each matching port: they are
    /// listed once, without walking the ports for every address.
    pub(crate) fn each_ip(&self, f: &mut dyn FnMut(IpAddr)) {
        if let Found::ClusterIp { svc, matching, .. } = *self {
            if matching > 0 {
                for ip in svc.cluster_ips() {
                    f(host_ip(*ip));
                }
            }
            return;
        }
        self.each(&mut |e| {
            if let Host::Ip(ip) = e.host {
                f(ip);
            }
        });
    }
}

fn svc_target(svc: &Service) -> Target<'_> {
    Target {
        label: None,
        name: svc.name().as_bytes(),
        namespace: svc.namespace().as_bytes(),
        kind: b"svc",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_labels() {
        let mut buf = [0u8; 64];
        let l = EpLabel::Ip("10.1.2.3".parse().unwrap());
        assert_eq!(l.write(&mut buf), b"10-1-2-3");
        for o in 0..=255u8 {
            let v4 = Ipv4Addr::new(o, o / 3, 255 - o, o % 10);
            let ip = v4.to_string();
            let mut out = [0u8; 64];
            let n = write_v4(v4, b'.', &mut out);
            assert_eq!(&out[..n], ip.as_bytes());
            assert_eq!(
                EpLabel::Ip(IpAddr::V4(v4)).write(&mut buf),
                ip.replace('.', "-").as_bytes()
            );
        }
        let l = EpLabel::Ip("2001:db8::".parse().unwrap());
        assert_eq!(l.write(&mut buf), b"2001-db8--0");
        let l = EpLabel::Ip("5678:abcd::1".parse().unwrap());
        assert_eq!(l.write(&mut buf), b"5678-abcd--1");
        let l = EpLabel::Ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff".parse().unwrap());
        assert_eq!(l.write(&mut buf).len(), 39);
    }

    #[test]
    fn pod_labels() {
        let p = pod_ip(b"10-0-0-1").unwrap();
        assert_eq!(p.ip.to_string(), "10.0.0.1");
        assert!(p.canonical);
        assert!(pod_ip(b"10-0-0").is_none());
        assert!(pod_ip(b"010-0-0-1").is_none());
        let p = pod_ip(b"fd00--1").unwrap();
        assert_eq!(p.ip.to_string(), "fd00::1");
        let p = pod_ip(b"fd00-0-0-0-0-0-0-1").unwrap();
        assert!(!p.canonical);
        let p = pod_ip(b"--ffff-a00-1").unwrap();
        assert_eq!(p.ip.to_string(), "10.0.0.1");
        assert!(pod_ip(b"a-b").is_none());
    }
}
