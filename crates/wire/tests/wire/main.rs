//! Integration tests of the public API: queries, building, round trips
//! through `Message`, record text, truncation and a malformed-packet corpus.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod build;
mod compress;
mod corpus;
mod message;
mod query;
mod record_text;
mod truncate;

use clusterdns_wire::header::FLAG_RD;
use clusterdns_wire::{Class, Header, MessageBuilder, Name, RData, Rtype};

pub fn name(s: &str) -> Name {
    Name::from_ascii(s).unwrap()
}

/// SRV record data: `priority`, `weight`, `port` and `target`.
pub fn srv_data(priority: u16, weight: u16, port: u16, target: &Name) -> RData<'_> {
    RData::Srv {
        priority,
        weight,
        port,
        target,
    }
}

/// A query packet as a stub resolver sends it, optionally with EDNS.
pub fn query_packet(qname: &str, qtype: Rtype, edns: Option<(u16, bool)>) -> Vec<u8> {
    let mut buf = Vec::new();
    let header = Header {
        id: 0xABCD,
        flags: FLAG_RD,
        ..Header::default()
    };
    let mut b = MessageBuilder::new(&mut buf, header);
    b.push_question(&name(qname), qtype, Class::IN).unwrap();
    if let Some((size, do_bit)) = edns {
        b.push_opt(size, do_bit, &[]).unwrap();
    }
    b.finish();
    buf
}

/// xorshift64*: small, seeded, good enough to spread mutations and draw
/// test inputs; the same sequence on every run, no dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}
