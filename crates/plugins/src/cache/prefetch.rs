//! Refreshing an entry in the background: prefetch's hit counting, and
//! the refresh that prefetch, serve_stale and last-known-good start (the
//! rest of the chain run again on a copy of the query, its reply stored).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use clusterdns_contract::{Request, ResponseWriter};
use clusterdns_wire::Query;

use super::Inner;
use super::metrics::Handles;
use super::store::Entry;

impl Inner {
    /// Counts a hit for prefetch and says whether to refresh now.
    pub(super) fn should_prefetch(&self, e: &Entry, ttl: i64, now: u64) -> bool {
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

    /// Re-runs the rest of the chain for this query in the background and
    /// stores the reply (prefetch, serve_stale). One refresh per entry.
    pub(super) fn refresh(self: &Arc<Self>, req: &Request<'_>, e: Arc<Entry>, h: &Handles) {
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
}
