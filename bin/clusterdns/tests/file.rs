//! *file* against the reference CoreDNS: one zone file (wildcards, CNAME
//! chains, delegations with glue, MX/SRV targets, empty non-terminals)
//! served by both, every answer compared over UDP and TCP; a reload
//! after a serial bump; bad zone files and bad arguments refused with the
//! same text. Each test skips when the reference binary is not built
//! (`scripts/rig build`), unless `CLUSTERDNS_REQUIRE_RIG=1`.

mod differ;

use std::path::Path;
use std::time::{Duration, Instant};

use clusterdns_test_support::{Differential, Query, assert_setup_errors_agree, coredns_or_skip};
use differ::{clusterdns, disagreements};

/// The zone both servers load: each line is there for a case below.
const ZONE: &str = r#"$ORIGIN example.org.
$TTL 300
@       3600 IN SOA ns1 hostmaster ( 2024010101 ; serial
                7200 3600 1209600 300 )
        3600 IN NS ns1
        3600 IN NS ns2.example.net.
        IN MX 10 mx1
        IN MX 20 mx2.example.net.
        IN TXT "v=spf1 -all" "second string"
        IN A 192.0.2.1
ns1     IN A 192.0.2.2
        IN AAAA 2001:db8::2
www     IN A 192.0.2.10
        IN A 192.0.2.11
        IN AAAA 2001:db8::10
mx1     IN A 192.0.2.25
alias   IN CNAME www
chain1  IN CNAME chain2
chain2  IN CNAME chain3.example.org.
chain3  IN CNAME www
dangling IN CNAME nothere
outside IN CNAME www.example.net.
nowhere IN CNAME nothing.example.net.
towild  IN CNAME foo.wild
loop1   IN CNAME loop2
loop2   IN CNAME loop1
*.wild  IN A 192.0.2.20
        IN TXT "wild"
*.wild  IN MX 5 mx1
*.cn    IN CNAME www
a.b.c   IN A 192.0.2.30
*.ent   IN A 192.0.2.40
x.y.ent IN A 192.0.2.41
_sip._udp IN SRV 10 60 5060 sip
        IN SRV 20 0 5060 sip2.example.net.
sip     IN A 192.0.2.50
cafe    IN CAA 0 issue "ca.example.net"
rev     IN PTR host.example.org.
sub     IN NS ns.sub
        IN NS ns.other.example.net.
ns.sub  IN A 192.0.2.53
        IN AAAA 2001:db8::53
tosub   IN CNAME host.sub
big     IN TXT "0123456789012345678901234567890123456789012345678901234567890123456789"
        IN TXT "1123456789012345678901234567890123456789012345678901234567890123456789"
        IN TXT "2123456789012345678901234567890123456789012345678901234567890123456789"
        IN TXT "3123456789012345678901234567890123456789012345678901234567890123456789"
        IN TXT "4123456789012345678901234567890123456789012345678901234567890123456789"
        IN TXT "5123456789012345678901234567890123456789012345678901234567890123456789"
        IN TXT "6123456789012345678901234567890123456789012345678901234567890123456789"
        IN TXT "7123456789012345678901234567890123456789012345678901234567890123456789"
"#;

fn differential(coredns: &Path, corefile: &str, dir: &Path) -> Differential {
    differ::differential(coredns, corefile, &[("ZDIR", &dir.display().to_string())])
}

const COREFILE: &str =
    "example.org:@PORT@ {\n    bind 127.0.0.1\n    file @ZDIR@/db.example.org\n}\n";

#[test]
fn zone_answers_agree_with_coredns() {
    let coredns = coredns_or_skip!();
    let dir = differ::zone_dir(&[("db.example.org", ZONE)]);
    let diff = differential(&coredns, COREFILE, dir.path());
    let mut queries = Vec::new();
    for (name, types) in [
        (
            "example.org.",
            &["SOA", "NS", "MX", "TXT", "A", "AAAA", "SRV"][..],
        ),
        ("Example.ORG.", &["SOA", "A"][..]),
        ("ns1.example.org.", &["A", "AAAA", "MX"][..]),
        ("www.example.org.", &["A", "AAAA", "TXT", "CNAME"][..]),
        ("alias.example.org.", &["A", "AAAA", "CNAME", "TXT"][..]),
        ("chain1.example.org.", &["A", "AAAA", "CNAME"][..]),
        ("dangling.example.org.", &["A", "CNAME"][..]),
        ("outside.example.org.", &["A"][..]),
        ("towild.example.org.", &["A", "TXT", "MX"][..]),
        ("loop1.example.org.", &["A"][..]),
        (
            "foo.wild.example.org.",
            &["A", "TXT", "MX", "AAAA", "CNAME"][..],
        ),
        ("a.b.wild.example.org.", &["A"][..]),
        ("wild.example.org.", &["A"][..]),
        ("*.wild.example.org.", &["A"][..]),
        ("x.cn.example.org.", &["A", "CNAME"][..]),
        ("b.c.example.org.", &["A", "TXT"][..]),
        ("c.example.org.", &["A"][..]),
        ("a.b.c.example.org.", &["A", "AAAA"][..]),
        ("z.a.b.c.example.org.", &["A"][..]),
        ("q.ent.example.org.", &["A"][..]),
        ("y.ent.example.org.", &["A"][..]),
        ("q.y.ent.example.org.", &["A"][..]),
        ("x.y.ent.example.org.", &["A"][..]),
        ("_sip._udp.example.org.", &["SRV", "A"][..]),
        ("_udp.example.org.", &["SRV"][..]),
        ("cafe.example.org.", &["CAA", "A"][..]),
        ("rev.example.org.", &["PTR"][..]),
        ("sub.example.org.", &["NS", "A", "DS", "SOA"][..]),
        ("host.sub.example.org.", &["A", "NS"][..]),
        ("ns.sub.example.org.", &["A"][..]),
        ("tosub.example.org.", &["A"][..]),
        ("nothere.example.org.", &["A", "SOA", "NS"][..]),
        ("deep.nothere.example.org.", &["A"][..]),
    ] {
        for t in types {
            queries.push(Query::new(name, t));
        }
    }
    // Larger than 512 bytes: truncated over UDP without EDNS.
    queries.push(Query::new("big.example.org.", "TXT"));
    queries.push(Query::new("big.example.org.", "TXT").edns(4096));
    queries.push(Query::new("www.example.org.", "ANY"));
    queries.push(Query::new("www.example.org.", "A").class("CH"));
    queries.push(Query::new("www.example.org.", "A").edns(1232));
    queries.push(Query::new("example.org.", "MX").edns(4096).dnssec_ok());
    // Outside the zone: the server has no zone for it.
    queries.push(Query::new("example.net.", "A"));
    let d = disagreements(&diff, &queries);
    assert!(d.is_empty(), "{} disagreements:\n{}", d.len(), d.join("\n"));
}

/// A file without `$ORIGIN` for two zones, with an `$INCLUDE` (relative
/// to the file, with its own origin), TTLs and classes in both orders,
/// long and escaped TXT strings, and RFC 3597 rdata.
const MULTI: &str = r#"@ IN 3600 SOA ns1 hostmaster 7 7200 3600 1209600 300
  3600 IN NS ns1
ns1 A 192.0.2.2
www 60 IN A 192.0.2.10
caps IN 60 A 192.0.2.11
WWW2.Sub IN A 192.0.2.12
long TXT "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" short
esc TXT "semi;colon" "quote\"d" "\196\133"
raw TYPE65280 \# 4 0A0B0C0D
$INCLUDE inc/part.db part
"#;

const PART: &str = "@ IN A 192.0.2.77\nx IN CNAME @\n";

#[test]
fn includes_relative_names_and_two_zones_from_one_file() {
    let coredns = coredns_or_skip!();
    let dir = differ::zone_dir(&[("db.multi", MULTI)]);
    std::fs::create_dir(dir.path().join("inc")).expect("mkdir");
    std::fs::write(dir.path().join("inc/part.db"), PART).expect("write include");
    let corefile =
        ".:@PORT@ {\n    bind 127.0.0.1\n    file @ZDIR@/db.multi example.org example.net\n}\n";
    let diff = differential(&coredns, corefile, dir.path());
    let mut queries = Vec::new();
    for zone in ["example.org.", "example.net."] {
        for (name, t) in [
            ("", "SOA"),
            ("", "NS"),
            ("www.", "A"),
            ("caps.", "A"),
            ("www2.sub.", "A"),
            ("sub.", "A"),
            ("long.", "TXT"),
            ("esc.", "TXT"),
            ("raw.", "TYPE65280"),
            ("part.", "A"),
            ("x.part.", "A"),
            ("x.part.", "CNAME"),
        ] {
            queries.push(Query::new(&format!("{name}{zone}"), t));
        }
    }
    let d = disagreements(&diff, &queries);
    assert!(d.is_empty(), "{} disagreements:\n{}", d.len(), d.join("\n"));
}

#[test]
fn cname_targets_outside_the_zone_are_asked_of_the_server_block() {
    let coredns = coredns_or_skip!();
    let dir = differ::zone_dir(&[("db.example.org", ZONE)]);
    // hosts has the target; names nobody has are REFUSED by the block.
    let corefile = ".:@PORT@ {\n    bind 127.0.0.1\n    hosts {\n        192.0.2.99 www.example.net\n        fallthrough\n    }\n    file @ZDIR@/db.example.org example.org\n}\n";
    let diff = differential(&coredns, corefile, dir.path());
    let queries = [
        Query::new("outside.example.org.", "A"),
        Query::new("outside.example.org.", "AAAA"),
        Query::new("outside.example.org.", "MX"),
        Query::new("nowhere.example.org.", "A"),
        Query::new("outside.example.org.", "CNAME"),
    ];
    differ::assert_agree_and_served(
        &diff,
        &queries,
        &Query::new("outside.example.org.", "A"),
        "192.0.2.99",
    );
}

#[test]
fn cname_loops_across_zones_end_as_coredns_ends_them() {
    let coredns = coredns_or_skip!();
    let dir = tempfile::tempdir().expect("tempdir");
    // One file for both zones: ping.example.org -> pong.example.net ->
    // ping.example.org -> ...; each step leaves its zone.
    std::fs::write(
        dir.path().join("db.loop"),
        "@ 60 IN SOA ns hm 1 2 3 4 5\n  60 IN NS ns\nping 60 IN CNAME pong.example.net.\npong 60 IN CNAME ping.example.org.\nhop 60 IN CNAME ok.example.net.\nok 60 IN A 192.0.2.1\n",
    )
    .expect("write zone");
    let corefile =
        ".:@PORT@ {\n    bind 127.0.0.1\n    file @ZDIR@/db.loop example.org example.net\n}\n";
    let diff = differential(&coredns, corefile, dir.path());
    let queries = [
        Query::new("hop.example.org.", "A"),
        Query::new("ping.example.org.", "A"),
        Query::new("pong.example.net.", "AAAA"),
    ];
    let d = disagreements(&diff, &queries);
    assert!(d.is_empty(), "{} disagreements:\n{}", d.len(), d.join("\n"));
}

/// Whether `d` is only the port whoami reports (the client's source port).
fn whoami_port(d: &clusterdns_test_support::Difference) -> bool {
    let t = d.to_string();
    t.starts_with("additional: only in ")
        && t.contains(" IN SRV 0 0 ")
        && (t.contains(": _udp.") || t.contains(": _tcp."))
}

#[test]
fn zones_from_args_fallthrough_and_refusal_agree() {
    let coredns = coredns_or_skip!();
    let dir = differ::zone_dir(&[("db.example.org", ZONE)]);
    std::fs::write(
        dir.path().join("db.fall"),
        "@ 60 IN SOA ns hm 1 2 3 4 5\n  60 IN NS ns\nwww 60 IN A 192.0.2.7\n",
    )
    .expect("write zone");
    // In a root block: names outside the file's zone are REFUSED when file
    // is last; with fallthrough, NXDOMAIN goes to the next plugin.
    let corefile = ".:@PORT@ {\n    bind 127.0.0.1\n    file @ZDIR@/db.example.org example.org\n}\n\
                    fall.test:@PORT@ {\n    bind 127.0.0.1\n    file @ZDIR@/db.fall {\n        fallthrough\n    }\n    whoami\n}\n";
    let diff = differential(&coredns, corefile, dir.path());
    let queries = [
        Query::new("www.example.org.", "A"),
        Query::new("example.com.", "A"),
        Query::new("www.fall.test.", "A"),
        Query::new("www.fall.test.", "AAAA"),
        Query::new("nothere.fall.test.", "A"),
        Query::new("example.org.", "AXFR").tcp(),
        Query::new("example.org.", "AXFR"),
    ];
    let mut d = Vec::new();
    for q in &queries {
        for c in diff.query_udp_and_tcp(q) {
            if !c.differences.iter().all(whoami_port) {
                d.push(c.to_string());
            }
        }
    }
    assert!(d.is_empty(), "{} disagreements:\n{}", d.len(), d.join("\n"));
    // The NXDOMAIN did reach whoami.
    let c = diff.query(&Query::new("nothere.fall.test.", "A"));
    assert!(c.to_string().contains("127.0.0.1"), "{c}");
}

/// Replaces `path` with `text` in one step (a reload never sees half a file).
fn replace_file(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

/// Waits until `diff` agrees on `q` and the reference gives `want` in
/// its answer, or times out; the last comparison.
fn settle(diff: &Differential, q: &Query, want: &str, wait: Duration) -> String {
    let end = Instant::now() + wait;
    loop {
        let c = diff.query(q);
        let text = c.to_string();
        if (c.agree() && text.contains(want)) || Instant::now() > end {
            return text;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn reload_takes_a_new_serial_only() {
    let coredns = coredns_or_skip!();
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db.example.org");
    std::fs::write(&db, ZONE).expect("write zone");
    let corefile = "example.org:@PORT@ {\n    bind 127.0.0.1\n    file @ZDIR@/db.example.org {\n        reload 1s\n    }\n}\n";
    let diff = differential(&coredns, corefile, dir.path());
    let q = Query::new("new.example.org.", "A");
    diff.query(&q).assert_agree();
    // Same serial, new record: neither takes it.
    replace_file(&db, &format!("{ZONE}new IN A 192.0.2.99\n"));
    std::thread::sleep(Duration::from_millis(2500));
    let c = diff.query(&q);
    c.assert_agree();
    assert!(c.to_string().contains("NXDOMAIN"), "{c}");
    // A new serial: both serve the record.
    let bumped = ZONE.replace("2024010101", "2024010102");
    replace_file(&db, &format!("{bumped}new IN A 192.0.2.99\n"));
    let text = settle(&diff, &q, "192.0.2.99", Duration::from_secs(6));
    assert!(
        text.contains("agree") && text.contains("192.0.2.99"),
        "{text}"
    );
    // A broken file with a new serial: both keep serving the last zone.
    let broken = ZONE.replace("2024010101", "2024010103");
    replace_file(&db, &format!("{broken}bad IN A 1.2.3\n"));
    std::thread::sleep(Duration::from_millis(2500));
    let c = diff.query(&q);
    c.assert_agree();
    assert!(c.to_string().contains("192.0.2.99"), "{c}");
}

#[test]
fn a_missing_file_is_served_once_it_appears() {
    let coredns = coredns_or_skip!();
    let dir = tempfile::tempdir().expect("tempdir");
    let corefile = "example.org:@PORT@ {\n    bind 127.0.0.1\n    file @ZDIR@/db.example.org {\n        reload 1s\n    }\n}\n";
    let diff = differential(&coredns, corefile, dir.path());
    let q = Query::new("www.example.org.", "A");
    let c = diff.query(&q);
    c.assert_agree();
    assert!(c.to_string().contains("SERVFAIL"), "{c}");
    replace_file(&dir.path().join("db.example.org"), ZONE);
    let text = settle(&diff, &q, "192.0.2.10", Duration::from_secs(10));
    assert!(
        text.contains("agree") && text.contains("192.0.2.10"),
        "{text}"
    );
}

#[test]
fn bad_zone_files_and_arguments_read_as_coredns() {
    let coredns = coredns_or_skip!();
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().display().to_string();
    std::fs::write(dir.path().join("db.ok"), ZONE).expect("write");
    let head = "$ORIGIN example.org.\n@ 3600 IN SOA ns1 admin 1 2 3 4 5\n";
    let bad = [
        ("unknown-type", "foo IN BLAH 1.2.3.4"),
        ("unknown-type-after-ttl", "foo 300 BLAH 1.2.3.4"),
        ("unknown-type-after-both", "foo IN 300 BLAH x"),
        ("bad-a", "foo IN A 1.2.3"),
        ("bad-aaaa", "foo AAAA 1.2.3.4"),
        ("garbage", "foo A 1.2.3.4 extra"),
        ("bad-mx", "foo MX x mail"),
        ("bad-srv", "foo SRV 1 2 x t"),
        ("bad-ttl", "$TTL x"),
    ];
    for (name, line) in bad {
        std::fs::write(dir.path().join(name), format!("{head}{line}\n")).expect("write");
    }
    std::fs::write(
        dir.path().join("nosoa"),
        "$ORIGIN example.org.\nfoo IN A 1.2.3.4\n",
    )
    .expect("write");
    let mut cases: Vec<String> = bad
        .iter()
        .map(|(name, _)| format!("example.org:@P@ {{\n    file {d}/{name}\n}}\n"))
        .collect();
    for c in [
        "example.org:@P@ {\n    file @D@/nosoa\n}\n",
        "example.org:@P@ {\n    file\n}\n",
        "example.org:@P@ {\n    file @D@/missing {\n        reload 0\n    }\n}\n",
        "example.org:@P@ {\n    file @D@/db.ok {\n        reload\n    }\n}\n",
        "example.org:@P@ {\n    file @D@/db.ok {\n        reload 1x\n    }\n}\n",
        "example.org:@P@ {\n    file @D@/db.ok {\n        bogus 1\n    }\n}\n",
    ] {
        cases.push(c.replace("@D@", &d));
    }
    let cases: Vec<&str> = cases.iter().map(String::as_str).collect();
    assert_setup_errors_agree(&coredns, clusterdns(), &cases);
}
