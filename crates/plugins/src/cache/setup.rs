//! Reading the `cache` directive (CoreDNS `plugin/cache/setup.go`).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use clusterdns_contract::parse::{atoi, duration, once, zone};
use clusterdns_contract::{ChainTail, SetupCtx};
use clusterdns_corefile::{ConfigError, Directive, normalize_zone};
use clusterdns_wire::Name;

use super::metrics::Metrics;
use super::store::Store;
use super::{Cache, Clock, Config, Inner, MonotonicClock};

pub(super) fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    let d = once(dirs)?;
    let default_zones = ctx.zones();
    let cfg = parse(d, &default_zones)?;
    let inner = build(
        cfg,
        Arc::new(MonotonicClock::default()),
        Metrics::new(
            &ctx.shared.metrics,
            zones_label(d, &default_zones),
            ctx.view_name().to_owned(),
        ),
    );
    let rt_slot = inner.clone();
    ctx.add_plugin(Arc::new(Cache {
        inner: inner.clone(),
    }));
    ctx.bind_tail(&inner.tail);
    ctx.shared.on_startup.push(Box::new(move || {
        if let Ok(h) = tokio::runtime::Handle::try_current() {
            let _ = rt_slot.rt.set(h);
        }
        Ok(())
    }));
    Ok(())
}

/// The `zones` metric label: the zones as written after the TTL, else
/// the block's, joined with commas.
fn zones_label(d: &Directive, default: &[String]) -> String {
    let mut args: Vec<&str> = d.arg_texts().collect();
    if args.first().is_some_and(|a| a.parse::<i64>().is_ok()) {
        args.remove(0);
    }
    if args.is_empty() {
        default.join(",")
    } else {
        args.iter()
            .map(|a| normalize_zone(a).unwrap_or_else(|_| (*a).to_string()))
            .collect::<Vec<_>>()
            .join(",")
    }
}

pub(super) fn build(cfg: Config, clock: Arc<dyn Clock>, metrics: Metrics) -> Arc<Inner> {
    Arc::new(Inner {
        pos: Store::new(cfg.pcap),
        neg: Store::new(cfg.ncap),
        cfg,
        clock,
        metrics,
        tail: ChainTail::default(),
        rt: OnceLock::new(),
    })
}

fn secs(d: Duration) -> u32 {
    u32::try_from(d.as_secs()).unwrap_or(u32::MAX)
}

fn ttl_arg(d: &Directive, s: &str) -> Result<u32, ConfigError> {
    let v = atoi::<i64>(d, s)?;
    if v <= 0 {
        return Err(d.err(format!("cache TTL can not be zero or negative: {v}")));
    }
    Ok(u32::try_from(v).unwrap_or(u32::MAX))
}

fn min_ttl_arg(d: &Directive, s: &str) -> Result<u32, ConfigError> {
    let v = atoi::<i64>(d, s)?;
    if v < 0 {
        return Err(d.err(format!("cache min TTL can not be negative: {v}")));
    }
    Ok(u32::try_from(v).unwrap_or(u32::MAX))
}

/// Reads one `cache` directive.
pub(super) fn parse(d: &Directive, default_zones: &[String]) -> Result<Config, ConfigError> {
    let mut cfg = Config::default();
    let mut args: Vec<&str> = d.arg_texts().collect();
    if let Some(first) = args.first()
        && let Ok(v) = first.parse::<i64>()
    {
        if v <= 0 {
            return Err(d.err(format!("cache TTL can not be zero or negative: {v}")));
        }
        let v = u32::try_from(v).unwrap_or(u32::MAX);
        cfg.pttl = v;
        cfg.nttl = v;
        args.remove(0);
    }
    let zone_args: Vec<String> = if args.is_empty() {
        default_zones.to_vec()
    } else {
        args.iter().map(|a| (*a).to_string()).collect()
    };
    cfg.zones = zone_args
        .iter()
        .map(|z| zone(d, z))
        .collect::<Result<_, _>>()?;
    for o in &d.block {
        let a: Vec<&str> = o.arg_texts().collect();
        match o.name.text.as_str() {
            "success" | "denial" => {
                if a.is_empty() || a.len() > 3 {
                    return Err(o.arg_err());
                }
                let cap = atoi::<i64>(o, a[0])?;
                let cap = usize::try_from(cap).unwrap_or(0);
                let ttl = a.get(1).map(|s| ttl_arg(o, s)).transpose()?;
                let min = a.get(2).map(|s| min_ttl_arg(o, s)).transpose()?;
                if o.name.text == "success" {
                    cfg.pcap = cap;
                    cfg.pttl = ttl.unwrap_or(cfg.pttl);
                    cfg.minpttl = min.unwrap_or(cfg.minpttl);
                } else {
                    cfg.ncap = cap;
                    cfg.nttl = ttl.unwrap_or(cfg.nttl);
                    cfg.minnttl = min.unwrap_or(cfg.minnttl);
                }
            }
            "prefetch" => {
                if a.is_empty() || a.len() > 3 {
                    return Err(o.arg_err());
                }
                let amount = atoi::<i64>(o, a[0])?;
                // 0 turns prefetching off, as in CoreDNS.
                if amount < 0 {
                    return Err(o.err(format!("prefetch amount should be positive: {amount}")));
                }
                cfg.prefetch = u32::try_from(amount).unwrap_or(u32::MAX);
                for extra in &a[1..] {
                    if let Some(pct) = extra.strip_suffix('%') {
                        let p = atoi::<i64>(o, pct)?;
                        if !(10..=90).contains(&p) {
                            return Err(
                                o.err(format!("percentage should fall in range [10, 90]: {p}"))
                            );
                        }
                        cfg.percentage = u32::try_from(p).unwrap_or(10);
                    } else {
                        let w = duration(o, extra)?;
                        cfg.prefetch_window_ms = u64::try_from(w.as_millis()).unwrap_or(u64::MAX);
                    }
                }
            }
            "serve_stale" => {
                if a.len() > 4 {
                    return Err(o.arg_err());
                }
                cfg.stale_s = 3600;
                if let Some(s) = a.first() {
                    cfg.stale_s = secs(duration(o, s)?);
                }
                match a.get(1).copied() {
                    None | Some("immediate") => cfg.verify = false,
                    Some("verify") => cfg.verify = true,
                    Some(m) => {
                        return Err(
                            o.err(format!("invalid value for serve_stale refresh mode: {m}"))
                        );
                    }
                }
                if let Some(t) = a.get(2) {
                    cfg.stale_ttl = secs(duration(o, t)?);
                }
                if let Some(r) = a.get(3) {
                    duration(o, r)?;
                }
            }
            // A clusterdns addition (README "Last-known-good").
            "last_known_good" => match a.as_slice() {
                ["off"] => cfg.lkg_s = 0,
                [] => {}
                [age, rest @ ..] if rest.len() <= 1 => {
                    cfg.lkg_s = secs(duration(o, age)?);
                    if let Some(wait) = rest.first() {
                        let w = duration(o, wait)?;
                        cfg.lkg_wait_ms = u64::try_from(w.as_millis()).unwrap_or(u64::MAX);
                    }
                }
                _ => return Err(o.arg_err()),
            },
            "serve_stale_policy" => {
                if a.as_slice() != ["prefer_positive"] {
                    return Err(o.arg_err());
                }
            }
            "servfail" => {
                if a.len() != 1 {
                    return Err(o.arg_err());
                }
                let d = duration(o, a[0])?;
                if d > Duration::from_secs(300) {
                    return Err(o.err("caching SERVFAIL responses over 5 minutes is not permitted"));
                }
                cfg.failttl = secs(d);
            }
            "disable" => {
                let Some(which) = a.first() else {
                    return Err(o.arg_err());
                };
                let zones: Vec<Name> = if a.len() > 1 {
                    a[1..]
                        .iter()
                        .map(|z| zone(o, z))
                        .collect::<Result<_, _>>()?
                } else {
                    cfg.zones.clone()
                };
                match *which {
                    "success" => cfg.pexcept.extend(zones),
                    "denial" => cfg.nexcept.extend(zones),
                    other => {
                        return Err(o.err(format!(
                            "cache type for disable must be \"success\" or \"denial\", got: {other}"
                        )));
                    }
                }
            }
            "keepttl" => {
                if !a.is_empty() {
                    return Err(o.arg_err());
                }
                cfg.keepttl = true;
            }
            // CoreDNS's cache answers an unknown property with ArgErr.
            _ => return Err(o.arg_err()),
        }
    }
    Ok(cfg)
}
