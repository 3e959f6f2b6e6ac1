//! The sharded store of wire-format entries (CoreDNS
//! `plugin/pkg/cache`: 256 shards, random eviction).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use clusterdns_wire::{Class, HEADER_LEN, Message, Name, Rtype};
use parking_lot::RwLock;

/// Number of shards, as CoreDNS.
pub(crate) const SHARDS: usize = 256;

/// One cached reply, in wire form, ready to be copied into a writer.
#[derive(Debug)]
pub(crate) struct Entry {
    /// Length of the question section at [`QUESTION`] in `msg`, whose name
    /// is kept lowercase there to rule out hash collisions: the name is
    /// not stored a second time (a `Name` is a fixed-size buffer, larger
    /// than most whole replies, and a full cache holds thousands).
    pub qlen: u16,
    /// Question type.
    pub qtype: Rtype,
    /// Question class.
    pub qclass: Class,
    /// The reply without OPT, every TTL set to `orig_ttl`, its question
    /// name lowercase (a hit writes the client's question over it).
    pub msg: Box<[u8]>,
    /// Offsets of the TTL fields in `msg`.
    pub ttl_offs: Box<[u32]>,
    /// Bytes name compression saves in `msg` (its uncompressed length,
    /// the response size CoreDNS reports, less its length), found once
    /// here rather than on every hit.
    pub saved: usize,
    /// When it was stored (clock milliseconds).
    pub stored_ms: u64,
    /// The TTL it was stored with, in seconds.
    pub orig_ttl: u32,
    /// Whether the reply is a SERVFAIL.
    pub servfail: bool,
    /// Hits in the current prefetch window.
    pub hits: AtomicU32,
    /// Start of the current prefetch window (clock milliseconds).
    pub window_ms: AtomicU64,
    /// A background refresh of this entry is running.
    pub refreshing: AtomicBool,
    /// Last-known-good: until when (clock milliseconds) the entry answers
    /// stale without the chain being asked again, after a failed attempt.
    pub lkg_retry_ms: AtomicU64,
}

impl Entry {
    /// Builds an entry from a reply whose records the caller walked once
    /// ([`Layout`]): drops its OPT (which must be the last record, else
    /// `None`) and sets every TTL to `ttl`.
    pub(crate) fn build(layout: &Layout<'_>, ttl: u32, now_ms: u64) -> Option<Entry> {
        let m = layout.msg;
        let msg = m.as_bytes();
        let (qname, qtype, qclass) = layout.question;
        let h = m.header();
        let (end, arcount) = match (layout.opts, layout.opt_at) {
            (0, _) => (m.len(), h.arcount),
            (1, Some(at)) => (at, h.arcount.checked_sub(1)?),
            _ => return None,
        };
        let offs = layout.ttl_offs;
        let mut bytes = msg.get(..end)?.to_vec();
        bytes[10..12].copy_from_slice(&arcount.to_be_bytes());
        // No truncation bit in a cached reply.
        bytes[2] &= !0x02;
        for &o in offs {
            let o = o as usize;
            bytes.get_mut(o..o + 4)?.copy_from_slice(&ttl.to_be_bytes());
        }
        let saved = clusterdns_wire::uncompressed_len(&bytes)?.saturating_sub(bytes.len());
        // The question's name follows the header uncompressed (a pointer
        // could only point into the header, which the parser refuses);
        // lowercased in place, it is the entry's own copy of the name.
        let qlen = qname.len();
        let name = bytes.get_mut(QUESTION..QUESTION + qlen)?;
        if !name.eq_ignore_ascii_case(qname.as_wire()) {
            return None;
        }
        name.make_ascii_lowercase();
        Some(Entry {
            saved,
            qlen: u16::try_from(qlen + 4).ok()?,
            qtype: *qtype,
            qclass: *qclass,
            servfail: h.rcode_low() == 2,
            msg: bytes.into_boxed_slice(),
            ttl_offs: offs.into(),
            stored_ms: now_ms,
            orig_ttl: ttl,
            hits: AtomicU32::new(0),
            window_ms: AtomicU64::new(now_ms),
            refreshing: AtomicBool::new(false),
            lkg_retry_ms: AtomicU64::new(0),
        })
    }

    /// Seconds of TTL left at `now_ms` (negative once expired).
    pub(crate) fn ttl(&self, now_ms: u64) -> i64 {
        let elapsed = now_ms.saturating_sub(self.stored_ms) / 1000;
        i64::from(self.orig_ttl) - i64::try_from(elapsed).unwrap_or(i64::MAX)
    }

    /// Length of the question section in `msg`.
    pub(crate) fn question_len(&self) -> usize {
        usize::from(self.qlen)
    }

    /// Whether the entry answers this question.
    pub(crate) fn matches(&self, qname_lower: &Name, qtype: Rtype, qclass: Class) -> bool {
        self.qtype == qtype
            && self.qclass == qclass
            && self.question_len() == qname_lower.len() + 4
            && self.msg.get(QUESTION..QUESTION + qname_lower.len()) == Some(qname_lower.as_wire())
    }
}

/// Where a reply's records are, found by one walk over them and shared
/// by everything a store needs from them.
#[derive(Debug)]
pub(crate) struct Layout<'s> {
    /// The reply.
    pub msg: &'s Message<'s>,
    /// The question (name as in the reply, type, class).
    pub question: &'s (Name, Rtype, Class),
    /// Offsets of the TTL fields of the records but OPT.
    pub ttl_offs: &'s [u32],
    /// Start of the OPT record when it is the last record.
    pub opt_at: Option<usize>,
    /// Number of OPT records.
    pub opts: usize,
}

/// Question offset in every message.
pub(crate) const QUESTION: usize = HEADER_LEN;

/// The key is already a hash of the question; foldhash (seeded per
/// process) spreads it over the buckets for a fraction of SipHash's cost,
/// paid on every hit and store. Flood resistance buys nothing here: a
/// shard never holds more than `per_shard` entries.
type Shard = RwLock<HashMap<u64, Arc<Entry>, foldhash::fast::RandomState>>;

/// A bounded map from key to entry.
pub(crate) struct Store {
    shards: Box<[Shard]>,
    per_shard: usize,
    len: AtomicUsize,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("per_shard", &self.per_shard)
            .field("len", &self.len())
            .finish()
    }
}

impl Store {
    /// A store for about `capacity` entries: `max(capacity/256, 4)` per
    /// shard.
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            shards: (0..SHARDS)
                .map(|_| RwLock::new(HashMap::default()))
                .collect(),
            per_shard: (capacity / SHARDS).max(4),
            len: AtomicUsize::new(0),
        }
    }

    fn shard(&self, key: u64) -> &Shard {
        &self.shards[(key as usize) % SHARDS]
    }

    /// Runs `f` on the entry for `key` without blocking: a shard being
    /// written to counts as a miss.
    #[inline]
    pub(crate) fn with<R>(&self, key: u64, f: impl FnOnce(&Arc<Entry>) -> Option<R>) -> Option<R> {
        let shard = self.shard(key).try_read()?;
        shard.get(&key).and_then(f)
    }

    /// Inserts; returns whether another entry was evicted to make room.
    pub(crate) fn insert(&self, key: u64, e: Entry) -> bool {
        let mut shard = self.shard(key).write();
        let mut evicted = false;
        if shard.len() >= self.per_shard && !shard.contains_key(&key) {
            let victim = fastrand::usize(..shard.len());
            if let Some(k) = shard.keys().nth(victim).copied() {
                shard.remove(&k);
                evicted = true;
            }
        }
        if shard.insert(key, Arc::new(e)).is_none() && !evicted {
            self.len.fetch_add(1, Ordering::Relaxed);
        }
        evicted
    }

    /// Removes the entry for `key`.
    pub(crate) fn remove(&self, key: u64) {
        if self.shard(key).write().remove(&key).is_some() {
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Number of entries.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Capacity (shards × per-shard size).
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.per_shard * SHARDS
    }
}

/// FNV-1a 64 over DO, CD, qtype, qclass and the lowercase name (the
/// fields CoreDNS's `hash` covers).
#[inline]
pub(crate) fn key(qname_lower: &Name, qtype: Rtype, qclass: Class, do_bit: bool, cd: bool) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |b: u8| {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    };
    feed(u8::from(do_bit));
    feed(u8::from(cd));
    for b in qtype.0.to_be_bytes() {
        feed(b);
    }
    for b in qclass.0.to_be_bytes() {
        feed(b);
    }
    for &b in qname_lower.as_wire() {
        feed(b);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str) -> Entry {
        let pkt = clusterdns_plugin::testing::query(name, Rtype::A);
        let mut reply = pkt.clone();
        reply[2] |= 0x80;
        let m = Message::parse(&reply).expect("reply");
        let q = m.question().expect("question");
        let layout = Layout {
            msg: &m,
            question: &q,
            ttl_offs: &[],
            opt_at: None,
            opts: 0,
        };
        Entry::build(&layout, 30, 0).expect("entry")
    }

    #[test]
    fn store_is_bounded_and_evicts() {
        let s = Store::new(0);
        assert_eq!(s.capacity(), 1024);
        let mut evictions = 0;
        for i in 0..5000u32 {
            let n = format!("n{i}.example.");
            let name = Name::from_ascii(&n).expect("name");
            let k = key(&name, Rtype::A, Class::IN, false, false);
            if s.insert(k, entry(&n)) {
                evictions += 1;
            }
        }
        assert!(s.len() <= 1024, "len {}", s.len());
        assert!(evictions >= 5000 - 1024);
    }

    #[test]
    fn key_separates_do_cd_type_and_ignores_case() {
        let a = Name::from_ascii("Example.ORG.").expect("n").to_lowercase();
        let b = Name::from_ascii("example.org.").expect("n");
        let k = key(&a, Rtype::A, Class::IN, false, false);
        assert_eq!(k, key(&b, Rtype::A, Class::IN, false, false));
        assert_ne!(k, key(&b, Rtype::A, Class::IN, true, false));
        assert_ne!(k, key(&b, Rtype::A, Class::IN, false, true));
        assert_ne!(k, key(&b, Rtype::AAAA, Class::IN, false, false));
    }

    /// The entry's only copy of the question name is the lowercase one
    /// in its reply, and it still tells names of the same length apart.
    #[test]
    fn entry_keeps_one_lowercase_copy_of_the_name() {
        let e = entry("MiXed.Example.");
        let lower = |n: &str| Name::from_ascii(n).expect("name").to_lowercase();
        let want = lower("mixed.example.");
        assert_eq!(&e.msg[QUESTION..QUESTION + want.len()], want.as_wire());
        assert!(e.matches(&want, Rtype::A, Class::IN));
        assert!(!e.matches(&want, Rtype::AAAA, Class::IN));
        assert!(!e.matches(&lower("mixee.example."), Rtype::A, Class::IN));
        assert!(!e.matches(&lower("mixed.example.org."), Rtype::A, Class::IN));
        assert!(!e.matches(&lower("example."), Rtype::A, Class::IN));
        assert_eq!(e.question_len(), want.len() + 4);
        // A full cache holds its capacity of these: no name-sized buffer
        // inline.
        assert!(
            std::mem::size_of::<Entry>() <= 128,
            "{} bytes",
            std::mem::size_of::<Entry>()
        );
    }

    #[test]
    fn entry_ttl_counts_down_in_whole_seconds() {
        let e = entry("a.example.");
        assert_eq!(e.ttl(0), 30);
        assert_eq!(e.ttl(999), 30);
        assert_eq!(e.ttl(1000), 29);
        assert_eq!(e.ttl(31_000), -1);
    }
}
