use std::net::Ipv4Addr;

use clusterdns_wire::edns::OPT_FIXED_LEN;
use clusterdns_wire::{
    Class, Message, MessageBuilder, ParseError, Query, RData, Rtype, Section, truncate,
};

use crate::{name, query_packet};

/// A reply with `n` A answers and `extra` glue records, with or without OPT.
fn big_reply(n: u8, extra: u8, edns: bool) -> Vec<u8> {
    let p = query_packet(
        "headless.ns.svc.cluster.local",
        Rtype::A,
        edns.then_some((512, false)),
    );
    let q = Query::parse(&p).unwrap();
    let mut buf = Vec::new();
    let mut b = MessageBuilder::reply_to(&q, &mut buf);
    for i in 0..n {
        b.push(
            Section::Answer,
            q.qname(),
            Class::IN,
            5,
            &RData::A(Ipv4Addr::new(10, 0, 0, i)),
        )
        .unwrap();
    }
    for i in 0..extra {
        let glue = name(&format!("host-{i}.example.org"));
        b.push(
            Section::Additional,
            &glue,
            Class::IN,
            5,
            &RData::A(Ipv4Addr::new(10, 1, 0, i)),
        )
        .unwrap();
    }
    if edns {
        b.push_opt(512, false, &[]).unwrap();
    }
    b.finish();
    buf
}

#[test]
fn fits_means_untouched() {
    let mut m = big_reply(3, 0, true);
    let before = m.clone();
    assert_eq!(truncate(&mut m, 512), Ok(false));
    assert_eq!(m, before);
    // Not parsed at all when it fits: even garbage is fine.
    let mut junk = vec![0xFF; 20];
    assert_eq!(truncate(&mut junk, 512), Ok(false));
}

#[test]
fn keeps_opt_and_sets_tc() {
    let mut m = big_reply(60, 0, true);
    assert!(m.len() > 512);
    assert_eq!(truncate(&mut m, 512), Ok(true));
    assert!(m.len() <= 512);
    let msg = Message::parse(&m).unwrap();
    let h = msg.header();
    assert!(h.tc());
    assert_eq!(h.arcount, 1);
    assert!(h.ancount > 0 && h.ancount < 60);
    assert_eq!(msg.opt().unwrap().udp_size, 512);
    assert_eq!(msg.records().count(), usize::from(h.ancount) + 1);
    // Every remaining answer is intact.
    for r in msg.section(Section::Answer) {
        r.to_owned_record(&msg).unwrap();
    }
}

#[test]
fn opt_moves_before_dropped_additionals() {
    // OPT is pushed last, after glue; when the glue is cut the OPT must be
    // moved up to the cut.
    let mut m = big_reply(20, 20, true);
    let max = 600;
    assert!(m.len() > max);
    assert_eq!(truncate(&mut m, max), Ok(true));
    assert!(m.len() <= max);
    let msg = Message::parse(&m).unwrap();
    assert!(msg.header().tc());
    assert_eq!(msg.header().ancount, 20);
    let extra: Vec<_> = msg.section(Section::Additional).collect();
    assert!(extra.len() >= 2 && extra.len() < 21);
    assert_eq!(extra.last().unwrap().rtype, Rtype::OPT);
    assert_eq!(extra.iter().filter(|r| r.rtype == Rtype::OPT).count(), 1);
}

#[test]
fn without_opt_and_min_size() {
    let mut m = big_reply(60, 0, false);
    // Sizes below 512 are treated as 512.
    assert_eq!(truncate(&mut m, 100), Ok(true));
    assert!(m.len() <= 512 && m.len() > 400);
    let msg = Message::parse(&m).unwrap();
    assert!(msg.header().tc());
    assert_eq!(msg.header().arcount, 0);
    assert!(msg.opt().is_none());
}

#[test]
fn existing_tc_is_kept_and_bad_input_fails() {
    let mut m = big_reply(60, 0, true);
    clusterdns_wire::set_tc(&mut m, true);
    truncate(&mut m, 512).unwrap();
    assert!(Message::parse(&m).unwrap().header().tc());
    let mut m = big_reply(60, 0, true);
    m[7] = 200; // ancount larger than present
    assert!(truncate(&mut m, 512).is_err());
    let mut m = vec![0u8; 600];
    m[5] = 1; // a question that is all zeros: root, type 0, class 0
    assert_eq!(truncate(&mut m, 512), Ok(true));
    assert_eq!(m.len(), 17);
    assert!(!Message::parse(&m).unwrap().header().tc());
}

#[test]
fn does_not_allocate_when_cutting() {
    let mut m = big_reply(100, 0, true);
    let cap = m.capacity();
    let ptr = m.as_ptr();
    truncate(&mut m, 1232).unwrap();
    assert_eq!(m.capacity(), cap);
    assert_eq!(m.as_ptr(), ptr);
}

/// The fuzzer's crash inputs (`fuzz/artifacts/wire_parse/crash-*`): an
/// oversized message whose only record is an OPT with a non-root owner and
/// an option list running past its rdata. `truncate` used to drop the
/// trailing bytes and return `Ok(true)` for a message `Message::parse`
/// rejects.
#[test]
fn fuzz_crashes_bad_opt_is_rejected() {
    let inputs: [&[u8]; 2] = [
        include_bytes!("../data/truncate-crash-2da8a1f0.bin"),
        include_bytes!("../data/truncate-crash-50e37366.bin"),
    ];
    for input in inputs {
        assert!(Message::parse(input).is_err());
        // The fuzz target's invariant.
        for max in [512, 1232] {
            let mut v = input.to_vec();
            if let Ok(true) = truncate(&mut v, max) {
                assert!(Message::parse(&v).is_ok(), "max {max}");
            }
        }
        let mut v = input.to_vec();
        assert_eq!(truncate(&mut v, 512), Err(ParseError));
        assert_eq!(v, input, "left untouched on error");
    }
}

/// Offset of the (last) OPT record `big_reply` pushed.
fn opt_start(m: &[u8]) -> usize {
    m.len() - OPT_FIXED_LEN
}

#[test]
fn opt_with_non_root_owner_is_rejected() {
    for (n, extra, max) in [(60, 0, 512), (20, 20, 600)] {
        let mut m = big_reply(n, extra, true);
        // Owner: a pointer to the qname instead of the root.
        let at = opt_start(&m);
        m.splice(at..at + 1, [0xC0, 12]);
        assert!(Message::parse(&m).is_err());
        let before = m.clone();
        assert_eq!(truncate(&mut m, max), Err(ParseError));
        assert_eq!(m, before);
    }
}

#[test]
fn opt_with_malformed_options_is_rejected() {
    for (n, extra, max) in [(60, 0, 512), (20, 20, 600)] {
        let mut m = big_reply(n, extra, true);
        // rdlength 3: an option header cut short.
        let at = opt_start(&m);
        m[at + 9..at + 11].copy_from_slice(&3u16.to_be_bytes());
        m.extend_from_slice(&[0, 8, 0]);
        assert!(Message::parse(&m).is_err());
        let before = m.clone();
        assert_eq!(truncate(&mut m, max), Err(ParseError));
        assert_eq!(m, before);
        // The same option list, well-formed, is fine.
        let mut m = before;
        m[at + 9..at + 11].copy_from_slice(&4u16.to_be_bytes());
        m.push(0);
        assert!(Message::parse(&m).is_ok());
        assert_eq!(truncate(&mut m, max), Ok(true));
        let msg = Message::parse(&m).unwrap();
        assert_eq!(msg.opt().unwrap().option(&m, 8), Some(&[][..]));
    }
}

/// Only the first OPT of the additional section is the message's OPT (as
/// in `Message::parse`); a later one is an ordinary record to `truncate`.
#[test]
fn second_opt_is_an_ordinary_record() {
    let mut m = big_reply(20, 20, true);
    // Another OPT, with a non-root owner and bad options, after the first.
    let mut hdr = clusterdns_wire::Header::parse(&m).unwrap();
    m.extend_from_slice(&[0xC0, 12, 0, 41, 2, 0, 0, 0, 0, 0, 0, 1, 0xFF]);
    hdr.arcount += 1;
    m[10..12].copy_from_slice(&hdr.arcount.to_be_bytes());
    assert!(Message::parse(&m).is_ok());
    assert_eq!(truncate(&mut m, 600), Ok(true));
    let msg = Message::parse(&m).unwrap();
    assert!(msg.header().tc());
    let extra: Vec<_> = msg.section(Section::Additional).collect();
    assert_eq!(extra.last().unwrap().rtype, Rtype::OPT);
    assert_eq!(extra.iter().filter(|r| r.rtype == Rtype::OPT).count(), 1);
}
