//! Looking a name up through the plugins after the asking one (CoreDNS
//! re-enters its server with `upstream.Lookup`; here the rest of the
//! chain, typically `loop` and `forward`, answers). Only on the
//! asynchronous path. Shared by the plugins that resolve a target they
//! point at (*kubernetes*' ExternalNames, *k8s_external*'s LoadBalancer
//! hostnames, *template*'s and *file*'s out-of-zone CNAME targets,
//! *dns64*'s A records).

use clusterdns_contract::{Chain, Request, ResponseWriter};
use clusterdns_wire::{Class, Header, MessageBuilder, Name, Query, Rtype};

/// Asks `tail` for `target`/`qtype`; returns the reply message.
pub(crate) async fn lookup(
    tail: &Chain,
    req: &Request<'_>,
    target: &Name,
    qtype: Rtype,
) -> Option<Vec<u8>> {
    let mut pkt = Vec::with_capacity(512);
    {
        // A copy of the query with the new question, as CoreDNS's
        // `NewWithQuestion`: its ID, flags and OPT record (payload size as
        // the plugins before left it, DO, options) come along, so the
        // answer may be as large as the client takes.
        let h = req.query.header();
        let header = Header {
            id: h.id,
            flags: req.edits.flags(h.flags),
            ..Header::default()
        };
        let mut b = MessageBuilder::new(&mut pkt, header);
        b.push_question(target, qtype, Class::IN).ok()?;
        if let Some(e) = req.query.edns() {
            let size = req.edits.udp_size().unwrap_or(e.udp_size);
            let options = req.query.raw().get(e.options.clone()).unwrap_or(&[]);
            b.push_opt(size, e.do_bit, options).ok()?;
        }
        b.finish();
    }
    let q = Query::parse(&pkt).ok()?;
    let sub = req.for_query(&q, Default::default());
    let mut w = ResponseWriter::new();
    let _ = tail.run_async(&sub, &mut w).await;
    Some(w.bytes().to_vec())
}
