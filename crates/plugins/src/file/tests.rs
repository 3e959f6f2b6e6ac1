//! Unit tests of *file*: setup errors and the lookup on a small zone.
//! The answers are checked against CoreDNS in bin/clusterdns/tests/file.rs.

use std::sync::Arc;

use clusterdns_contract::{Plugin, testing};
use clusterdns_wire::{Rcode, Rtype};

use super::DEF;
use crate::testutil::{run, setup_in};

const ZONE: &str = "$ORIGIN example.org.
@ 3600 IN SOA ns1 admin 2024010101 7200 3600 1209600 300
  3600 IN NS ns1
ns1 IN A 192.0.2.1
www IN A 192.0.2.10
alias IN CNAME www
*.wild IN A 192.0.2.20
a.b.c IN A 192.0.2.30
mail IN MX 10 mx1
mx1 IN A 192.0.2.25
sub IN NS ns.sub
ns.sub IN A 192.0.2.53
";

fn plugins(dir: &tempfile::TempDir) -> Vec<Arc<dyn Plugin>> {
    std::fs::write(dir.path().join("db"), ZONE).unwrap();
    setup_in(DEF, "example.org {\n file db\n}\n", dir.path())
        .unwrap()
        .plugins
}

fn ask(p: &[Arc<dyn Plugin>], name: &str, t: Rtype) -> testing::Reply {
    run(p, &testing::query(name, t))
}

#[test]
fn answers_nxdomain_nodata_wildcards_cnames_and_referrals() {
    let dir = tempfile::tempdir().unwrap();
    let p = plugins(&dir);
    let r = ask(&p, "www.example.org.", Rtype::A);
    assert_eq!(r.answer, ["www.example.org.\t3600\tIN\tA\t192.0.2.10"]);
    assert!(r.header.aa());
    assert_eq!(
        r.authority,
        ["example.org.\t3600\tIN\tNS\tns1.example.org."]
    );

    let r = ask(&p, "nope.example.org.", Rtype::A);
    assert_eq!(r.rcode, Rcode::NXDOMAIN);
    assert!(r.authority[0].contains("SOA"));

    let r = ask(&p, "www.example.org.", Rtype::AAAA);
    assert_eq!((r.rcode, r.answer.len()), (Rcode::NOERROR, 0));
    assert!(r.authority[0].contains("SOA"));

    // An empty non-terminal.
    let r = ask(&p, "b.c.example.org.", Rtype::A);
    assert_eq!((r.rcode, r.answer.len()), (Rcode::NOERROR, 0));

    let r = ask(&p, "x.wild.example.org.", Rtype::A);
    assert_eq!(r.answer, ["x.wild.example.org.\t3600\tIN\tA\t192.0.2.20"]);

    let r = ask(&p, "alias.example.org.", Rtype::A);
    assert_eq!(r.answer.len(), 2, "{r:?}");

    let r = ask(&p, "mail.example.org.", Rtype::MX);
    assert_eq!(r.additional, ["mx1.example.org.\t3600\tIN\tA\t192.0.2.25"]);

    let r = ask(&p, "deep.sub.example.org.", Rtype::A);
    assert!(!r.header.aa());
    assert_eq!(
        r.authority,
        ["sub.example.org.\t3600\tIN\tNS\tns.sub.example.org."]
    );
    assert_eq!(
        r.additional,
        ["ns.sub.example.org.\t3600\tIN\tA\t192.0.2.53"]
    );
}

#[test]
fn bad_files_and_options() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("db"), ZONE).unwrap();
    std::fs::write(
        dir.path().join("bad"),
        "@ SOA a b 1 2 3 4 5\nfoo IN BLAH x\n",
    )
    .unwrap();
    let err = |c: &str| match setup_in(DEF, c, dir.path()) {
        Ok(_) => panic!("{c} set up"),
        Err(e) => (e.line, e.msg),
    };
    assert_eq!(
        err("example.org {\n file bad\n}\n"),
        (
            2,
            "failed to parse file \"bad\" for origin example.org. with error bad: dns: not a TTL: \"BLAH\" at line: 2:12"
                .into()
        )
    );
    assert_eq!(
        err("example.org {\n file missing {\n  reload 0\n }\n}\n").1,
        "open missing: no such file or directory"
    );
    assert_eq!(
        err("example.org {\n file db {\n  reload\n }\n}\n").1,
        "reload duration value is expected"
    );
    assert_eq!(
        err("example.org {\n file db {\n  bogus\n }\n}\n"),
        (3, "unknown property 'bogus'".into())
    );
    // Missing with reload on: a warning, and SERVFAIL until it appears.
    let p = setup_in(DEF, "example.org {\n file missing\n}\n", dir.path())
        .unwrap()
        .plugins;
    assert_eq!(ask(&p, "example.org.", Rtype::SOA).rcode, Rcode::SERVFAIL);
}

#[test]
fn root_sets_where_relative_zone_files_are_read_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let zones = dir.path().join("zones");
    std::fs::create_dir(&zones).unwrap();
    std::fs::write(zones.join("db"), ZONE).unwrap();
    std::fs::write(zones.join("bad"), "@ SOA a b 1 2 3 4 5\nfoo IN BLAH x\n").unwrap();
    let defs = [crate::root::DEF, DEF];
    let set_up = |c: &str| crate::testutil::setup_all_in(&defs, c, dir.path());
    let www = |c: &str| {
        let p = set_up(c).unwrap().plugins;
        let r = ask(&p, "www.example.org.", Rtype::A);
        (r.rcode, r.answer.len())
    };
    // A relative root under the Corefile's directory, an absolute one, and
    // `root` written after `file`: the registry's order sets it first.
    let abs = zones.display().to_string();
    for c in [
        "example.org {\n root zones\n file db\n}\n".to_string(),
        "example.org {\n root ./zones/\n file ./db\n}\n".to_string(),
        format!("example.org {{\n root {abs}\n file db\n}}\n"),
        "example.org {\n file db\n root zones\n}\n".to_string(),
        // An absolute zone file does not go under root.
        format!("example.org {{\n root /nonexistent\n file {abs}/db\n}}\n"),
        // An empty root joins nothing.
        "example.org {\n root \"\"\n file zones/db\n}\n".to_string(),
    ] {
        assert_eq!(www(&c), (Rcode::NOERROR, 1), "{c}");
    }
    // Messages name the joined, cleaned path, as CoreDNS's do.
    let err = |c: &str| match set_up(c) {
        Ok(_) => panic!("{c} set up"),
        Err(e) => (e.line, e.msg),
    };
    assert_eq!(
        err("example.org {\n root zones/\n file ./missing {\n  reload 0\n }\n}\n").1,
        "open zones/missing: no such file or directory"
    );
    assert_eq!(
        err("example.org {\n root zones/sub/..\n file bad\n}\n"),
        (
            3,
            "failed to parse file \"zones/bad\" for origin example.org. with error zones/bad: dns: not a TTL: \"BLAH\" at line: 2:12"
                .into()
        )
    );
    // Without root, the Corefile's directory as before: `db` is not there.
    let p = set_up("example.org {\n file db\n}\n").unwrap().plugins;
    assert_eq!(ask(&p, "www.example.org.", Rtype::A).rcode, Rcode::SERVFAIL);
}
