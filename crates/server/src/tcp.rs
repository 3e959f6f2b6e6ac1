//! DNS over TCP: two-byte length framing, any number of pipelined queries
//! per connection (answered in order), an idle timeout and a cap on open
//! connections.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use clusterdns_plugin::{Proto, ResponseWriter};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};

use crate::handle::{Handled, Meta, serve_async, serve_sync};
use crate::mux::Mux;

/// Idle time after which a connection is closed (CoreDNS: 10s).
pub(crate) const IDLE: Duration = Duration::from_secs(10);

/// Time allowed to read one framed message once its length arrived
/// (CoreDNS read timeout: 3s).
const READ: Duration = Duration::from_secs(3);

/// Open connections per listener; more wait in the kernel's backlog.
pub(crate) const MAX_CONNECTIONS: usize = 1024;

/// Accepts connections until `stop` turns true.
pub(crate) async fn serve(
    listener: TcpListener,
    mux: Arc<ArcSwap<Mux>>,
    mut stop: watch::Receiver<bool>,
) {
    let local = listener
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => return },
            _ = stop.changed() => return,
        };
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.changed() => return,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let mux = mux.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            connection(stream, peer, local, mux, stop).await;
            drop(permit);
        });
    }
}

async fn connection(
    mut stream: TcpStream,
    peer: SocketAddr,
    local: SocketAddr,
    mux: Arc<ArcSwap<Mux>>,
    mut stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let client = match peer {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), v6.port()),
            None => peer,
        },
        v4 => v4,
    };
    let mut packet = vec![0u8; 65535];
    let mut w = ResponseWriter::default();
    let mut out = Vec::with_capacity(512);
    loop {
        let len = tokio::select! {
            r = tokio::time::timeout(IDLE, stream.read_u16()) => match r {
                Ok(Ok(len)) => usize::from(len),
                _ => return,
            },
            _ = stop.changed() => return,
        };
        if len == 0 {
            return;
        }
        match tokio::time::timeout(READ, stream.read_exact(&mut packet[..len])).await {
            Ok(Ok(_)) => {}
            _ => return,
        }
        let meta = Meta {
            client,
            local,
            proto: Proto::Tcp,
            received: Instant::now(),
        };
        let table = mux.load_full();
        let msg = &packet[..len];
        let mut handled = serve_sync(&table, msg, meta, &mut w);
        if let Handled::Defer(from) = handled {
            handled = serve_async(&table, msg, meta, from, &mut w).await;
        }
        if handled != Handled::Reply {
            continue;
        }
        let body = w.bytes();
        let Ok(n) = u16::try_from(body.len()) else {
            continue;
        };
        out.clear();
        out.extend_from_slice(&n.to_be_bytes());
        out.extend_from_slice(body);
        if stream.write_all(&out).await.is_err() {
            return;
        }
    }
}
