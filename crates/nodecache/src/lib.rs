#![doc = include_str!("../README.md")]

pub mod flags;
pub mod iptables;
pub mod metrics;
pub mod netif;
pub mod template;

use std::path::Path;

use clusterdns_observe::metrics::Registry;
use clusterdns_observe::{error, info, warning};

pub use flags::{Flags, FlagsError};
pub use iptables::{Backend, Ensured, Iptables, Rule, RuleSet};
pub use metrics::SetupMetrics;
pub use netif::{LinkKind, Netif, NetifError};
pub use template::{KubeDnsConfig, Rendered, TemplateError};

/// The network side of node-cache: the interface and the rules, as the
/// flags ask. It serves no DNS; the binary runs the server beside it.
#[derive(Debug)]
pub struct Agent {
    netif: Option<Netif>,
    rules: Option<RuleSet>,
    skip_teardown: bool,
    metrics: SetupMetrics,
}

impl Agent {
    /// Prepares the agent (opens netlink, detects the iptables backend)
    /// without changing anything on the node.
    pub async fn new(f: &Flags, reg: &Registry) -> Result<Self, NetifError> {
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
        let rules = if f.setup_iptables {
            let ipt = Iptables::detect(f.local_ips[0].is_ipv6(), None).await;
            info!(
                "",
                "iptables mode: {} ({:?} backend)",
                ipt.binary(),
                ipt.backend()
            );
            let set = iptables::rules(&f.local_ips, f.dns_port, f.health_port);
            Some(RuleSet::new(ipt, set, metrics.clone()))
        } else {
            None
        };
        Ok(Agent {
            netif,
            rules,
            skip_teardown: f.skip_teardown,
            metrics,
        })
    }

    /// The counters.
    pub fn metrics(&self) -> &SetupMetrics {
        &self.metrics
    }

    /// The rules, when `-setupiptables`.
    pub fn rule_set(&self) -> Option<&RuleSet> {
        self.rules.as_ref()
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

    /// Ensures the rules (`-setupiptables`); never fatal.
    pub async fn setup_rules(&self) -> Ensured {
        match &self.rules {
            Some(r) => r.ensure().await,
            None => Ensured::default(),
        }
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
        if self.skip_teardown {
            info!("", "skipteardown: leaving the rules and the interface");
            return;
        }
        if let Some(r) = &self.rules {
            r.remove().await;
        }
        if let Some(n) = &self.netif
            && let Err(e) = n.remove().await
        {
            error!("", "Error removing the interface: {e}");
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
