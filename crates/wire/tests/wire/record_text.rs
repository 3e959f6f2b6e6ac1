use std::net::Ipv4Addr;

use clusterdns_wire::record::{DEFAULT_TTL, RecordParseError};
use clusterdns_wire::{Class, Record, RecordData, Rtype};

use crate::name;

fn rec(s: &str) -> Record {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// Display output as miekg/dns prints it, and it parses back to itself.
#[test]
fn display_matches_miekg_and_round_trips() {
    let cases = [
        "svc.ns.svc.cluster.local.\t5\tIN\tA\t10.0.0.1",
        "svc.ns.svc.cluster.local.\t5\tIN\tAAAA\tfd00::1",
        "a.\t5\tIN\tAAAA\t::ffff:1.2.3.4",
        "www.example.org.\t300\tIN\tCNAME\texample.org.",
        "1.0.0.10.in-addr.arpa.\t5\tIN\tPTR\tsvc.ns.svc.cluster.local.",
        "example.org.\t300\tIN\tMX\t10 mx.example.org.",
        "_http._tcp.svc.ns.svc.cluster.local.\t5\tIN\tSRV\t0 100 80 svc.ns.svc.cluster.local.",
        "example.org.\t300\tIN\tTXT\t\"v=spf1 -all\" \"second\"",
        "example.org.\t300\tIN\tTXT\t\"quote\\\" back\\\\ nl\\010 hi\\200\"",
        "cluster.local.\t30\tIN\tSOA\tns.dns.cluster.local. hostmaster.cluster.local. 1700000000 7200 1800 86400 30",
        "example.org.\t300\tIN\tHINFO\t\"x86\" \"linux\"",
        "version.bind.\t0\tCH\tTXT\t\"clusterdns\"",
        "example.org.\t300\tIN\tNS\tns1.example.org.",
        "example.org.\t300\tIN\tTYPE65280\t\\# 4 0a000001",
        "example.org.\t300\tIN\tDS\t\\# 3 abcdef",
        "example.org.\t300\tCLASS9\tNULL\t\\# 0 ",
        "a\\.b.example.org.\t1\tIN\tA\t1.2.3.4",
    ];
    for text in cases {
        let r = rec(text);
        assert_eq!(r.to_string(), text);
    }
}

#[test]
fn loose_text_forms() {
    let r = rec("svc.ns.svc.cluster.local. 5 IN A 10.0.0.1");
    assert_eq!(
        r,
        Record::new(
            name("svc.ns.svc.cluster.local"),
            5,
            RecordData::A(Ipv4Addr::new(10, 0, 0, 1))
        )
    );
    assert_eq!(rec("svc.ns.svc.cluster.local A 10.0.0.1").ttl, DEFAULT_TTL);
    assert_eq!(rec("x. IN 7 A 10.0.0.1").ttl, 7);
    assert_eq!(rec("x. CH TXT foo").class, Class::CH);
    assert_eq!(
        rec("x. TXT foo \"bar baz\" ; comment").data,
        RecordData::Txt(vec![b"foo".to_vec(), b"bar baz".to_vec()])
    );
    assert_eq!(
        rec("x. 1 IN SOA ns. mbox. ( 1 2 3 4 5 )").data.rtype(),
        Rtype::SOA
    );
    // Parentheses against the words they enclose, as CoreDNS's template
    // README writes a SOA.
    assert_eq!(
        rec("x. 1 IN SOA ns. mbox. (1 2 3 4 5)"),
        rec("x. 1 IN SOA ns. mbox. 1 2 3 4 5")
    );
    // The generic form of a known type decodes it.
    assert_eq!(rec("x. 1 IN A \\# 4 0a000001"), rec("x. 1 IN A 10.0.0.1"));
    assert_eq!(rec("x. 1 IN TYPE1 10.0.0.1").rtype(), Rtype::A);
    assert_eq!(rec("x. 1 in a 10.0.0.1").rtype(), Rtype::A);
    assert_eq!(
        rec("x. 1 IN TXT \"\\065\"").data,
        RecordData::Txt(vec![b"A".to_vec()])
    );
    assert_eq!(rec("x. 1 IN TXT").data, RecordData::Txt(vec![]));
}

#[test]
fn text_errors() {
    let bad = [
        "",
        "x.",
        "x. 5 IN",
        "x. 5 IN BOGUS 1",
        "x. 5 IN A",
        "x. 5 IN A 300.0.0.1",
        "x. 5 IN A 10.0.0.1 extra",
        "x. 5 IN MX mx.example.org.",
        "x. 5 IN TXT \"open",
        "x. 5 IN DS 1 2 3",
        "x. 5 IN TYPE9 \\# 2 00",
        "x. 5 IN TYPE9 \\# 1 zz",
        "x. 5 IN A \\# 3 010203",
        "x..y 5 IN A 1.2.3.4",
        "x. 99999999999 IN A 1.2.3.4",
        "x. 5 IN TXT \\",
    ];
    for text in bad {
        assert!(text.parse::<Record>().is_err(), "{text:?} parsed");
    }
    // miekg/dns cuts a longer string into 255-byte pieces.
    let long = format!("x. TXT {}", "a".repeat(256));
    assert_eq!(
        long.parse::<Record>().map(|r| r.data),
        Ok(RecordData::Txt(vec![vec![b'a'; 255], vec![b'a']]))
    );
    // Worded as dns.NewRR words them (miekg/dns v1.1.72 run on these two):
    // no file, the token, the line and the column after it.
    let e: RecordParseError = "x..y A 1.2.3.4".parse::<Record>().unwrap_err();
    assert_eq!(e.to_string(), r#"dns: bad owner name: "x..y" at line: 1:5"#);
    assert_eq!(
        "x. A 999.1.1.1".parse::<Record>().unwrap_err().to_string(),
        r#"dns: bad A A: "999.1.1.1" at line: 1:14"#
    );
}

#[test]
fn records_sort_and_hash() {
    let mut v = vec![
        rec("b. 1 IN A 1.1.1.1"),
        rec("a. 1 IN A 1.1.1.2"),
        rec("a. 1 IN A 1.1.1.1"),
    ];
    v.sort();
    assert_eq!(v[0], rec("a. 1 IN A 1.1.1.1"));
    let set: std::collections::HashSet<_> = v.into_iter().collect();
    assert_eq!(set.len(), 3);
}
