use std::net::{Ipv4Addr, Ipv6Addr};

use clusterdns_wire::{
    Class, Header, Message, MessageBuilder, Query, RData, Rcode, Record, RecordData, Rtype,
    Section, TruncationError,
};

use crate::{name, query_packet, srv_data};

fn records(buf: &[u8]) -> Vec<(Section, Record)> {
    let m = Message::parse(buf).unwrap();
    m.records()
        .map(|r| (r.section, r.to_owned_record(&m).unwrap()))
        .collect()
}

fn rec(s: &str) -> Record {
    s.parse().unwrap()
}

#[test]
fn reply_copies_header_and_question() {
    let p = query_packet("WwW.ExAmPlE.org", Rtype::A, Some((4096, true)));
    let q = Query::parse(&p).unwrap();
    let mut buf = Vec::new();
    let b = MessageBuilder::reply_to(&q, &mut buf);
    let len = b.finish();
    assert_eq!(len, 12 + q.question_range().len());
    assert_eq!(&buf[12..], q.question_bytes());
    let h = Header::parse(&buf).unwrap();
    assert_eq!(h.id, 0xABCD);
    assert!(h.qr() && h.rd() && !h.ra() && !h.aa() && !h.cd());
    assert_eq!((h.qdcount, h.ancount, h.nscount, h.arcount), (1, 0, 0, 0));
    let mut p2 = p.clone();
    p2[3] |= 0x10; // CD
    let q2 = Query::parse(&p2).unwrap();
    MessageBuilder::reply_to(&q2, &mut buf).finish();
    let h = Header::parse(&buf).unwrap();
    assert!(h.cd() && h.rd());
    // A NOTIFY's reply keeps the opcode but not RD and CD (miekg/dns
    // SetReply copies them for standard queries only).
    p2[2] |= 0x20; // opcode 4 (NOTIFY)
    let q3 = Query::parse(&p2).unwrap();
    MessageBuilder::reply_to(&q3, &mut buf).finish();
    let h = Header::parse(&buf).unwrap();
    assert!(!h.cd() && !h.rd());
    assert_eq!(h.opcode().0, 4);
}

#[test]
fn every_rdata_round_trips() {
    let p = query_packet("svc.ns.svc.cluster.local", Rtype::ANY, None);
    let q = Query::parse(&p).unwrap();
    let owner = *q.qname();
    let target = name("a.svc.ns.svc.cluster.local");
    let soa_m = name("ns.dns.cluster.local");
    let soa_r = name("hostmaster.cluster.local");
    let strings: [&[u8]; 2] = [b"hello \"world\"", b""];
    let mut buf = Vec::new();
    let mut b = MessageBuilder::reply_to(&q, &mut buf);
    b.set_aa(true);
    let ans = Section::Answer;
    let a = Ipv4Addr::new(10, 0, 0, 1);
    let aaaa: Ipv6Addr = "fd00::1".parse().unwrap();
    b.push(ans, &owner, Class::IN, 5, &RData::A(a)).unwrap();
    b.push(ans, &owner, Class::IN, 5, &RData::Aaaa(aaaa))
        .unwrap();
    b.push(ans, &owner, Class::IN, 5, &RData::Cname(&target))
        .unwrap();
    b.push(ans, &owner, Class::IN, 5, &RData::Ptr(&target))
        .unwrap();
    let mx = RData::Mx {
        preference: 10,
        exchange: &target,
    };
    b.push(ans, &owner, Class::IN, 5, &mx).unwrap();
    let srv = srv_data(0, 100, 80, &target);
    b.push(ans, &owner, Class::IN, 5, &srv).unwrap();
    b.push(ans, &owner, Class::IN, 5, &RData::Txt(&strings))
        .unwrap();
    let hinfo = RData::Hinfo {
        cpu: b"x86",
        os: b"linux",
    };
    b.push(ans, &owner, Class::CH, 5, &hinfo).unwrap();
    let raw = RData::Raw {
        rtype: Rtype(65280),
        data: &[1, 2, 3],
    };
    b.push(ans, &owner, Class::IN, 5, &raw).unwrap();
    let soa = RData::Soa {
        mname: &soa_m,
        rname: &soa_r,
        serial: 1,
        refresh: 7200,
        retry: 1800,
        expire: 86400,
        minimum: 30,
    };
    b.push(
        Section::Authority,
        &name("cluster.local"),
        Class::IN,
        30,
        &soa,
    )
    .unwrap();
    b.push(
        Section::Authority,
        &name("cluster.local"),
        Class::IN,
        30,
        &RData::Ns(&soa_m),
    )
    .unwrap();
    b.push(Section::Additional, &target, Class::IN, 5, &RData::A(a))
        .unwrap();
    b.push_opt(1232, false, &[]).unwrap();
    assert_eq!(b.counts(), [1, 9, 2, 2]);
    b.finish();

    let o = "svc.ns.svc.cluster.local.";
    let t = "a.svc.ns.svc.cluster.local.";
    let want = [
        (ans, rec(&format!("{o} 5 IN A 10.0.0.1"))),
        (ans, rec(&format!("{o} 5 IN AAAA fd00::1"))),
        (ans, rec(&format!("{o} 5 IN CNAME {t}"))),
        (ans, rec(&format!("{o} 5 IN PTR {t}"))),
        (ans, rec(&format!("{o} 5 IN MX 10 {t}"))),
        (ans, rec(&format!("{o} 5 IN SRV 0 100 80 {t}"))),
        (
            ans,
            rec(&format!("{o} 5 IN TXT \"hello \\\"world\\\"\" \"\"")),
        ),
        (ans, rec(&format!("{o} 5 CH HINFO \"x86\" \"linux\""))),
        (ans, rec(&format!("{o} 5 IN TYPE65280 \\# 3 010203"))),
        (
            Section::Authority,
            rec(
                "cluster.local. 30 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 30",
            ),
        ),
        (
            Section::Authority,
            rec("cluster.local. 30 IN NS ns.dns.cluster.local."),
        ),
        (Section::Additional, rec(&format!("{t} 5 IN A 10.0.0.1"))),
    ];
    let got = records(&buf);
    assert_eq!(&got[..want.len()], &want);
    let (sec, opt) = &got[want.len()];
    assert_eq!(*sec, Section::Additional);
    assert_eq!(opt.rtype(), Rtype::OPT);
    assert_eq!(opt.class, Class(1232));
    let m = Message::parse(&buf).unwrap();
    assert!(m.header().aa());
    assert_eq!(m.opt().unwrap().udp_size, 1232);
    assert_eq!(m.rcode(), Rcode::NOERROR);
    assert_eq!(m.question(), Some((owner, Rtype::ANY, Class::IN)));
}

#[test]
fn owner_names_are_compressed() {
    let p = query_packet("www.example.org", Rtype::A, None);
    let q = Query::parse(&p).unwrap();
    let mut buf = Vec::new();
    let mut b = MessageBuilder::reply_to(&q, &mut buf);
    let before = b.len();
    let a = RData::A(Ipv4Addr::LOCALHOST);
    b.push(Section::Answer, q.qname(), Class::IN, 1, &a)
        .unwrap();
    // Pointer (2) + type/class/ttl/rdlen (10) + 4.
    assert_eq!(b.len() - before, 16);
    let before = b.len();
    b.push(Section::Answer, &name("mail.example.org"), Class::IN, 1, &a)
        .unwrap();
    // "mail" label (5) + pointer to example.org (2).
    assert_eq!(b.len() - before, 7 + 14);
    let before = b.len();
    // Compression is case-sensitive: EXAMPLE.org only shares "org".
    b.push(Section::Answer, &name("EXAMPLE.org"), Class::IN, 1, &a)
        .unwrap();
    assert_eq!(b.len() - before, 8 + 2 + 14);
    let before = b.len();
    // Now it exists.
    b.push(Section::Answer, &name("x.EXAMPLE.org"), Class::IN, 1, &a)
        .unwrap();
    assert_eq!(b.len() - before, 2 + 2 + 14);
    b.finish();
    let names: Vec<String> = Message::parse(&buf)
        .unwrap()
        .records()
        .map(|r| r.name.to_string())
        .collect();
    assert_eq!(
        names,
        [
            "www.example.org.",
            "mail.example.org.",
            "EXAMPLE.org.",
            "x.EXAMPLE.org."
        ]
    );
}

#[test]
fn srv_target_is_not_compressed_but_can_be_pointed_to() {
    let p = query_packet("_http._tcp.svc.ns.svc.cluster.local", Rtype::SRV, None);
    let q = Query::parse(&p).unwrap();
    let target = name("svc.ns.svc.cluster.local");
    let mut buf = Vec::new();
    let mut b = MessageBuilder::reply_to(&q, &mut buf);
    let before = b.len();
    let srv = srv_data(0, 100, 80, &target);
    b.push(Section::Answer, q.qname(), Class::IN, 5, &srv)
        .unwrap();
    assert_eq!(b.len() - before, 2 + 10 + 6 + target.len());
    let before = b.len();
    b.push(
        Section::Additional,
        &target,
        Class::IN,
        5,
        &RData::A(Ipv4Addr::LOCALHOST),
    )
    .unwrap();
    assert_eq!(b.len() - before, 2 + 10 + 4);
    b.finish();
    let got = records(&buf);
    assert_eq!(got[1].1.name, target);
}

#[test]
fn limit_rolls_back_whole_record() {
    let p = query_packet("example.org", Rtype::TXT, None);
    let q = Query::parse(&p).unwrap();
    let mut buf = Vec::new();
    let mut b = MessageBuilder::reply_to(&q, &mut buf);
    b.set_limit(100);
    assert_eq!(b.limit(), 100);
    let s: [&[u8]; 1] = [&[b'x'; 40]];
    b.push(Section::Answer, q.qname(), Class::IN, 1, &RData::Txt(&s))
        .unwrap();
    let len = b.len();
    let err = b.push(Section::Answer, q.qname(), Class::IN, 1, &RData::Txt(&s));
    assert_eq!(err, Err(TruncationError));
    assert_eq!(b.len(), len);
    assert_eq!(b.counts(), [1, 1, 0, 0]);
    // A smaller record still fits, and a name written by the failed push
    // is not used as a compression target.
    b.push(
        Section::Answer,
        &name("a.example.org"),
        Class::IN,
        1,
        &RData::A(Ipv4Addr::LOCALHOST),
    )
    .unwrap();
    b.set_tc(true);
    b.finish();
    let m = Message::parse(&buf).unwrap();
    assert!(m.header().tc());
    assert_eq!(m.records().count(), 2);
    assert!(buf.len() <= 100);
}

#[test]
fn extended_rcode_goes_into_opt() {
    let p = query_packet("example.org", Rtype::A, Some((1232, false)));
    let q = Query::parse(&p).unwrap();
    let mut buf = Vec::new();
    // Rcode set before the OPT is pushed.
    let mut b = MessageBuilder::reply_to(&q, &mut buf);
    b.set_rcode(Rcode::BADVERS);
    b.push_opt(1232, true, &[]).unwrap();
    b.finish();
    let m = Message::parse(&buf).unwrap();
    assert_eq!(m.rcode(), Rcode::BADVERS);
    assert_eq!(m.header().rcode_low(), 0);
    let e = m.opt().unwrap();
    assert_eq!((e.ext_rcode, e.version, e.do_bit), (1, 0, true));
    // ... and after.
    let mut b = MessageBuilder::reply_to(&q, &mut buf);
    b.push_opt(1232, false, &[0, 10, 0, 2, 7, 7]).unwrap();
    b.set_rcode(Rcode(0x123));
    b.finish();
    let m = Message::parse(&buf).unwrap();
    assert_eq!(m.rcode(), Rcode(0x123));
    assert_eq!(
        m.opt().unwrap().options(&buf).collect::<Vec<_>>(),
        [(10, &[7u8, 7][..])]
    );
    // Without OPT only the low bits survive.
    let mut b = MessageBuilder::reply_to(&q, &mut buf);
    b.set_rcode(Rcode::NXDOMAIN);
    b.set_ra(true);
    b.set_ad(true);
    b.finish();
    let m = Message::parse(&buf).unwrap();
    assert_eq!(m.rcode(), Rcode::NXDOMAIN);
    assert!(m.header().ra() && m.header().ad());
    assert!(m.opt().is_none());
}

#[test]
fn long_txt_is_split() {
    let mut buf = Vec::new();
    let mut b = MessageBuilder::new(&mut buf, Header::default());
    let long = vec![b'y'; 300];
    let s: [&[u8]; 1] = [&long];
    b.push(Section::Answer, &name("t"), Class::IN, 0, &RData::Txt(&s))
        .unwrap();
    b.finish();
    let got = records(&buf);
    assert_eq!(
        got[0].1.data,
        RecordData::Txt(vec![vec![b'y'; 255], vec![b'y'; 45]])
    );
}

#[test]
fn record_push_and_buffer_reuse() {
    let r = rec("example.org. 60 IN MX 5 mx.example.org.");
    let mut buf = Vec::with_capacity(512);
    let cap = buf.capacity();
    for _ in 0..3 {
        let mut b = MessageBuilder::new(&mut buf, Header::default());
        b.push_question(&r.name, Rtype::MX, Class::IN).unwrap();
        b.push_record(Section::Answer, &r).unwrap();
        b.finish();
        assert_eq!(buf.capacity(), cap);
        assert_eq!(records(&buf), [(Section::Answer, r.clone())]);
    }
}

#[test]
fn rdata_too_long_is_rejected() {
    let mut buf = Vec::new();
    let mut b = MessageBuilder::new(&mut buf, Header::default());
    let big = vec![0u8; 70_000];
    let raw = RData::Raw {
        rtype: Rtype::NULL,
        data: &big,
    };
    assert_eq!(
        b.push(Section::Answer, &name("x"), Class::IN, 0, &raw),
        Err(TruncationError)
    );
    assert_eq!(b.len(), 12);
    assert_eq!(b.as_bytes().len(), 12);
}

#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "out of section order")]
fn sections_out_of_order_is_a_bug() {
    let mut buf = Vec::new();
    let mut b = MessageBuilder::new(&mut buf, Header::default());
    let a = RData::A(Ipv4Addr::LOCALHOST);
    b.push(Section::Additional, &name("x"), Class::IN, 0, &a)
        .unwrap();
    let _ = b.push(Section::Answer, &name("x"), Class::IN, 0, &a);
}
