//! The answer memo: every worker thread keeps the replies the plugin built,
//! as wire bytes, so that the next identical question against the same
//! snapshot costs one table probe and one copy instead of a lookup.
//!
//! A reply depends only on the plugin instance (its options), the snapshot
//! it was built from, and the question's exact bytes (name as the client
//! spelled it, type, class): the header bits it copies from the query
//! (opcode, RD, CD) and the ID are put back from the new query on replay,
//! and nothing else of the request is read. So an entry is keyed by
//! `(instance, question bytes)` and carries the snapshot generation it was
//! built from; an entry of an older generation is never served. A changed
//! Service therefore answers from the next query on, exactly as without
//! the memo; every change of the index invalidates every entry of that
//! plugin instance at once (they are then rebuilt one query at a time).
//!
//! Layout, per thread, allocated on the first reply kept:
//! - a set-associative table of `SETS × WAYS` slots (16 bytes each, 64
//!   bytes a set), the set chosen by a seeded hash of the key, a 32-bit
//!   tag per slot to skip non-matching ways without touching the entry;
//! - a ring of `RING` bytes holding the entries back to back, addressed
//!   by a virtual offset that only grows: an entry is intact exactly while
//!   less than `RING` bytes were written after its start, so overwritten
//!   entries are recognised without scanning the table.
//!
//! Keeping and replaying copy bytes into memory allocated once; nothing
//! allocates, locks or blocks per query.

use std::cell::RefCell;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use clusterdns_contract::{Flow, Request, ResponseWriter};
use clusterdns_wire::HEADER_LEN;
use clusterdns_wire::header::{FLAG_CD, FLAG_RD, OPCODE_MASK};

/// Ways per set.
const WAYS: usize = 4;
/// Sets per thread (a power of two): 32,768 replies at most.
const SETS: usize = 8192;
/// Bytes of entries per thread.
const RING: usize = 4 << 20;
/// Replies longer than this are rebuilt every time (a headless Service
/// with many endpoints): copying them would gain little.
const MAX_REPLY: usize = 1500;
/// Entry header: instance (8), generation (8), stored length (4), kind (1),
/// padding (1), what name compression saved in the reply (2, for its
/// uncompressed length: the response size CoreDNS reports).
const ENTRY_HEAD: usize = 24;
/// The largest entry: header and the longest reply kept (its ID is not
/// stored), rounded up to the 8-byte alignment of entries.
const MAX_ENTRY: usize = (ENTRY_HEAD + MAX_REPLY - 2).next_multiple_of(8);
/// Header bits a reply copies from its query; replay takes them from the
/// new query.
const COPIED: u16 = OPCODE_MASK | FLAG_RD | FLAG_CD;

/// Kind byte: a reply (the message without its ID follows).
const KIND_REPLY: u8 = 1;
/// Kind byte: the plugin passed the query on (fallthrough); the question
/// follows at the same offset as in a reply, for the key check.
const KIND_NEXT: u8 = 2;

/// A process-wide unique number for each plugin instance, so that a
/// reloaded configuration (whose index counts generations from zero again)
/// never sees the replies of the one before.
pub(crate) fn instance_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

thread_local! {
    static MEMO: RefCell<Option<Box<Memo>>> = const { RefCell::new(None) };
}

#[cfg(test)]
thread_local! {
    static HITS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Replies this thread replayed so far (tests see whether a reply came
/// from the memo).
#[cfg(test)]
pub(crate) fn hits() -> u64 {
    HITS.with(|h| h.get())
}

/// Answers `req` from this thread's memo if it holds the reply for the same
/// instance, generation and question. `None`: not kept (build it).
pub(crate) fn replay(
    instance: u64,
    generation: u64,
    req: &Request<'_>,
    w: &mut ResponseWriter,
) -> Option<Flow> {
    MEMO.with(|m| {
        let m = m.try_borrow().ok()?;
        m.as_ref()?.replay(instance, generation, req, w)
    })
}

/// Keeps what the plugin did with `req`: the reply in `w` (`Flow::Answered`)
/// or the pass to the next plugin (`Flow::Next`). Anything else, and replies
/// that do not start with the query's exact question, are not kept.
pub(crate) fn keep(
    instance: u64,
    generation: u64,
    req: &Request<'_>,
    flow: &Flow,
    w: &ResponseWriter,
) {
    MEMO.with(|m| {
        let Ok(mut m) = m.try_borrow_mut() else {
            return;
        };
        m.get_or_insert_with(|| Box::new(Memo::new(SETS, RING)))
            .keep(instance, generation, req, flow, w);
    });
}

/// One way of a set, as stored in two words of [`Memo::slots`].
#[derive(Clone, Copy, Default)]
struct Slot {
    /// Virtual offset of the entry's end; 0: empty.
    end: u64,
    /// Entry length in the ring (header and padding included).
    size: u32,
    /// High bits of the key's hash.
    tag: u32,
}

impl Slot {
    fn from_words(end: u64, meta: u64) -> Slot {
        Slot {
            end,
            size: (meta >> 32) as u32,
            tag: meta as u32,
        }
    }

    fn meta(&self) -> u64 {
        u64::from(self.size) << 32 | u64::from(self.tag)
    }
}

/// One thread's memo.
pub(crate) struct Memo {
    /// Two words per slot (end, then size and tag), `WAYS` slots per set:
    /// plain zeroed words, so that the allocator hands out pages that
    /// become resident only when a set is first written.
    slots: Box<[u64]>,
    sets_mask: usize,
    /// The entries. Its capacity is the ring's size; it grows to that
    /// size as the first lap is written (reserved memory becomes resident
    /// only when written) and keeps it.
    ring: Vec<u8>,
    /// The ring's size.
    cap: usize,
    /// Virtual offset of the next entry.
    head: u64,
    hasher: foldhash::fast::RandomState,
}

impl Memo {
    /// A memo of `sets` sets (rounded up to a power of two) and `ring` bytes.
    pub(crate) fn new(sets: usize, ring: usize) -> Memo {
        let sets = sets.max(1).next_power_of_two();
        Memo {
            slots: vec![0u64; sets * WAYS * 2].into_boxed_slice(),
            sets_mask: sets - 1,
            ring: Vec::with_capacity(ring.max(MAX_ENTRY)),
            cap: ring.max(MAX_ENTRY),
            head: 0,
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    fn hash(&self, instance: u64, question: &[u8]) -> u64 {
        let mut h = self.hasher.build_hasher();
        h.write_u64(instance);
        h.write(question);
        h.finish()
    }

    /// Where the set of `hash` starts in [`Memo::slots`].
    fn set(&self, hash: u64) -> usize {
        (hash as usize & self.sets_mask) * WAYS * 2
    }

    /// The slots of the set starting at `at`.
    fn ways(&self, at: usize) -> [Slot; WAYS] {
        let w = &self.slots[at..at + WAYS * 2];
        std::array::from_fn(|i| Slot::from_words(w[2 * i], w[2 * i + 1]))
    }

    /// Whether the entry `s` points at is still whole in the ring.
    fn intact(&self, s: &Slot) -> bool {
        let start = s.end - u64::from(s.size);
        s.end != 0 && self.head - start <= self.cap as u64
    }

    /// The stored bytes of the entry `s` points at, if it is intact and
    /// belongs to `(instance, generation, question)`.
    fn entry(
        &self,
        s: &Slot,
        instance: u64,
        generation: u64,
        question: &[u8],
    ) -> Option<(u8, u16, &[u8])> {
        if !self.intact(s) {
            return None;
        }
        let at = ((s.end - u64::from(s.size)) % self.cap as u64) as usize;
        let e = self.ring.get(at..at + s.size as usize)?;
        let inst = u64::from_ne_bytes(e[0..8].try_into().ok()?);
        let gen_ = u64::from_ne_bytes(e[8..16].try_into().ok()?);
        let len = u32::from_ne_bytes(e[16..20].try_into().ok()?) as usize;
        let kind = e[20];
        let saved = u16::from_ne_bytes([e[22], e[23]]);
        if inst != instance || gen_ != generation {
            return None;
        }
        let body = e.get(ENTRY_HEAD..ENTRY_HEAD + len)?;
        // The question sits at offset 12 of the message, 10 of what is
        // stored (the message without its ID).
        let q = body.get(HEADER_LEN - 2..HEADER_LEN - 2 + question.len())?;
        (q == question).then_some((kind, saved, body))
    }

    pub(crate) fn replay(
        &self,
        instance: u64,
        generation: u64,
        req: &Request<'_>,
        w: &mut ResponseWriter,
    ) -> Option<Flow> {
        let question = req.query.question_bytes();
        let hash = self.hash(instance, question);
        let tag = (hash >> 32) as u32;
        let set = self.set(hash);
        let (kind, saved, body) = self
            .ways(set)
            .iter()
            .filter(|s| s.tag == tag)
            .find_map(|s| self.entry(s, instance, generation, question))?;
        #[cfg(test)]
        HITS.with(|h| h.set(h.get() + 1));
        if kind == KIND_NEXT {
            return Some(Flow::Next);
        }
        let q = req.query.header();
        let buf = w.replay_buffer();
        buf.clear();
        buf.extend_from_slice(&q.id.to_be_bytes());
        buf.extend_from_slice(body);
        let flags = u16::from_be_bytes([buf[2], buf[3]]);
        let flags = (flags & !COPIED) | (q.flags & COPIED);
        buf[2..4].copy_from_slice(&flags.to_be_bytes());
        w.set_compression_saved(usize::from(saved));
        Some(Flow::Answered)
    }

    pub(crate) fn keep(
        &mut self,
        instance: u64,
        generation: u64,
        req: &Request<'_>,
        flow: &Flow,
        w: &ResponseWriter,
    ) {
        let question = req.query.question_bytes();
        let q_at = HEADER_LEN..HEADER_LEN + question.len();
        let (kind, stored_len, saved) = match flow {
            Flow::Answered => {
                let msg = w.bytes();
                // Only built replies: their compression savings are known
                // (and below MAX_REPLY, so they fit the entry's two bytes).
                let Some(saved) = w.compression_saved().and_then(|n| u16::try_from(n).ok()) else {
                    return;
                };
                if w.may_have_opt() || msg.len() > MAX_REPLY || msg.get(q_at) != Some(question) {
                    return;
                }
                (KIND_REPLY, msg.len() - 2, saved)
            }
            Flow::Next => (KIND_NEXT, HEADER_LEN - 2 + question.len(), 0),
            _ => return,
        };
        let size = (ENTRY_HEAD + stored_len).next_multiple_of(8);
        let cap = self.cap as u64;
        // Entries never wrap around the ring's end.
        if self.head % cap + size as u64 > cap {
            self.head = self.head.next_multiple_of(cap);
        }
        let at = (self.head % cap) as usize;
        if self.ring.len() < at + size {
            // Within the capacity: no reallocation.
            self.ring.resize(at + size, 0);
        }
        let e = &mut self.ring[at..at + size];
        e[0..8].copy_from_slice(&instance.to_ne_bytes());
        e[8..16].copy_from_slice(&generation.to_ne_bytes());
        e[16..20].copy_from_slice(&(stored_len as u32).to_ne_bytes());
        e[20] = kind;
        e[22..24].copy_from_slice(&saved.to_ne_bytes());
        let body = &mut e[ENTRY_HEAD..ENTRY_HEAD + stored_len];
        match kind {
            KIND_REPLY => body.copy_from_slice(&w.bytes()[2..]),
            _ => {
                body[..HEADER_LEN - 2].fill(0);
                body[HEADER_LEN - 2..].copy_from_slice(question);
            }
        }
        self.head += size as u64;

        let hash = self.hash(instance, question);
        let tag = (hash >> 32) as u32;
        let set = self.set(hash);
        // The way that held this key, else an empty or overwritten one,
        // else the oldest.
        let slots = self.ways(set);
        let way = slots
            .iter()
            .position(|s| s.tag == tag && self.intact(s))
            .or_else(|| slots.iter().position(|s| !self.intact(s)))
            .unwrap_or_else(|| (0..WAYS).min_by_key(|&i| slots[i].end).unwrap_or(0));
        let new = Slot {
            end: self.head,
            size: size as u32,
            tag,
        };
        self.slots[set + 2 * way] = new.end;
        self.slots[set + 2 * way + 1] = new.meta();
    }
}

#[cfg(test)]
mod tests {
    use clusterdns_contract::testing;
    use clusterdns_wire::{Class, Name, Query, RData, Rtype, Section};

    use super::*;

    /// A query for `name` A with `id` and header `flags`.
    fn query(name: &str, id: u16, flags: u16) -> Vec<u8> {
        testing::query_with_header(name, Rtype::A, id, flags)
    }

    /// Builds a reply to `pkt` with `n` A records and keeps it.
    fn keep_reply(m: &mut Memo, inst: u64, generation: u64, pkt: &[u8], n: u8) -> Vec<u8> {
        let q = Query::parse(pkt).unwrap();
        let zone = Name::root();
        let req = testing::request(&q, &zone);
        let mut w = ResponseWriter::new();
        let mut b = w.reply(&req);
        b.set_aa(true);
        for i in 0..n {
            let owner = *q.qname();
            let ip = std::net::Ipv4Addr::new(10, 0, 0, i);
            b.push(Section::Answer, &owner, Class::IN, 5, &RData::A(ip))
                .unwrap();
        }
        b.finish();
        m.keep(inst, generation, &req, &Flow::Answered, &w);
        w.bytes().to_vec()
    }

    fn replay(m: &Memo, inst: u64, generation: u64, pkt: &[u8]) -> Option<(Flow, Vec<u8>)> {
        let q = Query::parse(pkt).unwrap();
        let zone = Name::root();
        let req = testing::request(&q, &zone);
        let mut w = ResponseWriter::new();
        let flow = m.replay(inst, generation, &req, &mut w)?;
        Some((flow, w.bytes().to_vec()))
    }

    #[test]
    fn replay_takes_id_and_copied_bits_from_the_new_query() {
        let mut m = Memo::new(16, 4096);
        let built = keep_reply(&mut m, 1, 7, &query("a.example.", 0x1111, 0x0100), 2);
        // Same question, other ID, RD off, CD on.
        let (flow, got) = replay(&m, 1, 7, &query("a.example.", 0x2222, 0x0010)).unwrap();
        assert!(matches!(flow, Flow::Answered));
        let mut want = built.clone();
        want[0..2].copy_from_slice(&0x2222u16.to_be_bytes());
        let flags = u16::from_be_bytes([want[2], want[3]]) & !COPIED | 0x0010;
        want[2..4].copy_from_slice(&flags.to_be_bytes());
        assert_eq!(got, want);
        assert_ne!(built[2..4], got[2..4], "RD/CD came from the new query");
    }

    #[test]
    fn only_the_same_instance_generation_and_exact_question_match() {
        let mut m = Memo::new(16, 4096);
        let pkt = query("a.example.", 1, 0x0100);
        keep_reply(&mut m, 1, 7, &pkt, 1);
        assert!(replay(&m, 1, 7, &pkt).is_some());
        assert!(replay(&m, 1, 8, &pkt).is_none(), "newer snapshot");
        assert!(replay(&m, 2, 7, &pkt).is_none(), "other instance");
        assert!(
            replay(&m, 1, 7, &query("A.example.", 1, 0x0100)).is_none(),
            "other case"
        );
        assert!(replay(&m, 1, 7, &query("b.example.", 1, 0x0100)).is_none());
    }

    #[test]
    fn next_is_kept_and_replayed_without_writing() {
        let mut m = Memo::new(16, 4096);
        let pkt = query("fall.example.", 1, 0x0100);
        let q = Query::parse(&pkt).unwrap();
        let zone = Name::root();
        let req = testing::request(&q, &zone);
        m.keep(1, 1, &req, &Flow::Next, &ResponseWriter::new());
        let (flow, bytes) = replay(&m, 1, 1, &pkt).unwrap();
        assert!(matches!(flow, Flow::Next));
        assert!(bytes.is_empty());
        // A reply that does not start with the question is not kept.
        let mut w = ResponseWriter::new();
        w.set_message(&query("other.example.", 1, 0x8000));
        m.keep(1, 1, &req, &Flow::Answered, &w);
        assert!(matches!(replay(&m, 1, 1, &pkt), Some((Flow::Next, _))));
    }

    /// With a ring a few entries long and one set, every replay is either
    /// a miss or exactly the reply kept for that question, however the
    /// ring wrapped and the ways were reused; the newest is always there.
    #[test]
    fn wrapping_and_eviction_never_return_another_reply() {
        let mut m = Memo::new(1, 600);
        let cap0 = m.ring.capacity();
        let mut kept: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for i in 0..200u32 {
            let pkt = query(&format!("n{i}.example."), 9, 0x0100);
            let reply = keep_reply(&mut m, 3, 1, &pkt, (i % 7) as u8);
            kept.push((pkt, reply));
            let newest = replay(&m, 3, 1, &kept[kept.len() - 1].0).map(|r| r.1);
            assert_eq!(newest.as_ref(), Some(&kept[kept.len() - 1].1), "entry {i}");
            for (pkt, reply) in &kept {
                if let Some((_, got)) = replay(&m, 3, 1, pkt) {
                    assert_eq!(&got, reply);
                }
            }
        }
        assert!(
            m.ring.len() <= m.cap && m.ring.capacity() == cap0,
            "never reallocated"
        );
        let live = kept
            .iter()
            .filter(|(p, _)| replay(&m, 3, 1, p).is_some())
            .count();
        assert!((1..=WAYS).contains(&live), "{live} live entries");
    }

    /// The longest reply kept fits a ring of the smallest size, and
    /// replaces whatever was there.
    #[test]
    fn the_longest_reply_fits_the_smallest_ring() {
        let mut m = Memo::new(1, 0);
        assert_eq!(m.cap, MAX_ENTRY);
        let small = query("s.example.", 1, 0x0100);
        keep_reply(&mut m, 1, 1, &small, 1);
        // 16 bytes per A record: grow the reply up to MAX_REPLY.
        let big = query("b.example.", 1, 0x0100);
        let base = keep_reply(&mut Memo::new(1, 1 << 16), 1, 1, &big, 0).len();
        let n = ((MAX_REPLY - base) / 16) as u8;
        let reply = keep_reply(&mut m, 1, 1, &big, n);
        assert!(
            reply.len() <= MAX_REPLY && reply.len() + 16 > MAX_REPLY,
            "{}",
            reply.len()
        );
        assert_eq!(replay(&m, 1, 1, &big).map(|r| r.1), Some(reply));
        assert!(replay(&m, 1, 1, &small).is_none(), "overwritten");
    }

    #[test]
    fn long_replies_are_not_kept() {
        let mut m = Memo::new(16, 1 << 16);
        let pkt = query("big.example.", 1, 0x0100);
        let reply = keep_reply(&mut m, 1, 1, &pkt, 120);
        assert!(reply.len() > MAX_REPLY);
        assert!(replay(&m, 1, 1, &pkt).is_none());
    }
}
