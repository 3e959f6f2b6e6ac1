#![doc = include_str!("README.md")]

use std::net::IpAddr;
use std::sync::Arc;

use clusterdns_contract::{Flow, Plugin, PluginDef, Request, ResponseWriter, SetupCtx};
use clusterdns_corefile::{ConfigError, Directive};
use clusterdns_wire::{Name, RData, Section};

/// Registration of *whoami*.
pub const DEF: PluginDef = PluginDef {
    name: "whoami",
    setup,
};

fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    // CoreDNS's setup reads the first `whoami` of the block only: a second
    // one is accepted and changes nothing (the first answers).
    let Some(&d) = dirs.first() else {
        return Ok(());
    };
    if !d.args.is_empty() {
        return Err(d.arg_err());
    }
    if !d.block.is_empty() {
        return Err(d.err("Unexpected token '{', expecting argument"));
    }
    ctx.add_plugin(Arc::new(Whoami));
    Ok(())
}

/// The *whoami* handler.
#[derive(Debug)]
pub struct Whoami;

impl Plugin for Whoami {
    fn name(&self) -> &'static str {
        "whoami"
    }

    fn query(&self, req: &Request<'_>, w: &mut ResponseWriter) -> Flow {
        // CoreDNS writes the query name as the client sent it (its case).
        let qname = req.qname();
        let label: &[u8] = match req.proto {
            clusterdns_contract::Proto::Udp => b"_udp",
            clusterdns_contract::Proto::Tcp => b"_tcp",
        };
        // A name one label longer than the query may not fit in 255
        // bytes; then the SRV record is left out.
        let srv_name: Option<Name> = qname.prepend_label(label).ok();
        let mut b = w.reply(req);
        b.set_aa(true);
        let ip = match req.client.ip() {
            IpAddr::V4(v4) => RData::A(v4),
            IpAddr::V6(v6) => RData::Aaaa(v6),
        };
        let root = Name::root();
        let mut ok = b
            .push(Section::Additional, qname, req.qclass(), 0, &ip)
            .is_ok();
        if let Some(srv_name) = &srv_name {
            let srv = RData::Srv {
                priority: 0,
                weight: 0,
                port: req.client.port(),
                target: &root,
            };
            ok &= b
                .push(Section::Additional, srv_name, req.qclass(), 0, &srv)
                .is_ok();
        }
        let _ = ok;
        b.finish();
        Flow::Answered
    }
}
