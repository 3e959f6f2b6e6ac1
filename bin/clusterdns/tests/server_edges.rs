//! The server's edges with raw UDP/TCP sockets (and dig): FORMERR, silence,
//! NOTIMP, BADVERS, REFUSED, truncation, TCP pipelining and idle timeout,
//! the question's case, and a seeded corpus of malformed packets. Where
//! `.rig/bin/coredns` exists the same packets go to the real CoreDNS and
//! the rcode and flags are compared.
// Test helpers outside #[test] functions fail loudly by design.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Server, frame, free_port, read_framed, status};

const COREFILE: &str = "example.org:{PORT} {
    whoami
}
big.test:{PORT} {
    hosts {
        INLINE
    }
}
";

fn corefile() -> String {
    let inline: Vec<String> = (1..=100)
        .map(|i| format!("10.0.{}.{} big.test", i / 250, i % 250))
        .collect();
    COREFILE.replace("INLINE", &inline.join("\n        "))
}

/// A query: header with `flags`, one question, and an OPT record with
/// `edns` = (version, payload size) when given.
fn query(
    id: u16,
    flags: u16,
    name: &str,
    qtype: u16,
    qclass: u16,
    edns: Option<(u8, u16)>,
) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&id.to_be_bytes());
    p.extend_from_slice(&flags.to_be_bytes());
    p.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, u8::from(edns.is_some())]);
    for label in name
        .trim_end_matches('.')
        .split('.')
        .filter(|l| !l.is_empty())
    {
        p.push(label.len() as u8);
        p.extend_from_slice(label.as_bytes());
    }
    p.push(0);
    p.extend_from_slice(&qtype.to_be_bytes());
    p.extend_from_slice(&qclass.to_be_bytes());
    if let Some((version, size)) = edns {
        p.push(0);
        p.extend_from_slice(&41u16.to_be_bytes());
        p.extend_from_slice(&size.to_be_bytes());
        p.extend_from_slice(&[0, version, 0, 0, 0, 0]);
    }
    p
}

/// Sends `pkt` over UDP; the reply, or `None` after `wait`.
fn udp(port: u16, pkt: &[u8], wait: Duration) -> Option<Vec<u8>> {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(wait)).unwrap();
    s.send_to(pkt, ("127.0.0.1", port)).unwrap();
    let mut buf = vec![0u8; 65535];
    let n = s.recv(&mut buf).ok()?;
    buf.truncate(n);
    Some(buf)
}

/// What the tests compare between servers: rcode (low 4 bits), QR, AA,
/// TC, RD, question count, and the extended rcode of an OPT if any.
#[derive(Debug, PartialEq, Eq)]
struct Summary {
    rcode: u8,
    qr: bool,
    aa: bool,
    tc: bool,
    rd: bool,
    qdcount: u16,
    ext_rcode: Option<u8>,
}

fn summary(r: &[u8]) -> Summary {
    assert!(r.len() >= 12, "short reply {r:?}");
    let flags = u16::from_be_bytes([r[2], r[3]]);
    let arcount = u16::from_be_bytes([r[10], r[11]]);
    // An OPT, if present, is the last record (ours and CoreDNS's): its
    // TTL's first byte is the extended rcode, 11 bytes from the end of a
    // record with empty rdata... find it by scanning for type 41 at the
    // tail with an empty owner.
    let mut ext = None;
    if arcount > 0 && r.len() >= 11 {
        let tail = &r[r.len() - 11..];
        if tail[0] == 0 && tail[1] == 0 && tail[2] == 41 {
            ext = Some(tail[5]);
        }
    }
    Summary {
        rcode: (flags & 0x0f) as u8,
        qr: flags & 0x8000 != 0,
        aa: flags & 0x0400 != 0,
        tc: flags & 0x0200 != 0,
        rd: flags & 0x0100 != 0,
        qdcount: u16::from_be_bytes([r[4], r[5]]),
        ext_rcode: ext,
    }
}

/// The reference CoreDNS, when the rig built it.
struct CoreDns {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl CoreDns {
    fn start(corefile: &str) -> Option<CoreDns> {
        let bin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.rig/bin/coredns");
        if !bin.exists() {
            eprintln!("no .rig/bin/coredns: not comparing with CoreDNS");
            return None;
        }
        let port = free_port();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("Corefile");
        std::fs::write(&path, corefile.replace("{PORT}", &port.to_string())).unwrap();
        let child = Command::new(bin)
            .arg("-conf")
            .arg(&path)
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let c = CoreDns {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        let probe = query(1, 0x0100, "example.org", 1, 1, None);
        while Instant::now() < deadline {
            if udp(port, &probe, Duration::from_millis(100)).is_some() {
                return Some(c);
            }
        }
        eprintln!("CoreDNS did not answer: not comparing");
        None
    }
}

impl Drop for CoreDns {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The edge cases: name, packet, what we must answer (`None`: silence).
fn cases() -> Vec<(&'static str, Vec<u8>, Option<Summary>)> {
    let s = |rcode: u8, aa: bool, qdcount: u16, ext_rcode: Option<u8>| {
        Some(Summary {
            rcode,
            qr: true,
            aa,
            tc: false,
            rd: true,
            qdcount,
            ext_rcode,
        })
    };
    let mut garbage = query(2, 0x0100, "example.org", 1, 1, None);
    garbage.truncate(15);
    garbage.extend_from_slice(&[0xff, 0xfe, 0x01]);
    let mut two_questions = query(3, 0x0100, "example.org", 1, 1, None);
    two_questions[5] = 2;
    vec![
        (
            "readable header, garbage after it",
            garbage,
            s(1, false, 0, None),
        ),
        ("two questions", two_questions, s(1, false, 0, None)),
        (
            "bare header, no question",
            vec![0xab, 0xcd, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            s(1, false, 0, None),
        ),
        ("11 bytes", vec![0u8; 11], None),
        ("empty", vec![], None),
        (
            "a response (QR set)",
            query(4, 0x8100, "example.org", 1, 1, None),
            None,
        ),
        (
            "opcode IQUERY",
            query(5, 0x0900, "example.org", 1, 1, None),
            s(4, false, 0, None),
        ),
        (
            "opcode STATUS",
            query(6, 0x1100, "example.org", 1, 1, None),
            s(4, false, 0, None),
        ),
        (
            "opcode UPDATE",
            query(7, 0x2900, "example.org", 6, 1, None),
            s(4, false, 0, None),
        ),
        (
            "EDNS version 1",
            query(8, 0x0100, "example.org", 1, 1, Some((1, 1232))),
            s(0, false, 1, Some(1)),
        ),
        (
            "no zone matches",
            query(9, 0x0100, "example.net", 1, 1, None),
            s(5, false, 1, None),
        ),
        (
            "class CH without chaos",
            query(10, 0x0100, "version.bind", 16, 3, None),
            s(5, false, 1, None),
        ),
        (
            "class CH, EDNS version 1, no chaos",
            query(11, 0x0100, "example.org", 16, 3, Some((1, 1232))),
            s(5, false, 1, Some(0)),
        ),
        (
            "a normal query",
            query(12, 0x0100, "example.org", 1, 1, None),
            s(0, true, 1, None),
        ),
    ]
}

#[test]
fn edge_rcodes_and_flags_match_coredns() {
    let cf = corefile();
    let s = Server::start(&cf);
    let reference = CoreDns::start(&cf);
    for (what, pkt, want) in cases() {
        let wait = Duration::from_millis(if want.is_some() { 2000 } else { 300 });
        let got = udp(s.port, &pkt, wait).map(|r| summary(&r));
        assert_eq!(got, want, "{what}");
        if let Some(c) = &reference {
            let theirs = udp(c.port, &pkt, wait).map(|r| summary(&r));
            assert_eq!(got, theirs, "{what}: clusterdns vs CoreDNS");
        }
        // The ID is always the query's.
        if let Some(r) = udp(s.port, &pkt, wait) {
            assert_eq!(r[..2], pkt[..2], "{what}");
        }
    }
}

#[test]
fn badvers_with_dig() {
    let s = Server::start(&corefile());
    let out = s.dig(&["+edns=1", "+noednsnegotiation", "example.org"]);
    assert_eq!(status(&out), "BADVERS", "{out}");
    let out = s.dig(&["example.net"]);
    assert_eq!(status(&out), "REFUSED", "{out}");
}

#[test]
fn big_answers_truncate_over_udp_and_come_whole_over_tcp() {
    let s = Server::start(&corefile());
    let out = s.dig(&["+bufsize=512", "+ignore", "big.test", "A"]);
    assert!(out.contains(" tc "), "TC set: {out}");
    let n: usize = out
        .split("ANSWER: ")
        .nth(1)
        .and_then(|x| x.split(',').next())
        .and_then(|x| x.parse().ok())
        .unwrap();
    assert!(n > 0 && n < 100, "{n} answers over UDP");
    let r = udp(
        s.port,
        &query(1, 0x0100, "big.test", 1, 1, Some((0, 1232))),
        Duration::from_secs(2),
    )
    .unwrap();
    assert!(r.len() <= 1232, "reply of {} bytes", r.len());
    assert!(summary(&r).tc);
    // dig retries over TCP on TC by default.
    let out = s.dig(&["big.test", "A"]);
    assert!(out.contains("ANSWER: 100,"), "{out}");
    assert!(!out.contains(" tc "), "{out}");
    let out = s.kdig(&["+tcp", "big.test", "A"]);
    assert!(out.contains("ANSWER: 100;"), "{out}");
}

#[test]
fn tcp_pipelined_queries_are_all_answered() {
    let s = Server::start(&corefile());
    let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut all = Vec::new();
    for id in 0..20u16 {
        let name = if id % 2 == 0 {
            "example.org"
        } else {
            "big.test"
        };
        let q = query(id, 0x0100, name, 1, 1, None);
        all.extend_from_slice(&(q.len() as u16).to_be_bytes());
        all.extend_from_slice(&q);
    }
    // One write, twenty queries.
    c.write_all(&all).unwrap();
    let mut ids = Vec::new();
    for _ in 0..20 {
        let r = read_framed(&mut c).unwrap();
        assert_eq!(summary(&r).rcode, 0);
        ids.push(u16::from_be_bytes([r[0], r[1]]));
    }
    ids.sort_unstable();
    assert_eq!(ids, (0..20).collect::<Vec<_>>());
}

#[test]
fn tcp_idle_connections_are_closed() {
    let s = Server::start(&corefile());
    let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let q = query(1, 0x0100, "example.org", 1, 1, None);
    c.write_all(&frame(&q)).unwrap();
    read_framed(&mut c).unwrap();
    let t = Instant::now();
    let mut b = [0u8; 1];
    // The server closes an idle connection (CoreDNS: 10s): EOF or reset.
    match c.read(&mut b) {
        Ok(0) | Err(_) => {}
        Ok(n) => panic!("read {n} bytes from an idle connection"),
    }
    let idle = t.elapsed();
    assert!(
        idle >= Duration::from_secs(5) && idle < Duration::from_secs(19),
        "closed after {idle:?}"
    );
}

#[test]
fn the_question_keeps_the_clients_case() {
    let s = Server::start(&corefile());
    let q = query(1, 0x0100, "ExAmPle.ORG", 1, 1, None);
    let r = udp(s.port, &q, Duration::from_secs(2)).unwrap();
    assert_eq!(&r[12..12 + 13], &q[12..12 + 13]);
    let out = s.dig(&["BiG.TeSt", "A"]);
    assert!(out.contains(";BiG.TeSt."), "{out}");
}

/// A small deterministic generator (xorshift), so the corpus is the same
/// on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Malformed packets: random bytes, truncated and bit-flipped valid
/// queries, compression loops, huge counts.
fn corpus(seed: u64, count: usize) -> Vec<Vec<u8>> {
    let mut rng = Rng(seed);
    let seeds = [
        query(1, 0x0100, "example.org", 1, 1, None),
        query(2, 0x0100, "big.test", 1, 1, Some((0, 4096))),
        query(3, 0x0100, "a.b.c.example.org", 255, 1, Some((0, 512))),
    ];
    let mut out = Vec::with_capacity(count + 3);
    // Hand-made: a pointer to itself, a pointer forward, counts of 65535.
    out.push(vec![
        0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1,
    ]);
    out.push(vec![
        0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 40, 0, 1, 0, 1,
    ]);
    out.push(vec![
        0, 3, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 1, 0, 1,
    ]);
    for i in 0..count {
        let p = match i % 4 {
            0 => (0..rng.below(600)).map(|_| rng.next() as u8).collect(),
            1 => {
                let mut p = seeds[rng.below(3)].clone();
                p.truncate(rng.below(p.len()));
                p
            }
            _ => {
                let mut p = seeds[rng.below(3)].clone();
                for _ in 0..1 + rng.below(4) {
                    let at = rng.below(p.len());
                    p[at] = rng.next() as u8;
                }
                if rng.below(4) == 0 {
                    p.extend((0..rng.below(40)).map(|_| rng.next() as u8));
                }
                p
            }
        };
        out.push(p);
    }
    out
}

fn still_answers(port: u16) {
    let r = udp(
        port,
        &query(77, 0x0100, "example.org", 1, 1, None),
        Duration::from_secs(2),
    )
    .expect("the server still answers over UDP");
    assert_eq!(summary(&r).rcode, 0);
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let q = query(78, 0x0100, "example.org", 1, 1, None);
    c.write_all(&frame(&q)).unwrap();
    assert_eq!(summary(&read_framed(&mut c).unwrap()).rcode, 0);
}

#[test]
fn a_malformed_corpus_never_kills_the_server() {
    let mut s = Server::start(&corefile());
    let packets = corpus(0x5eed_1234_abcd_0001, 4000);
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(1)))
        .unwrap();
    let mut buf = [0u8; 65535];
    for (i, p) in packets.iter().enumerate() {
        sock.send_to(p, ("127.0.0.1", s.port)).unwrap();
        // Drain replies now and then so the socket buffer never fills.
        while sock.recv(&mut buf).is_ok() {}
        if i % 500 == 0 {
            assert!(
                s.child.try_wait().unwrap().is_none(),
                "died after packet {i}"
            );
        }
    }
    still_answers(s.port);
    // Over TCP: framed malformed packets, several per connection, then a
    // connection that sends unframed noise and one that cuts a frame short.
    for chunk in packets.chunks(50).take(20) {
        let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
        c.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut all = Vec::new();
        for p in chunk {
            all.extend_from_slice(&(p.len() as u16).to_be_bytes());
            all.extend_from_slice(p);
        }
        let _ = c.write_all(&all);
        let _ = c.read(&mut buf);
    }
    for noise in [
        &[0xffu8, 0xff, 1, 2, 3][..],
        &[0, 40, 1, 2, 3][..],
        &[0, 0][..],
        &[7][..],
    ] {
        let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
        let _ = c.write_all(noise);
        drop(c);
    }
    assert!(s.child.try_wait().unwrap().is_none(), "the server died");
    still_answers(s.port);
}

/// Hostile shapes (issue 18), each a query for `example.org` (a zone
/// both servers serve) bent one way. None may crash the server; each gets
/// what CoreDNS answers (FORMERR, silence, or, where miekg/dns reads past
/// the damage, an answer), except those in [`DIFFERENT_FROM_COREDNS`],
/// which get FORMERR.
fn hostile() -> Vec<(&'static str, Vec<u8>)> {
    let base = query(40, 0x0100, "example.org", 1, 1, None);
    let header = |id: u16, qd: u16, an: u16, ns: u16, ar: u16| {
        let mut h = id.to_be_bytes().to_vec();
        h.extend_from_slice(&[1, 0]);
        for c in [qd, an, ns, ar] {
            h.extend_from_slice(&c.to_be_bytes());
        }
        h
    };
    let question = |h: Vec<u8>, name: &[u8]| {
        let mut p = h;
        p.extend_from_slice(name);
        p.extend_from_slice(&[0, 1, 0, 1]);
        p
    };
    // An OPT record: owner `.`, type 41, size 1232, empty rdata.
    let opt: &[u8] = &[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0];
    let qname = b"\x07example\x03org\x00";
    let mut long_label = vec![64u8];
    long_label.extend_from_slice(&[b'a'; 64]);
    long_label.extend_from_slice(b"\x07example\x03org\x00");
    let mut long_name = Vec::new();
    for _ in 0..5 {
        long_name.push(63);
        long_name.extend_from_slice(&[b'a'; 63]);
    }
    long_name.extend_from_slice(b"\x07example\x03org\x00");
    let mut two_opts = question(header(45, 1, 0, 0, 2), qname);
    two_opts.extend_from_slice(opt);
    two_opts.extend_from_slice(opt);
    let mut opt_in_answer = question(header(46, 1, 1, 0, 0), qname);
    opt_in_answer.extend_from_slice(opt);
    let mut opt_in_authority = question(header(47, 1, 0, 1, 0), qname);
    opt_in_authority.extend_from_slice(opt);
    let mut truncated_rr = question(header(48, 1, 0, 0, 1), qname);
    truncated_rr.extend_from_slice(&opt[..7]);
    let mut opt_rdata_lies = question(header(49, 1, 0, 0, 1), qname);
    opt_rdata_lies.extend_from_slice(&opt[..9]);
    opt_rdata_lies.extend_from_slice(&[0, 40, 0, 10]);
    let mut answers_lie = base.clone();
    answers_lie[7] = 3;
    let mut additional_lie = base.clone();
    additional_lie[11] = 1;
    // A pointer into the header, and a name made of pointers hopping back
    // and forth.
    let mut forward = question(header(50, 1, 0, 0, 0), &[0xc0, 18]);
    forward.extend_from_slice(qname);
    vec![
        (
            "pointer to itself",
            question(header(41, 1, 0, 0, 0), &[0xc0, 12]),
        ),
        (
            "pointer into the header",
            question(header(42, 1, 0, 0, 0), &[0xc0, 2]),
        ),
        (
            "pointer past the end",
            question(header(43, 1, 0, 0, 0), &[0xc0, 200]),
        ),
        ("forward pointer to a good name", forward),
        (
            "label of 64 (reserved label type)",
            question(header(44, 1, 0, 0, 0), &long_label),
        ),
        (
            "name over 255 octets",
            question(header(51, 1, 0, 0, 0), &long_name),
        ),
        ("two OPT records", two_opts),
        ("OPT in the answer section", opt_in_answer),
        ("OPT in the authority section", opt_in_authority),
        ("additional record cut short", truncated_rr),
        ("OPT rdata longer than the packet", opt_rdata_lies),
        ("answer count 3, no answers", answers_lie),
        ("additional count 1, nothing there", additional_lie),
        ("question cut in the type", base[..base.len() - 3].to_vec()),
    ]
}

/// Where the answer differs from CoreDNS 1.14.7's, on purpose (the
/// server's differences in README.md):
/// - our name reader refuses a pointer into the header or to bytes at or
///   after the pointer itself; miekg/dns follows any pointer that does
///   not loop, so it reads a name out of the header or ahead of itself;
/// - two OPT records are FORMERR (RFC 6891 6.1.1 says MUST); miekg/dns
///   keeps one and CoreDNS answers.
const DIFFERENT_FROM_COREDNS: &[&str] = &[
    "pointer into the header",
    "forward pointer to a good name",
    "two OPT records",
];

#[test]
fn hostile_shapes_get_what_coredns_answers() {
    let cf = corefile();
    let mut s = Server::start(&cf);
    let reference = CoreDns::start(&cf);
    for (what, pkt) in hostile() {
        let got = udp(s.port, &pkt, Duration::from_millis(500)).map(|r| summary(&r));
        assert!(s.child.try_wait().unwrap().is_none(), "died on {what}");
        if DIFFERENT_FROM_COREDNS.contains(&what) {
            assert_eq!(got.as_ref().map(|g| g.rcode), Some(1), "{what}: {got:?}");
        }
        let Some(c) = &reference else { continue };
        let theirs = udp(c.port, &pkt, Duration::from_millis(500)).map(|r| summary(&r));
        if DIFFERENT_FROM_COREDNS.contains(&what) {
            assert_ne!(got, theirs, "{what}: now as CoreDNS; drop it from the list");
        } else {
            assert_eq!(got, theirs, "{what}: clusterdns vs CoreDNS");
        }
    }
    still_answers(s.port);
    let _ = s.stop();
}

/// Over TCP: a zero-length frame, and a 65,535-byte frame holding a query
/// and padding: answered (or the connection closed) as CoreDNS does, and
/// the server keeps serving.
#[test]
fn hostile_tcp_frames_as_from_coredns() {
    let cf = corefile();
    let s = Server::start(&cf);
    let reference = CoreDns::start(&cf);
    let mut big = query(60, 0x0100, "example.org", 1, 1, None);
    big.resize(65535, 0);
    let frames: Vec<(&str, Vec<u8>)> = vec![
        ("zero-length frame", vec![0, 0]),
        ("65,535-byte frame, query then zeros", {
            let mut f = 65535u16.to_be_bytes().to_vec();
            f.extend_from_slice(&big);
            f
        }),
    ];
    let exchange = |port: u16, frame: &[u8]| -> Option<Summary> {
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        c.write_all(frame).ok()?;
        read_framed(&mut c).ok().map(|r| summary(&r))
    };
    for (what, frame) in frames {
        let got = exchange(s.port, &frame);
        if let Some(c) = &reference {
            let theirs = exchange(c.port, &frame);
            eprintln!("{what}: ours {got:?}, CoreDNS {theirs:?}");
            assert_eq!(got, theirs, "{what}");
        }
    }
    still_answers(s.port);
}
