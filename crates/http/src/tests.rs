//! The bytes on the wire, from a real listener on 127.0.0.1.
// Test code fails loudly by design.
#![allow(clippy::unwrap_used)]

use super::*;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const ADMIN: Config = Config {
    keep_alive: true,
    date: true,
    whole_body: true,
    timeout: Duration::from_secs(5),
};

/// Serves a fixed route table under `config`; its address.
async fn start(config: Config) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(
        listener,
        config,
        |a: Asked| async move {
            match a.path.as_str() {
                "/health" => Reply {
                    sniffed: true,
                    ..Reply::text(200, "text/plain; charset=utf-8", "OK")
                },
                "/big" => Reply::text(200, "text/plain; charset=utf-8", vec![b'a'; 1 << 20]),
                "/metrics" => Reply {
                    streamed: true,
                    ..Reply::text(200, "text/plain; version=0.0.4; charset=utf-8", "m 1\n")
                },
                _ => Reply {
                    nosniff: true,
                    ..Reply::text(404, "text/plain; charset=utf-8", "404 page not found\n")
                },
            }
        },
        forever(),
    ));
    addr
}

/// What the server sends for `request` until it closes (or 1 s passes),
/// with the Date header's value replaced by `DATE`.
async fn exchange(addr: std::net::SocketAddr, request: &[u8]) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(1), s.read_to_end(&mut buf)).await;
    let text = String::from_utf8_lossy(&buf).into_owned();
    text.split("\r\n")
        .map(|l| {
            if l.starts_with("Date: ") {
                "Date: DATE"
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\r\n")
}

#[tokio::test]
async fn go_headers_in_go_order() {
    let addr = start(ADMIN).await;
    let r = exchange(
        addr,
        b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(
        r,
        "HTTP/1.1 200 OK\r\nDate: DATE\r\nContent-Length: 2\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\nOK"
    );
    let r = exchange(addr, b"HEAD /nope HTTP/1.1\r\nConnection: close\r\n\r\n").await;
    assert_eq!(
        r,
        "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\nDate: DATE\r\nContent-Length: 19\r\nConnection: close\r\n\r\n"
    );
}

#[tokio::test]
async fn streamed_bodies_are_chunked_and_gzipped_on_request() {
    let addr = start(ADMIN).await;
    let r = exchange(addr, b"GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n").await;
    assert_eq!(
        r,
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nDate: DATE\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nm 1\n\r\n0\r\n\r\n"
    );
    let r = exchange(addr, b"HEAD /metrics HTTP/1.1\r\nConnection: close\r\n\r\n").await;
    assert_eq!(
        r,
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nDate: DATE\r\nConnection: close\r\n\r\n"
    );
    let r = exchange(
        addr,
        b"GET /metrics HTTP/1.1\r\nAccept-Encoding: deflate, gzip;q=1\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(
        r.starts_with("HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nDate: DATE\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"),
        "{r:?}"
    );
}

#[tokio::test]
async fn kept_alive_and_pipelined() {
    let addr = start(ADMIN).await;
    let one = "GET /health HTTP/1.1\r\n\r\n";
    let r = exchange(
        addr,
        format!("{one}{one}GET /health HTTP/1.1\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await;
    assert_eq!(r.matches("HTTP/1.1 200 OK").count(), 3, "{r:?}");
    // HTTP/1.0 without keep-alive: answered as Go answers it, then closed.
    let r = exchange(
        addr,
        format!("GET /health HTTP/1.0\r\n\r\n{one}").as_bytes(),
    )
    .await;
    assert_eq!(
        r,
        "HTTP/1.0 200 OK\r\nDate: DATE\r\nContent-Length: 2\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nOK"
    );
}

#[tokio::test]
async fn one_request_servers_close_after_it() {
    let addr = start(Config {
        keep_alive: false,
        date: false,
        whole_body: false,
        ..ADMIN
    })
    .await;
    let one = "GET /health HTTP/1.1\r\n\r\n";
    let r = exchange(addr, one.repeat(3).as_bytes()).await;
    assert_eq!(
        r,
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\nOK"
    );
}

#[tokio::test]
async fn idle_and_unfinished_requests_are_closed_at_the_deadline() {
    let addr = start(Config {
        timeout: Duration::from_millis(300),
        ..ADMIN
    })
    .await;
    for sent in [
        &b""[..],
        b"GET /health HTTP/1.1\r\n",
        b"POST /health HTTP/1.1\r\nContent-Length: 10\r\n\r\nab",
    ] {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(sent).await.unwrap();
        let mut buf = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(2), s.read_to_end(&mut buf)).await;
        assert!(read.is_ok(), "{sent:?}: still open");
        assert!(
            buf.is_empty(),
            "{sent:?}: answered {:?}",
            String::from_utf8_lossy(&buf)
        );
    }
}

#[tokio::test]
async fn oversized_heads_are_refused() {
    let addr = start(ADMIN).await;
    let big = format!(
        "GET /health HTTP/1.1\r\nX-Big: {}\r\n\r\n",
        "a".repeat(10_000)
    );
    let r = exchange(addr, big.as_bytes()).await;
    assert!(r.starts_with("HTTP/1.1 431 "), "{r:?}");
}

#[tokio::test]
async fn a_client_that_never_reads_loses_its_connection() {
    let addr = start(Config {
        timeout: Duration::from_millis(300),
        ..ADMIN
    })
    .await;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let asked = 32;
    s.write_all("GET /big HTTP/1.1\r\n\r\n".repeat(asked).as_bytes())
        .await
        .unwrap();
    // Past the write deadline with the buffers full: the server gave up.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut got = 0usize;
    let mut chunk = vec![0u8; 1 << 16];
    let read = tokio::time::timeout(Duration::from_secs(3), async {
        while let Ok(n) = s.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            got += n;
        }
    })
    .await;
    assert!(read.is_ok(), "still open after {got} bytes");
    assert!(got < asked << 20, "all {asked} answers taken: {got} bytes");
}
