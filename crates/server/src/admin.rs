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

/// How long a kept-alive connection may wait for its next request (and a
/// request for its headers).
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

fn parse_head(head: &str) -> Option<Request> {
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split_whitespace();
    let method = first.next()?.to_string();
    let target = first.next()?;
    let version = first.next().unwrap_or("HTTP/1.0");
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
            body_len = v.parse().ok()?;
        } else if k.eq_ignore_ascii_case("transfer-encoding") {
            // A chunked request body is not read: answer, then close.
            close = true;
        }
    }
    Some(Request {
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
        let end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            if buf.len() >= MAX_HEAD {
                let r = text(431, b"431 Request Header Fields Too Large");
                return respond(&mut stream, "GET", &r, false, true).await;
            }
            if !read_more(&mut stream, &mut buf).await? {
                return Ok(());
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        let Some(req) = parse_head(&head) else {
            let r = text(400, b"400 Bad Request");
            return respond(&mut stream, "GET", &r, false, true).await;
        };
        // Skip the request's body (CoreDNS's handlers ignore it).
        let mut rest = buf.split_off(end);
        while rest.len() < req.body_len {
            if !read_more(&mut stream, &mut rest).await? {
                return Ok(());
            }
        }
        buf = rest.split_off(req.body_len);
        let reply = {
            let table = routes.load();
            match table.iter().find(|r| r.path == req.path) {
                Some(r) => (r.handler)(),
                None => text(404, b"404 page not found\n"),
            }
        };
        respond(&mut stream, &req.method, &reply, req.gzip, req.close).await?;
        if req.close {
            return stream.shutdown().await;
        }
    }
}

/// Reads what the client sent next into `buf`; `false` when it closed
/// the connection or stayed idle for [`IDLE`].
async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<bool> {
    let mut chunk = [0u8; 2048];
    match tokio::time::timeout(IDLE, stream.read(&mut chunk)).await {
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
        assert!(parse_head("GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n").is_none());
    }
}
