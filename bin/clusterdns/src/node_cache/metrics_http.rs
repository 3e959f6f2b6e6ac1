//! node-cache's own `/metrics` listener (`-metrics-listen-address`), apart
//! from the server's `prometheus` plugin, as upstream runs it; and
//! `/ready` (beyond upstream), a real query through the cache.

use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use clusterdns_http::{Asked, Config, Method, Reply};
use clusterdns_nodecache::ready::ReadyProbe;
use clusterdns_observe::listen;
use clusterdns_observe::metrics::Registry;
use tokio::net::TcpListener;

/// As this listener has always answered: one request per connection, no
/// `Date`, the handler run once the head is in; the head within 5 s of the
/// connection, a write stalled 5 s ends it (the `/ready` probe bounds itself).
const METRICS: Config = Config {
    keep_alive: false,
    date: false,
    whole_body: false,
    timeout: Duration::from_secs(5),
};

/// Binds `addr` (Go form, as upstream's `http.ListenAndServe` takes it:
/// `:9353` and `0.0.0.0:9353` listen on both families), or adopts the
/// listener a predecessor handed over, and serves `GET /metrics` from
/// `registry` in a task; the address listened on (as asked, with the
/// bound port) and a duplicate of the listener (for a successor).
pub async fn spawn(
    addr: &str,
    registry: Arc<Registry>,
    ready: Option<Arc<ReadyProbe>>,
    inherited: Option<OwnedFd>,
) -> std::io::Result<(SocketAddr, OwnedFd)> {
    let asked = listen::addr(addr).map_err(std::io::Error::other)?;
    let listener = match inherited {
        Some(fd) => std::net::TcpListener::from(fd),
        None => listen::tcp(asked)?,
    };
    listener.set_nonblocking(true)?;
    let listener = TcpListener::from_std(listener)?;
    // A dual-stack socket calls itself `[::]`: name the address as given.
    let bound = SocketAddr::new(asked.ip(), listener.local_addr()?.port());
    let dup = listener.as_fd().try_clone_to_owned()?;
    let handler = move |asked: Asked| {
        let (registry, ready) = (registry.clone(), ready.clone());
        async move { answer(&asked, &registry, ready.as_deref()).await }
    };
    tokio::spawn(clusterdns_http::serve(
        listener,
        METRICS,
        handler,
        clusterdns_http::forever(),
    ));
    Ok((bound, dup))
}

/// As [`spawn`] once `addr` can be bound, tried every `every` in a task
/// (the port is another process's until it exits). Not handed over to a
/// successor, which binds its own beside it.
pub fn spawn_when_free(
    addr: String,
    registry: Arc<Registry>,
    ready: Option<Arc<ReadyProbe>>,
    every: Duration,
) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            match spawn(&addr, registry.clone(), ready.clone(), None).await {
                Ok((bound, _)) => {
                    clusterdns_observe::info!("", "metrics on http://{bound}/metrics");
                    return;
                }
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {}
                Err(e) => {
                    clusterdns_observe::error!("", "metrics listener {addr}: {e}");
                    return;
                }
            }
        }
    });
}

/// `GET /metrics` and `GET /ready`; anything else, other methods too, is a 404.
async fn answer(asked: &Asked, registry: &Registry, ready: Option<&ReadyProbe>) -> Reply {
    let get = asked.method == Method::GET;
    let (status, body) = match (get, asked.path.as_str(), ready) {
        (true, "/metrics", _) => (200, registry.render()),
        // A real query through the cache (clusterdns_nodecache::ready).
        (true, "/ready", Some(probe)) => match probe.check().await {
            Ok(()) => (200, "OK\n".to_string()),
            Err(why) => (503, format!("{why}\n")),
        },
        _ => (404, "404 page not found\n".to_string()),
    };
    Reply::text(status, "text/plain; version=0.0.4; charset=utf-8", body)
}
