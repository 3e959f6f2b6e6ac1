use std::net::Ipv4Addr;

use clusterdns_wire::{
    Class, Header, Message, MessageBuilder, ParseError, RData, Record, Rtype, Section,
};

use crate::name;

fn sample() -> Vec<u8> {
    let mut buf = Vec::new();
    let mut b = MessageBuilder::new(
        &mut buf,
        Header {
            id: 7,
            flags: 0x8180,
            ..Header::default()
        },
    );
    let n = name("example.org");
    b.push_question(&n, Rtype::A, Class::IN).unwrap();
    for i in 1..=3 {
        b.push(
            Section::Answer,
            &n,
            Class::IN,
            300 + i,
            &RData::A(Ipv4Addr::new(192, 0, 2, i as u8)),
        )
        .unwrap();
    }
    b.push(
        Section::Authority,
        &n,
        Class::IN,
        60,
        &RData::Ns(&name("ns.example.org")),
    )
    .unwrap();
    b.push_opt(4096, false, &[]).unwrap();
    b.finish();
    buf
}

#[test]
fn sections_and_offsets() {
    let mut buf = sample();
    let m = Message::parse(&buf).unwrap();
    assert_eq!(m.header().id, 7);
    assert_eq!(m.len(), buf.len());
    assert_eq!(m.question_range(), 12..12 + 13 + 4);
    let views: Vec<_> = m.records().collect();
    assert_eq!(views.len(), 5);
    assert_eq!(m.section(Section::Answer).count(), 3);
    assert_eq!(m.section(Section::Authority).count(), 1);
    assert_eq!(m.section(Section::Additional).count(), 1);
    assert_eq!(views[4].rtype, Rtype::OPT);
    assert_eq!(m.opt_ttl_offset(), Some(views[4].ttl_offset));
    assert_eq!(views[0].rdata_bytes(&m), &[192, 0, 2, 1]);
    let offsets: Vec<usize> = views.iter().map(|v| v.ttl_offset).collect();
    // Rewrite TTLs in place, as a cache does.
    for off in offsets {
        buf[off..off + 4].copy_from_slice(&42u32.to_be_bytes());
    }
    let m = Message::parse(&buf).unwrap();
    assert!(m.records().take(4).all(|r| r.ttl == 42));
    let first: Record = m.records().next().unwrap().to_owned_record(&m).unwrap();
    assert_eq!(first.to_string(), "example.org.\t42\tIN\tA\t192.0.2.1");
}

#[test]
fn parse_errors() {
    let buf = sample();
    assert!(Message::parse(&buf[..11]).is_err());
    for cut in 12..buf.len() {
        assert_eq!(
            Message::parse(&buf[..cut]).unwrap_err(),
            ParseError,
            "cut {cut}"
        );
    }
    let mut trailing = buf.clone();
    trailing.push(0);
    assert_eq!(Message::parse(&trailing).unwrap().len(), buf.len());
}

#[test]
fn no_question_and_bad_rdata() {
    // A header-only message.
    let m = Message::parse(&[0; 12]).unwrap();
    assert!(m.question().is_none());
    assert_eq!(m.records().count(), 0);
    // An A record with 3 bytes of rdata parses as a message but not as a record.
    let mut buf = vec![0, 1, 0x81, 0x80, 0, 0, 0, 1, 0, 0, 0, 0];
    buf.extend_from_slice(b"\x01a\x00\x00\x01\x00\x01\x00\x00\x00\x01\x00\x03\x01\x02\x03");
    let m = Message::parse(&buf).unwrap();
    let v = m.records().next().unwrap();
    assert_eq!(v.to_owned_record(&m), Err(ParseError));
    // CNAME whose name runs past its rdata.
    let mut buf = vec![0, 1, 0x81, 0x80, 0, 0, 0, 1, 0, 0, 0, 0];
    buf.extend_from_slice(b"\x01a\x00\x00\x05\x00\x01\x00\x00\x00\x01\x00\x02\x01b\x00");
    let m = Message::parse(&buf[..buf.len() - 1]);
    assert!(m.is_ok());
    let m = Message::parse(&buf).unwrap();
    assert_eq!(
        m.records().next().unwrap().to_owned_record(&m),
        Err(ParseError)
    );
}

#[test]
fn compressed_rdata_names_are_decompressed() {
    let mut buf = vec![0, 1, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0];
    buf.extend_from_slice(b"\x07example\x03org\x00\x00\x05\x00\x01");
    // CNAME: owner ptr(12), rdata "www" + ptr(12)
    buf.extend_from_slice(b"\xC0\x0C\x00\x05\x00\x01\x00\x00\x00\x0A\x00\x06\x03www\xC0\x0C");
    let m = Message::parse(&buf).unwrap();
    let r = m.records().next().unwrap().to_owned_record(&m).unwrap();
    assert_eq!(
        r.to_string(),
        "example.org.\t10\tIN\tCNAME\twww.example.org."
    );
    assert_eq!(
        m.question(),
        Some((name("example.org"), Rtype::CNAME, Class::IN))
    );
}

/// `owner_is` compares a record's owner in place as `records` would
/// after decoding it: through compression pointers, ignoring case, and a
/// name that is only a prefix or a suffix of the owner is not the owner.
#[test]
fn owners_compared_in_place_match_the_decoded_names() {
    let buf = sample();
    let m = Message::parse(&buf).unwrap();
    let mut at_name = 0;
    for (head, full) in m.heads().zip(m.records()) {
        assert!(head.owner_is(&m, &full.name), "{:?}", full.name);
        let upper = name(&full.name.to_string().to_uppercase());
        assert!(head.owner_is(&m, &upper), "{upper:?}");
        for other in [
            "org",
            "www.example.org",
            "example.com",
            "example.org.x",
            ".",
        ] {
            let other = name(other);
            assert_eq!(head.owner_is(&m, &other), full.name == other, "{other:?}");
        }
        at_name += usize::from(full.name == name("example.org"));
    }
    assert!(at_name >= 3);
    // An owner by pointer, then one written partly out: a pointer into
    // the header or past the end is no name at all.
    let mut buf = vec![0, 1, 0x81, 0x80, 0, 1, 0, 2, 0, 0, 0, 0];
    buf.extend_from_slice(b"\x03Foo\x03bar\x00\x00\x01\x00\x01");
    buf.extend_from_slice(b"\xC0\x0C\x00\x01\x00\x01\x00\x00\x00\x0A\x00\x04\x0A\x00\x00\x01");
    buf.extend_from_slice(b"\x01x\xC0\x0C\x00\x01\x00\x01\x00\x00\x00\x0A\x00\x04\x0A\x00\x00\x02");
    let m = Message::parse(&buf).unwrap();
    let heads: Vec<_> = m.heads().collect();
    assert!(heads[0].owner_is(&m, &name("foo.BAR")));
    assert!(heads[1].owner_is(&m, &name("x.foo.bar")));
    assert!(!heads[1].owner_is(&m, &name("foo.bar")));
    let mut bad = heads[0].clone();
    bad.name_at = 2;
    assert!(!bad.owner_is(&m, &name("foo.bar")));
    bad.name_at = buf.len();
    assert!(!bad.owner_is(&m, &name("foo.bar")));
}

/// `heads` is `records` without the owner names, record for record, and
/// `question_type` the question's type and class.
#[test]
fn heads_are_the_records_without_their_names() {
    let buf = sample();
    let m = Message::parse(&buf).unwrap();
    let full: Vec<_> = m
        .records()
        .map(|r| (r.section, r.rtype, r.class, r.ttl, r.ttl_offset, r.rdata))
        .collect();
    let heads: Vec<_> = m
        .heads()
        .map(|r| (r.section, r.rtype, r.class, r.ttl, r.ttl_offset, r.rdata))
        .collect();
    assert_eq!(heads, full);
    assert_eq!(heads.len(), 5);
    assert_eq!(m.question_type(), Some((Rtype::A, Class::IN)));
    let mut none = buf[..12].to_vec();
    none[4..12].fill(0);
    assert_eq!(Message::parse(&none).unwrap().question_type(), None);
}
