//! The admin HTTP/1 server of every job: the cluster DNS's `health`,
//! `ready` and `prometheus` listeners, node-cache's `/metrics` and
//! `/ready`, the autoscaler's `/healthz` and `/last-poll`. hyper's HTTP/1
//! server parses requests and frames bodies; this crate adds what a Go
//! `net/http` server's client sees and hyper does not do by itself:
//!
//! - headers in Go's case (`Content-Type`) and Go's order: the handler's
//!   (sorted), then `Date`, `Content-Length`, a sniffed `Content-Type`,
//!   `Connection`, `Transfer-Encoding`;
//! - a `HEAD` answered with the length of the body it leaves out;
//! - a streamed body (promhttp's `/metrics`) sent chunked, gzip-compressed
//!   when the client accepts it, with no length on `HEAD`;
//! - Go's `ReadTimeout` (a request, head and body, within [`Config::timeout`]
//!   of the previous response or of the connection's start: idle, stopped
//!   and trickling clients are closed) and `WriteTimeout` (a client that
//!   stops reading loses its connection), in [`deadline`];
//! - heads of at most 8 KiB (431 past it).
//!
//! What differs from Go's bytes is what hyper writes itself, listed in
//! ARCHITECTURE.md ("Admin HTTP").

mod date;
mod deadline;

use std::future::Future;
use std::io::Write as _;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::header::{self, HeaderName, HeaderValue};
use hyper::{Response, StatusCode, Version};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

pub use date::http_date;
pub use hyper::Method;

/// The smallest read buffer hyper takes, and the largest head we read:
/// a longer head is refused with 431.
const MAX_HEAD: usize = 8192;

/// How one listener serves.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// Several requests per connection (Go's default). Without it, one
    /// request, then the connection closes (`Connection: close`).
    pub keep_alive: bool,
    /// A `Date` header on every response, as Go writes it.
    pub date: bool,
    /// Read the request's body, and drop it, before the handler runs: a
    /// body that never comes gets no answer, only the close at the
    /// deadline. Without it the handler answers once the head is in.
    pub whole_body: bool,
    /// Go's `ReadTimeout` and `WriteTimeout` (see [`deadline`]).
    pub timeout: Duration,
}

/// A request as a handler sees it.
#[derive(Debug, Clone)]
pub struct Asked {
    /// The method, as sent.
    pub method: Method,
    /// The path, without the query.
    pub path: String,
}

/// What a handler answers.
#[derive(Debug, Clone)]
pub struct Reply {
    /// Status code (an invalid one is sent as 500).
    pub status: u16,
    /// `Content-Type`, if any.
    pub content_type: Option<&'static str>,
    /// The type is the one Go's server sniffs from the body (the handler
    /// set none): Go writes it among its own headers, after
    /// `Content-Length`, instead of first.
    pub sniffed: bool,
    /// `X-Content-Type-Options: nosniff`, which Go's `http.Error` (and
    /// so `http.NotFound`) sets.
    pub nosniff: bool,
    /// The body.
    pub body: Vec<u8>,
    /// Sent as Go's promhttp streams a body: chunked, gzip-compressed
    /// when the client accepts it, and no length on `HEAD`.
    pub streamed: bool,
}

impl Reply {
    /// A plain-text reply with a `Content-Length`.
    pub fn text(status: u16, content_type: &'static str, body: impl Into<Vec<u8>>) -> Reply {
        Reply {
            status,
            content_type: Some(content_type),
            sniffed: false,
            nosniff: false,
            body: body.into(),
            streamed: false,
        }
    }
}

/// Why a connection ended without a response.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request's body stopped before its end (the client closed, or
    /// the read deadline passed).
    #[error("request body: {0}")]
    Body(#[source] hyper::Error),
}

/// Serves `handler` on `listener` until `stop` completes; connections
/// already accepted go on until they end or time out.
pub async fn serve<H, F>(
    listener: TcpListener,
    config: Config,
    handler: H,
    stop: impl Future<Output = ()>,
) where
    H: Fn(Asked) -> F + Send + Sync + 'static,
    F: Future<Output = Reply> + Send + 'static,
{
    let handler = Arc::new(handler);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .keep_alive(config.keep_alive)
        .title_case_headers(true)
        // Go's Date is written by `respond`, in Go's place among the headers.
        .auto_date_header(false)
        .max_buf_size(MAX_HEAD)
        // The deadlines are the connection's (deadline.rs): no timer here.
        .header_read_timeout(None)
        // A read that ends (the read deadline) while a handler runs (a
        // `/ready` probe) must not abort its answer: the connection
        // closes once it is written.
        .half_close(true);
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = &mut stop => return,
        };
        let Ok((stream, _)) = accepted else {
            // Out of descriptors, or the like: back off a moment rather than spin.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let io = TokioIo::new(deadline::Guarded::new(stream, config.timeout));
        let handler = handler.clone();
        let service = hyper::service::service_fn(move |req| {
            let handler = handler.clone();
            async move { answer(req, config, handler.as_ref()).await }
        });
        let conn = builder.serve_connection(io, service);
        tokio::spawn(async move {
            // A connection's end, clean or not, concerns nobody else.
            let _ = conn.await;
        });
    }
}

/// One request's response.
async fn answer<H, F>(
    req: hyper::Request<hyper::body::Incoming>,
    config: Config,
    handler: &H,
) -> Result<Response<Full<Bytes>>, Error>
where
    H: Fn(Asked) -> F,
    F: Future<Output = Reply>,
{
    let (parts, mut body) = req.into_parts();
    if config.whole_body {
        // Dropped frame by frame as it comes: never kept, whatever its length says.
        while let Some(frame) = body.frame().await {
            frame.map_err(Error::Body)?;
        }
    }
    let gzip = parts
        .headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|e| e.split(';').next().is_some_and(|e| e.trim() == "gzip"));
    let connection = |token: &str| {
        parts
            .headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    };
    // The `Connection` header Go answers with: `close` to an HTTP/1.1
    // client that asked (or to all, without keep-alive), `keep-alive` to
    // an HTTP/1.0 client that asked for it; hyper closes or keeps the
    // connection accordingly.
    let answer_connection = match parts.version {
        Version::HTTP_10 if config.keep_alive && connection("keep-alive") => Some("keep-alive"),
        Version::HTTP_10 => None,
        _ if !config.keep_alive || connection("close") => Some("close"),
        _ => None,
    };
    let asked = Asked {
        method: parts.method.clone(),
        path: parts.uri.path().to_string(),
    };
    let reply = handler(asked).await;
    Ok(respond(
        reply,
        parts.method == Method::HEAD,
        gzip,
        answer_connection,
        config.date,
    ))
}

/// The response to `reply`, headers in Go's order.
fn respond(
    reply: Reply,
    head_only: bool,
    gzip: bool,
    connection: Option<&'static str>,
    date: bool,
) -> Response<Full<Bytes>> {
    let compressed = if reply.streamed && gzip {
        gzipped(&reply.body)
    } else {
        None
    };
    let encoded = compressed.is_some();
    let body = compressed.unwrap_or(reply.body);
    // hyper cannot end a chunked response whose body is empty (its
    // writer waits for a frame that never comes): an empty stream is
    // sent with its length, 0.
    let chunked = reply.streamed && !body.is_empty();
    let mut res = Response::new(Full::new(Bytes::new()));
    *res.status_mut() =
        StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = res.headers_mut();
    let mut put = |name: HeaderName, value: HeaderValue| {
        h.insert(name, value);
    };
    // The handler's headers, sorted as Go's Header.Write sorts them.
    if encoded {
        put(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    let content_type = reply.content_type.map(HeaderValue::from_static);
    if !reply.sniffed
        && let Some(t) = &content_type
    {
        put(header::CONTENT_TYPE, t.clone());
    }
    if reply.nosniff {
        put(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
    }
    // Then the server's, in the order of Go's extraHeader.Write.
    if date && let Ok(v) = HeaderValue::from_str(&http_date(SystemTime::now())) {
        put(header::DATE, v);
    }
    if !chunked {
        put(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    }
    if reply.sniffed
        && let Some(t) = content_type
    {
        put(header::CONTENT_TYPE, t);
    }
    if let Some(c) = connection {
        put(header::CONNECTION, HeaderValue::from_static(c));
    }
    if chunked && !head_only {
        put(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
    }
    // hyper never sends a body on HEAD; it keeps the length given above.
    if !head_only {
        *res.body_mut() = Full::new(Bytes::from(body));
    }
    res
}

/// gzip of `body`; `None` if compressing failed (then sent plain).
fn gzipped(body: &[u8]) -> Option<Vec<u8>> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(body).ok()?;
    e.finish().ok()
}

/// A future that never completes: a listener served for the process's life.
pub async fn forever() {
    std::future::pending::<()>().await;
}

#[cfg(test)]
mod tests;
