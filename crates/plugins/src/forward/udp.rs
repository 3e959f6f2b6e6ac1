//! A connected UDP socket to one upstream, registered with the reactor
//! for readable readiness only.
//!
//! `tokio::net::UdpSocket` registers for readable and writable readiness.
//! With edge-triggered epoll, every datagram sent then raises an EPOLLOUT
//! event (the send buffer's space changed), and the worker thread returns
//! from `epoll_wait` once more per forwarded query for nothing. A send on
//! a UDP socket practically never finds the buffer full; when it does,
//! it is retried after short sleeps.
//!
//! The one `unsafe` is tokio's registration call, whose contract (the
//! descriptor outlives its registration) holds because the `AsyncFd`
//! owns the socket.

#![allow(unsafe_code)]

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// How long a send into a full buffer waits before trying again, and how
/// many times it tries.
const SEND_RETRY: Duration = Duration::from_millis(1);
const SEND_RETRIES: u32 = 20;

/// See the module doc.
pub(crate) struct UpstreamUdp {
    fd: AsyncFd<UdpSocket>,
    /// The bound address, asked once: it only names the socket in error
    /// messages, and a stalled upstream fails every query on it.
    local: Option<SocketAddr>,
}

impl UpstreamUdp {
    /// Binds to `local` and connects to `upstream`. Must run inside a
    /// runtime context.
    pub(crate) fn connect(local: SocketAddr, upstream: SocketAddr) -> io::Result<Self> {
        let s = UdpSocket::bind(local)?;
        s.connect(upstream)?;
        s.set_nonblocking(true)?;
        // SAFETY: the descriptor belongs to `s`, which the `AsyncFd` owns:
        // it stays open while registered and is deregistered (on drop)
        // before it closes.
        let fd = unsafe { AsyncFd::register_with_interest(s, Interest::READABLE) }
            .map_err(io::Error::from)?;
        let local = fd.get_ref().local_addr().ok();
        Ok(Self { fd, local })
    }

    /// Sends one datagram to the upstream.
    pub(crate) async fn send(&self, buf: &[u8]) -> io::Result<usize> {
        let mut tries = 0;
        loop {
            match self.fd.get_ref().send(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && tries < SEND_RETRIES => {
                    tries += 1;
                    tokio::time::sleep(SEND_RETRY).await;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                r => return r,
            }
        }
    }

    /// Receives one datagram from the upstream, or the error the socket
    /// holds (an ICMP port unreachable makes it `connection refused`):
    /// that arrives as a bare EPOLLERR, which does not count as readable.
    pub(crate) async fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.fd
            .async_io(Interest::READABLE.add(Interest::ERROR), |s| {
                s.recv(&mut *buf)
            })
            .await
    }

    /// Runs `f` on the socket once it is readable (or holds an error),
    /// again after every `WouldBlock`.
    pub(crate) async fn recv_fn<T>(
        &self,
        f: impl FnMut(&UdpSocket) -> io::Result<T>,
    ) -> io::Result<T> {
        self.fd
            .async_io(Interest::READABLE.add(Interest::ERROR), f)
            .await
    }

    /// Forgets the readable readiness the reactor remembers, without a
    /// system call: for when the caller knows the queue is empty (a
    /// datagram arriving later raises a fresh event).
    pub(crate) fn forget_readiness(&self) {
        let _ = self.fd.try_io(Interest::READABLE, |_| {
            Err::<(), _>(io::ErrorKind::WouldBlock.into())
        });
    }

    /// The local address, for error messages.
    pub(crate) fn local_addr(&self) -> Option<SocketAddr> {
        self.local
    }
}
