#![doc = include_str!("README.md")]

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use clusterdns_contract::metrics::{Counter, Family};
use clusterdns_contract::{Flow, Plugin, PluginDef, Request, ResponseWriter, SetupCtx};
use clusterdns_corefile::{ConfigError, Directive};
use clusterdns_wire::{Class, MessageBuilder, Name, RData, Rcode, Rtype, Section};

/// Registration of *local*.
pub const DEF: PluginDef = PluginDef {
    name: "local",
    setup,
};

/// TTL of every record (and the SOA's minimum), one week as CoreDNS.
pub const TTL: u32 = 604_800;

/// The zones answered, lowercase, in wire form.
const ZONES: [&[u8]; 4] = [
    b"\x09localhost\x00",
    b"\x010\x07in-addr\x04arpa\x00",
    b"\x03127\x07in-addr\x04arpa\x00",
    b"\x03255\x07in-addr\x04arpa\x00",
];
const LOCALHOST: &[u8] = b"\x09localhost\x00";
const ROOT_LOCALHOST: &[u8] = b"\x04root\x09localhost\x00";
const LOOPBACK_PTR: &[u8] = b"\x011\x010\x010\x03127\x07in-addr\x04arpa\x00";

fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    let mut prefix = true;
    for d in dirs {
        clusterdns_contract::parse::no_args(d)?;
        for p in &d.block {
            match p.name.text.as_str() {
                "localhost_prefix" => match p.arg_texts().collect::<Vec<_>>().as_slice() {
                    ["on"] => prefix = true,
                    ["off"] => prefix = false,
                    [other] => {
                        return Err(p.err(format!(
                            "localhost_prefix expects 'on' or 'off', got {other:?}"
                        )));
                    }
                    _ => return Err(p.arg_err()),
                },
                other => return Err(p.err(format!("unknown property '{other}'"))),
            }
        }
    }
    let localhost = Name::from_ascii("localhost.").map_err(|e| dirs[0].err(e.to_string()))?;
    let count = ctx
        .shared
        .metrics
        .get_or_register("coredns_local_localhost_requests_total", || {
            Family::<Counter>::new(
                "coredns_local_localhost_requests_total",
                "Counter of special localhost subdomain requests.",
                &[],
            )
        })
        .with(&[]);
    ctx.add_plugin(Arc::new(Local {
        prefix,
        localhost,
        count,
    }));
    Ok(())
}

/// The *local* handler.
#[derive(Debug)]
pub struct Local {
    /// Whether `localhost.<domain>` names are answered (`localhost_prefix`).
    prefix: bool,
    localhost: Name,
    count: Arc<Counter>,
}

/// What a query is to *local*.
enum Kind {
    /// Below `localhost.`, or `localhost.<domain>`: loopback addresses.
    Localhost,
    /// In one of the zones, whose wire form starts at this offset of the
    /// name.
    Zone(usize),
}

impl Local {
    fn kind(&self, lower: &[u8]) -> Option<Kind> {
        let longer = lower.len() > LOCALHOST.len();
        if longer
            && (lower.ends_with(LOCALHOST) && label_aligned(lower, lower.len() - LOCALHOST.len()))
        {
            return Some(Kind::Localhost);
        }
        if self.prefix && longer && lower.starts_with(&LOCALHOST[..10]) {
            return Some(Kind::Localhost);
        }
        ZONES.iter().find_map(|z| {
            let off = lower.len().checked_sub(z.len())?;
            (lower.ends_with(z) && label_aligned(lower, off)).then_some(Kind::Zone(off))
        })
    }
}

/// Whether a label starts at `off` of the wire name `name`.
fn label_aligned(name: &[u8], off: usize) -> bool {
    let mut at = 0;
    while at < off {
        at += 1 + usize::from(name[at]);
    }
    at == off
}

/// The SOA of CoreDNS's local zones, owned by `owner` (wire form).
fn soa(b: &mut MessageBuilder<'_>, section: Section, owner: &[u8]) {
    // Names come from the query (at most 255 bytes): always fits.
    let _ = b.push_soa_wire(
        section,
        owner,
        TTL,
        LOCALHOST,
        ROOT_LOCALHOST,
        [1, 0, 0, 0, TTL],
    );
}

impl Plugin for Local {
    fn name(&self) -> &'static str {
        "local"
    }

    fn query(&self, req: &Request<'_>, w: &mut ResponseWriter) -> Flow {
        let lower = req.qname_lower().as_wire();
        let Some(kind) = self.kind(lower) else {
            return Flow::Next;
        };
        let qname = req.qname();
        let qtype = req.qtype();
        let mut b = w.reply(req);
        match kind {
            Kind::Localhost => {
                clusterdns_contract::debug!(
                    "local",
                    "Intercepting localhost query for {:?} {}, from {}",
                    req.qname_lower().to_string(),
                    qtype,
                    req.client.ip()
                );
                self.count.inc();
                self.loopback(&mut b, qname, qtype);
            }
            Kind::Zone(off) => {
                let zone = &qname.as_wire()[off..];
                if off == 0 {
                    match qtype {
                        Rtype::A | Rtype::AAAA if lower == LOCALHOST => {
                            self.loopback(&mut b, qname, qtype);
                        }
                        Rtype::SOA => soa(&mut b, Section::Answer, qname.as_wire()),
                        Rtype::NS => {
                            let ns = RData::Ns(&self.localhost);
                            let _ = b.push(Section::Answer, qname, Class::IN, TTL, &ns);
                        }
                        _ => soa(&mut b, Section::Authority, qname.as_wire()),
                    }
                } else if lower == LOOPBACK_PTR {
                    if qtype == Rtype::PTR {
                        let ptr = RData::Ptr(&self.localhost);
                        let _ = b.push(Section::Answer, qname, Class::IN, TTL, &ptr);
                    } else {
                        soa(&mut b, Section::Authority, zone);
                    }
                } else {
                    b.set_rcode(Rcode::NXDOMAIN);
                    soa(&mut b, Section::Authority, zone);
                }
            }
        }
        b.finish();
        Flow::Answered
    }
}

impl Local {
    /// 127.0.0.1 for A, ::1 for AAAA, else the SOA owned by the name.
    fn loopback(&self, b: &mut MessageBuilder<'_>, qname: &Name, qtype: Rtype) {
        let rdata = match qtype {
            Rtype::A => RData::A(Ipv4Addr::LOCALHOST),
            Rtype::AAAA => RData::Aaaa(Ipv6Addr::LOCALHOST),
            _ => return soa(b, Section::Authority, qname.as_wire()),
        };
        let _ = b.push(Section::Answer, qname, Class::IN, TTL, &rdata);
    }
}

#[cfg(test)]
mod tests {
    use clusterdns_contract::testing;
    use clusterdns_wire::{Rcode, Rtype};

    use super::DEF;
    use crate::testutil::{run, setup, setup_err};

    #[test]
    fn setup_table() {
        for c in [
            ". {\n local\n}",
            ". {\n local {\n  localhost_prefix off\n }\n}",
            ". {\n local\n local\n}",
        ] {
            setup(DEF, c).unwrap_or_else(|e| panic!("{c}: {e}"));
        }
        for (c, want) in [
            (". {\n local foo\n}", "Wrong argument count"),
            (
                ". {\n local {\n  localhost_prefix\n }\n}",
                "Wrong argument count",
            ),
            (
                ". {\n local {\n  localhost_prefix maybe\n }\n}",
                "localhost_prefix expects 'on' or 'off', got \"maybe\"",
            ),
            (". {\n local {\n  bogus\n }\n}", "unknown property 'bogus'"),
        ] {
            let e = setup_err(DEF, c);
            assert!(e.contains(want), "{c}: {e}");
        }
    }

    #[test]
    fn answers_the_local_zones() {
        let r = setup(DEF, ". {\n local\n}").unwrap();
        let a = run(&r.plugins, &testing::query("LocalHost.", Rtype::A));
        assert_eq!(a.answer, ["LocalHost.\t604800\tIN\tA\t127.0.0.1"]);
        let a = run(&r.plugins, &testing::query("x.localhost.", Rtype::AAAA));
        assert_eq!(a.answer, ["x.localhost.\t604800\tIN\tAAAA\t::1"]);
        let a = run(
            &r.plugins,
            &testing::query("9.127.in-addr.arpa.", Rtype::PTR),
        );
        assert_eq!(a.rcode, Rcode::NXDOMAIN);
        let a = run(&r.plugins, &testing::query("example.org.", Rtype::A));
        assert_eq!(a.rcode, Rcode::SERVFAIL, "passed on");
        let r = setup(DEF, ". {\n local {\n  localhost_prefix off\n }\n}").unwrap();
        let a = run(
            &r.plugins,
            &testing::query("localhost.example.org.", Rtype::A),
        );
        assert_eq!(a.rcode, Rcode::SERVFAIL, "passed on");
    }
}
