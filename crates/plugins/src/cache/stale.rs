//! Answers from expired entries once the chain behind has been asked:
//! serve_stale's `verify` fallback, and last-known-good (RFC 8767), which
//! answers from a good entry past its TTL when the chain fails or is
//! too slow.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use clusterdns_contract::{Flow, Outcome, Request, ResponseWriter};
use clusterdns_wire::{Query, Rcode};

use super::Inner;
use super::metrics::Handles;
use super::store::Entry;

/// The TTL of a stale answer (RFC 8767 §4: 30 s).
pub(super) const LKG_TTL: u32 = 30;
/// After a failed attempt the stale answer is served without asking the
/// chain again for this long (RFC 8767 §4's failure recheck timer).
pub(super) const LKG_RECHECK_MS: u64 = 30_000;

/// The query's note for the asynchronous pass: the entry to fall back on.
pub(super) struct Fallback(pub(super) Arc<Entry>);

impl Inner {
    /// Whether last-known-good is on: it gives way to an explicit
    /// `serve_stale`, which keeps CoreDNS's semantics.
    pub(super) fn lkg_on(&self) -> bool {
        self.cfg.lkg_s > 0 && self.cfg.stale_s == 0
    }

    /// An expired entry last-known-good may fall back on at `now`: a good
    /// answer (not a SERVFAIL) expired for less than the maximum age.
    pub(super) fn lkg_usable(&self, e: &Entry, q: &Query<'_>, now: u64) -> bool {
        if !self.lkg_on() || e.servfail || !e.matches(q.qname_lower(), q.qtype(), q.qclass()) {
            return false;
        }
        let ttl = e.ttl(now);
        ttl <= 0 && -ttl < i64::from(self.cfg.lkg_s)
    }

    /// serve_stale verify: the refresh failed, so answer from the stale
    /// entry if there is one.
    pub(super) fn verify_fallback(
        &self,
        q: &Query<'_>,
        w: &mut ResponseWriter,
        h: &Handles,
    ) -> bool {
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
    pub(super) async fn last_known_good(
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
    pub(super) fn last_known_good_sync(
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
    pub(super) fn serve_stale(&self, req: &Request<'_>, w: &mut ResponseWriter, e: &Entry) {
        w.clear();
        self.write_hit(e, 0, req.query, w);
        self.metrics.with(req.server, |h| {
            h.requests.inc();
            h.served_stale.inc();
        });
    }
}
