//! Listening sockets that outlive the process that bound them: a server
//! can start on sockets another process hands it ([`Inherited`]) and can
//! hand out duplicates of its own ([`Exporter`]). Two processes then serve
//! the same sockets, so one can stop reading while the other goes on: a
//! datagram or connection already queued in the kernel is read by the
//! other, none is lost, and the addresses are never unbound. How the
//! descriptors travel between processes (SCM_RIGHTS on a Unix socket) is
//! the caller's business; this crate only binds, adopts and duplicates.

use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};

/// What a passed socket is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SocketKind {
    /// A bound UDP socket (a DNS listener has one per worker, all on the
    /// same address with SO_REUSEPORT).
    Udp,
    /// A listening TCP socket (DNS over TCP, or an admin HTTP listener).
    Tcp,
}

impl SocketKind {
    /// `udp` or `tcp`.
    pub fn as_str(self) -> &'static str {
        match self {
            SocketKind::Udp => "udp",
            SocketKind::Tcp => "tcp",
        }
    }
}

/// One socket, named by the address its Corefile key or admin plugin
/// asked for (so a successor with the same Corefile finds it).
#[derive(Debug)]
pub struct PassedSocket {
    /// UDP or TCP.
    pub kind: SocketKind,
    /// The configured address.
    pub addr: SocketAddr,
    /// The socket.
    pub fd: OwnedFd,
}

/// Sockets a server adopts instead of binding: for each listener of its
/// Corefile, those passed under its address and kind are taken; the rest
/// are closed once the first configuration serves. Empty by default.
#[derive(Debug, Clone, Default)]
pub struct Inherited(Arc<Mutex<Vec<PassedSocket>>>);

impl Inherited {
    /// The sockets to adopt.
    pub fn new(sockets: Vec<PassedSocket>) -> Self {
        Inherited(Arc::new(Mutex::new(sockets)))
    }

    /// Removes and returns every socket of `kind` passed for `addr`.
    pub fn take(&self, kind: SocketKind, addr: SocketAddr) -> Vec<OwnedFd> {
        let mut all = self.0.lock();
        let mut out = Vec::new();
        let mut i = 0;
        while i < all.len() {
            if all[i].kind == kind && all[i].addr == addr {
                out.push(all.swap_remove(i).fd);
            } else {
                i += 1;
            }
        }
        out
    }

    /// Closes the sockets nobody took.
    pub fn clear(&self) {
        self.0.lock().clear();
    }

    /// How many are left.
    pub fn len(&self) -> usize {
        self.0.lock().len()
    }

    /// Whether none is left.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A request for duplicates of the serving sockets.
pub(crate) type ExportRequest = oneshot::Sender<Vec<PassedSocket>>;

/// Asks a running server for duplicates of every socket it serves on
/// (its DNS listeners' UDP sockets and TCP listeners, its admin HTTP
/// listeners). Cheap to clone; usable from any thread.
#[derive(Debug, Clone)]
pub struct Exporter {
    pub(crate) tx: mpsc::UnboundedSender<ExportRequest>,
}

impl Exporter {
    /// The duplicates; `None` when the server has stopped serving.
    pub async fn sockets(&self) -> Option<Vec<PassedSocket>> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(tx).ok()?;
        rx.await.ok()
    }

    /// As [`Exporter::sockets`], from a thread outside the runtime.
    pub fn blocking_sockets(&self) -> Option<Vec<PassedSocket>> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(tx).ok()?;
        rx.blocking_recv().ok()
    }
}
