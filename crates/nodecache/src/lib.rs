#![doc = include_str!("../README.md")]

pub mod conntrack;
pub mod crashsafe;
pub mod flags;
pub mod handover;
pub mod iptables;
pub mod metrics;
pub mod netif;
pub mod peers;
pub mod ready;
pub mod template;

use std::path::Path;

use clusterdns_observe::metrics::Registry;
use clusterdns_observe::{error, info, warning};

pub use crashsafe::CrashSafe;
pub use flags::{Flags, FlagsError, Interception};
pub use iptables::{Backend, Ensured, Iptables, Rule, RuleSet};
pub use metrics::SetupMetrics;
pub use netif::{LinkKind, Netif, NetifError};
pub use template::{KubeDnsConfig, Rendered, TemplateError};

/// The network side of node-cache: the interface and the rules, as the
/// flags ask. It serves no DNS; the binary runs the server beside it.
#[derive(Debug)]
pub struct Agent {
    netif: Option<Netif>,
    mode: Mode,
    skip_teardown: bool,
    metrics: SetupMetrics,
    /// `-localip` and the DNS port: where another server would show.
    ips: Vec<std::net::IpAddr>,
    dns_port: u16,
    /// Whether another server was on our addresses at the last look, to
    /// log a change once (the sync runs every `-syncinterval`).
    shared: std::sync::atomic::AtomicBool,
    /// Crash-safe mode: whether the rules were looked at once (at start
    /// they are a predecessor's), and since when upstream's NOTRACK rules
    /// have been back with no other server in sight (see
    /// [`STALE_AFTER`]).
    looked: std::sync::atomic::AtomicBool,
    notrack_since: std::sync::Mutex<Option<std::time::Instant>>,
}

/// How long upstream's NOTRACK rules that appear while we run, with no
/// other process serving our addresses, are left before they are removed
/// as a crashed instance's. They appear before anyone serves when an
/// upstream instance starts beside us: upstream puts its rules in, then
/// starts CoreDNS. (Found at start they are removed at once: a crashed
/// instance's, or a predecessor's that handed over to us.)
pub const STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(30);

/// The interception in force.
#[derive(Debug)]
enum Mode {
    /// `-setupiptables=false`: someone else intercepts.
    None,
    /// Upstream's iptables rules; `stale` is our crash-safe table,
    /// removed when found (a crash-safe predecessor's, left to us by a
    /// hand-over: it would keep the link-local fallback and a second
    /// interception beside the rules).
    Iptables { rules: RuleSet, stale: CrashSafe },
    /// Our nftables table; `accept` are upstream's ACCEPT rules (filter
    /// INPUT and OUTPUT), kept beside it for nodes whose policy drops;
    /// `stale` are upstream's NOTRACK rules, removed when found (a crashed
    /// upstream instance's, or an iptables-mode predecessor's left to us
    /// by a hand-over, would defeat the table). Both `None` without
    /// iptables on the node.
    CrashSafe {
        table: CrashSafe,
        accept: Option<RuleSet>,
        stale: Option<RuleSet>,
    },
}

/// Why the agent refused to start (before changing anything).
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// netlink could not be opened.
    #[error(transparent)]
    Netif(#[from] NetifError),
    /// `-interception=crashsafe` cannot work here.
    #[error("crash-safe interception refused: {0}")]
    CrashSafe(String),
}

impl Agent {
    /// Prepares the agent (opens netlink, detects the iptables backend)
    /// without changing anything on the node.
    pub async fn new(f: &Flags, reg: &Registry) -> Result<Self, AgentError> {
        Self::with_fallback(f, reg, None).await
    }

    /// As [`Agent::new`]; in crash-safe mode the link-local address falls
    /// back to `upstream` (the upstream Service's ClusterIP) while no
    /// socket of ours exists.
    pub async fn with_fallback(
        f: &Flags,
        reg: &Registry,
        upstream: Option<std::net::IpAddr>,
    ) -> Result<Self, AgentError> {
        let metrics = SetupMetrics::new(reg);
        let netif = if f.setup_interface {
            Some(Netif::new(
                &f.interface_name,
                &f.local_ips,
                metrics.clone(),
            )?)
        } else {
            None
        };
        let upstream_rules = || async {
            let ipt = Iptables::detect(f.local_ips[0].is_ipv6(), None).await;
            let set = iptables::rules(&f.local_ips, f.dns_port, f.health_port);
            RuleSet::new(ipt, set, metrics.clone())
        };
        let mode = if !f.setup_iptables {
            info!("", "interception: none (-setupiptables=false)");
            Mode::None
        } else {
            let table =
                CrashSafe::new(&f.local_ips, f.dns_port, f.health_port).with_fallback(upstream);
            let why_not = match f.interception {
                Interception::Iptables => Some("-interception=iptables".to_string()),
                _ => match crashsafe::wildcard_listener(f.dns_port) {
                    Some(l) => Some(format!(
                        "a socket on the wildcard address would keep the socket match true after we exit ({l})"
                    )),
                    None => table
                        .supported()
                        .await
                        .err()
                        .map(|e| format!("the kernel or nft refuses the table: {e}")),
                },
            };
            match (why_not, f.interception) {
                (None, _) => {
                    let fallback = match table.fallback() {
                        Some(up) => {
                            format!("; the link-local address falls back to {up} meanwhile")
                        }
                        None => String::new(),
                    };
                    // Upstream's rules can only be there, and a policy
                    // of iptables can only drop, if iptables is.
                    let rules = Some(upstream_rules().await).filter(|r| r.iptables().available());
                    let accepts = match &rules {
                        Some(r) => format!(
                            "; DNS to the local addresses accepted in {} filter INPUT/OUTPUT ({:?} backend), for policies that drop",
                            r.iptables().binary(),
                            r.iptables().backend()
                        ),
                        None => "; no iptables here: no ACCEPT rules".to_string(),
                    };
                    info!(
                        "",
                        "interception: crashsafe (nftables table {}: queries are intercepted only while our sockets exist{fallback}{accepts})",
                        crashsafe::TABLE
                    );
                    let (accept, stale) = rules.map(RuleSet::partition).unzip();
                    Mode::CrashSafe {
                        table,
                        accept,
                        stale,
                    }
                }
                (Some(why), Interception::CrashSafe) => return Err(AgentError::CrashSafe(why)),
                (Some(why), _) => {
                    let set = upstream_rules().await;
                    info!(
                        "",
                        "interception: iptables ({}, {:?} backend; not crashsafe: {why})",
                        set.iptables().binary(),
                        set.iptables().backend()
                    );
                    Mode::Iptables {
                        rules: set,
                        stale: table,
                    }
                }
            }
        };
        Ok(Agent {
            netif,
            mode,
            skip_teardown: f.skip_teardown,
            metrics,
            ips: f.local_ips.clone(),
            dns_port: f.dns_port,
            shared: std::sync::atomic::AtomicBool::new(false),
            looked: std::sync::atomic::AtomicBool::new(false),
            notrack_since: std::sync::Mutex::new(None),
        })
    }

    /// Another process's sockets on our addresses (upstream's node-cache
    /// beside us during a DaemonSet update, either way), logged when that
    /// changes: while there are any, its rules are not leftovers to
    /// remove, and our teardown leaves it the interface and the rules it
    /// shares with us (peers.rs).
    pub fn other_servers(&self) -> Vec<peers::Socket> {
        let others = peers::foreign(&self.ips, self.dns_port);
        let now = !others.is_empty();
        if self.shared.swap(now, std::sync::atomic::Ordering::Relaxed) != now {
            if now {
                let list: Vec<String> = others.iter().map(ToString::to_string).collect();
                warning!(
                    "",
                    "another process serves our addresses ({}): its node-cache rules are not removed as stale, and our teardown leaves it the interface and the rules we share",
                    list.join(", ")
                );
            } else {
                info!("", "no other process serves our addresses any more");
            }
        }
        others
    }

    /// Deletions of the interface or its addresses, as they happen (see
    /// [`Netif::watch`]); `None` without `-setupinterface`, or when the
    /// netlink socket cannot be opened (then the periodic sync alone puts
    /// them back).
    pub fn watch(&self) -> Option<tokio::sync::mpsc::Receiver<()>> {
        match self.netif.as_ref()?.watch() {
            Ok(rx) => Some(rx),
            Err(e) => {
                error!("", "Error watching the interface: {e}");
                None
            }
        }
    }

    /// Whether crash-safe interception is in force.
    pub fn crash_safe(&self) -> bool {
        matches!(self.mode, Mode::CrashSafe { .. })
    }

    /// The counters.
    pub fn metrics(&self) -> &SetupMetrics {
        &self.metrics
    }

    /// Upstream's rules, in iptables mode.
    pub fn rule_set(&self) -> Option<&RuleSet> {
        match &self.mode {
            Mode::Iptables { rules, .. } => Some(rules),
            _ => None,
        }
    }

    /// Creates or completes the interface (`-setupinterface`). Errors are
    /// logged and counted; the caller carries on, as upstream does.
    pub async fn setup_interface(&self) -> Option<LinkKind> {
        let n = self.netif.as_ref()?;
        match n.ensure().await {
            Ok(k) => Some(k),
            Err(e) => {
                error!("", "Error setting up the interface: {e}");
                None
            }
        }
    }

    /// Ensures the rules or the table (`-setupiptables`); never fatal.
    pub async fn setup_rules(&self) -> Ensured {
        // Looked at once a pass: logs a change in either mode, and tells
        // crash-safe mode whether upstream's rules are someone's.
        let alone = self.other_servers().is_empty();
        match &self.mode {
            Mode::None => Ensured::default(),
            Mode::Iptables { rules, stale } => {
                // Ours first, then the other's, and only once ours are
                // all in: the node is never without an interception (a TCP
                // connection meeting kube-proxy's DNAT mid-stream would be
                // reset).
                let done = rules.ensure().await;
                if done.errors == 0 && stale.listed().await.is_some() {
                    match stale.remove().await {
                        Ok(()) => warning!(
                            "",
                            "removed the nftables table {} (a crash-safe instance's: a predecessor that handed over to us, or one that did not tear down)",
                            crashsafe::TABLE
                        ),
                        Err(e) => {
                            self.metrics.error("iptables");
                            error!("", "Error removing the stale nftables table: {e}");
                        }
                    }
                }
                done
            }
            Mode::CrashSafe {
                table,
                accept,
                stale,
            } => {
                // The ACCEPT rules first: where the policy drops, a query
                // the table untracks is dropped without them (neither NEW
                // nor ESTABLISHED to conntrack). Left behind by a crash
                // they accept DNS to addresses nothing else answers, so
                // they cost the crash-safe property nothing. Until they
                // are all in, the table is not put in: without it queries
                // still reach the cluster DNS through kube-proxy, with it
                // they might be dropped.
                let mut done = match accept {
                    Some(a) => a.ensure().await,
                    None => Ensured::default(),
                };
                let replace = !table.intact().await;
                if replace && done.errors > 0 {
                    error!(
                        "",
                        "not installing the nftables table {} before the ACCEPT rules are in",
                        crashsafe::TABLE
                    );
                } else if replace {
                    match table.install().await {
                        Ok(()) => {
                            done.added += 1;
                            info!("", "Added back nodelocaldns table - {}", crashsafe::TABLE);
                        }
                        Err(e) => {
                            done.errors += 1;
                            self.metrics.error("iptables");
                            error!("", "Error installing the nftables table: {e}");
                        }
                    }
                }
                if let Some(stale) = stale.as_ref().filter(|_| done.errors == 0)
                    && self.notrack_stale(stale, alone).await
                {
                    let n = stale.remove().await;
                    if n > 0 {
                        warning!(
                            "",
                            "removed {n} stale node-cache iptables rules (left by an instance that did not tear down)"
                        );
                    }
                }
                done
            }
        }
    }

    /// Whether upstream's NOTRACK rules, in crash-safe mode, are a gone
    /// instance's to remove now: never while another process serves our
    /// addresses (its rules are its own); at the first look, yes (a
    /// crashed instance's, or a hand-over predecessor's in iptables mode,
    /// which would defeat the table); later, only once they have been
    /// there for [`STALE_AFTER`] with nobody else serving.
    async fn notrack_stale(&self, stale: &RuleSet, alone: bool) -> bool {
        let first = !self.looked.swap(true, std::sync::atomic::Ordering::Relaxed);
        let gone = !first && alone && stale.present().await == 0;
        let Ok(mut since) = self.notrack_since.lock() else {
            return false;
        };
        if !alone || gone {
            *since = None;
            return false;
        }
        if first {
            return true;
        }
        let t = *since.get_or_insert_with(std::time::Instant::now);
        let due = t.elapsed() >= STALE_AFTER;
        if due {
            *since = None;
        }
        due
    }

    /// One periodic pass: interface, then rules (upstream's
    /// `setupNetworking`).
    pub async fn sync(&self) -> Ensured {
        self.setup_interface().await;
        self.setup_rules().await
    }

    /// Removes the rules, then the interface (upstream's order since
    /// kubernetes/dns#690), unless `-skipteardown`.
    pub async fn teardown(&self) {
        self.stop_intercepting().await;
        self.finish_teardown().await;
    }

    /// The first half of a graceful stop, before the server stops: in
    /// iptables mode the rules go, so new queries fall back to the cluster
    /// DNS while the server still answers those in flight. In crash-safe
    /// mode nothing: closing the server's sockets ends the interception.
    pub async fn stop_intercepting(&self) {
        if self.skip_teardown {
            return;
        }
        if let Mode::Iptables { rules, .. } = &self.mode
            && self.other_servers().is_empty()
        {
            rules.remove().await;
        }
    }

    /// The second half, once the server has stopped: the crash-safe table
    /// and the interface (removing the addresses earlier would fail the
    /// replies still being sent from them).
    pub async fn finish_teardown(&self) {
        if self.skip_teardown {
            info!("", "skipteardown: leaving the rules and the interface");
            return;
        }
        // Our sockets are closed by now: any left on our addresses are
        // another instance's, which needs the interface, and the rules we
        // share with it (upstream's are ours to the comment), to go on.
        let alone = self.other_servers().is_empty();
        if !alone {
            info!(
                "",
                "leaving the interface and the node-cache iptables rules to the process that serves our addresses"
            );
        }
        match &self.mode {
            Mode::None => {}
            Mode::Iptables { rules, .. } => {
                if alone {
                    rules.remove().await;
                }
            }
            Mode::CrashSafe { table, accept, .. } => {
                // The table first, so no untracked query meets a policy
                // that drops it. It is ours alone: the other instance
                // intercepts with its own rules.
                if let Err(e) = table.remove().await {
                    self.metrics.error("iptables");
                    error!("", "Error removing the nftables table: {e}");
                }
                if let Some(a) = accept.as_ref().filter(|_| alone) {
                    a.remove().await;
                }
            }
        }
        if let Some(n) = self.netif.as_ref().filter(|_| alone)
            && let Err(e) = n.remove().await
        {
            error!("", "Error removing the interface: {e}");
        }
        // With nobody serving our addresses, entries of our replies would
        // send a client's new socket on the same port nowhere (see
        // `conntrack`). Another server still answers through them.
        if alone && !matches!(self.mode, Mode::None) {
            let (ips, port) = (self.ips.clone(), self.dns_port);
            let done = tokio::task::spawn_blocking(move || conntrack::forget_replies(&ips, port))
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()));
            match done {
                Ok(0) => {}
                Ok(n) => info!("", "deleted {n} conntrack entries of our replies"),
                Err(e) => warning!(
                    "",
                    "cannot delete the conntrack entries of our replies: {e}"
                ),
            }
        }
    }
}

/// Renders `-basecorefile` with the kube-dns ConfigMap and writes it to
/// `-conf` (mode 0666 as upstream). On any error the old file stays and
/// `configmap` is counted.
pub fn update_corefile(
    f: &Flags,
    cluster_dns: &Result<std::net::IpAddr, TemplateError>,
    cm: &KubeDnsConfig,
    metrics: &SetupMetrics,
) -> Result<Rendered, TemplateError> {
    let go = || -> Result<Rendered, TemplateError> {
        let base =
            std::fs::read_to_string(&f.base_corefile).map_err(|source| TemplateError::Io {
                path: f.base_corefile.clone().into(),
                source,
            })?;
        let r = template::render(
            &base,
            &template::Params {
                local_ip_str: &f.local_ip_str,
                dns_port: f.dns_port,
                cluster_dns,
                prometheus: &f.prometheus_listen_address,
            },
            cm,
        )?;
        write_0666(Path::new(&f.corefile), r.text.as_bytes()).map_err(|source| {
            TemplateError::Io {
                path: f.corefile.clone().into(),
                source,
            }
        })?;
        Ok(r)
    };
    match go() {
        Ok(r) => {
            if let Some(w) = r.warning {
                warning!("", "{w}");
            }
            info!(
                "",
                "Updated Corefile with {} custom stubdomains and upstream servers {}",
                cm.stub_domains.len(),
                r.upstream_servers
            );
            Ok(r)
        }
        Err(e) => {
            metrics.error("configmap");
            error!("", "Failed to update the Corefile: {e}");
            Err(e)
        }
    }
}

fn write_0666(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    // Written beside and renamed, so the server never reads half a file.
    let tmp = path.with_extension("tmp-nodecache");
    std::fs::write(&tmp, bytes)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o666))?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod readme {
    const README: &str = include_str!("../README.md");

    #[test]
    fn the_daemonset_args_parse() {
        let line = README
            .lines()
            .find(|l| l.starts_with("-localip 169.254.20.10,10.96.0.10 -conf"))
            .expect("the args example");
        let args: Vec<String> = line.split(' ').map(str::to_string).collect();
        let f = crate::flags::parse(&args).expect("parses");
        assert_eq!(f.upstream_svc, "kube-dns-upstream");
    }

    #[test]
    fn the_crash_safe_table_is_what_we_install() {
        let ips = [
            "10.96.0.10".parse().expect("ip"),
            "169.254.20.10".parse().expect("ip"),
        ];
        let upstream = Some("10.96.0.11".parse().expect("ip"));
        let table = crate::CrashSafe::new(&ips, 53, 8080)
            .with_fallback(upstream)
            .table();
        assert!(
            README.contains(&table),
            "README's table differs from:\n{table}"
        );
    }
}
