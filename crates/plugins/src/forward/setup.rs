//! Reading `forward` directives (CoreDNS `plugin/forward/setup.go`).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use clusterdns_contract::SetupCtx;
use clusterdns_contract::parse::{atoi, duration, one_arg, parse_uint, signed_duration, zone};
use clusterdns_corefile::{ConfigError, Directive};
use clusterdns_wire::{Name, Rcode};
use parking_lot::Mutex;
use tokio_rustls::rustls::pki_types::ServerName;

use super::metrics::Metrics;
use super::no_aaaa::NoAaaa;
use super::proxy::{MAX_SOCKETS, Proxy, ProxyOpts, TlsTarget};
use super::shared::PER_SOCKET;
use super::{Forward, Opts, Policy};

/// CoreDNS's limit on upstreams per `forward`.
const MAX_TO: usize = 15;

pub(super) fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    let metrics = Metrics::new(&ctx.shared.metrics);
    let mut all: Vec<Arc<Forward>> = Vec::new();
    for (i, d) in dirs.iter().enumerate() {
        let f = parse(d, ctx.config_dir, &metrics, i + 1 < dirs.len())?;
        all.push(Arc::new(f));
    }
    for f in &all {
        ctx.add_plugin(f.clone());
    }
    ctx.shared.on_shutdown.push(Box::new(move || {
        for f in &all {
            for p in &f.proxies {
                p.stop();
            }
        }
        Ok(())
    }));
    Ok(())
}

fn rcode(d: &Directive, s: &str) -> Result<Rcode, ConfigError> {
    Rcode::from_str(&s.to_ascii_uppercase()).map_err(|_| d.err(format!("{s} is not a valid rcode")))
}

/// One upstream as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
struct To {
    addr: SocketAddr,
    /// `Some` for `tls://`, with the `%servername` if given.
    tls: Option<Option<String>>,
}

/// One `to` entry: `[dns://]IP[:port]`, `tls://IP[%name][:port]`, or a
/// resolv.conf-style file.
fn upstreams(d: &Directive, s: &str, dir: &Path, out: &mut Vec<To>) -> Result<(), ConfigError> {
    let lower = s.to_ascii_lowercase();
    if lower.starts_with("tls://") {
        let rest = &s[6..];
        let (host, name) = match rest.split_once('%') {
            Some((ip, tail)) => {
                // `IP%name[:port]`: the port follows the name.
                let (name, port) = match tail.rsplit_once(':') {
                    Some((n, p)) if p.parse::<u16>().is_ok() => (n, Some(p)),
                    _ => (tail, None),
                };
                let ip = ip.trim_start_matches('[').trim_end_matches(']');
                let host = match port {
                    Some(p) if ip.contains(':') => format!("[{ip}]:{p}"),
                    Some(p) => format!("{ip}:{p}"),
                    None => ip.to_string(),
                };
                (host, Some(name.to_string()))
            }
            None => (rest.to_string(), None),
        };
        let addr =
            host_port(&host, 853).ok_or_else(|| d.err(format!("not an IP address: \"{s}\"")))?;
        out.push(To {
            addr,
            tls: Some(name),
        });
        return Ok(());
    }
    for scheme in ["https://", "grpc://", "quic://"] {
        if lower.starts_with(scheme) {
            return Err(d.err(format!(
                "{s}: transport {} is not supported by this build (only dns:// and tls:// upstreams)",
                scheme.trim_end_matches("://")
            )));
        }
    }
    let host = s.strip_prefix("dns://").unwrap_or(s);
    if let Some(addr) = host_port(host, 53) {
        out.push(To { addr, tls: None });
        return Ok(());
    }
    let path = if Path::new(s).is_absolute() {
        Path::new(s).to_path_buf()
    } else {
        dir.join(s)
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| d.err(format!("not an IP address or file: \"{s}\": {e}")))?;
    let before = out.len();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        if words.next() != Some("nameserver") {
            continue;
        }
        if let Some(addr) = words.next().and_then(|w| host_port(w, 53)) {
            out.push(To { addr, tls: None });
        }
    }
    if out.len() == before {
        return Err(d.err(format!("no nameservers found in {s}")));
    }
    Ok(())
}

/// `IP`, `IP:port`, `[IPv6]:port` or a bare IPv6 address.
fn host_port(s: &str, default_port: u16) -> Option<SocketAddr> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Some(a);
    }
    let bare = s.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Some(SocketAddr::new(ip, default_port));
    }
    None
}

fn parse(
    d: &Directive,
    dir: &Path,
    metrics: &Metrics,
    next_is_forward: bool,
) -> Result<Forward, ConfigError> {
    let [from, to @ ..] = d.args.as_slice() else {
        return Err(d.arg_err());
    };
    if to.is_empty() {
        return Err(d.arg_err());
    }
    let from_name = zone(d, &from.text)?;
    let mut addrs = Vec::new();
    for t in to {
        upstreams(d, &t.text, dir, &mut addrs)?;
    }
    let mut seen = Vec::new();
    addrs.retain(|a| {
        let new = !seen.contains(a);
        seen.push(a.clone());
        new
    });
    if addrs.len() > MAX_TO {
        return Err(d.err(format!(
            "more than {MAX_TO} TOs configured: {}",
            addrs.len()
        )));
    }
    let mut opts = Opts {
        force_tcp: false,
        prefer_udp: false,
        max_fails: 2,
        max_concurrent: 0,
        max_connect_attempts: u32::try_from(addrs.len() * 2).unwrap_or(u32::MAX),
        next: Vec::new(),
        next_on_nodata: false,
        failover: Vec::new(),
        failfast: false,
        policy: Policy::Random,
    };
    let mut no_aaaa = false;
    let mut popts = ProxyOpts {
        expire: Duration::from_secs(10),
        max_age: Duration::ZERO,
        max_idle: 0,
        read_timeout: Duration::from_secs(2),
        hc_interval: Duration::from_millis(500),
        hc_rd: true,
        hc_domain: Name::root(),
        hc_tcp: false,
        source: None,
        max_sockets: MAX_SOCKETS,
    };
    let mut except = Vec::new();
    let mut tls_args: Vec<std::path::PathBuf> = Vec::new();
    let mut tls_servername: Option<String> = None;
    for o in &d.block {
        let args: Vec<&str> = o.arg_texts().collect();
        match o.name.text.as_str() {
            "except" => {
                if args.is_empty() {
                    return Err(o.arg_err());
                }
                for a in args {
                    except.push(zone(o, a)?);
                }
            }
            "force_tcp"
            | "prefer_udp"
            | "failfast_all_unhealthy_upstreams"
            | "next_on_nodata"
            | "no_aaaa" => {
                if !args.is_empty() {
                    return Err(o.arg_err());
                }
                match o.name.text.as_str() {
                    "force_tcp" => opts.force_tcp = true,
                    "prefer_udp" => opts.prefer_udp = true,
                    "next_on_nodata" => opts.next_on_nodata = true,
                    "no_aaaa" => no_aaaa = true,
                    _ => opts.failfast = true,
                }
            }
            "expire" => {
                let d = signed_duration(o, one_arg(o)?)?;
                if d.negative {
                    return Err(o.err(format!("expire can't be negative: {d}")));
                }
                popts.expire = d.magnitude;
            }
            "max_age" => {
                popts.max_age = duration(o, one_arg(o)?)?;
            }
            "read_timeout" => {
                popts.read_timeout = duration(o, one_arg(o)?)?;
                if popts.read_timeout.is_zero() {
                    return Err(o.err("read_timeout can't be zero"));
                }
            }
            "max_idle_conns" => popts.max_idle = atoi(o, one_arg(o)?)?,
            "max_fails" => opts.max_fails = parse_uint(o, one_arg(o)?)?,
            "max_connect_attempts" => opts.max_connect_attempts = parse_uint(o, one_arg(o)?)?,
            "max_concurrent" => {
                let n: usize = atoi(o, one_arg(o)?)?;
                opts.max_concurrent = n;
            }
            "health_check" => {
                let Some(first) = args.first() else {
                    return Err(o.arg_err());
                };
                let d = signed_duration(o, first)?;
                if d.negative {
                    return Err(o.err(format!("health_check can't be negative: {}", d.nanos())));
                }
                popts.hc_interval = d.magnitude;
                let mut rest = args[1..].iter();
                while let Some(a) = rest.next() {
                    match *a {
                        "no_rec" => popts.hc_rd = false,
                        "domain" => {
                            let Some(n) = rest.next() else {
                                return Err(o.arg_err());
                            };
                            popts.hc_domain =
                                Name::from_ascii(&format!("{}.", n.trim_end_matches('.')))
                                    .map_err(|_| {
                                        o.err(format!("health_check: invalid domain name {n}"))
                                    })?;
                        }
                        other => {
                            return Err(o.err(format!("health_check: unknown option {other}")));
                        }
                    }
                }
            }
            "policy" => {
                opts.policy = match one_arg(o)? {
                    "random" => Policy::Random,
                    "round_robin" => Policy::RoundRobin,
                    "sequential" => Policy::Sequential,
                    p => return Err(o.err(format!("unknown policy '{p}'"))),
                };
            }
            "next" => {
                if args.is_empty() {
                    return Err(o.arg_err());
                }
                for a in args {
                    opts.next.push(rcode(o, a)?);
                }
            }
            "failover" => {
                if args.is_empty() {
                    return Err(o.arg_err());
                }
                for a in args {
                    let r = rcode(o, a)?;
                    if r == Rcode::NOERROR {
                        return Err(o.err("NoError cannot be used in failover"));
                    }
                    opts.failover.push(r);
                }
            }
            "tls" => {
                if args.len() > 3 {
                    return Err(o.arg_err());
                }
                for a in args {
                    let p = if Path::new(a).is_absolute() {
                        Path::new(a).to_path_buf()
                    } else {
                        dir.join(a)
                    };
                    if !p.exists() {
                        return Err(o.err(format!("open {a}: no such file or directory")));
                    }
                    tls_args.push(p);
                }
            }
            "tls_servername" => {
                tls_servername = Some(one_arg(o)?.to_string());
            }
            "doh_method" => {
                one_arg(o)?;
            }
            "source_address" => {
                let a = one_arg(o)?;
                popts.source = Some(
                    a.parse::<IpAddr>()
                        .map_err(|_| o.err(format!("invalid source address: {a}")))?,
                );
            }
            "resolver" => {
                return Err(o.err(
                    "resolver: upstream host names are not supported by this build; use IP addresses",
                ));
            }
            other => return Err(o.err(format!("unknown property '{other}'"))),
        }
    }
    if !popts.max_age.is_zero() && popts.max_age < popts.expire {
        return Err(d.err("max_age must be greater than or equal to expire"));
    }
    popts.hc_tcp = opts.force_tcp;
    let limit = if opts.max_concurrent > 0 {
        opts.max_concurrent
    } else {
        super::MAX_INFLIGHT
    };
    popts.max_sockets = MAX_SOCKETS.max(limit.div_ceil(PER_SOCKET));
    let connector = if addrs.iter().any(|t| t.tls.is_some()) {
        Some(super::tls::connector(&tls_args).map_err(|e| d.err(e))?)
    } else {
        None
    };
    let mut proxies = Vec::with_capacity(addrs.len());
    for t in addrs {
        let tls = match (&t.tls, &connector) {
            (Some(per_upstream), Some(connector)) => {
                if per_upstream.is_some() && tls_servername.is_some() {
                    return Err(d.err(format!(
                        "both forward ('tls_servername') and proxy level TLS servername are set for {}",
                        t.addr
                    )));
                }
                let name = match per_upstream.as_ref().or(tls_servername.as_ref()) {
                    Some(n) => ServerName::try_from(n.clone())
                        .map_err(|_| d.err(format!("invalid TLS server name {n}")))?,
                    None => ServerName::IpAddress(t.addr.ip().into()),
                };
                Some(TlsTarget {
                    connector: connector.clone(),
                    name,
                })
            }
            _ => None,
        };
        proxies.push(Arc::new(Proxy::new(t.addr, tls, popts.clone(), metrics)));
    }
    let no_aaaa = if no_aaaa {
        Some(NoAaaa::new(&from_name).ok_or_else(|| {
            d.err(format!(
                "no_aaaa: {from_name} is too long to name its SOA records"
            ))
        })?)
    } else {
        None
    };
    Ok(Forward {
        no_aaaa,
        from: from_name,
        except,
        proxies,
        opts,
        next_is_forward,
        inflight: AtomicUsize::new(0),
        rr: AtomicUsize::new(0),
        waiting: Mutex::new(HashMap::default()),
        metrics: metrics.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clusterdns_corefile::{ProcessEnv, parse_str};

    fn dir(text: &str) -> Directive {
        let cf = parse_str(text, Path::new("Corefile"), &ProcessEnv).expect("parse");
        cf.blocks[0].directives[0].clone()
    }

    fn tos(args: &str, cfg_dir: &Path) -> Result<Vec<To>, String> {
        let d = dir(&format!(". {{\n forward . {args}\n}}\n"));
        let mut out = Vec::new();
        for a in d.args.iter().skip(1) {
            upstreams(&d, &a.text, cfg_dir, &mut out).map_err(|e| e.to_string())?;
        }
        Ok(out)
    }

    fn to(addr: &str, tls: Option<Option<&str>>) -> To {
        To {
            addr: addr.parse().expect("addr"),
            tls: tls.map(|n| n.map(str::to_string)),
        }
    }

    #[test]
    fn parses_every_upstream_form() {
        let tmp = std::env::temp_dir().join(format!("fwd-test-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).expect("dir");
        std::fs::write(
            tmp.join("resolv.conf"),
            "# c\nsearch x\nnameserver 10.0.0.1\nnameserver ::1\noptions ndots:5\n",
        )
        .expect("write");
        let got = tos(
            "1.2.3.4 dns://5.6.7.8:5353 [::2]:53 ::3 tls://9.9.9.9 tls://1.1.1.1%one.one:8853 tls://[::4]%v6.test:853 resolv.conf",
            &tmp,
        )
        .expect("parse");
        assert_eq!(
            got,
            vec![
                to("1.2.3.4:53", None),
                to("5.6.7.8:5353", None),
                to("[::2]:53", None),
                to("[::3]:53", None),
                to("9.9.9.9:853", Some(None)),
                to("1.1.1.1:8853", Some(Some("one.one"))),
                to("[::4]:853", Some(Some("v6.test"))),
                to("10.0.0.1:53", None),
                to("[::1]:53", None),
            ]
        );
        assert!(tos("https://1.1.1.1", &tmp).is_err());
        assert!(tos("no-such-file", &tmp).is_err());
        let _ = std::fs::remove_dir_all(&tmp);
    }

    #[test]
    fn options_and_errors() {
        let m = Metrics::new(&clusterdns_contract::metrics::Registry::new());
        let p = |body: &str| {
            let d = dir(&format!(
                ". {{\n forward . 127.0.0.1 127.0.0.2 {{\n{body}\n }}\n}}\n"
            ));
            parse(&d, Path::new("."), &m, false).map_err(|e| e.to_string())
        };
        let f = p("force_tcp\n max_fails 0\n policy round_robin\n max_concurrent 10\n next NXDOMAIN servfail\n except a.example B.example")
            .expect("ok");
        assert!(f.opts.force_tcp);
        assert_eq!(f.opts.max_fails, 0);
        assert_eq!(f.opts.policy, Policy::RoundRobin);
        assert_eq!(f.opts.max_concurrent, 10);
        assert_eq!(f.opts.next, vec![Rcode::NXDOMAIN, Rcode::SERVFAIL]);
        assert_eq!(f.opts.max_connect_attempts, 4);
        assert_eq!(f.except[1].to_string(), "b.example.");
        // Enough UDP sockets for the in-flight limit: past it REFUSED, never
        // SERVFAIL for want of a socket.
        assert_eq!(f.proxies[0].opts.max_sockets, MAX_SOCKETS);
        let f = p("max_concurrent 100000").expect("ok");
        assert_eq!(
            f.proxies[0].opts.max_sockets,
            100_000usize.div_ceil(PER_SOCKET)
        );
        let f = p("").expect("ok");
        assert_eq!(
            f.proxies[1].opts.max_sockets,
            super::super::MAX_INFLIGHT.div_ceil(PER_SOCKET)
        );
        for (body, msg) in [
            ("policy fastest", "unknown policy 'fastest'"),
            ("failover NOERROR", "NoError cannot be used in failover"),
            ("expire 10", "missing unit"),
            (
                "max_age 1s",
                "max_age must be greater than or equal to expire",
            ),
            (
                "health_check 1s sometimes",
                "health_check: unknown option sometimes",
            ),
            ("read_timeout 0", "read_timeout can't be zero"),
            ("tls /no/such/ca.pem", "no such file"),
            // CoreDNS's own texts for a negative duration (Go parses one).
            ("expire -1.5s", "expire can't be negative: -1.5s"),
            (
                "health_check -1s",
                "health_check can't be negative: -1000000000",
            ),
        ] {
            let e = p(body).expect_err(body);
            assert!(e.contains(msg), "{body}: {e}");
        }
    }
}
