//! Go's `ReadTimeout` and `WriteTimeout` on a connection, which hyper's
//! HTTP/1 server does not have (its header timeout leaves a body, an
//! idle keep-alive wait measured from the wrong moment, and writes
//! unbounded).
//!
//! - Reading: a request, head and body, must be in within the timeout
//!   of the last byte written (the previous response) or of the
//!   connection's start, as Go sets its read deadline before each
//!   request. Past it a read ends as if the client had closed: an idle,
//!   stopped or trickling client loses its connection.
//! - Writing: a write that makes no progress for the timeout fails: a
//!   client that stops reading (pipelining requests whose answers it
//!   never reads) loses its connection instead of holding it.

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

/// A connection with Go's read and write deadlines.
pub(crate) struct Guarded {
    io: TcpStream,
    timeout: Duration,
    /// Reads end (as at end of file) from then on.
    read_by: Instant,
    read_timer: Pin<Box<Sleep>>,
    /// Armed while a write waits for the client; fails it when it fires.
    write_timer: Option<Pin<Box<Sleep>>>,
}

impl Guarded {
    pub(crate) fn new(io: TcpStream, timeout: Duration) -> Guarded {
        let read_by = Instant::now() + timeout;
        Guarded {
            io,
            timeout,
            read_by,
            read_timer: Box::pin(tokio::time::sleep_until(read_by)),
            write_timer: None,
        }
    }

    /// A write went through: the next request's time starts now.
    fn wrote(&mut self) {
        self.write_timer = None;
        self.read_by = Instant::now() + self.timeout;
    }

    /// A write must wait: pending until the client reads, or an error
    /// once it has waited for the whole timeout.
    fn stalled<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let timeout = self.timeout;
        let timer = self
            .write_timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::ErrorKind::TimedOut.into())),
            Poll::Pending => Poll::Pending,
        }
    }

    /// `r` of a write of bytes: one that went through starts the next
    /// request's time.
    fn after_write(
        &mut self,
        r: Poll<io::Result<usize>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>> {
        match r {
            Poll::Ready(Ok(n)) if n > 0 => {
                self.wrote();
                Poll::Ready(Ok(n))
            }
            Poll::Ready(r) => {
                self.write_timer = None;
                Poll::Ready(r)
            }
            Poll::Pending => self.stalled(cx),
        }
    }

    /// `r` of a flush or shutdown, which write no bytes of their own
    /// (hyper flushes on every turn, idle or not: not a response).
    fn after_flush(
        &mut self,
        r: Poll<io::Result<()>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        match r {
            Poll::Ready(r) => {
                self.write_timer = None;
                Poll::Ready(r)
            }
            Poll::Pending => self.stalled(cx),
        }
    }
}

impl AsyncRead for Guarded {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if Instant::now() >= this.read_by {
            // Nothing read: hyper takes it for the client's close.
            return Poll::Ready(Ok(()));
        }
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(r) => Poll::Ready(r),
            Poll::Pending => {
                if this.read_timer.deadline() != this.read_by {
                    this.read_timer.as_mut().reset(this.read_by);
                }
                match this.read_timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Ok(())),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write(cx, data);
        this.after_write(r, cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.after_write(r, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_flush(cx);
        this.after_flush(r, cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_shutdown(cx);
        this.after_flush(r, cx)
    }
}
