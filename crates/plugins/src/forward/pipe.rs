//! A pipelined stream connection (TCP or TLS) to one upstream: any number
//! of queries in flight, written in turn by a writer task, their replies
//! matched by message ID and question by a reader task.
//!
//! A query appends its frame to the connection's outbox under the same
//! lock that registers it, and wakes the writer only when the outbox was
//! empty: queries queued while a write is under way go out together in the
//! next write, and no buffer or channel node is allocated per query. The
//! reader reads into one buffer as much as the kernel holds and takes every
//! complete frame from it, so that a reply costs one read (not one for the
//! length and one for the message), and replies that arrived together cost
//! one read between them.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clusterdns_wire::Header;

use super::{ids, matching};
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Notify, oneshot};

/// The reader's buffer: many replies of the usual sizes per read; it
/// grows for a larger message (at most one frame, 64 KiB and its length).
const READ_BUF: usize = 16 * 1024;

/// A writer's buffer that grew past this (a burst) is given back after
/// the write rather than kept for the connection's life.
const KEEP_OUTBOX: usize = 64 * 1024;

/// The most queries waiting on one connection (IDs are 16 bits).
const MAX_WAITING: usize = 60_000;

/// A query waiting on the connection: where its reply goes, and its
/// question (see [`matching::answers`]; empty: any reply with its ID).
struct Waiter {
    tx: oneshot::Sender<Vec<u8>>,
    question: Box<[u8]>,
}

/// What the queries, the writer and the reader share, under one lock.
#[derive(Default)]
struct State {
    waiting: HashMap<u16, Waiter>,
    /// Frames not yet handed to the writer.
    outbox: Vec<u8>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// Wakes the writer: the outbox became non-empty, or the pipe closed.
    wake: Notify,
    /// Every handle is gone: the writer shuts the connection down.
    closed: AtomicBool,
    dead: AtomicBool,
}

/// Why a pipelined exchange failed.
#[derive(Debug)]
pub(crate) enum PipeError {
    /// The connection closed or broke before the reply came.
    Closed,
    /// No reply before the deadline.
    Timeout,
}

/// One pipelined connection.
pub(crate) struct Pipe {
    shared: Arc<Shared>,
    created: Instant,
    /// Milliseconds after `created` of the last use.
    used_ms: AtomicU64,
    local: Option<std::net::SocketAddr>,
}

impl std::fmt::Debug for Pipe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipe")
            .field("dead", &self.shared.dead.load(Ordering::Relaxed))
            .field("in_flight", &self.shared.state.lock().waiting.len())
            .finish()
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.wake.notify_one();
    }
}

/// Takes every complete frame from the front of `buf`: hands each reply to
/// the query it answers; returns the bytes used, or `None` when a frame is
/// not a DNS message (the connection is no use any more).
fn dispatch(buf: &[u8], shared: &Shared) -> Option<usize> {
    let mut at = 0;
    while let Some(lenb) = buf.get(at..at + 2) {
        let end = at + 2 + usize::from(u16::from_be_bytes([lenb[0], lenb[1]]));
        let Some(msg) = buf.get(at + 2..end) else {
            break;
        };
        at = end;
        let h = Header::parse(msg).ok()?;
        if !h.qr() {
            continue;
        }
        let mut st = shared.state.lock();
        // A reply with the query's ID but another question is not its
        // reply: the query keeps waiting.
        let ours = st
            .waiting
            .get(&h.id)
            .is_some_and(|q| q.question.is_empty() || matching::answers(&q.question, msg));
        if ours && let Some(q) = st.waiting.remove(&h.id) {
            drop(st);
            let _ = q.tx.send(msg.to_vec());
        }
    }
    Some(at)
}

impl Pipe {
    /// Starts the writer and reader tasks on `stream`.
    pub(crate) fn start<S>(stream: S, local: Option<std::net::SocketAddr>) -> Arc<Pipe>
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (mut rd, mut wr) = tokio::io::split(stream);
        let shared = Arc::new(Shared::default());
        let (done_tx, mut done_rx) = oneshot::channel::<()>();
        let ws = shared.clone();
        tokio::spawn(async move {
            let mut out = Vec::new();
            loop {
                ws.wake.notified().await;
                std::mem::swap(&mut out, &mut ws.state.lock().outbox);
                if !out.is_empty() {
                    let ok = wr.write_all(&out).await.is_ok() && wr.flush().await.is_ok();
                    if !ok {
                        ws.dead.store(true, Ordering::Relaxed);
                        break;
                    }
                    out.clear();
                    if out.capacity() > KEEP_OUTBOX {
                        out = Vec::new();
                    }
                }
                if ws.closed.load(Ordering::Acquire) {
                    break;
                }
            }
            // Every handle dropped (or the write failed): let the reader go.
            let _ = wr.shutdown().await;
            let _ = done_tx.send(());
        });
        let rs = shared.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; READ_BUF];
            let mut end = 0;
            loop {
                // The frame at the front is incomplete: make room for all of it.
                if end >= 2 {
                    let need = 2 + usize::from(u16::from_be_bytes([buf[0], buf[1]]));
                    if need > buf.len() {
                        buf.resize(need, 0);
                    }
                }
                let n = tokio::select! {
                    r = rd.read(&mut buf[end..]) => match r {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    },
                    _ = &mut done_rx => break,
                };
                end += n;
                let Some(used) = dispatch(&buf[..end], &rs) else {
                    break;
                };
                buf.copy_within(used..end, 0);
                end -= used;
            }
            // Dropping the senders wakes every query still waiting. Marked
            // dead under the same lock: a query that registers afterwards
            // sees it and fails over at once instead of waiting for a reply
            // that no reader will deliver (its whole read timeout).
            let mut st = rs.state.lock();
            rs.dead.store(true, Ordering::Relaxed);
            st.waiting.clear();
        });
        Arc::new(Pipe {
            shared,
            created: Instant::now(),
            used_ms: AtomicU64::new(0),
            local,
        })
    }

    /// The local address of the connection.
    pub(crate) fn local(&self) -> Option<std::net::SocketAddr> {
        self.local
    }

    /// Whether no query waits for a reply on it.
    pub(crate) fn idle(&self) -> bool {
        self.shared.state.lock().waiting.is_empty()
    }

    /// Whether it can take another query: alive, used within `expire`,
    /// younger than `max_age` (zero: no limit).
    pub(crate) fn usable(&self, expire: Duration, max_age: Duration) -> bool {
        if self.shared.dead.load(Ordering::Relaxed) {
            return false;
        }
        let age = self.created.elapsed();
        let idle = age.saturating_sub(Duration::from_millis(self.used_ms.load(Ordering::Relaxed)));
        idle < expire && (max_age.is_zero() || age < max_age)
    }

    /// Sends `msg` (its ID replaced by one unique on this connection) and
    /// waits for the reply until `deadline`.
    pub(crate) async fn exchange(
        &self,
        msg: &[u8],
        deadline: tokio::time::Instant,
    ) -> Result<Vec<u8>, PipeError> {
        let Ok(len) = u16::try_from(msg.len()) else {
            return Err(PipeError::Closed);
        };
        let (tx, rx) = oneshot::channel();
        let (id, wake) = {
            let mut st = self.shared.state.lock();
            if st.waiting.len() >= MAX_WAITING || self.shared.dead.load(Ordering::Relaxed) {
                return Err(PipeError::Closed);
            }
            let mut id = ids::id();
            while st.waiting.contains_key(&id) {
                id = ids::id();
            }
            let question = matching::question(msg).unwrap_or_default().into();
            st.waiting.insert(id, Waiter { tx, question });
            // A non-empty outbox has a wake-up pending already.
            let wake = st.outbox.is_empty();
            let at = st.outbox.len() + 2;
            st.outbox.extend_from_slice(&len.to_be_bytes());
            st.outbox.extend_from_slice(msg);
            clusterdns_wire::set_id(&mut st.outbox[at..], id);
            (id, wake)
        };
        if wake {
            self.shared.wake.notify_one();
        }
        let used = u64::try_from(self.created.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.used_ms.store(used, Ordering::Relaxed);
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(_)) => Err(PipeError::Closed),
            Err(_) => {
                self.shared.state.lock().waiting.remove(&id);
                Err(PipeError::Timeout)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pipe on a loopback connection, and the upstream's end of it.
    async fn connected() -> (Arc<Pipe>, tokio::net::TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (Pipe::start(client, None), server)
    }

    /// A connection whose reader has ended (the upstream closed or reset
    /// it) while the writer still takes bytes: a query handed to it now
    /// fails at once rather than after its deadline.
    #[tokio::test]
    async fn a_query_on_a_connection_whose_reader_ended_fails_at_once() {
        let (pipe, mut server) = connected().await;
        // The upstream stops sending (FIN) but keeps reading.
        server.shutdown().await.unwrap();
        let t = Instant::now();
        while pipe.usable(Duration::from_secs(10), Duration::ZERO) {
            assert!(t.elapsed() < Duration::from_secs(5), "reader never ended");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let q = [0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1];
        let t = Instant::now();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        let r = pipe.exchange(&q, deadline).await;
        assert!(matches!(r, Err(PipeError::Closed)), "{r:?}");
        assert!(
            t.elapsed() < Duration::from_millis(500),
            "{:?}",
            t.elapsed()
        );
    }

    /// A query for `name` (one label) with ID 0 and type A.
    fn query(name: &str) -> Vec<u8> {
        let mut q = vec![0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        q.push(u8::try_from(name.len()).unwrap());
        q.extend_from_slice(name.as_bytes());
        q.extend_from_slice(&[0, 0, 1, 0, 1]);
        q
    }

    /// Reads `n` framed queries from `s` as the upstream; returns them.
    async fn read_queries(s: &mut tokio::net::TcpStream, n: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for _ in 0..n {
            let mut lenb = [0u8; 2];
            s.read_exact(&mut lenb).await.unwrap();
            let mut m = vec![0u8; usize::from(u16::from_be_bytes(lenb))];
            s.read_exact(&mut m).await.unwrap();
            out.push(m);
        }
        out
    }

    /// The reply to `q`, padded with `pad` bytes (an additional-section
    /// stand-in: only the header and question are matched), framed.
    fn framed_reply(q: &[u8], pad: usize) -> Vec<u8> {
        let mut r = q.to_vec();
        r[2] |= 0x80;
        r.resize(q.len() + pad, 0);
        let mut f = u16::try_from(r.len()).unwrap().to_be_bytes().to_vec();
        f.extend_from_slice(&r);
        f
    }

    /// Replies that arrive together in one segment, one split byte by
    /// byte over many reads, and one larger than the reader's buffer each
    /// reach the query they answer, whatever order they come in.
    #[tokio::test]
    async fn replies_batched_split_or_large_reach_their_queries() {
        let (pipe, mut server) = connected().await;
        server.set_nodelay(true).unwrap();
        let names = ["a", "bb", "ccc", "dddd"];
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let upstream = async {
            let qs = read_queries(&mut server, names.len()).await;
            // The last two together in one write, in reverse order.
            let mut both = framed_reply(&qs[3], 0);
            both.extend_from_slice(&framed_reply(&qs[2], 0));
            server.write_all(&both).await.unwrap();
            // The second byte by byte.
            for b in framed_reply(&qs[1], 0) {
                server.write_all(&[b]).await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            // The first larger than the reader's buffer.
            server
                .write_all(&framed_reply(&qs[0], READ_BUF + 1000))
                .await
                .unwrap();
        };
        let queries = names.map(query);
        let (_, r0, r1, r2, r3) = tokio::join!(
            upstream,
            pipe.exchange(&queries[0], deadline),
            pipe.exchange(&queries[1], deadline),
            pipe.exchange(&queries[2], deadline),
            pipe.exchange(&queries[3], deadline),
        );
        for (i, r) in [r0, r1, r2, r3].into_iter().enumerate() {
            let r = r.unwrap_or_else(|e| panic!("query {i}: {e:?}"));
            assert_eq!(&r[12..queries[i].len()], &queries[i][12..], "query {i}");
        }
        assert!(pipe.idle());
    }

    /// Queries handed over while the writer is busy leave in one write
    /// between them: the upstream gets every frame intact and in order.
    #[tokio::test]
    async fn queued_queries_reach_the_upstream_intact() {
        let (pipe, mut server) = connected().await;
        let names: Vec<String> = (0..200).map(|i| format!("q{i}")).collect();
        let queries: Vec<Vec<u8>> = names.iter().map(|n| query(n)).collect();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let upstream = async {
            let qs = read_queries(&mut server, queries.len()).await;
            let mut all = Vec::new();
            for (q, want) in qs.iter().zip(&queries) {
                assert_eq!(&q[2..], &want[2..]);
                all.extend_from_slice(&framed_reply(q, 0));
            }
            server.write_all(&all).await.unwrap();
        };
        let exchanges = futures_join_all(&pipe, &queries, deadline);
        let (_, replies) = tokio::join!(upstream, exchanges);
        assert_eq!(replies.len(), queries.len());
        assert!(replies.iter().all(Result::is_ok));
    }

    /// Every exchange of `queries` on `pipe`, started in order and polled
    /// together on this task: all of them are queued before the writer
    /// task runs.
    async fn futures_join_all(
        pipe: &Pipe,
        queries: &[Vec<u8>],
        deadline: tokio::time::Instant,
    ) -> Vec<Result<Vec<u8>, PipeError>> {
        let mut futs: Vec<_> = queries
            .iter()
            .map(|q| Box::pin(pipe.exchange(q, deadline)))
            .collect();
        let mut out: Vec<Option<Result<Vec<u8>, PipeError>>> =
            queries.iter().map(|_| None).collect();
        std::future::poll_fn(|cx| {
            let mut pending = false;
            for (f, o) in futs.iter_mut().zip(out.iter_mut()) {
                if o.is_none() {
                    match std::future::Future::poll(f.as_mut(), cx) {
                        std::task::Poll::Ready(r) => *o = Some(r),
                        std::task::Poll::Pending => pending = true,
                    }
                }
            }
            if pending {
                std::task::Poll::Pending
            } else {
                std::task::Poll::Ready(())
            }
        })
        .await;
        out.into_iter().flatten().collect()
    }
}
