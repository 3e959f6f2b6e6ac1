#![doc = include_str!("README.md")]

use std::sync::Arc;

use clusterdns_contract::response::{Class, Kind};
use clusterdns_contract::{Flow, Outcome, Plugin, PluginDef, Request, ResponseWriter, SetupCtx};
use clusterdns_corefile::{ConfigError, Directive};
use clusterdns_wire::{HEADER_LEN, Header, Message, Section};

/// Registration of *minimal*.
pub const DEF: PluginDef = PluginDef {
    name: "minimal",
    setup,
};

fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    // CoreDNS reads the first line only (and builds one handler).
    let Some(d) = dirs.first() else {
        return clusterdns_contract::parse::once(dirs).map(|_| ());
    };
    clusterdns_contract::parse::no_args_or_block(d)?;
    ctx.add_plugin(Arc::new(Minimal));
    Ok(())
}

/// The *minimal* handler: passes every query on, trims in `response`.
#[derive(Debug)]
pub struct Minimal;

impl Plugin for Minimal {
    fn name(&self) -> &'static str {
        "minimal"
    }

    fn query(&self, _req: &Request<'_>, _w: &mut ResponseWriter) -> Flow {
        Flow::Next
    }

    fn response(&self, _req: &Request<'_>, w: &mut ResponseWriter, outcome: &Outcome) {
        // An error reply the server wrote never passed CoreDNS's writer.
        if outcome.error.is_some() || w.written_by_server() {
            return;
        }
        if let Some(end) = answer_end(w.bytes()) {
            // The saved-by-compression count no longer holds: let the
            // writer walk the trimmed message if it needs the figure.
            let buf = w.raw_buffer();
            buf.truncate(end);
            if let Ok(mut h) = Header::parse(buf) {
                h.nscount = 0;
                h.arcount = 0;
                h.write(buf);
            }
        }
    }
}

/// Where the answer section of `msg` ends, when `msg` is a reply to trim:
/// a successful non-delegation with records past its answers.
fn answer_end(msg: &[u8]) -> Option<usize> {
    let m = Message::parse(msg).ok()?;
    let h = m.header();
    if h.nscount == 0 && h.arcount == 0 {
        return None;
    }
    let kind = Kind::of(&m);
    if kind.class() != Class::Success || kind != Kind::NoError {
        return None;
    }
    let end = m
        .section(Section::Answer)
        .last()
        .map_or(m.question_range().end, |r| r.rdata.end);
    Some(end.max(HEADER_LEN))
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use clusterdns_contract::testing;
    use clusterdns_wire::{Class, MessageBuilder, Name, Query, RData, Rcode, Rtype, Section};

    use super::{DEF, answer_end};
    use crate::testutil::{setup, setup_err};

    #[test]
    fn setup_table() {
        for c in [". {\n minimal\n}", ". {\n minimal\n minimal\n}"] {
            let r = setup(DEF, c).unwrap_or_else(|e| panic!("{c}: {e}"));
            assert_eq!(r.plugins.len(), 1, "{c}");
        }
        let e = setup_err(DEF, ". {\n minimal foo\n}");
        assert!(e.contains("Wrong argument count"), "{e}");
        let e = setup_err(DEF, ". {\n minimal {\n  foo\n }\n}");
        assert!(
            e.contains("Unexpected token '{', expecting argument"),
            "{e}"
        );
    }

    /// A reply with `answers` A records, an NS or SOA-less authority
    /// record and an additional A record.
    fn reply(rcode: Rcode, answers: u8, authority: Rtype) -> Vec<u8> {
        let pkt = testing::query("a.example.", Rtype::A);
        let q = Query::parse(&pkt).unwrap();
        let mut buf = Vec::new();
        let mut b = MessageBuilder::reply_to(&q, &mut buf);
        b.set_rcode(rcode);
        let name = Name::from_ascii("a.example.").unwrap();
        let ns = Name::from_ascii("ns.example.").unwrap();
        for i in 0..answers {
            b.push(
                Section::Answer,
                &name,
                Class::IN,
                60,
                &RData::A(Ipv4Addr::new(10, 0, 0, i)),
            )
            .unwrap();
        }
        let zone = Name::from_ascii("example.").unwrap();
        match authority {
            Rtype::NS => b.push(Section::Authority, &zone, Class::IN, 60, &RData::Ns(&ns)),
            _ => b.push(Section::Authority, &zone, Class::IN, 60, &RData::Ptr(&ns)),
        }
        .unwrap();
        b.push(
            Section::Additional,
            &ns,
            Class::IN,
            60,
            &RData::A(Ipv4Addr::LOCALHOST),
        )
        .unwrap();
        b.finish();
        buf
    }

    #[test]
    fn trims_successful_answers_only() {
        let r = reply(Rcode::NOERROR, 2, Rtype::PTR);
        let end = answer_end(&r).expect("trimmed");
        let mut t = r[..end].to_vec();
        t[8..12].fill(0);
        let got = testing::reply(&t);
        assert_eq!(got.answer.len(), 2);
        assert!(got.authority.is_empty() && got.additional.is_empty());
        // A delegation, an empty NOERROR with NS, NXDOMAIN, SERVFAIL: kept.
        assert_eq!(answer_end(&reply(Rcode::NOERROR, 0, Rtype::NS)), None);
        assert_eq!(answer_end(&reply(Rcode::NXDOMAIN, 0, Rtype::PTR)), None);
        assert_eq!(answer_end(&reply(Rcode::SERVFAIL, 1, Rtype::PTR)), None);
        // NOERROR without answers and without NS or SOA is NoError: trimmed.
        assert!(answer_end(&reply(Rcode::NOERROR, 0, Rtype::PTR)).is_some());
    }
}
