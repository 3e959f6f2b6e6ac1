//! UDP: one SO_REUSEPORT socket and one thread per worker, each running
//! receive batch → synchronous chain → send batch. Queries that need I/O
//! go to the runtime and are answered from there on the same socket.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use clusterdns_plugin::{Proto, ResponseWriter};
use socket2::{Domain, Protocol, Socket, Type};

use crate::handle::{Handled, Meta, serve_async, serve_sync};
use crate::mux::Mux;
use crate::sys::{self, Batch};

/// Datagrams per `recvmmsg`/`sendmmsg`.
const BATCH: usize = 32;

/// How often a blocked worker wakes up to notice a stop.
const WAKE: Duration = Duration::from_millis(200);

/// The running UDP side of one listener.
pub(crate) struct UdpListener {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    pub(crate) local: SocketAddr,
}

impl UdpListener {
    /// Binds `workers` sockets on `addr` (the first one decides the port
    /// when `addr` has port 0) and starts their threads.
    pub(crate) fn start(
        addr: SocketAddr,
        mux: Arc<ArcSwap<Mux>>,
        workers: usize,
        rt: tokio::runtime::Handle,
    ) -> std::io::Result<Self> {
        let first = bind(addr)?;
        let local = first
            .local_addr()?
            .as_socket()
            .ok_or_else(|| std::io::Error::other("not an inet socket"))?;
        let mut sockets = vec![first];
        for _ in 1..workers.max(1) {
            sockets.push(bind(local)?);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for (i, s) in sockets.into_iter().enumerate() {
            let sock = Arc::new(s);
            let stop = stop.clone();
            let mux = mux.clone();
            let rt = rt.clone();
            let t = std::thread::Builder::new()
                .name(format!("udp-{}-{i}", local.port()))
                .spawn(move || worker(sock, local, mux, stop, rt))?;
            threads.push(t);
        }
        Ok(Self {
            stop,
            threads,
            local,
        })
    }

    /// Stops the workers and waits for them.
    pub(crate) fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

fn bind(addr: SocketAddr) -> std::io::Result<Socket> {
    let domain = if addr.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    // A larger receive buffer absorbs bursts; the kernel caps it at
    // net.core.rmem_max, which is fine.
    let _ = s.set_recv_buffer_size(4 << 20);
    let _ = s.set_send_buffer_size(4 << 20);
    s.set_read_timeout(Some(WAKE))?;
    s.bind(&addr.into())?;
    Ok(s)
}

fn worker(
    sock: Arc<Socket>,
    local: SocketAddr,
    mux: Arc<ArcSwap<Mux>>,
    stop: Arc<AtomicBool>,
    rt: tokio::runtime::Handle,
) {
    let fd = sock.as_raw_fd();
    let mut batch = Batch::new(BATCH);
    let mut w = ResponseWriter::new();
    while !stop.load(Ordering::Relaxed) {
        let n = match batch.recv(fd) {
            Ok(n) => n,
            Err(e) => {
                use std::io::ErrorKind::*;
                if !matches!(e.kind(), WouldBlock | TimedOut | Interrupted) {
                    clusterdns_plugin::error!("", "udp receive on {local}: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                }
                continue;
            }
        };
        let table = mux.load();
        let received = Instant::now();
        for i in 0..n {
            let len = batch.rx_len[i];
            if len == 0 {
                continue;
            }
            let Some(client) = batch.peer(i) else {
                continue;
            };
            let meta = Meta {
                client,
                local,
                proto: Proto::Udp,
                received,
            };
            let packet = &batch.rx[i][..len];
            match serve_sync(&table, packet, meta, &mut w) {
                Handled::Reply => {
                    std::mem::swap(w.buffer_mut(), &mut batch.tx[i]);
                    batch.tx_ready.push(i);
                }
                Handled::Drop => {}
                Handled::Defer => {
                    let packet = packet.to_vec();
                    let mux = mux.clone();
                    let sock = sock.clone();
                    rt.spawn(async move {
                        let table = mux.load_full();
                        let mut w = ResponseWriter::default();
                        if serve_async(&table, &packet, meta, &mut w).await == Handled::Reply {
                            let _ = sys::send_to(sock.as_raw_fd(), w.bytes(), client);
                        }
                    });
                }
            }
        }
        if !batch.tx_ready.is_empty() {
            batch.send(fd);
        }
    }
}
