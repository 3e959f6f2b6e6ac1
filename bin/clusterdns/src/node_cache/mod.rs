//! The `node-cache` job: node-local-dns's agent around the server library.
//! Start-up in upstream's order: the flags are checked and the Corefile
//! rendered before anything on the node changes; then the interface; then
//! the server; the interception only once the server serves, so a bad
//! Corefile or a port conflict never leaves rules behind.

mod metrics_http;
mod upgrade;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clusterdns_nodecache::ready::ReadyProbe;
use clusterdns_nodecache::template::{self, DEFAULT_KUBEDNS_CM, KubeDnsConfig, TemplateError};
use clusterdns_nodecache::{Agent, Flags, FlagsError, flags};
use clusterdns_observe::metrics::Registry;
use clusterdns_observe::{error, info, warning};
use clusterdns_server::{ConfigSource, Options};
use tokio::signal::unix::{SignalKind, signal};

use crate::process::Pidfile;

/// How often both config directories are polled (upstream's
/// `DefaultConfigSyncPeriod` and kube-dns's `ConfigPeriod`).
const CONFIG_POLL: Duration = Duration::from_secs(10);

/// How often a metrics port held by another process is tried again.
const METRICS_RETRY: Duration = Duration::from_secs(2);

/// Runs the job for `args` (without the program or job name); `program`
/// is the name shown in the usage.
pub fn main(program: &str, args: &[String], version: String) -> ExitCode {
    let f = match flags::parse(args) {
        Ok(f) => f,
        Err(e @ FlagsError::Syntax(_)) => {
            eprintln!("{e}");
            eprint!("{}", flags::usage(program));
            return ExitCode::from(e.exit_code());
        }
        Err(FlagsError::Help) => {
            eprint!("{}", flags::usage(program));
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            fatal(format_args!("{e}"));
            return ExitCode::from(e.exit_code());
        }
    };
    if f.version {
        println!("{version}");
        return ExitCode::SUCCESS;
    }
    if f.plugins {
        let mut names: Vec<&str> = clusterdns_plugins::registry()
            .iter()
            .map(|p| p.name)
            .collect();
        names.sort_unstable();
        for n in names {
            println!("  dns.{n}");
        }
        return ExitCode::SUCCESS;
    }
    info!("", "Starting node-cache: {}", version.replace('\n', " "));
    let rt = match crate::process::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            fatal(format_args!("runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let code = rt.block_on(run(f, version));
    // Log lines are written by a thread of their own: let the last ones
    // (the teardown's) out before the process exits.
    clusterdns_observe::log::flush();
    code
}

/// A signal before the server served: nothing was intercepted yet; the
/// interface goes.
async fn stopped_early(agent: &Agent, handed: bool) -> ExitCode {
    // Taken over: the predecessor still serves and owns the node's state.
    if !handed {
        agent.teardown().await;
    }
    info!("", "stopped before serving");
    ExitCode::SUCCESS
}

/// Whether the interception is ours to keep: no hand-over under way and
/// no successor alive on our sockets (one that connected since the last
/// look counts).
fn in_charge(
    giving: &AtomicBool,
    successor: &mut Option<clusterdns_nodecache::handover::Conn>,
    successors: &mut tokio::sync::mpsc::UnboundedReceiver<clusterdns_nodecache::handover::Conn>,
) -> bool {
    while let Ok(c) = successors.try_recv() {
        *successor = Some(c);
    }
    !giving.load(Ordering::SeqCst) && !successor.as_ref().is_some_and(|c| c.alive())
}

/// Whether a successor serves on our sockets now (waiting for a
/// hand-over under way to finish: a rolling update may stop this pod
/// while its successor is still starting). Logs the decision.
async fn successor_serves(
    successor: &mut Option<clusterdns_nodecache::handover::Conn>,
    successors: &mut tokio::sync::mpsc::UnboundedReceiver<clusterdns_nodecache::handover::Conn>,
    giving: &AtomicBool,
) -> bool {
    while let Ok(c) = successors.try_recv() {
        *successor = Some(c);
    }
    if giving.load(Ordering::SeqCst) {
        info!("", "a successor is taking over: waiting for it to serve");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(65);
        while giving.load(Ordering::SeqCst) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        while let Ok(c) = successors.try_recv() {
            *successor = Some(c);
        }
    }
    match successor {
        Some(c) if c.alive() => {
            info!(
                "",
                "handing over to process {}: draining the queries in flight; the interception and the interface stay",
                c.peer_pid().unwrap_or(0)
            );
            true
        }
        Some(_) => {
            info!("", "the successor has gone: tearing down");
            false
        }
        None => false,
    }
}

/// A `[FATAL]` line, written before the process exits (upstream's
/// `clog.Fatalf`).
fn fatal(msg: std::fmt::Arguments<'_>) {
    clusterdns_observe::log::write(clusterdns_observe::log::Level::Fatal, "", msg);
}

/// The kube-dns ConfigMap directory: `-kubednscm`, else `/etc/kube-dns`
/// when it exists.
fn kubedns_dir(f: &Flags) -> Option<PathBuf> {
    if !f.kubedns_cm.is_empty() {
        return Some(PathBuf::from(&f.kubedns_cm));
    }
    let d = Path::new(DEFAULT_KUBEDNS_CM);
    d.exists().then(|| d.to_path_buf())
}

fn read_kubedns(dir: Option<&Path>) -> Result<KubeDnsConfig, TemplateError> {
    match dir {
        Some(d) => KubeDnsConfig::read_dir(d),
        None => Ok(KubeDnsConfig::default()),
    }
}

async fn run(f: Flags, version: String) -> ExitCode {
    let registry = Arc::new(Registry::new());
    // As upstream's Go client: its /metrics carries process_* too.
    registry.get_or_register(clusterdns_observe::process::NAME, || {
        clusterdns_observe::process::Process
    });
    // Read once, as upstream: a changed Service IP needs a restart.
    let cluster_dns: Result<IpAddr, TemplateError> =
        template::cluster_dns_ip(&f.upstream_svc, |v| std::env::var(v).ok());
    if let Err(e) = &cluster_dns {
        clusterdns_observe::warning!("", "{e}");
    }
    let cm_dir = kubedns_dir(&f);
    // The checks that need nothing changed: the agent (netlink, the
    // iptables backend, the interception mode) and the first Corefile.
    let agent = match Agent::with_fallback(&f, &registry, cluster_dns.as_ref().ok().copied()).await
    {
        Ok(a) => a,
        Err(e) => {
            fatal(format_args!("{e}"));
            return ExitCode::FAILURE;
        }
    };
    // What the first render reads, seen before it reads it: a change made
    // meanwhile is picked up by the first poll.
    let base_dir = Path::new(&f.base_corefile)
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let mut seen = (
        template::dir_snapshot(&base_dir),
        cm_dir.as_deref().map(template::dir_snapshot),
    );
    let mut cm = match read_kubedns(cm_dir.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            error!("", "Failed to sync kube-dns config directory: {e}");
            agent.metrics().error("configmap");
            KubeDnsConfig::default()
        }
    };
    if let Err(e) = clusterdns_nodecache::update_corefile(&f, &cluster_dns, &cm, agent.metrics())
        && !Path::new(&f.corefile).exists()
    {
        fatal(format_args!("no Corefile to serve: {e}"));
        return ExitCode::FAILURE;
    }
    // The handlers before anything changes on the node, so a signal at
    // any point from here on tears down what was made (a signal before
    // serving stops the start-up).
    let (mut term, mut int, mut quit, mut usr1) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::quit()),
        signal(SignalKind::user_defined1()),
    ) {
        (Ok(a), Ok(b), Ok(c), Ok(d)) => (a, b, c, d),
        _ => {
            fatal(format_args!("cannot install the signal handlers"));
            return ExitCode::FAILURE;
        }
    };
    // A running instance (the pod this one replaces) hands its sockets
    // over: both serve them until it is told to stop.
    let taken = match f.handover_socket.clone() {
        Some(p) => match tokio::task::spawn_blocking(move || upgrade::take(Path::new(&p))).await {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => {
                // Whoever listens there keeps its sockets; binding ours
                // will say whether they are free.
                clusterdns_observe::warning!("", "{e}; starting on sockets of our own");
                None
            }
            Err(e) => {
                fatal(format_args!("hand-over: {e}"));
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    let (predecessor, inherited, metrics_fd) = match taken {
        Some(t) => {
            info!(
                "",
                "taking over from process {}: {} sockets handed over; the interception stays as it is",
                t.conn.peer_pid().unwrap_or(0),
                t.server.len() + usize::from(t.metrics.is_some())
            );
            (
                Some(t.conn),
                clusterdns_server::Inherited::new(t.server),
                t.metrics,
            )
        }
        None => (None, clusterdns_server::Inherited::default(), None),
    };
    // Taken over: the interface, the rules and the table are the running
    // instance's until this one serves; a failure before must not touch
    // them.
    let handed = predecessor.is_some();
    // The interface first: the server binds its addresses.
    agent.setup_interface().await;
    let opts = Options {
        source: ConfigSource::File(PathBuf::from(&f.corefile)),
        dns_port: f.dns_port,
        registry: clusterdns_plugins::registry(),
        quiet: f.quiet,
        udp_workers: None,
        banner: version,
        // The agent's counters show on the prometheus plugin's listener too.
        metrics: Some(registry.clone()),
        inherited,
    };
    let (mut controller, control) = clusterdns_server::control();
    let mut server = std::pin::pin!(clusterdns_server::serve(opts, control));
    tokio::select! {
        done = &mut server => {
            // A bad Corefile or a port conflict: no rules were made; the
            // interface goes too.
            let why = match done {
                Ok(()) => "the server stopped before serving".to_string(),
                Err(e) => e.to_string(),
            };
            if !handed {
                agent.teardown().await;
            }
            fatal(format_args!("{why}"));
            return ExitCode::FAILURE;
        }
        _ = controller.serving() => {}
        _ = term.recv() => return stopped_early(&agent, handed).await,
        _ = int.recv() => return stopped_early(&agent, handed).await,
        _ = quit.recv() => return stopped_early(&agent, handed).await,
    }
    if let Some(c) = &predecessor
        && let Err(e) = clusterdns_nodecache::handover::serving(c)
    {
        clusterdns_observe::warning!("", "hand-over: telling the predecessor we serve: {e}");
    }
    let _pidfile = match f
        .pidfile
        .clone()
        .map(PathBuf::from)
        .map(Pidfile::write)
        .transpose()
    {
        Ok(p) => p,
        Err(e) => {
            error!("", "failed to write pidfile: {e}");
            None
        }
    };
    // Serving: now the interception (upstream waits for the pidfile or
    // the first tick; we need neither).
    agent.setup_rules().await;
    let ready = f.ready_query.as_deref().and_then(|name| {
        let p = ReadyProbe::new(&f.local_ips, f.dns_port, name);
        match &p {
            Some(p) => info!("", "/ready asks {} for {name}", p.target()),
            None => error!("", "-ready-query {name:?} is not a domain name: no /ready"),
        }
        p.map(Arc::new)
    });
    let metrics_listener = match metrics_http::spawn(
        &f.metrics_listen_address,
        registry.clone(),
        ready.clone(),
        metrics_fd,
    )
    .await
    {
        Ok((addr, fd)) => {
            info!("", "metrics on http://{addr}/metrics");
            Some((addr, fd))
        }
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            // Upstream's node-cache beside us (an update from it) holds
            // the port without SO_REUSEPORT until it stops.
            error!(
                "",
                "metrics listener {}: {e}; trying again every {}s",
                f.metrics_listen_address,
                METRICS_RETRY.as_secs()
            );
            metrics_http::spawn_when_free(
                f.metrics_listen_address.clone(),
                registry.clone(),
                ready.clone(),
                METRICS_RETRY,
            );
            None
        }
        Err(e) => {
            error!("", "metrics listener {}: {e}", f.metrics_listen_address);
            None
        }
    };
    if let Some(addr) = &f.ready_listen_address {
        match metrics_http::spawn(addr, registry.clone(), ready.clone(), None).await {
            Ok((addr, _)) => info!("", "/ready on http://{addr}/ready"),
            Err(e) => error!("", "ready listener {addr}: {e}"),
        }
    }
    // Serving: the next instance may take over from here.
    let (successors_tx, mut successors) = tokio::sync::mpsc::unbounded_channel();
    let giving = Arc::new(AtomicBool::new(false));
    let handover_listener = match f.handover_socket.as_deref().map(Path::new) {
        Some(p) => match clusterdns_nodecache::handover::Listener::bind(p) {
            Ok(l) => {
                let l = Arc::new(l);
                upgrade::give_forever(
                    l.clone(),
                    controller.exporter(),
                    metrics_listener,
                    successors_tx,
                    giving.clone(),
                );
                Some(l)
            }
            Err(e) => {
                error!(
                    "",
                    "hand-over socket {}: {e}; no successor can take over",
                    p.display()
                );
                None
            }
        },
        None => None,
    };
    let mut successor: Option<clusterdns_nodecache::handover::Conn> = None;
    // Set when a successor serves on our sockets as we stop: nothing on
    // the node is torn down.
    let mut handing_over = false;
    let mut sync = tokio::time::interval_at(
        tokio::time::Instant::now() + f.sync_interval,
        f.sync_interval,
    );
    sync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut poll = tokio::time::interval_at(tokio::time::Instant::now() + CONFIG_POLL, CONFIG_POLL);
    // Another instance's teardown (upstream's, after an update from it to
    // us) deletes the interface by name: put it back at once.
    let mut watch = agent.watch();
    // Once torn down, the periodic sync must not put the rules back while
    // the server finishes.
    let mut stopping = false;
    let done = loop {
        tokio::select! {
            done = &mut server => break done,
            // While a successor takes over or serves on our sockets the
            // interception is its own: in another mode, ours put back
            // would undo its removal of our rules (or table), and the two
            // would take turns removing each other's.
            _ = sync.tick(), if !stopping => {
                if in_charge(&giving, &mut successor, &mut successors) {
                    agent.sync().await;
                }
            }
            got = async {
                match watch.as_mut() {
                    Some(w) => w.recv().await,
                    None => std::future::pending().await,
                }
            }, if !stopping => match got {
                Some(()) if in_charge(&giving, &mut successor, &mut successors) => {
                    warning!("", "the interface or one of its addresses was deleted: putting them back");
                    agent.sync().await;
                }
                Some(()) => {}
                None => watch = None,
            },
            _ = poll.tick() => {
                let now = (
                    template::dir_snapshot(&base_dir),
                    cm_dir.as_deref().map(template::dir_snapshot),
                );
                if now != seen {
                    if now.1 != seen.1 {
                        match read_kubedns(cm_dir.as_deref()) {
                            Ok(c) => cm = c,
                            Err(e) => {
                                agent.metrics().error("configmap");
                                error!("", "Invalid kube-dns config, ignoring update: {e}");
                            }
                        }
                    }
                    seen = now;
                    if clusterdns_nodecache::update_corefile(&f, &cluster_dns, &cm, agent.metrics()).is_ok()
                        && f.reload_with_signal
                    {
                        info!("", "Reloading the server");
                        controller.reload();
                    }
                }
            }
            _ = usr1.recv() => controller.reload(),
            Some(c) = successors.recv() => successor = Some(c),
            // With a successor serving on our sockets: stop reading them
            // and answer what is in flight; the successor reads the rest,
            // and keeps the interception. Otherwise the interception goes
            // first, so queries fall back to the cluster DNS while the
            // server still answers the ones in flight; then the server
            // stops; then the table and the interface go (after the loop).
            _ = async { tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} } } => {
                stopping = true;
                handing_over = successor_serves(&mut successor, &mut successors, &giving).await;
                if !handing_over {
                    agent.stop_intercepting().await;
                }
                controller.shutdown();
            }
            _ = quit.recv() => {
                if !successor_serves(&mut successor, &mut successors, &giving).await {
                    agent.teardown().await;
                }
                if let Some(l) = &handover_listener {
                    l.remove_if_ours();
                }
                return ExitCode::SUCCESS;
            }
        }
    };
    if let Some(l) = &handover_listener {
        l.remove_if_ours();
    }
    // Upstream tears down whenever CoreDNS returns (after a signal, the
    // rules are gone already and this removes what is left).
    if !handing_over {
        agent.teardown().await;
    }
    drop(predecessor);
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            fatal(format_args!("{e}"));
            ExitCode::FAILURE
        }
    }
}
