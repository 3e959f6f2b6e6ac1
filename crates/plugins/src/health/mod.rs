#![doc = include_str!("README.md")]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clusterdns_contract::duration::format_go;
use clusterdns_contract::metrics::{Counter, HistogramSeries};
use clusterdns_contract::{HttpReply, HttpRoute, PluginDef, SetupCtx, warning};
use clusterdns_corefile::{ConfigError, Directive};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use clusterdns_contract::parse::listen_addr;

/// Registration of *health*.
pub const DEF: PluginDef = PluginDef {
    name: "health",
    setup,
};

/// CoreDNS's default health address.
const DEFAULT_ADDR: &str = ":8080";

/// What a block's `health` lines say.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HealthConfig {
    addr: SocketAddr,
    lameduck: Duration,
}

fn parse(dirs: &[&Directive]) -> Result<HealthConfig, ConfigError> {
    let mut addr = listen_addr(DEFAULT_ADDR).map_err(|e| dirs[0].err(e))?;
    let mut lameduck = Duration::ZERO;
    for d in dirs {
        if let Some(a) = clusterdns_contract::parse::optional_arg(d)? {
            addr = listen_addr(a).map_err(|e| d.err(e))?;
        }
        for line in &d.block {
            match line.name.text.as_str() {
                "lameduck" => {
                    let [a] = line.args.as_slice() else {
                        return Err(line.arg_err());
                    };
                    lameduck = clusterdns_contract::duration::parse_go(&a.text).map_err(|e| {
                        a.err(format!(
                            "unable to parse lameduck duration value: '{}' : {e}",
                            a.text
                        ))
                    })?;
                }
                other => return Err(line.err(format!("unknown property '{other}'"))),
            }
        }
    }
    Ok(HealthConfig { addr, lameduck })
}

fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    let cfg = parse(dirs)?;
    ctx.shared.routes.push(HttpRoute {
        addr: cfg.addr,
        path: "/health".to_string(),
        // Always healthy, as CoreDNS: the process answers, that is all.
        handler: Arc::new(|| HttpReply {
            status: 200,
            content_type: "text/plain; charset=utf-8",
            body: b"OK".to_vec(),
            streamed: false,
        }),
    });
    if !cfg.lameduck.is_zero() {
        let cur = ctx.shared.lameduck.unwrap_or(Duration::ZERO);
        ctx.shared.lameduck = Some(cur.max(cfg.lameduck));
    }
    let (duration, failures) = crate::pkg::health_metrics(&ctx.shared.metrics);
    let task: Arc<Mutex<Option<tokio::task::JoinHandle<()>>>> = Arc::default();
    let start = task.clone();
    let target = poll_target(cfg.addr);
    ctx.shared.on_startup.push(Box::new(move || {
        let rt = tokio::runtime::Handle::try_current()
            .map_err(|e| format!("plugin/health: no runtime: {e}"))?;
        *start.lock() = Some(rt.spawn(poll(target, duration, failures)));
        Ok(())
    }));
    ctx.shared.on_shutdown.push(Box::new(move || {
        if let Some(t) = task.lock().take() {
            t.abort();
        }
        Ok(())
    }));
    Ok(())
}

/// Where the poller connects: the listen address, loopback for a
/// wildcard.
fn poll_target(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(v4) if v4.is_unspecified() => {
            SocketAddr::new(Ipv4Addr::LOCALHOST.into(), addr.port())
        }
        IpAddr::V6(v6) if v6.is_unspecified() => {
            SocketAddr::new(Ipv6Addr::LOCALHOST.into(), addr.port())
        }
        _ => addr,
    }
}

/// Polls `/health` every second, as CoreDNS's `overloaded` does, timing
/// each request.
async fn poll(target: SocketAddr, duration: Arc<HistogramSeries>, failures: Arc<Counter>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    let url = format!("http://{target}/health");
    loop {
        tick.tick().await;
        let start = Instant::now();
        let res = tokio::time::timeout(Duration::from_secs(3), get_health(target)).await;
        let elapsed = start.elapsed();
        duration.observe(elapsed.as_secs_f64());
        match res {
            Ok(Ok(())) => {
                if elapsed > Duration::from_secs(1) {
                    warning!(
                        "health",
                        "Local health request to {url:?} took more than 1s: {}",
                        format_go(elapsed)
                    );
                }
            }
            Ok(Err(e)) => {
                failures.inc();
                warning!("health", "Local health request to {url:?} failed: {e}");
            }
            Err(_) => {
                failures.inc();
                warning!(
                    "health",
                    "Local health request to {url:?} failed: context deadline exceeded"
                );
            }
        }
    }
}

async fn get_health(target: SocketAddr) -> std::io::Result<()> {
    let mut s = tokio::net::TcpStream::connect(target).await?;
    s.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await?;
    let mut buf = Vec::with_capacity(256);
    s.read_to_end(&mut buf).await?;
    if buf.starts_with(b"HTTP/1.1 200") || buf.starts_with(b"HTTP/1.0 200") {
        Ok(())
    } else {
        Err(std::io::Error::other("unexpected status"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{setup as run_setup, setup_err};

    #[test]
    fn setup_accepts() {
        let r = run_setup(DEF, ". {\n health\n}").unwrap();
        assert_eq!(r.shared.routes.len(), 1);
        assert_eq!(r.shared.routes[0].addr, "0.0.0.0:8080".parse().unwrap());
        assert_eq!(r.shared.routes[0].path, "/health");
        assert_eq!(r.shared.lameduck, None);
        assert_eq!(((r.shared.routes[0].handler)()).body, b"OK");
        let r = run_setup(DEF, ". {\n health 127.0.0.1:9090 {\n lameduck 5s\n }\n}").unwrap();
        assert_eq!(r.shared.routes[0].addr, "127.0.0.1:9090".parse().unwrap());
        assert_eq!(r.shared.lameduck, Some(Duration::from_secs(5)));
        assert_eq!(r.shared.on_startup.len(), 1);
        assert_eq!(r.shared.on_shutdown.len(), 1);
        assert!(r.plugins.is_empty(), "health is not a handler");
        let text = r.shared.metrics.render();
        assert!(
            text.contains("coredns_health_request_failures_total 0"),
            "{text}"
        );
        assert!(
            text.contains("coredns_health_request_duration_seconds_bucket{le=\"0.00025\"} 0"),
            "{text}"
        );
    }

    #[test]
    fn setup_rejects() {
        let cases = [
            (
                ". {\n health a b\n}",
                "Wrong argument count or unexpected line ending after 'b'",
            ),
            (
                ". {\n health 8080\n}",
                "address 8080: missing port in address",
            ),
            (
                ". {\n health {\n lameduck\n }\n}",
                "Wrong argument count or unexpected line ending after 'lameduck'",
            ),
            (
                ". {\n health {\n lameduck 5\n }\n}",
                "unable to parse lameduck duration value: '5' : time: missing unit in duration \"5\"",
            ),
            (
                ". {\n health {\n bogus 1\n }\n}",
                "unknown property 'bogus'",
            ),
        ];
        for (c, want) in cases {
            assert_eq!(setup_err(DEF, c), want, "{c}");
        }
    }
}
