//! One query through a listener's zone table with a report of what
//! decided its answer, for `clusterdns explain`: the same checks, zone
//! selection, chain and scrub as a served query, without a socket; and the
//! `explain` job itself ([`job`]), which the binary runs with its plugins.

pub mod job;

use std::net::SocketAddr;
use std::time::Instant;

use clusterdns_contract::{Proto, ResponseWriter};
use clusterdns_wire::Name;

use crate::handle::{self, Meta};
use crate::mux::Mux;

/// What one query met on its way.
#[derive(Debug, Clone, Default)]
pub struct Explanation {
    /// The server block's zone that took the query; `None` when it was
    /// answered (or dropped) before any chain: unreadable, a refused class,
    /// no zone of this listener.
    pub zone: Option<Name>,
    /// The chain of that block, plugin names in order.
    pub plugins: Vec<&'static str>,
    /// The plugin that answered or failed; empty when the chain ran out.
    pub answered_by: &'static str,
    /// Its error, when it failed (the server then wrote the rcode).
    pub error: Option<String>,
    /// Each plugin's own account ([`clusterdns_contract::Plugin::explain`]),
    /// from the first plugin up to the one that answered.
    pub notes: Vec<(&'static str, String)>,
    /// The reply as it would be sent; empty when nothing would be.
    pub reply: Vec<u8>,
}

/// Runs `packet`, as if received from `client` at `local` over `proto`,
/// through `mux`, with I/O allowed (forwarding happens for real).
pub async fn explain(
    mux: &Mux,
    packet: &[u8],
    client: SocketAddr,
    local: SocketAddr,
    proto: Proto,
) -> Explanation {
    let meta = Meta {
        client,
        local,
        proto,
        received: Instant::now(),
    };
    let mut w = ResponseWriter::default();
    let mut out = Explanation::default();
    if let Some(run) = handle::explain(mux, packet, meta, &mut w).await {
        out.zone = Some(run.zone);
        out.plugins = run.chain.plugins().iter().map(|p| p.name()).collect();
        out.answered_by = run.plugin;
        out.error = run.error;
        out.notes = run.notes;
    }
    out.reply = w.bytes().to_vec();
    out
}
