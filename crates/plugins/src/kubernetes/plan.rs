//! The answer plan: what a question resolves to in a snapshot, decided
//! before anything is written (CoreDNS's `Services` and the per-type
//! branches of `ServeDNS`), including where an ExternalName's CNAME chain
//! ends.

use std::net::IpAddr;

use clusterdns_kubeindex::{ReverseHit, Snapshot};
use clusterdns_wire::{Name, Rtype, parse_reverse};

use super::Kubernetes;
use super::lookup::{EpLabel, Found, Host, Records, Target};
use super::names::{NS_DNS, Split, is_reverse, split};

/// Longest CNAME chain followed inside the cluster zone (CoreDNS stops
/// adding CNAMEs after 8 previous records).
pub(super) const MAX_CHAIN: usize = 8;

/// What a query resolves to, before anything is written.
pub(super) enum Plan<'s, 'q> {
    /// NXDOMAIN-class error.
    NameError,
    /// NOERROR, no answer, SOA in authority.
    NoData,
    /// Addresses of `Found` (A or AAAA).
    Addrs(Found<'s, 'q>),
    /// The `ns.dns.<zone>` addresses.
    NsAddrs,
    /// `dns-version` TXT.
    Version,
    /// A CNAME query on an ExternalName service.
    Cname(&'s str),
    /// SRV records of `Found`.
    Srv(Found<'s, 'q>),
    /// PTR for an address; `only`: its single target, when there is
    /// just one (found while planning; no second lookup to write it).
    Ptr {
        ip: IpAddr,
        only: Option<Target<'s>>,
    },
    /// SOA at the apex.
    Soa,
    /// NS at the apex.
    Ns,
}

/// CoreDNS's `Services` result for one name and type.
pub(super) enum Svcs<'s, 'q> {
    NameError,
    Empty,
    /// `ns.dns.<zone>`.
    DefaultNs,
    Found(Found<'s, 'q>),
}

/// A name the apex NS records point to.
#[derive(Clone, Copy)]
pub(super) enum NsName<'s> {
    /// `ns.dns.<zone>`.
    Default,
    /// The service (or its endpoint) that fronts this server.
    Svc(Target<'s>),
}

/// A CNAME chain followed from the query name.
pub(super) struct CnameChain {
    /// (owner, target), in order.
    pub(super) links: [(Name, Name); MAX_CHAIN],
    pub(super) len: usize,
}

impl CnameChain {
    pub(super) fn new() -> Self {
        CnameChain {
            links: [(Name::root(), Name::root()); MAX_CHAIN],
            len: 0,
        }
    }
    pub(super) fn last_target(&self) -> Option<&Name> {
        self.len.checked_sub(1).map(|i| &self.links[i].1)
    }
}

/// Where a CNAME chain ends.
pub(super) enum Chase {
    /// Nothing to answer (loop, broken chain, target without addresses).
    Nothing,
    /// The last target is inside the zone and has addresses.
    Internal(CnameChain),
    /// The last target is outside the zone: resolved through the rest of
    /// the chain (when there is one).
    External(CnameChain),
}

impl Kubernetes {
    pub(super) fn services<'s, 'q>(
        &self,
        snap: &'s Snapshot,
        s: &Split<'q>,
        qtype: Rtype,
    ) -> Svcs<'s, 'q> {
        if s.base_is(&[b"ns", b"dns"]) && s.zone_is_lower() {
            return Svcs::DefaultNs;
        }
        match self.opts.records(snap, s.parsed(), is_reverse(s.lower)) {
            Records::NameError => Svcs::NameError,
            Records::Empty => Svcs::Empty,
            Records::Found(Found::External(_)) if qtype == Rtype::SRV => Svcs::Empty,
            Records::Found(f) => Svcs::Found(f),
        }
    }

    pub(super) fn plan<'s, 'q>(
        &self,
        snap: &'s Snapshot,
        s: &Split<'q>,
        qtype: Rtype,
    ) -> Plan<'s, 'q> {
        let from_services = |svcs: Svcs<'s, 'q>| match svcs {
            Svcs::NameError => Plan::NameError,
            _ => Plan::NoData,
        };
        match qtype {
            Rtype::A | Rtype::AAAA => match self.services(snap, s, qtype) {
                Svcs::NameError => Plan::NameError,
                Svcs::Empty => Plan::NoData,
                Svcs::DefaultNs => Plan::NsAddrs,
                Svcs::Found(f) => Plan::Addrs(f),
            },
            Rtype::TXT => {
                if s.base_is(&[b"dns-version"]) {
                    return Plan::Version;
                }
                let r = self.opts.records(snap, s.parsed(), is_reverse(s.lower));
                match r {
                    Records::Found(_) => Plan::NoData,
                    _ => Plan::NameError,
                }
            }
            Rtype::CNAME => match self.services(snap, s, qtype) {
                Svcs::Found(Found::External(svc)) => {
                    svc.external_name().map_or(Plan::NoData, Plan::Cname)
                }
                other => from_services(other),
            },
            Rtype::PTR => {
                if is_reverse(s.lower)
                    && let Some(ip) = parse_reverse(s.lower)
                {
                    let (mut n, mut first) = (0usize, None);
                    self.ptr_targets(snap, ip, &mut |t| {
                        n += 1;
                        first.get_or_insert(t);
                    });
                    return match n {
                        0 => Plan::NameError,
                        1 => Plan::Ptr { ip, only: first },
                        _ => Plan::Ptr { ip, only: None },
                    };
                }
                match self.opts.records(snap, s.parsed(), is_reverse(s.lower)) {
                    Records::NameError => Plan::NameError,
                    _ => Plan::NoData,
                }
            }
            Rtype::SRV => match self.services(snap, s, qtype) {
                Svcs::Found(f) => Plan::Srv(f),
                other => from_services(other),
            },
            Rtype::SOA => {
                if s.n == 0 {
                    Plan::Soa
                } else {
                    Plan::NoData
                }
            }
            Rtype::NS if s.n == 0 && s.zone_is_lower() => Plan::Ns,
            // MX and everything else: a fake A lookup decides NXDOMAIN
            // versus NODATA.
            _ => from_services(self.services(snap, s, Rtype::A)),
        }
    }

    /// Calls `f` with every PTR target of `ip` (de-duplicated), CoreDNS
    /// `serviceRecordForIP`: the first service with that ClusterIP, else
    /// every ready endpoint with that address.
    pub(super) fn ptr_targets<'s>(
        &self,
        snap: &'s Snapshot,
        ip: IpAddr,
        f: &mut dyn FnMut(Target<'s>),
    ) {
        let exposed = |ns: &str| {
            self.opts.namespaces.is_empty() || self.opts.namespace_exposed(snap, ns.as_bytes())
        };
        for hit in snap.reverse(ip) {
            if let ReverseHit::Service(svc) = hit
                && exposed(svc.namespace())
            {
                f(Target {
                    label: None,
                    name: svc.name().as_bytes(),
                    namespace: svc.namespace().as_bytes(),
                    kind: b"svc",
                });
                return;
            }
        }
        let target = |hit: ReverseHit<'s>| match hit {
            ReverseHit::Endpoint { .. } if !self.opts.endpoints => None,
            ReverseHit::Endpoint {
                namespace,
                service,
                endpoint,
            } if exposed(namespace) => Some(Target {
                label: Some(EpLabel::of(endpoint, self.opts.pod_names)),
                name: service.as_bytes(),
                namespace: namespace.as_bytes(),
                kind: b"svc",
            }),
            _ => None,
        };
        for (i, hit) in snap.reverse(ip).enumerate() {
            if let Some(t) = target(hit) {
                let dup = snap
                    .reverse(ip)
                    .take(i)
                    .filter_map(target)
                    .any(|prev| prev.same(&t));
                if !dup {
                    f(t);
                }
            }
        }
    }

    /// CoreDNS `nsAddrs`: the services whose endpoints hold one of this
    /// server's addresses, else `ns.dns.<zone>` with those addresses.
    pub(super) fn ns_addrs<'s>(&self, snap: &'s Snapshot, f: &mut dyn FnMut(NsName<'s>, IpAddr)) {
        let mut found = false;
        let locals = if self.opts.endpoints {
            &self.local_ips[..]
        } else {
            &[]
        };
        for local in locals {
            for hit in snap.reverse(*local) {
                let ReverseHit::Endpoint {
                    namespace, service, ..
                } = hit
                else {
                    continue;
                };
                let Some(svc) = snap.service(namespace, service) else {
                    continue;
                };
                found = true;
                let t = Target {
                    label: None,
                    name: svc.name().as_bytes(),
                    namespace: svc.namespace().as_bytes(),
                    kind: b"svc",
                };
                if svc.is_headless() {
                    if let Some(eps) = snap.endpoints(namespace, service) {
                        for (_, ep) in eps.ready() {
                            let label = Some(EpLabel::of(ep, self.opts.pod_names));
                            f(NsName::Svc(Target { label, ..t }), ep.ip());
                        }
                    }
                } else {
                    for ip in svc.cluster_ips() {
                        f(NsName::Svc(t), *ip);
                    }
                }
            }
        }
        if !found {
            for ip in &self.local_ips {
                f(NsName::Default, *ip);
            }
        }
    }

    pub(super) fn ns_name(&self, n: NsName<'_>, s: &Split<'_>) -> Option<Name> {
        match n {
            NsName::Default => s.under_zone(NS_DNS),
            NsName::Svc(t) => t.name(s.zone_wire()),
        }
    }

    /// Follows an ExternalName's CNAME chain (CoreDNS `plugin.A`'s CNAME
    /// branch): inside the zone it is resolved here; outside it needs the
    /// rest of the chain.
    pub(super) fn chase(
        &self,
        snap: &Snapshot,
        s: &Split<'_>,
        zone: &Name,
        qtype: Rtype,
        first: &str,
    ) -> Chase {
        let mut chain = CnameChain::new();
        let mut owner_lower = *s.lower;
        let mut owner = *s.qname;
        let mut ext = first;
        loop {
            let Ok(target) = Name::from_ascii(ext) else {
                return Chase::Nothing;
            };
            // x CNAME x (or a name below x) is a loop; so is a repeated target.
            if target.ends_with(&owner_lower)
                || chain.len >= MAX_CHAIN
                || chain.links[..chain.len]
                    .iter()
                    .any(|(_, t)| t.as_wire() == target.as_wire())
            {
                return Chase::Nothing;
            }
            chain.links[chain.len] = (owner, target);
            chain.len += 1;
            if !target.ends_with(zone) {
                return Chase::External(chain);
            }
            let lower = target.to_lowercase();
            let s2 = split(&target, &lower, zone);
            match self.services(snap, &s2, qtype) {
                Svcs::Found(Found::External(svc)) => match svc.external_name() {
                    Some(next) => {
                        ext = next;
                        owner = target;
                        owner_lower = lower;
                    }
                    None => return Chase::Nothing,
                },
                Svcs::Found(f) => {
                    let mut any = false;
                    f.each(&mut |e| {
                        if let Host::Ip(ip) = e.host {
                            any |= family_of(qtype, ip);
                        }
                    });
                    return if any {
                        Chase::Internal(chain)
                    } else {
                        Chase::Nothing
                    };
                }
                Svcs::DefaultNs => {
                    let mut any = false;
                    self.ns_addrs(snap, &mut |_, ip| any |= family_of(qtype, ip));
                    return if any {
                        Chase::Internal(chain)
                    } else {
                        Chase::Nothing
                    };
                }
                Svcs::NameError | Svcs::Empty => return Chase::Nothing,
            }
        }
    }
}

pub(super) fn family_of(qtype: Rtype, ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(_) => qtype == Rtype::A,
        IpAddr::V6(_) => qtype == Rtype::AAAA,
    }
}
