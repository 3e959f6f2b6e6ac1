//! UDP: one SO_REUSEPORT socket and one task per worker, each running
//! receive batch → synchronous chain → send batch. Queries that need I/O
//! become futures that the same task drives between batches, answered
//! from there on the same socket: no task is spawned per query and a
//! forwarded query never changes threads.

use std::future::{Future, poll_fn};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use clusterdns_contract::{Proto, ResponseWriter};
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::unix::{AsyncFd, AsyncFdReadyGuard};
use tokio::sync::oneshot;

use crate::handle::{Handled, Meta, Parked, serve_sync};
use crate::mux::Mux;
use crate::sys::{self, Batch};

/// Datagrams per `recvmmsg`/`sendmmsg`.
const BATCH: usize = 32;

/// Batches a worker receives in a row, while datagrams keep arriving,
/// before it drives its deferred queries again (see `worker`): enough
/// for receiving to outpace a flood of forwards, few enough that their
/// replies still flow.
const RECV_RUN: u32 = 32;

/// Deferred queries a worker finishes at most before it looks at its
/// socket again: one run's worth of datagrams, so that the queries it
/// admits can finish as fast as it receives them.
const DRAIN: u32 = RECV_RUN * BATCH as u32;

/// How long a worker waits before sending again into a full send buffer,
/// and how many times it tries before dropping the batch's replies.
const SEND_RETRY: Duration = Duration::from_millis(1);
const SEND_RETRIES: u32 = 20;

/// The running UDP side of one listener.
pub(crate) struct UdpListener {
    /// One per worker: sending (or dropping) it stops that worker.
    stops: Vec<oneshot::Sender<()>>,
    /// The workers, finished once they answered what they had in flight.
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// A duplicate of each worker's socket, to hand to a successor.
    pub(crate) fds: Vec<OwnedFd>,
    pub(crate) local: SocketAddr,
}

impl UdpListener {
    /// Binds `workers` sockets on `addr` (the first one decides the port
    /// when `addr` has port 0) and starts their tasks on `rt`.
    pub(crate) fn start(
        addr: SocketAddr,
        mux: Arc<ArcSwap<Mux>>,
        workers: usize,
        rt: tokio::runtime::Handle,
    ) -> std::io::Result<Self> {
        let first = bind(addr)?;
        let local = local_of(&first)?;
        let mut sockets = vec![first];
        for _ in 1..workers.max(1) {
            sockets.push(bind(local)?);
        }
        Self::run(sockets, local, mux, rt)
    }

    /// Serves on sockets another process bound (and may still read):
    /// one worker per socket, whatever this process would have bound.
    pub(crate) fn adopt(
        fds: Vec<OwnedFd>,
        mux: Arc<ArcSwap<Mux>>,
        rt: tokio::runtime::Handle,
    ) -> std::io::Result<Self> {
        let sockets: Vec<Socket> = fds.into_iter().map(Socket::from).collect();
        let first = sockets
            .first()
            .ok_or_else(|| std::io::Error::other("no socket to adopt"))?;
        let local = local_of(first)?;
        for s in &sockets {
            s.set_nonblocking(true)?;
            // The predecessor's sockets may not ask for destinations yet
            // (an older build): the option is the socket's, so setting it
            // here serves both processes.
            if local.ip().is_unspecified() {
                sys::report_destination(s.as_raw_fd(), local.is_ipv6())?;
            }
        }
        Self::run(sockets, local, mux, rt)
    }

    fn run(
        sockets: Vec<Socket>,
        local: SocketAddr,
        mux: Arc<ArcSwap<Mux>>,
        rt: tokio::runtime::Handle,
    ) -> std::io::Result<Self> {
        let mut fds = Vec::with_capacity(sockets.len());
        for s in &sockets {
            fds.push(OwnedFd::from(s.try_clone()?));
        }
        // Registering with the reactor needs the runtime's context.
        let _enter = rt.enter();
        let mut registered = Vec::with_capacity(sockets.len());
        for s in sockets {
            registered.push(sys::register(s)?);
        }
        let (stops, tasks) = registered
            .into_iter()
            .map(|sock| {
                let (stop, stopped) = oneshot::channel();
                (stop, rt.spawn(worker(sock, local, mux.clone(), stopped)))
            })
            .unzip();
        Ok(Self {
            stops,
            tasks,
            fds,
            local,
        })
    }

    /// Stops the workers: they receive no more, and finish the queries
    /// they were already answering (dropping the listener does the same).
    /// The handles end when they have.
    pub(crate) fn stop(self) -> Vec<tokio::task::JoinHandle<()>> {
        for s in self.stops {
            let _ = s.send(());
        }
        self.tasks
    }
}

fn local_of(s: &Socket) -> std::io::Result<SocketAddr> {
    s.local_addr()?
        .as_socket()
        .ok_or_else(|| std::io::Error::other("not an inet socket"))
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
    s.set_nonblocking(true)?;
    if addr.ip().is_unspecified() {
        sys::report_destination(s.as_raw_fd(), addr.is_ipv6())?;
    }
    s.bind(&addr.into())?;
    Ok(s)
}

/// What a worker waits for.
enum Event<'a> {
    Readable(std::io::Result<AsyncFdReadyGuard<'a, Socket>>),
    Stop,
}

/// The asynchronous pass of one deferred query, answered on the worker's
/// socket from `source` (the address the query was sent to, on a wildcard
/// socket). The worker polls it (see `drive`); nothing is spawned.
async fn deferred(
    sock: &AsyncFd<Socket>,
    table: Arc<Mux>,
    parked: Parked,
    meta: Meta,
    source: Option<IpAddr>,
) {
    if let Some(w) = parked.serve(&table, meta).await {
        let _ = sys::send_to(sock.as_raw_fd(), w.bytes(), meta.client, source);
    }
}

/// The deferred queries' turn: the ready ones are polled until DRAIN of
/// them finished or none is ready. First under the poll's cooperative
/// budget, as any task's futures are, so that at the usual rates (where
/// it never runs out) the runtime's order of work is its own; once the
/// budget is spent, outside it. Under the budget alone a worker with a
/// socket backlog left them what the socket's run left of each poll's
/// 128 units, and answered a stalled upstream's SERVFAILs seconds past
/// their deadline (RELIABILITY.md, stalled_upstream).
fn drive<F: Future<Output = ()>>(pending: &mut FuturesUnordered<F>, cx: &mut Context<'_>) {
    fn turn<F: Future<Output = ()>>(
        pending: &mut FuturesUnordered<F>,
        cx: &mut Context<'_>,
        done: &mut u32,
    ) {
        while *done < DRAIN {
            match pending.poll_next_unpin(cx) {
                Poll::Ready(Some(())) => *done += 1,
                _ => break,
            }
        }
    }
    let mut done = 0;
    turn(pending, cx, &mut done);
    if done < DRAIN && !tokio::task::coop::has_budget_remaining() {
        // The queries that found the budget spent are queued again
        // (FuturesUnordered re-queues a future that wakes itself).
        let mut rest = tokio::task::coop::unconstrained(poll_fn(|cx| {
            turn(pending, cx, &mut done);
            Poll::Ready(())
        }));
        let _ = Pin::new(&mut rest).poll(cx);
    }
    if done == DRAIN {
        // More may be ready, and nothing else would wake the worker for
        // them.
        cx.waker().wake_by_ref();
    }
}

/// Sleeps for `d` while still driving the deferred queries.
async fn pause<S: futures_util::Stream + Unpin>(pending: &mut S, d: Duration) {
    let mut sleep = std::pin::pin!(tokio::time::sleep(d));
    poll_fn(|cx| {
        while let Poll::Ready(Some(_)) = pending.poll_next_unpin(cx) {}
        sleep.as_mut().poll(cx)
    })
    .await;
}

async fn worker(
    sock: AsyncFd<Socket>,
    local: SocketAddr,
    mux: Arc<ArcSwap<Mux>>,
    mut stop: oneshot::Receiver<()>,
) {
    let fd = sock.as_raw_fd();
    let mut batch = Batch::new(BATCH, local.ip().is_unspecified());
    let mut w = ResponseWriter::new();
    // The deferred queries in flight, driven by this task between
    // batches (a spawned task per query cost an allocation aligned to a
    // cache line and the moves of its future in and out of the task).
    let mut pending = FuturesUnordered::new();
    // Batches received since the deferred queries were last driven.
    let mut run = 0u32;
    loop {
        let event = poll_fn(|cx| {
            if Pin::new(&mut stop).poll(cx).is_ready() {
                return Poll::Ready(Event::Stop);
            }
            // Receiving comes first: a worker that falls behind loses
            // datagrams at its full receive buffer, where nothing answers
            // them, while a deferred query that waits longer is still
            // answered (late, or with SERVFAIL at its deadline) and keeps
            // its place under forward's `max_concurrent`, so that the
            // queries past the limit are refused cheaply. Driving the
            // deferred queries first let a flood of forwards spend each
            // poll's cooperative budget and starve the socket.
            if run < RECV_RUN
                && let Poll::Ready(r) = sock.poll_read_ready(cx)
            {
                run += 1;
                return Poll::Ready(Event::Readable(r));
            }
            // The socket is empty, or had its run: the deferred queries'
            // turn (see `drive`).
            run = 0;
            drive(&mut pending, cx);
            sock.poll_read_ready(cx).map(|r| {
                run = 1;
                Event::Readable(r)
            })
        })
        .await;
        let mut guard = match event {
            Event::Stop => break,
            Event::Readable(Ok(g)) => g,
            Event::Readable(Err(e)) => {
                clusterdns_contract::error!("", "udp receive on {local}: {e}");
                pause(&mut pending, Duration::from_millis(10)).await;
                continue;
            }
        };
        let n = match batch.recv(fd) {
            Ok(n) => n,
            Err(e) => {
                use std::io::ErrorKind::*;
                match e.kind() {
                    WouldBlock => guard.clear_ready(),
                    Interrupted => {}
                    _ => {
                        drop(guard);
                        clusterdns_contract::error!("", "udp receive on {local}: {e}");
                        pause(&mut pending, Duration::from_millis(10)).await;
                    }
                }
                continue;
            }
        };
        // A short batch emptied the queue. Every datagram that arrives
        // later raises a fresh readiness event, so clearing now loses
        // nothing and spares the recvmmsg that would only say EAGAIN.
        if n < batch.len() {
            guard.clear_ready();
        }
        drop(guard);
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
            let mut slot = None;
            match serve_sync(&table, packet, meta, &mut w, &mut slot) {
                Handled::Reply => {
                    std::mem::swap(w.buffer_mut(), &mut batch.tx[i]);
                    batch.tx_ready.push(i);
                }
                Handled::Drop => {}
                Handled::Defer(at) => {
                    let Some(q) = slot.as_ref() else { continue };
                    let parked = Parked::new(packet, q, at, &mut w);
                    // The table that deferred the query, so that `at`
                    // names the same zone and plugin even if a reload
                    // swapped it.
                    let table = Arc::clone(&table);
                    let source = batch.source(i);
                    pending.push(deferred(&sock, table, parked, meta, source));
                }
            }
        }
        drop(table);
        if !batch.tx_ready.is_empty() && batch.send(fd).is_err() {
            // The send buffer is full (the socket is registered for
            // readable readiness only, see `sys::register`): retry after
            // short sleeps, then give the replies up as a full queue
            // would.
            let mut tries = 0;
            loop {
                pause(&mut pending, SEND_RETRY).await;
                tries += 1;
                if batch.send(fd).is_ok() {
                    break;
                }
                if tries == SEND_RETRIES {
                    batch.drop_pending();
                    break;
                }
            }
        }
    }
    // Stopped: the queries in flight are still answered.
    while pending.next().await.is_some() {}
}
