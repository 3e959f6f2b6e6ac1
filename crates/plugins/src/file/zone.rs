//! A loaded zone and the lookup CoreDNS's *file* plugin does on it
//! (`plugin/file/lookup.go`): delegations found label by label from the
//! apex, CNAMEs chased within the zone, wildcards as RFC 4592 (with an
//! empty non-terminal between the wildcard and the name blocking it), NS
//! glue and MX/SRV target addresses in the additional section.
//!
//! A lookup writes nothing and allocates nothing: it returns a [`Plan`]
//! of borrowed record sets, which [`Plan::write`] puts in a message.

use std::collections::{HashMap, HashSet};

use clusterdns_wire::{MessageBuilder, Name, Rcode, Record, RecordData, Rtype, Section};

/// Record sets one answer may be made of (a CNAME chain and its target,
/// nested once per in-zone re-resolution); more are left out.
const MAX_SEGS: usize = 32;
/// CNAMEs followed after the first, as CoreDNS (`i > 8`).
const MAX_CHASE: usize = 8;
/// Re-resolutions of a CNAME target, as CoreDNS's loop guard (`loop > 8`).
const MAX_LOOP: u8 = 8;

type Hasher = foldhash::fast::RandomState;

/// The outcome of a lookup, as CoreDNS's `Result`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// An answer (or an empty non-terminal: NOERROR with the SOA).
    Success,
    /// NXDOMAIN.
    NameError,
    /// A referral (or a CNAME into a delegation).
    Delegation,
    /// The name exists without the type.
    NoData,
    /// SERVFAIL.
    ServerFailure,
}

/// The records of one owner, by type in file order.
#[derive(Debug, Default)]
struct Node {
    sets: Vec<(Rtype, Vec<Record>)>,
}

impl Node {
    fn get(&self, t: Rtype) -> &[Record] {
        self.sets
            .iter()
            .find(|(rt, _)| *rt == t)
            .map_or(&[], |(_, v)| v.as_slice())
    }
}

/// A zone as read from its file.
#[derive(Debug)]
pub struct Zone {
    /// The origin (lowercase).
    pub origin: Name,
    labels: usize,
    /// The SOA (the last one in the file, as CoreDNS keeps it).
    pub soa: Record,
    /// The apex NS records.
    ns: Vec<Record>,
    /// Every other record by lowercase owner.
    nodes: HashMap<Name, Node, Hasher>,
    /// Names with at least one owner strictly below them.
    parents: HashSet<Name, Hasher>,
    /// Owners in DNSSEC canonical order (for transfers).
    order: Vec<Name>,
}

/// Why a file does not make a zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZoneError {
    /// No SOA record.
    NoSoa,
}

impl Zone {
    /// Builds the zone from the file's records, as CoreDNS's `Insert`:
    /// owners lowercased (SRV owners kept as written), the SOA and apex NS
    /// kept apart.
    pub fn new(origin: &Name, records: Vec<Record>) -> Result<Zone, ZoneError> {
        let origin = origin.to_lowercase();
        let mut soa = None;
        let mut ns = Vec::new();
        let mut nodes: HashMap<Name, Node, Hasher> = HashMap::default();
        for mut r in records {
            let key = r.name.to_lowercase();
            if r.rtype() != Rtype::SRV {
                r.name = key;
            }
            match r.rtype() {
                Rtype::SOA => {
                    soa = Some(r);
                    continue;
                }
                Rtype::NS if key == origin => {
                    ns.push(r);
                    continue;
                }
                _ => {}
            }
            let node = nodes.entry(key).or_default();
            let t = r.rtype();
            match node.sets.iter_mut().find(|(rt, _)| *rt == t) {
                Some((_, v)) => v.push(r),
                None => node.sets.push((t, vec![r])),
            }
        }
        let soa = soa.ok_or(ZoneError::NoSoa)?;
        let mut parents: HashSet<Name, Hasher> = HashSet::default();
        for n in nodes.keys() {
            let mut p = n.parent();
            while let Some(x) = p {
                if !parents.insert(x) {
                    break;
                }
                p = x.parent();
            }
        }
        let mut order: Vec<Name> = nodes.keys().copied().collect();
        order.sort_by_cached_key(canonical_key);
        Ok(Zone {
            labels: origin.label_count(),
            origin,
            soa,
            ns,
            nodes,
            parents,
            order,
        })
    }

    /// The SOA serial.
    pub fn serial(&self) -> u32 {
        match &self.soa.data {
            RecordData::Soa { serial, .. } => *serial,
            _ => 0,
        }
    }

    fn node(&self, n: &Name) -> Option<&Node> {
        self.nodes.get(n)
    }

    fn has_descendant(&self, n: &Name) -> bool {
        self.parents.contains(n)
    }

    /// The zone's records as a transfer sends them: SOA, apex NS, every
    /// owner in canonical order, the SOA again.
    pub fn transfer_records(&self, out: &mut dyn FnMut(&Record)) {
        out(&self.soa);
        for r in &self.ns {
            out(r);
        }
        for n in &self.order {
            if let Some(node) = self.nodes.get(n) {
                for r in node.sets.iter().flat_map(|(_, rrs)| rrs) {
                    out(r);
                }
            }
        }
        out(&self.soa);
    }

    /// The name of `qname`'s rightmost `labels + i` labels, or `None` past
    /// the whole name (CoreDNS's `nameFromRight` overshooting).
    fn name_from_right(&self, qname: &Name, i: usize) -> Option<Name> {
        if i == 0 {
            return Some(self.origin);
        }
        let want = self.labels + i;
        let have = qname.label_count();
        if want > have {
            return None;
        }
        let mut n = *qname;
        for _ in 0..have - want {
            n = n.parent()?;
        }
        Some(n)
    }

    /// Looks `qname` (lowercase) up for `qtype`.
    pub fn lookup<'z>(&'z self, qname: &Name, qtype: Rtype) -> Plan<'z> {
        let mut plan = Plan::new();
        let outcome = self.lookup_into(qname, qtype, 0, &mut plan);
        plan.outcome = outcome;
        plan
    }

    /// The lookup proper; answers go into `plan`, authority and
    /// additional too unless this is a nested re-resolution (whose
    /// caller sets them).
    fn lookup_into<'z>(
        &'z self,
        qname: &Name,
        qtype: Rtype,
        depth: u8,
        plan: &mut Plan<'z>,
    ) -> Outcome {
        if *qname == self.origin {
            match qtype {
                Rtype::SOA => {
                    plan.push(None, std::slice::from_ref(&self.soa));
                    plan.auth = Auth::Ns;
                    return Outcome::Success;
                }
                Rtype::NS => {
                    plan.push(None, &self.ns);
                    plan.extra = Extra::Glue(&self.ns);
                    return Outcome::Success;
                }
                _ => {}
            }
        }
        if depth > MAX_LOOP {
            return Outcome::ServerFailure;
        }
        let mut i = 0;
        let mut elem: Option<&Node> = None;
        let mut found = false;
        let mut wild: Option<Name> = None;
        let mut wild_elem: Option<&Node> = None;
        while let Some(parts) = self.name_from_right(qname, i) {
            elem = self.node(&parts);
            found = elem.is_some();
            let Some(e) = elem else {
                if let Some(w) = asterisk(&parts) {
                    if let Some(we) = self.node(&w) {
                        wild = Some(w);
                        wild_elem = Some(we);
                    } else if self.has_descendant(&w) {
                        wild = Some(w);
                        wild_elem = None;
                    }
                }
                i += 1;
                continue;
            };
            if let Some(ns) = cut(e, qtype, parts == *qname) {
                plan.auth = Auth::Referral(ns);
                plan.extra = Extra::Glue(ns);
                return Outcome::Delegation;
            }
            i += 1;
        }
        if found && let Some(e) = elem {
            let cname = e.get(Rtype::CNAME);
            if !cname.is_empty() && qtype != Rtype::CNAME {
                return self.chase(None, cname, qtype, depth, plan);
            }
            let rrs = e.get(qtype);
            if rrs.is_empty() {
                plan.auth = Auth::Soa;
                return Outcome::NoData;
            }
            plan.push(None, rrs);
            plan.auth = Auth::Ns;
            plan.extra = Extra::Targets;
            return Outcome::Success;
        }
        if let Some(w) = wild
            && !self.closer_ent_exists(qname, &w)
        {
            let Some(we) = wild_elem else {
                plan.auth = Auth::Soa;
                return Outcome::NoData;
            };
            let cname = we.get(Rtype::CNAME);
            if !cname.is_empty() && qtype != Rtype::CNAME {
                return self.chase(Some(*qname), cname, qtype, depth, plan);
            }
            let rrs = we.get(qtype);
            if rrs.is_empty() {
                plan.auth = Auth::Soa;
                return Outcome::NoData;
            }
            plan.push(Some(*qname), rrs);
            plan.auth = Auth::Ns;
            plan.extra = Extra::Targets;
            return Outcome::Success;
        }
        plan.auth = Auth::Soa;
        // An empty non-terminal: NOERROR, still with the SOA.
        if self.has_descendant(qname) {
            Outcome::Success
        } else {
            Outcome::NameError
        }
    }

    /// Whether an empty non-terminal lies between the wildcard's parent
    /// and `qname` (it is then the closest encloser, RFC 4592).
    fn closer_ent_exists(&self, qname: &Name, wild: &Name) -> bool {
        let Some(parent) = wild.parent() else {
            return false;
        };
        let mut name = qname.parent();
        while let Some(n) = name {
            if n == parent || !n.ends_with(&parent) {
                return false;
            }
            if self.has_descendant(&n) {
                return true;
            }
            name = n.parent();
        }
        false
    }

    /// CoreDNS's `externalLookup`: follows `cname` (owned by `owner` when
    /// synthesised from a wildcard) within the zone.
    fn chase<'z>(
        &'z self,
        owner: Option<Name>,
        cname: &'z [Record],
        qtype: Rtype,
        depth: u8,
        plan: &mut Plan<'z>,
    ) -> Outcome {
        plan.push(owner, cname);
        let mut target = cname_target(cname);
        let mut i = 0;
        loop {
            let Some(t) = target else {
                plan.auth = Auth::Ns;
                plan.extra = Extra::Targets;
                return Outcome::Success;
            };
            let elem = self.node(&t);
            if let Some(ns) = self.find_delegation(&t, qtype, elem) {
                plan.auth = Auth::Referral(ns);
                plan.extra = Extra::Glue(ns);
                return Outcome::Delegation;
            }
            let elem = match elem {
                Some(e) if !(qtype == Rtype::NS || (qtype == Rtype::SOA && t == self.origin)) => e,
                _ => {
                    let result = self.resolve_again(&t, qtype, depth + 1, plan);
                    plan.auth = if matches!(result, Outcome::NameError | Outcome::NoData) {
                        Auth::Soa
                    } else {
                        Auth::Ns
                    };
                    plan.extra = Extra::Targets;
                    return result;
                }
            };
            let next = elem.get(Rtype::CNAME);
            if next.is_empty() {
                plan.push(None, elem.get(qtype));
                plan.auth = Auth::Ns;
                plan.extra = Extra::Targets;
                return Outcome::Success;
            }
            plan.push(None, next);
            target = cname_target(next);
            i += 1;
            if i > MAX_CHASE {
                plan.auth = Auth::Ns;
                plan.extra = Extra::Targets;
                return Outcome::Success;
            }
        }
    }

    /// What CoreDNS's upstream lookup of a CNAME target gives the answer:
    /// the target's answer records, and the outcome as read from the
    /// reply's rcode. Only names of this zone are resolved (see README).
    fn resolve_again<'z>(
        &'z self,
        target: &Name,
        qtype: Rtype,
        depth: u8,
        plan: &mut Plan<'z>,
    ) -> Outcome {
        if !target.ends_with(&self.origin) {
            plan.upstream = Some(*target);
            return Outcome::Success;
        }
        let mut inner = Plan::new();
        let result = self.lookup_into(target, qtype, depth, &mut inner);
        for s in &inner.segs[..inner.n] {
            plan.push(s.owner, s.rrs);
        }
        plan.upstream = plan.upstream.or(inner.upstream);
        let answered = inner.segs[..inner.n].iter().any(|s| !s.rrs.is_empty());
        match result {
            Outcome::NameError => Outcome::NameError,
            Outcome::ServerFailure => Outcome::ServerFailure,
            _ if !answered => Outcome::NoData,
            _ => Outcome::Success,
        }
    }

    /// The first zone cut between the apex and `name` (CoreDNS's
    /// `findDelegation`); `exact` is `name`'s own node.
    fn find_delegation<'z>(
        &'z self,
        name: &Name,
        qtype: Rtype,
        exact: Option<&'z Node>,
    ) -> Option<&'z [Record]> {
        let mut i = 1;
        loop {
            let n = self.name_from_right(name, i)?;
            let e = if n == *name {
                exact?
            } else {
                match self.node(&n) {
                    Some(e) => e,
                    None => {
                        i += 1;
                        continue;
                    }
                }
            };
            if let Some(ns) = cut(e, qtype, n == *name) {
                return Some(ns);
            }
            if n == *name {
                return None;
            }
            i += 1;
        }
    }

    /// A and then AAAA records of `name`.
    fn addresses(&self, name: &Name) -> [&[Record]; 2] {
        match self.node(&name.to_lowercase()) {
            Some(e) => [e.get(Rtype::A), e.get(Rtype::AAAA)],
            None => [&[], &[]],
        }
    }
}

/// The NS records of a zone cut at `e`, unless this is a DS query for
/// the cut itself (`at_qname`), which the parent side answers.
fn cut(e: &Node, qtype: Rtype, at_qname: bool) -> Option<&[Record]> {
    let ns = e.get(Rtype::NS);
    if ns.is_empty() || (qtype == Rtype::DS && at_qname) {
        None
    } else {
        Some(ns)
    }
}

fn cname_target(rrs: &[Record]) -> Option<Name> {
    match rrs.first().map(|r| &r.data) {
        Some(RecordData::Cname(t)) => Some(t.to_lowercase()),
        _ => None,
    }
}

/// `name` with its leftmost label replaced by `*`.
fn asterisk(name: &Name) -> Option<Name> {
    name.parent()?.prepend_label(b"*").ok()
}

/// RFC 4034 canonical order: labels compared from the right, lowercase.
fn canonical_key(n: &Name) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = n.labels().map(|l| l.to_ascii_lowercase()).collect();
    v.reverse();
    v
}

/// One record set of an answer, with the owner it is shown under when
/// synthesised from a wildcard.
#[derive(Clone, Copy)]
struct Seg<'z> {
    owner: Option<Name>,
    rrs: &'z [Record],
}

/// The authority section of a plan.
#[derive(Clone, Copy, Debug)]
enum Auth<'z> {
    None,
    Soa,
    Ns,
    Referral(&'z [Record]),
}

/// The additional section of a plan.
#[derive(Clone, Copy, Debug)]
enum Extra<'z> {
    None,
    /// Addresses of the in-bailiwick targets of these NS records.
    Glue(&'z [Record]),
    /// Addresses of the in-zone MX and SRV targets in the answer.
    Targets,
}

/// What a lookup decided, borrowed from the zone.
pub struct Plan<'z> {
    segs: [Seg<'z>; MAX_SEGS],
    n: usize,
    auth: Auth<'z>,
    extra: Extra<'z>,
    /// The lookup's outcome.
    pub outcome: Outcome,
    /// A CNAME target outside the zone, for the server block's chain to
    /// resolve (CoreDNS asks its server again); its answers go after the
    /// chain.
    pub upstream: Option<Name>,
}

impl<'z> Plan<'z> {
    fn new() -> Self {
        Plan {
            segs: [Seg {
                owner: None,
                rrs: &[],
            }; MAX_SEGS],
            n: 0,
            auth: Auth::None,
            extra: Extra::None,
            outcome: Outcome::Success,
            upstream: None,
        }
    }

    fn push(&mut self, owner: Option<Name>, rrs: &'z [Record]) {
        if self.n < MAX_SEGS {
            self.segs[self.n] = Seg { owner, rrs };
            self.n += 1;
        }
    }

    /// Whether the answer section is empty.
    pub fn no_answer(&self) -> bool {
        self.segs[..self.n].iter().all(|s| s.rrs.is_empty())
    }

    /// Takes what the server block's chain answered for
    /// [`Plan::upstream`]: the outcome as CoreDNS reads the reply's rcode
    /// (`None`: the lookup failed), and the authority section that goes
    /// with it.
    pub fn resolved(&mut self, rcode: Option<Rcode>, answered: bool) {
        self.outcome = match rcode {
            None | Some(Rcode::SERVFAIL) => Outcome::ServerFailure,
            Some(Rcode::NXDOMAIN) => Outcome::NameError,
            Some(Rcode::NOERROR) if !answered => Outcome::NoData,
            Some(_) => Outcome::Success,
        };
        self.auth = match self.outcome {
            Outcome::NameError | Outcome::NoData => Auth::Soa,
            _ => Auth::Ns,
        };
    }

    /// Writes the three sections into `b`, `more` (the answers of an
    /// upstream lookup) after the plan's answers; records that do not fit
    /// are left out (TC is the server's to set).
    pub fn write(&self, zone: &Zone, b: &mut MessageBuilder<'_>, more: &[Record]) {
        for s in &self.segs[..self.n] {
            for r in s.rrs {
                let owner = s.owner.as_ref().unwrap_or(&r.name);
                if b.push(Section::Answer, owner, r.class, r.ttl, &r.as_rdata())
                    .is_err()
                {
                    return;
                }
            }
        }
        for r in more {
            if b.push_record(Section::Answer, r).is_err() {
                return;
            }
        }
        let auth: &[Record] = match self.auth {
            Auth::None => &[],
            Auth::Soa => std::slice::from_ref(&zone.soa),
            Auth::Ns => &zone.ns,
            Auth::Referral(ns) => ns,
        };
        for r in auth {
            if b.push_record(Section::Authority, r).is_err() {
                return;
            }
        }
        match self.extra {
            Extra::None => {}
            Extra::Glue(ns) => {
                for r in ns {
                    if let RecordData::Ns(t) = &r.data
                        && t.ends_with(&r.name)
                    {
                        for set in zone.addresses(t) {
                            for a in set {
                                if b.push_record(Section::Additional, a).is_err() {
                                    return;
                                }
                            }
                        }
                    }
                }
            }
            Extra::Targets => {
                let all = || self.segs[..self.n].iter().flat_map(|s| s.rrs.iter());
                for (k, r) in all().enumerate() {
                    let Some(t) = target_of(r) else { continue };
                    if !t.ends_with(&zone.origin) {
                        continue;
                    }
                    // Each target once, however many records name it.
                    if all()
                        .take(k)
                        .filter_map(target_of)
                        .any(|p| p.eq_ignore_case(t))
                    {
                        continue;
                    }
                    for set in zone.addresses(t) {
                        for a in set {
                            if b.push_record(Section::Additional, a).is_err() {
                                return;
                            }
                        }
                    }
                }
            }
        }
    }
}

fn target_of(r: &Record) -> Option<&Name> {
    match &r.data {
        RecordData::Mx { exchange, .. } => Some(exchange),
        RecordData::Srv { target, .. } => Some(target),
        _ => None,
    }
}
