#![doc = include_str!("README.md")]

use std::cell::Cell;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use clusterdns_contract::{
    BoxFuture, ChainTail, ExternalHost, ExternalService, Flow, Plugin, PluginDef, PluginError,
    Request, ResponseWriter, SetupCtx,
};
use clusterdns_corefile::{ConfigError, Directive};
use clusterdns_wire::{Class, MessageBuilder, Name, RData, Rcode, Rtype, Section};

/// Registration of *k8s_external*.
pub const DEF: PluginDef = PluginDef {
    name: "k8s_external",
    setup,
};

const NAME: &str = "k8s_external";

/// The plugin that gives the answers (CoreDNS hard-codes it too).
const SOURCE: &str = "kubernetes";

/// What `query` found before deferring (hostnames to look up).
struct Deferred {
    zone: Name,
    entries: Vec<ExternalService>,
}

/// The *k8s_external* handler.
pub struct External {
    /// Zones, lowercase, in the order given.
    zones: Vec<Name>,
    /// `apex`: the label of the zone's own records (`dns`).
    apex: Vec<u8>,
    ttl: u32,
    headless: bool,
    /// `fallthrough`: `None` off, else the zones that fall through.
    fall: Option<Vec<Name>>,
    /// The *kubernetes* plugin behind, found at start-up.
    source: Arc<OnceLock<Arc<dyn Plugin>>>,
    /// The plugins behind, which look hostnames up.
    tail: ChainTail,
}

impl std::fmt::Debug for External {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("External")
            .field("zones", &self.zones)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    let mut e = External {
        zones: Vec::new(),
        apex: b"dns".to_vec(),
        ttl: 5,
        headless: false,
        fall: None,
        source: Arc::default(),
        tail: ChainTail::default(),
    };
    // CoreDNS reads every line; options accumulate, the zones are the last line's.
    for d in dirs {
        e.zones = if d.args.is_empty() {
            ctx.zones()
                .iter()
                .filter_map(|z| Name::from_ascii(z).ok())
                .collect()
        } else {
            clusterdns_contract::parse::origins(d.arg_texts())
        };
        for p in &d.block {
            let args: Vec<&str> = p.arg_texts().collect();
            match p.name.text.as_str() {
                "ttl" => e.ttl = clusterdns_contract::parse::ttl_0_3600(p)?,
                "apex" => {
                    let Some(a) = args.first() else {
                        return Err(p.arg_err());
                    };
                    e.apex = a.as_bytes().to_vec();
                }
                "headless" => e.headless = true,
                "fallthrough" => {
                    e.fall = Some(if args.is_empty() {
                        vec![Name::root()]
                    } else {
                        clusterdns_contract::parse::origins(args)
                    });
                }
                other => return Err(p.err(format!("unknown property '{other}'"))),
            }
        }
    }
    let tail = e.tail.clone();
    let (hook_tail, found) = (tail.clone(), e.source.clone());
    ctx.shared.on_startup.push(Box::new(move || {
        let p = hook_tail
            .get()
            .and_then(|c| c.plugins().iter().find(|p| p.name() == SOURCE));
        match p {
            None => Err(format!("plugin/{NAME}: kubernetes plugin not loaded")),
            Some(p) if p.externaler().is_none() => Err(format!(
                "plugin/{NAME}: kubernetes plugin does not implement the Externaler interface"
            )),
            Some(p) => {
                let _ = found.set(p.clone());
                Ok(())
            }
        }
    }));
    ctx.add_plugin(Arc::new(e));
    ctx.bind_tail(&tail);
    Ok(())
}

thread_local! {
    /// The entries of the query at hand (reused: no allocation per query
    /// once grown).
    static ENTRIES: Cell<Vec<ExternalService>> = const { Cell::new(Vec::new()) };
    /// The server's addresses, for the apex records.
    static ADDRS: Cell<Vec<IpAddr>> = const { Cell::new(Vec::new()) };
}

fn addr_rdata(ip: IpAddr) -> RData<'static> {
    match ip {
        IpAddr::V4(v4) => RData::A(v4),
        IpAddr::V6(v6) => RData::Aaaa(v6),
    }
}

/// Whether `rtype` asks for `ip`'s family (A: v4, AAAA: v6).
fn family(rtype: Rtype, ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(_) => rtype == Rtype::A,
        IpAddr::V6(_) => rtype == Rtype::AAAA,
    }
}

/// What a lookup of an alias gave: for entry `entry`, type `qtype`.
struct Looked {
    entry: usize,
    qtype: Rtype,
    reply: Option<Vec<u8>>,
}

/// Appends the answer records of the reply `msg` to `section` of `b`;
/// its TC bit comes along (CoreDNS's `m.Truncated` from the lookup).
fn copy_answers(b: &mut MessageBuilder<'_>, msg: &[u8], section: Section) {
    let Ok(m) = clusterdns_wire::Message::parse(msg) else {
        return;
    };
    if m.header().tc() && section == Section::Answer {
        b.set_tc(true);
    }
    for rec in m.section(Section::Answer) {
        if let Ok(r) = rec.to_owned_record(&m) {
            let _ = b.push_record(section, &r);
        }
    }
}

/// The lookups the answer to `qtype` needs for `entries` (CoreDNS's
/// `upstream.Lookup` calls in `a`, `aaaa` and `srv`).
fn lookups_needed(qtype: Rtype, entries: &[ExternalService]) -> Vec<(usize, Name, Rtype)> {
    let mut out = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let ExternalHost::Alias(h) = e.host else {
            continue;
        };
        match qtype {
            Rtype::A | Rtype::AAAA => out.push((i, h, qtype)),
            Rtype::SRV if e.port.is_some() => {
                let dup = entries[..i]
                    .iter()
                    .any(|p| p.port.is_some() && p.host == e.host);
                if !dup {
                    out.push((i, h, Rtype::A));
                    out.push((i, h, Rtype::AAAA));
                }
            }
            _ => {}
        }
    }
    out
}

impl External {
    /// The server's addresses (none unless `wanted`), in the reused
    /// buffer: give it back with `ADDRS.set`.
    fn addresses(&self, x: &dyn clusterdns_contract::Externaler, wanted: bool) -> Vec<IpAddr> {
        let mut addrs = ADDRS.take();
        addrs.clear();
        if wanted {
            x.external_addresses(self.headless, &mut addrs);
        }
        addrs
    }

    /// `ns1.<apex>.<zone>` (or `hostmaster.…`).
    fn apex_name(&self, first: &[u8], zone: &Name) -> Name {
        Name::from_labels([first, &self.apex[..]])
            .and_then(|n| n.concat(zone))
            .unwrap_or(*zone)
    }

    fn soa(&self, b: &mut MessageBuilder<'_>, section: Section, zone: &Name, serial: u32) {
        let mname = self.apex_name(b"ns1", zone);
        let rname = self.apex_name(b"hostmaster", zone);
        let soa = RData::Soa {
            mname: &mname,
            rname: &rname,
            serial,
            refresh: 7200,
            retry: 1800,
            expire: 86400,
            minimum: self.ttl,
        };
        let _ = b.push(section, zone, Class::IN, self.ttl, &soa);
    }

    /// The apex itself: SOA, NS (with the server's addresses), else NODATA.
    fn serve_apex(
        &self,
        req: &Request<'_>,
        w: &mut ResponseWriter,
        x: &dyn clusterdns_contract::Externaler,
        zone: &Name,
    ) {
        let serial = x.external_serial();
        let addrs = self.addresses(x, req.qtype() == Rtype::NS);
        let mut b = w.reply(req);
        b.set_aa(true);
        match req.qtype() {
            Rtype::SOA => self.soa(&mut b, Section::Answer, zone, serial),
            Rtype::NS => {
                let ns = self.apex_name(b"ns1", zone);
                let _ = b.push(Section::Answer, zone, Class::IN, self.ttl, &RData::Ns(&ns));
                let owner = Name::from_labels([&b"ns1"[..], &self.apex[..]])
                    .and_then(|n| n.concat(req.qname()))
                    .unwrap_or(ns);
                for ip in &addrs {
                    let _ = b.push(
                        Section::Additional,
                        &owner,
                        Class::IN,
                        self.ttl,
                        &addr_rdata(*ip),
                    );
                }
            }
            _ => self.soa(&mut b, Section::Authority, zone, serial),
        }
        b.finish();
        ADDRS.set(addrs);
    }

    /// Names under `<apex>.<zone>`: `ns1.<apex>.<zone>` has the server's
    /// addresses, `<apex>.<zone>` exists without records, the rest is
    /// NXDOMAIN.
    fn serve_sub_apex(
        &self,
        req: &Request<'_>,
        w: &mut ResponseWriter,
        x: &dyn clusterdns_contract::Externaler,
        zone: &Name,
    ) {
        let serial = x.external_serial();
        let lower = req.qname_lower();
        let mut base = lower.strip_suffix_labels(zone).into_iter().flatten();
        let first = base.next();
        let count = usize::from(first.is_some()) + base.count();
        let mut b = w.reply(req);
        b.set_aa(true);
        match (count, first) {
            (1, _) => self.soa(&mut b, Section::Authority, zone, serial),
            (2, Some(ns)) if ns == b"ns1" => {
                let addrs = self.addresses(x, true);
                for ip in addrs.iter().filter(|ip| family(req.qtype(), **ip)) {
                    let _ = b.push(
                        Section::Answer,
                        req.qname(),
                        Class::IN,
                        self.ttl,
                        &addr_rdata(*ip),
                    );
                }
                ADDRS.set(addrs);
                if b.counts()[1] == 0 {
                    self.soa(&mut b, Section::Authority, zone, serial);
                }
            }
            _ => {
                b.set_rcode(Rcode::NXDOMAIN);
                self.soa(&mut b, Section::Authority, zone, serial);
            }
        }
        b.finish();
    }

    /// The reply with `entries` (and the lookups made for them).
    fn write_answer(
        &self,
        req: &Request<'_>,
        w: &mut ResponseWriter,
        x: &dyn clusterdns_contract::Externaler,
        zone: &Name,
        entries: &[ExternalService],
        looked: &[Looked],
    ) {
        let mut b = w.reply(req);
        b.set_aa(true);
        self.push_answers(&mut b, req, entries, looked);
        if b.counts()[1] == 0 {
            self.soa(&mut b, Section::Authority, zone, x.external_serial());
        }
        b.finish();
    }

    /// The answer records for `entries` (CoreDNS `a`, `aaaa`, `srv`,
    /// `ptr`); duplicates are found by looking back over the entries
    /// before, which are few, so nothing is allocated.
    fn push_answers(
        &self,
        b: &mut MessageBuilder<'_>,
        req: &Request<'_>,
        entries: &[ExternalService],
        looked: &[Looked],
    ) {
        let qname = req.qname();
        let qtype = req.qtype();
        let addr = |e: &ExternalService| match e.host {
            ExternalHost::Ip(ip) => Some(ip),
            ExternalHost::Name(_) | ExternalHost::Alias(_) => None,
        };
        let alias = |e: &ExternalService| match e.host {
            ExternalHost::Alias(h) => Some(h),
            _ => None,
        };
        let replies = |i: usize, t: Rtype| {
            looked
                .iter()
                .filter(move |l| l.entry == i && l.qtype == t)
                .filter_map(|l| l.reply.as_deref())
        };
        match qtype {
            Rtype::A | Rtype::AAAA => {
                for (i, e) in entries.iter().enumerate() {
                    if let Some(h) = alias(e) {
                        // CoreDNS: a CNAME and the lookup's answer for
                        // every entry, duplicates included.
                        let cname = RData::Cname(&h);
                        let _ = b.push(Section::Answer, qname, Class::IN, e.ttl, &cname);
                        for reply in replies(i, qtype) {
                            copy_answers(b, reply, Section::Answer);
                        }
                        continue;
                    }
                    let Some(ip) = addr(e) else { continue };
                    if !family(qtype, ip) || entries[..i].iter().any(|p| addr(p) == Some(ip)) {
                        continue;
                    }
                    let _ = b.push(Section::Answer, qname, Class::IN, self.ttl, &addr_rdata(ip));
                }
            }
            Rtype::SRV => {
                // CoreDNS: every entry weighs 100 in priority 0.
                let n = entries.len().max(1) as f64;
                let w = (100.0 / (100.0 * n) * 100.0).floor();
                let weight = if w < 1.0 { 1 } else { w as u16 };
                for (i, e) in entries.iter().enumerate() {
                    let before = &entries[..i];
                    // CoreDNS's port -1: no SRV record, no address either.
                    let Some(port) = e.port else { continue };
                    if (addr(e).is_none() && alias(e).is_none())
                        || before
                            .iter()
                            .any(|p| p.target == e.target && p.port == e.port)
                    {
                        continue;
                    }
                    let srv = RData::Srv {
                        priority: 0,
                        weight,
                        port,
                        target: &e.target,
                    };
                    let _ = b.push(Section::Answer, qname, Class::IN, e.ttl, &srv);
                }
                for (i, e) in entries.iter().enumerate() {
                    if let (Some(h), Some(_)) = (alias(e), e.port) {
                        if !entries[..i]
                            .iter()
                            .any(|p| p.port.is_some() && alias(p) == Some(h))
                        {
                            for t in [Rtype::A, Rtype::AAAA] {
                                for reply in replies(i, t) {
                                    copy_answers(b, reply, Section::Additional);
                                }
                            }
                        }
                        continue;
                    }
                    let (Some(ip), Some(_)) = (addr(e), e.port) else {
                        continue;
                    };
                    if entries[..i]
                        .iter()
                        .any(|p| p.target == e.target && addr(p) == Some(ip))
                    {
                        continue;
                    }
                    let _ = b.push(
                        Section::Additional,
                        &e.target,
                        Class::IN,
                        self.ttl,
                        &addr_rdata(ip),
                    );
                }
            }
            Rtype::PTR => {
                let first = self.zones.first().copied().unwrap_or_else(Name::root);
                for (i, e) in entries.iter().enumerate() {
                    let ExternalHost::Name(host) = e.host else {
                        continue;
                    };
                    if entries[..i].iter().any(|p| p.host == e.host) {
                        continue;
                    }
                    let Ok(target) = host.concat(&first) else {
                        continue;
                    };
                    let _ = b.push(
                        Section::Answer,
                        qname,
                        Class::IN,
                        self.ttl,
                        &RData::Ptr(&target),
                    );
                }
            }
            _ => {}
        }
    }
}

impl Plugin for External {
    fn name(&self) -> &'static str {
        NAME
    }

    fn query(&self, req: &Request<'_>, w: &mut ResponseWriter) -> Flow {
        let lower = req.qname_lower();
        let Some(zone) = self
            .zones
            .iter()
            .filter(|z| lower.ends_with(z))
            .max_by_key(|z| z.len())
        else {
            return Flow::Next;
        };
        let Some(x) = self.source.get().and_then(|p| p.externaler()) else {
            return Flow::Next;
        };
        for z in &self.zones {
            if lower == z {
                self.serve_apex(req, w, x, zone);
                return Flow::Answered;
            }
            if let Ok(apex) = z.prepend_label(&self.apex)
                && lower.ends_with(&apex)
            {
                self.serve_sub_apex(req, w, x, zone);
                return Flow::Answered;
            }
        }
        let mut entries = ENTRIES.take();
        entries.clear();
        let rcode = x.external(req, zone, self.headless, &mut entries);
        let flow = if entries.is_empty() {
            let falls = self
                .fall
                .as_ref()
                .is_some_and(|zs| zs.iter().any(|f| lower.ends_with(f)));
            if falls && rcode == Rcode::NXDOMAIN {
                Flow::Next
            } else {
                let mut b = w.reply(req);
                b.set_aa(true);
                b.set_rcode(rcode);
                self.soa(&mut b, Section::Authority, zone, x.external_serial());
                b.finish();
                Flow::Answered
            }
        } else if entries
            .iter()
            .any(|e| matches!(e.host, ExternalHost::Alias(_)))
            && matches!(req.qtype(), Rtype::A | Rtype::AAAA | Rtype::SRV)
            && self.tail.get().is_some_and(|t| !t.plugins().is_empty())
        {
            // Hostnames to look up: on the asynchronous path.
            w.defer_with(Box::new(Deferred {
                zone: *zone,
                entries: entries.clone(),
            }))
        } else {
            self.write_answer(req, w, x, zone, &entries, &[]);
            Flow::Answered
        };
        ENTRIES.set(entries);
        flow
    }

    fn query_async<'a>(
        &'a self,
        req: &'a Request<'a>,
        w: &'a mut ResponseWriter,
    ) -> BoxFuture<'a, Flow> {
        Box::pin(async move {
            let d = match w.take_note::<Deferred>() {
                Some(d) => d,
                // Not deferred by `query` (a walk started over): ask it.
                None => match self.query(req, w) {
                    Flow::Async => match w.take_note::<Deferred>() {
                        Some(d) => d,
                        None => return Flow::Fail(PluginError::NotAsync { plugin: NAME }),
                    },
                    flow => return flow,
                },
            };
            let (Some(x), Some(tail)) = (
                self.source.get().and_then(|p| p.externaler()),
                self.tail.get(),
            ) else {
                return Flow::Fail(PluginError::NotAsync { plugin: NAME });
            };
            let mut looked = Vec::new();
            for (entry, name, qtype) in lookups_needed(req.qtype(), &d.entries) {
                let reply = crate::pkg::upstream::lookup(tail, req, &name, qtype).await;
                looked.push(Looked {
                    entry,
                    qtype,
                    reply,
                });
            }
            self.write_answer(req, w, x, &d.zone, &d.entries, &looked);
            Flow::Answered
        })
    }
}

#[cfg(test)]
mod tests {
    use super::DEF;
    use crate::testutil::{setup, setup_err};

    #[test]
    fn setup_reads_coredns_options_and_refuses_as_it_does() {
        let r = setup(
            DEF,
            "example.org {\n k8s_external {\n  apex Out\n  ttl 0\n  headless\n  fallthrough a.example.org\n }\n}",
        )
        .unwrap();
        assert_eq!(r.plugins.len(), 1);
        for (c, want) in [
            (" ttl\n", "Wrong argument count"),
            (" ttl 3601\n", "ttl must be in range [0, 3600]: 3601"),
            (" ttl x\n", "strconv.Atoi: parsing \"x\": invalid syntax"),
            (" apex\n", "Wrong argument count"),
            (" bogus\n", "unknown property 'bogus'"),
        ] {
            let e = setup_err(
                DEF,
                &format!(". {{\n k8s_external example.org {{\n{c} }}\n}}"),
            );
            assert!(e.contains(want), "{c:?}: {e}");
        }
    }
}
