//! `/healthz` and `/last-poll`, answered as upstream's Go `net/http` handlers answer them:
//! `/healthz` is always 200 with no body; `/last-poll` is 200 with no body, or 500 with
//! `Encountered error at last poll cycle: <error>` after a failed poll; anything else is
//! Go's 404. Served by `clusterdns-http`, one request per connection (the kubelet's probes
//! need no more) and no `Date`, as this listener has always answered.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use clusterdns_http::{Asked, Config, Reply};
use tokio::net::TcpListener;

/// One request, then the connection closes; its head within 5 s of the connection, a write
/// stalled 5 s ends it.
const HEALTH: Config = Config {
    keep_alive: false,
    date: false,
    whole_body: false,
    timeout: Duration::from_secs(5),
};

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
    let handler = move |asked: Asked| {
        let reply = answer(&asked.path, &last);
        async move { reply }
    };
    clusterdns_http::serve(listener, HEALTH, handler, clusterdns_http::forever()).await;
}

/// Any method: Go's handlers do not look at it.
fn answer(path: &str, last: &LastPoll) -> Reply {
    let (status, body) = match path {
        "/healthz" => (200, String::new()),
        "/last-poll" => match last.get() {
            None => (200, String::new()),
            Some(e) => (500, format!("Encountered error at last poll cycle: {e}")),
        },
        _ => (404, "404 page not found\n".to_owned()),
    };
    Reply {
        status,
        // Go sniffs a type only from a body.
        content_type: (!body.is_empty()).then_some("text/plain; charset=utf-8"),
        // First, as this listener has always written it.
        sniffed: false,
        nosniff: false,
        body: body.into_bytes(),
        streamed: false,
    }
}
