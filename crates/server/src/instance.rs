//! One parsed and set-up Corefile: the listeners it needs and the zone
//! table of each.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clusterdns_contract::metrics::{Counter, Family, Registry};
use clusterdns_contract::{Chain, PluginDef, SetupCtx, Shared};
use clusterdns_corefile::{ConfigError, Corefile, ProcessEnv, Scheme, parse_key, parse_str};
use clusterdns_wire::Name;
use sha2::{Digest, Sha512};

use crate::mux::Mux;

/// Where the Corefile comes from.
#[derive(Debug, Clone)]
pub enum ConfigSource {
    /// A file on disk (re-read on reload).
    File(PathBuf),
    /// Text compiled in or given directly; `name` appears in messages.
    Text {
        /// Shown as the file name in errors.
        name: PathBuf,
        /// The Corefile.
        text: String,
    },
}

impl ConfigSource {
    /// Reads the Corefile text.
    pub fn read(&self) -> Result<(PathBuf, String), InstanceError> {
        match self {
            ConfigSource::File(p) => {
                std::fs::read_to_string(p)
                    .map(|t| (p.clone(), t))
                    .map_err(|source| InstanceError::Read {
                        path: p.clone(),
                        source,
                    })
            }
            ConfigSource::Text { name, text } => Ok((name.clone(), text.clone())),
        }
    }
}

/// Why a configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum InstanceError {
    /// The Corefile could not be read.
    #[error("loading Caddyfile via flag: open {}: {}", path.display(), go_io_error(source))]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Syntax error, with `file:line`.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A plugin rejected its configuration (CoreDNS `plugin.Error`).
    #[error("plugin/{plugin}: {source}")]
    Plugin {
        /// The plugin.
        plugin: &'static str,
        /// Where and why.
        #[source]
        source: ConfigError,
    },
}

/// One address the configuration listens on, with its zone table.
#[derive(Debug, Clone)]
pub struct ListenerSpec {
    /// UDP and TCP address.
    pub addr: SocketAddr,
    /// The zones served there.
    pub mux: Mux,
    /// A default wildcard IPv6 listener: failing to bind it (no IPv6 on
    /// the host) is a warning, not an error.
    pub optional: bool,
}

/// A parsed, set-up configuration, not yet serving.
#[derive(Debug)]
pub struct Instance {
    /// Listeners, in Corefile order.
    pub listeners: Vec<ListenerSpec>,
    /// Routes, readiness, hooks and settings from the plugins.
    pub shared: Shared,
    /// SHA512 of the Corefile text, in hex (what `reload` compares).
    pub checksum: String,
    /// `zone:port` lines for the start-up banner, in Corefile order.
    pub banner: Vec<String>,
}

impl Instance {
    /// Parses `source` and runs every plugin's setup in `registry` order.
    /// Binds nothing.
    pub fn build(
        source: &ConfigSource,
        registry: &[PluginDef],
        default_port: u16,
        metrics: Arc<Registry>,
    ) -> Result<Instance, InstanceError> {
        Self::build_edited(source, registry, default_port, metrics, &mut |_| {})
    }

    /// [`Instance::build`] with the parsed Corefile changed by `edit`
    /// before any setup runs (`clusterdns explain` points the
    /// *kubernetes* blocks at another source this way).
    pub fn build_edited(
        source: &ConfigSource,
        registry: &[PluginDef],
        default_port: u16,
        metrics: Arc<Registry>,
        edit: &mut dyn FnMut(&mut Corefile),
    ) -> Result<Instance, InstanceError> {
        let (path, text) = source.read()?;
        let checksum = sha512_hex(text.as_bytes());
        let mut corefile = parse_str(&text, &path, &ProcessEnv)?;
        edit(&mut corefile);
        let config_dir = path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        let panics = metrics
            .get_or_register("coredns_panics_total", || {
                Family::<Counter>::new(
                    "coredns_panics_total",
                    "A metrics that counts the number of panics.",
                    &[],
                )
            })
            .with(&[]);
        metrics.get_or_register("coredns_log_lines_dropped_total", || {
            clusterdns_contract::log::DroppedLines
        });
        let mut shared = Shared::new(metrics);
        let mut listeners: Vec<ListenerSpec> = Vec::new();
        let mut banner = Vec::new();
        for block in &corefile.blocks {
            for d in &block.directives {
                if !registry.iter().any(|p| p.name == d.name.text) {
                    return Err(d
                        .name
                        .err(format!("Unknown directive '{}'", d.name.text))
                        .into());
                }
            }
            let mut keys = Vec::with_capacity(block.keys.len());
            for k in &block.keys {
                let key = parse_key(k)?;
                if key.scheme != Scheme::Dns {
                    return Err(k
                        .err(format!(
                            "scheme {} is not supported (only dns:// is)",
                            key.scheme
                        ))
                        .into());
                }
                keys.push(key);
            }
            let mut ctx = SetupCtx::new(block, &keys, &config_dir, &mut shared);
            ctx.dns_port = default_port;
            for def in registry {
                let dirs: Vec<_> = block.directives_named(def.name).collect();
                if !dirs.is_empty() {
                    (def.setup)(&mut ctx, &dirs).map_err(|source| InstanceError::Plugin {
                        plugin: def.name,
                        source,
                    })?;
                }
            }
            let chain = Chain::new(ctx.take_plugins());
            let bind = std::mem::take(&mut ctx.bind);
            let conn_limits = ctx.conn_limits;
            let filter = ctx.filter.take();
            drop(ctx);
            for key in &keys {
                let port = key.port.unwrap_or(default_port);
                let (addrs, optional_v6) = if bind.is_empty() {
                    (
                        vec![
                            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                            IpAddr::V6(Ipv6Addr::UNSPECIFIED),
                        ],
                        true,
                    )
                } else {
                    (bind.clone(), false)
                };
                for ip in addrs {
                    let addr = SocketAddr::new(ip, port);
                    let label = if bind.is_empty() {
                        format!("dns://:{port}")
                    } else {
                        format!("dns://{}", addr)
                    };
                    let idx = match listeners.iter().position(|l| l.addr == addr) {
                        Some(i) => i,
                        None => {
                            listeners.push(ListenerSpec {
                                addr,
                                mux: Mux::new(label).with_panics(panics.clone()),
                                optional: optional_v6 && ip.is_ipv6(),
                            });
                            listeners.len() - 1
                        }
                    };
                    listeners[idx].mux.tcp.apply(&conn_limits);
                    for zone in &key.zones {
                        let name = Name::from_ascii(zone)
                            .map_err(|e| key.token.err(format!("invalid zone {zone}: {e}")))?;
                        if !listeners[idx]
                            .mux
                            .add_filtered(name, chain.clone(), filter.clone())
                        {
                            return Err(key
                                .token
                                .err(format!(
                                    "cannot serve dns://{zone}:{port} - it is already defined"
                                ))
                                .into());
                        }
                    }
                }
                // CoreDNS's start-up lines: `zone:port`, with ` on IP` per
                // bound address, each after a warning for a zone outside
                // RFC 1035's preferred syntax.
                let ips: Vec<Option<IpAddr>> = if bind.is_empty() {
                    vec![None]
                } else {
                    bind.iter().copied().map(Some).collect()
                };
                for zone in &key.zones {
                    for ip in &ips {
                        let line = match ip {
                            Some(ip) => format!("{zone}:{port} on {ip}"),
                            None => format!("{zone}:{port}"),
                        };
                        if banner.contains(&line) {
                            continue;
                        }
                        if !rfc1035_preferred(zone) {
                            banner.push(format!(
                                "Warning: Domain {zone:?} does not follow RFC1035 preferred syntax"
                            ));
                        }
                        banner.push(line);
                    }
                }
            }
        }
        Ok(Instance {
            listeners,
            shared,
            checksum,
            banner,
        })
    }
}

/// CoreDNS's `checkZoneSyntax`: the root, a reverse zone, or labels of a
/// letter, then letters, digits and hyphens, not ending in a hyphen.
fn rfc1035_preferred(zone: &str) -> bool {
    if zone == "." || zone.ends_with(".in-addr.arpa.") || zone.ends_with(".ip6.arpa.") {
        return true;
    }
    let Some(labels) = zone.strip_suffix('.') else {
        return false;
    };
    labels.split('.').all(|l| {
        let b = l.as_bytes();
        b.first().is_some_and(u8::is_ascii_alphabetic)
            && b.last().is_some_and(u8::is_ascii_alphanumeric)
            && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
    })
}

/// Hex SHA512, as CoreDNS's reload plugin prints it.
pub(crate) fn sha512_hex(data: &[u8]) -> String {
    let digest = Sha512::digest(data);
    let mut s = String::with_capacity(128);
    for b in digest {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// An I/O error as Go prints one from the OS: the C library's message,
/// first letter lowercased, without Rust's ` (os error N)`.
fn go_io_error(e: &std::io::Error) -> String {
    let text = e.to_string();
    let text = match text.find(" (os error ") {
        Some(i) => &text[..i],
        None => &text,
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod syntax_tests {
    use super::*;

    #[test]
    fn rfc1035_preferred_syntax_as_coredns() {
        for ok in [
            ".",
            "example.org.",
            "a-b.c1.",
            "10.in-addr.arpa.",
            "8.b.d.0.1.0.0.2.ip6.arpa.",
        ] {
            assert!(rfc1035_preferred(ok), "{ok}");
        }
        for bad in [
            "foo_bar.example.",
            "_tcp.service.",
            "1a.example.",
            "a-.example.",
            "example",
        ] {
            assert!(!rfc1035_preferred(bad), "{bad}");
        }
    }

    #[test]
    fn io_errors_read_as_go_prints_them() {
        let e = std::io::Error::from_raw_os_error(2);
        assert_eq!(go_io_error(&e), "no such file or directory");
        let e = std::io::Error::from_raw_os_error(13);
        assert_eq!(go_io_error(&e), "permission denied");
    }
}
