//! The record writers: a plan ([`plan`](super::plan)) becomes the reply's
//! records (CoreDNS's `plugin.A`/`AAAA`/`SRV`/`PTR`/`NS`/`SOA` writers),
//! de-duplicated with per-thread scratch sets so that steady-state
//! answers allocate nothing.

use std::cell::RefCell;
use std::collections::HashSet;
use std::hash::Hash;
use std::net::IpAddr;

use clusterdns_contract::{Request, ResponseWriter};
use clusterdns_kubeindex::Snapshot;
use clusterdns_wire::{Class, MessageBuilder, Name, RData, Rcode, Rtype, Section};

use super::lookup::{self, Found, Host, LabelBuf, Target};
use super::names::{HOSTMASTER, NS_DNS, Split, join_wire, split};
use super::plan::{Chase, CnameChain, Plan, Svcs, family_of};
use super::{DNS_SCHEMA_VERSION, Kubernetes};

/// TTL of the `dns-version` TXT record.
const DNS_VERSION_TTL: u32 = 28800;

/// A set for de-duplicating the records of one answer: a linear scan
/// while it is small (the common case: a handful of records), a hash set
/// beyond. Cleared per query, its capacity kept, so steady-state queries
/// allocate nothing.
pub(super) struct Dedup<T> {
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

    pub(super) fn clear(&mut self) {
        self.small.clear();
        // Clearing an empty table still resets its control bytes.
        if !self.big.is_empty() {
            self.big.clear();
        }
    }

    /// Adds `x`; `false` if it was already there.
    pub(super) fn insert(&mut self, x: T) -> bool {
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

impl Kubernetes {
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

    pub(super) fn push_cnames(&self, b: &mut MessageBuilder<'_>, chain: &CnameChain) {
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

    pub(super) fn push_soa(
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
    pub(super) fn write_negative(
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
    pub(super) fn write_plan(
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
}

fn addr_rdata(ip: IpAddr) -> RData<'static> {
    match ip {
        IpAddr::V4(v4) => RData::A(v4),
        IpAddr::V6(v6) => RData::Aaaa(v6),
    }
}
