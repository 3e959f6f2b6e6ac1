//! Writing the answer for an ExternalName's out-of-zone target, resolved
//! through the plugins after *kubernetes* with [`crate::pkg::upstream::lookup`]
//! (CoreDNS re-enters its server with `upstream.Lookup`; here the rest of
//! the chain, typically `loop` and `forward`, answers). Only on the
//! asynchronous path.

use clusterdns_contract::{Request, ResponseWriter};
use clusterdns_wire::{Class, Message, Name, Section};

/// Writes the CNAME chain, then the answer records of `upstream` (its TC
/// bit carried over), as CoreDNS's `plugin.A` does.
pub(super) fn write(
    w: &mut ResponseWriter,
    req: &Request<'_>,
    ttl: u32,
    links: &[(Name, Name)],
    upstream: Option<&[u8]>,
) {
    let mut b = w.reply(req);
    b.set_aa(true);
    for (owner, target) in links {
        let _ = b.push(
            Section::Answer,
            owner,
            Class::IN,
            ttl,
            &clusterdns_wire::RData::Cname(target),
        );
    }
    if let Some(msg) = upstream.and_then(|m| Message::parse(m).ok()) {
        if msg.header().tc() {
            b.set_tc(true);
        }
        for rec in msg.section(Section::Answer) {
            if let Ok(r) = rec.to_owned_record(&msg) {
                let _ = b.push_record(Section::Answer, &r);
            }
        }
    }
    b.finish();
}
