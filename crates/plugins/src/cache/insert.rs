//! The miss path: a reply the chain wrote becomes an entry (CoreDNS's
//! cache `ResponseWriter.WriteMsg` and `set`), with the TTL and
//! cacheability rules CoreDNS applies, and the reply itself gets the
//! cached TTLs.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use clusterdns_contract::ResponseWriter;
use clusterdns_contract::response::Kind;
use clusterdns_wire::{Class, Message, Name, Query, Rtype};

use super::metrics::Handles;
use super::stale::LKG_RECHECK_MS;
use super::store::{Entry, Layout};
use super::{Inner, matches_any};

thread_local! {
    /// The TTL offsets of the reply being stored (reused: no allocation
    /// per store once grown).
    static TTL_OFFS: std::cell::Cell<Vec<u32>> = const { std::cell::Cell::new(Vec::new()) };
    /// The entry a store would build, to compare with the one it would
    /// replace ([`Entry::renew`]).
    static RENEW: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// CoreDNS `computeTTL`: raised to the minimum, then capped at the
/// maximum (so `cache 1` gives 1s even with the default minimum of 5s).
fn clamp(ttl: u32, min: u32, max: u32) -> u32 {
    ttl.max(min).min(max)
}

/// Whether the answer section answers the question (CoreDNS's cache
/// `answersQuestion`): for ANY a record at the name, for CNAME a single
/// CNAME target, otherwise a record of the type at the end of the CNAME
/// chain from the name; records count only in the question's class (any
/// class for a question of class ANY). A chain with a loop or an owner
/// with two targets answers nothing. Runs on the miss path only.
pub(super) fn answers_question(m: &Message<'_>, question: &(Name, Rtype, Class)) -> bool {
    let (qname, qtype, qclass) = (&question.0, question.1, question.2);
    let class_ok = |c: Class| qclass == Class::ANY || c == qclass;
    let ancount = usize::from(m.header().ancount);
    // Without a CNAME among the answers (nearly every reply) the chain
    // ends at the name itself: nothing decoded, the owners compared in
    // place, nothing collected.
    let chain = m
        .heads()
        .take(ancount)
        .any(|r| r.rtype == Rtype::CNAME && class_ok(r.class));
    if !chain {
        return qtype != Rtype::CNAME
            && m.heads().take(ancount).any(|r| {
                class_ok(r.class)
                    && (qtype == Rtype::ANY || r.rtype == qtype)
                    && r.owner_is(m, qname)
            });
    }
    let answers: Vec<_> = m
        .section(clusterdns_wire::Section::Answer)
        .filter(|r| class_ok(r.class))
        .collect();
    if answers.is_empty() {
        return false;
    }
    if qtype == Rtype::ANY {
        return answers.iter().any(|r| r.name.eq_ignore_case(qname));
    }
    // The one CNAME target of `owner`: Ok(None) at the chain's end,
    // Err(()) for two distinct targets.
    let target = |owner: &Name| -> Result<Option<Name>, ()> {
        let mut found: Option<Name> = None;
        for r in answers
            .iter()
            .filter(|r| r.rtype == Rtype::CNAME && r.name.eq_ignore_case(owner))
        {
            let Ok(rec) = r.to_owned_record(m) else {
                return Err(());
            };
            let clusterdns_wire::RecordData::Cname(t) = rec.data else {
                return Err(());
            };
            match &found {
                Some(f) if !f.eq_ignore_case(&t) => return Err(()),
                _ => found = Some(t),
            }
        }
        Ok(found)
    };
    if qtype == Rtype::CNAME {
        return matches!(target(qname), Ok(Some(_)));
    }
    let mut name = *qname;
    let mut visited: Vec<Name> = Vec::new();
    loop {
        if visited.iter().any(|v| v.eq_ignore_case(&name)) {
            return false;
        }
        visited.push(name);
        match target(&name) {
            Err(()) => return false,
            Ok(None) => break,
            Ok(Some(t)) => name = t,
        }
    }
    answers
        .iter()
        .any(|r| r.rtype == qtype && r.name.eq_ignore_case(&name))
}

/// CoreDNS `dnsutil.MinimalTTL`; `min` is the smallest TTL of the
/// records but OPT (capped at 3600), found by the store's walk over them.
fn minimal_ttl(m: &Message<'_>, kind: Kind, min: u32) -> u32 {
    const DEFAULT: u32 = 5;
    if !matches!(kind, Kind::NoError | Kind::NameError | Kind::NoData) {
        return DEFAULT;
    }
    let h = m.header();
    let only_opt = h.arcount == 0 || (h.arcount == 1 && m.opt().is_some());
    if h.ancount == 0 && h.nscount == 0 && only_opt {
        return DEFAULT;
    }
    min
}

impl Inner {
    /// Stores a reply (CoreDNS `ResponseWriter.WriteMsg`). Unless this
    /// is a background refresh, the reply in `buf` gets the cached TTL
    /// on every record, loses its OPT (the server mirrors the client's)
    /// and its AD bit unless the client set DO or AD; the writer then
    /// knows when it has no OPT record, and what compression saved in it
    /// when it became an entry (the entry's own figure: the reply is the
    /// entry but for its ID, flags and TTLs), so that the response size
    /// the outer plugins report needs no walk over it.
    pub(super) fn store(&self, q: &Query<'_>, w: &mut ResponseWriter, h: &Handles, refresh: bool) {
        let buf = w.buffer_mut();
        let Ok(m) = Message::parse(buf) else {
            return;
        };
        let hdr = m.header();
        let mut kind = Kind::of(&m);
        let question = m.question();
        // One walk over the records for everything below: the TTL fields
        // (the entry's and the reply's), the OPT and the smallest TTL.
        let mut offs = TTL_OFFS.take();
        offs.clear();
        let mut opt_at: Option<usize> = None;
        let mut opts = 0;
        let mut min_ttl = 3600;
        for r in m.heads() {
            if r.rtype == Rtype::OPT {
                opts += 1;
                if r.rdata.end == m.len() {
                    opt_at = r.ttl_offset.checked_sub(5);
                }
            } else {
                min_ttl = r.ttl.min(min_ttl);
                // A message is at most 64 KiB: every offset fits.
                offs.push(u32::try_from(r.ttl_offset).unwrap_or(u32::MAX));
            }
        }
        // CoreDNS 1.14 caches a NOERROR reply with answers only if they
        // answer the question (its type and class at the end of the CNAME
        // chain); one that does not is NODATA when an SOA bounds it, else
        // not cached (RFC 2308 §5), so the next query goes upstream again.
        let mut non_answer = false;
        if matches!(kind, Kind::NoError)
            && hdr.ancount > 0
            && !question.as_ref().is_some_and(|qu| answers_question(&m, qu))
        {
            let soa = m
                .heads()
                .any(|r| r.section == clusterdns_wire::Section::Authority && r.rtype == Rtype::SOA);
            if soa {
                kind = Kind::NoData;
            } else {
                non_answer = true;
            }
        }
        let msg_ttl = minimal_ttl(&m, kind, min_ttl);
        let duration = match kind {
            Kind::NameError | Kind::NoData => clamp(msg_ttl, self.cfg.minnttl, self.cfg.nttl),
            Kind::ServerError => self.cfg.failttl,
            _ => clamp(msg_ttl, self.cfg.minpttl, self.cfg.pttl),
        };
        let cacheable = !hdr.tc()
            && !non_answer
            && !matches!(kind, Kind::OtherError | Kind::Meta | Kind::Update);
        let mut saved = None;
        if cacheable && duration > 0 {
            let same_question = hdr.qdcount == 1
                && question
                    .as_ref()
                    .is_some_and(|(n, t, _)| n.eq_ignore_case(q.qname_lower()) && *t == q.qtype());
            if let (true, Some(question)) = (same_question, &question) {
                let layout = Layout {
                    msg: &m,
                    question,
                    ttl_offs: &offs,
                    opt_at,
                    opts,
                };
                saved = self.set(q, &layout, kind, duration, h, refresh);
            } else {
                h.drops.inc();
            }
        }
        if refresh {
            TTL_OFFS.set(offs);
            return;
        }
        let bytes = duration.to_be_bytes();
        for &o in &offs {
            let o = o as usize;
            if let Some(dst) = buf.get_mut(o..o + 4) {
                dst.copy_from_slice(&bytes);
            }
        }
        TTL_OFFS.set(offs);
        if let Some(at) = opt_at {
            buf.truncate(at);
            let ar = hdr.arcount.saturating_sub(1);
            buf[10..12].copy_from_slice(&ar.to_be_bytes());
        }
        if !q.do_bit() && !q.header().ad() {
            buf[3] &= !0x20;
        }
        if opts == 0 || (opts == 1 && opt_at.is_some()) {
            w.opt_removed();
        }
        if let Some(saved) = saved {
            w.set_compression_saved(saved);
        }
    }

    fn set(
        &self,
        q: &Query<'_>,
        layout: &Layout<'_>,
        kind: Kind,
        ttl: u32,
        h: &Handles,
        refresh: bool,
    ) -> Option<usize> {
        let name = q.qname_lower();
        let positive = matches!(kind, Kind::NoError | Kind::Delegation);
        let except = if positive {
            &self.cfg.pexcept
        } else {
            &self.cfg.nexcept
        };
        if matches_any(except, name) {
            return None;
        }
        let now = self.clock.now_ms();
        let k = Self::key_of(q);
        if matches!(kind, Kind::ServerError) && self.lkg_on() {
            // A failure does not replace a good answer last-known-good may
            // still need; it starts the entry's recheck timer instead.
            let good = |e: &Arc<Entry>| {
                let fresh_good =
                    !e.servfail && e.ttl(now) > 0 && e.matches(name, q.qtype(), q.qclass());
                (fresh_good || self.lkg_usable(e, q, now)).then(|| e.clone())
            };
            if let Some(e) = self.pos.with(k, good).or_else(|| self.neg.with(k, good)) {
                e.lkg_retry_ms
                    .store(now + LKG_RECHECK_MS, Ordering::Relaxed);
                return None;
            }
        }
        let store = if positive { &self.pos } else { &self.neg };
        let mut scratch = RENEW.take();
        let renewed = store.with(k, |e| {
            e.renew(layout, ttl, now, &mut scratch).then_some(e.saved)
        });
        RENEW.set(scratch);
        if renewed.is_some() {
            if positive && refresh {
                self.neg.remove(k);
            }
            return renewed;
        }
        let e = Entry::build(layout, ttl, now)?;
        let saved = e.saved;
        if positive {
            if self.pos.insert(k, e) {
                h.evict_success.inc();
            }
            if refresh {
                self.neg.remove(k);
            }
        } else if self.neg.insert(k, e) {
            h.evict_denial.inc();
        }
        h.entries_success.set(self.pos.len() as f64);
        h.entries_denial.set(self.neg.len() as f64);
        Some(saved)
    }
}
