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
    /// When it was stored (clock milliseconds); moved on in place when
    /// the same reply is stored again ([`Entry::renew`]).
    pub stored_ms: AtomicU64,
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
        let mut bytes = Vec::new();
        wire(layout, ttl, &mut bytes)?;
        let (qname, qtype, qclass) = layout.question;
        let saved = clusterdns_wire::uncompressed_len(&bytes)?.saturating_sub(bytes.len());
        Some(Entry {
            saved,
            qlen: u16::try_from(qname.len() + 4).ok()?,
            qtype: *qtype,
            qclass: *qclass,
            servfail: layout.msg.header().rcode_low() == 2,
            msg: bytes.into_boxed_slice(),
            ttl_offs: layout.ttl_offs.into(),
            stored_ms: AtomicU64::new(now_ms),
            orig_ttl: ttl,
            hits: AtomicU32::new(0),
            window_ms: AtomicU64::new(now_ms),
            refreshing: AtomicBool::new(false),
            lkg_retry_ms: AtomicU64::new(0),
        })
    }

    /// Stores the reply of `layout` again at `now_ms` in place when it is
    /// the one this entry holds (its ID aside) with the same TTL: what a
    /// new entry would be, without building and inserting one. Under
    /// *autopath* every name of a walk's search path that is no name is
    /// such a reply (kubernetes' NXDOMAIN, stored for 5 s), asked again
    /// whenever its entry runs out. `scratch` is the caller's reused
    /// buffer. Returns whether the entry was renewed.
    pub(crate) fn renew(
        &self,
        layout: &Layout<'_>,
        ttl: u32,
        now_ms: u64,
        scratch: &mut Vec<u8>,
    ) -> bool {
        let (_, qtype, qclass) = layout.question;
        if self.orig_ttl != ttl || self.qtype != *qtype || self.qclass != *qclass {
            return false;
        }
        scratch.clear();
        // The entry's ID is the first reply's; a hit writes the client's.
        if wire(layout, ttl, scratch).is_none()
            || scratch.len() != self.msg.len()
            || scratch.get(2..) != self.msg.get(2..)
        {
            return false;
        }
        self.stored_ms.store(now_ms, Ordering::Relaxed);
        self.hits.store(0, Ordering::Relaxed);
        self.window_ms.store(now_ms, Ordering::Relaxed);
        self.lkg_retry_ms.store(0, Ordering::Relaxed);
        true
    }

    /// When it was last stored (clock milliseconds).
    pub(crate) fn stored_at(&self) -> u64 {
        self.stored_ms.load(Ordering::Relaxed)
    }

    /// Seconds of TTL left at `now_ms` (negative once expired).
    pub(crate) fn ttl(&self, now_ms: u64) -> i64 {
        let elapsed = now_ms.saturating_sub(self.stored_at()) / 1000;
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

/// The bytes of an entry for the reply of `layout` into `out` (empty):
/// without its OPT (which must be the last record, else `None`), every
/// TTL set to `ttl`, no TC bit, the question's name lowercase.
fn wire(layout: &Layout<'_>, ttl: u32, out: &mut Vec<u8>) -> Option<()> {
    let m = layout.msg;
    let (qname, _, _) = layout.question;
    let h = m.header();
    let (end, arcount) = match (layout.opts, layout.opt_at) {
        (0, _) => (m.len(), h.arcount),
        (1, Some(at)) => (at, h.arcount.checked_sub(1)?),
        _ => return None,
    };
    out.extend_from_slice(m.as_bytes().get(..end)?);
    out.get_mut(10..12)?.copy_from_slice(&arcount.to_be_bytes());
    // No truncation bit in a cached reply.
    out[2] &= !0x02;
    for &o in layout.ttl_offs {
        let o = o as usize;
        out.get_mut(o..o + 4)?.copy_from_slice(&ttl.to_be_bytes());
    }
    // The question's name follows the header uncompressed (a pointer
    // could only point into the header, which the parser refuses);
    // lowercased in place, it is the entry's own copy of the name.
    let name = out.get_mut(QUESTION..QUESTION + qname.len())?;
    if !name.eq_ignore_ascii_case(qname.as_wire()) {
        return None;
    }
    name.make_ascii_lowercase();
    Some(())
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
        let pkt = clusterdns_contract::testing::query(name, Rtype::A);
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

    /// Only the reply an entry holds, with its TTL, renews it; another
    /// reply, TTL, type or a different answer leaves it as it was.
    #[test]
    fn an_entry_is_renewed_only_by_its_own_reply() {
        let reply = |name: &str, id: u16, ttl: u32, ip: [u8; 4]| {
            let pkt = clusterdns_contract::testing::query(name, Rtype::A);
            let q = clusterdns_wire::Query::parse(&pkt).expect("query");
            let mut msg = Vec::new();
            let mut b = clusterdns_wire::MessageBuilder::reply_to(&q, &mut msg);
            let a = clusterdns_wire::RData::A(ip.into());
            b.push(
                clusterdns_wire::Section::Answer,
                q.qname(),
                Class::IN,
                ttl,
                &a,
            )
            .expect("a");
            b.finish();
            msg[0..2].copy_from_slice(&id.to_be_bytes());
            msg
        };
        let layout_of = |msg: &[u8], f: &mut dyn FnMut(&Layout<'_>)| {
            let m = Message::parse(msg).expect("reply");
            let q = m.question().expect("question");
            let offs: Vec<u32> = m.heads().map(|r| r.ttl_offset as u32).collect();
            f(&Layout {
                msg: &m,
                question: &q,
                ttl_offs: &offs,
                opt_at: None,
                opts: 0,
            });
        };
        let mut e = None;
        layout_of(&reply("a.example.", 1, 60, [192, 0, 2, 1]), &mut |l| {
            e = Entry::build(l, 30, 0);
        });
        let e = e.expect("entry");
        let mut scratch = Vec::new();
        let mut renews = |msg: &[u8], ttl: u32, now: u64| {
            let mut r = false;
            layout_of(msg, &mut |l| r = e.renew(l, ttl, now, &mut scratch));
            r
        };
        // Another ID, another TTL in the reply and the name's case: the
        // same entry.
        assert!(renews(
            &reply("A.Example.", 7, 45, [192, 0, 2, 1]),
            30,
            1_000
        ));
        assert!(!renews(
            &reply("a.example.", 1, 60, [192, 0, 2, 2]),
            30,
            2_000
        ));
        assert!(!renews(
            &reply("a.example.", 1, 60, [192, 0, 2, 1]),
            29,
            3_000
        ));
        assert!(!renews(
            &reply("b.example.", 1, 60, [192, 0, 2, 1]),
            30,
            4_000
        ));
        assert_eq!(e.stored_at(), 1_000);
        assert_eq!(e.ttl(1_000), 30);
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
