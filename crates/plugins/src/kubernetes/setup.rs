//! Corefile options (CoreDNS `setup.go ParseStanza`) and start-up: the
//! watch (or the `snapshot` file), readiness, and the wait for the first
//! sync.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clusterdns_contract::{ChainTail, SetupCtx};
use clusterdns_corefile::{ConfigError, Directive, normalize_zones};
use clusterdns_kubeindex::{
    ClientLimits, ClientSource, Index, LabelSelector, RequestObserver, TlsFiles, Watch,
    WatchConfig, yaml,
};
use clusterdns_wire::Name;
use parking_lot::Mutex;

use super::isolate::{Isolation, Unknown};
use super::lookup::{LookupOpts, PodMode};
use super::metrics::{ClientMetrics, MetricsHooks};
use super::zone::ZoneAware;
use super::{Kubernetes, NAME};
use crate::pkg::nets::Nets;

/// Default `ttl`.
pub const DEFAULT_TTL: u32 = 5;
/// Default `startup_timeout`.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(5);

/// Everything the Corefile says.
#[derive(Debug)]
struct Options {
    zones: Vec<String>,
    endpoint: Option<String>,
    tls: Option<TlsFiles>,
    kubeconfig: Option<(PathBuf, Option<String>)>,
    namespaces: Vec<String>,
    namespace_labels: Option<String>,
    labels: Option<String>,
    pods: PodMode,
    pod_names: bool,
    ttl: u32,
    noendpoints: bool,
    fall: Option<Vec<Name>>,
    ignore_empty_service: bool,
    startup_timeout: Duration,
    /// `apiserver_qps`, `apiserver_burst`, `apiserver_max_inflight` (0 when absent).
    qps: f32,
    burst: u64,
    max_inflight: u64,
    snapshot: Option<PathBuf>,
    no_aaaa: bool,
    /// `isolate` (its allowed namespaces) and `isolate_unknown`.
    isolate: Option<Vec<String>>,
    isolate_unknown: Option<Unknown>,
    /// `isolate_namespace_labels`.
    isolate_labels: Vec<LabelSelector>,
    /// `zone_aware`: `None` off, else its `CIDR ZONE` pairs (the CIDR's
    /// text kept for `explain`).
    zone_aware: Option<super::zone::CidrZones>,
    /// `client_index compact`.
    client_compact: bool,
}

fn zone_list<'a>(
    d: &Directive,
    args: impl Iterator<Item = &'a str>,
) -> Result<Vec<String>, ConfigError> {
    let mut out: Vec<String> = Vec::new();
    for a in args {
        let zs = normalize_zones(a).map_err(|e| d.err(e))?;
        for z in zs {
            if !out.contains(&z) {
                out.push(z);
            }
        }
    }
    Ok(out)
}

fn names(d: &Directive, zones: &[String]) -> Result<Vec<Name>, ConfigError> {
    zones
        .iter()
        .map(|z| {
            Name::from_ascii(z)
                .map(|n| n.to_lowercase())
                .map_err(|e| d.err(format!("invalid zone {z:?}: {e}")))
        })
        .collect()
}

/// CoreDNS `dnsutil.IsReverse` on a zone: at least one label before
/// `in-addr.arpa.` or `ip6.arpa.`.
fn is_reverse_zone(z: &str) -> bool {
    z.ends_with(".in-addr.arpa.") || z.ends_with(".ip6.arpa.")
}

fn negative(p: &Directive, a: &str) -> ConfigError {
    p.err(format!(
        "{} must be a non-negative number: '{a}'",
        p.name.text
    ))
}

/// `apiserver_qps`: CoreDNS's `strconv.ParseFloat(arg, 32)`, then `>= 0` (so NaN and +Inf
/// pass, and mean no rate limit, as in client-go).
fn qps_arg(p: &Directive) -> Result<f32, ConfigError> {
    let a = clusterdns_contract::parse::one_arg(p)?;
    let name = &p.name.text;
    let Ok(v) = a.parse::<f64>() else {
        return Err(p.err(format!(
            "invalid {name} \"{a}\": strconv.ParseFloat: parsing \"{a}\": invalid syntax"
        )));
    };
    // f64 → f32 rounds to nearest; Go rejects what overflows float32.
    let q = v as f32;
    if v.is_finite() && !q.is_finite() {
        return Err(p.err(format!(
            "invalid {name} \"{a}\": strconv.ParseFloat: parsing \"{a}\": value out of range"
        )));
    }
    if q < 0.0 {
        return Err(negative(p, a));
    }
    Ok(q)
}

/// `apiserver_burst`, `apiserver_max_inflight`: CoreDNS's `strconv.Atoi`, then `>= 0`.
fn count_arg(p: &Directive) -> Result<u64, ConfigError> {
    let a = clusterdns_contract::parse::one_arg(p)?;
    let name = &p.name.text;
    match a.parse::<i64>() {
        Ok(v) => u64::try_from(v).map_err(|_| negative(p, a)),
        Err(e) => {
            let why = match e.kind() {
                std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                    "value out of range"
                }
                _ => "invalid syntax",
            };
            Err(p.err(format!(
                "invalid {name} \"{a}\": strconv.Atoi: parsing \"{a}\": {why}"
            )))
        }
    }
}

fn parse(ctx: &SetupCtx<'_>, d: &Directive) -> Result<Options, ConfigError> {
    let zones = if d.args.is_empty() {
        ctx.zones()
    } else {
        zone_list(d, d.arg_texts())?
    };
    let mut o = Options {
        zones,
        endpoint: None,
        tls: None,
        kubeconfig: None,
        namespaces: Vec::new(),
        namespace_labels: None,
        labels: None,
        pods: PodMode::Disabled,
        pod_names: false,
        ttl: DEFAULT_TTL,
        noendpoints: false,
        fall: None,
        ignore_empty_service: false,
        startup_timeout: DEFAULT_STARTUP_TIMEOUT,
        qps: 0.0,
        burst: 0,
        max_inflight: 0,
        snapshot: None,
        no_aaaa: false,
        isolate: None,
        isolate_unknown: None,
        isolate_labels: Vec::new(),
        zone_aware: None,
        client_compact: false,
    };
    let path = |s: &str| {
        let p = PathBuf::from(s);
        if p.is_absolute() {
            p
        } else {
            ctx.config_dir.join(p)
        }
    };
    for p in &d.block {
        let args: Vec<&str> = p.arg_texts().collect();
        match p.name.text.as_str() {
            "endpoint" => {
                let Some(first) = args.first() else {
                    return Err(p.arg_err());
                };
                if args.len() > 1 {
                    clusterdns_contract::warning!(
                        NAME,
                        "multiple endpoints have been deprecated, please specify a single endpoint"
                    );
                }
                o.endpoint = Some((*first).to_string());
            }
            "tls" => {
                let [cert, key, ca] = args.as_slice() else {
                    return Err(p.arg_err());
                };
                o.tls = Some(TlsFiles {
                    cert: path(cert),
                    key: path(key),
                    ca: path(ca),
                });
            }
            "kubeconfig" => match args.as_slice() {
                [file] => o.kubeconfig = Some((path(file), None)),
                [file, context] => o.kubeconfig = Some((path(file), Some((*context).to_string()))),
                _ => return Err(p.arg_err()),
            },
            "namespaces" => {
                if args.is_empty() {
                    return Err(p.arg_err());
                }
                o.namespaces.extend(args.iter().map(|a| (*a).to_string()));
            }
            "namespace_labels" | "labels" => {
                if args.is_empty() {
                    return Err(p.arg_err());
                }
                let sel = args.join(" ");
                if !valid_selector(&sel) {
                    return Err(p.err(format!("unable to parse label selector value: '{sel}'")));
                }
                if p.name.text == "labels" {
                    o.labels = Some(sel);
                } else {
                    o.namespace_labels = Some(sel);
                }
            }
            "pods" => {
                let [mode] = args.as_slice() else {
                    return Err(p.arg_err());
                };
                o.pods = match *mode {
                    "disabled" => PodMode::Disabled,
                    "insecure" => PodMode::Insecure,
                    "verified" => PodMode::Verified,
                    other => {
                        return Err(p.err(format!(
                            "wrong value for pods: {other},  must be one of: disabled, verified, insecure"
                        )));
                    }
                };
            }
            "endpoint_pod_names" => {
                if !args.is_empty() {
                    return Err(p.arg_err());
                }
                o.pod_names = true;
            }
            "ttl" => {
                o.ttl = clusterdns_contract::parse::ttl_0_3600(p)?;
            }
            "noendpoints" | "no_aaaa" => {
                if !args.is_empty() {
                    return Err(p.arg_err());
                }
                if p.name.text == "no_aaaa" {
                    o.no_aaaa = true;
                } else {
                    o.noendpoints = true;
                }
            }
            "fallthrough" => {
                let zones = if args.is_empty() {
                    vec![".".to_string()]
                } else {
                    zone_list(p, args.iter().copied())?
                };
                o.fall = Some(names(p, &zones)?);
            }
            "ignore" => {
                let Some(a) = args.first() else {
                    return Err(p.arg_err());
                };
                if *a != "empty_service" {
                    return Err(p.err(format!("unable to parse ignore value: '{a}'")));
                }
                o.ignore_empty_service = true;
            }
            "startup_timeout" => {
                o.startup_timeout = clusterdns_contract::parse::duration(
                    p,
                    clusterdns_contract::parse::one_arg(p)?,
                )?;
            }
            "apiserver_qps" => o.qps = qps_arg(p)?,
            "apiserver_burst" => o.burst = count_arg(p)?,
            "apiserver_max_inflight" => o.max_inflight = count_arg(p)?,
            "snapshot" => {
                let [file] = args.as_slice() else {
                    return Err(p.arg_err());
                };
                o.snapshot = Some(path(file));
            }
            "client_index" => o.client_compact = super::compact::parse(p, &args)?,
            "isolate" => {
                let allow = o.isolate.get_or_insert_with(Vec::new);
                allow.extend(args.iter().map(|a| a.to_ascii_lowercase()));
            }
            "isolate_unknown" => {
                let [mode] = args.as_slice() else {
                    return Err(p.arg_err());
                };
                o.isolate_unknown = Some(match *mode {
                    "allow" => Unknown::Allow,
                    "deny" => Unknown::Deny,
                    other => {
                        return Err(p.err(format!(
                            "wrong value for isolate_unknown: {other}, must be one of: allow, deny"
                        )));
                    }
                });
            }
            "isolate_namespace_labels" => {
                if args.is_empty() {
                    return Err(p.arg_err());
                }
                let sel =
                    LabelSelector::parse(&args.join(" ")).map_err(|e| p.err(e.to_string()))?;
                o.isolate_labels.push(sel);
            }
            "zone_aware" => {
                if o.zone_aware.is_some() {
                    return Err(p.err("zone_aware given twice"));
                }
                if !args.len().is_multiple_of(2) {
                    return Err(p.err(
                        "zone_aware takes CIDR ZONE pairs: an odd number of arguments was given",
                    ));
                }
                let mut map = Vec::new();
                for pair in args.chunks_exact(2) {
                    let mut nets = Nets::default();
                    if !nets.insert_cidr(pair[0]) {
                        return Err(p.err(format!("zone_aware: invalid CIDR '{}'", pair[0])));
                    }
                    nets.seal();
                    map.push((nets, Box::from(pair[1]), Box::from(pair[0])));
                }
                o.zone_aware = Some(map);
            }
            "multicluster" | "zonal" => {
                return Err(p.err(format!("{} is not supported", p.name.text)));
            }
            other => return Err(p.err(format!("unknown property '{other}'"))),
        }
    }
    if !o.namespaces.is_empty() && o.namespace_labels.is_some() {
        return Err(d.err("namespaces and namespace_labels cannot both be set"));
    }
    if o.isolate_unknown.is_some() && o.isolate.is_none() {
        return Err(d.err("isolate_unknown needs isolate"));
    }
    if !o.isolate_labels.is_empty() && o.isolate.is_none() {
        return Err(d.err("isolate_namespace_labels needs isolate"));
    }
    Ok(o)
}

/// A loose check of a label selector (`k=v`, `k!=v`, `k in (a,b)`, `!k`,
/// `k`); the API server has the last word.
fn valid_selector(s: &str) -> bool {
    !s.trim().is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b" =!,()-_./".contains(&b))
}

/// This server's own non-loopback addresses, as CoreDNS's `boundIPs`:
/// with `bind`, CoreDNS parses the listen hosts as CIDRs, which plain
/// addresses are not, so it finds none; without, every interface address.
fn local_ips(ctx: &SetupCtx<'_>) -> Vec<IpAddr> {
    if !ctx.bind.is_empty() {
        return Vec::new();
    }
    interface_addrs()
        .into_iter()
        .filter(|ip| !ip.is_loopback())
        .collect()
}

/// Every address of every interface.
fn interface_addrs() -> Vec<IpAddr> {
    crate::pkg::ifaces::interfaces()
        .map(|ifs| ifs.into_iter().flat_map(|i| i.addrs).collect())
        .unwrap_or_default()
}

/// The *kubernetes* setup.
pub(super) fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    let d = clusterdns_contract::parse::once(dirs)?;
    let o = parse(ctx, d)?;
    let Some(primary) = o.zones.iter().find(|z| !is_reverse_zone(z)) else {
        return Err(d.err("non-reverse zone name must be used"));
    };
    let zone_names = names(d, &o.zones)?;
    let primary = Name::from_ascii(primary)
        .map(|n| n.to_lowercase())
        .map_err(|e| d.err(e.to_string()))?;

    let hooks = Arc::new(MetricsHooks::new(&ctx.shared.metrics));
    let mut index = Index::with_hooks(hooks);
    // Only autopath reads the compact index; `pods verified`, `isolate` and `zone_aware`
    // by Nodes need the Pods.
    let client_compact = o.client_compact
        && o.pods != PodMode::Verified
        && o.isolate.is_none()
        && !o.zone_aware.as_ref().is_some_and(Vec::is_empty);
    if client_compact {
        index.set_pods_compact();
    }
    if let Some(file) = &o.snapshot {
        yaml::load_file(&mut index, file)
            .map_err(|e| d.err(format!("snapshot {}: {e}", file.display())))?;
    }
    let snapshots = index.snapshots();

    let tail = ChainTail::default();
    let plugin = Kubernetes {
        zones: zone_names,
        primary,
        fall: o.fall.clone(),
        no_aaaa: o.no_aaaa,
        ttl: o.ttl,
        opts: LookupOpts {
            namespaces: o.namespaces.clone(),
            pods: o.pods,
            pod_names: o.pod_names,
            ignore_empty_service: o.ignore_empty_service,
            endpoints: !o.noendpoints,
        },
        snapshots: snapshots.clone(),
        local_ips: local_ips(ctx),
        tail: tail.clone(),
        memo_id: super::memo::instance_id(),
        host_search: host_search(),
        isolation: o.isolate.clone().map(|allow| Isolation {
            allow,
            labels: o.isolate_labels.clone(),
            unknown: o.isolate_unknown.unwrap_or(Unknown::Allow),
        }),
        zone_aware: o.zone_aware.clone().map(|map| ZoneAware { map }),
        client_compact,
    };
    ctx.add_plugin(Arc::new(plugin));
    ctx.bind_tail(&tail);
    let ready = snapshots.clone();
    ctx.add_ready(NAME, Arc::new(move || ready.is_synced()));

    if o.snapshot.is_some() {
        return Ok(());
    }
    let source =
        ClientSource::from_options(o.endpoint.clone(), o.tls.clone(), o.kubeconfig.clone());
    let zone_from_nodes = o.zone_aware.as_ref().is_some_and(Vec::is_empty);
    let config = WatchConfig {
        namespaces: o.namespaces.clone(),
        labels: o.labels.clone(),
        namespace_labels: o.namespace_labels.clone(),
        watch_namespaces: true,
        endpoints: !o.noendpoints,
        // `isolate` knows a client by its Pod's address; `zone_aware`
        // without a CIDR map finds its zone through its Pod's Node.
        pods: o.pods == PodMode::Verified
            || o.isolate.is_some()
            || zone_from_nodes
            || client_compact,
        nodes: zone_from_nodes,
        ..WatchConfig::default()
    };
    let client = ClientSpec {
        source,
        limits: ClientLimits::coredns(o.qps, o.burst, o.max_inflight),
        observer: Arc::new(ClientMetrics::new(&ctx.shared.metrics)),
    };
    let slot: Arc<Mutex<Option<Watch>>> = Arc::default();
    let pending = Arc::new(Mutex::new(Some(index)));
    let start_slot = slot.clone();
    let timeout = o.startup_timeout;
    ctx.shared.on_startup.push(Box::new(move || {
        let index = pending
            .lock()
            .take()
            .ok_or("plugin/kubernetes: started twice")?;
        start(&client, config, index, &start_slot, snapshots, timeout)
    }));
    ctx.shared.on_shutdown.push(Box::new(move || {
        if let Some(w) = slot.lock().take() {
            w.abort();
        }
        Ok(())
    }));
    Ok(())
}

/// The host's search domains, lowercase and fully qualified, as CoreDNS
/// reads them at setup (`searchFromResolvConf`); none when the file is
/// unreadable.
fn host_search() -> Vec<Name> {
    let search = clusterdns_contract::parse::resolv_search("/etc/resolv.conf".as_ref());
    clusterdns_contract::parse::search_names(&search.unwrap_or_default())
}

/// How to build the API client: where, with which limits, reporting to which metrics.
struct ClientSpec {
    source: ClientSource,
    limits: ClientLimits,
    observer: Arc<dyn RequestObserver>,
}

/// Builds the client, starts the watch, and waits up to `timeout` for the
/// first sync (CoreDNS `onStart`), logging as CoreDNS does.
fn start(
    client: &ClientSpec,
    config: WatchConfig,
    index: Index,
    slot: &Mutex<Option<Watch>>,
    snapshots: clusterdns_kubeindex::Snapshots,
    timeout: Duration,
) -> Result<(), String> {
    let rt = tokio::runtime::Handle::try_current()
        .map_err(|_| "plugin/kubernetes: no runtime to run the watch on".to_string())?;
    let multi = rt.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread;
    let connect = client
        .source
        .client_observed(&client.limits, Some(client.observer.clone()));
    let client = if multi {
        tokio::task::block_in_place(|| rt.block_on(connect))
    } else {
        return Err("plugin/kubernetes: needs a multi-threaded runtime".to_string());
    }
    .map_err(|e| format!("plugin/kubernetes: {e}"))?;
    let watch = {
        let _guard = rt.enter();
        Watch::spawn_with(client, &config, index)
    };
    *slot.lock() = Some(watch);
    if timeout.is_zero() {
        return Ok(());
    }
    let synced = tokio::task::block_in_place(|| {
        rt.block_on(async {
            let deadline = tokio::time::Instant::now() + timeout;
            let mut log_tick = tokio::time::interval(Duration::from_millis(500));
            loop {
                if snapshots.wait_synced(Duration::from_millis(100)).await {
                    return true;
                }
                if tokio::time::Instant::now() >= deadline {
                    return false;
                }
                tokio::select! {
                    _ = log_tick.tick() => {
                        clusterdns_contract::info!(NAME, "waiting for Kubernetes API before starting server");
                    }
                    _ = tokio::time::sleep(Duration::from_millis(1)) => {}
                }
            }
        })
    });
    if !synced {
        clusterdns_contract::warning!(NAME, "starting server with unsynced Kubernetes API");
    }
    Ok(())
}
