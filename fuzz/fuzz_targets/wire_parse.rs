//! Feeds arbitrary bytes to every parser of `clusterdns-wire` and checks
//! the invariants that tie them together:
//! - nothing panics;
//! - a reply built for a parsed query parses as a message with the same
//!   question;
//! - a decoded record's text form parses back to the same record;
//! - `truncate` only ever produces a valid message within the limit that
//!   keeps the question (the header, question and OPT alone may exceed it).
#![no_main]

use std::net::Ipv4Addr;

use clusterdns_wire::{
    Class, Message, MessageBuilder, Query, RData, Record, Rtype, Section, truncate,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(q) = Query::parse(data) {
        let mut buf = Vec::new();
        let mut b = MessageBuilder::reply_to(&q, &mut buf);
        let _ = b.push(
            Section::Answer,
            q.qname(),
            Class::IN,
            5,
            &RData::A(Ipv4Addr::LOCALHOST),
        );
        if q.edns().is_some() {
            let _ = b.push_opt(q.udp_size(), q.do_bit(), &[]);
        }
        b.finish();
        let m = Message::parse(&buf).expect("built reply must parse");
        assert_eq!(
            m.question(),
            Some((*q.qname(), q.qtype(), q.qclass())),
            "question must survive"
        );
    }

    if let Ok(m) = Message::parse(data) {
        let _ = (m.question(), m.rcode(), m.opt());
        for view in m.records() {
            if let Ok(rec) = view.to_owned_record(&m) {
                if rec.rtype() == Rtype::OPT {
                    continue;
                }
                let text = rec.to_string();
                let back: Record = text.parse().expect("Display output must parse");
                assert_eq!(back, rec, "{text}");
            }
        }
    }

    for max in [512usize, 1232] {
        let mut v = data.to_vec();
        if let Ok(true) = truncate(&mut v, max) {
            let before = Message::parse(data).expect("truncate cuts only what parses");
            let after = Message::parse(&v).expect("truncate output must parse");
            let questions = before.question_range();
            assert_eq!(after.question_range(), questions, "question kept");
            assert_eq!(v[questions.clone()], data[questions], "question kept");
            let h = after.header();
            let only_fixed = h.ancount + h.nscount == 0 && h.arcount <= 1;
            assert!(v.len() <= max || only_fixed, "within the limit");
        }
    }
});
