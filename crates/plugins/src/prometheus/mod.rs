#![doc = include_str!("README.md")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use clusterdns_contract::metrics::{
    Counter, Family, Gauge, HistogramSeries, Registry, SIZE_BUCKETS, TIME_BUCKETS,
};
use clusterdns_contract::{
    ChainTail, Flow, HttpReply, HttpRoute, Outcome, Plugin, PluginDef, Proto, Request,
    ResponseWriter, SetupCtx,
};
use clusterdns_corefile::{ConfigError, Directive};
use clusterdns_wire::{Name, Rtype};
use parking_lot::Mutex;

/// Registration of *prometheus*.
pub const DEF: PluginDef = PluginDef {
    name: "prometheus",
    setup,
};

/// CoreDNS's default metrics address.
const DEFAULT_ADDR: &str = "localhost:9153";

/// The plugins that configure the server instead of handling queries;
/// they have no `coredns_plugin_enabled` series (not in `Handlers()`:
/// their CoreDNS setups never call `AddPlugin`).
const NOT_HANDLERS: &[&str] = &[
    "root", "reload", "bind", "ready", "health", "debug", "timeouts",
];

fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    // CoreDNS checks only the address's form at setup; a port or host it
    // cannot listen on is logged when the listener starts, and the server
    // runs without metrics.
    let (d, addr) = match clusterdns_contract::parse::once_with_addr(dirs, DEFAULT_ADDR) {
        Ok((d, addr)) => (d, Some(addr)),
        Err(e) if e.msg.starts_with("listen tcp ") && !dirs.is_empty() => {
            let d = dirs[0];
            let why = listen_failure(d, &e.msg);
            ctx.shared.on_startup.push(Box::new(move || {
                clusterdns_contract::error!("", "Failed to start metrics handler: {why}");
                Ok(())
            }));
            (d, None)
        }
        Err(e) => return Err(e),
    };
    for line in &d.block {
        match line.name.text.as_str() {
            "runtime_metrics" if line.args.is_empty() => {}
            "runtime_metrics" => return Err(line.arg_err()),
            "tls" if line.args.len() == 1 => {
                return Err(line.err("tls is not supported yet"));
            }
            "tls" => return Err(line.arg_err()),
            other => return Err(line.err(format!("unknown option: {other}"))),
        }
    }

    let metrics = ctx.shared.metrics.clone();
    let fams = Arc::new(Families::register(&metrics));
    register_process_metrics(&metrics);

    let reg = metrics.clone();
    if let Some(addr) = addr {
        ctx.shared.routes.push(HttpRoute {
            addr,
            path: "/metrics".to_string(),
            handler: Arc::new(move || HttpReply {
                status: 200,
                content_type: "text/plain; version=0.0.4; charset=utf-8; escaping=underscores",
                body: reg.render().into_bytes(),
                streamed: true,
            }),
        });
    }

    // coredns_plugin_enabled: one series per listener, zone and handler,
    // replaced when a new configuration starts.
    let mut handlers: Vec<&'static str> = Vec::new();
    for def in crate::registry() {
        if !NOT_HANDLERS.contains(&def.name)
            && ctx.block.directives_named(def.name).next().is_some()
        {
            handlers.push(def.name);
        }
    }
    let servers = ctx.server_labels();
    let zones = ctx.zones();
    let view = ctx.view_name().to_owned();
    let view_label = view.clone();
    let enabled = fams.enabled.clone();
    let config = ctx.shared.readiness.0.clone();
    ctx.shared.on_startup.push(Box::new(move || {
        static LAST_CONFIG: AtomicUsize = AtomicUsize::new(0);
        let id = Arc::as_ptr(&config) as usize;
        if LAST_CONFIG.swap(id, Ordering::Relaxed) != id {
            enabled.clear();
        }
        for s in &servers {
            for z in &zones {
                for h in &handlers {
                    enabled.with(&[s, z, &view_label, h]).set(1.0);
                }
            }
        }
        Ok(())
    }));

    let mut names: Vec<&'static str> = crate::registry().iter().map(|d| d.name).collect();
    names.push("");
    let tail = ChainTail::default();
    ctx.add_plugin(Arc::new(Prometheus {
        fams,
        tables: ArcSwap::from_pointee(Vec::new()),
        grow: Mutex::new(()),
        plugin_names: names,
        tail: tail.clone(),
        next_plugin: OnceLock::new(),
        view,
    }));
    ctx.bind_tail(&tail);
    Ok(())
}

/// Go's `net.Listen` error for an address whose port or host does not
/// resolve, from the setup's message (`listen tcp ADDR: unknown port`).
fn listen_failure(d: &Directive, msg: &str) -> String {
    let arg = d.args.first().map_or(DEFAULT_ADDR, |a| a.text.as_str());
    let port = arg.rsplit_once(':').map_or("", |(_, p)| p);
    if msg.contains("unknown port") {
        if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) {
            format!("listen tcp: address {port}: invalid port")
        } else {
            format!("listen tcp: lookup tcp/{port}: unknown port")
        }
    } else {
        msg.to_string()
    }
}

/// Registers the families CoreDNS always exposes, at their zero values:
/// build info, panics, reload failures and the health poll metrics.
fn register_process_metrics(metrics: &Registry) {
    let build = metrics.get_or_register("coredns_build_info", || {
        Family::<Gauge>::new(
            "coredns_build_info",
            "A metric with a constant '1' value labeled by version, revision, and goversion from which CoreDNS was built.",
            &["version", "revision", "goversion"],
        )
    });
    build
        .with(&[
            env!("CARGO_PKG_VERSION"),
            option_env!("CLUSTERDNS_COMMIT").unwrap_or(""),
            "rustc",
        ])
        .set(1.0);
    metrics
        .get_or_register("coredns_panics_total", || {
            Family::<Counter>::new(
                "coredns_panics_total",
                "A metrics that counts the number of panics.",
                &[],
            )
        })
        .with(&[])
        .add(0);
    metrics
        .get_or_register("coredns_reload_failed_total", || {
            Family::<Counter>::new(
                "coredns_reload_failed_total",
                "Counter of the number of failed reload attempts.",
                &[],
            )
        })
        .with(&[])
        .add(0);
    crate::pkg::health_metrics(metrics);
}

/// The per-query metric families.
#[derive(Debug)]
struct Families {
    requests: Arc<Family<Counter>>,
    do_requests: Arc<Family<Counter>>,
    duration: Arc<Family<HistogramSeries>>,
    request_size: Arc<Family<HistogramSeries>>,
    response_size: Arc<Family<HistogramSeries>>,
    responses: Arc<Family<Counter>>,
    enabled: Arc<Family<Gauge>>,
}

impl Families {
    fn register(r: &Registry) -> Families {
        Families {
            requests: r.get_or_register("coredns_dns_requests_total", || {
                Family::new(
                    "coredns_dns_requests_total",
                    "Counter of DNS requests made per zone, protocol and family.",
                    &["server", "zone", "view", "proto", "family", "type"],
                )
            }),
            do_requests: r.get_or_register("coredns_dns_do_requests_total", || {
                Family::new(
                    "coredns_dns_do_requests_total",
                    "Counter of DNS requests with DO bit set per zone.",
                    &["server", "zone", "view"],
                )
            }),
            duration: r.get_or_register("coredns_dns_request_duration_seconds", || {
                Family::histogram(
                    "coredns_dns_request_duration_seconds",
                    "Histogram of the time (in seconds) each request took per zone.",
                    &["server", "zone", "view"],
                    TIME_BUCKETS,
                )
            }),
            request_size: r.get_or_register("coredns_dns_request_size_bytes", || {
                Family::histogram(
                    "coredns_dns_request_size_bytes",
                    "Size of the EDNS0 UDP buffer in bytes (64K for TCP) per zone and protocol.",
                    &["server", "zone", "view", "proto"],
                    SIZE_BUCKETS,
                )
            }),
            response_size: r.get_or_register("coredns_dns_response_size_bytes", || {
                Family::histogram(
                    "coredns_dns_response_size_bytes",
                    "Size of the returned response in bytes.",
                    &["server", "zone", "view", "proto"],
                    SIZE_BUCKETS,
                )
            }),
            responses: r.get_or_register("coredns_dns_responses_total", || {
                Family::new(
                    "coredns_dns_responses_total",
                    "Counter of response status codes.",
                    &["server", "zone", "view", "rcode", "plugin"],
                )
            }),
            enabled: r.get_or_register("coredns_plugin_enabled", || {
                Family::new(
                    "coredns_plugin_enabled",
                    "A metric that indicates whether a plugin is enabled on per server and zone basis.",
                    &["server", "zone", "view", "name"],
                )
            }),
        }
    }
}

/// The query types with their own `type` label; the rest are `other`
/// (CoreDNS `vars.monitorType`).
const MONITORED: [Rtype; 19] = [
    Rtype::A,
    Rtype::AAAA,
    Rtype::CNAME,
    Rtype::DNSKEY,
    Rtype::DS,
    Rtype::MX,
    Rtype::NSEC3,
    Rtype::NSEC,
    Rtype::NS,
    Rtype::PTR,
    Rtype::RRSIG,
    Rtype::SOA,
    Rtype::SRV,
    Rtype::TXT,
    Rtype::HTTPS,
    Rtype::SVCB,
    Rtype::IXFR,
    Rtype::AXFR,
    Rtype::ANY,
];
const TYPES: usize = MONITORED.len() + 1;

/// The `type` label index of `t`.
fn type_index(t: Rtype) -> usize {
    MONITORED
        .iter()
        .position(|m| *m == t)
        .unwrap_or(MONITORED.len())
}

fn type_label(i: usize) -> String {
    MONITORED
        .get(i)
        .map_or_else(|| "other".to_string(), ToString::to_string)
}

/// Rcodes with a pre-resolved slot (the header's four bits).
const RCODES: usize = 16;

/// A series resolved on first use, then read with one atomic load.
type Slot<T> = OnceLock<Arc<T>>;

fn slots<T>(n: usize) -> Box<[Slot<T>]> {
    (0..n).map(|_| OnceLock::new()).collect()
}

/// The series of one (server, zone).
#[derive(Debug)]
struct Table {
    server: String,
    zone: Name,
    zone_text: String,
    /// proto × family × type.
    requests: Box<[Slot<Counter>]>,
    do_requests: Slot<Counter>,
    duration: Slot<HistogramSeries>,
    request_size: [Slot<HistogramSeries>; 2],
    response_size: [Slot<HistogramSeries>; 2],
    /// rcode × plugin name.
    responses: Box<[Slot<Counter>]>,
}

impl Table {
    /// Whether this is the table of `server`/`zone`.
    fn is(&self, server: &str, zone: &Name) -> bool {
        self.zone == *zone && self.server == server
    }
}

/// The *prometheus* handler: counts every query its block answers.
pub struct Prometheus {
    fams: Arc<Families>,
    /// One table per (server, zone) seen, created on first use.
    tables: ArcSwap<Vec<Arc<Table>>>,
    grow: Mutex<()>,
    /// `plugin` label values: every compiled-in plugin, then "".
    plugin_names: Vec<&'static str>,
    /// The handlers after this one in the block's chain.
    tail: ChainTail,
    /// Index in `plugin_names` of the first of them, found once.
    next_plugin: OnceLock<usize>,
    /// The block's view name, the `view` label (CoreDNS `metrics.WithView`).
    view: String,
}

impl std::fmt::Debug for Prometheus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prometheus").finish_non_exhaustive()
    }
}

fn proto_index(p: Proto) -> usize {
    match p {
        Proto::Udp => 0,
        Proto::Tcp => 1,
    }
}

const PROTOS: [Proto; 2] = [Proto::Udp, Proto::Tcp];

impl Prometheus {
    /// The table of `server`/`zone`: a lock-free scan, or (once per pair)
    /// a new table published under a lock.
    fn table(&self, server: &str, zone: &Name) -> Arc<Table> {
        if let Some(t) = self.find(server, zone) {
            return t;
        }
        let _g = self.grow.lock();
        if let Some(t) = self.find(server, zone) {
            return t;
        }
        let t = Arc::new(Table {
            server: server.to_string(),
            zone: *zone,
            zone_text: zone.to_string(),
            requests: slots(2 * 2 * TYPES),
            do_requests: OnceLock::new(),
            duration: OnceLock::new(),
            request_size: [OnceLock::new(), OnceLock::new()],
            response_size: [OnceLock::new(), OnceLock::new()],
            responses: slots(RCODES * self.plugin_names.len()),
        });
        let mut v: Vec<Arc<Table>> = self.tables.load().as_ref().clone();
        v.push(t.clone());
        self.tables.store(Arc::new(v));
        t
    }

    fn find(&self, server: &str, zone: &Name) -> Option<Arc<Table>> {
        self.tables
            .load()
            .iter()
            .find(|t| t.is(server, zone))
            .cloned()
    }

    /// The `plugin` label of a reply that a plugin wrote: CoreDNS's
    /// `plugin.NextOrFailure` wraps the writer it passes on in one that
    /// names the plugin it calls, and only the wrapper right around the
    /// metrics recorder can tell it; so whichever plugin behind answers,
    /// the label is the handler right after *prometheus* in the chain.
    fn next_plugin_index(&self) -> usize {
        let none = self.plugin_names.len() - 1;
        match self.tail.get() {
            Some(chain) => *self.next_plugin.get_or_init(|| {
                let name = chain.plugins().first().map_or("", |p| p.name());
                self.plugin_names
                    .iter()
                    .position(|n| *n == name)
                    .unwrap_or(none)
            }),
            None => none,
        }
    }

    fn report(&self, req: &Request<'_>, reply_len: usize, by_server: bool, outcome: &Outcome) {
        // The table is read under the snapshot guard (no reference count
        // taken); only the first query of a (server, zone) builds one.
        let tables = self.tables.load();
        let built;
        let t: &Table = match tables.iter().find(|t| t.is(req.server, req.zone)) {
            Some(t) => t,
            None => {
                built = self.table(req.server, req.zone);
                &built
            }
        };
        let f = &self.fams;
        let (s, z, v) = (t.server.as_str(), t.zone_text.as_str(), self.view.as_str());
        let p = proto_index(req.proto);
        let fam = match req.family() {
            clusterdns_contract::Family::V4 => 0,
            clusterdns_contract::Family::V6 => 1,
        };
        let ti = type_index(req.qtype());
        if req.do_bit() {
            t.do_requests
                .get_or_init(|| f.do_requests.with(&[s, z, v]))
                .inc();
        }
        t.requests[(p * 2 + fam) * TYPES + ti]
            .get_or_init(|| {
                f.requests.with(&[
                    s,
                    z,
                    v,
                    PROTOS[p].as_str(),
                    req.family().label(),
                    &type_label(ti),
                ])
            })
            .inc();
        t.duration
            .get_or_init(|| f.duration.histogram_with(&[s, z, v]))
            .observe(req.received.elapsed().as_secs_f64());
        let proto = PROTOS[p].as_str();
        t.response_size[p]
            .get_or_init(|| f.response_size.histogram_with(&[s, z, v, proto]))
            .observe(reply_len as f64);
        t.request_size[p]
            .get_or_init(|| f.request_size.histogram_with(&[s, z, v, proto]))
            .observe(req.query.raw().len() as f64);
        // "" when the server wrote an error reply: no plugin wrote
        // through CoreDNS's recorder.
        let pi = if by_server {
            self.plugin_names.len() - 1
        } else {
            self.next_plugin_index()
        };
        let plugin = self.plugin_names[pi];
        let rc = usize::from(outcome.rcode.0);
        if rc < RCODES {
            t.responses[rc * self.plugin_names.len() + pi]
                .get_or_init(|| {
                    f.responses
                        .with(&[s, z, v, &rcode_label(rc), self.plugin_names[pi]])
                })
                .inc();
        } else {
            // Extended rcodes are set by the server only; never here in
            // practice, so resolving each time is acceptable.
            f.responses.with(&[s, z, v, &rcode_label(rc), plugin]).inc();
        }
    }
}

/// CoreDNS `rcode.ToString`: the mnemonic, else `RCODE<n>`.
fn rcode_label(rc: usize) -> String {
    let r = clusterdns_wire::Rcode(rc as u16);
    match r.mnemonic() {
        Some(m) => m.to_string(),
        None => format!("RCODE{rc}"),
    }
}

impl Plugin for Prometheus {
    fn name(&self) -> &'static str {
        "prometheus"
    }

    fn query(&self, _req: &Request<'_>, _w: &mut ResponseWriter) -> Flow {
        Flow::Next
    }

    fn response(&self, req: &Request<'_>, w: &mut ResponseWriter, outcome: &Outcome) {
        // CoreDNS's recorder measures what the plugins wrote, uncompressed;
        // an error reply the server writes never passes it (size 0, no
        // plugin).
        // Nothing written (*acl*'s drop) is counted as CoreDNS counts it:
        // no plugin, size 0.
        let by_server = outcome.error.is_some() || w.written_by_server() || w.bytes().is_empty();
        let size = if by_server { 0 } else { w.uncompressed_len() };
        self.report(req, size, by_server, outcome);
    }
}

#[cfg(test)]
mod tests;
