//! The admin HTTP listeners (`health`, `ready`, `prometheus`): a minimal
//! HTTP/1.1 GET server. Routes come from the plugins; on reload a
//! listener's route table is swapped, the socket stays.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use clusterdns_plugin::HttpRoute;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The routes served on one address.
pub(crate) type Routes = Arc<ArcSwap<Vec<HttpRoute>>>;

/// Serves `routes` on `listener` until `stop` turns true.
pub(crate) async fn serve(listener: TcpListener, routes: Routes, mut stop: watch::Receiver<bool>) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.changed() => return,
        };
        let Ok((stream, _)) = accepted else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let routes = routes.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(5), respond(stream, routes)).await;
        });
    }
}

async fn respond(mut stream: TcpStream, routes: Routes) -> std::io::Result<()> {
    let mut buf = vec![0u8; 4096];
    let mut len = 0;
    while !buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
        if len == buf.len() {
            return write(&mut stream, 431, "text/plain", b"request too large").await;
        }
        let n = stream.read(&mut buf[len..]).await?;
        if n == 0 {
            return Ok(());
        }
        len += n;
    }
    let head = String::from_utf8_lossy(&buf[..len]);
    let mut parts = head.lines().next().unwrap_or("").split_whitespace();
    let method = parts.next().unwrap_or("");
    let target = parts.next().unwrap_or("");
    let path = target.split('?').next().unwrap_or("");
    if method != "GET" && method != "HEAD" {
        return write(&mut stream, 405, "text/plain", b"method not allowed").await;
    }
    let table = routes.load();
    match table.iter().find(|r| r.path == path) {
        Some(r) => {
            let reply = (r.handler)();
            let body = if method == "HEAD" {
                &[][..]
            } else {
                &reply.body[..]
            };
            write(&mut stream, reply.status, reply.content_type, body).await
        }
        None => {
            write(
                &mut stream,
                404,
                "text/plain; charset=utf-8",
                b"404 page not found\n",
            )
            .await
        }
    }
}

async fn write(
    stream: &mut TcpStream,
    status: u16,
    ctype: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    stream.shutdown().await
}

/// Groups routes by listen address, in first-seen order.
pub(crate) fn by_addr(routes: &[HttpRoute]) -> Vec<(SocketAddr, Vec<HttpRoute>)> {
    let mut out: Vec<(SocketAddr, Vec<HttpRoute>)> = Vec::new();
    for r in routes {
        match out.iter_mut().find(|(a, _)| *a == r.addr) {
            Some((_, v)) => v.push(r.clone()),
            None => out.push((r.addr, vec![r.clone()])),
        }
    }
    out
}
