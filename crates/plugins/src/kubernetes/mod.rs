#![doc = include_str!("README.md")]

mod lookup;
mod memo;
mod metrics;
mod setup;
mod upstream;

use std::cell::RefCell;
use std::collections::HashSet;
use std::hash::Hash;
use std::net::IpAddr;

use clusterdns_k8s::{ReverseHit, Snapshot, Snapshots};
use clusterdns_plugin::{BoxFuture, ChainTail, Flow, Plugin, PluginDef, Request, ResponseWriter};
use clusterdns_wire::{Class, MessageBuilder, Name, RData, Rcode, Rtype, Section, parse_reverse};

use lookup::{EpLabel, Found, Host, LabelBuf, LookupOpts, Records, Target};

/// Registration of *kubernetes*.
pub const DEF: PluginDef = PluginDef {
    name: "kubernetes",
    setup: setup::setup,
};

/// The plugin's name in logs and errors.
const NAME: &str = "kubernetes";

/// The Kubernetes DNS schema version served at `dns-version.<zone>`.
pub const DNS_SCHEMA_VERSION: &str = "1.1.0";

/// TTL of the `dns-version` TXT record.
const DNS_VERSION_TTL: u32 = 28800;

/// Longest CNAME chain followed inside the cluster zone (CoreDNS stops
/// adding CNAMEs after 8 previous records).
const MAX_CHAIN: usize = 8;

/// The *kubernetes* handler: answers cluster names from the current
/// [`Snapshot`] of the watched cluster.
pub struct Kubernetes {
    /// Authoritative zones, lowercase; forward zones and reverse zones.
    zones: Vec<Name>,
    /// The first forward zone: PTR targets are under it.
    primary: Name,
    /// `fallthrough`: `None` off, else the zones that fall through.
    fall: Option<Vec<Name>>,
    /// Record TTL (`ttl`).
    ttl: u32,
    opts: LookupOpts,
    snapshots: Snapshots,
    /// This server's own addresses, for the apex NS records.
    local_ips: Vec<IpAddr>,
    /// The plugins after this one, to resolve ExternalName targets.
    tail: ChainTail,
    /// This instance's key in the per-thread answer memo ([`memo`]).
    memo_id: u64,
}

impl std::fmt::Debug for Kubernetes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kubernetes")
            .field("zones", &self.zones)
            .field("ttl", &self.ttl)
            .field("snapshots", &self.snapshots)
            .finish_non_exhaustive()
    }
}

/// A set for de-duplicating the records of one answer: a linear scan
/// while it is small (the common case: a handful of records), a hash set
/// beyond. Cleared per query, its capacity kept, so steady-state queries
/// allocate nothing.
struct Dedup<T> {
    small: Vec<T>,
    big: HashSet<T, foldhash::fast::RandomState>,
}

impl<T> Default for Dedup<T> {
    fn default() -> Self {
        Dedup {
            small: Vec::new(),
            big: HashSet::default(),
        }
    }
}

impl<T: Copy + Eq + Hash> Dedup<T> {
    /// Up to this many items are scanned linearly.
    const SMALL: usize = 16;

    fn clear(&mut self) {
        self.small.clear();
        // Clearing an empty table still resets its control bytes.
        if !self.big.is_empty() {
            self.big.clear();
        }
    }

    /// Adds `x`; `false` if it was already there.
    fn insert(&mut self, x: T) -> bool {
        if self.small.len() < Self::SMALL {
            if self.small.contains(&x) {
                return false;
            }
            self.small.push(x);
            return true;
        }
        if self.big.is_empty() {
            self.big.extend(self.small.iter().copied());
        }
        self.big.insert(x)
    }
}

/// Per-thread scratch sets for de-duplication.
#[derive(Default)]
struct Scratch {
    ips: Dedup<IpAddr>,
    srv: Dedup<(LabelKey, u16)>,
    extra: Dedup<(LabelKey, IpAddr)>,
}

/// An endpoint label as a fixed-size key.
type LabelKey = ([u8; 64], u8);

fn label_key(t: &Target<'_>) -> LabelKey {
    let mut buf: LabelBuf = [0; 64];
    let mut key = [0u8; 64];
    let l = t.label.as_ref().map_or(&[][..], |l| l.write(&mut buf));
    let n = l.len().min(64);
    key[..n].copy_from_slice(&l[..n]);
    // 0xff marks "no label", distinct from any label length.
    (key, if t.label.is_some() { n as u8 } else { 0xff })
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// What a query resolves to, before anything is written.
enum Plan<'s, 'q> {
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

/// Most labels left of the zone that a cluster name can have
/// (`_port._proto.service.namespace.svc`); a longer name is
/// NXDOMAIN-class whatever its labels, so only this many are kept.
const MAX_BASE: usize = 5;

/// `ns.dns.` in wire form without the root label: the apex NS and SOA
/// MNAME are this under the zone.
const NS_DNS: &[u8] = b"\x02ns\x03dns";
/// `hostmaster`, the SOA's rname left of the zone, in wire form.
const HOSTMASTER: &[u8] = b"\x0ahostmaster";

/// `prefix` followed by `zone` (both wire form) in `buf`; `None` past 255
/// bytes.
fn join_wire<'b>(buf: &'b mut [u8; 255], prefix: &[u8], zone: &[u8]) -> Option<&'b [u8]> {
    let len = prefix.len() + zone.len();
    buf.get_mut(..prefix.len())?.copy_from_slice(prefix);
    buf.get_mut(prefix.len()..len)?.copy_from_slice(zone);
    buf.get(..len)
}

/// The query name split at the matched zone.
struct Split<'q> {
    /// Original case.
    qname: &'q Name,
    /// Lowercase.
    lower: &'q Name,
    /// The first [`MAX_BASE`] labels left of the zone (lowercase).
    base: [&'q [u8]; MAX_BASE],
    /// How many labels are left of the zone (at most 127 on the wire).
    n: usize,
    /// Where the zone starts in the wire form of `qname` (and `lower`).
    off: usize,
}

impl<'q> Split<'q> {
    /// The labels left of the zone, `None` when there are more than
    /// [`MAX_BASE`] (no cluster name is that long).
    fn base(&self) -> Option<&[&'q [u8]]> {
        self.base.get(..self.n)
    }
    /// The parsed cluster name.
    fn parsed(&self) -> Result<lookup::Parsed<'q>, lookup::Invalid> {
        self.base().map_or(Err(lookup::Invalid), lookup::parse)
    }
    /// The labels left of the zone are exactly `labels`.
    fn base_is(&self, labels: &[&[u8]]) -> bool {
        self.base() == Some(labels)
    }
    /// The zone's labels in the query's case.
    fn zone_labels(&self) -> impl Iterator<Item = &'q [u8]> + use<'q> {
        self.qname.labels().skip(self.n)
    }
    /// The zone's uncompressed wire form, in the query's case.
    fn zone_wire(&self) -> &'q [u8] {
        let wire: &'q [u8] = self.qname.as_wire();
        wire.get(self.off..).unwrap_or(&[0])
    }
    /// `prefix` (labels in wire form, no root label) followed by the zone.
    fn under_zone(&self, prefix: &[u8]) -> Option<Name> {
        let mut buf = [0u8; 255];
        Name::from_uncompressed(join_wire(&mut buf, prefix, self.zone_wire())?).ok()
    }
    /// The zone part of the query is all lowercase (CoreDNS compares the
    /// lowercased name with the query-cased zone in a few places).
    fn zone_is_lower(&self) -> bool {
        self.zone_labels()
            .all(|l| !l.iter().any(u8::is_ascii_uppercase))
    }
}

/// Splits `lower` (and `qname`, its original-case form) at `zone`.
fn split<'q>(qname: &'q Name, lower: &'q Name, zone: &Name) -> Split<'q> {
    split_at(qname, lower, zone_offset(lower, zone).unwrap_or(0))
}

/// Splits at `off`, where the zone starts in `lower`'s wire form (from
/// [`zone_offset`]).
fn split_at<'q>(qname: &'q Name, lower: &'q Name, off: usize) -> Split<'q> {
    let mut base: [&'q [u8]; MAX_BASE] = [&[]; MAX_BASE];
    let mut n = 0;
    let wire = lower.as_wire();
    let mut pos = 0;
    while pos < off {
        let Some(&len) = wire.get(pos) else { break };
        let end = pos + 1 + usize::from(len);
        let Some(label) = wire.get(pos + 1..end) else {
            break;
        };
        if let Some(slot) = base.get_mut(n) {
            *slot = label;
        }
        n += 1;
        pos = end;
    }
    Split {
        qname,
        lower,
        base,
        n,
        off: pos,
    }
}

/// Where `zone` starts in `name`'s wire form, if `name` is `zone` or below
/// it. Both are lowercase (the zones are lowercased at setup), so the
/// bytes compare exactly, without the case-insensitive comparison of
/// [`Name::ends_with`].
fn zone_offset(name: &Name, zone: &Name) -> Option<usize> {
    let (n, z) = (name.as_wire(), zone.as_wire());
    if !n.ends_with(z) {
        return None;
    }
    // Label-aligned: the label lengths from the start land on the zone.
    let off = n.len() - z.len();
    at_label(n, off).then_some(off)
}

fn is_reverse(lower: &Name) -> bool {
    // `<at least one label>.in-addr.arpa.` or `<...>.ip6.arpa.`, lowercase.
    let w = lower.as_wire();
    let tail = if w.ends_with(b"\x07in-addr\x04arpa\x00") {
        14
    } else if w.ends_with(b"\x03ip6\x04arpa\x00") {
        10
    } else {
        return false;
    };
    let off = w.len() - tail;
    off > 0 && at_label(w, off)
}

/// A label starts at `off` in the uncompressed wire form `w`.
fn at_label(w: &[u8], off: usize) -> bool {
    let mut pos = 0;
    while let Some(&len) = w.get(pos)
        && pos < off
    {
        pos += 1 + usize::from(len);
    }
    pos == off
}

/// CoreDNS's `Services` result for one name and type.
enum Svcs<'s, 'q> {
    NameError,
    Empty,
    /// `ns.dns.<zone>`.
    DefaultNs,
    Found(Found<'s, 'q>),
}

/// A name the apex NS records point to.
#[derive(Clone, Copy)]
enum NsName<'s> {
    /// `ns.dns.<zone>`.
    Default,
    /// The service (or its endpoint) that fronts this server.
    Svc(Target<'s>),
}

/// A CNAME chain followed from the query name.
struct CnameChain {
    /// (owner, target), in order.
    links: [(Name, Name); MAX_CHAIN],
    len: usize,
}

impl CnameChain {
    fn new() -> Self {
        CnameChain {
            links: [(Name::root(), Name::root()); MAX_CHAIN],
            len: 0,
        }
    }
    fn last_target(&self) -> Option<&Name> {
        self.len.checked_sub(1).map(|i| &self.links[i].1)
    }
}

/// Where a CNAME chain ends.
enum Chase {
    /// Nothing to answer (loop, broken chain, target without addresses).
    Nothing,
    /// The last target is inside the zone and has addresses.
    Internal(CnameChain),
    /// The last target is outside the zone: resolved through the rest of
    /// the chain (when there is one).
    External(CnameChain),
}

impl Kubernetes {
    /// The longest zone `lower` is in, and where it starts in `lower`.
    fn zone_for(&self, lower: &Name) -> Option<(&Name, usize)> {
        self.zones
            .iter()
            .filter_map(|z| Some((z, zone_offset(lower, z)?)))
            .max_by_key(|(z, _)| z.len())
    }

    fn falls_through(&self, lower: &Name) -> bool {
        self.fall
            .as_ref()
            .is_some_and(|zones| zones.iter().any(|z| lower.ends_with(z)))
    }

    fn services<'s, 'q>(&self, snap: &'s Snapshot, s: &Split<'q>, qtype: Rtype) -> Svcs<'s, 'q> {
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

    fn plan<'s, 'q>(&self, snap: &'s Snapshot, s: &Split<'q>, qtype: Rtype) -> Plan<'s, 'q> {
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
    fn ptr_targets<'s>(&self, snap: &'s Snapshot, ip: IpAddr, f: &mut dyn FnMut(Target<'s>)) {
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
    fn ns_addrs<'s>(&self, snap: &'s Snapshot, f: &mut dyn FnMut(NsName<'s>, IpAddr)) {
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

    fn ns_name(&self, n: NsName<'_>, s: &Split<'_>) -> Option<Name> {
        match n {
            NsName::Default => s.under_zone(NS_DNS),
            NsName::Svc(t) => t.name(s.zone_wire()),
        }
    }

    /// Follows an ExternalName's CNAME chain (CoreDNS `plugin.A`'s CNAME
    /// branch): inside the zone it is resolved here; outside it needs the
    /// rest of the chain.
    fn chase(
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

    /// Writes the A/AAAA records of `found` (CoreDNS `plugin.A`/`AAAA`)
    /// with `owner`; returns an out-of-zone CNAME chain to finish.
    fn push_addrs(
        &self,
        b: &mut MessageBuilder<'_>,
        snap: &Snapshot,
        s: &Split<'_>,
        zone: &Name,
        qtype: Rtype,
        found: &Found<'_, '_>,
    ) -> Option<CnameChain> {
        if let Found::External(svc) = found {
            let ext = svc.external_name()?;
            return match self.chase(snap, s, zone, qtype, ext) {
                Chase::Nothing => None,
                Chase::External(chain) => Some(chain),
                Chase::Internal(chain) => {
                    self.push_cnames(b, &chain);
                    let target = *chain.last_target()?;
                    let lower = target.to_lowercase();
                    let s2 = split(&target, &lower, zone);
                    match self.services(snap, &s2, qtype) {
                        Svcs::Found(f) => self.push_ips(b, &target, qtype, &f),
                        Svcs::DefaultNs => self.push_ns_addrs(b, snap, &target, qtype),
                        _ => {}
                    }
                    None
                }
            };
        }
        self.push_ips(b, s.qname, qtype, found);
        None
    }

    fn push_cnames(&self, b: &mut MessageBuilder<'_>, chain: &CnameChain) {
        for (owner, target) in &chain.links[..chain.len] {
            let _ = b.push(
                Section::Answer,
                owner,
                Class::IN,
                self.ttl,
                &RData::Cname(target),
            );
        }
    }

    fn push_ips(
        &self,
        b: &mut MessageBuilder<'_>,
        owner: &Name,
        qtype: Rtype,
        found: &Found<'_, '_>,
    ) {
        SCRATCH.with(|sc| {
            let Ok(mut sc) = sc.try_borrow_mut() else {
                return;
            };
            sc.ips.clear();
            found.each_ip(&mut |ip| {
                if family_of(qtype, ip) && sc.ips.insert(ip) {
                    let _ = b.push(Section::Answer, owner, Class::IN, self.ttl, &addr_rdata(ip));
                }
            });
        });
    }

    fn push_ns_addrs(
        &self,
        b: &mut MessageBuilder<'_>,
        snap: &Snapshot,
        owner: &Name,
        qtype: Rtype,
    ) {
        self.ns_addrs(snap, &mut |_, ip| {
            let ip = lookup::host_ip(ip);
            if family_of(qtype, ip) {
                let _ = b.push(Section::Answer, owner, Class::IN, self.ttl, &addr_rdata(ip));
            }
        });
    }

    fn push_srv(&self, b: &mut MessageBuilder<'_>, s: &Split<'_>, found: &Found<'_, '_>) {
        let n = u32::try_from(found.count()).unwrap_or(u32::MAX);
        // CoreDNS: 100 / (100 × N) × 100, floored, at least 1.
        let w = (100.0 / (100.0 * f64::from(n.max(1))) * 100.0).floor();
        let weight = if w < 1.0 { 1 } else { w as u16 };
        SCRATCH.with(|sc| {
            let Ok(mut sc) = sc.try_borrow_mut() else {
                return;
            };
            let sc = &mut *sc;
            sc.srv.clear();
            // Every entry of one `Found` has the same target but for the
            // endpoint label: build each target name once.
            let mut last: Option<(LabelKey, Name)> = None;
            let mut target_name = |t: &Target<'_>, key: &LabelKey| -> Option<Name> {
                if let Some((k, n)) = &last
                    && k == key
                {
                    return Some(*n);
                }
                let n = t.name(s.zone_wire())?;
                last = Some((*key, n));
                Some(n)
            };
            found.each(&mut |e| {
                let Some(port) = e.port else { return };
                let key = label_key(&e.target);
                if !sc.srv.insert((key, port)) {
                    return;
                }
                if let Some(target) = target_name(&e.target, &key) {
                    let rd = RData::Srv {
                        priority: 0,
                        weight,
                        port,
                        target: &target,
                    };
                    let _ = b.push(Section::Answer, s.qname, Class::IN, self.ttl, &rd);
                }
            });
            if b.counts()[1] == 0 {
                return;
            }
            sc.extra.clear();
            found.each(&mut |e| {
                let (Some(_), Host::Ip(ip)) = (e.port, e.host) else {
                    return;
                };
                let key = label_key(&e.target);
                if !sc.extra.insert((key, ip)) {
                    return;
                }
                if let Some(target) = target_name(&e.target, &key) {
                    let _ = b.push(
                        Section::Additional,
                        &target,
                        Class::IN,
                        self.ttl,
                        &addr_rdata(ip),
                    );
                }
            });
        });
    }

    fn push_soa(
        &self,
        b: &mut MessageBuilder<'_>,
        section: Section,
        snap: &Snapshot,
        s: &Split<'_>,
    ) {
        // The names are written from the query's bytes: no `Name` built.
        let zone = s.zone_wire();
        let mut mname = [0u8; 255];
        let mut rname = [0u8; 255];
        let (Some(m), Some(r)) = (
            join_wire(&mut mname, NS_DNS, zone),
            join_wire(&mut rname, HOSTMASTER, zone),
        ) else {
            return;
        };
        let values = [snap.serial(), 7200, 1800, 86400, self.ttl];
        let _ = b.push_soa_wire(section, zone, self.ttl.min(300), m, r, values);
    }

    /// NXDOMAIN (or SERVFAIL before the first sync) with the SOA.
    fn write_negative(
        &self,
        req: &Request<'_>,
        w: &mut ResponseWriter,
        snap: &Snapshot,
        s: &Split<'_>,
        rcode: Rcode,
    ) {
        let mut b = w.reply(req);
        b.set_aa(true);
        b.set_rcode(rcode);
        self.push_soa(&mut b, Section::Authority, snap, s);
        b.finish();
    }

    /// Writes the reply for a positive plan. Returns the out-of-zone CNAME
    /// chain of an ExternalName when the caller should resolve its target.
    fn write_plan(
        &self,
        b: &mut MessageBuilder<'_>,
        snap: &Snapshot,
        s: &Split<'_>,
        zone: &Name,
        qtype: Rtype,
        plan: &Plan<'_, '_>,
    ) -> Option<CnameChain> {
        b.set_aa(true);
        let mut pending = None;
        match plan {
            Plan::NameError | Plan::NoData => {}
            Plan::Addrs(f) => pending = self.push_addrs(b, snap, s, zone, qtype, f),
            Plan::NsAddrs => self.push_ns_addrs(b, snap, s.qname, qtype),
            Plan::Version => {
                let txt: [&[u8]; 1] = [DNS_SCHEMA_VERSION.as_bytes()];
                let _ = b.push(
                    Section::Answer,
                    s.qname,
                    Class::IN,
                    DNS_VERSION_TTL,
                    &RData::Txt(&txt),
                );
            }
            Plan::Cname(target) => {
                if let Ok(t) = Name::from_ascii(target) {
                    let _ = b.push(
                        Section::Answer,
                        s.qname,
                        Class::IN,
                        self.ttl,
                        &RData::Cname(&t),
                    );
                }
            }
            Plan::Srv(f) => self.push_srv(b, s, f),
            Plan::Ptr { ip, only } => {
                let mut push = |t: Target<'_>| {
                    if let Some(name) = t.name(self.primary.as_wire()) {
                        let _ = b.push(
                            Section::Answer,
                            s.qname,
                            Class::IN,
                            self.ttl,
                            &RData::Ptr(&name),
                        );
                    }
                };
                match only {
                    Some(t) => push(*t),
                    None => self.ptr_targets(snap, *ip, &mut push),
                }
            }
            Plan::Soa => self.push_soa(b, Section::Answer, snap, s),
            Plan::Ns => self.push_ns(b, snap, s),
        }
        pending
    }

    fn push_ns(&self, b: &mut MessageBuilder<'_>, snap: &Snapshot, s: &Split<'_>) {
        let mut seen = [Name::root(); 8];
        let mut n = 0;
        self.ns_addrs(snap, &mut |name, _| {
            let Some(target) = self.ns_name(name, s) else {
                return;
            };
            if seen[..n].iter().any(|x| x.as_wire() == target.as_wire()) {
                return;
            }
            if let Some(slot) = seen.get_mut(n) {
                *slot = target;
                n += 1;
            }
            let _ = b.push(
                Section::Answer,
                s.qname,
                Class::IN,
                self.ttl,
                &RData::Ns(&target),
            );
        });
        if n == 0 {
            return;
        }
        self.ns_addrs(snap, &mut |name, ip| {
            if let Some(target) = self.ns_name(name, s) {
                let ip = lookup::host_ip(ip);
                let _ = b.push(
                    Section::Additional,
                    &target,
                    Class::IN,
                    self.ttl,
                    &addr_rdata(ip),
                );
            }
        });
    }

    /// The synchronous answer. `Err(chain)`: an ExternalName's target is
    /// outside the zone and the rest of the chain should resolve it.
    fn answer(&self, req: &Request<'_>, w: &mut ResponseWriter) -> Result<Flow, Box<CnameChain>> {
        let Some((zone, off)) = self.zone_for(req.qname_lower()) else {
            return Ok(Flow::Next);
        };
        self.answer_from(req, w, &self.snapshots.load(), zone, off)
    }

    /// [`Kubernetes::answer`] for a name in `zone` (which starts at `off`
    /// of the lowercase name), from `snap`.
    fn answer_from(
        &self,
        req: &Request<'_>,
        w: &mut ResponseWriter,
        snap: &Snapshot,
        zone: &Name,
        off: usize,
    ) -> Result<Flow, Box<CnameChain>> {
        let lower = req.qname_lower();
        let qtype = req.qtype();
        if qtype == Rtype::AXFR || qtype == Rtype::IXFR {
            w.write_error(req, Rcode::REFUSED);
            return Ok(Flow::Answered);
        }
        let s = split_at(req.qname(), lower, off);
        let plan = self.plan(snap, &s, qtype);
        if let Plan::NameError = plan {
            if self.falls_through(lower) {
                return Ok(Flow::Next);
            }
            let rcode = if snap.synced() {
                Rcode::NXDOMAIN
            } else {
                Rcode::SERVFAIL
            };
            self.write_negative(req, w, snap, &s, rcode);
            return Ok(Flow::Answered);
        }
        // An ExternalName leaving the zone, with plugins after this one to
        // resolve it: decided before anything is written.
        if let Plan::Addrs(Found::External(svc)) = &plan
            && self.tail.get().is_some_and(|t| !t.plugins().is_empty())
            && let Some(ext) = svc.external_name()
            && let Chase::External(chain) = self.chase(snap, &s, zone, qtype, ext)
        {
            return Err(Box::new(chain));
        }
        let mut b = w.reply(req);
        if let Some(chain) = self.write_plan(&mut b, snap, &s, zone, qtype, &plan) {
            // Nobody after us: the CNAMEs alone.
            self.push_cnames(&mut b, &chain);
        }
        if b.counts()[1] == 0 {
            self.push_soa(&mut b, Section::Authority, snap, &s);
        }
        b.finish();
        Ok(Flow::Answered)
    }
}

fn family_of(qtype: Rtype, ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(_) => qtype == Rtype::A,
        IpAddr::V6(_) => qtype == Rtype::AAAA,
    }
}

fn addr_rdata(ip: IpAddr) -> RData<'static> {
    match ip {
        IpAddr::V4(v4) => RData::A(v4),
        IpAddr::V6(v6) => RData::Aaaa(v6),
    }
}

impl Plugin for Kubernetes {
    fn name(&self) -> &'static str {
        NAME
    }

    fn query(&self, req: &Request<'_>, w: &mut ResponseWriter) -> Flow {
        let Some((zone, off)) = self.zone_for(req.qname_lower()) else {
            return Flow::Next;
        };
        let snap = self.snapshots.load();
        let generation = snap.generation();
        if let Some(flow) = memo::replay(self.memo_id, generation, req, w) {
            return flow;
        }
        match self.answer_from(req, w, &snap, zone, off) {
            Ok(flow) => {
                memo::keep(self.memo_id, generation, req, &flow, w);
                flow
            }
            // The chain goes to the asynchronous pass with the query.
            Err(chain) => w.defer_with(chain),
        }
    }

    fn query_async<'a>(
        &'a self,
        req: &'a Request<'a>,
        w: &'a mut ResponseWriter,
    ) -> BoxFuture<'a, Flow> {
        Box::pin(async move {
            // The chain `query` found; worked out again only when it left
            // none (a caller that skipped `query`).
            let chain = match w.take_note::<CnameChain>() {
                Some(chain) => chain,
                None => match self.answer(req, w) {
                    Ok(flow) => return flow,
                    Err(chain) => chain,
                },
            };
            let Some(target) = chain.last_target().copied() else {
                return Flow::Answered;
            };
            let upstream = match self.tail.get() {
                Some(tail) => upstream::lookup(tail, req, &target, req.qtype()).await,
                None => None,
            };
            upstream::write(
                w,
                req,
                self.ttl,
                &chain.links[..chain.len],
                upstream.as_deref(),
            );
            Flow::Answered
        })
    }
}

#[cfg(test)]
mod tests;
