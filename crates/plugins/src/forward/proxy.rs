//! One upstream: pooled connections, the exchange, in-band health checks
//! (CoreDNS `plugin/pkg/proxy`).

use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use clusterdns_contract::metrics::{Counter, Family, HistogramSeries};
use clusterdns_wire::{Class, Header, MessageBuilder, Name, Rtype};
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::pki_types::ServerName;

use super::metrics::Metrics;
use super::pipe::{Pipe, PipeError};
use super::shared::{PER_SOCKET, SharedUdp};
use super::udp::UpstreamUdp;
use super::{ids, matching};

/// UDP sockets open at least per upstream before queries share them (at
/// most [`PER_SOCKET`] each); more when the forward's in-flight limit
/// needs them ([`ProxyOpts::max_sockets`]).
pub(crate) const MAX_SOCKETS: usize = 256;

/// Shortest interval of the expiry timer.
const SWEEP_MIN: Duration = Duration::from_millis(100);

/// Dial timeout for TCP.
const DIAL_TIMEOUT: Duration = Duration::from_secs(2);
/// Read and write timeout of a health check.
const HC_TIMEOUT: Duration = Duration::from_secs(1);

/// How a query travels to the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    /// Datagram.
    Udp,
    /// Stream, two-byte length prefix.
    Tcp,
    /// DNS over TLS (always, for `tls://` upstreams).
    Tls,
}

/// Where and how a `tls://` upstream is reached.
#[derive(Clone)]
pub(crate) struct TlsTarget {
    /// The client configuration.
    pub connector: TlsConnector,
    /// The name the certificate must carry (SNI).
    pub name: ServerName<'static>,
}

/// Settings shared by every upstream of one `forward`.
#[derive(Debug, Clone)]
pub(crate) struct ProxyOpts {
    /// Idle connections older than this are closed.
    pub expire: Duration,
    /// Connections older than this are closed (zero: no limit).
    pub max_age: Duration,
    /// Idle connections kept per upstream and transport (zero: no limit).
    pub max_idle: usize,
    /// Read deadline of an exchange.
    pub read_timeout: Duration,
    /// Health-check interval (zero disables the checks).
    pub hc_interval: Duration,
    /// RD bit of the health-check query.
    pub hc_rd: bool,
    /// Name asked in the health check (`NS`).
    pub hc_domain: Name,
    /// Health checks over TCP (`force_tcp`).
    pub hc_tcp: bool,
    /// Source address of the sockets.
    pub source: Option<IpAddr>,
    /// UDP sockets open at most: enough for the forward's limit of
    /// queries in flight, so that past it a query is refused
    /// (`max_concurrent`) rather than failed for want of a socket.
    pub max_sockets: usize,
}

/// Why an exchange failed.
#[derive(Debug)]
pub(crate) enum ConnectError {
    /// A pooled TCP connection had been closed by the peer; try again
    /// with a fresh one (CoreDNS `ErrCachedClosed`).
    CachedClosed,
    /// Any other error: network, timeout.
    Io(io::Error),
}

impl From<io::Error> for ConnectError {
    fn from(e: io::Error) -> Self {
        ConnectError::Io(e)
    }
}

/// The UDP sockets of one upstream.
#[derive(Default)]
struct UdpPool {
    /// Sockets with no query in flight, the least recently used first.
    idle: VecDeque<Arc<SharedUdp>>,
    /// Every open socket, idle or not.
    all: Vec<Arc<SharedUdp>>,
    /// Where the search for a socket to share starts.
    next: usize,
}

impl UdpPool {
    fn remove(&mut self, s: &Arc<SharedUdp>) {
        self.all.retain(|x| !Arc::ptr_eq(x, s));
        if s.listed.swap(false, Ordering::Relaxed) {
            self.idle.retain(|x| !Arc::ptr_eq(x, s));
        }
    }
}

/// A query's hold on a UDP socket: ends the query on the socket however
/// the exchange ends, and returns the socket to the idle list once no
/// query is left on it.
struct UdpTicket<'a> {
    proxy: &'a Proxy,
    sock: Arc<SharedUdp>,
    id: u16,
}

impl Drop for UdpTicket<'_> {
    fn drop(&mut self) {
        let now = Instant::now();
        if !self.sock.end(self.id, now) {
            return;
        }
        let mut pool = self.proxy.udp.lock();
        let max_idle = self.proxy.opts.max_idle;
        if self.sock.dead()
            || self.sock.used_up()
            || self.proxy.stopped.load(Ordering::Relaxed)
            || (max_idle != 0 && pool.idle.len() >= max_idle)
        {
            pool.remove(&self.sock);
        } else if !self.sock.listed.swap(true, Ordering::Relaxed) {
            pool.idle.push_back(self.sock.clone());
        }
    }
}

/// One upstream server.
pub(crate) struct Proxy {
    /// Its address.
    pub addr: SocketAddr,
    /// `IP:port`, the `to` label of the metrics.
    pub label: String,
    fails: AtomicU32,
    probing: AtomicBool,
    stopped: AtomicBool,
    udp: Mutex<UdpPool>,
    /// The expiry timer runs.
    sweeping: AtomicBool,
    tcp_pipe: Mutex<Option<Arc<Pipe>>>,
    tls_pipe: Mutex<Option<Arc<Pipe>>>,
    tls: Option<TlsTarget>,
    pub(crate) opts: ProxyOpts,
    hc_failures: Arc<Counter>,
    /// Pool hits and misses for udp, tcp, tcp-tls.
    hits: [Arc<Counter>; 3],
    misses: [Arc<Counter>; 3],
    duration: Arc<Family<HistogramSeries>>,
    /// Duration series for rcodes 0..=5, resolved on first use (a series
    /// exists only once observed, as in CoreDNS).
    duration_by_rcode: [std::sync::OnceLock<Arc<HistogramSeries>>; 6],
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("addr", &self.addr)
            .field("fails", &self.fails.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

fn rcode_label(r: u16) -> String {
    clusterdns_wire::Rcode(r).to_string()
}

impl Proxy {
    /// An upstream at `addr`.
    pub(crate) fn new(
        addr: SocketAddr,
        tls: Option<TlsTarget>,
        opts: ProxyOpts,
        m: &Metrics,
    ) -> Self {
        let label = addr.to_string();
        let l = label.as_str();
        Self {
            addr,
            fails: AtomicU32::new(0),
            probing: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            udp: Mutex::default(),
            sweeping: AtomicBool::new(false),
            tcp_pipe: Mutex::new(None),
            tls_pipe: Mutex::new(None),
            tls,
            opts,
            hc_failures: m.hc_failures.with(&["forward", l]),
            hits: [
                m.conn_hits.with(&["udp", "forward", l]),
                m.conn_hits.with(&["tcp", "forward", l]),
                m.conn_hits.with(&["tcp-tls", "forward", l]),
            ],
            misses: [
                m.conn_misses.with(&["udp", "forward", l]),
                m.conn_misses.with(&["tcp", "forward", l]),
                m.conn_misses.with(&["tcp-tls", "forward", l]),
            ],
            duration: m.duration.clone(),
            duration_by_rcode: Default::default(),
            label,
        }
    }

    /// Consecutive failed health checks.
    pub(crate) fn fails(&self) -> u32 {
        self.fails.load(Ordering::Relaxed)
    }

    /// Whether the upstream counts as down: more than `max_fails` failed
    /// health checks in a row (never when `max_fails` is 0).
    pub(crate) fn down(&self, max_fails: u32) -> bool {
        max_fails != 0 && self.fails() > max_fails
    }

    /// Closes every pooled connection and stops the health probe.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
        *self.udp.lock() = UdpPool::default();
        *self.tcp_pipe.lock() = None;
        *self.tls_pipe.lock() = None;
    }

    /// The transport for this upstream: TLS upstreams always use TLS.
    pub(crate) fn transport(&self, wanted: Transport) -> Transport {
        if self.tls.is_some() {
            Transport::Tls
        } else {
            wanted
        }
    }

    /// Sends `query` (any ID) and returns the reply, its ID equal to the
    /// one sent upstream (the caller restores the client's). `start` is
    /// the caller's reading of the clock just before (the clock is read
    /// twice per exchange: there and when the reply is in); `until` is the
    /// query's overall deadline, on top of the read timeout.
    pub(crate) async fn connect(
        self: &Arc<Self>,
        query: &[u8],
        t: Transport,
        start: Instant,
        until: tokio::time::Instant,
    ) -> Result<Vec<u8>, ConnectError> {
        self.sweep_start();
        let reply = match t {
            Transport::Udp => {
                let reply = self.udp_exchange(query, start, until).await?;
                self.observe(&reply, start.elapsed());
                return Ok(reply);
            }
            // The pipe gives the query an ID of its own connection.
            Transport::Tcp | Transport::Tls => self.stream_exchange(t, query, start, until).await?,
        };
        self.observe(&reply, start.elapsed());
        Ok(reply)
    }

    /// Counts one exchange in the request duration histogram, by rcode.
    fn observe(&self, reply: &[u8], took: Duration) {
        let rcode = Header::parse(reply).map_or(2, |h| u16::from(h.rcode_low()));
        let secs = took.as_secs_f64();
        let resolve = || {
            self.duration
                .histogram_with(&["forward", &rcode_label(rcode), &self.label])
        };
        match self.duration_by_rcode.get(usize::from(rcode)) {
            Some(slot) => slot.get_or_init(resolve).observe(secs),
            None => resolve().observe(secs),
        }
    }

    /// Whether an idle socket may carry another query at `now`: used
    /// within `expire`, younger than `max_age`, not used up.
    fn fresh(&self, s: &SharedUdp, now: Instant) -> bool {
        !s.dead()
            && !s.used_up()
            && now.saturating_duration_since(s.used()) < self.opts.expire
            && (self.opts.max_age.is_zero()
                || now.saturating_duration_since(s.created) < self.opts.max_age)
    }

    /// A socket for one query and the query's ID on it: the least recently
    /// used idle socket (one query per socket while there are few in
    /// flight, the source port changing from query to query), else a new
    /// one while the upstream has fewer than [`ProxyOpts::max_sockets`], else a busy
    /// one with room, in turn.
    async fn udp_socket(&self, now: Instant) -> Result<UdpTicket<'_>, ConnectError> {
        {
            let mut pool = self.udp.lock();
            while let Some(s) = pool.idle.pop_front() {
                s.listed.store(false, Ordering::Relaxed);
                if !self.fresh(&s, now) {
                    pool.remove(&s);
                    continue;
                }
                if let Some(id) = s.begin() {
                    self.hits[0].inc();
                    return Ok(UdpTicket {
                        proxy: self,
                        sock: s,
                        id,
                    });
                }
            }
            if pool.all.len() >= self.opts.max_sockets {
                let n = pool.all.len();
                for k in 0..n {
                    let i = (pool.next + k) % n;
                    let s = &pool.all[i];
                    if s.inflight() >= PER_SOCKET {
                        continue;
                    }
                    if let Some(id) = s.begin() {
                        let sock = s.clone();
                        pool.next = (i + 1) % n;
                        self.hits[0].inc();
                        return Ok(UdpTicket {
                            proxy: self,
                            sock,
                            id,
                        });
                    }
                }
                return Err(io::Error::other("too many queries in flight to the upstream").into());
            }
        }
        self.misses[0].inc();
        let sock = Arc::new(SharedUdp::connect(self.bind_addr(), self.addr, now)?);
        let id = sock
            .begin()
            .ok_or_else(|| io::Error::other("new socket refused a query"))?;
        self.udp.lock().all.push(sock.clone());
        Ok(UdpTicket {
            proxy: self,
            sock,
            id,
        })
    }

    /// Starts the timer that closes idle sockets and connections once
    /// they passed `expire` (CoreDNS's cleanup ticker), unless it runs.
    fn sweep_start(self: &Arc<Self>) {
        if self.sweeping.load(Ordering::Relaxed) || self.sweeping.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            self.sweeping.store(false, Ordering::Release);
            return;
        };
        // Twice per `expire`, so nothing stays open longer than 1.5 x
        // `expire` after its last use.
        let every = (self.opts.expire / 2).max(SWEEP_MIN);
        let me = Arc::downgrade(self);
        rt.spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(p) = me.upgrade() else { return };
                if p.stopped.load(Ordering::Relaxed) {
                    return;
                }
                p.sweep(Instant::now());
            }
        });
    }

    /// Closes the idle UDP sockets and the unused TCP/TLS connections past
    /// `expire` or `max_age` at `now`.
    fn sweep(&self, now: Instant) {
        {
            let mut pool = self.udp.lock();
            let stale: Vec<Arc<SharedUdp>> = pool
                .idle
                .iter()
                .filter(|s| !self.fresh(s, now))
                .cloned()
                .collect();
            for s in &stale {
                pool.remove(s);
            }
        }
        for slot in [&self.tcp_pipe, &self.tls_pipe] {
            let mut slot = slot.lock();
            if slot
                .as_ref()
                .is_some_and(|p| p.idle() && !p.usable(self.opts.expire, self.opts.max_age))
            {
                *slot = None;
            }
        }
    }

    fn bind_addr(&self) -> SocketAddr {
        match (self.opts.source, self.addr) {
            (Some(ip), _) => SocketAddr::new(ip, 0),
            (None, SocketAddr::V4(_)) => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
            (None, SocketAddr::V6(_)) => SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0),
        }
    }

    async fn dial_udp(&self) -> io::Result<UpstreamUdp> {
        UpstreamUdp::connect(self.bind_addr(), self.addr)
    }

    async fn dial_tcp(&self) -> io::Result<TcpStream> {
        let s = if self.addr.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        if self.opts.source.is_some() {
            s.bind(self.bind_addr())?;
        }
        let stream = tokio::time::timeout(DIAL_TIMEOUT, s.connect(self.addr))
            .await
            .map_err(|_| timeout_err("dial tcp", None, self.addr))?
            .map_err(|e| go_err("connect", "tcp", None, self.addr, e))?;
        let _ = stream.set_nodelay(true);
        Ok(stream)
    }

    async fn dial_tls(&self) -> io::Result<TlsStream<TcpStream>> {
        let Some(t) = &self.tls else {
            return Err(io::Error::other("not a TLS upstream"));
        };
        let tcp = self.dial_tcp().await?;
        tokio::time::timeout(DIAL_TIMEOUT, t.connector.connect(t.name.clone(), tcp))
            .await
            .map_err(|_| timeout_err("tls handshake", None, self.addr))?
    }

    /// The query's overall deadline passed (CoreDNS's wording).
    fn deadline_err(&self) -> ConnectError {
        timeout_err("read", None, self.addr).into()
    }

    /// One query over a pooled connected UDP socket, possibly shared
    /// with other queries in flight: `query` is sent with an ID unique on
    /// that socket, and the first reply carrying that ID and the query's
    /// question (see [`matching::answers`]) is returned. One
    /// timer covers the write, the read timeout (from `start`) and the
    /// overall `until`.
    async fn udp_exchange(
        &self,
        query: &[u8],
        start: Instant,
        until: tokio::time::Instant,
    ) -> Result<Vec<u8>, ConnectError> {
        let ticket = self.udp_socket(start).await?;
        let sock = &*ticket.sock;
        let id = ticket.id;
        // The query with its upstream ID, built on the stack for the
        // usual sizes.
        let mut small = [0u8; 512];
        let mut big = Vec::new();
        let out: &mut [u8] = if query.len() <= small.len() {
            let b = &mut small[..query.len()];
            b.copy_from_slice(query);
            b
        } else {
            big.extend_from_slice(query);
            &mut big
        };
        clusterdns_wire::set_id(out, id);
        // A datagram send does not wait in practice: one timer, the read
        // timeout's, covers the write too.
        let read = tokio::time::Instant::from_std(start) + self.opts.read_timeout;
        let overall = until < read;
        let mut written = false;
        let exchange = async {
            sock.send(out).await.map_err(|e| ("write", e))?;
            written = true;
            let q = matching::question(query);
            loop {
                let reply = sock.wait(id, q).await.map_err(|e| ("read", e))?;
                if q.is_none_or(|q| matching::answers(q, &reply)) {
                    return Ok(reply);
                }
            }
        };
        let r = tokio::time::timeout_at(until.min(read), exchange).await;
        match r {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err((op, e))) => Err(go_err(op, "udp", sock.local_addr(), self.addr, e).into()),
            Err(_) if overall => Err(self.deadline_err()),
            Err(_) => {
                let op = if written { "read udp" } else { "write udp" };
                Err(timeout_err(op, sock.local_addr(), self.addr).into())
            }
        }
    }

    /// The live pipelined connection for `t`, or a fresh one; `true`
    /// when it was reused.
    async fn pipe_for(&self, t: Transport) -> Result<(Arc<Pipe>, bool), ConnectError> {
        let (slot, i) = match t {
            Transport::Tls => (&self.tls_pipe, 2),
            _ => (&self.tcp_pipe, 1),
        };
        let current = slot
            .lock()
            .as_ref()
            .filter(|p| p.usable(self.opts.expire, self.opts.max_age))
            .cloned();
        if let Some(p) = current {
            self.hits[i].inc();
            return Ok((p, true));
        }
        self.misses[i].inc();
        let p = match t {
            Transport::Tls => {
                let s = self.dial_tls().await?;
                let local = s.get_ref().0.local_addr().ok();
                Pipe::start(s, local)
            }
            _ => {
                let s = self.dial_tcp().await?;
                let local = s.local_addr().ok();
                Pipe::start(s, local)
            }
        };
        *slot.lock() = Some(p.clone());
        Ok((p, false))
    }

    /// One query over the upstream's pipelined TCP or TLS connection: one
    /// timer covers the read timeout (from `start`, or from the end of the
    /// dial for a new connection) and the overall `until`.
    async fn stream_exchange(
        &self,
        t: Transport,
        msg: &[u8],
        start: Instant,
        until: tokio::time::Instant,
    ) -> Result<Vec<u8>, ConnectError> {
        // A pooled connection is ready at once, and a timeout whose future
        // is ready on its first poll never arms its timer.
        let (pipe, cached) = tokio::time::timeout_at(until, self.pipe_for(t))
            .await
            .map_err(|_| self.deadline_err())??;
        let from = if cached { start } else { Instant::now() };
        let read = tokio::time::Instant::from_std(from) + self.opts.read_timeout;
        match pipe.exchange(msg, until.min(read)).await {
            Ok(reply) => Ok(reply),
            Err(PipeError::Closed) if cached => Err(ConnectError::CachedClosed),
            Err(PipeError::Closed) => {
                Err(io::Error::new(io::ErrorKind::UnexpectedEof, "EOF").into())
            }
            Err(PipeError::Timeout) if until < read => Err(self.deadline_err()),
            Err(PipeError::Timeout) => Err(timeout_err("read tcp", pipe.local(), self.addr).into()),
        }
    }

    /// Starts the health probe unless one runs: it checks at once, then
    /// every interval until a check succeeds (CoreDNS `up.Probe`).
    pub(crate) fn healthcheck(self: &Arc<Self>) {
        if self.opts.hc_interval.is_zero() || self.probing.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            self.probing.store(false, Ordering::Release);
            return;
        };
        let p = self.clone();
        rt.spawn(async move {
            while !p.stopped.load(Ordering::Relaxed) {
                if p.check().await.is_ok() {
                    p.fails.store(0, Ordering::Relaxed);
                    break;
                }
                p.hc_failures.inc();
                let _ = p
                    .fails
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |f| {
                        Some(f.saturating_add(1))
                    });
                tokio::time::sleep(p.opts.hc_interval).await;
            }
            p.probing.store(false, Ordering::Release);
        });
    }

    /// One health check: `<domain> IN NS` on a fresh connection. Any
    /// reply is healthy, whatever its rcode.
    pub(crate) async fn check(&self) -> io::Result<()> {
        let id = ids::id();
        let mut msg = Vec::with_capacity(64);
        let header = Header {
            id,
            flags: if self.opts.hc_rd { 0x0100 } else { 0 },
            ..Header::default()
        };
        let mut b = MessageBuilder::new(&mut msg, header);
        b.push_question(&self.opts.hc_domain, Rtype::NS, Class::IN)
            .map_err(|_| io::Error::other("health check query"))?;
        b.finish();
        let fut = async {
            if self.tls.is_some() {
                let mut s = self.dial_tls().await?;
                stream_roundtrip(&mut s, &msg, id).await
            } else if self.opts.hc_tcp {
                let mut s = self.dial_tcp().await?;
                stream_roundtrip(&mut s, &msg, id).await
            } else {
                let s = self.dial_udp().await?;
                s.send(&msg).await?;
                let mut buf = vec![0u8; 65535];
                loop {
                    let n = s.recv(&mut buf).await?;
                    if Header::parse(&buf[..n]).is_ok_and(|h| h.id == id && h.qr()) {
                        return Ok(());
                    }
                }
            }
        };
        tokio::time::timeout(HC_TIMEOUT, fut)
            .await
            .map_err(|_| timeout_err("read", None, self.addr))?
    }
}

/// Sends `msg` over a stream and waits for the reply with `id`.
async fn stream_roundtrip<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    msg: &[u8],
    id: u16,
) -> io::Result<()> {
    let len = u16::try_from(msg.len()).map_err(|_| io::Error::other("message too large"))?;
    let mut out = len.to_be_bytes().to_vec();
    out.extend_from_slice(msg);
    s.write_all(&out).await?;
    s.flush().await?;
    loop {
        let mut lenb = [0u8; 2];
        s.read_exact(&mut lenb).await?;
        let mut buf = vec![0u8; usize::from(u16::from_be_bytes(lenb))];
        s.read_exact(&mut buf).await?;
        if Header::parse(&buf).is_ok_and(|h| h.id == id && h.qr()) {
            return Ok(());
        }
    }
}

/// An I/O error worded as Go's net package words it, for the *errors*
/// plugin's log line: `read udp 127.0.0.1:40000->127.0.0.1:53: read:
/// connection refused`, `dial tcp 127.0.0.1:53: connect: connection
/// refused`, or `EOF` for a closed stream.
fn go_err(
    syscall: &str,
    net: &str,
    local: Option<SocketAddr>,
    remote: SocketAddr,
    e: io::Error,
) -> io::Error {
    let kind = e.kind();
    if kind == io::ErrorKind::UnexpectedEof {
        return io::Error::new(kind, "EOF");
    }
    let text = e.to_string();
    let text = text.split(" (os error").next().unwrap_or(&text);
    let mut chars = text.chars();
    let msg: String = match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => String::new(),
    };
    let line = match (syscall, local) {
        ("connect", _) | (_, None) => format!("dial {net} {remote}: {syscall}: {msg}"),
        (op, Some(l)) => format!("{op} {net} {l}->{remote}: {op}: {msg}"),
    };
    io::Error::new(kind, line)
}

/// An `i/o timeout` worded as Go's net package words it, for the `errors`
/// plugin's log line. Kept as its parts and worded only when shown: a
/// stalled upstream fails every attempt of every query, and most of those
/// errors are never shown (without `errors` a SERVFAIL's cause is not
/// logged).
#[derive(Debug)]
struct Timeout {
    op: &'static str,
    local: Option<SocketAddr>,
    remote: SocketAddr,
}

impl std::fmt::Display for Timeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.local {
            Some(l) => write!(f, "{} {l}->{}: i/o timeout", self.op, self.remote),
            None => write!(f, "{} {}: i/o timeout", self.op, self.remote),
        }
    }
}

impl std::error::Error for Timeout {}

fn timeout_err(op: &'static str, local: Option<SocketAddr>, remote: SocketAddr) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, Timeout { op, local, remote })
}
