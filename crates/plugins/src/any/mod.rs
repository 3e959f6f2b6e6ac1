#![doc = include_str!("README.md")]

use std::sync::Arc;

use clusterdns_contract::{Flow, Plugin, PluginDef, Request, ResponseWriter, SetupCtx};
use clusterdns_corefile::{ConfigError, Directive};
use clusterdns_wire::{Class, RData, Rtype, Section};

/// Registration of *any*.
pub const DEF: PluginDef = PluginDef { name: "any", setup };

/// TTL of the HINFO answer (the RFC's number, as CoreDNS uses).
pub const TTL: u32 = 8482;
/// The HINFO CPU string.
pub const CPU: &[u8] = b"ANY obsoleted";
/// The HINFO OS string.
pub const OS: &[u8] = b"See RFC 8482";

fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    let d = clusterdns_contract::parse::once(dirs)?;
    clusterdns_contract::parse::no_args(d)?;
    if let Some(p) = d.block.first() {
        return Err(p.err(format!("unknown property '{}'", p.name.text)));
    }
    ctx.add_plugin(Arc::new(Any));
    Ok(())
}

/// The *any* handler.
#[derive(Debug)]
pub struct Any;

impl Plugin for Any {
    fn name(&self) -> &'static str {
        "any"
    }

    fn query(&self, req: &Request<'_>, w: &mut ResponseWriter) -> Flow {
        if req.qtype() != Rtype::ANY {
            return Flow::Next;
        }
        let mut b = w.reply(req);
        let hinfo = RData::Hinfo { cpu: CPU, os: OS };
        // The answer (question name + 10 + 29 bytes) always fits 64K.
        let _ = b.push(Section::Answer, req.qname(), Class::IN, TTL, &hinfo);
        b.finish();
        Flow::Answered
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
        let ok = [". {\n any\n}", "example.org {\n any\n}"];
        for c in ok {
            let r = setup(DEF, c).unwrap_or_else(|e| panic!("{c}: {e}"));
            assert_eq!(r.plugins.len(), 1, "{c}");
        }
        let bad = [
            (". {\n any foo\n}", "Wrong argument count"),
            (". {\n any {\n  foo\n }\n}", "unknown property 'foo'"),
            (". {\n any\n any\n}", "only be used once"),
        ];
        for (c, want) in bad {
            let e = setup_err(DEF, c);
            assert!(e.contains(want), "{c}: {e}");
        }
    }

    #[test]
    fn answers_any_with_hinfo_keeping_case() {
        let r = setup(DEF, ". {\n any\n}").unwrap();
        let reply = run(&r.plugins, &testing::query("ExAmple.ORG.", Rtype::ANY));
        assert_eq!(reply.rcode, Rcode::NOERROR);
        assert!(!reply.header.aa());
        assert_eq!(
            reply.answer,
            vec!["ExAmple.ORG.\t8482\tIN\tHINFO\t\"ANY obsoleted\" \"See RFC 8482\"".to_string()]
        );
    }

    #[test]
    fn other_types_pass_on() {
        let r = setup(DEF, ". {\n any\n}").unwrap();
        // Nothing after `any`: the chain runs out, SERVFAIL.
        let reply = run(&r.plugins, &testing::query("example.org.", Rtype::A));
        assert_eq!(reply.rcode, Rcode::SERVFAIL);
        assert!(reply.answer.is_empty());
    }
}
