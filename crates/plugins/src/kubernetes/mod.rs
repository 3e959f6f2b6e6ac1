#![doc = include_str!("README.md")]

// The walk of a query, one way: the plugin glue here (memo, then the
// answer), the question read (`names`), the record lookup (`lookup`), the
// answer plan (`plan`), the record writers (`write`); the asynchronous
// path's upstream lookup (`upstream`) last; zone transfers (`xfr`) apart.
mod autopath;
mod compact;
mod explain;
mod external;
mod isolate;
mod lookup;
mod memo;
mod metrics;
mod names;
mod plan;
mod setup;
mod upstream;
mod write;
mod xfr;
mod zone;

use std::net::IpAddr;

use clusterdns_contract::{BoxFuture, ChainTail, Flow, Plugin, PluginDef, Request, ResponseWriter};
use clusterdns_kubeindex::{Snapshot, Snapshots};
use clusterdns_wire::{Name, Rcode, Rtype, Section};

use lookup::{Found, LookupOpts};
use names::{split_at, zone_offset};
use plan::{Chase, CnameChain, Plan};

/// Registration of *kubernetes*.
pub const DEF: PluginDef = PluginDef {
    name: "kubernetes",
    setup: setup::setup,
};

/// The plugin's name in logs and errors.
const NAME: &str = "kubernetes";

/// The Kubernetes DNS schema version served at `dns-version.<zone>`.
pub const DNS_SCHEMA_VERSION: &str = "1.1.0";

/// The *kubernetes* handler: answers cluster names from the current
/// [`Snapshot`] of the watched cluster.
pub struct Kubernetes {
    /// Authoritative zones, lowercase; forward zones and reverse zones.
    zones: Vec<Name>,
    /// The first forward zone: PTR targets are under it.
    primary: Name,
    /// `fallthrough`: `None` off, else the zones that fall through.
    fall: Option<Vec<Name>>,
    /// `no_aaaa`: AAAA is NODATA at once outside the `fallthrough` zones.
    no_aaaa: bool,
    /// Record TTL (`ttl`).
    ttl: u32,
    opts: LookupOpts,
    snapshots: Snapshots,
    /// This server's own addresses, for the apex NS records.
    local_ips: Vec<IpAddr>,
    /// The plugins after this one, to resolve ExternalName targets.
    tail: ChainTail,
    /// This instance's key in the per-thread answer memo ([`memo`]).
    memo_id: u64,
    /// The host's search domains (`/etc/resolv.conf`), which end the
    /// search paths given to *autopath*.
    host_search: Vec<Name>,
    /// `isolate`: `None` off (CoreDNS's answers).
    isolation: Option<isolate::Isolation>,
    /// `zone_aware`: `None` off (CoreDNS's answers).
    zone_aware: Option<zone::ZoneAware>,
    /// `client_index compact`: autopath knows a client from the compact Pod index.
    client_compact: bool,
}

impl std::fmt::Debug for Kubernetes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kubernetes")
            .field("zones", &self.zones)
            .field("ttl", &self.ttl)
            .field("snapshots", &self.snapshots)
            .finish_non_exhaustive()
    }
}

impl Plugin for Kubernetes {
    fn name(&self) -> &'static str {
        NAME
    }

    fn auto_pather(&self) -> Option<&dyn clusterdns_contract::AutoPather> {
        Some(self)
    }

    fn externaler(&self) -> Option<&dyn clusterdns_contract::Externaler> {
        Some(self)
    }

    fn query(&self, req: &Request<'_>, w: &mut ResponseWriter) -> Flow {
        let flow = self.query_sync(req, w);
        self.mark_per_client(req, w);
        flow
    }

    fn query_async<'a>(
        &'a self,
        req: &'a Request<'a>,
        w: &'a mut ResponseWriter,
    ) -> BoxFuture<'a, Flow> {
        Box::pin(async move {
            let flow = self.query_deferred(req, w).await;
            self.mark_per_client(req, w);
            flow
        })
    }

    fn transferer(&self) -> Option<&dyn clusterdns_contract::transfer::Transferer> {
        Some(self)
    }

    fn explain(&self, req: &Request<'_>) -> Vec<String> {
        self.explain_query(req)
    }
}

impl Kubernetes {
    /// With `isolate`, an answer for a name in the zone (or the next
    /// plugin's, when it falls through) depends on the client: no cache
    /// keyed on the question may keep it.
    fn mark_per_client(&self, req: &Request<'_>, w: &mut ResponseWriter) {
        if self.isolation.is_some() && self.zone_for(req.qname_lower()).is_some() {
            w.set_per_client();
        }
    }

    /// [`Plugin::query`].
    fn query_sync(&self, req: &Request<'_>, w: &mut ResponseWriter) -> Flow {
        let Some((zone, off)) = self.zone_for(req.qname_lower()) else {
            return Flow::Next;
        };
        let snap = self.snapshots.load();
        // `no_aaaa` first: a hidden name gets what a missing one gets.
        if self.nodata_aaaa(req, w, &snap, off) {
            return Flow::Answered;
        }
        // Decided before the memo, which keeps only answers every client
        // that may see the name is given alike.
        if self.hidden(req, &snap, off) {
            return self.name_error(req, w, &snap, off);
        }
        let generation = snap.generation();
        if let Some(flow) = memo::replay(self.memo_id, generation, req, w) {
            return flow;
        }
        match self.answer_from(req, w, &snap, zone, off) {
            Ok(flow) => {
                // A `zone_aware` answer is the asking client's own.
                if !w.is_per_client() {
                    memo::keep(self.memo_id, generation, req, &flow, w);
                }
                flow
            }
            // The chain goes to the asynchronous pass with the query.
            Err(chain) => w.defer_with(chain),
        }
    }

    /// [`Plugin::query_async`].
    async fn query_deferred(&self, req: &Request<'_>, w: &mut ResponseWriter) -> Flow {
        // The chain `query` found; worked out again only when it left
        // none (a caller that skipped `query`).
        let chain = match w.take_note::<CnameChain>() {
            Some(chain) => chain,
            None => match self.answer(req, w) {
                Ok(flow) => return flow,
                Err(chain) => chain,
            },
        };
        let Some(target) = chain.last_target().copied() else {
            return Flow::Answered;
        };
        let upstream = match self.tail.get() {
            Some(tail) => crate::pkg::upstream::lookup(tail, req, &target, req.qtype()).await,
            None => None,
        };
        upstream::write(
            w,
            req,
            self.ttl,
            &chain.links[..chain.len],
            upstream.as_deref(),
        );
        Flow::Answered
    }

    /// The longest zone `lower` is in, and where it starts in `lower`.
    fn zone_for(&self, lower: &Name) -> Option<(&Name, usize)> {
        self.zones
            .iter()
            .filter_map(|z| Some((z, zone_offset(lower, z)?)))
            .max_by_key(|(z, _)| z.len())
    }

    fn falls_through(&self, lower: &Name) -> bool {
        self.fall
            .as_ref()
            .is_some_and(|zones| zones.iter().any(|z| lower.ends_with(z)))
    }

    /// The synchronous answer. `Err(chain)`: an ExternalName's target is
    /// outside the zone and the rest of the chain should resolve it.
    fn answer(&self, req: &Request<'_>, w: &mut ResponseWriter) -> Result<Flow, Box<CnameChain>> {
        let Some((zone, off)) = self.zone_for(req.qname_lower()) else {
            return Ok(Flow::Next);
        };
        let snap = self.snapshots.load();
        if self.nodata_aaaa(req, w, &snap, off) {
            return Ok(Flow::Answered);
        }
        if self.hidden(req, &snap, off) {
            return Ok(self.name_error(req, w, &snap, off));
        }
        self.answer_from(req, w, &snap, zone, off)
    }

    /// `no_aaaa`: answers an AAAA query NODATA, with the zone's SOA as
    /// every NODATA of this plugin has it, without looking the name up.
    /// Names in `fallthrough` zones are looked up as usual (they may
    /// belong to a plugin after this one). Whether it answered.
    fn nodata_aaaa(
        &self,
        req: &Request<'_>,
        w: &mut ResponseWriter,
        snap: &Snapshot,
        off: usize,
    ) -> bool {
        if !self.no_aaaa || req.qtype() != Rtype::AAAA || self.falls_through(req.qname_lower()) {
            return false;
        }
        let s = split_at(req.qname(), req.qname_lower(), off);
        let mut b = w.reply(req);
        b.set_aa(true);
        self.push_soa(&mut b, Section::Authority, snap, &s);
        b.finish();
        true
    }

    /// The answer to a name that does not exist (or that `isolate` hides):
    /// on to the next plugin with `fallthrough`, else NXDOMAIN with the
    /// zone's SOA (SERVFAIL before the first sync).
    fn name_error(
        &self,
        req: &Request<'_>,
        w: &mut ResponseWriter,
        snap: &Snapshot,
        off: usize,
    ) -> Flow {
        let lower = req.qname_lower();
        if self.falls_through(lower) {
            return Flow::Next;
        }
        let rcode = if snap.synced() {
            Rcode::NXDOMAIN
        } else {
            Rcode::SERVFAIL
        };
        let s = split_at(req.qname(), lower, off);
        self.write_negative(req, w, snap, &s, rcode);
        Flow::Answered
    }

    /// [`Kubernetes::answer`] for a name in `zone` (which starts at `off`
    /// of the lowercase name), from `snap`.
    fn answer_from(
        &self,
        req: &Request<'_>,
        w: &mut ResponseWriter,
        snap: &Snapshot,
        zone: &Name,
        off: usize,
    ) -> Result<Flow, Box<CnameChain>> {
        let lower = req.qname_lower();
        let qtype = req.qtype();
        if qtype == Rtype::AXFR || qtype == Rtype::IXFR {
            w.write_error(req, Rcode::REFUSED);
            return Ok(Flow::Answered);
        }
        let s = split_at(req.qname(), lower, off);
        let mut plan = self.plan(snap, &s, qtype);
        if self.zone_filter(req, snap, qtype, &mut plan) {
            w.set_per_client();
        }
        if let Plan::NameError = plan {
            return Ok(self.name_error(req, w, snap, off));
        }
        // An ExternalName leaving the zone, with plugins after this one to
        // resolve it: decided before anything is written.
        if let Plan::Addrs(Found::External(svc)) = &plan
            && self.tail.get().is_some_and(|t| !t.plugins().is_empty())
            && let Some(ext) = svc.external_name()
            && let Chase::External(chain) = self.chase(snap, &s, zone, qtype, ext)
        {
            return Err(Box::new(chain));
        }
        let mut b = w.reply(req);
        if let Some(chain) = self.write_plan(&mut b, snap, &s, zone, qtype, &plan) {
            // Nobody after us: the CNAMEs alone.
            self.push_cnames(&mut b, &chain);
        }
        if b.counts()[1] == 0 {
            self.push_soa(&mut b, Section::Authority, snap, &s);
        }
        b.finish();
        Ok(Flow::Answered)
    }
}

#[cfg(test)]
mod tests;
