//! node-cache's own `/metrics` listener (`-metrics-listen-address`), apart
//! from the server's `prometheus` plugin, as upstream runs it; and
//! `/ready` (beyond upstream), a real query through the cache.

use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use clusterdns_nodecache::ready::ReadyProbe;
use clusterdns_observe::listen;
use clusterdns_observe::metrics::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

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
    tokio::spawn(async move {
        loop {
            let Ok((conn, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let registry = registry.clone();
            let ready = ready.clone();
            tokio::spawn(async move {
                let _ = tokio::time::timeout(
                    Duration::from_secs(5),
                    answer(conn, &registry, ready.as_deref()),
                )
                .await;
            });
        }
    });
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

/// One request, one response, then the connection closes.
async fn answer(
    mut conn: TcpStream,
    registry: &Registry,
    ready: Option<&ReadyProbe>,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 8192];
    let mut len = 0;
    while !buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
        if len == buf.len() {
            return Ok(());
        }
        let n = conn.read(&mut buf[len..]).await?;
        if n == 0 {
            return Ok(());
        }
        len += n;
    }
    let head = String::from_utf8_lossy(&buf[..len]);
    let mut first = head.lines().next().unwrap_or("").split(' ');
    let (method, path) = (first.next().unwrap_or(""), first.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, body) = match (method, path, ready) {
        ("GET", "/metrics", _) => ("200 OK", registry.render()),
        // A real query through the cache (clusterdns_nodecache::ready).
        ("GET", "/ready", Some(probe)) => match probe.check().await {
            Ok(()) => ("200 OK", "OK\n".to_string()),
            Err(why) => ("503 Service Unavailable", format!("{why}\n")),
        },
        _ => ("404 Not Found", "404 page not found\n".to_string()),
    };
    let resp = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(resp.as_bytes()).await?;
    conn.shutdown().await
}
