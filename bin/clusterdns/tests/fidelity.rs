//! Operational fidelity against the reference CoreDNS (issue 20): the
//! same Corefile and the same queries to both, then what operators see
//! compared: query log lines field by field, metric values and labels,
//! process log lines, admin HTTP, `-plugins`/`-version`, Corefile errors.
//! Each test skips when the reference binary is not built (`scripts/rig
//! build`), unless `CLUSTERDNS_REQUIRE_RIG=1`.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use clusterdns_test_support::{
    Query, RunningServer, ServerSpec, compare_log_lines, compare_metrics, coredns_or_skip,
    log_lines,
};

/// Starts the reference and clusterdns on the same Corefile template.
fn both(coredns: &Path, corefile: &str, vars: &[(&str, &str)]) -> (RunningServer, RunningServer) {
    let mut r = ServerSpec::coredns_at(coredns, corefile);
    let mut c = ServerSpec::clusterdns_at(common::binary(), corefile);
    for (k, v) in vars {
        r = r.var(k, v);
        c = c.var(k, v);
    }
    let r = RunningServer::start(&r).expect("start coredns");
    let c = RunningServer::start(&c).expect("start clusterdns");
    (r, c)
}

/// Sends every query to `s`, one after the other.
fn send(s: &RunningServer, queries: &[Query]) {
    for q in queries {
        let _ = s.query(q, Duration::from_secs(3));
    }
}

/// Waits until `s` has logged `n` query lines; its output then.
fn logged(s: &RunningServer, n: usize) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let out = s.log_all();
        if log_lines(&out).len() >= n || Instant::now() > deadline {
            return out;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn hosts_queries() -> Vec<Query> {
    let mut qs = Vec::new();
    for q in [
        Query::new("a.test", "A").edns(1232),
        Query::new("two.test", "A").edns(1232),
        Query::new("two.test", "A"),
        Query::new("a.test", "AAAA").edns(1232),
        Query::new("missing.test", "A").edns(1232).dnssec_ok(),
        Query::new("1.2.1.10.in-addr.arpa", "PTR"),
    ] {
        qs.push(q.clone());
        qs.push(q.tcp());
    }
    qs
}

const HOSTS: &str = "    hosts {
        10.1.2.3 a.test
        10.1.2.1 two.test
        10.1.2.2 two.test
    }
";

#[test]
fn query_log_lines_agree_field_by_field() {
    let coredns = coredns_or_skip!();
    let corefile = format!(".:@PORT@ {{\n    bind 127.0.0.1\n    log\n{HOSTS}}}\n");
    let (r, c) = both(&coredns, &corefile, &[]);
    let qs = hosts_queries();
    send(&r, &qs);
    send(&c, &qs);
    let (lr, lc) = (
        log_lines(&logged(&r, qs.len())),
        log_lines(&logged(&c, qs.len())),
    );
    assert_eq!(lr.len(), qs.len(), "{}", r.log_all());
    let d = compare_log_lines(&lr, &lc, false);
    assert!(d.is_empty(), "{}", d.join("\n"));
}

/// The Corefiles of the metrics comparison: which plugin comes right
/// after *prometheus* decides the `plugin` label.
const METRICS_COREFILES: &[&str] = &[
    "prometheus 127.0.0.1:@PORT_METRICS@\n    errors\n    log\n",
    "prometheus 127.0.0.1:@PORT_METRICS@\n    log\n",
    "prometheus 127.0.0.1:@PORT_METRICS@\n",
    "prometheus 127.0.0.1:@PORT_METRICS@\n    cache\n",
];

#[test]
fn dns_metrics_agree_in_values_and_labels() {
    let coredns = coredns_or_skip!();
    let qs = hosts_queries();
    for head in METRICS_COREFILES {
        let corefile = format!(
            ".:@PORT@ {{\n    bind 127.0.0.1\n    {head}{HOSTS}}}\nexample.org:@PORT@ {{\n    bind 127.0.0.1\n    prometheus 127.0.0.1:@PORT_METRICS@\n}}\n"
        );
        let (r, c) = both(&coredns, &corefile, &[]);
        let mut all = qs.clone();
        // A zone whose chain has nothing after prometheus: SERVFAIL
        // written by the server, plugin "".
        all.push(Query::new("www.example.org", "A"));
        send(&r, &all);
        send(&c, &all);
        let d = compare_metrics(
            &r.metrics(),
            r.addr.port(),
            &c.metrics(),
            c.addr.port(),
            &["coredns_dns_"],
        );
        assert!(d.is_empty(), "{head}:\n{}", d.join("\n"));
    }
}

/// An upstream both servers forward to: the reference CoreDNS with
/// *hosts* (names that compress, a CNAME-free NODATA, SERVFAIL for names
/// it does not know).
fn upstream(coredns: &Path) -> RunningServer {
    let corefile = format!(".:@PORT@ {{\n    bind 127.0.0.1\n{HOSTS}}}\n");
    RunningServer::start(&ServerSpec::coredns_at(coredns, &corefile).named("upstream"))
        .expect("start the upstream")
}

#[test]
fn forwarded_and_cached_replies_agree_in_logs_and_metrics() {
    let coredns = coredns_or_skip!();
    let up = upstream(&coredns);
    let up_port = up.addr.port().to_string();
    for head in ["log\n    cache\n", "errors\n    log\n", "cache\n    log\n"] {
        let corefile = format!(
            ".:@PORT@ {{\n    bind 127.0.0.1\n    prometheus 127.0.0.1:@PORT_METRICS@\n    {head}    forward . 127.0.0.1:@UP@\n}}\n"
        );
        let (r, c) = both(&coredns, &corefile, &[("UP", &up_port)]);
        // Twice: the second round comes from the cache where there is one.
        let mut qs = hosts_queries();
        qs.extend(hosts_queries());
        send(&r, &qs);
        send(&c, &qs);
        let (lr, lc) = (
            log_lines(&logged(&r, qs.len())),
            log_lines(&logged(&c, qs.len())),
        );
        let d = compare_log_lines(&lr, &lc, false);
        assert!(d.is_empty(), "{head}:\n{}", d.join("\n"));
        let d = compare_metrics(
            &r.metrics(),
            r.addr.port(),
            &c.metrics(),
            c.addr.port(),
            &["coredns_dns_", "coredns_cache_"],
        );
        assert!(d.is_empty(), "{head}:\n{}", d.join("\n"));
    }
}

/// The value of every series of `name` in `text`, summed.
fn total(text: &str, name: &str) -> f64 {
    clusterdns_test_support::metric_samples(text)
        .into_iter()
        .filter(|((n, _), _)| n == name)
        .map(|(_, v)| v)
        .sum()
}

#[test]
fn forward_with_every_upstream_down_tries_once_per_query() {
    let coredns = coredns_or_skip!();
    // Two ports nothing listens on (bound for a moment, then let go).
    let dead: Vec<String> = (0..2)
        .map(|_| clusterdns_test_support::free_port().unwrap().to_string())
        .collect();
    let corefile = ".:@PORT@ {
    bind 127.0.0.1
    prometheus 127.0.0.1:@PORT_METRICS@
    forward . 127.0.0.1:@A@ 127.0.0.1:@B@ {
        health_check 0.5s
    }
}
";
    let (r, c) = both(&coredns, corefile, &[("A", &dead[0]), ("B", &dead[1])]);
    let q = [Query::new("x.test", "A")];
    // Until both are marked down: enough failed queries and health checks.
    for _ in 0..3 {
        send(&r, &q);
        send(&c, &q);
    }
    std::thread::sleep(Duration::from_millis(1500));
    let names = [
        "coredns_forward_healthcheck_broken_total",
        "coredns_proxy_conn_cache_misses_total",
    ];
    let before: Vec<(f64, f64)> = names
        .iter()
        .map(|n| (total(&r.metrics(), n), total(&c.metrics(), n)))
        .collect();
    for _ in 0..5 {
        send(&r, &q);
        send(&c, &q);
    }
    for (n, (rb, cb)) in names.iter().zip(before) {
        let (ra, ca) = (total(&r.metrics(), n), total(&c.metrics(), n));
        assert_eq!(ra - rb, 5.0, "{n}: the reference tries once per query");
        assert_eq!(
            ca - cb,
            ra - rb,
            "{n}: reference +{}, clusterdns +{}",
            ra - rb,
            ca - cb
        );
    }
}

/// The process log lines (`[LEVEL] …`, not query lines) of an output,
/// with reload's SHA512 masked: both hash their Corefile differently
/// (reload README, Differences).
fn process_log(out: &str) -> Vec<String> {
    clusterdns_test_support::process_lines(out)
        .into_iter()
        .filter(|l| l.starts_with('['))
        .map(|l| match l.split_once("SHA512 = ") {
            Some((head, _)) => format!("{head}SHA512 = <hash>"),
            None => l,
        })
        .collect()
}

/// Waits until `s`'s output has `n` process log lines.
fn process_logged(s: &RunningServer, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lines = process_log(&s.log_all());
        if lines.len() >= n || Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn process_log_lines_and_reload_metric_agree() {
    let coredns = coredns_or_skip!();
    let corefile = ".:@PORT@ {
    bind 127.0.0.1
    reload 2s 1s
    prometheus 127.0.0.1:@PORT_METRICS@
    whoami
}
";
    let (mut r, mut c) = both(&coredns, corefile, &[]);
    let version = |s: &RunningServer| {
        clusterdns_test_support::metric_samples(&s.metrics())
            .keys()
            .any(|(n, _)| n == "coredns_reload_version_info")
    };
    // Not exported before the first reload.
    assert_eq!((version(&r), version(&c)), (false, false));
    for s in [&r, &c] {
        let path = s.dir().join("Corefile");
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("    whoami\n", "    whoami\n    log\n")).unwrap();
    }
    let (pr, pc) = (process_logged(&r, 4), process_logged(&c, 4));
    assert_eq!(pr.len(), 4, "{}", r.log_all());
    assert_eq!(pc, pr, "after a reload");
    assert_eq!((version(&r), version(&c)), (true, true));
    for s in [&r, &c] {
        s.signal("USR1").unwrap();
    }
    let (pr, pc) = (process_logged(&r, 7), process_logged(&c, 7));
    assert_eq!(pc, pr, "after SIGUSR1");
    stop_both(&mut r, &mut c, "TERM");

    // SIGINT.
    let (mut r, mut c) = both(&coredns, corefile, &[]);
    stop_both(&mut r, &mut c, "INT");
}

/// Sends `sig` to both servers: both exit, having logged the same.
fn stop_both(r: &mut RunningServer, c: &mut RunningServer, sig: &str) {
    for s in [&*r, &*c] {
        s.signal(sig).expect("signal");
    }
    assert!(r.wait_exit(Duration::from_secs(10)).is_some());
    assert!(c.wait_exit(Duration::from_secs(10)).is_some());
    assert_eq!(
        process_log(&c.log_all()),
        process_log(&r.log_all()),
        "after SIG{sig}"
    );
}

#[test]
fn blank_corefile_serves_the_default_server() {
    let coredns = coredns_or_skip!();
    for text in ["", "# only a comment\n\n   # another\n"] {
        let args = ["-conf", "@COREFILE@", "-dns.port", "@PORT@"].map(String::from);
        let mut r = ServerSpec::coredns_at(&coredns, text);
        let mut c = ServerSpec::clusterdns_at(common::binary(), text);
        r.args = args.to_vec();
        c.args = args.to_vec();
        let r = RunningServer::start(&r).expect("coredns serves");
        let c = RunningServer::start(&c).expect("clusterdns serves");
        let qs = [
            Query::new("example.org", "A"),
            Query::new("example.org", "A").tcp(),
        ];
        send(&r, &qs);
        send(&c, &qs);
        let (lr, lc) = (log_lines(&logged(&r, 2)), log_lines(&logged(&c, 2)));
        assert_eq!(lr.len(), 2, "{text:?}: {}", r.log_all());
        let d = compare_log_lines(&lr, &lc, false);
        assert!(d.is_empty(), "{text:?}:\n{}", d.join("\n"));
    }
}

#[test]
fn plugins_version_and_usage_output() {
    let coredns = coredns_or_skip!();
    let run = |p: &Path, a: &str| clusterdns_test_support::run(p, &[a]).expect("runs");
    // -plugins: the same layout, every plugin of ours one CoreDNS has.
    let (r, c) = (run(&coredns, "-plugins"), run(common::binary(), "-plugins"));
    assert!(
        r.stdout.ends_with("\n\n") && c.stdout.ends_with("\n\n"),
        "{c:?}"
    );
    let theirs: Vec<&str> = r.stdout.lines().filter(|l| !l.is_empty()).collect();
    let ours: Vec<&str> = c.stdout.lines().filter(|l| !l.is_empty()).collect();
    let mut sorted = ours.clone();
    sorted.sort_unstable();
    assert_eq!(ours, sorted, "sorted");
    for p in &ours {
        assert!(
            theirs.contains(p),
            "{p} is not a CoreDNS plugin: {}",
            c.stdout
        );
    }
    // -version: NAME-VERSION, then OS/GOARCH, toolchain, commit.
    let (r, c) = (run(&coredns, "-version"), run(common::binary(), "-version"));
    let (rl, cl): (Vec<&str>, Vec<&str>) = (r.stdout.lines().collect(), c.stdout.lines().collect());
    assert_eq!(rl.len(), cl.len(), "{r:?} {c:?}");
    assert!(cl[0].starts_with("clusterdns-") && rl[0].starts_with("CoreDNS-"));
    let platform = |l: &str| l.split(',').next().unwrap_or("").to_string();
    assert_eq!(platform(cl[1]), platform(rl[1]));
    assert_eq!(cl[1].matches(", ").count(), rl[1].matches(", ").count());
    // -help: Go's flag usage, the program's path in the first line.
    let (r, c) = (run(&coredns, "-help"), run(common::binary(), "-help"));
    assert_eq!(
        c.stderr
            .replace(&common::binary().display().to_string(), "PROGRAM"),
        r.stderr.replace(&coredns.display().to_string(), "PROGRAM")
    );
    assert_eq!(c.code, r.code);
}

#[test]
fn admin_http_statuses_and_headers_agree() {
    use clusterdns_test_support::{HttpResponse, http_request};
    let coredns = coredns_or_skip!();
    let corefile = ".:@PORT@ {
    bind 127.0.0.1
    health 127.0.0.1:@PORT_HEALTH@ {
        lameduck 2s
    }
    ready 127.0.0.1:@PORT_READY@
    prometheus 127.0.0.1:@PORT_METRICS@
    whoami
}
";
    let (r, c) = both(&coredns, corefile, &[]);
    let at = |s: &RunningServer, port: &str| {
        std::net::SocketAddr::from(([127, 0, 0, 1], s.port(port).expect("port")))
    };
    // The headers a client acts on; Date only for its presence.
    let shape = |h: &HttpResponse| {
        let mut v: Vec<String> = h
            .headers
            .iter()
            .filter(|(k, _)| k != "content-length" || h.header("content-encoding").is_none())
            .map(|(k, v)| match k.as_str() {
                "date" => "date".to_string(),
                // The metrics text differs; its length does too.
                "content-length"
                    if h.header("content-type")
                        .is_some_and(|t| t.contains("version=0.0.4")) =>
                {
                    k.clone()
                }
                _ => format!("{k}: {v}"),
            })
            .collect();
        v.sort();
        (h.status, v)
    };
    for (port, path) in [
        ("PORT_HEALTH", "/health"),
        ("PORT_READY", "/ready"),
        ("PORT_METRICS", "/metrics"),
        ("PORT_HEALTH", "/nope"),
    ] {
        for method in ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS"] {
            for headers in [
                &[][..],
                &[("Connection", "close")][..],
                &[("Accept-Encoding", "gzip")][..],
            ] {
                let a = http_request(at(&r, port), method, path, headers);
                let b = http_request(at(&c, port), method, path, headers);
                assert_ne!(a.status, 0, "{method} {path}: no answer from the reference");
                assert_eq!(shape(&b), shape(&a), "{method} {path} {headers:?}");
                if a.header("content-encoding") == Some("gzip") && method != "HEAD" {
                    assert!(
                        b.body.starts_with(&[0x1f, 0x8b]),
                        "{method} {path}: not gzip"
                    );
                }
                if path != "/metrics" {
                    assert_eq!(b.body, a.body, "{method} {path}");
                }
            }
        }
    }
    // Lameduck: ready's listener is gone at once, health still answers.
    for s in [&r, &c] {
        s.signal("TERM").unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    for s in [&r, &c] {
        let ready = http_request(at(s, "PORT_READY"), "GET", "/ready", &[]);
        assert_eq!(
            ready.status, 0,
            "{}: /ready answered during lameduck",
            s.name
        );
        let health = http_request(at(s, "PORT_HEALTH"), "GET", "/health", &[]);
        assert_eq!(health.status, 200, "{}: /health during lameduck", s.name);
    }
}

#[test]
fn other_classes_through_cache_and_forward_agree() {
    use clusterdns_test_support::{Differential, TtlMode};
    let coredns = coredns_or_skip!();
    // An upstream that answers CH: chaos (TTL 0) and a template (TTL 60).
    let up = RunningServer::start(
        &ServerSpec::coredns_at(
            &coredns,
            ".:@PORT@ {\n    bind 127.0.0.1\n    chaos clusterdns-test\n    template CH A example.org {\n        answer \"{{ .Name }} 60 CH A 10.0.0.1\"\n    }\n    template HS A example.org {\n        answer \"{{ .Name }} 60 HS A 10.0.0.2\"\n    }\n    template CH A example.net {\n        answer \"{{ .Name }} 60 IN A 10.0.0.3\"\n    }\n    template IN A chain.example {\n        answer \"{{ .Name }} 60 IN CNAME elsewhere.example.\"\n    }\n}\n",
        )
        .named("upstream"),
    )
    .expect("upstream");
    let up_port = up.addr.port().to_string();
    let corefile =
        ".:@PORT@ {\n    bind 127.0.0.1\n    cache 30\n    forward . 127.0.0.1:@UP@\n}\n";
    let diff = Differential::between(
        None,
        ServerSpec::coredns_at(&coredns, corefile).var("UP", &up_port),
        ServerSpec::clusterdns_at(common::binary(), corefile).var("UP", &up_port),
    )
    .expect("start both")
    .with_ttl(TtlMode::Exact);
    for round in 0..2 {
        for q in [
            Query::new("version.bind", "TXT").class("CH"),
            Query::new("authors.bind", "TXT").class("CH"),
            Query::new("example.org", "A").class("CH"),
            Query::new("example.org", "A").class("HS"),
            // Records of another class than the question's.
            Query::new("example.net", "A").class("CH"),
            // A CNAME chain that ends without an A: not an answer.
            Query::new("chain.example", "A"),
        ] {
            let c = diff.query(&q);
            assert!(c.agree(), "round {round}: {c}");
        }
        std::thread::sleep(Duration::from_millis(1100));
    }
}

/// A raw query: header flags, question `example.org. A IN`, then
/// `additional` (already encoded records) with ARCOUNT `arcount`.
fn raw(flags: u16, additional: &[u8], arcount: u16) -> Vec<u8> {
    let mut m = vec![0x12, 0x34];
    m.extend_from_slice(&flags.to_be_bytes());
    m.extend_from_slice(&[0, 1, 0, 0, 0, 0]);
    m.extend_from_slice(&arcount.to_be_bytes());
    m.extend_from_slice(b"\x07example\x03org\x00\x00\x01\x00\x01");
    m.extend_from_slice(additional);
    m
}

/// An OPT record: owner (wire), payload size, version, DO.
fn opt(owner: &[u8], size: u16, version: u8, do_bit: bool) -> Vec<u8> {
    let mut o = owner.to_vec();
    o.extend_from_slice(&41u16.to_be_bytes());
    o.extend_from_slice(&size.to_be_bytes());
    o.extend_from_slice(&[0, version, if do_bit { 0x80 } else { 0 }, 0, 0, 0]);
    o
}

#[test]
fn odd_wire_input_agrees_or_is_listed() {
    use clusterdns_test_support::Transport;
    let coredns = coredns_or_skip!();
    let corefile =
        format!(".:@PORT@ {{\n    bind 127.0.0.1\n{HOSTS}}}\n").replace("a.test", "example.org");
    let diff = common::differential(&coredns, &corefile);
    let rd_ad_cd = 0x0100 | 0x0020 | 0x0010;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "unknown opcode with AD and CD",
            raw((5 << 11) | rd_ad_cd, &[], 0),
        ),
        ("opcode 3 with AD and CD", raw((3 << 11) | rd_ad_cd, &[], 0)),
        ("NOTIFY with RD", raw((4 << 11) | 0x0100, &[], 0)),
        (
            "EDNS version 1 with DO",
            raw(0x0100, &opt(b"\x00", 1232, 1, true), 1),
        ),
        ("no question, AD and CD", {
            let mut m = raw(rd_ad_cd, &[], 0);
            m[5] = 0;
            m.truncate(12);
            m
        }),
    ];
    let mut failed = Vec::new();
    for (name, msg) in &cases {
        let c = diff.query_raw(msg, Transport::Udp);
        if !c.agree() {
            failed.push(format!("{name}:\n{c}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    // Listed differences (README, Differences from CoreDNS): RFC 6891
    // §6.1.1 makes these FORMERR; CoreDNS answers them.
    let listed: Vec<(&str, Vec<u8>)> = vec![
        ("two OPT records", {
            let mut a = opt(b"\x00", 1232, 0, false);
            a.extend_from_slice(&opt(b"\x00", 4096, 0, true));
            raw(0x0100, &a, 2)
        }),
        (
            "OPT with a non-root owner",
            raw(0x0100, &opt(b"\x01a\x00", 1232, 0, false), 1),
        ),
    ];
    for (name, msg) in &listed {
        let c = diff.query_raw(msg, Transport::Udp);
        let rcode = |o: &clusterdns_test_support::Outcome| o.response().map(|r| r.rcode_name());
        assert_eq!(
            rcode(&c.reference).as_deref(),
            Some("NOERROR"),
            "{name}:\n{c}"
        );
        assert_eq!(
            rcode(&c.candidate).as_deref(),
            Some("FORMERR"),
            "{name}:\n{c}"
        );
    }
}

#[test]
fn corefile_errors_read_as_coredns_prints_them() {
    use clusterdns_test_support::{error_line, run_corefile, without_location};
    let coredns = coredns_or_skip!();
    // Refused by both with the same text, or started by both.
    let cases = [
        ".:@P@ {\n    whoami\n",
        ".:@P@ {\n    log {\n        class all\n",
        "a,\n",
        ".:@P@ {\n    whoami {\n        bogus\n    }\n}\n",
        ".:99999 {\n    whoami\n}\n",
        ".:@P@ {\n    nosuch\n}\n",
        ".:@P@ {\n    whoami }\n",
        ".:@P@ {\n    cache {\n        bogus\n    }\n}\n",
        ".:@P@ {\n    cache 30 {\n        prefetch x\n    }\n}\n",
        ".:@P@ {\n    cache 30 {\n        prefetch 0\n    }\n}\n",
        ".:@P@ {\n    cache abc\n}\n",
        ".:@P@ {\n    forward .\n}\n",
        ".:@P@ {\n    forward . 127.0.0.1 {\n        max_fails x\n    }\n}\n",
        ".:@P@ {\n    forward . 127.0.0.1 {\n        bogus\n    }\n}\n",
        ".:@P@ {\n    health {\n        bogus\n    }\n}\n",
        ".:@P@ {\n    reload 1s\n}\n",
        ".:@P@ {\n    errors {\n        consolidate x y\n    }\n}\n",
        ".:@P@ {\n    loadbalance foo\n}\n",
        ".:@P@ {\n    log {\n        class bad\n    }\n}\n",
        ".:@P@ {\n    bind nosuchif\n    whoami\n}\n",
        ".:@P@ {\n    whoami\n    whoami\n}\n",
        ".:@P@ {\n    prometheus 127.0.0.1:abc\n    whoami\n}\n",
        "foo_bar.example.:@P@ {\n    whoami\n}\n",
    ];
    let mut failed = Vec::new();
    for case in cases {
        let port = clusterdns_test_support::free_port().unwrap().to_string();
        let text = case.replace("@P@", &port);
        let wait = Duration::from_millis(1500);
        let theirs = run_corefile(&coredns, &text, wait).expect("run coredns");
        let port = clusterdns_test_support::free_port().unwrap().to_string();
        let text = case.replace("@P@", &port);
        let ours = run_corefile(common::binary(), &text, wait).expect("run clusterdns");
        match (theirs, ours) {
            (None, None) => {}
            (Some(t), Some(o)) => {
                let (t, o) = (error_line(&t), error_line(&o));
                let o = if t.contains(" - ") {
                    o
                } else {
                    without_location(&o)
                };
                if t != o {
                    failed.push(format!("{case:?}\n  coredns:    {t}\n  clusterdns: {o}"));
                }
            }
            (t, o) => failed.push(format!(
                "{case:?}\n  coredns: {}\n  clusterdns: {}",
                t.map_or("started".into(), |t| error_line(&t)),
                o.map_or("started".into(), |o| error_line(&o))
            )),
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[test]
fn start_up_lines_agree() {
    let coredns = coredns_or_skip!();
    let corefile = "foo_bar.example.:@PORT@ {\n    bind 127.0.0.1\n    whoami\n}\nexample.org:@PORT@ {\n    bind 127.0.0.1\n    whoami\n}\n";
    let (r, c) = both(&coredns, corefile, &[]);
    // The listener lines and warnings; not Go's noise or the version lines.
    let lines = |s: &RunningServer| -> Vec<String> {
        let port = s.addr.port().to_string();
        let mut v: Vec<String> = clusterdns_test_support::process_lines(&s.log_all())
            .into_iter()
            .filter(|l| {
                !l.starts_with("maxprocs:")
                    && !l.starts_with("CoreDNS-")
                    && !l.starts_with("clusterdns-")
                    && !l.starts_with("linux/")
            })
            .map(|l| l.replace(&port, "PORT"))
            .collect();
        v.sort();
        v
    };
    assert_eq!(lines(&c), lines(&r));
}
