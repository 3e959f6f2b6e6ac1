#![doc = include_str!("README.md")]

use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

use clusterdns_contract::metrics::{Counter, Family};
use clusterdns_contract::response::Kind;
use clusterdns_contract::{
    BlockChain, BoxFuture, ChainTail, Deferred, Flow, Outcome, Plugin, PluginDef, Request,
    ResponseWriter, SetupCtx,
};
use clusterdns_corefile::{ConfigError, Directive};
use clusterdns_wire::{Class, Message, RData, Rcode, Record, RecordData, Rtype, Section};

/// Registration of *dns64*.
pub const DEF: PluginDef = PluginDef {
    name: "dns64",
    setup,
};

/// The well-known prefix of RFC 6052.
const WELL_KNOWN: ([u8; 16], u8) = (
    [0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    96,
);

/// Go's `net.ParseCIDR`, masked: the network and its prefix length.
fn parse_cidr(s: &str) -> Option<(IpAddr, u8)> {
    let (addr, len) = clusterdns_corefile::cidr::parse(s)?;
    Some((clusterdns_corefile::cidr::network(addr, len), len))
}

/// A prefix argument, checked as CoreDNS's `parsePrefix`.
fn prefix(d: &Directive, s: &str) -> Result<([u8; 16], u8), ConfigError> {
    let Some((net, len)) = parse_cidr(s) else {
        // CoreDNS returns Go's error bare, without the place.
        return Err(d.err(format!("invalid CIDR address: {s}")));
    };
    match net {
        IpAddr::V4(_) => Err(d.err(format!("invalid netmask 32 IPv6 address: \"{net}/{len}\""))),
        IpAddr::V6(v6) if len % 8 != 0 || !(32..=96).contains(&len) => {
            Err(d.err(format!("invalid prefix length \"{v6}/{len}\"")))
        }
        IpAddr::V6(v6) => Ok((v6.octets(), len)),
    }
}

fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    let mut pfx = WELL_KNOWN;
    let mut translate_all = false;
    let mut allow_ipv4 = false;
    for d in dirs {
        match d.args.as_slice() {
            // With a prefix argument CoreDNS reads no block.
            [a] => {
                pfx = prefix(d, &a.text)?;
                continue;
            }
            [] => {}
            _ => return Err(d.arg_err()),
        }
        for p in &d.block {
            match p.name.text.as_str() {
                "prefix" => match p.args.first() {
                    Some(a) => pfx = prefix(p, &a.text)?,
                    None => return Err(p.arg_err()),
                },
                "translate_all" => translate_all = true,
                "allow_ipv4" => allow_ipv4 = true,
                other => return Err(p.err(format!("unknown property '{other}'"))),
            }
        }
    }
    let translated =
        ctx.shared
            .metrics
            .get_or_register("coredns_dns64_requests_translated_total", || {
                Family::<Counter>::new(
                    "coredns_dns64_requests_translated_total",
                    "Counter of DNS requests translated by dns64.",
                    &["server"],
                )
            });
    let servers = ctx
        .server_labels()
        .into_iter()
        .map(|s| {
            let c = translated.with(&[&s]);
            (s, c)
        })
        .collect();
    let tail = ChainTail::default();
    let whole = BlockChain::default();
    ctx.bind_chain(&whole);
    ctx.add_plugin(Arc::new(Dns64 {
        prefix: pfx.0,
        prefix_len: pfx.1,
        translate_all,
        allow_ipv4,
        translated,
        servers,
        tail: tail.clone(),
        whole,
    }));
    ctx.bind_tail(&tail);
    Ok(())
}

/// The *dns64* handler.
pub struct Dns64 {
    prefix: [u8; 16],
    prefix_len: u8,
    translate_all: bool,
    allow_ipv4: bool,
    translated: Arc<Family<Counter>>,
    /// The counter of each of the block's listeners, resolved at setup.
    servers: Vec<(String, Arc<Counter>)>,
    /// The plugins after this one: they answer the AAAA query.
    tail: ChainTail,
    /// The block's whole chain: the A lookup asks it, as CoreDNS asks its
    /// server again.
    whole: BlockChain,
}

impl std::fmt::Debug for Dns64 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dns64")
            .field("prefix_len", &self.prefix_len)
            .field("translate_all", &self.translate_all)
            .field("allow_ipv4", &self.allow_ipv4)
            .finish_non_exhaustive()
    }
}

/// Where a deferred query stands.
enum Stage {
    /// The plugins behind deferred the AAAA query at this position; their
    /// own note travels in the writer (boxed: a writer is large, and the
    /// stage is only built on the way to the asynchronous path).
    Resume(Deferred, Box<ResponseWriter>),
    /// Their AAAA reply needs synthesis.
    Translate(Vec<u8>),
}

impl Dns64 {
    /// RFC 6052's embedding of `v4` in the prefix (bits 64-71 stay zero).
    fn to6(&self, v4: [u8; 4]) -> Ipv6Addr {
        let mut v6 = [0u8; 16];
        let n = usize::from(self.prefix_len / 8);
        v6[..n].copy_from_slice(&self.prefix[..n]);
        let mut i = n;
        for b in v4 {
            if i == 8 {
                i += 1;
            }
            v6[i] = b;
            i += 1;
        }
        Ipv6Addr::from(v6)
    }

    /// Whether the reply to the AAAA query gets synthesis: not NXDOMAIN
    /// (RFC 6147 5.1.2), and no AAAA answer unless `translate_all`.
    fn needs_translation(&self, reply: &[u8]) -> bool {
        let Ok(m) = Message::parse(reply) else {
            return false;
        };
        if Kind::of(&m) == Kind::NameError {
            return false;
        }
        self.translate_all || !m.section(Section::Answer).any(|r| r.rtype == Rtype::AAAA)
    }

    /// After the plugins behind answered the AAAA query: done, or the
    /// stage to continue with.
    fn after_tail(&self, outcome: Outcome, w: &mut ResponseWriter) -> Result<Flow, Stage> {
        if let Some(e) = outcome.error {
            return Ok(Flow::Fail(e));
        }
        if !self.needs_translation(w.bytes()) {
            return Ok(Flow::Answered);
        }
        Err(Stage::Translate(w.bytes().to_vec()))
    }

    fn count(&self, server: &str) {
        match self.servers.iter().find(|(s, _)| s == server) {
            Some((_, c)) => c.inc(),
            None => self.translated.with(&[server]).inc(),
        }
    }

    /// The reply CoreDNS's `Synthesize` builds from the AAAA reply and
    /// the A reply.
    fn synthesize(&self, req: &Request<'_>, w: &mut ResponseWriter, aaaa: &[u8], a: &[u8]) {
        let Ok(a) = Message::parse(a) else {
            w.write_error(req, Rcode::SERVFAIL);
            return;
        };
        // 5.1.7: the TTL is at most the SOA's of the AAAA reply, else 600.
        let soa_ttl = Message::parse(aaaa)
            .ok()
            .and_then(|m| {
                m.section(Section::Authority)
                    .filter(|r| r.rtype == Rtype::SOA)
                    .last()
                    .map(|r| r.ttl)
            })
            .unwrap_or(600);
        let records = |s: Section| -> Vec<Record> {
            a.section(s)
                .filter(|r| r.rtype != Rtype::OPT)
                .filter_map(|r| r.to_owned_record(&a).ok())
                .collect()
        };
        let (answer, authority, additional) = (
            records(Section::Answer),
            records(Section::Authority),
            records(Section::Additional),
        );
        let mut b = w.reply(req);
        b.set_tc(a.header().tc());
        for r in &answer {
            match r.data {
                RecordData::A(v4) => {
                    let v6 = RData::Aaaa(self.to6(v4.octets()));
                    let _ = b.push(Section::Answer, &r.name, r.class, r.ttl.min(soa_ttl), &v6);
                }
                _ => {
                    let _ = b.push_record(Section::Answer, r);
                }
            }
        }
        for r in &authority {
            let _ = b.push_record(Section::Authority, r);
        }
        for r in &additional {
            let _ = b.push_record(Section::Additional, r);
        }
        b.finish();
    }
}

impl Plugin for Dns64 {
    fn name(&self) -> &'static str {
        "dns64"
    }

    fn query(&self, req: &Request<'_>, w: &mut ResponseWriter) -> Flow {
        let family_ok = self.allow_ipv4 || !req.client.ip().is_ipv4();
        if !family_ok || req.qtype() != Rtype::AAAA || req.qclass() != Class::IN {
            return Flow::Next;
        }
        let Some(tail) = self.tail.get() else {
            return Flow::Next;
        };
        let stage = match tail.run_sync(req, w) {
            Ok(outcome) => match self.after_tail(outcome, w) {
                Ok(flow) => return flow,
                Err(stage) => stage,
            },
            Err(d) => {
                let mut theirs = Box::<ResponseWriter>::default();
                w.carry_note_to(&mut theirs);
                Stage::Resume(d, theirs)
            }
        };
        w.defer_with(Box::new(stage))
    }

    fn query_async<'a>(
        &'a self,
        req: &'a Request<'a>,
        w: &'a mut ResponseWriter,
    ) -> BoxFuture<'a, Flow> {
        Box::pin(async move {
            let Some(tail) = self.tail.get() else {
                return Flow::Fail(clusterdns_contract::PluginError::NoNext { plugin: "dns64" });
            };
            let stage = match clusterdns_contract::note_or_query::<Stage>(self, req, w) {
                Ok(s) => *s,
                Err(flow) => return flow,
            };
            let aaaa = match stage {
                Stage::Translate(aaaa) => aaaa,
                Stage::Resume(d, mut theirs) => {
                    theirs.carry_note_to(w);
                    let outcome = tail.run_async_from(d, req, w).await;
                    match self.after_tail(outcome, w) {
                        Ok(flow) => return flow,
                        Err(Stage::Translate(aaaa)) => aaaa,
                        Err(Stage::Resume(..)) => return Flow::Answered,
                    }
                }
            };
            // The A records, asked of the whole block again as CoreDNS
            // asks its server.
            let whole = self.whole.get();
            let chain = whole.as_ref().unwrap_or(tail);
            let Some(a) = crate::pkg::upstream::lookup(chain, req, req.qname(), Rtype::A).await
            else {
                w.write_error(req, Rcode::SERVFAIL);
                return Flow::Answered;
            };
            self.synthesize(req, w, &aaaa, &a);
            self.count(req.server);
            Flow::Answered
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{setup as run_setup, setup_err};

    #[test]
    fn embeds_as_rfc_6052() {
        let mut d = Dns64 {
            prefix: WELL_KNOWN.0,
            prefix_len: 96,
            translate_all: false,
            allow_ipv4: false,
            translated: Arc::new(Family::new("x", "x", &["server"])),
            servers: Vec::new(),
            tail: ChainTail::default(),
            whole: BlockChain::default(),
        };
        assert_eq!(d.to6([192, 0, 2, 33]).to_string(), "64:ff9b::c000:221");
        for (len, want) in [
            (32, "2001:db8:c000:221::"),
            (40, "2001:db8:1c0:2:21::"),
            (48, "2001:db8:122:c000:2:2100::"),
            (56, "2001:db8:122:3c0:0:221::"),
            (64, "2001:db8:122:344:c0:2:2100:0"),
        ] {
            let (net, _) = parse_cidr(&format!("2001:db8:122:344::/{len}")).unwrap();
            let IpAddr::V6(v6) = net else { panic!() };
            d.prefix = v6.octets();
            d.prefix_len = len;
            assert_eq!(d.to6([192, 0, 2, 33]).to_string(), want, "/{len}");
        }
    }

    #[test]
    fn setup_table() {
        for c in [
            ". {\n dns64\n}",
            ". {\n dns64 64:1337::/96\n}",
            ". {\n dns64 {\n  prefix 64:1337::/96\n  translate_all\n  allow_ipv4\n }\n}",
        ] {
            run_setup(DEF, c).unwrap_or_else(|e| panic!("{c}: {e}"));
        }
        for (c, want) in [
            (". {\n dns64 a b\n}", "Wrong argument count"),
            (". {\n dns64 foo\n}", "invalid CIDR address: foo"),
            (
                ". {\n dns64 10.0.0.0/8\n}",
                "invalid netmask 32 IPv6 address: \"10.0.0.0/8\"",
            ),
            (
                ". {\n dns64 64:ff9b::1/33\n}",
                "invalid prefix length \"64:ff9b::/33\"",
            ),
            (". {\n dns64 {\n  prefix\n }\n}", "Wrong argument count"),
            (". {\n dns64 {\n  bogus\n }\n}", "unknown property 'bogus'"),
        ] {
            let e = setup_err(DEF, c);
            assert!(e.contains(want), "{c}: {e}");
        }
    }
}
