//! Finished walks served in one step.
//!
//! A walk whose every step the cache answered from its store gives the
//! same reply, but for its TTLs, until the first of those entries expires
//! (what the cache promises for each of them): that reply is kept here and
//! served again without running the chain, with the TTLs the walk would
//! have given (the last step's entry counting down) and every step's hit
//! counted in the cache's counters as the walk would have counted it. A
//! walk with any step answered otherwise (kubernetes, forward) is never
//! kept: the data behind it may change at any time.

use std::cell::Cell;
use std::net::IpAddr;
use std::time::Instant;

use clusterdns_plugin::{Proto, Request, ResponseWriter, Stored};
use clusterdns_wire::{Message, Name, Rtype};
use parking_lot::RwLock;

/// At most this many finished walks are kept (the cache's default
/// capacity): past it, expired ones are dropped, and while it stays full
/// nothing more is kept.
pub(super) const CAP: usize = 10_000;

/// One finished walk.
struct Finished {
    /// The reply as the walk wrote it (its ID is the client's).
    msg: Box<[u8]>,
    /// Where its TTL fields are.
    ttl_offs: Box<[u16]>,
    /// Bytes name compression saved in it.
    saved: usize,
    /// Every step's entry, in walk order; the last one's TTL is the
    /// reply's.
    steps: Box<[Stored]>,
    /// When the first of them expires.
    expires: Instant,
}

type Map = std::collections::HashMap<Box<[u8]>, Finished, foldhash::fast::RandomState>;

/// The finished walks, by everything the walk's reply depends on
/// ([`Memo::key`]).
#[derive(Default)]
pub(super) struct Memo {
    map: RwLock<Map>,
}

thread_local! {
    /// The key of the query at hand (reused: no allocation per query).
    static KEY: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
    /// The walk's steps so far.
    pub(super) static STEPS: Cell<Vec<Stored>> = const { Cell::new(Vec::new()) };
}

impl Memo {
    /// Runs `f` with the key of `req` walked along `search`: the server
    /// label, the client's address (a per-client policy behind autopath,
    /// acl, decides by it) and transport, the search path, the question
    /// exactly as asked (its case appears in the reply), the header's
    /// flags and the DO bit.
    pub(super) fn with_key<T>(req: &Request<'_>, search: &[Name], f: impl FnOnce(&[u8]) -> T) -> T {
        let mut key = KEY.take();
        key.clear();
        key.extend_from_slice(req.server.as_bytes());
        key.push(0xff);
        match req.client.ip() {
            IpAddr::V4(a) => key.extend_from_slice(&a.octets()),
            IpAddr::V6(a) => key.extend_from_slice(&a.octets()),
        }
        key.push(match req.proto {
            Proto::Udp => 0,
            Proto::Tcp => 1,
        });
        // Each name's wire form ends with the root's zero byte.
        for s in search {
            key.extend_from_slice(s.as_wire());
        }
        key.push(0xff);
        key.extend_from_slice(req.query.question_bytes());
        key.extend_from_slice(&req.query.header().flags.to_be_bytes());
        key.push(u8::from(req.query.do_bit()));
        let out = f(&key);
        KEY.set(key);
        out
    }

    /// Serves the walk kept under `key` if it still holds at the query's
    /// arrival; counts the cache's hits as the walk would.
    pub(super) fn serve(&self, key: &[u8], req: &Request<'_>, w: &mut ResponseWriter) -> bool {
        let map = self.map.read();
        let Some(f) = map.get(key) else {
            return false;
        };
        let now = req.received;
        let Some(last) = f.steps.last() else {
            return false;
        };
        let ttl = last.ttl_at(now);
        if now >= f.expires || ttl <= 0 {
            return false;
        }
        let ttl = u32::try_from(ttl).unwrap_or(0).to_be_bytes();
        // Made of cache entries, which are stored without an OPT record.
        let buf = w.replay_buffer();
        buf.clear();
        buf.extend_from_slice(&f.msg);
        buf[0..2].copy_from_slice(&req.query.id().to_be_bytes());
        for &o in f.ttl_offs.iter() {
            let o = usize::from(o);
            if let Some(dst) = buf.get_mut(o..o + 4) {
                dst.copy_from_slice(&ttl);
            }
        }
        w.set_compression_saved(f.saved);
        for s in f.steps.iter() {
            s.counter.count_hit(req.server, s.denial);
        }
        #[cfg(test)]
        SERVED.set(SERVED.get() + 1);
        true
    }

    /// Keeps the walk's reply in `w` under `key`, made of `steps` (every
    /// one a cache hit) at `now`, if every TTL in it is the one the last
    /// step's entry gives now (so serving it again with that entry's TTL
    /// is exact).
    pub(super) fn keep(&self, key: &[u8], w: &ResponseWriter, steps: &[Stored], now: Instant) {
        let (Some(last), Some(first)) = (steps.last(), steps.first()) else {
            return;
        };
        let msg = w.bytes();
        let Ok(m) = Message::parse(msg) else { return };
        let want = last.ttl_at(now);
        let mut offs = Vec::new();
        for r in m.heads() {
            if r.rtype == Rtype::OPT || i64::from(r.ttl) != want {
                return;
            }
            let Ok(o) = u16::try_from(r.ttl_offset) else {
                return;
            };
            offs.push(o);
        }
        let expires = steps
            .iter()
            .map(Stored::expires)
            .fold(first.expires(), Instant::min);
        let saved =
            clusterdns_wire::uncompressed_len(msg).map_or(0, |n| n.saturating_sub(msg.len()));
        let f = Finished {
            msg: msg.into(),
            ttl_offs: offs.into(),
            saved,
            steps: steps.into(),
            expires,
        };
        let mut map = self.map.write();
        if map.len() >= CAP && !map.contains_key(key) {
            map.retain(|_, f| f.expires > now);
            if map.len() >= CAP {
                return;
            }
        }
        map.insert(key.into(), f);
        #[cfg(test)]
        KEPT.set(KEPT.get() + 1);
    }
}

#[cfg(test)]
thread_local! {
    /// Walks kept by this thread (tests run each on a thread of its own).
    pub(super) static KEPT: Cell<usize> = const { Cell::new(0) };
    /// Kept walks served by this thread.
    pub(super) static SERVED: Cell<usize> = const { Cell::new(0) };
}
