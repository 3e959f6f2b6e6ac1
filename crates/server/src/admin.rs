//! The admin HTTP listeners (`health`, `ready`, `prometheus`), served by
//! `clusterdns-http` as Go's `net/http` serves CoreDNS's handlers. Routes
//! come from the plugins; on reload a listener's route table is swapped,
//! the socket stays.
//!
//! What a client sees matches CoreDNS: every method gets a known path's
//! handler (CoreDNS's handlers do not look at it), `HEAD` has the length
//! of the body it leaves out, connections are kept alive unless the
//! client closes them, a `Date` header, `/metrics` streamed as promhttp
//! streams it (chunked, gzip when the client accepts it), and an unknown
//! path Go's `http.NotFound`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use clusterdns_contract::{HttpReply, HttpRoute};
use clusterdns_http::{Asked, Config, Reply};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// The routes served on one address.
pub(crate) type Routes = Arc<ArcSwap<Vec<HttpRoute>>>;

/// CoreDNS's listeners as Go's `http.Server` runs them: kept alive, a
/// `Date`, and `ReadTimeout` = `WriteTimeout` = 5 s (a client that
/// trickles its bytes is closed as one that stops). The request's body
/// is read, and dropped, before the handler answers: a body announced
/// and never sent gets no answer, only the close.
const ADMIN: Config = Config {
    keep_alive: true,
    date: true,
    whole_body: true,
    timeout: Duration::from_secs(5),
};

/// Serves `routes` on `listener` until `stop` turns true.
pub(crate) async fn serve(listener: TcpListener, routes: Routes, mut stop: watch::Receiver<bool>) {
    let handler = move |asked: Asked| {
        let reply = reply(&routes, &asked.path);
        async move { reply }
    };
    let stop = async move {
        let _ = stop.changed().await;
    };
    clusterdns_http::serve(listener, ADMIN, handler, stop).await;
}

/// The reply of the route at `path`, or Go's 404.
fn reply(routes: &Routes, path: &str) -> Reply {
    let table = routes.load();
    let r = match table.iter().find(|r| r.path == path) {
        Some(r) => (r.handler)(),
        None => HttpReply {
            status: 404,
            content_type: "text/plain; charset=utf-8",
            body: b"404 page not found\n".to_vec(),
            streamed: false,
        },
    };
    Reply {
        status: r.status,
        content_type: Some(r.content_type),
        // health's and ready's handlers write text and set no type (Go
        // sniffs it); promhttp and http.Error (behind http.NotFound) set
        // theirs.
        sniffed: !r.streamed && r.status != 404,
        // Go's http.Error sets it.
        nosniff: r.status == 404,
        body: r.body,
        streamed: r.streamed,
    }
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
