//! *root* against the reference CoreDNS: zone files read by *file* from
//! under the root directory (relative names, `..`, an absolute name
//! beside it) answer the same; a missing root is the same warning, and
//! its zones are served once it appears; bad
//! `root` lines, and *file*'s errors naming the joined path, read the
//! same. Each test skips when the reference binary is not built
//! (`scripts/rig build`), unless `CLUSTERDNS_REQUIRE_RIG=1`.

mod differ;

use std::time::{Duration, Instant};

use clusterdns_test_support::{Query, assert_setup_errors_agree, coredns_or_skip};
use differ::{assert_metrics_agree, clusterdns, differential, disagreements};

const ORG: &str = "$ORIGIN example.org.
@ 3600 IN SOA ns1 hostmaster 2024010101 7200 3600 1209600 300
  3600 IN NS ns1
ns1 IN A 192.0.2.2
www IN A 192.0.2.10
";

const NET: &str = "$ORIGIN example.net.
@ 3600 IN SOA ns1 hostmaster 7 7200 3600 1209600 300
  3600 IN NS ns1
ns1 IN A 198.51.100.2
www IN A 198.51.100.10
";

#[test]
fn file_reads_relative_zone_files_under_root_as_coredns() {
    let coredns = coredns_or_skip!();
    let dir = tempfile::tempdir().expect("tempdir");
    let zones = dir.path().join("zones");
    std::fs::create_dir_all(zones.join("org")).expect("mkdir");
    std::fs::create_dir_all(dir.path().join("net")).expect("mkdir");
    std::fs::write(zones.join("org").join("db"), ORG).expect("write");
    std::fs::write(dir.path().join("net").join("db"), NET).expect("write");
    // example.org below root, example.net beside it through `..`, and a
    // third zone by an absolute name that root does not touch. The root's
    // trailing `/` and the `./` are cleaned away by the join.
    let corefile = "example.org:@PORT@ example.net:@PORT@ example.com:@PORT@ {
    bind 127.0.0.1
    root @ZDIR@/zones/
    file ./org/db example.org
    file ../net/db example.net
    file @ZDIR@/net/db example.com
}
";
    let diff = differential(
        &coredns,
        corefile,
        &[("ZDIR", &dir.path().display().to_string())],
    );
    let mut qs = Vec::new();
    for zone in ["example.org.", "example.net.", "example.com."] {
        for (name, t) in [("", "SOA"), ("", "NS"), ("www.", "A"), ("nope.", "A")] {
            qs.push(Query::new(&format!("{name}{zone}"), t));
        }
    }
    differ::assert_agree_and_served(
        &diff,
        &qs,
        &Query::new("www.example.net.", "A"),
        "198.51.100.10",
    );
}

#[test]
fn root_is_not_a_handler_in_coredns_plugin_enabled() {
    let coredns = coredns_or_skip!();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("db"), ORG).expect("write");
    let corefile = "example.org:@PORT@ {
    bind 127.0.0.1
    prometheus 127.0.0.1:@PORT_METRICS@
    root @ZDIR@
    file db
}
";
    let diff = differential(
        &coredns,
        corefile,
        &[("ZDIR", &dir.path().display().to_string())],
    );
    let d = disagreements(&diff, &[Query::new("www.example.org.", "A")]);
    assert!(d.is_empty(), "{}", d.join("\n"));
    assert_metrics_agree(&diff, &["coredns_plugin_enabled"], "");
}

#[test]
fn a_missing_root_is_a_warning_and_may_appear_later_as_in_coredns() {
    let coredns = coredns_or_skip!();
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("not-yet");
    let corefile = "example.org:@PORT@ {
    bind 127.0.0.1
    root @ROOT@
    file db {
        reload 1s
    }
}
";
    let diff = differential(
        &coredns,
        corefile,
        &[("ROOT", &missing.display().to_string())],
    );
    let want = format!(
        "[WARNING] plugin/root: Root path does not exist: {}",
        missing.display()
    );
    for s in [&diff.reference, &diff.candidate] {
        let log = s.log_all();
        assert!(log.lines().any(|l| l == want), "{}:\n{log}", s.name);
    }
    let www = Query::new("www.example.org.", "A");
    let c = diff.query(&www);
    c.assert_agree();
    assert!(c.to_string().contains("SERVFAIL"), "{c}");
    // The directory and its zone file appear: both serve them at the
    // next reload check.
    std::fs::create_dir(&missing).expect("mkdir");
    std::fs::write(missing.join("db"), ORG).expect("write");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let c = diff.query(&www);
        if c.agree() && c.to_string().contains("192.0.2.10") {
            break;
        }
        assert!(Instant::now() < deadline, "{c}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn root_lines_and_files_under_root_are_refused_as_by_coredns() {
    let coredns = coredns_or_skip!();
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().display().to_string();
    std::fs::write(
        dir.path().join("bad"),
        "$ORIGIN example.org.\n@ 3600 IN SOA ns1 admin 1 2 3 4 5\nfoo IN BLAH 1.2.3.4\n",
    )
    .expect("write");
    let long = format!("/{}", "x".repeat(300));
    let mut cases = vec![
        ".:@P@ {\n    root\n}\n".to_string(),
        ".:@P@ {\n    root a b\n}\n".to_string(),
        // Taken two at a time: the third word is the path.
        format!(".:@P@ {{\n    root a b {d}\n    whoami\n}}\n"),
        ".:@P@ {\n    root {\n        zones\n    }\n}\n".to_string(),
        ".:@P@ {\n    root zones {\n        x\n    }\n}\n".to_string(),
        ".:@P@ {\n    root /etc/passwd/x\n}\n".to_string(),
        format!(".:@P@ {{\n    root {long}\n}}\n"),
        // Only the last root is looked at.
        format!(".:@P@ {{\n    root {d}\n    root /etc/passwd/x\n}}\n"),
        format!(".:@P@ {{\n    root /etc/passwd/x\n    root {d}\n    whoami\n}}\n"),
        // A file, not a directory, is accepted.
        ".:@P@ {\n    root /etc/passwd\n    whoami\n}\n".to_string(),
        // file names the joined path, relative (the servers run in the
        // Corefile's directory here) or absolute, cleaned.
        "example.org:@P@ {\n    root zones/\n    file ./db {\n        reload 0\n    }\n}\n"
            .to_string(),
        format!("example.org:@P@ {{\n    root {d}/sub/..\n    file bad\n}}\n"),
        // An absolute zone file is not joined.
        format!("example.org:@P@ {{\n    root /nonexistent\n    file {d}/bad\n}}\n"),
    ];
    cases.push(".:@P@ {\n    root \"\"\n    whoami\n}\n".to_string());
    let cases: Vec<&str> = cases.iter().map(String::as_str).collect();
    assert_setup_errors_agree(&coredns, clusterdns(), &cases);
}
