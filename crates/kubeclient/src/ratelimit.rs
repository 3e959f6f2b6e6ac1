//! Client-side limits on requests to the API server, as client-go applies them for CoreDNS's
//! `apiserver_qps`, `apiserver_burst` and `apiserver_max_inflight`.
//!
//! - **Rate** (client-go `rest.Config.QPS`/`Burst` → `flowcontrol.NewTokenBucketRateLimiter`):
//!   a token bucket holding at most `burst` tokens, full at the start, refilled at `qps`
//!   tokens per second. Every request except a watch takes one token, waiting for it if the
//!   bucket is empty; waiters are served in the order they arrived (a reservation, like
//!   `golang.org/x/time/rate`). Watch requests (`?watch=true`, which includes streaming
//!   lists with `sendInitialEvents`) are not throttled: client-go's `Request.Watch` skips the
//!   rate limiter ("We specifically don't want to rate limit watches").
//! - **In flight** (CoreDNS's `newMaxInflightRoundTripper`): at most `max_inflight` requests
//!   between sending and receiving the response head, watches included; a watch frees its
//!   slot once its stream has started.
//!
//! Both are a tower layer under kube-rs's client ([`LimitLayer`]), so they apply to every
//! request of the client: lists, watches, relists and their retries.
//!
//! The same layer reports each request to a [`RequestObserver`] (CoreDNS's
//! `coredns_kubernetes_rest_client_*` metrics), with the semantics of client-go's
//! `tools/metrics` hooks in `rest/request.go`:
//!
//! - **rate limiter wait** (`RateLimiterLatency`): every non-watch request, once it may go,
//!   with the time it waited for a token (zero when one was free); watches never wait.
//! - **result** (`RequestResult`, from `withRetry.After`): every request, watches included,
//!   once its response head arrived (the status code) or it failed without one (`None`,
//!   client-go's `"<error>"`).
//! - **latency** (`RequestLatency`, deferred in `Request.request`): every non-watch request,
//!   from before the rate-limit wait until its response body has been read to the end (or
//!   dropped), or until it failed; `Request.Watch` never observes it.
//!
//! The verb is the HTTP method (`GET`); the host is the API server URL's `host[:port]`.

use std::future::Future;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use clusterdns_gocompat::strconv;
use http_body::{Body, Frame, SizeHint};
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// client-go's `rest.DefaultQPS`, used when `apiserver_qps` is absent or 0.
pub const DEFAULT_QPS: f32 = 5.0;
/// client-go's `rest.DefaultBurst`, used when `apiserver_burst` is absent or 0.
pub const DEFAULT_BURST: u32 = 10;

/// A token-bucket rate: `qps` tokens per second, at most `burst` stored.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimit {
    /// Tokens added per second (> 0, finite).
    pub qps: f64,
    /// Bucket size, and the number of requests that pass at once after a quiet period
    /// (at least 1 is used).
    pub burst: u32,
}

/// The limits of one API client.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ClientLimits {
    /// Rate limit on non-watch requests; `None` for none.
    pub rate: Option<RateLimit>,
    /// Most requests waiting for their response head at once; `None` for no limit.
    pub max_inflight: Option<NonZeroUsize>,
}

impl ClientLimits {
    /// No limits at all.
    pub const NONE: ClientLimits = ClientLimits {
        rate: None,
        max_inflight: None,
    };

    /// The limits CoreDNS's client ends up with for `apiserver_qps QPS`,
    /// `apiserver_burst BURST` and `apiserver_max_inflight MAX` (0 when the option is absent).
    ///
    /// As client-go's `RESTClientFor`: QPS 0 means 5 and burst 0 means 10, so a client is
    /// rate limited even without the options; a QPS that is not a positive number (NaN)
    /// or is infinite means no rate limit. `max_inflight` 0 means no limit.
    pub fn coredns(qps: f32, burst: u64, max_inflight: u64) -> ClientLimits {
        let qps = if qps == 0.0 { DEFAULT_QPS } else { qps };
        let burst = if burst == 0 {
            DEFAULT_BURST
        } else {
            u32::try_from(burst).unwrap_or(u32::MAX)
        };
        let rate = (qps > 0.0 && qps.is_finite()).then_some(RateLimit {
            qps: f64::from(qps),
            burst,
        });
        let max_inflight = usize::try_from(max_inflight)
            .unwrap_or(usize::MAX)
            .min(Semaphore::MAX_PERMITS);
        ClientLimits {
            rate,
            max_inflight: NonZeroUsize::new(max_inflight),
        }
    }

    /// Whether requests pass untouched.
    pub fn is_none(&self) -> bool {
        self.rate.is_none() && self.max_inflight.is_none()
    }
}

/// A token bucket with reservations: each [`TokenBucket::reserve`] takes a token now and
/// says how long to wait before using it.
#[derive(Debug)]
pub(crate) struct TokenBucket {
    qps: f64,
    burst: f64,
    state: Mutex<BucketState>,
}

#[derive(Debug)]
struct BucketState {
    /// Tokens at `last`; negative when that many are promised to waiters.
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub(crate) fn new(rate: RateLimit) -> TokenBucket {
        let burst = f64::from(rate.burst.max(1));
        TokenBucket {
            qps: rate.qps,
            burst,
            state: Mutex::new(BucketState {
                tokens: burst,
                last: Instant::now(),
            }),
        }
    }

    /// Takes one token; returns how long to wait before the request may go.
    pub(crate) fn reserve(&self) -> Duration {
        let now = Instant::now();
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let elapsed = now.saturating_duration_since(s.last).as_secs_f64();
        if now > s.last {
            s.last = now;
        }
        s.tokens = (s.tokens + elapsed * self.qps).min(self.burst) - 1.0;
        if s.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::try_from_secs_f64(-s.tokens / self.qps).unwrap_or(Duration::MAX)
        }
    }
}

/// Whether a request is a watch (`watch=true`, or any spelling Go's `strconv.ParseBool`
/// reads as true), which the rate limit lets through.
fn is_watch(uri: &http::Uri) -> bool {
    uri.query().is_some_and(|q| {
        q.split('&').any(|pair| {
            matches!(pair.split_once('='), Some(("watch", v)) if strconv::parse_bool(v) == Ok(true))
        })
    })
}

/// Receives what a client's requests did, for metrics: client-go's `tools/metrics` hooks
/// (see the module documentation for when each is called). `verb` is the HTTP method,
/// `host` the API server's `host[:port]`. Called from the client's tasks, a few times per
/// request; implementations should be quick and must not block.
pub trait RequestObserver: Send + Sync + 'static {
    /// A non-watch request waited `wait` for the rate limiter before going out.
    fn rate_limited(&self, verb: &str, host: &str, wait: Duration);
    /// A request got a response head with status `code`, or failed without one (`None`).
    fn result(&self, verb: &str, host: &str, code: Option<u16>);
    /// A non-watch request took `took`, from before its rate-limit wait until its response
    /// body was read (or dropped) or it failed.
    fn latency(&self, verb: &str, host: &str, took: Duration);
}

/// What client-go's metrics call the host: the API server URL's `host[:port]` as written
/// (Go's `URL.Host`, without user info); `none` for a URL without one (as client-go).
pub(crate) fn url_host(url: &http::Uri) -> &str {
    url.authority()
        .and_then(|a| a.as_str().rsplit('@').next())
        .unwrap_or("none")
}

/// An observer and the host it is told about.
#[derive(Clone)]
pub(crate) struct Observer {
    sink: Arc<dyn RequestObserver>,
    host: Arc<str>,
}

impl Observer {
    /// Reports to `sink` for requests to `host`.
    pub(crate) fn new(sink: Arc<dyn RequestObserver>, host: &str) -> Observer {
        Observer {
            sink,
            host: Arc::from(host),
        }
    }
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer")
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

/// The tower layer applying [`ClientLimits`] to a client's requests, and reporting them to
/// an [`Observer`]. Clones share the bucket and the in-flight slots.
#[derive(Clone, Debug, Default)]
pub(crate) struct LimitLayer {
    bucket: Option<Arc<TokenBucket>>,
    inflight: Option<Arc<Semaphore>>,
    observer: Option<Observer>,
}

impl LimitLayer {
    /// A layer with a fresh (full) bucket and free slots.
    pub(crate) fn new(limits: &ClientLimits) -> LimitLayer {
        LimitLayer {
            bucket: limits.rate.map(|r| Arc::new(TokenBucket::new(r))),
            inflight: limits
                .max_inflight
                .map(|n| Arc::new(Semaphore::new(n.get()))),
            observer: None,
        }
    }

    /// The same layer, reporting every request to `observer`.
    pub(crate) fn observed(mut self, observer: Observer) -> LimitLayer {
        self.observer = Some(observer);
        self
    }
}

impl<S> tower::Layer<S> for LimitLayer {
    type Service = Limited<S>;

    fn layer(&self, inner: S) -> Limited<S> {
        Limited {
            inner,
            limits: self.clone(),
        }
    }
}

/// The service of [`LimitLayer`].
#[derive(Debug)]
pub(crate) struct Limited<S> {
    inner: S,
    limits: LimitLayer,
}

impl<S, ReqB, B> tower::Service<http::Request<ReqB>> for Limited<S>
where
    S: tower::Service<http::Request<ReqB>, Response = http::Response<B>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<ObservedBody<B>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<ReqB>) -> Self::Future {
        let start = Instant::now();
        let watch = is_watch(req.uri());
        let delay = match &self.limits.bucket {
            Some(bucket) if !watch => bucket.reserve(),
            _ => Duration::ZERO,
        };
        if delay >= Duration::from_secs(1) {
            tracing::debug!(?delay, uri = %req.uri(), "client-side throttling (apiserver_qps)");
        }
        let slots = self.limits.inflight.clone();
        let observer = self.limits.observer.clone();
        let verb = req.method().clone();
        // kube-rs's stack (hyper's client, retry, auth) does nothing until its future is
        // polled, so taking the future now and polling it after the wait sends the request
        // after the wait. The inner service is not `Clone` (a boxed service), so the call
        // cannot itself be deferred.
        let fut = self.inner.call(req);
        Box::pin(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if let (Some(o), false) = (&observer, watch) {
                o.sink.rate_limited(verb.as_str(), &o.host, start.elapsed());
            }
            // The semaphore is never closed: `Err` cannot happen; go without a slot if it did.
            let _slot = match slots {
                Some(s) => s.acquire_owned().await.ok(),
                None => None,
            };
            let result = fut.await;
            let Some(o) = observer else {
                return result.map(|resp| resp.map(ObservedBody::plain));
            };
            let code = result.as_ref().ok().map(|resp| resp.status().as_u16());
            o.sink.result(verb.as_str(), &o.host, code);
            match result {
                Ok(resp) if !watch => {
                    let done = Done {
                        observer: o,
                        verb,
                        start,
                    };
                    Ok(resp.map(|body| ObservedBody {
                        inner: body,
                        done: Some(done),
                    }))
                }
                Ok(resp) => Ok(resp.map(ObservedBody::plain)),
                Err(e) => {
                    if !watch {
                        o.sink.latency(verb.as_str(), &o.host, start.elapsed());
                    }
                    Err(e)
                }
            }
        })
    }
}

/// The latency observation a response body owes when it ends.
struct Done {
    observer: Observer,
    verb: http::Method,
    start: Instant,
}

impl Done {
    fn report(self) {
        let o = &self.observer;
        o.sink
            .latency(self.verb.as_str(), &o.host, self.start.elapsed());
    }
}

/// A response body that reports the request's latency when it has been read to the end, has
/// failed, or is dropped, whichever comes first (client-go's request latency includes
/// reading the body).
pub(crate) struct ObservedBody<B> {
    inner: B,
    done: Option<Done>,
}

impl<B> ObservedBody<B> {
    /// A body that reports nothing.
    fn plain(inner: B) -> ObservedBody<B> {
        ObservedBody { inner, done: None }
    }

    fn report(&mut self) {
        if let Some(d) = self.done.take() {
            d.report();
        }
    }
}

impl<B> Drop for ObservedBody<B> {
    fn drop(&mut self) {
        self.report();
    }
}

impl<B: Body + Unpin> Body for ObservedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let frame = std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx));
        if matches!(frame, None | Some(Err(_))) {
            this.report();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tower::{Layer as _, Service as _};

    fn rate(qps: f64, burst: u32) -> ClientLimits {
        ClientLimits {
            rate: Some(RateLimit { qps, burst }),
            max_inflight: None,
        }
    }

    #[test]
    fn coredns_defaults_are_client_go_defaults() {
        let l = ClientLimits::coredns(0.0, 0, 0);
        assert_eq!(
            l.rate,
            Some(RateLimit {
                qps: 5.0,
                burst: 10
            })
        );
        assert_eq!(l.max_inflight, None);
        let l = ClientLimits::coredns(0.5, 3, 4);
        assert_eq!(l.rate, Some(RateLimit { qps: 0.5, burst: 3 }));
        assert_eq!(l.max_inflight, NonZeroUsize::new(4));
        assert_eq!(ClientLimits::coredns(f32::INFINITY, 0, 0).rate, None);
        assert_eq!(ClientLimits::coredns(f32::NAN, 0, 0).rate, None);
        assert!(ClientLimits::coredns(f32::INFINITY, 7, 0).is_none());
        assert_eq!(
            ClientLimits::coredns(1.0, u64::MAX, u64::MAX).max_inflight,
            NonZeroUsize::new(Semaphore::MAX_PERMITS)
        );
    }

    #[test]
    fn watch_detection() {
        let w = |s: &str| is_watch(&s.parse::<http::Uri>().unwrap());
        assert!(w("/api/v1/services?watch=true&resourceVersion=1"));
        assert!(w(
            "/api/v1/services?allowWatchBookmarks=true&sendInitialEvents=true&watch=1"
        ));
        assert!(!w("/api/v1/services?limit=500"));
        assert!(!w("/api/v1/services?watch=false"));
        assert!(!w("/api/v1/services?xwatch=true"));
        assert!(!w("/api/v1/services"));
    }

    #[tokio::test(start_paused = true)]
    async fn bucket_burst_then_one_per_interval() {
        let b = TokenBucket::new(RateLimit { qps: 2.0, burst: 3 });
        // A full bucket: three at once.
        for _ in 0..3 {
            assert_eq!(b.reserve(), Duration::ZERO);
        }
        // Then one every 1/qps, queued behind each other.
        assert_eq!(b.reserve(), Duration::from_millis(500));
        assert_eq!(b.reserve(), Duration::from_millis(1000));
        // After the promised tokens are paid and a quiet period, it refills up to burst only.
        tokio::time::advance(Duration::from_secs(60)).await;
        for _ in 0..3 {
            assert_eq!(b.reserve(), Duration::ZERO);
        }
        assert_eq!(b.reserve(), Duration::from_millis(500));
    }

    #[tokio::test(start_paused = true)]
    async fn bucket_refills_at_qps() {
        let b = TokenBucket::new(RateLimit {
            qps: 10.0,
            burst: 1,
        });
        assert_eq!(b.reserve(), Duration::ZERO);
        assert_eq!(b.reserve(), Duration::from_millis(100));
        tokio::time::advance(Duration::from_millis(150)).await;
        // 150 ms paid the 100 ms debt and earned half a token.
        assert_eq!(b.reserve(), Duration::from_millis(50));
    }

    #[tokio::test(start_paused = true)]
    async fn burst_zero_means_one() {
        let b = TokenBucket::new(RateLimit { qps: 1.0, burst: 0 });
        assert_eq!(b.reserve(), Duration::ZERO);
        assert_eq!(b.reserve(), Duration::from_secs(1));
    }

    /// An inner service recording when each request reaches it, and holding each response
    /// for `hold` (the time to the response head).
    #[derive(Clone)]
    struct Recorder {
        start: Instant,
        seen: Arc<Mutex<Vec<(String, Duration)>>>,
        active: Arc<AtomicUsize>,
        peak: Arc<AtomicUsize>,
        hold: Duration,
    }

    impl Recorder {
        fn new(hold: Duration) -> Recorder {
            Recorder {
                start: Instant::now(),
                seen: Arc::default(),
                active: Arc::default(),
                peak: Arc::default(),
                hold,
            }
        }
        fn seen(&self) -> Vec<(String, Duration)> {
            self.seen.lock().unwrap().clone()
        }
    }

    impl tower::Service<http::Request<()>> for Recorder {
        type Response = http::Response<String>;
        type Error = std::convert::Infallible;
        type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, req: http::Request<()>) -> Self::Future {
            let this = self.clone();
            // Lazy, like hyper's client: nothing happens before the first poll.
            Box::pin(async move {
                this.seen
                    .lock()
                    .unwrap()
                    .push((req.uri().to_string(), this.start.elapsed()));
                let n = this.active.fetch_add(1, Ordering::SeqCst) + 1;
                this.peak.fetch_max(n, Ordering::SeqCst);
                tokio::time::sleep(this.hold).await;
                this.active.fetch_sub(1, Ordering::SeqCst);
                Ok(http::Response::new(String::new()))
            })
        }
    }

    fn get(uri: &str) -> http::Request<()> {
        http::Request::get(uri).body(()).unwrap()
    }

    /// Sends every request through `svc` at once and waits for all responses.
    async fn send_all(svc: &mut Limited<Recorder>, uris: &[&str]) {
        let futs: Vec<_> = uris.iter().map(|u| svc.call(get(u))).collect();
        futures::future::join_all(futs).await;
    }

    #[tokio::test(start_paused = true)]
    async fn service_spaces_lists_and_lets_watches_through() {
        let rec = Recorder::new(Duration::ZERO);
        let mut svc = LimitLayer::new(&rate(1.0, 2)).layer(rec.clone());
        send_all(
            &mut svc,
            &[
                "/api/v1/services?limit=500",
                "/api/v1/services?watch=true",
                "/api/v1/namespaces?limit=500",
                "/api/v1/pods?limit=500",
                "/api/v1/namespaces?watch=true",
                "/apis/discovery.k8s.io/v1/endpointslices?limit=500",
            ],
        )
        .await;
        let at = |u: &str| {
            rec.seen()
                .into_iter()
                .find(|(s, _)| s == u)
                .map(|(_, t)| t)
                .unwrap()
        };
        let s = Duration::from_secs;
        // Two lists from the full bucket, then one per second.
        assert_eq!(at("/api/v1/services?limit=500"), s(0));
        assert_eq!(at("/api/v1/namespaces?limit=500"), s(0));
        assert_eq!(at("/api/v1/pods?limit=500"), s(1));
        assert_eq!(
            at("/apis/discovery.k8s.io/v1/endpointslices?limit=500"),
            s(2)
        );
        // Watches neither wait nor take a token.
        assert_eq!(at("/api/v1/services?watch=true"), s(0));
        assert_eq!(at("/api/v1/namespaces?watch=true"), s(0));
    }

    #[tokio::test(start_paused = true)]
    async fn service_without_limits_passes_everything_at_once() {
        let rec = Recorder::new(Duration::from_millis(10));
        let mut svc = LimitLayer::new(&ClientLimits::NONE).layer(rec.clone());
        send_all(&mut svc, &["/a?limit=1"; 20]).await;
        assert_eq!(rec.seen().len(), 20);
        assert!(rec.seen().iter().all(|(_, t)| t.is_zero()));
        assert_eq!(rec.peak.load(Ordering::SeqCst), 20);
    }

    #[tokio::test(start_paused = true)]
    async fn max_inflight_holds_requests_until_a_response_head() {
        let rec = Recorder::new(Duration::from_millis(100));
        let limits = ClientLimits {
            rate: None,
            max_inflight: NonZeroUsize::new(2),
        };
        let mut svc = LimitLayer::new(&limits).layer(rec.clone());
        send_all(
            &mut svc,
            &[
                "/a?watch=true",
                "/b?limit=1",
                "/c?limit=1",
                "/d?limit=1",
                "/e",
            ],
        )
        .await;
        assert_eq!(rec.peak.load(Ordering::SeqCst), 2);
        let mut times: Vec<u128> = rec.seen().iter().map(|(_, t)| t.as_millis()).collect();
        times.sort_unstable();
        assert_eq!(times, [0, 0, 100, 100, 200]);
    }

    /// Records every observation as a line: `rate GET host 1000ms`, `result GET host 200`,
    /// `latency GET host 60ms`.
    #[derive(Default)]
    struct Log(Mutex<Vec<String>>);

    impl Log {
        fn take(&self) -> Vec<String> {
            let mut v = std::mem::take(&mut *self.0.lock().unwrap());
            v.sort();
            v
        }
    }

    impl RequestObserver for Log {
        fn rate_limited(&self, verb: &str, host: &str, wait: Duration) {
            let line = format!("rate {verb} {host} {}ms", wait.as_millis());
            self.0.lock().unwrap().push(line);
        }
        fn result(&self, verb: &str, host: &str, code: Option<u16>) {
            let code = code.map_or("<error>".to_string(), |c| c.to_string());
            self.0
                .lock()
                .unwrap()
                .push(format!("result {verb} {host} {code}"));
        }
        fn latency(&self, verb: &str, host: &str, took: Duration) {
            let line = format!("latency {verb} {host} {}ms", took.as_millis());
            self.0.lock().unwrap().push(line);
        }
    }

    /// A body that ends `after` its first poll.
    struct SlowBody {
        after: Duration,
        timer: Option<Pin<Box<tokio::time::Sleep>>>,
    }

    impl Body for SlowBody {
        type Data = <String as Body>::Data;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
            let after = self.after;
            let timer = self
                .timer
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(after)));
            timer.as_mut().poll(cx).map(|()| None)
        }
    }

    /// The API server, scripted by path: `/refused` fails without a response, `/denied`
    /// answers 401, anything else 200; every answer's head comes after `head` and its body
    /// ends `body` later.
    #[derive(Clone, Copy)]
    struct Scripted {
        head: Duration,
        body: Duration,
    }

    impl tower::Service<http::Request<()>> for Scripted {
        type Response = http::Response<SlowBody>;
        type Error = &'static str;
        type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, req: http::Request<()>) -> Self::Future {
            let this = *self;
            Box::pin(async move {
                tokio::time::sleep(this.head).await;
                let status = match req.uri().path() {
                    "/refused" => return Err("connection refused"),
                    "/denied" => 401,
                    _ => 200,
                };
                let body = SlowBody {
                    after: this.body,
                    timer: None,
                };
                Ok(http::Response::builder().status(status).body(body).unwrap())
            })
        }
    }

    const HOST: &str = "127.0.0.1:16443";

    fn observed(limits: &ClientLimits, log: &Arc<Log>, server: Scripted) -> Limited<Scripted> {
        LimitLayer::new(limits)
            .observed(Observer::new(log.clone(), HOST))
            .layer(server)
    }

    /// Sends a request and reads its response body to the end.
    async fn send_and_read<F, B>(fut: F)
    where
        F: Future<Output = Result<http::Response<ObservedBody<B>>, &'static str>>,
        B: Body + Unpin,
    {
        if let Ok(resp) = fut.await {
            let mut body = resp.into_body();
            while std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx))
                .await
                .is_some()
            {}
        }
    }

    #[tokio::test(start_paused = true)]
    async fn observes_like_client_go_metrics() {
        let log = Arc::new(Log::default());
        let server = Scripted {
            head: Duration::from_millis(10),
            body: Duration::from_millis(50),
        };
        let mut svc = observed(&rate(1.0, 1), &log, server);
        let list1 = svc.call(get("/api/v1/services?limit=500"));
        let watch = svc.call(get("/api/v1/services?watch=true"));
        let list2 = svc.call(get("/api/v1/namespaces?limit=500"));
        futures::future::join3(
            send_and_read(list1),
            send_and_read(watch),
            send_and_read(list2),
        )
        .await;
        let h = HOST;
        assert_eq!(
            log.take(),
            [
                // Latency: the rate-limit wait + 10 ms to the head + 50 ms reading the body;
                // none for the watch.
                format!("latency GET {h} 1060ms"),
                format!("latency GET {h} 60ms"),
                // Rate limiter: every non-watch request, also when it did not wait.
                format!("rate GET {h} 0ms"),
                format!("rate GET {h} 1000ms"),
                // Results: every request, the watch too.
                format!("result GET {h} 200"),
                format!("result GET {h} 200"),
                format!("result GET {h} 200"),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn observes_errors_and_dropped_bodies() {
        let log = Arc::new(Log::default());
        let server = Scripted {
            head: Duration::from_millis(20),
            body: Duration::from_secs(3600),
        };
        // Without a rate limit the wait is observed as zero.
        let mut svc = observed(&ClientLimits::NONE, &log, server);
        let h = HOST;
        // A transport error: `<error>`, and the latency until it.
        assert!(svc.call(get("/refused?limit=1")).await.is_err());
        assert_eq!(
            log.take(),
            [
                format!("latency GET {h} 20ms"),
                format!("rate GET {h} 0ms"),
                format!("result GET {h} <error>"),
            ]
        );
        // A watch that fails: only the result.
        assert!(svc.call(get("/refused?watch=true")).await.is_err());
        assert_eq!(log.take(), [format!("result GET {h} <error>")]);
        // A response whose body is dropped unread: the latency is reported at the drop,
        // once; the status code at the head.
        let resp = svc.call(get("/denied?limit=1")).await.unwrap();
        assert_eq!(resp.status(), 401);
        assert_eq!(
            log.take(),
            [format!("rate GET {h} 0ms"), format!("result GET {h} 401")]
        );
        tokio::time::advance(Duration::from_millis(5)).await;
        drop(resp);
        assert_eq!(log.take(), [format!("latency GET {h} 25ms")]);
    }

    #[tokio::test(start_paused = true)]
    async fn without_observer_nothing_is_wrapped_to_report() {
        let rec = Recorder::new(Duration::ZERO);
        let mut svc = LimitLayer::new(&rate(1.0, 1)).layer(rec.clone());
        let resp = svc.call(get("/a?limit=1")).await.unwrap();
        assert!(resp.body().done.is_none());
    }

    #[test]
    fn host_is_go_url_host() {
        let h = |s: &str| url_host(&s.parse::<http::Uri>().unwrap()).to_string();
        assert_eq!(h("https://127.0.0.1:16443"), "127.0.0.1:16443");
        assert_eq!(h("https://127.0.0.1:16443/prefix/"), "127.0.0.1:16443");
        assert_eq!(
            h("https://kubernetes.default.svc"),
            "kubernetes.default.svc"
        );
        assert_eq!(h("https://user:pw@[::1]:6443"), "[::1]:6443");
        assert_eq!(h("/api/v1"), "none");
    }
}
