//! The *timeouts* and *debug* plugins against the reference CoreDNS, on
//! real sockets: an idle TCP connection is closed after the configured
//! idle time, a silent one after the read time, one that carried
//! `maxtcpqueries` queries right after the last reply; bad arguments are
//! refused with the same text; *debug* prints the same `[DEBUG]` lines.
//! Timing is measured with slack (the two shared cores are busy). Skips
//! when the reference binary is not built, unless `CLUSTERDNS_REQUIRE_RIG=1`.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use clusterdns_test_support::{Query, RunningServer, ServerSpec, coredns_or_skip, log_lines};

/// Both servers on `corefile`: the reference, then ours.
fn both(coredns: &Path, corefile: &str) -> [RunningServer; 2] {
    [
        RunningServer::start(&ServerSpec::coredns_at(coredns, corefile)).expect("coredns"),
        RunningServer::start(&ServerSpec::clusterdns_at(common::binary(), corefile))
            .expect("clusterdns"),
    ]
}

fn framed(q: &Query) -> Vec<u8> {
    common::frame(&q.to_wire().expect("query encodes"))
}

/// Reads one framed reply; `None` when the connection closed first.
fn read_reply(s: &mut TcpStream) -> Option<Vec<u8>> {
    common::read_framed(s).ok()
}

/// Waits for the server to close `s`; how long that took from `since`
/// (`None`: still open after 20 s, or data came instead).
fn closed_after(s: &mut TcpStream, since: Instant) -> Option<Duration> {
    s.set_read_timeout(Some(Duration::from_secs(20))).ok()?;
    let mut b = [0u8; 1];
    match s.read(&mut b) {
        Ok(0) => Some(since.elapsed()),
        // A reset is a close too.
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Some(since.elapsed()),
        _ => None,
    }
}

/// One query on a new connection, then how long the server kept it open.
fn idle_close(addr: SocketAddr) -> Option<Duration> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(&framed(&Query::new("whoami.example", "A")))
        .ok()?;
    read_reply(&mut s)?;
    closed_after(&mut s, Instant::now())
}

/// A connection that never sends; how long the server kept it open.
fn silent_close(addr: SocketAddr) -> Option<Duration> {
    let mut s = TcpStream::connect(addr).ok()?;
    closed_after(&mut s, Instant::now())
}

#[test]
fn idle_and_read_timeouts_close_tcp_connections() {
    let coredns = coredns_or_skip!();
    // Far from the defaults (idle 10 s, read 3 s) so either is told apart.
    let corefile = ".:@PORT@ {\n    bind 127.0.0.1\n    timeouts {\n        idle 2s\n        read 6\n    }\n    whoami\n}\n";
    let servers = both(&coredns, corefile);
    for s in &servers {
        let idle = idle_close(s.addr);
        let silent = silent_close(s.addr);
        let (Some(idle), Some(silent)) = (idle, silent) else {
            panic!("{}: idle {idle:?}, silent {silent:?}", s.name);
        };
        assert!(
            idle >= Duration::from_millis(1500) && idle < Duration::from_secs(6),
            "{}: idle connection closed after {idle:?}, want about 2 s",
            s.name
        );
        assert!(
            silent >= Duration::from_millis(4500) && silent < Duration::from_secs(12),
            "{}: silent connection closed after {silent:?}, want about 6 s",
            s.name
        );
    }
}

#[test]
fn write_and_defaults_leave_the_idle_time_alone() {
    let coredns = coredns_or_skip!();
    // Only write set: idle stays CoreDNS's 10 s.
    let corefile =
        ".:@PORT@ {\n    bind 127.0.0.1\n    timeouts {\n        write 30s\n    }\n    whoami\n}\n";
    let servers = both(&coredns, corefile);
    for s in &servers {
        let idle = idle_close(s.addr).unwrap_or_else(|| panic!("{}: not closed", s.name));
        assert!(
            idle >= Duration::from_secs(8) && idle < Duration::from_secs(16),
            "{}: idle connection closed after {idle:?}, want about 10 s",
            s.name
        );
    }
}

#[test]
fn maxtcpqueries_closes_after_the_last_reply() {
    let coredns = coredns_or_skip!();
    let corefile = ".:@PORT@ {\n    bind 127.0.0.1\n    timeouts {\n        maxtcpqueries 2\n    }\n    whoami\n}\n";
    let servers = both(&coredns, corefile);
    let mut seen = Vec::new();
    for s in &servers {
        let mut c = TcpStream::connect(s.addr).expect("connect");
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut replies = 0;
        let mut closed = false;
        for i in 0..3 {
            let q = Query::new(&format!("q{i}.example"), "A").id(100 + i);
            if c.write_all(&framed(&q)).is_err() {
                closed = true;
                break;
            }
            match read_reply(&mut c) {
                Some(_) => replies += 1,
                None => {
                    closed = true;
                    break;
                }
            }
        }
        seen.push((s.name.clone(), replies, closed));
    }
    assert_eq!(seen[0].1, 2, "{seen:?}");
    assert_eq!((seen[0].1, seen[0].2), (seen[1].1, seen[1].2), "{seen:?}");
}

#[test]
fn timeouts_setup_errors_read_as_coredns() {
    common::block_setup_errors_read_as_coredns(&[
        "timeouts",
        "timeouts 5s",
        "timeouts {\n        read\n    }",
        "timeouts {\n        read 5s 6s\n    }",
        "timeouts {\n        read x\n    }",
        "timeouts {\n        read 500ms\n    }",
        "timeouts {\n        idle 25h\n    }",
        "timeouts {\n        idle -5\n    }",
        "timeouts {\n        write 0\n    }",
        "timeouts {\n        foo 5s\n    }",
        "timeouts {\n        foo x\n    }",
        "timeouts {\n        maxtcpqueries 0\n    }",
        "timeouts {\n        maxtcpqueries -2\n    }",
        "timeouts {\n        maxtcpqueries x\n    }",
        "timeouts {\n        maxtcpqueries 99999999999999999999\n    }",
        "timeouts {\n        READ 5s\n    }",
        "timeouts {\n        read 24h\n        idle 1\n        maxtcpqueries -1\n    }",
        "timeouts {\n        idle 5s\n    }\n    timeouts {\n        idle 6s\n    }",
        // debug takes no argument and no block, and may be repeated.
        "debug on",
        "debug {\n        foo\n    }",
        "debug\n    debug",
    ]);
}

/// The `[DEBUG]` lines of a server's output.
fn debug_lines(s: &RunningServer) -> Vec<String> {
    s.log_all()
        .lines()
        .filter(|l| l.starts_with("[DEBUG]"))
        .map(|l| l.replace(&format!(":{}", s.addr.port()), ":PORT"))
        .collect()
}

#[test]
fn debug_prints_the_same_debug_lines() {
    let coredns = coredns_or_skip!();
    let dir = clusterdns_test_support::ScratchDir::new("debug-hosts").expect("scratch");
    let hosts = dir.path().join("hosts");
    std::fs::write(&hosts, "10.0.0.1 a.example\n10.0.0.2 b.example\n").unwrap();
    for (debug, want_lines) in [("    debug\n", true), ("", false)] {
        let corefile = format!(
            ".:@PORT@ {{\n    bind 127.0.0.1\n{debug}    local\n    hosts {} {{\n        fallthrough\n    }}\n    whoami\n}}\n",
            hosts.display()
        );
        let servers = both(&coredns, &corefile);
        for s in &servers {
            for name in ["foo.localhost", "Bar.Localhost"] {
                let o = s.query(&Query::new(name, "A"), Duration::from_secs(2));
                assert!(
                    o.response().is_some(),
                    "{}: {name}: {}",
                    s.name,
                    o.summary()
                );
            }
        }
        // The lines are written asynchronously: give them a moment.
        let deadline = Instant::now() + Duration::from_secs(3);
        let (theirs, ours) = loop {
            let (t, o) = (debug_lines(&servers[0]), debug_lines(&servers[1]));
            if (t.len() >= 3 && o.len() >= t.len()) || Instant::now() > deadline {
                break (t, o);
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(!theirs.is_empty(), want_lines, "{theirs:?}");
        assert_eq!(theirs, ours, "debug={debug:?}");
        // No query log lines were asked for.
        assert!(log_lines(&servers[1].log_all()).is_empty());
    }
}

#[test]
fn debug_prints_errors_consolidated_at_debug_level() {
    let coredns = coredns_or_skip!();
    // local passes other names on and nothing follows: each query is an
    // error ("no next plugin"), counted by the consolidate rule.
    let corefile = ".:@PORT@ {\n    bind 127.0.0.1\n    debug\n    errors {\n        consolidate 1s .* debug\n    }\n    local\n}\n";
    let servers = both(&coredns, corefile);
    for s in &servers {
        for name in ["a.example", "b.example", "c.example"] {
            let o = s.query(&Query::new(name, "A"), Duration::from_secs(2));
            assert!(o.response().is_some(), "{}: {}", s.name, o.summary());
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    let (theirs, ours) = loop {
        let (t, o) = (debug_lines(&servers[0]), debug_lines(&servers[1]));
        if (!t.is_empty() && !o.is_empty()) || Instant::now() > deadline {
            break (t, o);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        theirs,
        ["[DEBUG] plugin/errors: 3 errors like '.*' occurred in last 1s"],
        "{}",
        servers[0].log_all()
    );
    assert_eq!(theirs, ours, "{}", servers[1].log_all());
}
