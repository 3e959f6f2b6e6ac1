#![doc = include_str!("README.md")]

use std::sync::Arc;

use clusterdns_contract::{Flow, Plugin, PluginDef, Request, ResponseWriter, SetupCtx};
use clusterdns_corefile::{ConfigError, Directive};

/// Registration of *bufsize*.
pub const DEF: PluginDef = PluginDef {
    name: "bufsize",
    setup,
};

/// The size when none is given: what the DNS Flag Day 2020 settled on.
pub const DEFAULT_SIZE: u16 = 1232;

fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    // CoreDNS reads the first line only and ignores any block.
    let Some(d) = dirs.first() else {
        // Never called without a directive; `once` words that error.
        return clusterdns_contract::parse::once(dirs).map(|_| ());
    };
    let size = parse(d)?;
    ctx.add_plugin(Arc::new(Bufsize { size }));
    Ok(())
}

/// The size on `d`: none (the default) or one from 512 to 4096; anything
/// else is CoreDNS's argument error.
fn parse(d: &Directive) -> Result<u16, ConfigError> {
    match clusterdns_contract::parse::optional_arg(d)? {
        None => Ok(DEFAULT_SIZE),
        Some(s) => match s.parse::<u16>() {
            Ok(n) if (512..=4096).contains(&n) => Ok(n),
            _ => Err(d.arg_err()),
        },
    }
}

/// The *bufsize* handler.
#[derive(Debug)]
pub struct Bufsize {
    size: u16,
}

impl Bufsize {
    fn cap(&self, req: &Request<'_>) {
        if req.query.edns().is_some_and(|e| e.udp_size > self.size) {
            req.edits.set_udp_size(self.size);
        }
    }
}

impl Plugin for Bufsize {
    fn name(&self) -> &'static str {
        "bufsize"
    }

    fn query(&self, req: &Request<'_>, _w: &mut ResponseWriter) -> Flow {
        self.cap(req);
        Flow::Next
    }

    fn edit(&self, req: &Request<'_>) {
        self.cap(req);
    }
}

#[cfg(test)]
mod tests {
    use clusterdns_contract::testing;
    use clusterdns_wire::{Name, Query, Rtype};

    use super::*;
    use crate::testutil::{setup, setup_err};

    #[test]
    fn setup_table() {
        for (c, want) in [
            (". {\n bufsize\n}", DEFAULT_SIZE),
            (". {\n bufsize 512\n}", 512),
            (". {\n bufsize 4096\n}", 4096),
            (". {\n bufsize 1100\n bufsize 2000\n}", 1100),
        ] {
            let r = setup(DEF, c).unwrap_or_else(|e| panic!("{c}: {e}"));
            assert_eq!(r.plugins.len(), 1, "{c}");
            let d = clusterdns_corefile::parse_str(
                c,
                "Corefile".as_ref(),
                &std::collections::HashMap::new(),
            )
            .unwrap();
            assert_eq!(parse(&d.blocks[0].directives[0]).unwrap(), want, "{c}");
        }
        for c in [
            ". {\n bufsize 511\n}",
            ". {\n bufsize 4097\n}",
            ". {\n bufsize x\n}",
            ". {\n bufsize -1\n}",
            ". {\n bufsize 1232 1232\n}",
        ] {
            let e = setup_err(DEF, c);
            assert!(e.contains("Wrong argument count"), "{c}: {e}");
        }
    }

    fn capped(size: u16, edns: Option<u16>) -> (Option<u16>, usize) {
        let b = Bufsize { size };
        let pkt = match edns {
            Some(n) => testing::query_edns("example.org.", Rtype::A, n, false),
            None => testing::query("example.org.", Rtype::A),
        };
        let q = Query::parse(&pkt).unwrap();
        let zone = Name::root();
        let req = testing::request(&q, &zone);
        let mut w = ResponseWriter::new();
        assert!(matches!(b.query(&req, &mut w), Flow::Next));
        let mut buf = Vec::new();
        let sent = Query::parse(req.edits.apply(&q, &mut buf)).unwrap();
        assert_eq!(sent.qname(), q.qname());
        (sent.edns().map(|e| e.udp_size), req.size())
    }

    #[test]
    fn lowers_larger_sizes_only() {
        assert_eq!(capped(1232, Some(4096)), (Some(1232), 1232));
        assert_eq!(capped(1232, Some(1000)), (Some(1000), 1000));
        assert_eq!(capped(1232, Some(1232)), (Some(1232), 1232));
        // Without OPT nothing changes (and the client gets 512).
        assert_eq!(capped(1232, None), (None, 512));
    }
}
