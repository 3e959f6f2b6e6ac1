//! The Corefile template (`-basecorefile`) rendered into the Corefile the
//! server loads, byte for byte as upstream's `updateCorefile` renders it,
//! and the kube-dns ConfigMap directory (`stubDomains`,
//! `upstreamNameservers`) it takes its upstreams from.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

/// Placeholders node-cache substitutes (the deployer seds the others).
pub const UPSTREAM_SERVERS: &str = "__PILLAR__UPSTREAM__SERVERS__";
/// The upstream Service's ClusterIP.
pub const CLUSTER_DNS: &str = "__PILLAR__CLUSTER__DNS__";
/// Every `-localip`, space-separated.
pub const LOCAL_DNS: &str = "__PILLAR__LOCAL__DNS__";
/// Left over in the IPVS template: replaced by nothing.
pub const DNS_SERVER: &str = "__PILLAR__DNS__SERVER__";
/// node-local-dns's `-prometheus-listen-address`.
pub const PROMETHEUS_ENDPOINT: &str = "__PROMETHEUS__ENDPOINT__";

/// Upstream's TCP forward block, replaced by the UDP form when the kube-dns
/// ConfigMap names upstream nameservers.
const UPSTREAM_TCP_BLOCK: &str =
    "\n    forward . __PILLAR__UPSTREAM__SERVERS__ {\n            force_tcp\n    }\n";
/// Cache TTL of a stub domain block.
const STUB_TTL: u32 = 30;
/// Where upstream looks for the kube-dns ConfigMap when `-kubednscm` is empty.
pub const DEFAULT_KUBEDNS_CM: &str = "/etc/kube-dns";

/// The parts of the kube-dns ConfigMap node-cache uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeDnsConfig {
    /// `stubDomains`: domain → nameservers (sorted by domain; upstream's
    /// order is Go's random map order).
    pub stub_domains: BTreeMap<String, Vec<String>>,
    /// `upstreamNameservers`: at most three `ip[:port]`.
    pub upstream_nameservers: Vec<String>,
}

/// Why the Corefile could not be rendered or the ConfigMap read. Counted
/// as `setup_errors_total{errortype="configmap"}`; the old Corefile stays.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// The template holds `__PILLAR__CLUSTER__DNS__` and the upstream
    /// Service's address is not in the environment.
    #[error(
        "${var} is not set (or not an IP address): the Corefile's {CLUSTER_DNS} is the ClusterIP of Service {svc}, which Kubernetes puts in the pod's environment only if the Service existed before the pod started (and enableServiceLinks is not false)"
    )]
    NoClusterDns {
        /// The variable read.
        var: String,
        /// The Service (`-upstreamsvc`).
        svc: String,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The kube-dns ConfigMap is invalid (upstream's message).
    #[error("{0}")]
    Invalid(String),
}

/// The environment variable holding the ClusterIP of Service `svc`
/// (`kube-dns-upstream` → `KUBE_DNS_UPSTREAM_SERVICE_HOST`).
pub fn service_host_var(svc: &str) -> String {
    format!("{}_SERVICE_HOST", svc.replace('-', "_").to_uppercase())
}

/// The ClusterIP of `svc` from the environment `env` (a lookup function,
/// so tests need not change the process environment).
pub fn cluster_dns_ip(
    svc: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<IpAddr, TemplateError> {
    let var = service_host_var(svc);
    env(&var)
        .and_then(|v| v.trim().parse().ok())
        .ok_or(TemplateError::NoClusterDns {
            var,
            svc: svc.to_string(),
        })
}

/// What the template is rendered with.
#[derive(Debug, Clone)]
pub struct Params<'a> {
    /// `-localip` as written (commas become spaces).
    pub local_ip_str: &'a str,
    /// `-dns.port`, the port of the stub domain blocks.
    pub dns_port: u16,
    /// The upstream Service's ClusterIP, or why there is none (an error
    /// only if the template uses it).
    pub cluster_dns: &'a Result<IpAddr, TemplateError>,
    /// `-prometheus-listen-address`.
    pub prometheus: &'a str,
}

/// The rendered Corefile and what to log about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// The Corefile text.
    pub text: String,
    /// What `__PILLAR__UPSTREAM__SERVERS__` became.
    pub upstream_servers: String,
    /// Upstream's warning when the TCP block was not found.
    pub warning: Option<&'static str>,
}

/// Renders `base` as upstream's `updateCorefile` does.
pub fn render(base: &str, p: &Params<'_>, cm: &KubeDnsConfig) -> Result<Rendered, TemplateError> {
    validate_for_forward(cm)?;
    let local = p.local_ip_str.replace(',', " ");
    let mut text = base.to_string();
    let mut warning = None;
    let upstream_servers = if cm.upstream_nameservers.is_empty() {
        // The forward plugin reads the node's resolv.conf itself
        // (dnsPolicy: Default gives the pod the node's file).
        let s = "/etc/resolv.conf".to_string();
        text = text.replace(UPSTREAM_SERVERS, &s);
        s
    } else {
        // Custom upstreams are asked over UDP: the TCP block becomes the
        // plain form, and any other occurrence gets the list.
        let s = cm.upstream_nameservers.join(" ");
        text = text.replace(UPSTREAM_TCP_BLOCK, &format!("\n    forward . {s}\n"));
        if text.contains(UPSTREAM_SERVERS) {
            warning = Some(
                "Did not find TCP upstream block to replace, assuming upstreams already use UDP.",
            );
            text = text.replace(UPSTREAM_SERVERS, &s);
        }
        s
    };
    if text.contains(CLUSTER_DNS) {
        match p.cluster_dns {
            Ok(ip) => text = text.replace(CLUSTER_DNS, &ip.to_string()),
            Err(TemplateError::NoClusterDns { var, svc }) => {
                return Err(TemplateError::NoClusterDns {
                    var: var.clone(),
                    svc: svc.clone(),
                });
            }
            Err(e) => return Err(TemplateError::Invalid(e.to_string())),
        }
    }
    text = text.replace(LOCAL_DNS, &local);
    text = text.replace(DNS_SERVER, "");
    text = text.replace(PROMETHEUS_ENDPOINT, p.prometheus);
    for (domain, servers) in &cm.stub_domains {
        text.push_str(&format!(
            "\n{domain}:{port} {{\n    errors\n    cache {STUB_TTL}\n    bind {local}\n    forward . {servers}\n}}\n",
            port = p.dns_port,
            servers = servers.join(" "),
        ));
    }
    Ok(Rendered {
        text,
        upstream_servers,
        warning,
    })
}

/// Go's `%v` of a `[]string`.
fn go_list(v: &[String]) -> String {
    format!("[{}]", v.join(" "))
}

/// `ValidateNodeLocalCacheConfig`: every forward target is an address the
/// forward plugin can dial over `dns://` or `tls://`.
fn validate_for_forward(cm: &KubeDnsConfig) -> Result<(), TemplateError> {
    let check = |servers: &[String]| -> Result<(), String> {
        for s in servers {
            let host = match s.split_once("://") {
                None => s.as_str(),
                Some(("dns" | "tls", rest)) => rest,
                Some((t, _)) => {
                    return Err(format!("unsupported transport {t} of nameserver {s}"));
                }
            };
            if host_port(host).is_none() {
                return Err(format!("not an IP address or file: {s:?}"));
            }
        }
        Ok(())
    };
    for (domain, servers) in &cm.stub_domains {
        check(servers).map_err(|e| {
            TemplateError::Invalid(format!(
                "invalid nameservers {} for the stub domain {domain}: {e}",
                go_list(servers)
            ))
        })?;
    }
    check(&cm.upstream_nameservers).map_err(|e| {
        TemplateError::Invalid(format!(
            "invalid upstream nameservers {}: {e}",
            go_list(&cm.upstream_nameservers)
        ))
    })
}

/// `ip` or `ip:port` (IPv6 bracketed with a port).
fn host_port(s: &str) -> Option<IpAddr> {
    s.parse::<IpAddr>()
        .ok()
        .or_else(|| s.parse::<SocketAddr>().ok().map(|a| a.ip()))
}

/// A DNS-1123 subdomain, as Kubernetes validates stub domains.
fn dns1123_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

impl KubeDnsConfig {
    /// Reads the mounted ConfigMap directory: one file per key, entries
    /// starting with `.` skipped (the projection's `..data`). A missing
    /// key is the default.
    pub fn read_dir(dir: &Path) -> Result<Self, TemplateError> {
        let read = |key: &str| -> Result<Option<String>, TemplateError> {
            let path = dir.join(key);
            match std::fs::read_to_string(&path) {
                Ok(s) => Ok(Some(s)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(source) => Err(TemplateError::Io { path, source }),
            }
        };
        let stub = read("stubDomains")?;
        let up = read("upstreamNameservers")?;
        Self::from_values(stub.as_deref(), up.as_deref())
    }

    /// Parses and validates the two keys' JSON values, as kube-dns's
    /// config sync does.
    pub fn from_values(stub: Option<&str>, upstream: Option<&str>) -> Result<Self, TemplateError> {
        let mut cfg = KubeDnsConfig::default();
        if let Some(s) = stub.filter(|s| !s.trim().is_empty()) {
            cfg.stub_domains = serde_json::from_str(s)
                .map_err(|e| TemplateError::Invalid(format!("invalid stubDomains {s:?}: {e}")))?;
        }
        if let Some(s) = upstream.filter(|s| !s.trim().is_empty()) {
            cfg.upstream_nameservers = serde_json::from_str(s).map_err(|e| {
                TemplateError::Invalid(format!("invalid upstreamNameservers {s:?}: {e}"))
            })?;
        }
        for (domain, servers) in &cfg.stub_domains {
            if !dns1123_subdomain(domain) {
                return Err(TemplateError::Invalid(format!(
                    "invalid domain name: {domain:?}"
                )));
            }
            for ns in servers {
                if host_port(ns).is_none() && !dns1123_subdomain(ns) {
                    return Err(TemplateError::Invalid(format!(
                        "invalid nameserver: {ns:?}"
                    )));
                }
            }
        }
        if cfg.upstream_nameservers.len() > 3 {
            return Err(TemplateError::Invalid(
                "upstreamNameserver cannot have more than three entries".into(),
            ));
        }
        for ns in &cfg.upstream_nameservers {
            if host_port(ns).is_none() {
                return Err(TemplateError::Invalid(format!(
                    "invalid upstream nameserver: {ns:?}"
                )));
            }
        }
        Ok(cfg)
    }
}

/// What a polled config directory holds, to tell when it changed
/// (upstream hashes the same: every non-dot entry's name and bytes).
pub type DirSnapshot = [u8; 32];

/// The SHA-256 over a polled config directory's non-dot entries, by
/// name: each name with the digest of its bytes. A digest rather than the
/// bytes themselves: the agent keeps the last one for as long as it runs,
/// and the directory may hold more than the Corefile (a hostPath, a
/// mount beside other files), so its memory must not grow with what sits
/// there. Files are streamed through a small buffer, never read whole.
pub fn dir_snapshot(dir: &Path) -> DirSnapshot {
    use sha2::{Digest, Sha256};
    let mut names: Vec<(String, PathBuf)> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .flatten()
            .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
            .filter(|(name, _)| !name.starts_with('.'))
            .collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    let mut all = Sha256::new();
    let mut buf = [0u8; 8192];
    for (name, path) in names {
        // Follows the projection's symlinks; an entry that cannot be read
        // (a directory) counts as absent.
        let Some(digest) = file_digest(&path, &mut buf) else {
            continue;
        };
        all.update((name.len() as u64).to_be_bytes());
        all.update(name.as_bytes());
        all.update(digest);
    }
    all.finalize().into()
}

/// The SHA-256 of the file at `path`, read through `buf`; `None` when it
/// cannot be opened or read to its end.
fn file_digest(path: &Path, buf: &mut [u8]) -> Option<[u8; 32]> {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let mut f = std::fs::File::open(path).ok()?;
    let mut h = Sha256::new();
    loop {
        match f.read(buf) {
            Ok(0) => return Some(h.finalize().into()),
            Ok(n) => h.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The template of the Kubernetes addon manifest (nodelocaldns.yaml),
    /// after the deployer's sed of the domain (iptables mode keeps
    /// `__PILLAR__DNS__SERVER__` for node-cache to fill from -localip).
    pub(crate) const ADDON: &str = "cluster.local:53 {
    errors
    cache {
            success 9984 30
            denial 9984 5
    }
    reload
    loop
    bind __PILLAR__LOCAL__DNS__ __PILLAR__DNS__SERVER__
    forward . __PILLAR__CLUSTER__DNS__ {
            force_tcp
    }
    prometheus :9253
    health __PILLAR__LOCAL__DNS__:8080
    }
in-addr.arpa:53 {
    errors
    cache 30
    reload
    loop
    bind __PILLAR__LOCAL__DNS__ __PILLAR__DNS__SERVER__
    forward . __PILLAR__CLUSTER__DNS__ {
            force_tcp
    }
    prometheus :9253
    }
.:53 {
    errors
    cache 30
    reload
    loop
    bind __PILLAR__LOCAL__DNS__ __PILLAR__DNS__SERVER__
    forward . __PILLAR__UPSTREAM__SERVERS__
    prometheus :9253
    }
";

    fn params<'a>(cluster: &'a Result<IpAddr, TemplateError>) -> Params<'a> {
        Params {
            local_ip_str: "169.254.20.10,10.96.0.10",
            dns_port: 53,
            cluster_dns: cluster,
            prometheus: ":9253",
        }
    }

    #[test]
    fn the_addon_template_as_upstream_renders_it() {
        let ip = Ok("10.96.0.11".parse().expect("ip"));
        let r = render(ADDON, &params(&ip), &KubeDnsConfig::default()).expect("render");
        let want = ADDON
            .replace(
                "bind __PILLAR__LOCAL__DNS__ __PILLAR__DNS__SERVER__",
                "bind 169.254.20.10 10.96.0.10 ",
            )
            .replace(
                "health __PILLAR__LOCAL__DNS__:8080",
                "health 169.254.20.10 10.96.0.10:8080",
            )
            .replace(
                "forward . __PILLAR__CLUSTER__DNS__ {",
                "forward . 10.96.0.11 {",
            )
            .replace(
                "forward . __PILLAR__UPSTREAM__SERVERS__",
                "forward . /etc/resolv.conf",
            );
        assert_eq!(r.text, want);
        assert_eq!(r.upstream_servers, "/etc/resolv.conf");
        assert!(!r.text.contains("__PILLAR__"));
    }

    #[test]
    fn upstream_nameservers_and_stub_domains() {
        let base = "cluster.local:53 {\n    forward . __PILLAR__CLUSTER__DNS__ {\n            force_tcp\n    }\n}\n.:53 {\n    forward . __PILLAR__UPSTREAM__SERVERS__ {\n            force_tcp\n    }\n}\n";
        let cm = KubeDnsConfig::from_values(
            Some(r#"{"acme.local": ["1.2.3.4"], "b.example": ["5.6.7.8:5353", "9.9.9.9"]}"#),
            Some(r#"["8.8.8.8", "8.8.4.4:53"]"#),
        )
        .expect("cm");
        let ip = Ok("10.96.0.11".parse().expect("ip"));
        let r = render(base, &params(&ip), &cm).expect("render");
        assert_eq!(
            r.text,
            "cluster.local:53 {\n    forward . 10.96.0.11 {\n            force_tcp\n    }\n}\n.:53 {\n    forward . 8.8.8.8 8.8.4.4:53\n}\n\
             \nacme.local:53 {\n    errors\n    cache 30\n    bind 169.254.20.10 10.96.0.10\n    forward . 1.2.3.4\n}\n\
             \nb.example:53 {\n    errors\n    cache 30\n    bind 169.254.20.10 10.96.0.10\n    forward . 5.6.7.8:5353 9.9.9.9\n}\n"
        );
        assert_eq!(r.warning, None);
        // Not the exact TCP block: every occurrence gets the list, with
        // upstream's warning.
        let r = render(
            ".:53 {\n  forward . __PILLAR__UPSTREAM__SERVERS__\n}\n",
            &params(&ip),
            &cm,
        )
        .expect("render");
        assert_eq!(
            r.text,
            ".:53 {\n  forward . 8.8.8.8 8.8.4.4:53\n}\n\nacme.local:53 {\n    errors\n    cache 30\n    bind 169.254.20.10 10.96.0.10\n    forward . 1.2.3.4\n}\n\nb.example:53 {\n    errors\n    cache 30\n    bind 169.254.20.10 10.96.0.10\n    forward . 5.6.7.8:5353 9.9.9.9\n}\n"
        );
        assert!(r.warning.is_some());
    }

    #[test]
    fn missing_service_host_is_an_error_not_nil() {
        let none = cluster_dns_ip("kube-dns-upstream", |_| None);
        let e = render(ADDON, &params(&none), &KubeDnsConfig::default()).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("$KUBE_DNS_UPSTREAM_SERVICE_HOST is not set"),
            "{msg}"
        );
        assert!(msg.contains("kube-dns-upstream"), "{msg}");
        // A template without the placeholder does not need it (IPVS
        // deployers sed it themselves).
        let r = render(
            ".:53 {\n    forward . 10.0.0.10\n}\n",
            &params(&none),
            &KubeDnsConfig::default(),
        );
        assert!(r.is_ok());
        let set = cluster_dns_ip("kube-dns-upstream", |v| {
            (v == "KUBE_DNS_UPSTREAM_SERVICE_HOST").then(|| "10.96.0.11".to_string())
        });
        assert_eq!(set.expect("ip").to_string(), "10.96.0.11");
    }

    #[test]
    fn configmap_validation() {
        let e = |s: Option<&str>, u: Option<&str>| {
            KubeDnsConfig::from_values(s, u).unwrap_err().to_string()
        };
        assert_eq!(
            e(Some(r#"{"Acme": ["1.2.3.4"]}"#), None),
            "invalid domain name: \"Acme\""
        );
        assert_eq!(
            e(None, Some(r#"["1.1.1.1","2.2.2.2","3.3.3.3","4.4.4.4"]"#)),
            "upstreamNameserver cannot have more than three entries"
        );
        assert!(e(Some("{not json"), None).starts_with("invalid stubDomains"));
        let cm = KubeDnsConfig {
            upstream_nameservers: vec!["grpc://1.2.3.4".into()],
            ..Default::default()
        };
        let ip = Ok("10.96.0.11".parse().expect("ip"));
        assert_eq!(
            render(ADDON, &params(&ip), &cm).unwrap_err().to_string(),
            "invalid upstream nameservers [grpc://1.2.3.4]: unsupported transport grpc of nameserver grpc://1.2.3.4"
        );
    }

    #[test]
    fn configmap_directory() {
        let dir = tempfile::tempdir().expect("tmp");
        assert_eq!(
            KubeDnsConfig::read_dir(dir.path()).expect("empty"),
            KubeDnsConfig::default()
        );
        std::fs::create_dir(dir.path().join("..data")).expect("mkdir");
        std::fs::write(dir.path().join("upstreamNameservers"), r#"["1.1.1.1"]"#).expect("write");
        let empty = dir_snapshot(tempfile::tempdir().expect("tmp").path());
        let before = dir_snapshot(dir.path());
        assert_ne!(before, empty, "the file counts, the directory does not");
        assert_eq!(dir_snapshot(dir.path()), before, "nothing changed");
        let cm = KubeDnsConfig::read_dir(dir.path()).expect("read");
        assert_eq!(cm.upstream_nameservers, vec!["1.1.1.1".to_string()]);
        std::fs::write(dir.path().join(".hidden"), "x").expect("write");
        assert_eq!(
            dir_snapshot(dir.path()),
            before,
            "dot entries are not looked at"
        );
        std::fs::write(dir.path().join("stubDomains"), r#"{"a.b": ["2.2.2.2"]}"#).expect("write");
        assert_ne!(dir_snapshot(dir.path()), before);
    }

    /// A change anywhere in a large file, in a file's name, or moving the
    /// same bytes to another name is seen, although only a digest is kept.
    #[test]
    fn snapshot_sees_every_byte_and_name() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut big = vec![b'a'; 100_000];
        std::fs::write(dir.path().join("big"), &big).expect("write");
        let before = dir_snapshot(dir.path());
        big[99_999] = b'b';
        std::fs::write(dir.path().join("big"), &big).expect("write");
        let last_byte = dir_snapshot(dir.path());
        assert_ne!(last_byte, before);
        std::fs::rename(dir.path().join("big"), dir.path().join("bigger")).expect("mv");
        assert_ne!(dir_snapshot(dir.path()), last_byte);
        // Two files whose names and contents run together the same way.
        let a = tempfile::tempdir().expect("tmp");
        std::fs::write(a.path().join("ab"), "c").expect("write");
        let b = tempfile::tempdir().expect("tmp");
        std::fs::write(b.path().join("a"), "bc").expect("write");
        assert_ne!(dir_snapshot(a.path()), dir_snapshot(b.path()));
    }
}
