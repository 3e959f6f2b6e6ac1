#![doc = include_str!("README.md")]

mod metrics;
mod setup;
mod store;

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use clusterdns_plugin::response::Kind;
use clusterdns_plugin::{
    ChainTail, Flow, Outcome, Plugin, PluginDef, Request, ResponseWriter, StoreHits, Stored,
};
use clusterdns_wire::{Class, Message, Name, Query, Rcode, Rtype};

use metrics::{Handles, Metrics};
use store::{Entry, Layout, QUESTION, Store, key};

thread_local! {
    /// The TTL offsets of the reply being stored (reused: no allocation
    /// per store once grown).
    static TTL_OFFS: std::cell::Cell<Vec<u32>> = const { std::cell::Cell::new(Vec::new()) };
    /// The entry a store would build, to compare with the one it would
    /// replace ([`Entry::renew`]).
    static RENEW: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Registration of *cache*.
pub const DEF: PluginDef = PluginDef {
    name: "cache",
    setup: setup::setup,
};

/// Milliseconds on a monotonic clock; tests substitute their own.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current time in milliseconds since an arbitrary start.
    fn now_ms(&self) -> u64;

    /// The time `t` on the same scale: the hit path passes the query's
    /// arrival, which the server read already, rather than read the clock
    /// again for each query of an autopath walk. A clock of its own
    /// (tests') ignores `t`.
    fn at_ms(&self, t: Instant) -> u64 {
        let _ = t;
        self.now_ms()
    }

    /// The instant of `ms` on this clock, when it is the monotonic one:
    /// a hit tells its entry's store time by it ([`Stored`]). A clock of
    /// its own (tests') has none, and its hits are not marked.
    fn instant_of(&self, ms: u64) -> Option<Instant> {
        let _ = ms;
        None
    }
}

/// The process's monotonic clock.
#[derive(Debug)]
pub struct MonotonicClock(Instant);

impl Default for MonotonicClock {
    fn default() -> Self {
        Self(Instant::now())
    }
}

impl Clock for MonotonicClock {
    fn now_ms(&self) -> u64 {
        self.at_ms(Instant::now())
    }

    fn at_ms(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.0).as_millis()).unwrap_or(u64::MAX)
    }

    // Whole milliseconds from the start: the seconds elapsed from this
    // instant to `t` are exactly those `Entry::ttl` counts at `at_ms(t)`.
    fn instant_of(&self, ms: u64) -> Option<Instant> {
        self.0.checked_add(std::time::Duration::from_millis(ms))
    }
}

/// Last-known-good defaults (RFC 8767 §5): the longest an entry may be
/// served past its TTL, one day (the RFC suggests one to three).
pub(crate) const LKG_MAX_AGE_S: u32 = 86_400;
/// The client-response timer: RFC 8767's 1.8 s, before the usual 2 s
/// client timeout.
pub(crate) const LKG_WAIT_MS: u64 = 1_800;
/// The TTL of a stale answer (RFC 8767 §4: 30 s).
const LKG_TTL: u32 = 30;
/// After a failed attempt the stale answer is served without asking the
/// chain again for this long (RFC 8767 §4's failure recheck timer).
const LKG_RECHECK_MS: u64 = 30_000;

/// The cache's settings, CoreDNS's defaults in [`Config::default`].
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub zones: Vec<Name>,
    pub pcap: usize,
    pub ncap: usize,
    pub pttl: u32,
    pub minpttl: u32,
    pub nttl: u32,
    pub minnttl: u32,
    pub failttl: u32,
    pub prefetch: u32,
    pub prefetch_window_ms: u64,
    pub percentage: u32,
    pub stale_s: u32,
    pub stale_ttl: u32,
    pub verify: bool,
    pub keepttl: bool,
    /// Last-known-good: how long past its TTL an entry may still answer
    /// when the chain behind fails (0: off). Only without `serve_stale`.
    pub lkg_s: u32,
    /// Last-known-good: the client-response timer, how long a query for
    /// an expired entry waits for the chain before the stale answer goes.
    pub lkg_wait_ms: u64,
    pub pexcept: Vec<Name>,
    pub nexcept: Vec<Name>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            zones: vec![Name::root()],
            pcap: 10_000,
            ncap: 10_000,
            pttl: 3600,
            minpttl: 5,
            nttl: 1800,
            minnttl: 5,
            failttl: 5,
            prefetch: 0,
            prefetch_window_ms: 60_000,
            percentage: 10,
            stale_s: 0,
            stale_ttl: 0,
            verify: false,
            keepttl: false,
            lkg_s: LKG_MAX_AGE_S,
            lkg_wait_ms: LKG_WAIT_MS,
            pexcept: Vec::new(),
            nexcept: Vec::new(),
        }
    }
}

struct Inner {
    cfg: Config,
    pos: Store,
    neg: Store,
    clock: Arc<dyn Clock>,
    metrics: Metrics,
    tail: ChainTail,
    rt: OnceLock<tokio::runtime::Handle>,
}

/// The *cache* handler.
pub struct Cache {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("cfg", &self.inner.cfg)
            .field("pos", &self.inner.pos)
            .field("neg", &self.inner.neg)
            .finish_non_exhaustive()
    }
}

/// What the hit path found.
enum Found {
    /// Answered from a usable entry.
    Hit(Hit),
    /// Only an entry past its TTL that last-known-good may serve if the
    /// chain fails.
    Stale(Arc<Entry>),
    Miss,
}

/// The query's note for the asynchronous pass: the entry to fall back on.
struct Fallback(Arc<Entry>);

/// What a hit looked like, for the counters.
struct Hit {
    denial: bool,
    stale: bool,
    refresh: Option<Arc<Entry>>,
    /// The entry's store time (the cache clock's ms) and TTL, when the
    /// reply is one that stays the same but for its counting TTLs until
    /// the entry expires ([`Stored`]): fresh, TTLs counting down (not
    /// `keepttl`), no prefetch counting hits, not a SERVFAIL (whose
    /// answer a fresh positive entry may take over).
    stamp: Option<(u64, u32)>,
}

fn matches_any(zones: &[Name], name: &Name) -> bool {
    zones.iter().any(|z| name.ends_with(z))
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
fn answers_question(m: &Message<'_>, question: &(Name, Rtype, Class)) -> bool {
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
    fn in_zone(&self, name: &Name) -> bool {
        matches_any(&self.cfg.zones, name)
    }

    /// An entry usable at `now`: fresh, or stale within `serve_stale`.
    fn usable(&self, e: &Entry, q: &Query<'_>, now: u64) -> Option<i64> {
        if !e.matches(q.qname_lower(), q.qtype(), q.qclass()) {
            return None;
        }
        let ttl = e.ttl(now);
        (ttl > 0 || (self.cfg.stale_s > 0 && -ttl < i64::from(self.cfg.stale_s))).then_some(ttl)
    }

    /// Whether last-known-good is on: it gives way to an explicit
    /// `serve_stale`, which keeps CoreDNS's semantics.
    fn lkg_on(&self) -> bool {
        self.cfg.lkg_s > 0 && self.cfg.stale_s == 0
    }

    /// An expired entry last-known-good may fall back on at `now`: a good
    /// answer (not a SERVFAIL) expired for less than the maximum age.
    fn lkg_usable(&self, e: &Entry, q: &Query<'_>, now: u64) -> bool {
        if !self.lkg_on() || e.servfail || !e.matches(q.qname_lower(), q.qtype(), q.qclass()) {
            return false;
        }
        let ttl = e.ttl(now);
        ttl <= 0 && -ttl < i64::from(self.cfg.lkg_s)
    }

    fn key_of(q: &Query<'_>) -> u64 {
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
    fn write_hit(&self, e: &Entry, ttl: i64, q: &Query<'_>, w: &mut ResponseWriter) {
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

    /// Counts a hit for prefetch and says whether to refresh now.
    fn should_prefetch(&self, e: &Entry, ttl: i64, now: u64) -> bool {
        if self.cfg.prefetch == 0 {
            return false;
        }
        let start = e.window_ms.load(Ordering::Relaxed);
        let hits = if now.saturating_sub(start) > self.cfg.prefetch_window_ms {
            e.window_ms.store(now, Ordering::Relaxed);
            e.hits.store(1, Ordering::Relaxed);
            1
        } else {
            e.hits.fetch_add(1, Ordering::Relaxed).saturating_add(1)
        };
        let threshold = (u64::from(self.cfg.percentage) * u64::from(e.orig_ttl)).div_ceil(100);
        hits >= self.cfg.prefetch && ttl <= i64::try_from(threshold).unwrap_or(i64::MAX)
    }

    /// The hit path: answers from an entry if one is usable.
    fn lookup(&self, q: &Query<'_>, w: &mut ResponseWriter, now: u64) -> Found {
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

    /// Stores a reply (CoreDNS `ResponseWriter.WriteMsg`). Unless this
    /// is a background refresh, the reply in `buf` gets the cached TTL
    /// on every record, loses its OPT (the server mirrors the client's)
    /// and its AD bit unless the client set DO or AD; the writer then
    /// knows when it has no OPT record, and what compression saved in it
    /// when it became an entry (the entry's own figure: the reply is the
    /// entry but for its ID, flags and TTLs), so that the response size
    /// the outer plugins report needs no walk over it.
    fn store(&self, q: &Query<'_>, w: &mut ResponseWriter, h: &Handles, refresh: bool) {
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

    /// Re-runs the rest of the chain for this query in the background and
    /// stores the reply (prefetch, serve_stale). One refresh per entry.
    fn refresh(self: &Arc<Self>, req: &Request<'_>, e: Arc<Entry>, h: &Handles) {
        if e.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let (Some(rt), Some(_)) = (self.rt.get(), self.tail.get()) else {
            e.refreshing.store(false, Ordering::Release);
            return;
        };
        h.prefetch.inc();
        let inner = self.clone();
        let packet = req.query.raw().to_vec();
        let (client, local, proto, zone) = (req.client, req.local, req.proto, *req.zone);
        let server = req.server.to_string();
        rt.spawn(async move {
            if let (Ok(q), Some(tail)) = (Query::parse(&packet), inner.tail.get()) {
                let r = Request {
                    query: &q,
                    client,
                    local,
                    proto,
                    zone: &zone,
                    server: &server,
                    received: Instant::now(),
                    edits: Default::default(),
                };
                let mut w = ResponseWriter::new();
                let outcome = tail.run_async(&r, &mut w).await;
                if outcome.error.is_none() && !w.written_by_server() && !w.is_per_client() {
                    inner.metrics.with(&server, |h| {
                        inner.store(&q, &mut w, h, true);
                    });
                }
            }
            e.refreshing.store(false, Ordering::Release);
        });
    }

    /// serve_stale verify: the refresh failed, so answer from the stale
    /// entry if there is one.
    fn verify_fallback(&self, q: &Query<'_>, w: &mut ResponseWriter, h: &Handles) -> bool {
        let now = self.clock.now_ms();
        let k = Self::key_of(q);
        let fallback = |e: &Arc<Entry>, w: &mut ResponseWriter| {
            let ttl = self.usable(e, q, now)?;
            self.write_hit(e, ttl, q, w);
            Some(())
        };
        let served = self.neg.with(k, |e| fallback(e, w)).is_some()
            || self.pos.with(k, |e| fallback(e, w)).is_some();
        if served {
            h.served_stale.inc();
        }
        served
    }

    /// Last-known-good for a query whose only entry is past its TTL: the
    /// chain behind runs, bounded by the client-response timer; its answer
    /// goes to the client and the cache unless it failed (an error, or any
    /// rcode but NOERROR and NXDOMAIN) or the timer fired, and then the
    /// stale entry answers with a 30 s TTL (RFC 8767). After a timeout the
    /// chain is asked again in the background to refresh the entry.
    async fn last_known_good(
        self: &Arc<Self>,
        req: &Request<'_>,
        w: &mut ResponseWriter,
        e: Arc<Entry>,
    ) -> Flow {
        let Some(tail) = self.tail.get() else {
            return Flow::Next;
        };
        let wait = std::time::Duration::from_millis(self.cfg.lkg_wait_ms);
        let outcome = tokio::time::timeout(wait, tail.run_async(req, w)).await;
        self.lkg_finish(req, w, e, outcome.ok());
        Flow::Answered
    }

    /// [`Inner::last_known_good`] on the receiving thread, when the chain
    /// behind answers without I/O (kubernetes' NXDOMAIN for a search-path
    /// name whose 5 s entry ran out, the most frequent expiry under
    /// autopath): no task, no timer, which could not fire anyway. `None`
    /// when a plugin behind needs the asynchronous path: what ran had no
    /// side effects, and [`Inner::last_known_good`] asks again.
    fn last_known_good_sync(
        self: &Arc<Self>,
        req: &Request<'_>,
        w: &mut ResponseWriter,
        e: &Arc<Entry>,
    ) -> Option<Flow> {
        let tail = self.tail.get()?;
        match tail.run_sync(req, w) {
            Ok(outcome) => {
                self.lkg_finish(req, w, e.clone(), Some(outcome));
                Some(Flow::Answered)
            }
            Err(_) => {
                w.forget_note();
                None
            }
        }
    }

    /// The end of last-known-good: the chain's answer (`outcome`; `None`
    /// when the timer fired) or the stale entry.
    fn lkg_finish(
        self: &Arc<Self>,
        req: &Request<'_>,
        w: &mut ResponseWriter,
        e: Arc<Entry>,
        outcome: Option<Outcome>,
    ) {
        let now = self.clock.now_ms();
        match outcome {
            Some(o)
                if o.error.is_none() && matches!(w.rcode(), Rcode::NOERROR | Rcode::NXDOMAIN) =>
            {
                self.metrics.with(req.server, |h| {
                    h.requests.inc();
                    h.misses.inc();
                    if !w.written_by_server() && !w.is_per_client() {
                        self.store(req.query, w, h, false);
                    }
                });
            }
            Some(_) => {
                e.lkg_retry_ms
                    .store(now + LKG_RECHECK_MS, Ordering::Relaxed);
                self.serve_stale(req, w, &e);
            }
            None => {
                self.serve_stale(req, w, &e);
                self.metrics
                    .with(req.server, |h| self.refresh(req, e.clone(), h));
            }
        }
    }

    /// Writes the expired entry as the answer, and counts it.
    fn serve_stale(&self, req: &Request<'_>, w: &mut ResponseWriter, e: &Entry) {
        w.clear();
        self.write_hit(e, 0, req.query, w);
        self.metrics.with(req.server, |h| {
            h.requests.inc();
            h.served_stale.inc();
        });
    }
}

/// A request answered from the store: a hit of its kind.
fn count_hit(h: &Handles, denial: bool) {
    h.requests.inc();
    if denial {
        h.hits_denial.inc();
    } else {
        h.hits_success.inc();
    }
}

/// An autopath walk kept from hits is served again without asking the
/// cache; it counts each hit through this.
impl StoreHits for Inner {
    fn count_hit(&self, server: &str, denial: bool) {
        self.metrics.with(server, |h| count_hit(h, denial));
    }
}

impl Plugin for Cache {
    fn name(&self) -> &'static str {
        "cache"
    }

    fn edit(&self, req: &Request<'_>) {
        req.edits.detach();
    }

    fn query(&self, req: &Request<'_>, w: &mut ResponseWriter) -> Flow {
        // CoreDNS's cache passes on a copy of the query: what the plugins
        // behind it change (header's query rules) the server never sees.
        req.edits.detach();
        let inner = &self.inner;
        if !inner.in_zone(req.qname_lower()) {
            return Flow::Next;
        }
        let now = inner.clock.at_ms(req.received);
        let hit = match inner.lookup(req.query, w, now) {
            Found::Hit(hit) => hit,
            // Counted in `response`, which runs once per query (this
            // handler may run twice when a later plugin defers).
            Found::Miss => return Flow::Next,
            // Not set up in a chain (unit tests): nothing to ask first.
            Found::Stale(_) if inner.tail.get().is_none() => return Flow::Next,
            // A failure moments ago: the stale answer without asking again.
            Found::Stale(e) if e.lkg_retry_ms.load(Ordering::Relaxed) > now => {
                inner.serve_stale(req, w, &e);
                return Flow::Answered;
            }
            Found::Stale(e) => {
                return match inner.last_known_good_sync(req, w, &e) {
                    Some(flow) => flow,
                    None => w.defer_with(Box::new(Fallback(e))),
                };
            }
        };
        if let Some((ms, ttl_s)) = hit.stamp
            && let Some(stored) = inner.clock.instant_of(ms)
        {
            w.set_stored(Stored {
                stored,
                ttl_s,
                denial: hit.denial,
                counter: inner.clone(),
            });
        }
        inner.metrics.with(req.server, |h| {
            count_hit(h, hit.denial);
            if hit.stale {
                h.served_stale.inc();
            }
            if let Some(e) = hit.refresh {
                inner.refresh(req, e, h);
            }
        });
        Flow::Answered
    }

    fn query_async<'a>(
        &'a self,
        req: &'a Request<'a>,
        w: &'a mut ResponseWriter,
    ) -> clusterdns_plugin::BoxFuture<'a, Flow> {
        Box::pin(async move {
            match clusterdns_plugin::note_or_query::<Fallback>(self, req, w) {
                Ok(note) => self.inner.last_known_good(req, w, note.0).await,
                Err(flow) => flow,
            }
        })
    }

    fn response(&self, req: &Request<'_>, w: &mut ResponseWriter, outcome: &Outcome) {
        let inner = &self.inner;
        if !inner.in_zone(req.qname_lower()) {
            return;
        }
        inner.metrics.with(req.server, |h| {
            h.requests.inc();
            h.misses.inc();
            let failed =
                outcome.error.is_some() || !matches!(w.rcode(), Rcode::NOERROR | Rcode::NXDOMAIN);
            if inner.cfg.verify
                && inner.cfg.stale_s > 0
                && failed
                && inner.verify_fallback(req.query, w, h)
            {
                return;
            }
            // An error rcode the server wrote for a plugin (hosts' SERVFAIL)
            // never passed CoreDNS's cache writer: not cached.
            if outcome.error.is_some() || w.written_by_server() {
                return;
            }
            // Another client may be owed another answer (kubernetes `isolate`).
            if w.is_per_client() {
                return;
            }
            inner.store(req.query, w, h, false);
        });
    }
}

#[cfg(test)]
mod tests;
