//! What the torture and hostile-client scenarios (`tests/torture_*.rs`,
//! `tests/hostile*.rs`, issue 18) share: the short/long switch and the one
//! `TORTURE <name>: key=value…` line each prints, the process's RSS and
//! descriptors, dnsperf as the counting sender, a fixed-rate UDP sender
//! that counts what was answered, the kernel's UDP drop counters, raw
//! non-blocking TCP sockets for hostile clients and the metrics scrape.
#![allow(unsafe_code)]

use std::fmt::Write as _;
use std::net::UdpSocket;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
/// `CLUSTERDNS_TORTURE=long` selects the long form of every scenario; the
/// short form is part of the normal test suite.
pub fn long() -> bool {
    std::env::var("CLUSTERDNS_TORTURE").is_ok_and(|v| v == "long")
}

/// `short` or `long`, for the figures line.
pub fn form() -> &'static str {
    if long() { "long" } else { "short" }
}

/// Prints the scenario's one stdout line: `TORTURE <name>: k=v k=v …`.
pub fn report(name: &str, figures: &[(&str, String)]) {
    let mut line = format!("TORTURE {name}: form={}", form());
    for (k, v) in figures {
        let _ = write!(line, " {k}={v}");
    }
    println!("{line}");
}

/// The resident set size of `pid` in KiB (`VmRSS` of `/proc/PID/status`).
pub fn vmrss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// What dnsperf reported.
#[derive(Debug, Default, Clone)]
pub struct Perf {
    pub sent: u64,
    pub completed: u64,
    pub lost: u64,
    /// The `Response codes:` line (`NOERROR 1234 (100.00%)`).
    pub rcodes: String,
    /// The whole report, for failure messages.
    pub text: String,
}

impl Perf {
    /// Parses dnsperf's final report; `None` when it has none.
    pub fn parse(text: &str) -> Option<Perf> {
        let field = |prefix: &str| {
            text.lines()
                .find_map(|l| l.trim().strip_prefix(prefix))
                .map(|s| s.trim().to_string())
        };
        let count = |prefix: &str| -> Option<u64> {
            field(prefix)?.split_whitespace().next()?.parse().ok()
        };
        Some(Perf {
            sent: count("Queries sent:")?,
            completed: count("Queries completed:")?,
            lost: count("Queries lost:")?,
            rcodes: field("Response codes:").unwrap_or_default(),
            text: text.to_string(),
        })
    }

    /// Only this rcode was answered (or nothing at all).
    pub fn only(&self, rcode: &str) -> bool {
        self.rcodes.is_empty() || (self.rcodes.starts_with(rcode) && !self.rcodes.contains(','))
    }
}

/// dnsperf against `server:port` with the query file `queries` for `secs`
/// seconds at `qps`, over `tcp` or UDP, a 2 s timeout per query (a query
/// unanswered after it counts as lost); `wrap` prefixes the command (e.g.
/// `ip netns exec NS`). Started, not waited for: [`finish`].
pub fn dnsperf(
    wrap: &[&str],
    server: &str,
    port: u16,
    queries: &Path,
    secs: u32,
    qps: u32,
    tcp: bool,
) -> Child {
    let mut args: Vec<String> = wrap.iter().map(ToString::to_string).collect();
    args.push("dnsperf".into());
    for a in [
        "-s",
        server,
        "-p",
        &port.to_string(),
        "-l",
        &secs.to_string(),
    ] {
        args.push(a.into());
    }
    for a in ["-Q", &qps.to_string(), "-c", "2", "-t", "2"] {
        args.push(a.into());
    }
    if tcp {
        args.extend(["-m".into(), "tcp".into()]);
    }
    Command::new(&args[0])
        .args(&args[1..])
        .arg("-d")
        .arg(queries)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run dnsperf (apt-get install dnsperf)")
}

/// Waits for a [`dnsperf`] and parses its report (panics without one).
pub fn finish(child: Child) -> Perf {
    let out = child.wait_with_output().expect("wait for dnsperf");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Perf::parse(&text).unwrap_or_else(|| panic!("no dnsperf report:\n{text}"))
}

/// Held by the tests of one binary that load the machine (floods,
/// thousands of connections, spinning threads) or count on the servers'
/// own timeouts: one at a time, so that each measures its server and not
/// its neighbours.
pub fn heavy() -> std::sync::MutexGuard<'static, ()> {
    static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());
    HEAVY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `short` in the short form (CI), `long` in the long one.
pub fn pick<T>(short: T, long_form: T) -> T {
    if long() { long_form } else { short }
}

/// Raises this process's open-file limit to its hard limit (servers
/// started afterwards inherit it); the limit now.
pub fn raise_nofile() -> u64 {
    // SAFETY: plain syscalls on a local struct.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return 1024;
        }
        r.rlim_cur = r.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        r.rlim_cur
    }
}

/// Resident memory of `pid`, in KiB (0 once it is gone).
pub fn rss_kib(pid: u32) -> u64 {
    vmrss_kib(pid).unwrap_or(0)
}

/// Descriptors `pid` has open.
pub fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Datagrams the kernel dropped on the UDP sockets bound to `port` (all
/// of a listener's SO_REUSEPORT sockets) for a full receive buffer:
/// queries lost before the server read them (`drops`, the last column of
/// `/proc/net/udp`; IPv4 only, as the scenarios bind 127.0.0.1).
pub fn udp_drops(port: u16) -> u64 {
    let table = std::fs::read_to_string("/proc/net/udp").unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let local = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
            (local == port).then(|| f.last()?.parse::<u64>().ok())?
        })
        .sum()
}

/// Datagrams the kernel dropped for a full receive buffer on every UDP
/// socket of this network namespace, since boot (`RcvbufErrors` of
/// `/proc/net/snmp`, IPv4 and IPv6): a delta over a run covers the
/// client's sockets too, which are gone once it exits.
pub fn udp_rcvbuf_errors() -> u64 {
    let snmp = std::fs::read_to_string("/proc/net/snmp").unwrap_or_default()
        + &std::fs::read_to_string("/proc/net/snmp6").unwrap_or_default();
    let mut total = 0;
    let mut header: Option<Vec<&str>> = None;
    for l in snmp.lines() {
        if let Some(v) = l.strip_prefix("Udp6RcvbufErrors") {
            total += v.trim().parse::<u64>().unwrap_or(0);
            continue;
        }
        let Some(rest) = l.strip_prefix("Udp: ") else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        match header.take() {
            None => header = Some(fields),
            Some(names) => {
                if let Some(i) = names.iter().position(|n| *n == "RcvbufErrors") {
                    total += fields
                        .get(i)
                        .and_then(|v| v.parse::<u64>().ok())
                        .unwrap_or(0);
                }
            }
        }
    }
    total
}

/// Samples a process's RSS and descriptor count every 100 ms until
/// dropped or [`Watch::peak`] is called.
pub struct Watch {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<(u64, usize)>>,
}

impl Watch {
    pub fn start(pid: u32) -> Watch {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let (mut rss, mut fd) = (0, 0);
            while !s.load(Ordering::Relaxed) {
                rss = rss.max(rss_kib(pid));
                fd = fd.max(fds(pid));
                std::thread::sleep(Duration::from_millis(100));
            }
            (rss, fd)
        });
        Watch {
            stop,
            thread: Some(thread),
        }
    }

    /// Peak RSS in MiB and peak open descriptors since the start.
    pub fn peak(mut self) -> (u64, usize) {
        self.stop.store(true, Ordering::Relaxed);
        let (rss, fd) = self
            .thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or((0, 0));
        (rss / 1024, fd)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

pub use super::query;

/// `query`, framed for TCP (two-byte length first).
pub fn framed(name: &str, id: u16) -> Vec<u8> {
    super::frame(&query(name, id))
}

/// What a [`paced`] run sent and got back.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    pub sent: u64,
    /// Replies (any rcode) received at all.
    pub replies: u64,
    /// Replies whose ID was sent and unanswered, received within the
    /// deadline of its sending.
    pub in_time: u64,
    /// Replies by rcode (0..16).
    pub rcodes: [u64; 16],
}

impl Tally {
    /// Share of the sent queries answered in time.
    pub fn rate(&self) -> f64 {
        if self.sent == 0 {
            0.0
        } else {
            self.in_time as f64 / self.sent as f64
        }
    }
}

/// Sends `rate` queries a second for `secs` from one UDP socket to
/// 127.0.0.1:`port`, the `i`-th being `make(i)` with its ID set to `i`
/// mod 65536, and counts the replies: those to an ID still unanswered
/// that arrive within `deadline` of its sending count as in time. Waits
/// `deadline` after the last send. The sender keeps to the schedule (a
/// late tick sends what is due), so a slow server does not slow it.
pub fn paced(
    port: u16,
    rate: u64,
    secs: f64,
    deadline: Duration,
    make: impl Fn(u64) -> Vec<u8>,
) -> Tally {
    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind a sender");
    // Past net.core.rmem_max when root may (a flood's replies come in
    // bursts; what this socket drops would count as unanswered).
    set_int(&sock, libc::SOL_SOCKET, libc::SO_RCVBUF, 8 << 20);
    set_int(&sock, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 32 << 20);
    set_int(&sock, libc::SOL_SOCKET, libc::SO_SNDBUF, 8 << 20);
    sock.connect(("127.0.0.1", port)).expect("connect");
    let rx = sock.try_clone().expect("clone");
    rx.set_read_timeout(Some(Duration::from_millis(50)))
        .expect("timeout");
    let epoch = Instant::now();
    // Nanoseconds after the epoch + 1 at which each ID was last sent; 0:
    // none outstanding.
    let sent_at: Arc<Vec<AtomicU64>> = Arc::new((0..65536).map(|_| AtomicU64::new(0)).collect());
    let done = Arc::new(AtomicBool::new(false));
    let receiver = {
        let sent_at = sent_at.clone();
        let done = done.clone();
        std::thread::spawn(move || {
            let mut t = Tally::default();
            let mut buf = [0u8; 4096];
            let dl = u64::try_from(deadline.as_nanos()).unwrap_or(u64::MAX);
            loop {
                match rx.recv(&mut buf) {
                    Ok(n) if n >= 12 => {
                        let now = u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
                        t.replies += 1;
                        t.rcodes[usize::from(buf[3] & 0x0f)] += 1;
                        let id = usize::from(u16::from_be_bytes([buf[0], buf[1]]));
                        let at = sent_at[id].swap(0, Ordering::AcqRel);
                        if at != 0 && now + 1 - at <= dl {
                            t.in_time += 1;
                        }
                    }
                    Ok(_) => {}
                    Err(_) if done.load(Ordering::Acquire) => return t,
                    Err(_) => {}
                }
            }
        })
    };
    let total = (rate as f64 * secs) as u64;
    let mut i = 0;
    while i < total {
        let due = ((epoch.elapsed().as_secs_f64() * rate as f64) as u64).min(total);
        while i < due {
            let mut q = make(i);
            let id = (i % 65536) as u16;
            q[..2].copy_from_slice(&id.to_be_bytes());
            let now = u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
            sent_at[usize::from(id)].store(now + 1, Ordering::Release);
            // A full send buffer is a lost query, as for any client.
            let _ = sock.send(&q);
            i += 1;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(deadline);
    done.store(true, Ordering::Release);
    let mut t = receiver.join().expect("receiver");
    t.sent = total;
    t
}

/// Sets an integer socket option (best effort: a smaller buffer only
/// makes the sender lose more under load, which the counts show).
fn set_int(sock: &impl AsRawFd, level: i32, opt: i32, v: i32) {
    // SAFETY: a plain setsockopt with a local integer.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            opt,
            (&v as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        );
    }
}

/// The probe every scenario runs before and during its load: `web.test A`
/// at a fixed rate for `secs`, each answer counted if it came within
/// [`PROBE_DEADLINE`].
pub fn probe(port: u16, secs: f64) -> Tally {
    paced(port, PROBE_RATE, secs, PROBE_DEADLINE, |_| {
        query("web.test", 0)
    })
}

/// Queries a second of [`probe`].
pub const PROBE_RATE: u64 = 500;
/// The wait a probe answer counts within: what counts is whether it was
/// answered, as a client waiting this long (forward's own wait for an
/// upstream) would see it, not how fast.
pub const PROBE_DEADLINE: Duration = Duration::from_secs(2);

/// A non-blocking TCP socket connecting to 127.0.0.1:`port`; `rcvbuf`
/// shrinks its receive buffer (and segment size) first, as a client that
/// reads nothing would.
pub fn tcp_socket(port: u16, rcvbuf: Option<i32>) -> Option<OwnedFd> {
    // SAFETY: plain socket syscalls; the descriptor is owned at once.
    unsafe {
        let fd = libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        );
        if fd < 0 {
            return None;
        }
        let owned = OwnedFd::from_raw_fd(fd);
        if let Some(size) = rcvbuf {
            set_int(&owned, libc::SOL_SOCKET, libc::SO_RCVBUF, size);
            set_int(&owned, libc::IPPROTO_TCP, libc::TCP_MAXSEG, 536);
        }
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be(),
            },
            sin_zero: [0; 8],
        };
        libc::connect(
            fd,
            (&addr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        Some(owned)
    }
}

/// What a non-blocking send did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// This many bytes went.
    Bytes(usize),
    /// Nothing fits now (or the connect is still under way).
    Later,
    /// The connection is gone (reset or closed by the server).
    Closed,
}

/// Sends what fits of `buf` without blocking.
pub fn send_some(fd: &OwnedFd, buf: &[u8]) -> Sent {
    // SAFETY: `buf` is valid for its length.
    let n = unsafe {
        libc::send(
            fd.as_raw_fd(),
            buf.as_ptr().cast(),
            buf.len(),
            libc::MSG_NOSIGNAL,
        )
    };
    if n >= 0 {
        return Sent::Bytes(n as usize);
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EAGAIN | libc::ENOTCONN | libc::EINPROGRESS | libc::EALREADY) => Sent::Later,
        _ => Sent::Closed,
    }
}

/// Whether the server closed this connection: a peek sees end of file
/// or an error (bytes waiting or nothing yet: open).
pub fn closed_by_peer(fd: &OwnedFd) -> bool {
    let mut b = [0u8; 1];
    // SAFETY: one byte into a local buffer.
    let n = unsafe {
        libc::recv(
            fd.as_raw_fd(),
            b.as_mut_ptr().cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    if n == 0 {
        return true;
    }
    n < 0
        && !matches!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EAGAIN | libc::ENOTCONN | libc::EINPROGRESS)
        )
}

/// New TCP clients, one every 200 ms while the load runs: connect, one
/// `web.test` query, its reply; (answered within `limit`, tried).
pub struct TcpProbe {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<(u64, u64)>>,
}

impl TcpProbe {
    pub fn start(port: u16, limit: Duration) -> TcpProbe {
        use std::io::{Read, Write};
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let (mut ok, mut tried) = (0, 0);
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            while !s.load(Ordering::Relaxed) {
                tried += 1;
                let t = Instant::now();
                let answered = (|| {
                    let mut c = std::net::TcpStream::connect_timeout(&addr, limit).ok()?;
                    c.set_read_timeout(Some(limit.checked_sub(t.elapsed())?))
                        .ok()?;
                    c.write_all(&framed("web.test", 0x2222)).ok()?;
                    let mut len = [0u8; 2];
                    c.read_exact(&mut len).ok()?;
                    Some(())
                })();
                if answered.is_some() && t.elapsed() < limit {
                    ok += 1;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            (ok, tried)
        });
        TcpProbe {
            stop,
            thread: Some(thread),
        }
    }

    /// (answered in time, tried).
    pub fn finish(mut self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or((0, 0))
    }
}

impl Drop for TcpProbe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The sum of every sample of metric `name` (all label sets) in a
/// Prometheus text page, `None` if there is none.
pub fn metric_sum(text: &str, name: &str, labels_contain: &str) -> Option<f64> {
    let mut found = None;
    for l in text.lines() {
        let Some(rest) = l.strip_prefix(name) else {
            continue;
        };
        if !(rest.starts_with('{') || rest.starts_with(' ')) || !rest.contains(labels_contain) {
            continue;
        }
        if let Some(v) = rest.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) {
            *found.get_or_insert(0.0) += v;
        }
    }
    found
}

/// How many queries the server's own duration histogram counts as
/// finished within `le` seconds (a bucket bound as printed, or `+Inf`
/// for all), summed over its series; -1 when the page has none.
pub fn finished_within(page: &str, le: &str) -> f64 {
    metric_sum(
        page,
        "coredns_dns_request_duration_seconds_bucket",
        &format!("le=\"{le}\""),
    )
    .unwrap_or(-1.0)
}

/// `GET /metrics` on 127.0.0.1:`port`.
pub fn scrape(port: u16) -> String {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let r = clusterdns_test_support::http_request(addr, "GET", "/metrics", &[]);
    String::from_utf8_lossy(&r.body).into_owned()
}
