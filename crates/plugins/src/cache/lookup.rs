//! The hit path: finding a usable entry for a query and copying it into
//! the writer with the client's ID, question and flags and a TTL counted
//! down from the entry's store time.

use std::sync::Arc;

use clusterdns_contract::ResponseWriter;
use clusterdns_wire::Query;

use super::Inner;
use super::stale::LKG_TTL;
use super::store::{Entry, QUESTION, key};

/// What the hit path found.
pub(super) enum Found {
    /// Answered from a usable entry.
    Hit(Hit),
    /// Only an entry past its TTL that last-known-good may serve if the
    /// chain fails.
    Stale(Arc<Entry>),
    Miss,
}

/// What a hit looked like, for the counters.
pub(super) struct Hit {
    pub(super) denial: bool,
    pub(super) stale: bool,
    pub(super) refresh: Option<Arc<Entry>>,
    /// The entry's store time (the cache clock's ms) and TTL, when the
    /// reply is one that stays the same but for its counting TTLs until
    /// the entry expires ([`Stored`]): fresh, TTLs counting down (not
    /// `keepttl`), no prefetch counting hits, not a SERVFAIL (whose
    /// answer a fresh positive entry may take over).
    ///
    /// [`Stored`]: clusterdns_contract::Stored
    pub(super) stamp: Option<(u64, u32)>,
}

impl Inner {
    /// An entry usable at `now`: fresh, or stale within `serve_stale`.
    pub(super) fn usable(&self, e: &Entry, q: &Query<'_>, now: u64) -> Option<i64> {
        if !e.matches(q.qname_lower(), q.qtype(), q.qclass()) {
            return None;
        }
        let ttl = e.ttl(now);
        (ttl > 0 || (self.cfg.stale_s > 0 && -ttl < i64::from(self.cfg.stale_s))).then_some(ttl)
    }

    pub(super) fn key_of(q: &Query<'_>) -> u64 {
        key(
            q.qname_lower(),
            q.qtype(),
            q.qclass(),
            q.do_bit(),
            q.header().cd(),
        )
    }

    /// Copies the entry into the writer: the client's ID, question (its
    /// case) and flags, the entry's rcode, RA and AD, and the TTL.
    pub(super) fn write_hit(&self, e: &Entry, ttl: i64, q: &Query<'_>, w: &mut ResponseWriter) {
        // Entries are stored without their OPT (`Entry::build`).
        self.fill_hit(e, ttl, q, w.replay_buffer());
        w.set_compression_saved(e.saved);
    }

    fn fill_hit(&self, e: &Entry, ttl: i64, q: &Query<'_>, buf: &mut Vec<u8>) {
        buf.clear();
        buf.extend_from_slice(&e.msg);
        let qh = q.header();
        let ef = u16::from_be_bytes([buf[2], buf[3]]);
        let ad = if q.do_bit() || qh.ad() {
            ef & 0x0020
        } else {
            0
        };
        let flags = 0x8000
            | (qh.flags & 0x7800)
            | 0x0400
            | (qh.flags & 0x0100)
            | (ef & 0x0080)
            | ad
            | (qh.flags & 0x0010)
            | (ef & 0x000f);
        buf[0..2].copy_from_slice(&q.id().to_be_bytes());
        buf[2..4].copy_from_slice(&flags.to_be_bytes());
        let qb = q.question_bytes();
        if qb.len() == e.question_len()
            && let Some(dst) = buf.get_mut(QUESTION..QUESTION + qb.len())
        {
            dst.copy_from_slice(qb);
        }
        // A last-known-good answer has RFC 8767's TTL even with keepttl.
        if self.cfg.keepttl && (ttl > 0 || self.cfg.stale_s > 0) {
            return;
        }
        let out = if ttl > 0 {
            u32::try_from(ttl).unwrap_or(0)
        } else if self.cfg.stale_s > 0 {
            self.cfg.stale_ttl
        } else {
            LKG_TTL
        };
        let bytes = out.to_be_bytes();
        for &o in e.ttl_offs.iter() {
            let o = o as usize;
            if let Some(dst) = buf.get_mut(o..o + 4) {
                dst.copy_from_slice(&bytes);
            }
        }
    }

    /// The hit path: answers from an entry if one is usable.
    pub(super) fn lookup(&self, q: &Query<'_>, w: &mut ResponseWriter, now: u64) -> Found {
        let k = Self::key_of(q);
        // A cached SERVFAIL does not hide a good answer: a fresh one (as
        // CoreDNS) or one last-known-good may still fall back on.
        let pos_valid = || {
            self.pos
                .with(k, |e| {
                    (self.usable(e, q, now).is_some_and(|t| t > 0) || self.lkg_usable(e, q, now))
                        .then_some(())
                })
                .is_some()
        };
        type Served = Result<Hit, Arc<Entry>>;
        let serve = |e: &Arc<Entry>, denial: bool, w: &mut ResponseWriter| -> Option<Served> {
            let Some(ttl) = self.usable(e, q, now) else {
                return self.lkg_usable(e, q, now).then(|| Err(e.clone()));
            };
            if denial && e.servfail && pos_valid() {
                return None;
            }
            let stale = ttl <= 0;
            if stale && self.cfg.verify {
                // verify: ask upstream first; the response hook falls back.
                return None;
            }
            self.write_hit(e, ttl, q, w);
            let refresh = if stale || self.should_prefetch(e, ttl, now) {
                Some(e.clone())
            } else {
                None
            };
            let stamp = (!stale && !e.servfail && self.cfg.prefetch == 0 && !self.cfg.keepttl)
                .then(|| (e.stored_at(), e.orig_ttl));
            Some(Ok(Hit {
                denial,
                stale,
                refresh,
                stamp,
            }))
        };
        let neg = match self.neg.with(k, |e| serve(e, true, w)) {
            Some(Ok(h)) => return Found::Hit(h),
            Some(Err(e)) => Some(e),
            None => None,
        };
        let pos = match self.pos.with(k, |e| serve(e, false, w)) {
            Some(Ok(h)) => return Found::Hit(h),
            Some(Err(e)) => Some(e),
            None => None,
        };
        // Of two expired answers, the later one.
        match (neg, pos) {
            (Some(n), Some(p)) => Found::Stale(if n.stored_at() > p.stored_at() { n } else { p }),
            (Some(e), None) | (None, Some(e)) => Found::Stale(e),
            (None, None) => Found::Miss,
        }
    }
}
