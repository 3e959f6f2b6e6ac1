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

use clusterdns_contract::{Proto, Request, ResponseWriter, Stored};
use clusterdns_wire::{Message, Name, Rtype};
use parking_lot::RwLock;

/// At most this many finished walks are kept (the cache's default
/// capacity): past it, expired ones are dropped, and while it stays full
/// nothing more is kept.
pub(super) const CAP: usize = 10_000;

/// A full memo is swept for expired walks at most this often: a sweep
/// reads every entry under the write lock, and a client asking each of
/// many names twice would otherwise make every query a sweep.
const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

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
/// ([`Memo::with_key`]).
#[derive(Default)]
pub(super) struct Memo {
    map: RwLock<Kept>,
}

#[derive(Default)]
struct Kept {
    walks: Map,
    /// When a full memo may be swept again.
    next_sweep: Option<Instant>,
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
        let Some(f) = map.walks.get(key) else {
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
        let mut kept = self.map.write();
        if kept.walks.len() >= CAP && !kept.walks.contains_key(key) {
            if kept.next_sweep.is_some_and(|t| now < t) {
                return;
            }
            kept.next_sweep = Some(now + SWEEP_EVERY);
            kept.walks.retain(|_, f| f.expires > now);
            if kept.walks.len() >= CAP {
                return;
            }
        }
        kept.walks.insert(key.into(), f);
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use clusterdns_contract::{ResponseWriter, StoreHits, Stored};
    use clusterdns_wire::{Class, Header, MessageBuilder, Name, RData, Rtype, Section};

    use super::{CAP, Memo, SWEEP_EVERY};

    struct NoCount;
    impl StoreHits for NoCount {
        fn count_hit(&self, _: &str, _: bool) {}
    }

    fn steps(stored: Instant, ttl_s: u32) -> Vec<Stored> {
        vec![Stored {
            stored,
            ttl_s,
            denial: false,
            counter: Arc::new(NoCount),
        }]
    }

    /// A reply with one A record whose TTL is `ttl`.
    fn writer(ttl: u32) -> ResponseWriter {
        let name: Name = "a.example.".parse().unwrap();
        let mut buf = Vec::new();
        let mut b = MessageBuilder::new(&mut buf, Header::default());
        b.push_question(&name, Rtype::A, Class::IN).unwrap();
        b.push(
            Section::Answer,
            &name,
            Class::IN,
            ttl,
            &RData::A([10, 0, 0, 1].into()),
        )
        .unwrap();
        let mut w = ResponseWriter::new();
        w.set_message(&buf);
        w
    }

    fn len(m: &Memo) -> usize {
        m.map.read().walks.len()
    }

    #[test]
    fn a_full_memo_is_swept_at_most_once_a_second() {
        let memo = Memo::default();
        let t0 = Instant::now();
        // Full: half the walks expire at t0 + 1.2 s (TTL 2 s, stored 0.8 s
        // before t0), half at t0 + 30 s.
        let (short, long) = (writer(2), writer(30));
        let early = t0 - Duration::from_millis(800);
        for i in 0..CAP {
            let key = i.to_be_bytes();
            if i % 2 == 0 {
                memo.keep(&key, &short, &steps(early, 2), early);
            } else {
                memo.keep(&key, &long, &steps(t0, 30), t0);
            }
        }
        assert_eq!(len(&memo), CAP);
        let new = writer(30);
        let at = |ms| t0 + Duration::from_millis(ms);
        // t0 + 1 s: a sweep finds nothing expired; not kept.
        memo.keep(b"new-1", &new, &steps(at(1000), 30), at(1000));
        assert_eq!(len(&memo), CAP);
        // t0 + 1.5 s: half have expired, but the last sweep was under a
        // second ago: no sweep, not kept.
        memo.keep(b"new-2", &new, &steps(at(1500), 30), at(1500));
        assert_eq!(len(&memo), CAP);
        // A second after the first sweep: swept, kept.
        let t = at(1000) + SWEEP_EVERY;
        memo.keep(b"new-3", &new, &steps(t, 30), t);
        assert_eq!(len(&memo), CAP / 2 + 1);
    }
}
