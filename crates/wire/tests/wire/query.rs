use clusterdns_wire::{Class, Query, QueryError, Rtype};

use crate::{name, query_packet};

#[test]
fn plain_query() {
    let p = query_packet("WwW.Example.ORG", Rtype::AAAA, None);
    let q = Query::parse(&p).unwrap();
    assert_eq!(q.id(), 0xABCD);
    assert!(q.header().rd());
    assert_eq!(q.qname(), &name("WwW.Example.ORG"));
    assert_eq!(q.qname_lower(), &name("www.example.org"));
    assert_eq!(q.qtype(), Rtype::AAAA);
    assert_eq!(q.qclass(), Class::IN);
    assert_eq!(q.question_range(), 12..p.len());
    assert_eq!(q.question_bytes(), &p[12..]);
    assert!(q.edns().is_none());
    assert!(!q.do_bit());
    assert_eq!(q.udp_size(), 512);
    assert_eq!(q.edns_options().count(), 0);
    assert_eq!(q.raw(), &p[..]);
}

#[test]
fn edns_query() {
    let p = query_packet("example.org.", Rtype::A, Some((1232, true)));
    let q = Query::parse(&p).unwrap();
    let e = q.edns().unwrap();
    assert_eq!(e.udp_size, 1232);
    assert!(e.do_bit && q.do_bit());
    assert_eq!(e.version, 0);
    assert_eq!(e.ext_rcode, 0);
    assert_eq!(q.udp_size(), 1232);
    let p = query_packet("example.org.", Rtype::A, Some((100, false)));
    let q = Query::parse(&p).unwrap();
    assert_eq!(q.udp_size(), 512);
    assert!(!q.do_bit());
}

#[test]
fn a_detached_query_attaches_to_a_copy_of_its_bytes() {
    let cookie = [0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8];
    let p = with_opt(b"\x00", &cookie, 1, 1);
    let q = Query::parse(&p).unwrap();
    let d = q.detach();
    let copy = p.clone();
    let again = d.attach(&copy).unwrap();
    assert_eq!(again.raw().as_ptr(), copy.as_ptr());
    assert_eq!(again.qname(), q.qname());
    assert_eq!(again.qname_lower(), q.qname_lower());
    assert_eq!(again.question_bytes(), q.question_bytes());
    assert_eq!(again.edns(), q.edns());
    assert_eq!(
        again.edns_options().collect::<Vec<_>>(),
        q.edns_options().collect::<Vec<_>>()
    );
    assert_eq!(again.header(), q.header());
    // Bytes of another length are not its packet.
    assert!(d.attach(&p[..p.len() - 1]).is_none());
    // The lowercase name is derived again.
    let p = query_packet("WwW.Example.ORG", Rtype::AAAA, Some((1232, true)));
    let q = Query::parse(&p).unwrap();
    let again = q.detach().attach(&p).unwrap();
    assert_eq!(again.qname(), &name("WwW.Example.ORG"));
    assert_eq!(again.qname().as_wire(), q.qname().as_wire());
    assert_eq!(
        again.qname_lower().as_wire(),
        name("www.example.org").as_wire()
    );
    assert!(again.do_bit());
}

/// Hand-made: header, question `a.`, OPT with a cookie option.
fn with_opt(opt_owner: &[u8], opts: &[u8], arcount: u16, copies: usize) -> Vec<u8> {
    let mut p = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0];
    p.extend_from_slice(&arcount.to_be_bytes());
    p.extend_from_slice(b"\x01a\x00\x00\x01\x00\x01");
    for _ in 0..copies {
        p.extend_from_slice(opt_owner);
        p.extend_from_slice(&[0, 41, 0x10, 0x00, 0x01, 0x02, 0x80, 0x00]);
        p.extend_from_slice(&(opts.len() as u16).to_be_bytes());
        p.extend_from_slice(opts);
    }
    p
}

#[test]
fn edns_options_and_fields() {
    let cookie = [0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8];
    let p = with_opt(b"\x00", &cookie, 1, 1);
    let q = Query::parse(&p).unwrap();
    let e = q.edns().unwrap();
    assert_eq!(e.udp_size, 4096);
    assert_eq!(e.ext_rcode, 1);
    assert_eq!(e.version, 2);
    assert!(e.do_bit);
    assert_eq!(&p[e.options.clone()], &cookie);
    let opts: Vec<_> = q.edns_options().collect();
    assert_eq!(opts, [(10u16, &[1u8, 2, 3, 4, 5, 6, 7, 8][..])]);
    assert_eq!(e.option(&p, 10), Some(&[1u8, 2, 3, 4, 5, 6, 7, 8][..]));
    assert_eq!(e.option(&p, 8), None);
}

#[test]
fn bad_opt_is_malformed() {
    // The question `a.` ends at 19: it goes back with the FORMERR.
    let bad = QueryError::MalformedRecords { question_end: 19 };
    // Two OPT records.
    let p = with_opt(b"\x00", &[], 2, 2);
    assert_eq!(Query::parse(&p).unwrap_err(), bad);
    // OPT owner not root.
    let p = with_opt(b"\x01a\x00", &[], 1, 1);
    assert_eq!(Query::parse(&p).unwrap_err(), bad);
    // Truncated option inside the OPT rdata.
    let p = with_opt(b"\x00", &[0, 10, 0, 8, 1], 1, 1);
    assert_eq!(Query::parse(&p).unwrap_err(), bad);
    // A record cut short.
    let p = with_opt(b"\x00", &[], 1, 1);
    assert_eq!(Query::parse(&p[..p.len() - 3]).unwrap_err(), bad);
    // A count that runs out exactly at the end is a lie that ends the
    // records (miekg/dns), not an error.
    let p = with_opt(b"\x00", &[], 2, 1);
    assert!(Query::parse(&p).unwrap().edns().is_some());
    let mut p = query_packet("a.", Rtype::A, None);
    p[11] = 1;
    assert!(Query::parse(&p).unwrap().edns().is_none());
}

#[test]
fn header_level_errors() {
    assert_eq!(Query::parse(&[0; 11]).unwrap_err(), QueryError::TooShort);
    assert_eq!(Query::parse(&[]).unwrap_err(), QueryError::TooShort);
    let mut p = query_packet("a.", Rtype::A, None);
    p[2] |= 0x80;
    assert_eq!(Query::parse(&p).unwrap_err(), QueryError::NotAQuery);
    let p = [0u8; 12];
    assert_eq!(Query::parse(&p).unwrap_err(), QueryError::NoQuestion);
    let mut p = query_packet("a.", Rtype::A, None);
    p[5] = 2;
    p.extend_from_slice(b"\x01b\x00\x00\x01\x00\x01");
    assert_eq!(Query::parse(&p).unwrap_err(), QueryError::Malformed);
    // Question cut short.
    let p = query_packet("a.", Rtype::A, None);
    for cut in 12..p.len() {
        assert_eq!(Query::parse(&p[..cut]).unwrap_err(), QueryError::Malformed);
    }
}

#[test]
fn answer_records_are_skipped_but_checked() {
    let mut p = query_packet("a.", Rtype::SOA, None);
    p[7] = 1; // ancount = 1 (as NOTIFY carries)
    p.extend_from_slice(b"\xC0\x0C\x00\x01\x00\x01\x00\x00\x00\x05\x00\x04\x0A\x00\x00\x01");
    let q = Query::parse(&p).unwrap();
    assert_eq!(q.qtype(), Rtype::SOA);
    // Bad pointer in the answer owner.
    let mut bad = p.clone();
    let at = bad.len() - 15;
    bad[at] = 0x40;
    assert_eq!(
        Query::parse(&bad).unwrap_err(),
        QueryError::MalformedRecords { question_end: 19 }
    );
    // rdlength past the end.
    let mut bad = p.clone();
    let at = bad.len() - 5;
    bad[at] = 5;
    assert_eq!(
        Query::parse(&bad).unwrap_err(),
        QueryError::MalformedRecords { question_end: 19 }
    );
    // Trailing bytes after the counted records are ignored.
    let mut ok = p;
    ok.extend_from_slice(b"junk");
    assert!(Query::parse(&ok).is_ok());
}

#[test]
fn query_error_display() {
    assert_eq!(
        QueryError::TooShort.to_string(),
        "packet shorter than a DNS header"
    );
    assert_eq!(QueryError::Malformed.to_string(), "malformed query");
}

/// What `Query::renamed` derives is what parsing its packet gives, for
/// longer and shorter names, with and without OPT options.
#[test]
fn a_renamed_query_is_its_packet_parsed() {
    let cookie = [0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8];
    let packets = [
        with_opt(b"\x00", &cookie, 1, 1),
        query_packet("WwW.Example.ORG", Rtype::AAAA, None),
        query_packet("a.b.c.d.e.f.example.org", Rtype::A, Some((1232, true))),
    ];
    for p in &packets {
        let q = Query::parse(p).unwrap();
        for n in ["x", "Longer.Name.Than.Before.Svc.Cluster.Local", "."] {
            let mut buf = Vec::new();
            let r = q.renamed(&name(n), &mut buf).unwrap();
            let raw = r.raw().to_vec();
            let want = Query::parse(&raw).unwrap();
            assert_eq!(r.qname(), &name(n));
            assert_eq!(r.qname(), want.qname());
            assert_eq!(r.qname_lower(), want.qname_lower());
            assert_eq!(r.qtype(), q.qtype());
            assert_eq!(r.question_range(), want.question_range());
            assert_eq!(r.edns(), want.edns());
            assert_eq!(
                r.edns_options().collect::<Vec<_>>(),
                q.edns_options().collect::<Vec<_>>()
            );
            assert_eq!(r.header(), want.header());
        }
    }
    // Records besides a lone OPT may point into the question: the packet
    // is parsed (this answer's owner is then the new name).
    let mut with_answer = query_packet("a.example", Rtype::A, None);
    with_answer[7] = 1; // ancount 1, the record follows
    with_answer
        .extend_from_slice(b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x05\x00\x04\x0a\x00\x00\x01");
    let q = Query::parse(&with_answer).unwrap();
    let mut buf = Vec::new();
    let r = q.renamed(&name("longer.example"), &mut buf).unwrap();
    assert_eq!(r.qname(), &name("longer.example"));
    assert_eq!(r.raw().len(), with_answer.len() + 5);
}

/// `Query::renamed_suffix` keeps the leading labels of the query's name
/// and puts another suffix behind them: the query `renamed` gives for
/// that name, byte for byte; a cut inside a label, at the root or past
/// 255 bytes is refused.
#[test]
fn a_query_renamed_to_a_suffix_is_the_query_renamed_to_the_whole_name() {
    let packets = [
        query_packet("WwW.Ab.Test", Rtype::A, None),
        query_packet("WwW.Ab.Test", Rtype::AAAA, Some((1232, true))),
    ];
    for p in &packets {
        let q = Query::parse(p).unwrap();
        for (keep, head) in [(4, "WwW."), (7, "WwW.Ab."), (12, "WwW.Ab.Test.")] {
            for suffix in ["Svc.Cluster.Local", "x", "."] {
                let whole = if suffix == "." {
                    head.to_owned()
                } else {
                    format!("{head}{suffix}")
                };
                let (mut a, mut b) = (Vec::new(), Vec::new());
                let r = q.renamed_suffix(keep, &name(suffix), &mut a).unwrap();
                let want = q.renamed(&name(&whole), &mut b).unwrap();
                assert_eq!(r.raw(), want.raw(), "{whole}");
                assert_eq!(r.qname(), want.qname());
                assert_eq!(r.qname_lower(), want.qname_lower());
                assert_eq!(r.question_range(), want.question_range());
                assert_eq!(r.edns(), want.edns());
                assert_eq!(r.header(), want.header());
            }
        }
        let mut buf = Vec::new();
        for keep in [1, 5, 13, 14] {
            assert_eq!(
                q.renamed_suffix(keep, &name("x"), &mut buf).err(),
                Some(QueryError::Malformed),
                "keep {keep}"
            );
        }
        let long = name(
            &[
                "a".repeat(63),
                "b".repeat(63),
                "c".repeat(63),
                "d".repeat(61),
            ]
            .join("."),
        );
        assert_eq!(
            q.renamed_suffix(4, &long, &mut buf).err(),
            Some(QueryError::Malformed)
        );
    }
}
