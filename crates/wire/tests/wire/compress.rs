//! Name compression pinned to exact bytes: the compressor's internals may
//! change, its output may not. Handcrafted messages with their bytes, a
//! 0x20-randomised ip6.arpa reply, and a digest over many seeded random
//! messages (mixed case, long names, a full table, rollbacks), each of
//! which must also parse back to the names pushed.

use std::fmt::Write as _;
use std::net::Ipv4Addr;

use clusterdns_wire::{Class, Message, MessageBuilder, Name, Query, RData, Rtype, Section};

use crate::{Rng, name, query_packet, srv_data};

fn hex(b: &[u8]) -> String {
    b.iter().fold(String::new(), |mut s, x| {
        let _ = write!(s, "{x:02x}");
        s
    })
}

/// `s` with each letter's case flipped at random.
fn randomise_case(s: &str, rng: &mut Rng) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphabetic() && rng.next_u64() & 1 == 1 {
                (c as u8 ^ 0x20) as char
            } else {
                c
            }
        })
        .collect()
}

const IP6: &str = "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa";

/// A reply with every compressed rdata kind, in mixed case: pinned bytes.
#[test]
fn mixed_reply_bytes_are_pinned() {
    let p = query_packet("WwW.Example.ORG", Rtype::ANY, None);
    let q = Query::parse(&p).unwrap();
    let mut buf = Vec::new();
    let mut b = MessageBuilder::reply_to(&q, &mut buf);
    let an = Section::Answer;
    let owner = name("www.example.org");
    let cname = name("web.Example.ORG");
    let soa_m = name("ns.example.org");
    let soa_r = name("hostmaster.example.org");
    let mx = name("mail.example.ORG");
    let srv = name("web.example.org");
    b.push(an, q.qname(), Class::IN, 1, &RData::Cname(&cname))
        .unwrap();
    b.push(an, &owner, Class::IN, 1, &RData::A(Ipv4Addr::LOCALHOST))
        .unwrap();
    b.push(
        an,
        &cname,
        Class::IN,
        1,
        &RData::Mx {
            preference: 10,
            exchange: &mx,
        },
    )
    .unwrap();
    b.push(an, &cname, Class::IN, 1, &srv_data(1, 2, 3, &srv))
        .unwrap();
    b.push(an, &srv, Class::IN, 1, &RData::Ptr(&mx)).unwrap();
    b.push(
        Section::Authority,
        &name("example.org"),
        Class::IN,
        1,
        &RData::Soa {
            mname: &soa_m,
            rname: &soa_r,
            serial: 1,
            refresh: 2,
            retry: 3,
            expire: 4,
            minimum: 5,
        },
    )
    .unwrap();
    b.finish();
    assert_eq!(
        hex(&buf),
        concat!(
            "abcd8100000100050001000003577757074578616d706c65034f52470000ff00",
            "01c00c0005000100000001000603776562c01003777777076578616d706c6503",
            "6f726700000100010000000100047f000001c02d000f0001000000010011000a",
            "046d61696c076578616d706c65c018c02d002100010000000100170001000200",
            "0303776562076578616d706c65036f726700c081000c0001000000010002c060",
            "c03700060001000000010026026e73c0370a686f73746d6173746572c0370000",
            "000100000002000000030000000400000005",
        )
    );
}

/// An ip6.arpa PTR reply: question in random case, owner lowercase
/// (sharing only the suffix the question spells in lowercase), then an
/// owner in the question's case (one pointer).
#[test]
fn random_case_ip6_ptr_reply() {
    let mut rng = Rng(0x5eed);
    let qname = randomise_case(IP6, &mut rng);
    assert_ne!(qname, IP6);
    let p = query_packet(&qname, Rtype::PTR, None);
    let q = Query::parse(&p).unwrap();
    let target = name("a.example.org");
    let mut buf = Vec::new();
    let mut b = MessageBuilder::reply_to(&q, &mut buf);
    let lower = name(IP6);
    let before = b.len();
    b.push(Section::Answer, &lower, Class::IN, 1, &RData::Ptr(&target))
        .unwrap();
    // Whether any suffix is shared depends on the case drawn for "d",
    // "f", "ip6" and "arpa": the lowercase owner shares the longest
    // suffix the question spells in lowercase.
    let shared = shared_suffix(q.qname(), &lower);
    let owner_len = match shared {
        Some(at) => at + 2,
        None => lower.len(),
    };
    assert_eq!(b.len() - before, owner_len + 10 + target.len());
    let before = b.len();
    b.push(
        Section::Answer,
        q.qname(),
        Class::IN,
        1,
        &RData::Ptr(&target),
    )
    .unwrap();
    // The owner and the target: one pointer each.
    assert_eq!(b.len() - before, 2 + 10 + 2);
    b.finish();
    let m = Message::parse(&buf).unwrap();
    let owners: Vec<Name> = m.records().map(|r| r.name).collect();
    assert_eq!(owners, [lower, *q.qname()]);
    assert_eq!(hex(&buf[..12]), "abcd81000001000200000000");
}

/// Offset in `b`'s wire form of the longest suffix it shares byte for
/// byte with `a` (root excluded).
fn shared_suffix(a: &Name, b: &Name) -> Option<usize> {
    let (a, b) = (a.as_wire(), b.as_wire());
    let mut p = 0;
    while p + 1 < b.len() {
        let s = &b[p..];
        if a.len() >= s.len() && &a[a.len() - s.len()..] == s && label_start(a, a.len() - s.len()) {
            return Some(p);
        }
        p += 1 + usize::from(b[p]);
    }
    None
}

fn label_start(wire: &[u8], at: usize) -> bool {
    let mut p = 0;
    while p < at {
        p += 1 + usize::from(wire[p]);
    }
    p == at
}

const POOL: [&str; 12] = [
    "example.org",
    "www.example.org",
    "a.b.c.example.org",
    "svc.ns.svc.cluster.local",
    "_http._tcp.svc.ns.svc.cluster.local",
    "10-1-2-3.ns.pod.cluster.local",
    "1.2.0.10.in-addr.arpa",
    IP6,
    "b.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa",
    "x",
    "cluster.local",
    "a-label-of-sixty-three-bytes-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx.example.org",
];

/// A name from the pool, sometimes with an extra random label, in random
/// case half the time.
fn random_name(rng: &mut Rng) -> Name {
    let mut s = POOL[rng.below(POOL.len())].to_owned();
    if rng.below(3) == 0 {
        s = format!("n{}.{s}", rng.below(50));
    }
    if rng.below(2) == 0 {
        s = randomise_case(&s, rng);
    }
    name(&s)
}

/// FNV-1a, 64 bits.
fn fnv(h: &mut u64, bytes: &[u8]) {
    for &b in bytes {
        *h ^= u64::from(b);
        *h = h.wrapping_mul(0x100_0000_01b3);
    }
}

/// 600 seeded random messages: every one parses back to the names
/// pushed, and the digest of all their bytes is pinned.
#[test]
fn random_messages_are_pinned() {
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    let mut digest = 0xcbf2_9ce4_8422_2325u64;
    let mut buf = Vec::new();
    for _ in 0..600 {
        let qname = random_name(&mut rng);
        let p = query_packet(&qname.to_string(), Rtype::ANY, None);
        let q = Query::parse(&p).unwrap();
        let mut b = MessageBuilder::reply_to(&q, &mut buf);
        // Small limits make later pushes fail and roll back.
        if rng.below(4) == 0 {
            b.set_limit(200 + rng.below(600));
        }
        let mut pushed = Vec::new();
        // Up to 80 records, several names each: past the 128 remembered
        // positions.
        for _ in 0..rng.below(80) {
            let owner = random_name(&mut rng);
            let target = random_name(&mut rng);
            let other = random_name(&mut rng);
            let section =
                [Section::Answer, Section::Authority, Section::Additional][pushed.len() * 3 / 80];
            let rdata = match rng.below(7) {
                0 => RData::Cname(&target),
                1 => RData::Ptr(&target),
                2 => RData::Ns(&target),
                3 => RData::Mx {
                    preference: 5,
                    exchange: &target,
                },
                4 => srv_data(0, 1, 53, &target),
                5 => RData::Soa {
                    mname: &target,
                    rname: &other,
                    serial: 1,
                    refresh: 2,
                    retry: 3,
                    expire: 4,
                    minimum: 5,
                },
                _ => RData::A(Ipv4Addr::new(10, 0, 0, 1)),
            };
            if b.push(section, &owner, Class::IN, 30, &rdata).is_ok() {
                pushed.push((owner, rdata.rtype()));
            }
        }
        b.finish();
        fnv(&mut digest, &buf);
        let m = Message::parse(&buf).unwrap();
        let got: Vec<(Name, Rtype)> = m.records().map(|r| (r.name, r.rtype)).collect();
        assert_eq!(got, pushed);
        for r in m.records() {
            r.to_owned_record(&m).unwrap();
        }
    }
    assert_eq!(digest, 0x54db_96b2_a146_db04, "digest {digest:#018x}");
}
