//! A programmable upstream for the forward and cache tests: a UDP and a
//! TCP listener on one loopback port that answer, stall, SERVFAIL,
//! NXDOMAIN, truncate or close TCP connections, as told at run time.
#![allow(dead_code)]

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// What the upstream does with the next queries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    /// `A <ip>` with the configured TTL.
    Answer = 0,
    /// Read and never reply.
    Stall = 1,
    /// SERVFAIL.
    Servfail = 2,
    /// Over UDP: TC set, no records. Over TCP: the full answer.
    Truncate = 3,
    /// NXDOMAIN with an SOA (TTL = configured TTL).
    Nxdomain = 4,
    /// Answer after `delay_ms`.
    Slow = 5,
    /// Over TCP: read the query, then reset the connection (RST, no
    /// reply). Over UDP: no reply.
    Reset = 6,
}

/// State shared with the serving threads.
#[derive(Debug)]
pub struct State {
    mode: AtomicU8,
    /// TTL of the records.
    pub ttl: AtomicU32,
    /// Last octet of the A record.
    pub octet: AtomicU8,
    /// Delay of `Mode::Slow`.
    pub delay_ms: AtomicU64,
    /// Close every TCP connection after one reply.
    pub one_shot_tcp: AtomicBool,
    /// Lowercase the question name in replies (to test case restoring).
    pub lowercase: AtomicBool,
    /// Queries received over UDP.
    pub udp: AtomicU32,
    /// Queries received over TCP.
    pub tcp: AtomicU32,
    /// Health-check queries (`. NS`) received.
    pub ns_root: AtomicU32,
    /// TCP connections accepted.
    pub conns: AtomicU32,
    /// The last NS query: its name (wire form) and RD bit.
    pub last_ns: std::sync::Mutex<Option<(Vec<u8>, bool)>>,
}

/// A running fault upstream.
pub struct Fault {
    /// Its address.
    pub addr: SocketAddr,
    /// Its behaviour and counters.
    pub state: Arc<State>,
}

impl Fault {
    /// Starts one on a free loopback port, answering `A 192.0.2.<octet>`.
    pub fn start(octet: u8) -> Fault {
        let (udp, tcp) = loop {
            let u = UdpSocket::bind("127.0.0.1:0").expect("bind udp");
            let port = u.local_addr().expect("addr").port();
            if let Ok(t) = TcpListener::bind(("127.0.0.1", port)) {
                break (u, t);
            }
        };
        let addr = udp.local_addr().expect("addr");
        let state = Arc::new(State {
            mode: AtomicU8::new(0),
            ttl: AtomicU32::new(300),
            octet: AtomicU8::new(octet),
            delay_ms: AtomicU64::new(300),
            one_shot_tcp: AtomicBool::new(false),
            lowercase: AtomicBool::new(false),
            udp: AtomicU32::new(0),
            tcp: AtomicU32::new(0),
            ns_root: AtomicU32::new(0),
            conns: AtomicU32::new(0),
            last_ns: std::sync::Mutex::new(None),
        });
        let st = state.clone();
        let udp = Arc::new(udp);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                let Ok((n, peer)) = udp.recv_from(&mut buf) else {
                    continue;
                };
                st.udp.fetch_add(1, Ordering::SeqCst);
                let q = buf[..n].to_vec();
                let st = st.clone();
                let udp = udp.clone();
                std::thread::spawn(move || {
                    if let Some(r) = reply(&st, &q, false) {
                        let _ = udp.send_to(&r, peer);
                    }
                });
            }
        });
        let st = state.clone();
        std::thread::spawn(move || {
            for conn in tcp.incoming() {
                let Ok(conn) = conn else { continue };
                let st = st.clone();
                std::thread::spawn(move || serve_tcp(&st, conn));
            }
        });
        Fault { addr, state }
    }

    /// Changes the behaviour.
    pub fn set(&self, m: Mode) {
        self.state.mode.store(m as u8, Ordering::SeqCst);
    }

    /// Queries seen over UDP (health checks included).
    pub fn udp(&self) -> u32 {
        self.state.udp.load(Ordering::SeqCst)
    }

    /// Queries seen over TCP (health checks included).
    pub fn tcp(&self) -> u32 {
        self.state.tcp.load(Ordering::SeqCst)
    }

    /// Queries seen over both, minus health checks.
    pub fn queries(&self) -> u32 {
        self.udp() + self.tcp() - self.state.ns_root.load(Ordering::SeqCst)
    }

    /// `127.0.0.1:port`.
    pub fn to(&self) -> String {
        self.addr.to_string()
    }
}

/// Serves one TCP connection; each query is answered from its own
/// thread, so pipelined queries are answered out of order.
fn serve_tcp(st: &Arc<State>, mut c: TcpStream) {
    st.conns.fetch_add(1, Ordering::SeqCst);
    let _ = c.set_nodelay(true);
    let Ok(w) = c.try_clone() else { return };
    let w = Arc::new(std::sync::Mutex::new(w));
    loop {
        let Ok(q) = crate::common::read_framed(&mut c) else {
            return;
        };
        st.tcp.fetch_add(1, Ordering::SeqCst);
        if st.mode.load(Ordering::SeqCst) == Mode::Reset as u8 {
            reset(c);
            return;
        }
        let (st2, w) = (st.clone(), w.clone());
        std::thread::spawn(move || {
            if let Some(r) = reply(&st2, &q, true)
                && let Ok(mut w) = w.lock()
            {
                let _ = w.write_all(&crate::common::frame(&r));
                if st2.one_shot_tcp.load(Ordering::SeqCst) {
                    let _ = w.shutdown(std::net::Shutdown::Both);
                }
            }
        });
        if st.one_shot_tcp.load(Ordering::SeqCst) {
            return;
        }
    }
}

/// Closes `c` with an RST rather than a FIN (`SO_LINGER` with a zero
/// timeout), as a crashing or overloaded upstream's kernel does.
fn reset(c: TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    #[allow(unsafe_code)]
    // SAFETY: a valid socket and a `linger` of the size passed.
    unsafe {
        libc::setsockopt(
            c.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&raw const linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    drop(c);
}

/// End of the question name starting at 12.
fn question_end(q: &[u8]) -> Option<usize> {
    let mut i = 12;
    loop {
        let l = usize::from(*q.get(i)?);
        if l == 0 {
            return Some(i + 1 + 4);
        }
        i += 1 + l;
    }
}

fn reply(st: &State, q: &[u8], tcp: bool) -> Option<Vec<u8>> {
    let qend = question_end(q)?;
    let qtype = u16::from_be_bytes([q[qend - 4], q[qend - 3]]);
    if qtype == 2 {
        if q.get(12) == Some(&0) {
            st.ns_root.fetch_add(1, Ordering::SeqCst);
        }
        if let Ok(mut last) = st.last_ns.lock() {
            *last = Some((q[12..qend - 4].to_vec(), q[2] & 1 == 1));
        }
    }
    let mode = st.mode.load(Ordering::SeqCst);
    let ttl = st.ttl.load(Ordering::SeqCst).to_be_bytes();
    let mut r = q[..qend].to_vec();
    if st.lowercase.load(Ordering::SeqCst) {
        r[12..qend - 4].make_ascii_lowercase();
    }
    // QR, opcode/RD copied, RA.
    r[2] = 0x80 | (q[2] & 0x79);
    r[3] = 0x80;
    r[4..12].copy_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
    let answer = |r: &mut Vec<u8>| {
        r[7] = 1;
        r.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1]);
        r.extend_from_slice(&ttl);
        r.extend_from_slice(&[0, 4, 192, 0, 2, st.octet.load(Ordering::SeqCst)]);
    };
    match mode {
        1 | 6 => return None,
        2 => r[3] |= 2,
        3 if !tcp => r[2] |= 0x02,
        4 => {
            r[3] |= 3;
            r[9] = 1;
            // SOA for the root, owner ".".
            r.extend_from_slice(&[0, 0, 6, 0, 1]);
            r.extend_from_slice(&ttl);
            let rdata: &[u8] = &[
                2, b'n', b's', 0, 4, b'h', b'o', b's', b't', 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3,
                0, 0, 0, 4, 0, 0, 0, 60,
            ];
            r.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
            r.extend_from_slice(rdata);
        }
        5 => {
            std::thread::sleep(Duration::from_millis(st.delay_ms.load(Ordering::SeqCst)));
            answer(&mut r);
        }
        _ => {
            if qtype == 1 {
                answer(&mut r);
            }
        }
    }
    Some(r)
}

// Not every test that uses the fault upstream builds queries itself.
#[allow(unused_imports)]
pub use super::common::query;

/// Sends a raw query over UDP and returns the reply (or `None` on timeout).
pub fn exchange(port: u16, q: &[u8], timeout: Duration) -> Option<Vec<u8>> {
    let s = UdpSocket::bind("127.0.0.1:0").ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    s.send_to(q, ("127.0.0.1", port)).ok()?;
    let mut buf = vec![0u8; 65535];
    let n = s.recv(&mut buf).ok()?;
    buf.truncate(n);
    Some(buf)
}

/// The reference CoreDNS the rig builds, if it is there.
pub fn reference_coredns() -> Option<std::path::PathBuf> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.rig/bin/coredns");
    p.exists().then_some(p)
}

/// Starts `bin` (clusterdns or the reference CoreDNS) on `corefile`
/// (`{PORT}` replaced by a free port) and waits until it answers.
pub fn start_binary(bin: &std::path::Path, corefile: &str) -> super::common::Server {
    let port = super::common::free_port();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("Corefile");
    std::fs::write(&path, corefile.replace("{PORT}", &port.to_string())).expect("write");
    let child = std::process::Command::new(bin)
        .arg("-conf")
        .arg(&path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start");
    let s = super::common::Server {
        child,
        port,
        dir,
        corefile: path,
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::time::Instant::now() < deadline {
        // A bare header: any server answers FORMERR once it listens.
        if exchange(
            port,
            &[0xab, 0xcd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            Duration::from_millis(200),
        )
        .is_some()
        {
            return s;
        }
    }
    panic!("{} did not answer on {port}", bin.display());
}

/// The parts of dig's output both servers must agree on: status, flags,
/// EDNS line and records (IDs, timings, sizes and cookies dropped).
pub fn normalize(dig_output: &str) -> Vec<String> {
    let mut out = Vec::new();
    for l in dig_output.lines() {
        if let Some(rest) = l.strip_prefix(";; ->>HEADER<<- ") {
            out.push(rest.split(", id:").next().unwrap_or("").to_string());
        } else if l.starts_with(";; flags:") || l.starts_with("; EDNS:") {
            out.push(l.to_string());
        } else if !l.trim().is_empty() && !l.starts_with(';') {
            out.push(l.split_whitespace().collect::<Vec<_>>().join(" "));
        }
    }
    out
}
