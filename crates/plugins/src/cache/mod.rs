#![doc = include_str!("README.md")]

mod clock;
mod config;
mod insert;
mod lookup;
mod metrics;
mod prefetch;
mod setup;
mod stale;
mod store;

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use clusterdns_contract::{
    ChainTail, Flow, Outcome, Plugin, PluginDef, Request, ResponseWriter, StoreHits, Stored,
};
use clusterdns_wire::{Name, Rcode};

pub use clock::{Clock, MonotonicClock};
use config::Config;
use lookup::Found;
use metrics::{Handles, Metrics};
use stale::Fallback;
use store::Store;

/// Registration of *cache*.
pub const DEF: PluginDef = PluginDef {
    name: "cache",
    setup: setup::setup,
};

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

fn matches_any(zones: &[Name], name: &Name) -> bool {
    zones.iter().any(|z| name.ends_with(z))
}

impl Inner {
    fn in_zone(&self, name: &Name) -> bool {
        matches_any(&self.cfg.zones, name)
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
    ) -> clusterdns_contract::BoxFuture<'a, Flow> {
        Box::pin(async move {
            match clusterdns_contract::note_or_query::<Fallback>(self, req, w) {
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
