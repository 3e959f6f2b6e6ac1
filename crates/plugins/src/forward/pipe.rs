//! A pipelined stream connection (TCP or TLS) to one upstream: any number
//! of queries in flight, written in turn by a writer task, their replies
//! matched by message ID and question by a reader task.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clusterdns_wire::Header;

use super::{ids, matching};
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

/// A query waiting on the connection: where its reply goes, and its
/// question (see [`matching::answers`]; empty: any reply with its ID).
struct Waiter {
    tx: oneshot::Sender<Vec<u8>>,
    question: Box<[u8]>,
}

type Waiting = Arc<Mutex<HashMap<u16, Waiter>>>;

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
    tx: mpsc::UnboundedSender<Vec<u8>>,
    waiting: Waiting,
    dead: Arc<AtomicBool>,
    created: Instant,
    /// Milliseconds after `created` of the last use.
    used_ms: AtomicU64,
    local: Option<std::net::SocketAddr>,
}

impl std::fmt::Debug for Pipe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipe")
            .field("dead", &self.dead.load(Ordering::Relaxed))
            .field("in_flight", &self.waiting.lock().len())
            .finish()
    }
}

impl Pipe {
    /// Starts the writer and reader tasks on `stream`.
    pub(crate) fn start<S>(stream: S, local: Option<std::net::SocketAddr>) -> Arc<Pipe>
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (mut rd, mut wr) = tokio::io::split(stream);
        let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
        let waiting: Waiting = Arc::default();
        let dead = Arc::new(AtomicBool::new(false));
        let (done_tx, mut done_rx) = oneshot::channel::<()>();
        let wdead = dead.clone();
        tokio::spawn(async move {
            while let Some(buf) = rx.recv().await {
                let ok = wr.write_all(&buf).await.is_ok() && wr.flush().await.is_ok();
                if !ok {
                    wdead.store(true, Ordering::Relaxed);
                    break;
                }
            }
            // Every handle dropped (or the write failed): let the reader go.
            let _ = wr.shutdown().await;
            let _ = done_tx.send(());
        });
        let rdead = dead.clone();
        let rwaiting = waiting.clone();
        tokio::spawn(async move {
            loop {
                let frame = async {
                    let mut lenb = [0u8; 2];
                    rd.read_exact(&mut lenb).await?;
                    let mut buf = vec![0u8; usize::from(u16::from_be_bytes(lenb))];
                    rd.read_exact(&mut buf).await?;
                    Ok::<Vec<u8>, io::Error>(buf)
                };
                let buf = tokio::select! {
                    r = frame => match r {
                        Ok(b) => b,
                        Err(_) => break,
                    },
                    _ = &mut done_rx => break,
                };
                let Ok(h) = Header::parse(&buf) else {
                    break;
                };
                if !h.qr() {
                    continue;
                }
                let mut w = rwaiting.lock();
                // A reply with the query's ID but another question is not
                // its reply: the query keeps waiting.
                let ours = w
                    .get(&h.id)
                    .is_some_and(|q| q.question.is_empty() || matching::answers(&q.question, &buf));
                if ours && let Some(q) = w.remove(&h.id) {
                    let _ = q.tx.send(buf);
                }
            }
            // Dropping the senders wakes every query still waiting. Marked
            // dead under the same lock: a query that registers afterwards
            // sees it and fails over at once instead of waiting for a reply
            // that no reader will deliver (its whole read timeout).
            let mut w = rwaiting.lock();
            rdead.store(true, Ordering::Relaxed);
            w.clear();
        });
        Arc::new(Pipe {
            tx,
            waiting,
            dead,
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
        self.waiting.lock().is_empty()
    }

    /// Whether it can take another query: alive, used within `expire`,
    /// younger than `max_age` (zero: no limit).
    pub(crate) fn usable(&self, expire: Duration, max_age: Duration) -> bool {
        if self.dead.load(Ordering::Relaxed) {
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
        let (tx, rx) = oneshot::channel();
        let id = {
            let mut w = self.waiting.lock();
            if w.len() >= 60_000 || self.dead.load(Ordering::Relaxed) {
                return Err(PipeError::Closed);
            }
            let mut id = ids::id();
            while w.contains_key(&id) {
                id = ids::id();
            }
            let question = matching::question(msg).unwrap_or_default().into();
            w.insert(id, Waiter { tx, question });
            id
        };
        let Ok(len) = u16::try_from(msg.len()) else {
            self.waiting.lock().remove(&id);
            return Err(PipeError::Closed);
        };
        let mut framed = Vec::with_capacity(msg.len() + 2);
        framed.extend_from_slice(&len.to_be_bytes());
        framed.extend_from_slice(msg);
        clusterdns_wire::set_id(&mut framed[2..], id);
        let used = u64::try_from(self.created.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.used_ms.store(used, Ordering::Relaxed);
        if self.tx.send(framed).is_err() {
            self.waiting.lock().remove(&id);
            self.dead.store(true, Ordering::Relaxed);
            return Err(PipeError::Closed);
        }
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(_)) => Err(PipeError::Closed),
            Err(_) => {
                self.waiting.lock().remove(&id);
                Err(PipeError::Timeout)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection whose reader has ended (the upstream closed or reset
    /// it) while the writer still takes bytes: a query handed to it now
    /// fails at once rather than after its deadline.
    #[tokio::test]
    async fn a_query_on_a_connection_whose_reader_ended_fails_at_once() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut server, _) = listener.accept().await.unwrap();
        let pipe = Pipe::start(client, None);
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
}
