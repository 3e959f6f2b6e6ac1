//! `/healthz` and `/last-poll`, answered as upstream's Go `net/http` handlers answer them:
//! `/healthz` is always 200 with no body; `/last-poll` is 200 with no body, or 500 with
//! `Encountered error at last poll cycle: <error>` after a failed poll; anything else is
//! Go's 404. One request per connection: the kubelet's probes need no more.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The last poll's error, shared by the loop and the listener.
#[derive(Clone, Default)]
pub struct LastPoll(Arc<Mutex<Option<String>>>);

impl LastPoll {
    /// Records the outcome of a poll.
    pub fn set(&self, error: Option<String>) {
        if let Ok(mut g) = self.0.lock() {
            *g = error;
        }
    }

    fn get(&self) -> Option<String> {
        self.0.lock().ok().and_then(|g| g.clone())
    }
}

/// Serves `listener` forever.
pub async fn serve(listener: TcpListener, last: LastPoll) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let last = last.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(5), answer(stream, last)).await;
        });
    }
}

async fn answer(mut stream: TcpStream, last: LastPoll) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&head);
    let path = text
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("/");
    let path = path.split('?').next().unwrap_or(path);
    let (status, body) = match path {
        "/healthz" => ("200 OK", String::new()),
        "/last-poll" => match last.get() {
            None => ("200 OK", String::new()),
            Some(e) => (
                "500 Internal Server Error",
                format!("Encountered error at last poll cycle: {e}"),
            ),
        },
        _ => ("404 Not Found", "404 page not found\n".to_owned()),
    };
    let ctype = if body.is_empty() {
        ""
    } else {
        "Content-Type: text/plain; charset=utf-8\r\n"
    };
    let reply = format!(
        "HTTP/1.1 {status}\r\n{ctype}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(reply.as_bytes()).await?;
    stream.shutdown().await
}
