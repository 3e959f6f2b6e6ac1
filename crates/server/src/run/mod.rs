//! Start, reload and stop: the lifecycle of a server around
//! [`Instance`]s, driven by a [`Control`] (the process around it owns the
//! runtime, the signals and the pidfile).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use arc_swap::ArcSwap;
use clusterdns_contract::metrics::{Counter, Family, Gauge, Registry};
use clusterdns_contract::{PluginDef, error, info, warning};
use tokio::sync::{Notify, mpsc, oneshot, watch};

use crate::admin;
use crate::instance::{ConfigSource, Instance, InstanceError};
use crate::passed::{ExportRequest, Exporter, Inherited};

mod listen;

use listen::{Listening, start_dns};

/// How the server is started.
#[derive(Debug, Clone)]
pub struct Options {
    /// The Corefile.
    pub source: ConfigSource,
    /// Port for keys without one (`-dns.port`, default 53).
    pub dns_port: u16,
    /// The compiled-in plugins, in `plugin.cfg` order.
    pub registry: Vec<PluginDef>,
    /// Do not print the start-up banner (`-quiet`).
    pub quiet: bool,
    /// UDP worker threads per listener (default: the CPUs this process
    /// may run on).
    pub udp_workers: Option<usize>,
    /// Version lines printed in the banner.
    pub banner: String,
    /// The registry the `prometheus` plugin serves, when the job has
    /// counters of its own to show beside the server's (node-cache's
    /// `coredns_nodecache_setup_errors_total`, as upstream shows it on
    /// `:9253`); `None`: a registry of the server's own.
    pub metrics: Option<Arc<Registry>>,
    /// Sockets to serve on instead of binding (a predecessor's, handed
    /// over for an upgrade without a lost query); empty: bind everything.
    pub inherited: Inherited,
}

/// Why the server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The configuration is invalid (nothing was bound).
    #[error(transparent)]
    Config(#[from] InstanceError),
    /// A listener could not be bound.
    #[error("listen {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A plugin's start-up hook failed.
    #[error("{0}")]
    Startup(String),
    /// The runtime or a signal handler could not be set up.
    #[error("runtime: {0}")]
    Runtime(#[from] std::io::Error),
}

/// What is serving once every listener of the configuration is bound and
/// its plugins have started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Serving {
    /// The DNS listeners' addresses, UDP and TCP alike (with the port the
    /// system chose where the Corefile said 0).
    pub dns: Vec<SocketAddr>,
    /// The admin HTTP listeners' addresses (health, ready, metrics).
    pub admin: Vec<SocketAddr>,
}

/// The caller's side of a server started with [`serve`]: learn when it
/// serves, ask it to reload or to stop.
#[derive(Debug)]
pub struct Controller {
    shutdown: watch::Sender<bool>,
    reload: Arc<Notify>,
    serving: Option<oneshot::Receiver<Serving>>,
    exports: mpsc::UnboundedSender<ExportRequest>,
}

/// The server's side of a [`Controller`], handed to [`serve`].
#[derive(Debug)]
pub struct Control {
    shutdown: watch::Receiver<bool>,
    reload: Arc<Notify>,
    serving: Option<oneshot::Sender<Serving>>,
    exports: mpsc::UnboundedReceiver<ExportRequest>,
}

/// A connected [`Controller`] and [`Control`].
pub fn control() -> (Controller, Control) {
    let (shutdown, stop) = watch::channel(false);
    let (serving, served) = oneshot::channel();
    let reload = Arc::new(Notify::new());
    let (exports, requests) = mpsc::unbounded_channel();
    (
        Controller {
            shutdown,
            reload: reload.clone(),
            serving: Some(served),
            exports,
        },
        Control {
            shutdown: stop,
            reload,
            serving: Some(serving),
            exports: requests,
        },
    )
}

impl Controller {
    /// Waits until the server serves. `None` when it stopped before (the
    /// result of [`serve`] says why) or this was already asked.
    pub async fn serving(&mut self) -> Option<Serving> {
        self.serving.take()?.await.ok()
    }

    /// Reads the Corefile again and applies it, even unchanged (what
    /// SIGUSR1 asks of CoreDNS).
    pub fn reload(&self) {
        self.reload.notify_one();
    }

    /// Stops the server after its lameduck period (what SIGTERM and
    /// SIGINT ask). Dropping the controller does the same.
    pub fn shutdown(&self) {
        let _ = self.shutdown.send(true);
    }

    /// A handle that asks the server for duplicates of the sockets it
    /// serves on, to hand to a successor process.
    pub fn exporter(&self) -> Exporter {
        Exporter {
            tx: self.exports.clone(),
        }
    }
}

/// An admin HTTP listener that is serving.
struct AdminServing {
    routes: admin::Routes,
    stop: watch::Sender<bool>,
    fd: OwnedFd,
}

/// Everything that is serving right now.
struct State {
    dns: HashMap<SocketAddr, Listening>,
    admin: HashMap<SocketAddr, AdminServing>,
    instance: Instance,
}

/// Keeps one timer always pending, due within [`ANCHOR`].
///
/// Tokio's time driver wakes its parked thread through an eventfd write
/// whenever a new timer is due earlier than the earliest one it already
/// promised to wake for, and "no timer at all" counts as later than
/// anything. A forwarded query arms a read timeout (seconds away) and
/// cancels it when the reply comes, so under a steady load of short
/// exchanges every query found no timer pending and paid an eventfd
/// write plus an extra `epoll_wait` return. With this anchor, the
/// earliest wake-up is always at most `ANCHOR` away and a query's timeout
/// (later than that) never moves it: the cost is one timer firing per
/// `ANCHOR`.
async fn timer_anchor() {
    loop {
        tokio::time::sleep(ANCHOR).await;
    }
}

/// The period of [`timer_anchor`]; shorter than any per-query timeout
/// the plugins arm (forward's read timeout is 2 s).
const ANCHOR: Duration = Duration::from_millis(500);

/// Builds the configuration, binds it, reports [`Serving`] and serves
/// until the controller asks it to stop (or is dropped); a reload reads
/// the Corefile again and applies it (on the reload plugin's timer, only
/// when it changed). An invalid Corefile returns an error before any port
/// is bound.
///
/// Runs on the caller's tokio runtime (multi-threaded, with I/O and
/// time): the UDP workers are tasks on it.
pub async fn serve(opts: Options, control: Control) -> Result<(), ServerError> {
    let anchor = tokio::spawn(timer_anchor());
    let served = serve_until_stopped(opts, control).await;
    anchor.abort();
    served
}

async fn serve_until_stopped(opts: Options, mut control: Control) -> Result<(), ServerError> {
    let rt = tokio::runtime::Handle::current();
    let metrics = opts.metrics.clone().unwrap_or_default();
    // The process_* families every Prometheus client exports (the
    // dashboards' memory and CPU panels), read at scrape time.
    metrics.get_or_register(clusterdns_contract::process::NAME, || {
        clusterdns_contract::process::Process
    });
    let instance = Instance::build(&opts.source, &opts.registry, opts.dns_port, metrics.clone())?;
    let workers = opts.udp_workers.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let empty = Instance {
        listeners: Vec::new(),
        shared: clusterdns_contract::Shared::new(metrics.clone()),
        checksum: String::new(),
        banner: Vec::new(),
    };
    let mut state = State {
        dns: HashMap::new(),
        admin: HashMap::new(),
        instance: empty,
    };
    let applied = apply(&mut state, instance, workers, &rt, &opts.inherited).await;
    // What the first configuration did not take is not ours to keep open.
    opts.inherited.clear();
    applied?;
    // CoreDNS's order: the listeners, reload's SHA line (a log line, so
    // also with -quiet), then the version.
    if !opts.quiet {
        let mut out = String::new();
        for l in &state.instance.banner {
            out.push_str(l);
            out.push('\n');
        }
        clusterdns_contract::log::raw(out.as_bytes());
    }
    if state.instance.shared.reload.is_some() {
        info!(
            "reload",
            "Running configuration SHA512 = {}", state.instance.checksum
        );
    }
    if !opts.quiet {
        clusterdns_contract::log::raw(format!("{}\n", opts.banner).as_bytes());
    }
    let reload_failed = metrics.get_or_register("coredns_reload_failed_total", || {
        Family::<Counter>::new(
            "coredns_reload_failed_total",
            "Counter of the number of failed reload attempts.",
            &[],
        )
    });
    let version_info = metrics.get_or_register("coredns_reload_version_info", || {
        Family::<Gauge>::new(
            "coredns_reload_version_info",
            "A metric with a constant '1' value labeled by hash, and value which type of hash generated.",
            &["hash", "value"],
        )
    });
    // CoreDNS's reload plugin sets the gauge when it has restarted on a
    // changed Corefile, not at start-up.
    let publish = |inst: &Instance| {
        version_info.clear();
        version_info.with(&["sha512", &inst.checksum]).set(1.0);
    };
    if let Some(tx) = control.serving.take() {
        let _ = tx.send(Serving {
            dns: state.dns.values().map(Listening::local).collect(),
            admin: state.admin.keys().copied().collect(),
        });
    }

    loop {
        let wait = match state.instance.shared.reload {
            Some(r) => {
                let jitter = if r.jitter.is_zero() {
                    Duration::ZERO
                } else {
                    Duration::from_millis(fastrand::u64(0..=r.jitter.as_millis() as u64))
                };
                r.interval + jitter
            }
            None => Duration::from_secs(3600),
        };
        // A reload the controller asks for (SIGUSR1) restarts even on an
        // unchanged Corefile, without reload's SHA line, as CoreDNS.
        let forced = tokio::select! {
            // Asked to stop, or the controller is gone.
            _ = control.shutdown.wait_for(|stop| *stop) => break,
            Some(req) = control.exports.recv() => {
                let _ = req.send(listen::export(
                    &state.dns,
                    state.admin.iter().map(|(addr, a)| (addr, &a.fd)),
                ));
                continue;
            }
            _ = control.reload.notified() => true,
            _ = tokio::time::sleep(wait) => {
                if state.instance.shared.reload.is_none() {
                    continue;
                }
                false
            }
        };
        let text = match opts.source.read() {
            Ok((_, t)) => t,
            Err(e) => {
                error!("reload", "{e}");
                reload_failed.with(&[]).inc();
                continue;
            }
        };
        if !forced && crate::instance::sha512_hex(text.as_bytes()) == state.instance.checksum {
            continue;
        }
        info!("", "Reloading");
        let applied =
            match Instance::build(&opts.source, &opts.registry, opts.dns_port, metrics.clone()) {
                Ok(next) => apply(&mut state, next, workers, &rt, &Inherited::default())
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
        match applied {
            Ok(()) => {
                if !forced && state.instance.shared.reload.is_some() {
                    publish(&state.instance);
                    info!(
                        "reload",
                        "Running configuration SHA512 = {}", state.instance.checksum
                    );
                }
                info!("", "Reloading complete");
            }
            Err(e) => {
                error!("reload", "Corefile changed but reload failed: {e}");
                reload_failed.with(&[]).inc();
            }
        }
    }

    // Shutdown: keep serving for the lameduck period, then stop.
    state
        .instance
        .shared
        .shutting_down
        .store(true, Ordering::Relaxed);
    // CoreDNS's ready closes its listener as shutdown starts (connections
    // are then refused), while health answers through the lameduck period.
    let ready_only: Vec<SocketAddr> = state
        .admin
        .iter()
        .filter(|(_, a)| {
            let routes = a.routes.load();
            !routes.is_empty() && routes.iter().all(|r| r.path == "/ready")
        })
        .map(|(addr, _)| *addr)
        .collect();
    for addr in ready_only {
        if let Some(a) = state.admin.remove(&addr) {
            let _ = a.stop.send(true);
        }
    }
    if let Some(d) = state.instance.shared.lameduck {
        info!(
            "health",
            "Going into lameduck mode for {}s",
            d.as_secs_f64()
        );
        tokio::time::sleep(d).await;
    }
    let mut in_flight = Vec::new();
    for (_, s) in state.dns.drain() {
        in_flight.extend(s.stop());
    }
    for (_, a) in state.admin.drain() {
        let _ = a.stop.send(true);
    }
    // The queries already received are answered before we return (the
    // caller exits then): with a successor reading the same sockets, this
    // is what makes a hand-over lose nothing. Bounded, as a query's own
    // deadlines bound it.
    let _ = tokio::time::timeout(DRAIN, async {
        for t in in_flight {
            let _ = t.await;
        }
    })
    .await;
    run_hooks(std::mem::take(&mut state.instance.shared.on_shutdown));
    Ok(())
}

/// The longest a stopping server waits for the queries in flight.
const DRAIN: Duration = Duration::from_secs(5);

fn run_hooks(hooks: Vec<clusterdns_contract::setup::Hook>) {
    for h in hooks {
        if let Err(e) = h() {
            error!("", "{e}");
        }
    }
}

/// Makes `next` the serving configuration: binds its new listeners, runs
/// its start-up hooks, swaps every zone table and route table, stops
/// listeners it no longer has, then shuts the old configuration down. On
/// error the old configuration keeps serving untouched.
async fn apply(
    state: &mut State,
    mut next: Instance,
    workers: usize,
    rt: &tokio::runtime::Handle,
    inherited: &Inherited,
) -> Result<(), ServerError> {
    // 1. Bind (or adopt) what is new.
    let mut fresh: HashMap<SocketAddr, Listening> = HashMap::new();
    for l in &next.listeners {
        if state.dns.contains_key(&l.addr) {
            continue;
        }
        match start_dns(l.addr, l.mux.clone(), workers, rt, inherited).await {
            Ok(s) => {
                fresh.insert(l.addr, s);
            }
            Err(e) if l.optional => {
                warning!("", "not listening on {}: {e}", l.addr);
            }
            Err(source) => {
                for (_, s) in fresh {
                    s.stop();
                }
                return Err(ServerError::Bind {
                    addr: l.addr,
                    source,
                });
            }
        }
    }
    let mut fresh_admin: HashMap<SocketAddr, AdminServing> = HashMap::new();
    let groups = admin::by_addr(&next.shared.routes);
    for (addr, routes) in &groups {
        if state.admin.contains_key(addr) {
            continue;
        }
        match listen::admin(*addr, inherited) {
            Ok((listener, fd)) => {
                let routes: admin::Routes = Arc::new(ArcSwap::from_pointee(routes.clone()));
                let (stop, rx) = watch::channel(false);
                tokio::spawn(admin::serve(listener, routes.clone(), rx));
                fresh_admin.insert(*addr, AdminServing { routes, stop, fd });
            }
            Err(source) => {
                for (_, s) in fresh {
                    s.stop();
                }
                for (_, a) in fresh_admin {
                    let _ = a.stop.send(true);
                }
                return Err(ServerError::Bind {
                    addr: *addr,
                    source,
                });
            }
        }
    }
    // 2. Start the new configuration's plugins. CoreDNS sets (or clears)
    // its debug logging as it makes the new servers, before their start-up
    // hooks, so a reload that drops *debug* turns it off.
    clusterdns_contract::log::set_debug(next.shared.debug);
    let hooks = std::mem::take(&mut next.shared.on_startup);
    for h in hooks {
        if let Err(e) = h() {
            clusterdns_contract::log::set_debug(state.instance.shared.debug);
            for (_, s) in fresh {
                s.stop();
            }
            for (_, a) in fresh_admin {
                let _ = a.stop.send(true);
            }
            return Err(ServerError::Startup(e));
        }
    }
    // 3. Swap zone tables and routes; keep or stop the old listeners.
    let keep: Vec<SocketAddr> = next.listeners.iter().map(|l| l.addr).collect();
    for l in &next.listeners {
        if let Some(s) = state.dns.get(&l.addr) {
            s.mux.store(Arc::new(l.mux.clone()));
        }
    }
    let gone: Vec<SocketAddr> = state
        .dns
        .keys()
        .filter(|a| !keep.contains(a))
        .copied()
        .collect();
    for a in gone {
        if let Some(s) = state.dns.remove(&a) {
            s.stop();
        }
    }
    state.dns.extend(fresh);
    for (addr, routes) in &groups {
        if let Some(a) = state.admin.get(addr) {
            a.routes.store(Arc::new(routes.clone()));
        }
    }
    let gone: Vec<SocketAddr> = state
        .admin
        .keys()
        .filter(|a| !groups.iter().any(|(g, _)| g == *a))
        .copied()
        .collect();
    for a in gone {
        if let Some(s) = state.admin.remove(&a) {
            let _ = s.stop.send(true);
        }
    }
    state.admin.extend(fresh_admin);
    // 4. Retire the old configuration.
    let old = std::mem::replace(&mut state.instance, next);
    let mut old_shared = old.shared;
    run_hooks(std::mem::take(&mut old_shared.on_shutdown));
    Ok(())
}
