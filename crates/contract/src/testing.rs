//! Helpers for plugin unit tests: make a query packet, wrap it in a
//! [`Request`], read the reply back as zone-file text. No sockets.
//!
//! ```text
//! let pkt = testing::query("example.org.", Rtype::A);
//! let q = Query::parse(&pkt)?;
//! let req = testing::request(&q, &Name::root());
//! ```
//!
//! Compiled for this crate's tests and, through the `test-util` feature,
//! for the tests of the crates that dev-depend on it; never in the
//! product (so the example above is a unit test below, not a doctest).

use std::net::SocketAddr;
use std::time::Instant;

use clusterdns_wire::{Class, Header, Message, MessageBuilder, Name, Query, Rcode, Rtype, Section};

use crate::{Proto, Request};

/// A query for `name`/`qtype` (ID 0x1234, RD set, no EDNS).
pub fn query(name: &str, qtype: Rtype) -> Vec<u8> {
    build_query(name, qtype, 0x1234, 0x0100, None)
}

/// A query for `name`/`qtype` with this ID and these header flags (no
/// EDNS).
pub fn query_with_header(name: &str, qtype: Rtype, id: u16, flags: u16) -> Vec<u8> {
    build_query(name, qtype, id, flags, None)
}

/// A query with an OPT record: payload size and DO bit.
pub fn query_edns(name: &str, qtype: Rtype, udp_size: u16, do_bit: bool) -> Vec<u8> {
    build_query(name, qtype, 0x1234, 0x0100, Some((udp_size, do_bit)))
}

fn build_query(
    name: &str,
    qtype: Rtype,
    id: u16,
    flags: u16,
    edns: Option<(u16, bool)>,
) -> Vec<u8> {
    let mut buf = Vec::new();
    let header = Header {
        id,
        flags,
        ..Header::default()
    };
    let mut b = MessageBuilder::new(&mut buf, header);
    let qname = Name::from_ascii(name).expect("test query name");
    b.push_question(&qname, qtype, Class::IN).expect("question");
    if let Some((size, do_bit)) = edns {
        b.push_opt(size, do_bit, &[]).expect("opt");
    }
    b.finish();
    buf
}

/// A UDP request from 127.0.0.1:53000 for `zone`, server `dns://:53`.
pub fn request<'a>(q: &'a Query<'a>, zone: &'a Name) -> Request<'a> {
    Request {
        query: q,
        client: SocketAddr::from(([127, 0, 0, 1], 53000)),
        local: SocketAddr::from(([127, 0, 0, 1], 53)),
        proto: Proto::Udp,
        zone,
        server: "dns://:53",
        received: Instant::now(),
        edits: Default::default(),
    }
}

/// A reply, decoded for assertions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The rcode (extended bits included).
    pub rcode: Rcode,
    /// The header.
    pub header: Header,
    /// Answer records as zone-file text, in order.
    pub answer: Vec<String>,
    /// Authority records.
    pub authority: Vec<String>,
    /// Additional records (OPT excluded).
    pub additional: Vec<String>,
}

/// Decodes `msg` into a [`Reply`]; panics on a malformed message (tests
/// only).
pub fn reply(msg: &[u8]) -> Reply {
    let m = Message::parse(msg).expect("reply parses");
    let mut r = Reply {
        rcode: m.rcode(),
        header: m.header(),
        answer: Vec::new(),
        authority: Vec::new(),
        additional: Vec::new(),
    };
    for rec in m.records() {
        if rec.rtype == Rtype::OPT {
            continue;
        }
        let text = rec.to_owned_record(&m).expect("record decodes").to_string();
        match rec.section {
            Section::Answer => r.answer.push(text),
            Section::Authority => r.authority.push(text),
            Section::Additional => r.additional.push(text),
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_becomes_a_request_and_a_reply_reads_back() {
        let pkt = query("example.org.", Rtype::A);
        let q = Query::parse(&pkt).expect("query parses");
        let zone = Name::root();
        let req = request(&q, &zone);
        assert_eq!(req.qname().to_string(), "example.org.");
        let r = reply(&pkt);
        assert_eq!((r.rcode, r.answer.len()), (Rcode::NOERROR, 0));
    }
}
