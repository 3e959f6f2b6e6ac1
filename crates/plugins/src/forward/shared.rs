//! One connected UDP socket to an upstream that carries several queries
//! at once, told apart by their random message IDs.
//!
//! No task reads the socket: the queries waiting on it take turns. One of
//! them, the reader, waits for readiness and receives; a reply for another
//! query is copied into that query's slot and its waker woken; when the
//! reader's own reply comes it hands the role on by waking one waiter.
//! With one query in flight (the usual case) this is exactly a query
//! reading its own socket. Datagrams are received into one buffer per
//! thread, so memory per query in flight is its reply, not 64 KiB.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::task::{Poll, Waker};
use std::time::Instant;

use clusterdns_wire::Header;
use parking_lot::Mutex;

use super::udp::UpstreamUdp;
use super::{ids, matching};

/// Queries in flight on one socket at most. A spoofed reply must hit one
/// of their IDs: with at most this many, a guess succeeds with a chance
/// of 1 in 65536 / 64 = 1024 (besides needing the socket's port).
pub(crate) const PER_SOCKET: usize = 64;

/// Each socket carries a random number of queries between these two, and
/// is then retired: a source port found out (by the ICMP side channel of
/// SADDNS, say) is soon worth nothing, and sequential queries do not all
/// leave from one port for a whole `expire`. At least a few, so that a
/// new socket is rare among queries.
const MIN_USES: u32 = 8;
const MAX_USES: u32 = 32;

thread_local! {
    /// The receive buffer of this thread, large enough for any datagram.
    static RECV: RefCell<Box<[u8]>> = RefCell::new(vec![0u8; 65535].into_boxed_slice());
}

type Delivered = Result<Vec<u8>, io::Error>;

#[derive(Default)]
struct Slot {
    waker: Option<Waker>,
    reply: Option<Delivered>,
}

struct Inner {
    slots: HashMap<u16, Slot, foldhash::fast::RandomState>,
    /// The query polling the socket, if any.
    reader: Option<u16>,
    /// When the last query ended.
    used: Instant,
}

/// See the module doc.
pub(crate) struct SharedUdp {
    sock: UpstreamUdp,
    inner: Mutex<Inner>,
    /// `slots.len()`, readable without the lock.
    inflight: AtomicUsize,
    /// Created at.
    pub(crate) created: Instant,
    /// A receive failed (ICMP unreachable, ...): no new queries.
    dead: AtomicBool,
    /// In the pool's idle list (kept by the pool, under its lock).
    pub(crate) listed: AtomicBool,
    /// Queries begun on it, and how many it may take before it retires.
    uses: AtomicU32,
    budget: u32,
}

/// What a waiting query does next.
enum Turn {
    Done(Delivered),
    Read,
}

fn copy_err(e: &io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::new(e.kind(), e.to_string()),
    }
}

impl SharedUdp {
    /// Binds to `local` and connects to `upstream` (inside a runtime).
    pub(crate) fn connect(
        local: SocketAddr,
        upstream: SocketAddr,
        now: Instant,
    ) -> io::Result<Self> {
        Ok(Self {
            sock: UpstreamUdp::connect(local, upstream)?,
            inner: Mutex::new(Inner {
                slots: HashMap::default(),
                reader: None,
                used: now,
            }),
            inflight: AtomicUsize::new(0),
            created: now,
            dead: AtomicBool::new(false),
            listed: AtomicBool::new(false),
            uses: AtomicU32::new(0),
            budget: fastrand::u32(MIN_USES..=MAX_USES),
        })
    }

    /// Queries in flight.
    pub(crate) fn inflight(&self) -> usize {
        self.inflight.load(Ordering::Relaxed)
    }

    /// Whether a receive failed on it.
    pub(crate) fn dead(&self) -> bool {
        self.dead.load(Ordering::Relaxed)
    }

    /// Whether it has carried its share of queries: no new ones from the
    /// idle list, retired once idle.
    pub(crate) fn used_up(&self) -> bool {
        self.uses.load(Ordering::Relaxed) >= self.budget
    }

    /// When its last query ended (or it was created).
    pub(crate) fn used(&self) -> Instant {
        self.inner.lock().used
    }

    /// Takes a fresh random ID for a query, or `None` when the socket is
    /// full or dead.
    pub(crate) fn begin(&self) -> Option<u16> {
        if self.dead() {
            return None;
        }
        let mut g = self.inner.lock();
        if g.slots.len() >= PER_SOCKET {
            return None;
        }
        let mut id = ids::id();
        while g.slots.contains_key(&id) {
            id = ids::id();
        }
        g.slots.insert(id, Slot::default());
        self.uses.fetch_add(1, Ordering::Relaxed);
        self.inflight.store(g.slots.len(), Ordering::Relaxed);
        Some(id)
    }

    /// Ends the query `id` (answered, failed or abandoned); `true` when no
    /// query is left on the socket.
    pub(crate) fn end(&self, id: u16, now: Instant) -> bool {
        let mut g = self.inner.lock();
        g.slots.remove(&id);
        // Also with no reader: the waiter woken to take the role may be
        // this very query, gone before it took it.
        if g.reader == Some(id) || g.reader.is_none() {
            g.reader = None;
            Self::hand_on(&mut g);
        }
        g.used = now;
        self.inflight.store(g.slots.len(), Ordering::Relaxed);
        g.slots.is_empty()
    }

    /// Wakes one waiting query to take the reader's role.
    fn hand_on(g: &mut Inner) {
        if let Some(w) = g
            .slots
            .values_mut()
            .find(|s| s.reply.is_none() && s.waker.is_some())
            .and_then(|s| s.waker.take())
        {
            w.wake();
        }
    }

    /// Sends one datagram.
    pub(crate) async fn send(&self, buf: &[u8]) -> io::Result<usize> {
        self.sock.send(buf).await
    }

    /// The local address, for error messages.
    pub(crate) fn local_addr(&self) -> Option<SocketAddr> {
        self.sock.local_addr()
    }

    /// Waits for the reply to `id` (a datagram with that ID and QR set).
    /// Cancel-safe: dropping the future and calling [`SharedUdp::end`]
    /// hands the reader's role on.
    /// A reply the reader reads for itself is dropped unless it carries
    /// the question `q` (see [`matching::answers`]); one another query
    /// read for it is checked by the caller, who waits again.
    pub(crate) async fn wait(&self, id: u16, q: Option<&[u8]>) -> io::Result<Vec<u8>> {
        loop {
            let turn = poll_fn(|cx| {
                let mut g = self.inner.lock();
                let reader = g.reader;
                let Some(slot) = g.slots.get_mut(&id) else {
                    return Poll::Ready(Turn::Done(Err(io::ErrorKind::NotConnected.into())));
                };
                if let Some(r) = slot.reply.take() {
                    return Poll::Ready(Turn::Done(r));
                }
                match reader {
                    Some(r) if r != id => {
                        match &mut slot.waker {
                            Some(w) if w.will_wake(cx.waker()) => {}
                            w => *w = Some(cx.waker().clone()),
                        }
                        Poll::Pending
                    }
                    _ => {
                        g.reader = Some(id);
                        Poll::Ready(Turn::Read)
                    }
                }
            })
            .await;
            match turn {
                Turn::Done(r) => return r,
                Turn::Read => {
                    if let Some(r) = self.read_for(id, q).await {
                        return r;
                    }
                }
            }
        }
    }

    /// As the reader: receives until the reply to `id` comes (`Some`), or
    /// returns `None` if the slot got its reply otherwise.
    async fn read_for(&self, id: u16, q: Option<&[u8]>) -> Option<Delivered> {
        loop {
            let got = self.sock.recv_with(|buf| self.dispatch(id, q, buf)).await;
            match got {
                Ok(Some(reply)) => {
                    // Our reply was most likely the last datagram queued
                    // (a later one raises a fresh event): forget the
                    // readiness unless another query may read next.
                    if self.inflight() <= 1 {
                        self.sock.forget_readiness();
                    }
                    return Some(Ok(reply));
                }
                Ok(None) => continue,
                Err(e) => {
                    // The socket's error (an ICMP unreachable) concerns every
                    // query on it: each gets a copy, and the socket retires.
                    self.dead.store(true, Ordering::Relaxed);
                    let mut g = self.inner.lock();
                    for (k, s) in g.slots.iter_mut() {
                        if *k != id && s.reply.is_none() {
                            s.reply = Some(Err(copy_err(&e)));
                            if let Some(w) = s.waker.take() {
                                w.wake();
                            }
                        }
                    }
                    g.reader = None;
                    return Some(Err(e));
                }
            }
        }
    }

    /// Hands one received datagram to its query: `Some` when it is the
    /// reader's own (then the reader's role is handed on), otherwise the
    /// reply is stored for its query. Short datagrams, replies to no query
    /// in flight (late, or spoofed) and the reader's own ID with another
    /// question (spoofed) are dropped: the reader keeps reading, so the
    /// readiness is not forgotten while the real reply may be queued.
    fn dispatch(&self, me: u16, q: Option<&[u8]>, datagram: &[u8]) -> Option<Vec<u8>> {
        let h = Header::parse(datagram).ok()?;
        if !h.qr() || (h.id == me && q.is_some_and(|q| !matching::answers(q, datagram))) {
            return None;
        }
        let mut g = self.inner.lock();
        if h.id == me {
            g.reader = None;
            Self::hand_on(&mut g);
            return Some(datagram.to_vec());
        }
        let slot = g.slots.get_mut(&h.id)?;
        if slot.reply.is_none() {
            slot.reply = Some(Ok(datagram.to_vec()));
            if let Some(w) = slot.waker.take() {
                w.wake();
            }
        }
        None
    }
}

impl UpstreamUdp {
    /// Waits until a datagram is there, receives it into this thread's
    /// buffer and returns what `f` makes of it (`Ok(None)`: keep reading).
    /// When `f` found its reply and no other query waits, the readiness is
    /// forgotten, sparing the receive that would only say EAGAIN.
    pub(crate) async fn recv_with<T>(
        &self,
        mut f: impl FnMut(&[u8]) -> Option<T>,
    ) -> io::Result<Option<T>> {
        self.recv_fn(|s| {
            RECV.with(|b| {
                let mut buf = b.borrow_mut();
                let n = s.recv(&mut buf)?;
                Ok(f(&buf[..n]))
            })
        })
        .await
    }
}
