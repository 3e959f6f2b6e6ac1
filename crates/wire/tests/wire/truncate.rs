use std::net::Ipv4Addr;

use clusterdns_wire::{Class, Message, MessageBuilder, Query, RData, Rtype, Section, truncate};

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
