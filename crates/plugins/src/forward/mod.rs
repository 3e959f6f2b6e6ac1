#![doc = include_str!("README.md")]

mod ids;
mod matching;
mod metrics;
mod no_aaaa;
mod pipe;
mod proxy;
mod setup;
mod shared;
mod tls;
mod udp;

use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use clusterdns_contract::{
    BoxFuture, Flow, Plugin, PluginDef, PluginError, Proto, Request, ResponseWriter,
};
use clusterdns_wire::{HEADER_LEN, Header, Message, Name, Rcode};
use parking_lot::Mutex;
use tokio::sync::oneshot;

use metrics::Metrics;
use proxy::{ConnectError, Proxy, Transport};

/// Queries in flight upstream, by coalescing key, with the queries waiting
/// for the same reply. The keys come from clients, so the hasher is seeded
/// per map.
type Waiting = HashMap<Vec<u8>, Vec<oneshot::Sender<Shared>>, foldhash::fast::RandomState>;

/// Registration of *forward*.
pub const DEF: PluginDef = PluginDef {
    name: "forward",
    setup: setup::setup,
};

/// Queries in flight at most per `forward` when `max_concurrent` is not
/// set: past it, queries are refused as with `max_concurrent`, which bounds
/// the memory a stalled upstream can cost (see the README's "Memory").
/// As many as one upstream's default UDP sockets carry, so that without
/// `max_concurrent` the socket count stays at its floor.
pub(crate) const MAX_INFLIGHT: usize = proxy::MAX_SOCKETS * shared::PER_SOCKET;

/// Overall deadline of one query (CoreDNS `defaultTimeout`).
const DEADLINE: Duration = Duration::from_secs(5);

/// The order in which upstreams are tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Policy {
    /// Shuffled per query (the default).
    Random,
    /// Rotating start.
    RoundRobin,
    /// Configuration order.
    Sequential,
}

/// Per-query settings of one `forward`.
#[derive(Debug, Clone)]
pub(crate) struct Opts {
    pub force_tcp: bool,
    pub prefer_udp: bool,
    pub max_fails: u32,
    pub max_concurrent: usize,
    pub max_connect_attempts: u32,
    pub next: Vec<Rcode>,
    pub next_on_nodata: bool,
    pub failover: Vec<Rcode>,
    pub failfast: bool,
    pub policy: Policy,
}

/// What a coalesced query hands to the queries waiting on it.
type Shared = Result<Arc<[u8]>, String>;

/// The *forward* handler.
pub struct Forward {
    from: Name,
    /// `no_aaaa`: the SOA of the NODATA answered for AAAA queries.
    no_aaaa: Option<no_aaaa::NoAaaa>,
    except: Vec<Name>,
    proxies: Vec<Arc<Proxy>>,
    opts: Opts,
    /// Whether the next plugin in the chain is another `forward`
    /// (the only case `next` and `next_on_nodata` hand a query on).
    next_is_forward: bool,
    inflight: AtomicUsize,
    rr: AtomicUsize,
    waiting: Mutex<Waiting>,
    metrics: Metrics,
}

impl std::fmt::Debug for Forward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forward")
            .field("from", &self.from.to_string())
            .field("proxies", &self.proxies)
            .finish_non_exhaustive()
    }
}

/// Decrements the in-flight count when a query ends, however it ends.
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Removes a coalescing entry when its leader finishes or is dropped.
struct Leader<'a> {
    f: &'a Forward,
    key: Vec<u8>,
}

impl Leader<'_> {
    /// Hands the leader's result to the queries that waited for it; the
    /// reply is copied into a shared buffer only when there are any.
    fn finish(mut self, r: &Result<Vec<u8>, io::Error>) {
        // The key leaves `self`, which tells `drop` the entry is gone
        // (a key is never empty: it holds at least the transport byte).
        let key = std::mem::take(&mut self.key);
        let waiters = self.f.waiting.lock().remove(&key).unwrap_or_default();
        if !waiters.is_empty() {
            let shared: Shared = match r {
                Ok(reply) => Ok(Arc::from(reply.as_slice())),
                Err(e) => Err(e.to_string()),
            };
            for tx in waiters {
                let _ = tx.send(shared.clone());
            }
        }
    }
}

/// Most upstreams one `forward` may have (CoreDNS allows 15).
const MAX_UPSTREAMS: usize = 16;

/// The order in which one query tries the upstreams, without allocating.
struct Order {
    idx: [u8; MAX_UPSTREAMS],
    n: usize,
}

impl Order {
    fn len(&self) -> usize {
        self.n
    }
}

impl std::ops::Index<usize> for Order {
    type Output = u8;
    fn index(&self, i: usize) -> &u8 {
        &self.idx[i]
    }
}

impl Drop for Leader<'_> {
    fn drop(&mut self) {
        // Dropped without finishing: the waiters see a closed channel.
        if !self.key.is_empty() {
            self.f.waiting.lock().remove(&self.key);
        }
    }
}

impl Forward {
    /// Whether the query is for this forward: under FROM and not under
    /// an `except` name (FROM itself is never excepted).
    fn matches(&self, qname: &Name) -> bool {
        if !qname.ends_with(&self.from) {
            return false;
        }
        if qname.eq_ignore_case(&self.from) {
            return true;
        }
        !self.except.iter().any(|e| qname.ends_with(e))
    }

    /// The upstreams in the order this query tries them (setup allows at
    /// most 15).
    fn list(&self) -> Order {
        let n = self.proxies.len().min(MAX_UPSTREAMS);
        let mut o = Order {
            idx: std::array::from_fn(|i| i as u8),
            n,
        };
        let v = &mut o.idx[..n];
        match self.opts.policy {
            Policy::Random if n > 1 => fastrand::shuffle(v),
            Policy::RoundRobin if n > 1 => {
                let start = self.rr.fetch_add(1, Ordering::Relaxed) % n;
                v.rotate_left(start);
            }
            _ => {}
        }
        o
    }

    fn transport(&self, client: Proto) -> Transport {
        if self.opts.force_tcp {
            Transport::Tcp
        } else if self.opts.prefer_udp {
            Transport::Udp
        } else {
            match client {
                Proto::Udp => Transport::Udp,
                Proto::Tcp => Transport::Tcp,
            }
        }
    }

    /// The upstream exchange with retries, failover and health checks
    /// (CoreDNS `Forward.ServeDNS`'s loop).
    /// `cancel` is the query's deadline (*cancel*): like CoreDNS's
    /// context, it ends the attempts but not the exchange under way.
    async fn resolve(
        &self,
        query: &[u8],
        client: Proto,
        cancel: Option<Instant>,
    ) -> Result<Vec<u8>, io::Error> {
        // The clock is read once per attempt: `now` serves the deadline
        // check, the connection pool and the exchange's timers.
        let mut now = Instant::now();
        let deadline = now + DEADLINE;
        let until = tokio::time::Instant::from_std(deadline);
        let mut first = true;
        let list = self.list();
        let n = list.len();
        let mut i = 0;
        let mut fails = 0;
        let mut attempts = 0u32;
        let mut failovers = 0;
        let mut last_err: Option<io::Error> = None;
        let mut last_reply: Option<Vec<u8>> = None;
        loop {
            if !std::mem::take(&mut first) {
                now = Instant::now();
            }
            if now >= deadline
                || cancel.is_some_and(|c| now >= c)
                || (self.opts.max_connect_attempts != 0
                    && attempts >= self.opts.max_connect_attempts)
            {
                break;
            }
            if i >= n {
                i = 0;
                fails = 0;
            }
            let mut proxy = &self.proxies[usize::from(list[i])];
            i += 1;
            if proxy.down(self.opts.max_fails) {
                fails += 1;
                if fails < n {
                    continue;
                }
                self.metrics.broken.inc();
                if self.opts.failfast {
                    break;
                }
                proxy = &self.proxies[fastrand::usize(..n)];
            }
            let mut t = proxy.transport(self.transport(client));
            let res = loop {
                match proxy.connect(query, t, now, until).await {
                    Err(ConnectError::CachedClosed) => {
                        now = Instant::now();
                        continue;
                    }
                    Err(ConnectError::Io(e)) => break Err(e),
                    Ok(reply) => {
                        let tc = Header::parse(&reply).is_ok_and(|h| h.tc());
                        if tc && t == Transport::Udp && self.opts.prefer_udp {
                            t = Transport::Tcp;
                            now = Instant::now();
                            continue;
                        }
                        break Ok(reply);
                    }
                }
            };
            match res {
                Err(e) => {
                    if self.opts.max_fails != 0 {
                        proxy.healthcheck();
                    }
                    last_err = Some(e);
                    // Only failed connections count as attempts.
                    attempts += 1;
                    // With every upstream down (the random pick above has
                    // just failed too) CoreDNS gives up after this one
                    // attempt rather than cycling through the list again.
                    if fails < n {
                        continue;
                    }
                    break;
                }
                Ok(reply) => {
                    let rcode = Header::parse(&reply)
                        .map_or(Rcode::SERVFAIL, |h| Rcode(u16::from(h.rcode_low())));
                    if self.opts.failover.contains(&rcode) && failovers + 1 < n {
                        failovers += 1;
                        last_reply = Some(reply);
                        continue;
                    }
                    return Ok(reply);
                }
            }
        }
        if let Some(r) = last_reply {
            return Ok(r);
        }
        Err(last_err.unwrap_or_else(|| io::Error::other("no healthy upstream")))
    }

    /// The coalescing key: everything of the query but its ID, the name
    /// lowercased, plus the client's transport.
    fn coalesce_key(req: &Request<'_>) -> Vec<u8> {
        let raw = req.query.raw();
        let qr = req.query.question_range();
        let mut k = Vec::with_capacity(raw.len() + 1);
        k.push(u8::from(req.proto == Proto::Tcp));
        k.extend_from_slice(raw.get(2..HEADER_LEN).unwrap_or(&[]));
        k.extend_from_slice(req.qname_lower().as_wire());
        let after_name = qr.start + req.qname().len();
        k.extend_from_slice(raw.get(after_name..).unwrap_or(&[]));
        k
    }

    /// The most queries in flight: `max_concurrent`, or [`MAX_INFLIGHT`].
    fn limit(&self) -> usize {
        if self.opts.max_concurrent > 0 {
            self.opts.max_concurrent
        } else {
            MAX_INFLIGHT
        }
    }

    /// REFUSED, counted, for a query past the limit.
    fn refuse(&self) -> Flow {
        self.metrics.rejects.inc();
        Flow::Fail(PluginError::Refused { plugin: "forward" })
    }

    async fn serve(&self, req: &Request<'_>, w: &mut ResponseWriter) -> Flow {
        self.inflight.fetch_add(1, Ordering::Relaxed);
        let _guard = InFlight(&self.inflight);
        if self.inflight.load(Ordering::Relaxed) > self.limit() {
            return self.refuse();
        }
        // The query as the plugins before changed it (bufsize's payload
        // size): CoreDNS forwards the edited message.
        let mut edited = Vec::new();
        let packet = if req.edits.is_empty() {
            req.query.raw()
        } else {
            req.edits.apply(req.query, &mut edited)
        };
        // HINFO is the loop plugin's probe: coalescing it with itself
        // would hide a forwarding loop, so it always goes upstream.
        if req.qtype() == clusterdns_wire::Rtype::HINFO {
            return match self.resolve(packet, req.proto, req.deadline()).await {
                Ok(reply) => self.write_reply(req, w, &reply),
                Err(source) => Flow::Fail(PluginError::Upstream {
                    plugin: "forward",
                    source,
                }),
            };
        }
        let key = Self::coalesce_key(req);
        let rx = {
            let mut waiting = self.waiting.lock();
            match waiting.get_mut(&key) {
                Some(list) => {
                    let (tx, rx) = oneshot::channel();
                    list.push(tx);
                    Some(rx)
                }
                None => {
                    waiting.insert(key.clone(), Vec::new());
                    None
                }
            }
        };
        let Some(rx) = rx else {
            let leader = Leader { f: self, key };
            let r = self.resolve(packet, req.proto, req.deadline()).await;
            leader.finish(&r);
            return match r {
                Ok(reply) => self.write_reply(req, w, &reply),
                Err(source) => Flow::Fail(PluginError::Upstream {
                    plugin: "forward",
                    source,
                }),
            };
        };
        match rx.await {
            Ok(Ok(reply)) => self.write_reply(req, w, &reply),
            Ok(Err(msg)) => Flow::Fail(PluginError::Upstream {
                plugin: "forward",
                source: io::Error::other(msg),
            }),
            Err(_) => Flow::Fail(PluginError::Upstream {
                plugin: "forward",
                source: io::Error::other("coalesced query abandoned"),
            }),
        }
    }

    /// Checks the reply against the query and writes it with the
    /// client's ID and question.
    fn write_reply(&self, req: &Request<'_>, w: &mut ResponseWriter, reply: &[u8]) -> Flow {
        let Ok(msg) = Message::parse(reply) else {
            return formerr(req, w);
        };
        let h = msg.header();
        let matches = h.qdcount == 1
            && h.qr()
            && msg.question().is_some_and(|(name, qtype, _)| {
                name.eq_ignore_case(req.qname()) && qtype == req.qtype()
            });
        if !matches {
            return formerr(req, w);
        }
        let rcode = Rcode(u16::from(h.rcode_low()));
        if self.next_is_forward
            && (self.opts.next.contains(&rcode)
                || (self.opts.next_on_nodata && rcode == Rcode::NOERROR && h.ancount == 0))
        {
            return Flow::Next;
        }
        w.set_parsed(&msg);
        let buf = w.fields_mut();
        clusterdns_wire::set_id(buf, req.query.id());
        let q = req.query.question_bytes();
        let qr = msg.question_range();
        if qr.len() == q.len()
            && let Some(dst) = buf.get_mut(qr)
        {
            dst.copy_from_slice(q);
        }
        Flow::Answered
    }
}

impl Plugin for Forward {
    fn name(&self) -> &'static str {
        "forward"
    }

    fn query(&self, req: &Request<'_>, w: &mut ResponseWriter) -> Flow {
        if !self.matches(req.qname_lower()) {
            return Flow::Next;
        }
        if let Some(nodata) = &self.no_aaaa
            && req.qtype() == clusterdns_wire::Rtype::AAAA
        {
            nodata.write(req, w);
            Flow::Answered
        } else if self.inflight.load(Ordering::Relaxed) >= self.limit() {
            // Refused here, on the receiving thread, rather than after the
            // query was parked for the asynchronous pass: under a flood
            // past the limit the refusals go out in the worker's send
            // batch and cost it little, so it keeps up with its socket
            // while the forwards in flight run out. `serve` checks again
            // for the queries that pass here together.
            self.refuse()
        } else {
            Flow::Async
        }
    }

    fn query_async<'a>(
        &'a self,
        req: &'a Request<'a>,
        w: &'a mut ResponseWriter,
    ) -> BoxFuture<'a, Flow> {
        Box::pin(self.serve(req, w))
    }

    fn explain(&self, req: &Request<'_>) -> Vec<String> {
        if !self.matches(req.qname_lower()) {
            return vec![format!(
                "{} is not under {} (or is an `except` name): passed on",
                req.qname_lower(),
                self.from
            )];
        }
        if self.no_aaaa.is_some() && req.qtype() == clusterdns_wire::Rtype::AAAA {
            return vec!["no_aaaa: AAAA is NODATA at once, no upstream is asked".into()];
        }
        let to: Vec<&str> = self.proxies.iter().map(|p| p.label.as_str()).collect();
        let policy = match self.opts.policy {
            Policy::Random => "random",
            Policy::RoundRobin => "round_robin",
            Policy::Sequential => "sequential",
        };
        vec![format!(
            "{} is under {}: sent upstream to one of {} (policy {policy})",
            req.qname_lower(),
            self.from,
            to.join(", ")
        )]
    }
}

/// The FORMERR forward writes itself (through the writer, unlike an error
/// rcode the server writes) for an upstream reply that does not match.
fn formerr(req: &Request<'_>, w: &mut ResponseWriter) -> Flow {
    let mut b = w.reply(req);
    b.set_rcode(Rcode::FORMERR);
    b.finish();
    Flow::Answered
}
