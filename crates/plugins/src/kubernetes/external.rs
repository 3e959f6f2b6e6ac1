//! Answers for *k8s_external* (CoreDNS `kubernetes/external.go`): the
//! external IPs of Services (and, with `headless`, the endpoints of
//! headless ones) under an external zone.

use std::net::IpAddr;

use clusterdns_contract::{ExternalHost, ExternalService, Externaler, Request};
use clusterdns_kubeindex::{Port, ReverseHit, Service, Snapshot};
use clusterdns_wire::{Name, Rcode, Rtype, parse_reverse};

use super::Kubernetes;
use super::lookup::{EpLabel, LabelBuf, port_matches};
use super::names::strip_underscore;

/// `labels` + `zone`, or `None` when too long.
fn join(labels: &[&[u8]], zone: &Name) -> Option<Name> {
    Name::from_labels(labels.iter().copied())
        .ok()?
        .concat(zone)
        .ok()
}

/// The ports of a Service or slice matching the query's `port` and
/// `protocol` (empty: any); a portless one has CoreDNS's sentinel port -1
/// (`None`), with no name and no protocol.
fn ports_or_none<'a>(
    ports: &'a [Port],
    port: &'a [u8],
    protocol: &'a [u8],
) -> impl Iterator<Item = Option<u16>> + 'a {
    let sentinel = ports.is_empty() && port.is_empty() && protocol.is_empty();
    ports
        .iter()
        .filter(move |p| port_matches(port, protocol, p))
        .map(|p| Some(p.port()))
        .chain(sentinel.then_some(None))
}

impl Kubernetes {
    /// CoreDNS `ExternalReverse`: services with external IP `ip`.
    fn external_reverse(&self, snap: &Snapshot, ip: IpAddr, out: &mut Vec<ExternalService>) {
        // External IPs are not in the snapshot's address index: a scan,
        // only for PTR queries in an external reverse zone.
        for svc in snap.services() {
            if !svc.external_ips().contains(&ip) {
                continue;
            }
            if !self.opts.namespaces.is_empty()
                && !self
                    .opts
                    .namespace_exposed(snap, svc.namespace().as_bytes())
            {
                continue;
            }
            let labels = [svc.name().as_bytes(), svc.namespace().as_bytes()];
            if let Some(host) = join(&labels, &Name::root()) {
                out.push(ExternalService {
                    host: ExternalHost::Name(host),
                    port: None,
                    target: Name::root(),
                    ttl: self.ttl,
                });
            }
        }
    }

    /// The entries of `svc` for the query's `endpoint`, `port` and
    /// `protocol` (empty: any); whether any matched.
    #[allow(clippy::too_many_arguments)]
    fn external_entries(
        &self,
        snap: &Snapshot,
        svc: &Service,
        zone: &Name,
        headless: bool,
        [endpoint, port, protocol]: [&[u8]; 3],
        out: &mut Vec<ExternalService>,
    ) -> bool {
        let mut found = false;
        let (name, ns) = (svc.name().as_bytes(), svc.namespace().as_bytes());
        if headless && svc.external_ips().is_empty() && (svc.is_headless() || !endpoint.is_empty())
        {
            let Some(eps) = snap.endpoints(svc.namespace(), svc.name()) else {
                return false;
            };
            for (slice, ep) in eps.ready() {
                let label = EpLabel::of(ep, self.opts.pod_names);
                if !endpoint.is_empty() && !label.matches(endpoint) {
                    continue;
                }
                let mut buf: LabelBuf = [0; 64];
                let Some(target) = join(&[label.write(&mut buf), name, ns], zone) else {
                    continue;
                };
                for p in ports_or_none(slice.ports(), port, protocol) {
                    found = true;
                    out.push(ExternalService {
                        host: ExternalHost::Ip(ep.ip()),
                        port: p,
                        target,
                        ttl: self.ttl,
                    });
                }
            }
            return found;
        }
        let Some(target) = join(&[name, ns], zone) else {
            return false;
        };
        for ip in svc.external_ips() {
            for p in ports_or_none(svc.ports(), port, protocol) {
                found = true;
                out.push(ExternalService {
                    host: ExternalHost::Ip(*ip),
                    port: p,
                    target,
                    ttl: self.ttl,
                });
            }
        }
        // LoadBalancer ingress by hostname (CoreDNS keeps them among the
        // external IPs, after the addresses when both kinds are given).
        for host in svc.external_hostnames() {
            let fq = if host.ends_with('.') {
                Name::from_ascii(host)
            } else {
                Name::from_ascii(&format!("{host}."))
            };
            let Ok(alias) = fq else { continue };
            for p in ports_or_none(svc.ports(), port, protocol) {
                found = true;
                out.push(ExternalService {
                    host: ExternalHost::Alias(alias),
                    port: p,
                    target: alias,
                    ttl: self.ttl,
                });
            }
        }
        found
    }
}

impl Externaler for Kubernetes {
    fn external(
        &self,
        req: &Request<'_>,
        zone: &Name,
        headless: bool,
        out: &mut Vec<ExternalService>,
    ) -> Rcode {
        let lower = req.qname_lower();
        let snap = self.snapshots.load();
        if req.qtype() == Rtype::PTR
            && let Some(ip) = parse_reverse(lower)
        {
            self.external_reverse(&snap, ip, out);
            return if out.is_empty() {
                Rcode::NXDOMAIN
            } else {
                Rcode::NOERROR
            };
        }
        let Some(labels) = lower.strip_suffix_labels(zone) else {
            return Rcode::NXDOMAIN;
        };
        // At most 127 labels fit in a name.
        let mut segs: [&[u8]; 128] = [&[]; 128];
        let mut n = 0;
        for l in labels {
            if let Some(slot) = segs.get_mut(n) {
                *slot = l;
                n += 1;
            }
        }
        let segs = &segs[..n];
        let Some((namespace, rest)) = segs.split_last() else {
            return Rcode::SERVFAIL;
        };
        if !self.opts.namespace_exposed(&snap, namespace) {
            return Rcode::NXDOMAIN;
        }
        let Some((service, rest)) = rest.split_last() else {
            return Rcode::NOERROR;
        };
        let query = match rest {
            [] => [&b""[..], b"", b""],
            [endpoint] => [strip_underscore(endpoint), b"", b""],
            [port, protocol] => [b"", strip_underscore(port), strip_underscore(protocol)],
            _ => return Rcode::NXDOMAIN,
        };
        let (Ok(ns), Ok(name)) = (std::str::from_utf8(namespace), std::str::from_utf8(service))
        else {
            return Rcode::NXDOMAIN;
        };
        let found = snap.service(ns, name).is_some_and(|svc| {
            svc.namespace() == ns
                && svc.name() == name
                && self.external_entries(&snap, svc, zone, headless, query, out)
        });
        let rcode = if found {
            Rcode::NOERROR
        } else {
            Rcode::NXDOMAIN
        };
        if req.qtype() == Rtype::PTR {
            out.clear();
        }
        rcode
    }

    fn external_addresses(&self, headless: bool, out: &mut Vec<IpAddr>) {
        let snap = self.snapshots.load();
        let mut found = false;
        for local in &self.local_ips {
            for hit in snap.reverse(*local) {
                let ReverseHit::Endpoint {
                    namespace, service, ..
                } = hit
                else {
                    continue;
                };
                found = true;
                let Some(svc) = snap.service(namespace, service) else {
                    continue;
                };
                if headless && svc.is_headless() {
                    if let Some(eps) = snap.endpoints(namespace, service) {
                        out.extend(eps.ready().map(|(_, ep)| ep.ip()));
                    }
                } else {
                    out.extend_from_slice(svc.external_ips());
                }
            }
        }
        if !found {
            out.extend_from_slice(&self.local_ips);
        }
    }

    fn external_serial(&self) -> u32 {
        self.snapshots.load().external_serial()
    }
}
