//! Spoofing (issue 18): a hostile upstream answers every forwarded query
//! first with forgeries (another ID; the right ID with another question
//! name, type or class; the right reply from another port and from
//! another loopback address) and then genuinely, or only after forward's
//! deadline. The client must get the genuine answer (SERVFAIL when only
//! late replies come) and never a forged one. Then the IDs and source
//! ports of 1000 forwarded queries, as the upstream sees them, must look
//! random.
// Test helpers outside #[test] functions fail loudly by design.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Server;

/// The last octet of the genuine answer's address, and of the forged ones.
const GENUINE: u8 = 1;
const FORGED: u8 = 66;

/// What the hostile upstream saw and sent.
#[derive(Default)]
struct Seen {
    /// (ID, source port) of every forwarded query (health checks aside).
    queries: Mutex<Vec<(u16, u16)>>,
    /// Forged or late datagrams and frames sent.
    forged: AtomicU32,
    /// Answer only after this long, and only genuinely (the late case).
    late: AtomicBool,
    /// No forgeries at all (the randomness count).
    plain: AtomicBool,
}

/// The question of a query (name, type, class) and its type.
fn question(q: &[u8]) -> Option<(&[u8], u16)> {
    let mut i = 12;
    while *q.get(i)? != 0 {
        i += 1 + usize::from(q[i]);
    }
    let qs = q.get(12..i + 5)?;
    Some((qs, u16::from_be_bytes([q[i + 1], q[i + 2]])))
}

/// A reply with this ID and question: one `A 192.0.2.<octet>` for an A
/// query, else no records.
fn reply(id: u16, qs: &[u8], a: bool, octet: u8) -> Vec<u8> {
    let mut r = id.to_be_bytes().to_vec();
    r.extend_from_slice(&[0x81, 0x80, 0, 1, 0, u8::from(a), 0, 0, 0, 0]);
    r.extend_from_slice(qs);
    if a {
        r.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, octet]);
    }
    r
}

/// The forgeries for a query with this ID and question, in the order sent.
fn forgeries(id: u16, qs: &[u8]) -> Vec<Vec<u8>> {
    let n = qs.len();
    let mut name = qs.to_vec();
    name[1] ^= 0x04; // another first letter, not only another case
    let mut rtype = qs.to_vec();
    rtype[n - 3] = 28; // AAAA
    let mut class = qs.to_vec();
    class[n - 1] = 3; // CH
    vec![
        reply(id ^ 0x5a5a, qs, true, FORGED),
        reply(id, &name, true, FORGED),
        reply(id, &rtype, true, FORGED),
        reply(id, &class, true, FORGED),
    ]
}

/// The hostile upstream: UDP and TCP on one 127.0.0.1 port, plus a UDP
/// socket on another port and one on 127.0.0.2 with the same port to send
/// the right reply from the wrong place.
fn upstream(seen: Arc<Seen>) -> SocketAddr {
    let (udp, tcp) = loop {
        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = u.local_addr().unwrap().port();
        if let Ok(t) = TcpListener::bind(("127.0.0.1", port)) {
            break (u, t);
        }
    };
    let addr = udp.local_addr().unwrap();
    let other_port = UdpSocket::bind("127.0.0.1:0").unwrap();
    let other_addr = UdpSocket::bind(("127.0.0.2", addr.port())).unwrap();
    let s = seen.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        loop {
            let Ok((n, from)) = udp.recv_from(&mut buf) else {
                return;
            };
            let q = &buf[..n];
            let Some((qs, qtype)) = question(q) else {
                continue;
            };
            let id = u16::from_be_bytes([q[0], q[1]]);
            let genuine = reply(id, qs, qtype == 1, GENUINE);
            // The health check (`. NS`) is answered at once.
            if qs.first() == Some(&0) {
                let _ = udp.send_to(&genuine, from);
                continue;
            }
            s.queries.lock().unwrap().push((id, from.port()));
            if s.late.load(Ordering::Relaxed) {
                let u = udp.try_clone().unwrap();
                let s = s.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(2500));
                    s.forged.fetch_add(1, Ordering::Relaxed);
                    let _ = u.send_to(&genuine, from);
                });
                continue;
            }
            if !s.plain.load(Ordering::Relaxed) {
                for f in forgeries(id, qs) {
                    let _ = udp.send_to(&f, from);
                }
                let forged = reply(id, qs, qtype == 1, FORGED);
                let _ = other_port.send_to(&forged, from);
                let _ = other_addr.send_to(&forged, from);
                s.forged.fetch_add(6, Ordering::Relaxed);
            }
            let _ = udp.send_to(&genuine, from);
        }
    });
    std::thread::spawn(move || {
        for c in tcp.incoming() {
            let Ok(c) = c else { return };
            let s = seen.clone();
            std::thread::spawn(move || serve_tcp(c, &s));
        }
    });
    addr
}

/// One TCP connection: for each query the forgeries that can come over
/// it, then the genuine reply.
fn serve_tcp(mut c: TcpStream, s: &Seen) {
    let from = c.peer_addr().map_or(0, |a| a.port());
    loop {
        let Ok(q) = common::read_framed(&mut c) else {
            return;
        };
        let Some((qs, qtype)) = question(&q) else {
            return;
        };
        let id = u16::from_be_bytes([q[0], q[1]]);
        let mut out = Vec::new();
        if qs.first() != Some(&0) {
            s.queries.lock().unwrap().push((id, from));
            if !s.plain.load(Ordering::Relaxed) {
                for f in forgeries(id, qs) {
                    out.push(f);
                }
                s.forged.fetch_add(4, Ordering::Relaxed);
            }
        }
        out.push(reply(id, qs, qtype == 1, GENUINE));
        for m in out {
            if c.write_all(&common::frame(&m)).is_err() {
                return;
            }
        }
    }
}

/// An A query for `name` with this ID.
fn query(name: &str, id: u16) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[1, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    for l in name.split('.') {
        q.push(u8::try_from(l.len()).unwrap());
        q.extend_from_slice(l.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

/// What a client got for one query.
#[derive(Debug, PartialEq, Eq, Clone, Copy, Hash)]
enum Got {
    Genuine,
    /// A forged record, or the FORMERR forward writes for a reply with
    /// another question: a forgery taken for the reply.
    Forged,
    Servfail,
    /// Anything else, or no reply.
    Other,
}

fn classify(id: u16, r: Option<&[u8]>) -> Got {
    let Some(r) = r else { return Got::Other };
    if r.len() < 12 || u16::from_be_bytes([r[0], r[1]]) != id {
        return Got::Other;
    }
    let ancount = u16::from_be_bytes([r[6], r[7]]);
    match (r[3] & 0x0f, ancount, r.last()) {
        (0, 1, Some(&GENUINE)) => Got::Genuine,
        (0, _, Some(&FORGED)) | (1, _, _) => Got::Forged,
        (2, 0, _) => Got::Servfail,
        _ => Got::Other,
    }
}

/// Sends `n` distinct queries from `threads` clients at once, each
/// waiting up to `timeout`, and counts what came back.
fn run(port: u16, tag: &str, n: usize, threads: usize, timeout: Duration) -> HashMap<Got, usize> {
    let per = n / threads;
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let tag = tag.to_string();
            std::thread::spawn(move || {
                let s = UdpSocket::bind("127.0.0.1:0").unwrap();
                s.set_read_timeout(Some(timeout)).unwrap();
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                for i in 0..per {
                    let id = u16::try_from((t * per + i) % 65536).unwrap();
                    let q = query(&format!("q{t}x{i}.{tag}.spoof.test"), id);
                    s.send_to(&q, ("127.0.0.1", port)).unwrap();
                    // A stray reply to an earlier query (after its timeout)
                    // is skipped by its ID.
                    let r = loop {
                        match s.recv(&mut buf) {
                            Ok(_) if buf[..2] != id.to_be_bytes() => {}
                            Ok(len) => break Some(buf[..len].to_vec()),
                            Err(_) => break None,
                        }
                    };
                    got.push(classify(id, r.as_deref()));
                }
                got
            })
        })
        .collect();
    let mut counts = HashMap::new();
    for h in handles {
        for g in h.join().unwrap() {
            *counts.entry(g).or_insert(0) += 1;
        }
    }
    counts
}

fn start(upstream: SocketAddr, opts: &str) -> Server {
    Server::start(&format!(
        ".:{{PORT}} {{\n    forward . {upstream} {{\n{opts}\n    }}\n}}\n"
    ))
}

/// One line of figures per scenario, and the checks.
fn report(scenario: &str, seen: &Seen, counts: &HashMap<Got, usize>, want: Got, n: usize) {
    let c = |g| counts.get(&g).copied().unwrap_or(0);
    println!(
        "spoofing {scenario}: {n} queries, {} forwarded, {} forged replies sent, \
         forged accepted {}, {} {want:?}, {} servfail, {} other",
        seen.queries.lock().unwrap().len(),
        seen.forged.load(Ordering::Relaxed),
        c(Got::Forged),
        c(want),
        c(Got::Servfail),
        c(Got::Other),
    );
    assert_eq!(
        c(Got::Forged),
        0,
        "{scenario}: forged replies reached clients"
    );
    assert_eq!(c(want), n, "{scenario}: {counts:?}");
}

/// 400 queries from 4 clients at once, each forwarded query met by
/// `per_query` forgeries before its genuine reply.
fn forged(opts: &str, tag: &str, per_query: u32) {
    let seen = Arc::new(Seen::default());
    let up = upstream(seen.clone());
    let s = start(up, opts);
    let counts = run(s.port, tag, 400, 4, Duration::from_secs(3));
    report(tag, &seen, &counts, Got::Genuine, 400);
    assert!(seen.forged.load(Ordering::Relaxed) >= per_query * 400);
}

#[test]
fn forged_udp_replies_are_ignored() {
    forged("", "udp", 6);
}

#[test]
fn forged_tcp_replies_are_ignored() {
    // Over TCP only what comes over the connection: the other ID and
    // the other questions.
    forged("        force_tcp", "tcp", 4);
}

#[test]
fn late_replies_are_ignored() {
    let seen = Arc::new(Seen::default());
    seen.late.store(true, Ordering::Relaxed);
    let up = upstream(seen.clone());
    let s = start(up, "");
    // Each attempt's read times out after 2 s; the late reply to one
    // attempt arrives during the next, with another ID; after the
    // query's 5 s the client gets SERVFAIL, as from CoreDNS.
    let counts = run(s.port, "late", 4, 4, Duration::from_secs(8));
    report("late", &seen, &counts, Got::Servfail, 4);
    assert!(seen.forged.load(Ordering::Relaxed) >= 4);
    // The late replies still arriving are not taken for later queries.
    seen.late.store(false, Ordering::Relaxed);
    seen.plain.store(true, Ordering::Relaxed);
    let counts = run(s.port, "after", 8, 2, Duration::from_secs(3));
    report("after-late", &seen, &counts, Got::Genuine, 8);
}

/// Counts of the values, the most repeated one, and the most common step
/// between consecutive values.
fn spread(name: &str, v: &[u16]) -> (usize, usize, usize) {
    let mut count: HashMap<u16, usize> = HashMap::new();
    for x in v {
        *count.entry(*x).or_default() += 1;
    }
    let mut steps: HashMap<i32, usize> = HashMap::new();
    for w in v.windows(2) {
        *steps.entry(i32::from(w[1]) - i32::from(w[0])).or_default() += 1;
    }
    let max_repeat = count.values().copied().max().unwrap_or(0);
    let max_step = steps.values().copied().max().unwrap_or(0);
    let (lo, hi) = (v.iter().min().unwrap(), v.iter().max().unwrap());
    println!(
        "spoofing {name}: {} values, {} distinct, most repeated {max_repeat}x, \
         range {lo}..={hi}, most common step {max_step}x",
        v.len(),
        count.len(),
    );
    (count.len(), max_repeat, max_step)
}

fn unpredictable(opts: &str, tag: &str, threads: usize) -> Vec<(u16, u16)> {
    let seen = Arc::new(Seen::default());
    seen.plain.store(true, Ordering::Relaxed);
    let up = upstream(seen.clone());
    let s = start(up, opts);
    let counts = run(s.port, tag, 1000, threads, Duration::from_secs(3));
    report(tag, &seen, &counts, Got::Genuine, 1000);
    let q = seen.queries.lock().unwrap().clone();
    assert!(q.len() >= 1000);
    let ids: Vec<u16> = q.iter().map(|x| x.0).collect();
    let (distinct, repeat, step) = spread(&format!("{tag} ids"), &ids);
    // 1000 draws from 65536 repeat about 8 values by chance.
    assert!(distinct >= 975, "{distinct} distinct IDs");
    assert!(repeat <= 3, "an ID repeated {repeat} times");
    assert!(step <= 5, "a step between IDs repeated {step} times");
    let (lo, hi) = (ids.iter().min().unwrap(), ids.iter().max().unwrap());
    assert!(hi - lo >= 60_000, "IDs within {lo}..={hi}");
    // Every bit of the ID set in about half of them.
    for b in 0..16 {
        let set = ids.iter().filter(|x| *x & (1 << b) != 0).count();
        assert!((400..=600).contains(&set), "bit {b} set in {set} IDs");
    }
    q
}

#[test]
fn udp_ids_and_ports_are_unpredictable() {
    let q = unpredictable("", "ids-udp", 1);
    let ports: Vec<u16> = q.iter().map(|x| x.1).collect();
    // One query at a time: a pooled socket carries 8 to 32 queries (one
    // port), then another takes over, on a port the kernel picks at random.
    let (distinct, repeat, _) = spread("ids-udp ports", &ports);
    assert!(distinct >= 1000 / 32, "{distinct} distinct source ports");
    assert!(repeat <= 64, "a source port carried {repeat} queries");
    let mut changes = ports.clone();
    changes.dedup();
    let (_, _, step) = spread("ids-udp port changes", &changes);
    assert!(
        step <= 3,
        "a step between source ports repeated {step} times"
    );
    let (lo, hi) = (ports.iter().min().unwrap(), ports.iter().max().unwrap());
    assert!(hi - lo >= 10_000, "source ports within {lo}..={hi}");
}

#[test]
fn tcp_ids_are_unpredictable() {
    unpredictable("        force_tcp", "ids-tcp", 1);
}
