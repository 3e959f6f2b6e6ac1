#![doc = include_str!("README.md")]

mod map;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use clusterdns_contract::metrics::{Family, Gauge, Registry};
use clusterdns_contract::{Flow, Plugin, PluginDef, Request, ResponseWriter, SetupCtx};
use clusterdns_corefile::{ConfigError, Directive};
use clusterdns_wire::{Class, Name, RData, Rcode, Rtype, Section, parse_reverse};

use map::{Map, ParseOptions, in_zones, wildcard_of};

/// Registration of *hosts*.
pub const DEF: PluginDef = PluginDef {
    name: "hosts",
    setup,
};

/// Default hosts file.
pub const DEFAULT_PATH: &str = "/etc/hosts";
/// Default TTL of the records.
pub const DEFAULT_TTL: u32 = 3600;
/// Default interval between two checks of the file.
pub const DEFAULT_RELOAD: Duration = Duration::from_secs(5);

const ENTRIES: &str = "coredns_hosts_entries";
const RELOAD_TS: &str = "coredns_hosts_reload_timestamp_seconds";

/// What the query path reads: the file's entries and the inline ones,
/// replaced as a whole when the file changes.
#[derive(Debug, Default)]
struct Snapshot {
    file: Map,
    inline: Arc<Map>,
}

/// The *hosts* handler.
#[derive(Debug)]
pub struct Hosts {
    zones: Vec<Name>,
    /// `None`: no fallthrough; else the zones that fall through.
    fall: Option<Vec<Name>>,
    fall_unsupported: bool,
    ttl: u32,
    data: Arc<ArcSwap<Snapshot>>,
}

impl Hosts {
    fn falls_through(&self, qname: &Name) -> bool {
        self.fall.as_ref().is_some_and(|z| in_zones(z, qname))
    }
}

impl Plugin for Hosts {
    fn name(&self) -> &'static str {
        "hosts"
    }

    fn query(&self, req: &Request<'_>, w: &mut ResponseWriter) -> Flow {
        let qname = req.qname_lower();
        let qtype = req.qtype();
        if qtype != Rtype::PTR && !in_zones(&self.zones, qname) {
            return Flow::Next;
        }
        let snap = self.data.load();
        if qtype == Rtype::PTR {
            let (f, i) = match parse_reverse(qname) {
                Some(ip) => (snap.file.names(&ip), snap.inline.names(&ip)),
                None => (&[][..], &[][..]),
            };
            if f.is_empty() && i.is_empty() {
                return Flow::Next;
            }
            let mut b = w.reply(req);
            b.set_aa(true);
            for target in f.iter().chain(i) {
                if b.push(
                    Section::Answer,
                    qname,
                    Class::IN,
                    self.ttl,
                    &RData::Ptr(target),
                )
                .is_err()
                {
                    break;
                }
            }
            b.finish();
            return Flow::Answered;
        }
        // The wildcard pattern costs a name copy: only when there are
        // wildcard owners.
        let wild = if snap.file.has_wildcards() || snap.inline.has_wildcards() {
            wildcard_of(qname)
        } else {
            None
        };
        let v4 = || {
            (
                snap.file.v4(qname, wild.as_ref()),
                snap.inline.v4(qname, wild.as_ref()),
            )
        };
        let v6 = || {
            (
                snap.file.v6(qname, wild.as_ref()),
                snap.inline.v6(qname, wild.as_ref()),
            )
        };
        // Only the family asked for, unless the other one is needed to
        // tell NODATA from a name that does not exist.
        let (f4, i4) = if qtype == Rtype::AAAA {
            (&[][..], &[][..])
        } else {
            v4()
        };
        let (f6, i6) = if qtype == Rtype::A {
            (&[][..], &[][..])
        } else {
            v6()
        };
        let answers = match qtype {
            Rtype::A => !(f4.is_empty() && i4.is_empty()),
            Rtype::AAAA => !(f6.is_empty() && i6.is_empty()),
            _ => {
                if self.fall_unsupported && self.falls_through(qname) {
                    return Flow::Next;
                }
                false
            }
        };
        let exists = answers
            || match qtype {
                Rtype::A => {
                    let (f, i) = v6();
                    !(f.is_empty() && i.is_empty())
                }
                Rtype::AAAA => {
                    let (f, i) = v4();
                    !(f.is_empty() && i.is_empty())
                }
                _ => !(f4.is_empty() && i4.is_empty() && f6.is_empty() && i6.is_empty()),
            };
        if !answers && !exists {
            if self.falls_through(qname) {
                return Flow::Next;
            }
            // No SOA to make an NXDOMAIN with: SERVFAIL, as CoreDNS (an
            // rcode, not an error: nothing is logged).
            w.write_error(req, Rcode::SERVFAIL);
            return Flow::Answered;
        }
        let mut b = w.reply(req);
        b.set_aa(true);
        if qtype == Rtype::A {
            for ip in f4.iter().chain(i4) {
                let rd = RData::A(*ip);
                if b.push(Section::Answer, qname, Class::IN, self.ttl, &rd)
                    .is_err()
                {
                    break;
                }
            }
        } else if qtype == Rtype::AAAA {
            for ip in f6.iter().chain(i6) {
                let rd = RData::Aaaa(*ip);
                if b.push(Section::Answer, qname, Class::IN, self.ttl, &rd)
                    .is_err()
                {
                    break;
                }
            }
        }
        b.finish();
        Flow::Answered
    }
}

/// Re-reads the hosts file when its modification time or size changed.
struct Loader {
    path: PathBuf,
    opts: ParseOptions,
    inline: Arc<Map>,
    data: Arc<ArcSwap<Snapshot>>,
    seen: parking_lot::Mutex<Option<(SystemTime, u64)>>,
    metrics: Arc<Registry>,
    reload_ts: Arc<Gauge>,
}

impl Loader {
    /// One check of the background loop.
    fn reload_check(&self) {
        self.read_hosts();
    }

    /// CoreDNS `readHosts`: an unreadable file keeps the data as it was.
    /// Returns whether the file was parsed again.
    fn read_hosts(&self) -> bool {
        let Ok(meta) = std::fs::metadata(&self.path) else {
            return false;
        };
        let Ok(mtime) = meta.modified() else {
            return false;
        };
        let stamp = (mtime, meta.len());
        if *self.seen.lock() == Some(stamp) {
            return false;
        }
        let Ok(bytes) = std::fs::read(&self.path) else {
            return false;
        };
        let text = String::from_utf8_lossy(&bytes);
        let file = Map::parse(&text, &self.opts);
        clusterdns_contract::debug!("hosts", "Parsed hosts file into {} entries", file.len());
        let entries = file.len() + self.inline.len();
        self.data.store(Arc::new(Snapshot {
            file,
            inline: self.inline.clone(),
        }));
        *self.seen.lock() = Some(stamp);
        let fam = self.metrics.get_or_register(ENTRIES, || {
            Family::<Gauge>::new(
                ENTRIES,
                "The combined number of entries in hosts and Corefile.",
                &["hostsfile"],
            )
        });
        let path = self.path.to_string_lossy();
        fam.with(&[&path]).set(entries as f64);
        let secs = mtime
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        self.reload_ts.set(secs);
        true
    }
}

fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    let d = clusterdns_contract::parse::once(dirs)?;
    let mut path = PathBuf::from(DEFAULT_PATH);
    if let Some(first) = d.args.first() {
        path = clusterdns_contract::parse::config_path(ctx.config_dir, &first.text);
        match std::fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                clusterdns_contract::warning!("hosts", "File does not exist: {}", path.display());
            }
            Err(e) => {
                return Err(first.err(format!(
                    "unable to access hosts file '{}': {e}",
                    path.display()
                )));
            }
            Ok(m) if m.is_dir() => {
                clusterdns_contract::warning!("hosts", "Hosts file {:?} is a directory", path);
            }
            Ok(_) => {}
        }
    }
    let zones = if d.args.len() > 1 {
        clusterdns_contract::parse::origins(d.args[1..].iter().map(|t| t.text.as_str()))
    } else {
        let z = ctx.zones();
        clusterdns_contract::parse::origins(z.iter().map(String::as_str))
    };
    let mut fall: Option<Vec<Name>> = None;
    let mut fall_unsupported = false;
    let mut auto_reverse = true;
    let mut ttl = DEFAULT_TTL;
    let mut reload = DEFAULT_RELOAD;
    let mut inline = String::new();
    for p in &d.block {
        let args: Vec<&str> = p.arg_texts().collect();
        match p.name.text.as_str() {
            "fallthrough" => {
                fall = Some(if args.is_empty() {
                    vec![Name::root()]
                } else {
                    clusterdns_contract::parse::origins(args)
                });
            }
            "fallthrough_unsupported" => {
                if !args.is_empty() {
                    return Err(p.arg_err());
                }
                fall_unsupported = true;
            }
            "no_reverse" => auto_reverse = false,
            "ttl" => {
                let Some(a) = args.first() else {
                    return Err(p.err("ttl needs a time in second"));
                };
                let Ok(v) = a.parse::<i64>() else {
                    return Err(p.err("ttl needs a number of second"));
                };
                if v <= 0 || v > 65535 {
                    return Err(p.err("ttl provided is invalid"));
                }
                ttl = v as u32;
            }
            "reload" => {
                let [a] = args.as_slice() else {
                    return Err(p.err("reload needs a duration (zero seconds to disable)"));
                };
                reload = match clusterdns_contract::duration::parse_go(a) {
                    Ok(v) => v,
                    Err(clusterdns_contract::duration::DurationError::Negative(_)) => {
                        return Err(p.err(format!("invalid negative duration for reload '{a}'")));
                    }
                    Err(_) => return Err(p.err(format!("invalid duration for reload '{a}'"))),
                };
            }
            other => {
                if fall.as_ref().is_none_or(Vec::is_empty) {
                    inline.push_str(other);
                    for a in &args {
                        inline.push(' ');
                        inline.push_str(a);
                    }
                    inline.push('\n');
                    continue;
                }
                return Err(p.err(format!("unknown property '{other}'")));
            }
        }
    }
    if fall_unsupported && fall.as_ref().is_none_or(Vec::is_empty) {
        return Err(d.err("fallthrough_unsupported requires fallthrough"));
    }
    let opts = ParseOptions {
        origins: zones.clone(),
        auto_reverse,
    };
    let inline = Arc::new(Map::parse(&inline, &opts));
    let data = Arc::new(ArcSwap::from_pointee(Snapshot {
        file: Map::default(),
        inline: inline.clone(),
    }));
    let metrics = ctx.shared.metrics.clone();
    let reload_ts = metrics
        .get_or_register(RELOAD_TS, || {
            Family::<Gauge>::new(
                RELOAD_TS,
                "The timestamp of the last reload of hosts file.",
                &[],
            )
        })
        .with(&[]);
    let loader = Arc::new(Loader {
        path,
        opts,
        inline,
        data: data.clone(),
        seen: parking_lot::Mutex::new(None),
        metrics,
        reload_ts,
    });
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    ctx.shared
        .on_startup
        .push(Box::new(move || start(loader, reload, stop_rx)));
    ctx.shared.on_shutdown.push(Box::new(move || {
        let _ = stop_tx.send(true);
        Ok(())
    }));
    ctx.add_plugin(Arc::new(Hosts {
        zones,
        fall,
        fall_unsupported,
        ttl,
        data,
    }));
    Ok(())
}

/// The start-up hook: read the file now, then check it every `reload`
/// until the configuration stops (or is dropped).
fn start(
    loader: Arc<Loader>,
    reload: Duration,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(), String> {
    loader.read_hosts();
    if reload.is_zero() {
        return Ok(());
    }
    crate::pkg::every::every("hosts", reload, loader, Loader::reload_check, stop)
}

#[cfg(test)]
mod tests;
