//! DNS over TCP: two-byte length framing, any number of pipelined queries
//! per connection (answered in order), and limits a client cannot hold
//! the listener with.
//!
//! The limits a client meets are [`TcpLimits`]'s.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use clusterdns_contract::{Proto, ResponseWriter};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};

use crate::handle::{Handled, Meta, serve_async, serve_sync};
use crate::mux::Mux;

/// Limits of one listener's TCP side, with CoreDNS's defaults.
///
/// * **read** (3 s, CoreDNS's read timeout): the first query of a
///   connection must arrive within it, and every message must be complete
///   within it once its length arrived (a client that connects and says
///   nothing, or trickles a message, is closed).
/// * **idle** (10 s): time allowed between one reply and the next query.
/// * **write** (5 s, CoreDNS's write timeout): each reply must be taken by
///   the kernel within it; a client that stops reading is closed.
/// * **fair share**: a connection's first query is answered at once; each
///   further one waits for one of a few serving permits (as many as the
///   runtime has worker threads, taken in turn, first come first served)
///   and lets the others (the UDP workers among them) run before it is
///   answered. The permit is given back before the reply is written: a
///   connection whose client does not read waits for its send buffer
///   without a permit and without taking turns. However many connections
///   pipeline queries, only that few take turns at once, and new clients
///   go ahead of them.
/// * **queued replies**: the server holds at most one reply per
///   connection (the next query is read only once the previous reply was
///   written), and the kernel's send buffer for a connection is capped at
///   [`TCP_SEND_BUFFER`]; a client that does not read fills that and then
///   meets the write deadline.
/// * **max_connections** ([`default_max_connections`]: half the open-file
///   limit, 1,024 to 16,384): connections open at once. Past 7/8 of it,
///   every new connection closes the connection stuck in a write longest
///   (its client does not read), or when none is, the one that has been
///   idle (waiting for its next query), reading a message or waiting for
///   a serving permit longest; at the limit, such a connection must be
///   closed before another is accepted. Below the limit a connection is spared for its
///   first [`TCP_GRACE`] in a state (a new client has that long to send
///   its query); at the limit the oldest goes regardless, so a flood of
///   new idle or trickling (slow-loris) connections cycles through the
///   slots instead of filling the backlog. Only when every connection is
///   being answered do new ones wait in the kernel's backlog. New clients
///   are thus served within a round trip while idle, trickling or stalled
///   connections hold all the slots.
///
/// CoreDNS has no connection limit (a goroutine per connection) and closes
/// idle and stalled connections only by its timeouts; the eviction is ours.
/// The `timeouts` plugin sets read, write, idle and the queries per
/// connection through the setup context's
/// [`ConnLimits`](clusterdns_contract::ConnLimits), which the instance
/// applies to [`Mux::tcp`](crate::Mux::tcp).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpLimits {
    /// Time for the first query, and for any message once its length
    /// arrived (CoreDNS `timeouts` read: 3s).
    pub read: Duration,
    /// Time for each reply to be written (CoreDNS `timeouts` write: 5s).
    pub write: Duration,
    /// Time allowed between queries (CoreDNS `timeouts` idle: 10s).
    pub idle: Duration,
    /// Connections open at once.
    pub max_connections: usize,
    /// Queries served on one connection before the server closes it
    /// (CoreDNS `timeouts` maxtcpqueries); `None`: unlimited, CoreDNS's
    /// default.
    pub max_queries: Option<u32>,
}

impl TcpLimits {
    /// Takes the values a server block set (the *timeouts* plugin).
    pub fn apply(&mut self, c: &clusterdns_contract::ConnLimits) {
        if let Some(d) = c.read {
            self.read = d;
        }
        if let Some(d) = c.write {
            self.write = d;
        }
        if let Some(d) = c.idle {
            self.idle = d;
        }
        if let Some(m) = c.max_queries {
            self.max_queries = m;
        }
    }
}

impl Default for TcpLimits {
    fn default() -> Self {
        Self {
            read: Duration::from_secs(3),
            write: Duration::from_secs(5),
            idle: Duration::from_secs(10),
            max_connections: default_max_connections(),
            max_queries: None,
        }
    }
}

/// The connection limit of a listener: half the process's open-file limit
/// (the binary raises it to the hard limit at start, as Go's runtime does
/// for CoreDNS), at least 1,024 and at most 16,384.
///
/// Why so many: a flood of connections larger than the limit does not go
/// away when the server closes some to make room; each comes straight
/// back, and the flood beyond the limit waits in the kernel's accept
/// queue, first in, first out, with every new client behind it
/// (RELIABILITY.md, `never_read`). A held connection costs little (its
/// task and the buffer of its largest message; it takes turns only
/// through a serving permit), so the limit is what the descriptors allow,
/// with the other half left for upstream sockets and files; CoreDNS's
/// only limit is the descriptors. The ceiling bounds the memory a flood
/// can take.
pub fn default_max_connections() -> usize {
    let half = crate::sys::open_file_limit().map_or(u64::MAX, |n| n / 2);
    usize::try_from(half.clamp(1024, 16_384)).unwrap_or(16_384)
}

/// Below the connection limit, a connection is not closed to make room in
/// its first moments in a state: a new client gets the time to send its
/// query, a reply the time to be written.
pub const TCP_GRACE: Duration = Duration::from_millis(200);

/// The kernel send buffer asked for each connection: room for a few
/// large replies, not for an unbounded backlog of unread ones (every
/// reply a client that never reads is sent is work taken from the
/// others; the kernel doubles the figure for its bookkeeping).
pub const TCP_SEND_BUFFER: usize = 16 * 1024;

/// What a connection is doing, for eviction.
mod state {
    /// Waiting for the length of its next (or first) query.
    pub const IDLE: u8 = 0;
    /// Answering a message.
    pub const BUSY: u8 = 1;
    /// Writing a reply.
    pub const WRITING: u8 = 2;
    /// Closed by the accept loop to make room.
    pub const EVICTED: u8 = 3;
    /// Reading a message whose length arrived: a client trickling it
    /// holds a slot as long as an idle one, and goes as one.
    pub const READING: u8 = 4;
    /// Waiting for a serving permit with a query read.
    pub const QUEUED: u8 = 5;
}

/// One open connection as the accept loop sees it.
struct ConnState {
    state: AtomicU8,
    /// Milliseconds after the registry's epoch of the last state change.
    since: AtomicU64,
    kill: Notify,
}

/// The open connections of one listener.
struct Conns {
    slots: Mutex<Vec<Option<Arc<ConnState>>>>,
    /// Connections open and not evicted.
    live: AtomicUsize,
    /// A connection closed.
    freed: Notify,
    /// Permits to answer a connection's further queries (its first goes
    /// without); see [`TcpLimits`], fair share.
    serving: tokio::sync::Semaphore,
    epoch: Instant,
}

impl Conns {
    fn new(permits: usize) -> Self {
        Self {
            slots: Mutex::new(Vec::new()),
            live: AtomicUsize::new(0),
            freed: Notify::new(),
            serving: tokio::sync::Semaphore::new(permits.max(1)),
            epoch: Instant::now(),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn register(&self) -> (usize, Arc<ConnState>) {
        let c = Arc::new(ConnState {
            state: AtomicU8::new(state::IDLE),
            since: AtomicU64::new(self.now_ms()),
            kill: Notify::new(),
        });
        let mut slots = self.slots.lock();
        let i = match slots.iter().position(Option::is_none) {
            Some(i) => {
                slots[i] = Some(c.clone());
                i
            }
            None => {
                slots.push(Some(c.clone()));
                slots.len() - 1
            }
        };
        self.live.fetch_add(1, Ordering::Relaxed);
        (i, c)
    }

    fn unregister(&self, i: usize, c: &ConnState) {
        if c.state.swap(state::EVICTED, Ordering::AcqRel) != state::EVICTED {
            self.live.fetch_sub(1, Ordering::Relaxed);
        }
        if let Some(slot) = self.slots.lock().get_mut(i) {
            *slot = None;
        }
        self.freed.notify_one();
    }

    /// Closes the connection stuck in a write longest, or when none is,
    /// the one that has been idle, reading a message or waiting for a
    /// permit longest (with `spare`, only one that has been so for
    /// [`TCP_GRACE`]); `false` when there is none.
    ///
    /// Stuck writers go first: their clients do not read what they asked
    /// for, while an idle connection may be a client between queries.
    fn evict(&self, spare: bool) -> bool {
        let evictable = |s: u8| {
            s == state::IDLE || s == state::READING || s == state::WRITING || s == state::QUEUED
        };
        let grace = if spare {
            u64::try_from(TCP_GRACE.as_millis()).unwrap_or(u64::MAX)
        } else {
            0
        };
        let before = self.now_ms().saturating_sub(grace);
        let slots = self.slots.lock();
        loop {
            let victim = slots
                .iter()
                .flatten()
                .filter(|c| {
                    evictable(c.state.load(Ordering::Relaxed))
                        && c.since.load(Ordering::Relaxed) <= before
                })
                .min_by_key(|c| {
                    (
                        c.state.load(Ordering::Relaxed) != state::WRITING,
                        c.since.load(Ordering::Relaxed),
                    )
                });
            let Some(v) = victim else {
                return false;
            };
            let s = v.state.load(Ordering::Relaxed);
            if evictable(s)
                && v.state
                    .compare_exchange(s, state::EVICTED, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                self.live.fetch_sub(1, Ordering::Relaxed);
                v.kill.notify_one();
                return true;
            }
        }
    }
}

/// Accepts connections until `stop` turns true, then waits for the open
/// ones to finish the query they are answering (an idle one closes at
/// once).
pub(crate) async fn serve(
    listener: TcpListener,
    mux: Arc<ArcSwap<Mux>>,
    mut stop: watch::Receiver<bool>,
) {
    let local = listener
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    let conns = Arc::new(Conns::new(
        tokio::runtime::Handle::current().metrics().num_workers(),
    ));
    loop {
        let max = mux.load().tcp.max_connections.max(1);
        // Make room: the longest idle or stalled connection goes; when all
        // are busy, wait for one to finish.
        while conns.live.load(Ordering::Relaxed) >= max {
            if conns.evict(false) {
                continue;
            }
            tokio::select! {
                _ = conns.freed.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                _ = stop.changed() => return drain(&conns).await,
            }
        }
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.changed() => return drain(&conns).await,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let (slot, me) = conns.register();
        // Under pressure, idle (and stalled) connections go sooner, the
        // oldest first.
        if conns.live.load(Ordering::Relaxed) > max - max / 8 {
            conns.evict(true);
        }
        let mux = mux.clone();
        let stop = stop.clone();
        let conns = conns.clone();
        tokio::spawn(async move {
            connection(stream, peer, local, mux, stop, &conns, &me).await;
            conns.unregister(slot, &me);
        });
    }
}

/// How long a connection of a stopped listener waits for the client's
/// next query before it closes: a client sending back to back is served
/// on, one that paused moves to the listener's successor (the next
/// process serving the same socket) with its next connection.
const DRAIN_PAUSE: Duration = Duration::from_millis(100);

/// Waits until no connection is open.
async fn drain(conns: &Conns) {
    while conns.live.load(Ordering::Relaxed) > 0 {
        tokio::select! {
            _ = conns.freed.notified() => {}
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    }
}

/// Sets a connection's state unless it was evicted; `false` then.
fn enter(conns: &Conns, me: &ConnState, s: u8, stamp: bool) -> bool {
    if stamp {
        me.since.store(conns.now_ms(), Ordering::Relaxed);
    }
    if me.state.swap(s, Ordering::AcqRel) == state::EVICTED {
        me.state.store(state::EVICTED, Ordering::Release);
        return false;
    }
    true
}

async fn connection(
    mut stream: TcpStream,
    peer: SocketAddr,
    local: SocketAddr,
    mux: Arc<ArcSwap<Mux>>,
    mut stop: watch::Receiver<bool>,
    conns: &Conns,
    me: &ConnState,
) {
    let _ = stream.set_nodelay(true);
    let _ = socket2::SockRef::from(&stream).set_send_buffer_size(TCP_SEND_BUFFER);
    let client = match peer {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), v6.port()),
            None => peer,
        },
        v4 => v4,
    };
    // Grown to the largest message seen, not allocated at 64 KiB for
    // every connection.
    let mut packet = Vec::new();
    let mut w = ResponseWriter::default();
    let mut out = Vec::with_capacity(512);
    let mut first = true;
    let mut first_query = true;
    let mut served: u32 = 0;
    // Once the listener stops, the connection is served for as long as the
    // client keeps sending (queries it already sent are answered, not cut
    // off), and closed at its first pause.
    let mut draining = *stop.borrow();
    loop {
        let limits = mux.load().tcp;
        if limits.max_queries.is_some_and(|m| served >= m) {
            return;
        }
        served = served.saturating_add(1);
        if !enter(conns, me, state::IDLE, true) {
            return;
        }
        // The length, read as it comes: `read` is cancel-safe (a read the
        // select gives up read nothing), so a stop while waiting loses no
        // byte of the stream.
        let mut lb = [0u8; 2];
        let mut have = 0;
        while have < 2 {
            let wait = if have > 0 {
                limits.read
            } else if draining {
                DRAIN_PAUSE
            } else if first {
                limits.read
            } else {
                limits.idle
            };
            tokio::select! {
                r = tokio::time::timeout(wait, stream.read(&mut lb[have..])) => match r {
                    Ok(Ok(n)) if n > 0 => have += n,
                    _ => return,
                },
                _ = me.kill.notified() => return,
                _ = stop.changed(), if !draining => draining = true,
            }
        }
        let len = usize::from(u16::from_be_bytes(lb));
        first = false;
        // Reading keeps the time the wait for the length began: a
        // connection idle for long that then trickles a message is the
        // oldest, not a new one.
        if len == 0 || !enter(conns, me, state::READING, false) {
            return;
        }
        if packet.len() < len {
            packet.resize(len, 0);
        }
        tokio::select! {
            r = tokio::time::timeout(limits.read, stream.read_exact(&mut packet[..len])) => match r {
                Ok(Ok(_)) => {}
                _ => return,
            },
            _ = me.kill.notified() => return,
        }
        // A further query waits for a permit and then lets the others run:
        // the UDP workers are tasks on the same threads, and thousands of
        // connections each answering a pipeline of queries until its send
        // buffer fills would hold them off for that whole round (seconds,
        // tests/torture_exhaust.rs never_read). A first query goes
        // without, so a new client is answered ahead of the pipelines.
        let permit = if first_query {
            None
        } else {
            if !enter(conns, me, state::QUEUED, true) {
                return;
            }
            let p = tokio::select! {
                p = conns.serving.acquire() => match p {
                    Ok(p) => p,
                    Err(_) => return,
                },
                _ = me.kill.notified() => return,
            };
            tokio::task::yield_now().await;
            Some(p)
        };
        first_query = false;
        if !enter(conns, me, state::BUSY, false) {
            return;
        }
        let meta = Meta {
            client,
            local,
            proto: Proto::Tcp,
            received: Instant::now(),
        };
        let table = mux.load_full();
        let msg = &packet[..len];
        let mut slot = None;
        let mut handled = serve_sync(&table, msg, meta, &mut w, &mut slot);
        // Given back before anything that waits: an upstream's answer or
        // the client's reading.
        drop(permit);
        if let (Handled::Defer(from), Some(q)) = (handled, slot.as_ref()) {
            handled = serve_async(&table, q, meta, from, &mut w).await;
        }
        drop(table);
        if handled != Handled::Reply {
            continue;
        }
        let body = w.bytes();
        let Ok(n) = u16::try_from(body.len()) else {
            continue;
        };
        out.clear();
        out.extend_from_slice(&n.to_be_bytes());
        out.extend_from_slice(body);
        if !enter(conns, me, state::WRITING, true) {
            return;
        }
        tokio::select! {
            r = tokio::time::timeout(limits.write, stream.write_all(&out)) => match r {
                Ok(Ok(())) => {}
                _ => return,
            },
            _ = me.kill.notified() => return,
        }
        // The further messages of a zone transfer, each framed and with
        // its own write deadline.
        for m in w.take_more() {
            let Ok(n) = u16::try_from(m.len()) else {
                return;
            };
            out.clear();
            out.extend_from_slice(&n.to_be_bytes());
            out.extend_from_slice(&m);
            tokio::select! {
                r = tokio::time::timeout(limits.write, stream.write_all(&out)) => match r {
                    Ok(Ok(())) => {}
                    _ => return,
                },
                _ = me.kill.notified() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Registers connections in the given states, each `age` ms old.
    fn conns(states: &[(u8, u64)]) -> (Conns, Vec<Arc<ConnState>>) {
        let mut c = Conns::new(1);
        // The registry's epoch ten seconds back, so that the stamps below
        // are in its past.
        let now = 10_000;
        if let Some(e) = Instant::now().checked_sub(Duration::from_millis(now)) {
            c.epoch = e;
        }
        let all = states
            .iter()
            .map(|&(s, age)| {
                let (_, me) = c.register();
                me.state.store(s, Ordering::Relaxed);
                me.since.store(now - age, Ordering::Relaxed);
                me
            })
            .collect();
        (c, all)
    }

    fn evicted(all: &[Arc<ConnState>]) -> Vec<usize> {
        all.iter()
            .enumerate()
            .filter(|(_, c)| c.state.load(Ordering::Relaxed) == state::EVICTED)
            .map(|(i, _)| i)
            .collect()
    }

    #[test]
    fn a_stuck_writer_goes_before_older_idle_connections() {
        let (c, all) = conns(&[
            (state::IDLE, 5_000),
            (state::WRITING, 1_000),
            (state::QUEUED, 6_000),
            (state::WRITING, 3_000),
            (state::BUSY, 9_000),
        ]);
        assert!(c.evict(false));
        assert_eq!(evicted(&all), [3]);
        assert!(c.evict(false));
        assert_eq!(evicted(&all), [1, 3]);
        // No writer left: the oldest idle, reading or queued one.
        assert!(c.evict(false));
        assert_eq!(evicted(&all), [1, 2, 3]);
        assert!(c.evict(false));
        assert_eq!(evicted(&all), [0, 1, 2, 3]);
        // One being answered is never closed to make room.
        assert!(!c.evict(false));
        assert_eq!(c.live.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn below_the_limit_young_connections_are_spared() {
        let grace = u64::try_from(TCP_GRACE.as_millis()).unwrap_or(u64::MAX);
        let (c, all) = conns(&[(state::WRITING, grace / 2), (state::IDLE, grace * 3)]);
        assert!(c.evict(true));
        assert_eq!(evicted(&all), [1]);
        assert!(!c.evict(true));
        assert!(c.evict(false));
        assert_eq!(evicted(&all), [0, 1]);
    }
}
