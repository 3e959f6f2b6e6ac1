//! Malformed-packet corpus: mutate valid messages in many ways and check
//! that no parser panics. Deterministic (seeded), no extra dependencies.

use std::net::Ipv4Addr;

use clusterdns_wire::{Class, Message, MessageBuilder, Query, RData, Rtype, Section, truncate};

use crate::{Rng, name, query_packet, srv_data};

fn seeds() -> Vec<Vec<u8>> {
    let mut out = vec![
        query_packet("example.org", Rtype::A, None),
        query_packet("svc.ns.svc.cluster.local", Rtype::SRV, Some((1232, true))),
    ];
    let p = query_packet(
        "a.svc.ns.svc.cluster.local",
        Rtype::ANY,
        Some((4096, false)),
    );
    let q = Query::parse(&p).unwrap();
    let t = name("b.svc.ns.svc.cluster.local");
    let mut buf = Vec::new();
    let mut b = MessageBuilder::reply_to(&q, &mut buf);
    b.push(Section::Answer, q.qname(), Class::IN, 5, &RData::Cname(&t))
        .unwrap();
    b.push(
        Section::Answer,
        &t,
        Class::IN,
        5,
        &RData::A(Ipv4Addr::LOCALHOST),
    )
    .unwrap();
    let srv = srv_data(1, 2, 3, &t);
    b.push(Section::Answer, q.qname(), Class::IN, 5, &srv)
        .unwrap();
    let mx = RData::Mx {
        preference: 1,
        exchange: &t,
    };
    b.push(Section::Answer, q.qname(), Class::IN, 5, &mx)
        .unwrap();
    let txt: [&[u8]; 2] = [b"a", b"bc"];
    b.push(Section::Answer, q.qname(), Class::IN, 5, &RData::Txt(&txt))
        .unwrap();
    let soa = RData::Soa {
        mname: &t,
        rname: q.qname(),
        serial: 1,
        refresh: 2,
        retry: 3,
        expire: 4,
        minimum: 5,
    };
    b.push(
        Section::Authority,
        &name("cluster.local"),
        Class::IN,
        5,
        &soa,
    )
    .unwrap();
    let hinfo = RData::Hinfo {
        cpu: b"c",
        os: b"o",
    };
    b.push(Section::Additional, &t, Class::IN, 5, &hinfo)
        .unwrap();
    b.push_opt(4096, true, &[0, 10, 0, 2, 1, 2]).unwrap();
    b.finish();
    out.push(buf);
    out
}

fn exercise(pkt: &[u8]) {
    let _ = Query::parse(pkt).map(|q| (q.udp_size(), q.edns_options().count()));
    if let Ok(m) = Message::parse(pkt) {
        let _ = m.question();
        let _ = m.rcode();
        assert_eq!(m.heads().count(), m.records().count());
        // Records copied in place (every pointer kept) are the same bytes.
        let start = m.question_range().end;
        let mut out = pkt[..start].to_vec();
        if let Ok(end) =
            clusterdns_wire::relocate_records(pkt, start, m.records().count(), &mut out, Some)
        {
            assert_eq!(out, pkt[..end]);
        }
        for r in m.records() {
            if let Ok(rec) = r.to_owned_record(&m) {
                // Text form must parse back (Display/FromStr agree).
                let text = rec.to_string();
                if rec.rtype() != Rtype::OPT {
                    let back = text.parse::<clusterdns_wire::Record>();
                    assert_eq!(back.as_ref(), Ok(&rec), "{text}");
                }
            }
        }
    }
    for max in [0, 100, 512, pkt.len().saturating_sub(1)] {
        let mut v = pkt.to_vec();
        if let Ok(true) = truncate(&mut v, max) {
            assert!(
                Message::parse(&v).is_ok(),
                "truncate produced an invalid message"
            );
        }
    }
}

#[test]
fn mutated_packets_never_panic() {
    let mut rng = Rng(0x5EED_1234_ABCD_0001);
    let seeds = seeds();
    for seed in &seeds {
        exercise(seed);
        for cut in 0..seed.len() {
            exercise(&seed[..cut]);
        }
    }
    for _ in 0..30_000 {
        let mut p = seeds[rng.below(seeds.len())].clone();
        match rng.below(4) {
            0 => {
                let i = rng.below(p.len());
                p[i] ^= 1 << rng.below(8);
            }
            1 => {
                for _ in 0..1 + rng.below(8) {
                    let i = rng.below(p.len());
                    p[i] = rng.next_u64() as u8;
                }
            }
            2 => {
                // Point a random place at a random offset.
                let i = rng.below(p.len() - 1);
                p[i] = 0xC0 | (rng.below(4) as u8);
                p[i + 1] = rng.next_u64() as u8;
            }
            _ => {
                let len = rng.below(p.len());
                p.truncate(len);
            }
        }
        exercise(&p);
    }
    for _ in 0..5_000 {
        let len = rng.below(600);
        let p: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        exercise(&p);
    }
}
