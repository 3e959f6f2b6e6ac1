//! The admin HTTP listeners (`health`, `ready`, `prometheus`): a minimal
//! HTTP/1.1 server that answers as Go's `net/http` does for CoreDNS's
//! handlers. Routes come from the plugins; on reload a listener's route
//! table is swapped, the socket stays.
//!
//! What a client sees matches CoreDNS: every method gets a known path's
//! handler (CoreDNS's handlers do not look at it), `HEAD` has the length
//! of the body it leaves out, connections are kept alive unless the
//! client closes them, a `Date` header, and `/metrics` streamed as
//! promhttp streams it (chunked, gzip when the client accepts it).

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use clusterdns_contract::{HttpReply, HttpRoute};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The routes served on one address.
pub(crate) type Routes = Arc<ArcSwap<Vec<HttpRoute>>>;

/// How long a kept-alive connection may wait for its next request, and
/// how long a request may take to arrive, head and body (Go's
/// `ReadTimeout`, which CoreDNS sets to 5 s on these listeners): a client
/// that trickles its bytes is closed as one that stops.
const IDLE: Duration = Duration::from_secs(5);

/// The largest request head read.
const MAX_HEAD: usize = 8192;

/// Serves `routes` on `listener` until `stop` turns true.
pub(crate) async fn serve(listener: TcpListener, routes: Routes, mut stop: watch::Receiver<bool>) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.changed() => return,
        };
        let Ok((stream, _)) = accepted else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let routes = routes.clone();
        tokio::spawn(async move {
            let _ = connection(stream, routes).await;
        });
    }
}

/// One request as far as the server cares.
struct Request {
    method: String,
    path: String,
    /// Close after the response (`Connection: close`, or HTTP/1.0
    /// without keep-alive).
    close: bool,
    gzip: bool,
    /// Bytes of body that follow the head.
    body_len: usize,
}

/// `HTTP/<digit>.<digit>`'s major version, as Go's `ParseHTTPVersion`
/// reads it.
fn major_version(version: &str) -> Option<u8> {
    match version.as_bytes() {
        [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
            if major.is_ascii_digit() && minor.is_ascii_digit() =>
        {
            Some(major - b'0')
        }
        _ => None,
    }
}

/// The request in `head`, or the status Go's `net/http` refuses it with:
/// 400 for a request line that is not `METHOD TARGET HTTP/x.y` (one space
/// apart, the method a token) or a bad `Content-Length`, 505 for a
/// version other than 1.x (HTTP/2's preface gets the 400 Go's `ServeMux`
/// gives the `*` target).
fn parse_head(head: &str) -> Result<Request, u16> {
    let mut lines = head.split("\r\n");
    let line = lines.next().unwrap_or("");
    let (method, rest) = line.split_once(' ').ok_or(400u16)?;
    let (target, version) = rest.split_once(' ').ok_or(400u16)?;
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if method.is_empty() || !method.bytes().all(token) {
        return Err(400);
    }
    match major_version(version) {
        Some(1) => {}
        Some(2) if (method, target, version) == ("PRI", "*", "HTTP/2.0") => return Err(400),
        Some(_) => return Err(505),
        None => return Err(400),
    }
    let method = method.to_string();
    let mut close = version == "HTTP/1.0";
    let (mut gzip, mut body_len) = (false, 0);
    for l in lines {
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim(), v.trim());
        if k.eq_ignore_ascii_case("connection") {
            if v.eq_ignore_ascii_case("close") {
                close = true;
            } else if v.eq_ignore_ascii_case("keep-alive") {
                close = false;
            }
        } else if k.eq_ignore_ascii_case("accept-encoding") {
            gzip = v
                .split(',')
                .any(|e| e.split(';').next().is_some_and(|e| e.trim() == "gzip"));
        } else if k.eq_ignore_ascii_case("content-length") {
            body_len = v.parse().map_err(|_| 400u16)?;
        } else if k.eq_ignore_ascii_case("transfer-encoding") {
            // A chunked request body is not read: answer, then close.
            close = true;
        }
    }
    Ok(Request {
        method,
        path: target.split('?').next().unwrap_or("").to_string(),
        close,
        gzip,
        body_len,
    })
}

/// Serves requests on one connection until the client closes it, asks
/// to, or stays idle for [`IDLE`].
async fn connection(mut stream: TcpStream, routes: Routes) -> std::io::Result<()> {
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    loop {
        // The whole request, head and body, by then.
        let deadline = tokio::time::Instant::now() + IDLE;
        let end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            if buf.len() >= MAX_HEAD {
                let r = text(431, b"431 Request Header Fields Too Large");
                return written(respond(&mut stream, "GET", &r, false, true)).await;
            }
            if !read_more(&mut stream, &mut buf, deadline).await? {
                return Ok(());
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        let req = match parse_head(&head) {
            Ok(req) => req,
            Err(status) => {
                let r = match status {
                    505 => text(
                        505,
                        b"505 HTTP Version Not Supported: unsupported protocol version",
                    ),
                    _ => text(400, b"400 Bad Request"),
                };
                return written(respond(&mut stream, "GET", &r, false, true)).await;
            }
        };
        // Skip the request's body (CoreDNS's handlers ignore it), read
        // and dropped as it comes: never kept, whatever its length says.
        let mut rest = buf.split_off(end);
        let mut left = req.body_len;
        while rest.len() < left {
            left -= rest.len();
            rest.clear();
            if !read_more(&mut stream, &mut rest, deadline).await? {
                return Ok(());
            }
        }
        buf = rest.split_off(left);
        let reply = {
            let table = routes.load();
            match table.iter().find(|r| r.path == req.path) {
                Some(r) => (r.handler)(),
                None => text(404, b"404 page not found\n"),
            }
        };
        written(respond(
            &mut stream,
            &req.method,
            &reply,
            req.gzip,
            req.close,
        ))
        .await?;
        if req.close {
            return stream.shutdown().await;
        }
    }
}

/// A response written within [`IDLE`], as Go's `WriteTimeout` bounds it:
/// a client that stops reading (pipelining requests it never reads the
/// answers of) loses its connection instead of holding it. A write that
/// runs out of time is an error, so the connection ends.
async fn written(
    respond: impl std::future::Future<Output = std::io::Result<()>>,
) -> std::io::Result<()> {
    tokio::time::timeout(IDLE, respond)
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
}

/// Reads what the client sent next into `buf`; `false` when it closed
/// the connection or `deadline` passed.
async fn read_more(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    deadline: tokio::time::Instant,
) -> std::io::Result<bool> {
    let mut chunk = [0u8; 2048];
    match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
        Ok(r) => {
            let n = r?;
            buf.extend_from_slice(&chunk[..n]);
            Ok(n > 0)
        }
        Err(_) => Ok(false),
    }
}

fn text(status: u16, body: &[u8]) -> HttpReply {
    HttpReply {
        status,
        content_type: "text/plain; charset=utf-8",
        body: body.to_vec(),
        streamed: false,
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        431 => "Request Header Fields Too Large",
        505 => "HTTP Version Not Supported",
        503 => "Service Unavailable",
        _ => "",
    }
}

/// gzip of `body`; `None` if compressing failed (then sent plain).
fn gzipped(body: &[u8]) -> Option<Vec<u8>> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(body).ok()?;
    e.finish().ok()
}

async fn respond(
    stream: &mut TcpStream,
    method: &str,
    reply: &HttpReply,
    gzip: bool,
    close: bool,
) -> std::io::Result<()> {
    let compressed = if reply.streamed && gzip {
        gzipped(&reply.body)
    } else {
        None
    };
    let body = compressed.as_deref().unwrap_or(&reply.body);
    let status = reply.status;
    let mut head = format!("HTTP/1.1 {status} {}\r\n", reason(status));
    if compressed.is_some() {
        head.push_str("Content-Encoding: gzip\r\n");
    }
    head.push_str(&format!("Content-Type: {}\r\n", reply.content_type));
    if status == 404 {
        head.push_str("X-Content-Type-Options: nosniff\r\n");
    }
    head.push_str(&format!("Date: {}\r\n", http_date(SystemTime::now())));
    if close {
        head.push_str("Connection: close\r\n");
    }
    let head_only = method == "HEAD";
    if !reply.streamed {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    } else if !head_only {
        head.push_str("Transfer-Encoding: chunked\r\n");
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    if !head_only {
        if reply.streamed {
            if !body.is_empty() {
                out.extend_from_slice(format!("{:x}\r\n", body.len()).as_bytes());
                out.extend_from_slice(body);
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"0\r\n\r\n");
        } else {
            out.extend_from_slice(body);
        }
    }
    stream.write_all(&out).await
}

/// `t` in the IMF-fixdate form of HTTP's `Date` header
/// (`Tue, 01 Dec 2026 11:49:37 GMT`).
fn http_date(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{}, {day:02} {} {year} {:02}:{:02}:{:02} GMT",
        WEEKDAYS[days.rem_euclid(7) as usize],
        MONTHS[(month - 1) as usize],
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Groups routes by listen address, in first-seen order.
pub(crate) fn by_addr(routes: &[HttpRoute]) -> Vec<(SocketAddr, Vec<HttpRoute>)> {
    let mut out: Vec<(SocketAddr, Vec<HttpRoute>)> = Vec::new();
    for r in routes {
        match out.iter_mut().find(|(a, _)| *a == r.addr) {
            Some((_, v)) => v.push(r.clone()),
            None => out.push((r.addr, vec![r.clone()])),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_imf_fixdate() {
        let t = UNIX_EPOCH + Duration::from_secs(1_796_125_777);
        assert_eq!(http_date(t), "Tue, 01 Dec 2026 11:49:37 GMT");
        assert_eq!(http_date(UNIX_EPOCH), "Thu, 01 Jan 1970 00:00:00 GMT");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(http_date(leap), "Tue, 29 Feb 2000 00:00:00 GMT");
    }

    #[test]
    fn heads_parse() {
        let r = parse_head("POST /health?x=1 HTTP/1.1\r\nContent-Length: 3\r\nAccept-Encoding: deflate, gzip;q=1\r\n\r\n").unwrap();
        assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/health"));
        assert!(r.gzip && !r.close);
        assert_eq!(r.body_len, 3);
        let r = parse_head("GET / HTTP/1.0\r\n\r\n").unwrap();
        assert!(r.close && !r.gzip);
        let r = parse_head("GET / HTTP/1.1\r\nConnection: close\r\n\r\n").unwrap();
        assert!(r.close);
        assert_eq!(
            parse_head("GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n").err(),
            Some(400)
        );
        // Request lines Go's net/http refuses.
        for (line, status) in [
            ("GARBAGE", 400),
            ("GET /health", 400),
            ("GET  /health HTTP/1.1", 400),
            ("G\u{0}T /health HTTP/1.1", 400),
            ("GET /health HTTP/1", 400),
            ("GET /health HTTP/9.9", 505),
            ("PRI * HTTP/2.0", 400),
        ] {
            let r = parse_head(&format!("{line}\r\n\r\n"));
            assert_eq!(r.err(), Some(status), "{line:?}");
        }
    }
}
