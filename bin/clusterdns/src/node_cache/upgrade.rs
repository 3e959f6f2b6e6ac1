//! The zero-loss upgrade's wiring (the exchange itself is
//! `clusterdns_nodecache::handover`): what the server's sockets are
//! called on the wire, taking them from a running instance, and the
//! thread that gives ours to the next one.

use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clusterdns_nodecache::handover::{self, Accepted, Conn, Item, Listener};
use clusterdns_observe::{info, warning};
use clusterdns_server::{Exporter, PassedSocket, SocketKind};
use tokio::sync::mpsc;

/// The agent's own `/metrics` listener, beside the server's sockets.
const METRICS: &str = "metrics";

/// How long each side waits for the other's next message while the
/// sockets change hands; the successor's start-up (Corefile, plugins)
/// must fit in `SERVE_WITHIN`.
const STEP_WITHIN: Duration = Duration::from_secs(5);
const SERVE_WITHIN: Duration = Duration::from_secs(60);

/// What a successor took from its predecessor.
pub struct Taken {
    /// Kept open for this instance's life: the predecessor's sign that
    /// its successor still serves.
    pub conn: Conn,
    /// The server's sockets.
    pub server: Vec<PassedSocket>,
    /// The agent's `/metrics` listener.
    pub metrics: Option<OwnedFd>,
}

/// Takes the sockets of the instance listening at `path`, if any.
pub fn take(path: &Path) -> Result<Option<Taken>, handover::HandoverError> {
    let Some((conn, items)) = handover::take(path, STEP_WITHIN)? else {
        return Ok(None);
    };
    let mut taken = Taken {
        conn,
        server: Vec::new(),
        metrics: None,
    };
    for Item { tag, fd } in items {
        let Some((kind, addr)) = tag.split_once(' ') else {
            warning!("", "hand-over: ignoring a socket called {tag:?}");
            continue;
        };
        let kind = match kind {
            "udp" => SocketKind::Udp,
            "tcp" => SocketKind::Tcp,
            METRICS => {
                taken.metrics = Some(fd);
                continue;
            }
            _ => {
                warning!("", "hand-over: ignoring a socket called {tag:?}");
                continue;
            }
        };
        match addr.parse::<SocketAddr>() {
            Ok(addr) => taken.server.push(PassedSocket { kind, addr, fd }),
            Err(_) => warning!("", "hand-over: ignoring a socket called {tag:?}"),
        }
    }
    Ok(Some(taken))
}

/// The running instance's side, on a thread of its own: each successor
/// that connects gets duplicates of the server's sockets and of the
/// metrics listener; once it says it serves, its connection goes to
/// `successors`. `giving` is true while a hand-over is under way.
pub fn give_forever(
    listener: Arc<Listener>,
    exporter: Exporter,
    metrics: Option<(SocketAddr, OwnedFd)>,
    successors: mpsc::UnboundedSender<Conn>,
    giving: Arc<AtomicBool>,
) {
    std::thread::spawn(move || {
        loop {
            let conn = match listener.accept() {
                Ok(Accepted::Peer(c)) => c,
                Ok(Accepted::Stranger { pid, uid }) => {
                    let uid = uid.map_or_else(|| "unknown".to_string(), |u| u.to_string());
                    warning!(
                        "",
                        "hand-over socket {}: refused process {pid} of uid {uid}: not this agent's user",
                        listener.path().display()
                    );
                    continue;
                }
                Err(e) => {
                    warning!(
                        "",
                        "hand-over socket {}: {e}; no successor can take over",
                        listener.path().display()
                    );
                    return;
                }
            };
            giving.store(true, Ordering::SeqCst);
            // Stopped serving: nothing to give (the process is exiting).
            let Some(sockets) = exporter.blocking_sockets() else {
                giving.store(false, Ordering::SeqCst);
                return;
            };
            let mut items: Vec<Item> = sockets
                .into_iter()
                .map(|s| Item {
                    tag: format!("{} {}", s.kind.as_str(), s.addr),
                    fd: s.fd,
                })
                .collect();
            if let Some((addr, fd)) = &metrics
                && let Ok(fd) = fd.try_clone()
            {
                items.push(Item {
                    tag: format!("{METRICS} {addr}"),
                    fd,
                });
            }
            let pid = conn.peer_pid().unwrap_or(0);
            match handover::give(&conn, &items, STEP_WITHIN, SERVE_WITHIN) {
                Ok(()) => {
                    info!(
                        "",
                        "hand-over: process {pid} serves on our {} sockets; on SIGTERM this instance drains and leaves the interception to it",
                        items.len()
                    );
                    let _ = successors.send(conn);
                }
                Err(e) => warning!("", "hand-over to process {pid} failed: {e}"),
            }
            drop(items);
            giving.store(false, Ordering::SeqCst);
        }
    });
}
