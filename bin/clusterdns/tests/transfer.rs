//! *transfer* against the reference CoreDNS: AXFR and IXFR of a *file*
//! zone with the real `dig` and `kdig` from both servers, compared as
//! record sets; refusals (UDP, clients not in `to`, names below a zone);
//! bad arguments refused with the same text. Each test skips when the
//! reference binary is not built (`scripts/rig build`), unless
//! `CLUSTERDNS_REQUIRE_RIG=1`.

mod common;
mod differ;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use clusterdns_test_support::{Differential, Query, assert_setup_errors_agree, coredns_or_skip};
use differ::clusterdns;

const ZONE: &str = r#"$ORIGIN example.org.
$TTL 300
@       3600 IN SOA ns1 hostmaster 2024010101 7200 3600 1209600 300
        3600 IN NS ns1
        IN MX 10 mx1
        IN TXT "v=spf1 -all"
ns1     IN A 192.0.2.2
        IN AAAA 2001:db8::2
www     IN A 192.0.2.10
        IN A 192.0.2.11
alias   IN CNAME www
*.wild  IN A 192.0.2.20
_sip._udp IN SRV 10 60 5060 sip
sip     IN A 192.0.2.50
cafe    IN CAA 0 issue "ca.example.net"
sub     IN NS ns.sub
ns.sub  IN A 192.0.2.53
"#;

/// `ZONE` with `n` more A records, enough for several messages.
fn big_zone(n: usize) -> String {
    let mut z = ZONE.to_string();
    for i in 0..n {
        z.push_str(&format!(
            "host-{i:05}-with-a-longer-name IN A 10.{}.{}.{}\n",
            i >> 16,
            (i >> 8) & 255,
            i & 255
        ));
    }
    z
}

fn differential(coredns: &Path, corefile: &str, dir: &Path) -> Differential {
    differ::differential(coredns, corefile, &[("ZDIR", &dir.display().to_string())])
}

/// The records a client prints for a transfer, whitespace-normalised and
/// sorted, and how many messages it counted (dig's `XFR size` line).
fn transfer(tool: &str, port: u16, args: &[&str]) -> (Vec<String>, String) {
    let mut cmd = Command::new(tool);
    cmd.arg("@127.0.0.1").arg("-p").arg(port.to_string());
    if tool == "dig" {
        cmd.args(["+tries=1", "+time=5"]);
    } else {
        cmd.arg("+timeout=5");
    }
    let out = cmd
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {tool}: {e}"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut records: Vec<String> = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with(';'))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    records.sort();
    (records, text)
}

const COREFILE: &str = "example.org:@PORT@ {\n    bind 127.0.0.1\n    file @ZDIR@/db.example.org\n    transfer {\n        to *\n    }\n}\n";

#[test]
fn axfr_and_ixfr_send_the_same_records() {
    let coredns = coredns_or_skip!();
    let dir = differ::zone_dir(&[("db.example.org", ZONE)]);
    let diff = differential(&coredns, COREFILE, dir.path());
    let (r, c) = (diff.reference.addr.port(), diff.candidate.addr.port());
    for (tool, args) in [
        ("dig", &["example.org", "AXFR"][..]),
        ("dig", &["EXAMPLE.org", "AXFR"][..]),
        ("dig", &["+edns=0", "example.org", "AXFR"][..]),
        ("kdig", &["example.org", "AXFR"][..]),
        // IXFR from an older serial: the whole zone; from the current
        // serial: the SOA alone; kdig speaks IXFR over TCP too.
        ("dig", &["example.org", "IXFR=2024010100"][..]),
        ("dig", &["example.org", "IXFR=2024010101"][..]),
        ("kdig", &["example.org", "IXFR=2024010101"][..]),
    ] {
        let (theirs, ttext) = transfer(tool, r, args);
        let (ours, otext) = transfer(tool, c, args);
        assert!(
            !theirs.is_empty(),
            "{tool} {args:?}: coredns sent nothing:\n{ttext}"
        );
        assert_eq!(
            theirs, ours,
            "{tool} {args:?}\ncoredns:\n{ttext}\nclusterdns:\n{otext}"
        );
    }
    // The full transfer begins and ends with the SOA.
    let (_, text) = transfer("dig", c, &["+onesoa", "example.org", "AXFR"]);
    let first = text
        .lines()
        .find(|l| !l.starts_with(';') && !l.trim().is_empty());
    assert!(first.is_some_and(|l| l.contains("SOA")), "{text}");
}

#[test]
fn a_large_zone_comes_in_several_messages() {
    let coredns = coredns_or_skip!();
    let dir = differ::zone_dir(&[("db.example.org", &big_zone(5000))]);
    let diff = differential(&coredns, COREFILE, dir.path());
    let (theirs, ttext) = transfer("dig", diff.reference.addr.port(), &["example.org", "AXFR"]);
    let (ours, otext) = transfer("dig", diff.candidate.addr.port(), &["example.org", "AXFR"]);
    assert!(
        theirs.len() > 5000,
        "{}",
        ttext.lines().last().unwrap_or("")
    );
    assert_eq!(theirs, ours, "differ");
    // dig's summary: "XFR size: N records (messages M, bytes B)".
    let messages = |t: &str| {
        t.split("messages ")
            .nth(1)
            .and_then(|s| s.split(',').next())
            .and_then(|s| s.trim().parse::<u32>().ok())
            .unwrap_or(0)
    };
    assert!(
        messages(&otext) > 1,
        "{}",
        otext.lines().last().unwrap_or("")
    );
    // Cut where CoreDNS cuts (63,000 bytes of uncompressed records).
    assert_eq!(
        messages(&otext),
        messages(&ttext),
        "{}",
        ttext.lines().last().unwrap_or("")
    );
    let (kours, _) = transfer("kdig", diff.candidate.addr.port(), &["example.org", "AXFR"]);
    assert_eq!(kours, theirs, "kdig differs");
}

#[test]
fn refusals_agree() {
    let coredns = coredns_or_skip!();
    let dir = differ::zone_dir(&[("db.example.org", ZONE)]);
    std::fs::write(
        dir.path().join("db.other"),
        ZONE.replace("example.org.", "other.test."),
    )
    .expect("write zone");
    // example.org to anyone; other.test only to an address that is not ours.
    let corefile = "example.org:@PORT@ {\n    bind 127.0.0.1\n    file @ZDIR@/db.example.org\n    transfer {\n        to *\n    }\n}\n\
                    other.test:@PORT@ {\n    bind 127.0.0.1\n    file @ZDIR@/db.other\n    transfer {\n        to 10.9.9.9 192.0.2.1:5300\n    }\n}\n\
                    notransfer.test:@PORT@ {\n    bind 127.0.0.1\n    file @ZDIR@/db.other notransfer.test\n}\n";
    let diff = differential(&coredns, corefile, dir.path());
    let mut d = Vec::new();
    for q in [
        Query::new("example.org.", "AXFR"),
        Query::new("example.org.", "IXFR"),
        Query::new("example.org.", "AXFR").tcp(),
        // IXFR without the SOA of the client's copy.
        Query::new("example.org.", "IXFR").tcp(),
        Query::new("www.example.org.", "AXFR").tcp(),
        Query::new("other.test.", "AXFR").tcp(),
        Query::new("other.test.", "AXFR"),
        Query::new("notransfer.test.", "AXFR").tcp(),
        Query::new("www.example.org.", "A").tcp(),
    ] {
        let c = diff.query(&q);
        if !c.agree() {
            d.push(c.to_string());
        }
    }
    assert!(d.is_empty(), "{} disagreements:\n{}", d.len(), d.join("\n"));
    let (theirs, _) = transfer("dig", diff.reference.addr.port(), &["other.test", "AXFR"]);
    let (ours, text) = transfer("dig", diff.candidate.addr.port(), &["other.test", "AXFR"]);
    assert_eq!(theirs, ours, "{text}");
    assert!(
        text.contains("REFUSED") || text.contains("failed"),
        "{text}"
    );
}

#[test]
fn bad_arguments_read_as_coredns() {
    let coredns = coredns_or_skip!();
    let cases: Vec<String> = [
        "transfer\n",
        "transfer {\n        to\n    }\n",
        "transfer {\n        to example.com\n    }\n",
        "transfer {\n        to 10.0.0.1:x\n    }\n",
        "transfer {\n        to [::1]\n    }\n",
        "transfer {\n        to example.com:53\n    }\n",
        "transfer {\n        to * \n        bogus 1\n    }\n",
        "transfer {\n        to *\n        source nope\n    }\n",
        "transfer {\n        to *\n        source 10.0.0.1\n        source 10.0.0.2\n    }\n",
        "transfer {\n        to *\n        source\n    }\n",
        "transfer example.org {\n        to * 10.0.0.1 [::1]:53\n        source ::1\n    }\n",
    ]
    .iter()
    .map(|body| format!("example.org:@P@ {{\n    whoami\n    {body}}}\n"))
    .collect();
    let cases: Vec<&str> = cases.iter().map(String::as_str).collect();
    assert_setup_errors_agree(&coredns, clusterdns(), &cases);
}

/// Services of every kind the cluster transfer sends, in namespace `ns`.
fn cluster_objects(ns: &str) -> String {
    let service = |name: &str, spec: &str| common::service_yaml(ns, name, spec);
    [
        service(
            "web",
            "  ports: [{name: http, port: 80, protocol: TCP}, {name: dns, port: 53, protocol: UDP}]\n",
        ),
        service("plain", "  ports: [{port: 8443, protocol: TCP}]\n"),
        common::dual_and_headless_yaml(
            ns,
            "[{name: http, port: 8080, protocol: TCP}, {port: 9090, protocol: TCP}]",
        ),
        common::endpoint_slice_yaml(
            ns,
            "headless",
            "headless-2",
            &[
                ("10.210.1.1", None, true),
                ("10.210.1.2", None, true),
                ("10.210.1.3", None, true),
            ],
            "[{name: metrics, port: 9100, protocol: TCP}]",
        ),
        common::external_name_yaml(ns, "extname", "ext.example.test"),
        common::external_name_yaml(ns, "extip", "192.0.2.9"),
        service(
            "np",
            "  type: NodePort\n  ports: [{name: web, port: 8080, protocol: TCP}]\n",
        ),
    ]
    .join("---\n")
}

/// A transfer's records with the SOA serial masked (each server counts
/// its own changes).
fn masked(records: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = records
        .into_iter()
        .map(|r| {
            let f: Vec<&str> = r.split(' ').collect();
            if f.get(3) == Some(&"SOA") && f.len() == 11 {
                format!("{} SERIAL {}", f[..6].join(" "), f[7..].join(" "))
            } else {
                r
            }
        })
        .collect();
    out.sort();
    out
}

#[test]
fn cluster_local_transfers_as_coredns() {
    let Some(rig) = clusterdns_test_support::Rig::get() else {
        return;
    };
    let ns = rig.namespace("xfr").expect("test namespace");
    rig.apply_yaml(&cluster_objects(ns.name()))
        .expect("create the objects");
    let corefile = format!(
        "cluster.local:@PORT@ {{\n    bind 127.0.0.1\n    kubernetes cluster.local {{\n        kubeconfig @KUBECONFIG@\n        namespaces {}\n    }}\n    transfer {{\n        to *\n    }}\n}}\n",
        ns.name()
    );
    let diff = Differential::new(&rig, &corefile).expect("start both");
    // Both have seen the objects once the headless service answers
    // with all five ready endpoints on both.
    let probe = Query::new(&format!("headless.{}.svc.cluster.local.", ns.name()), "A");
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let c = diff.query(&probe);
        // Each of the five addresses shows once per server.
        if c.agree() && c.to_string().matches("10.210.").count() >= 10 {
            break;
        }
        assert!(Instant::now() < end, "not settled:\n{c}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let (r, c) = (diff.reference.addr.port(), diff.candidate.addr.port());
    let (theirs, ttext) = transfer("dig", r, &["cluster.local", "AXFR"]);
    let (ours, otext) = transfer("dig", c, &["cluster.local", "AXFR"]);
    assert!(theirs.len() > 10, "coredns sent little:\n{ttext}");
    // Every kind of record is there: dual-stack ClusterIPs, named and
    // unnamed ports, per-slice SRV weights of headless endpoints, CNAMEs.
    for want in [
        "IN AAAA fd",
        "SRV 0 33 9100 10-210-1-",
        "SRV 0 50 8080 h0.headless.",
        "CNAME ext.example.test.",
    ] {
        assert!(
            ours.iter().any(|r| r.contains(want)),
            "no {want:?} in\n{otext}"
        );
    }
    assert_eq!(
        masked(theirs),
        masked(ours),
        "coredns:\n{ttext}\nclusterdns:\n{otext}"
    );
    let (kours, _) = transfer("kdig", c, &["cluster.local", "AXFR"]);
    let (ktheirs, _) = transfer("kdig", r, &["cluster.local", "AXFR"]);
    assert_eq!(masked(ktheirs), masked(kours), "kdig differs");
    // An IXFR from each server's own serial: the SOA alone from both.
    let serial_of = |records: &[String]| {
        records
            .iter()
            .find(|r| r.contains(" SOA "))
            .and_then(|r| r.split(' ').nth(6).map(str::to_string))
            .unwrap_or_default()
    };
    let (rs, _) = transfer("dig", r, &["cluster.local", "AXFR"]);
    let (cs, _) = transfer("dig", c, &["cluster.local", "AXFR"]);
    let (theirs, ttext) = transfer(
        "dig",
        r,
        &["cluster.local", &format!("IXFR={}", serial_of(&rs))],
    );
    let (ours, otext) = transfer(
        "dig",
        c,
        &["cluster.local", &format!("IXFR={}", serial_of(&cs))],
    );
    assert_eq!(theirs.len(), 1, "{ttext}");
    assert_eq!(
        masked(theirs),
        masked(ours),
        "coredns:\n{ttext}\nclusterdns:\n{otext}"
    );
    // An AXFR of a name in the zone is served as CoreDNS serves it too.
    let name = format!("{}.svc.cluster.local", ns.name());
    let (theirs, ttext) = transfer("dig", r, &[&name, "AXFR"]);
    let (ours, otext) = transfer("dig", c, &[&name, "AXFR"]);
    assert_eq!(
        masked(theirs),
        masked(ours),
        "coredns:\n{ttext}\nclusterdns:\n{otext}"
    );
}
