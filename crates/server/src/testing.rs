//! Entry points for the server crate's own integration tests (the
//! allocation test in `tests/alloc.rs`). Not a stable API.

use std::net::SocketAddr;
use std::time::Instant;

use clusterdns_contract::{Proto, ResponseWriter};

use crate::handle::{self, Handled, Meta};
use crate::mux::Mux;

/// What [`serve_sync`] did with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// The writer holds the reply.
    Reply,
    /// Nothing is sent.
    Drop,
    /// The packet needs the asynchronous path.
    Defer,
}

/// The synchronous pass a UDP worker (or a TCP connection) makes over one
/// packet: parse, checks, zone selection, chain, scrub.
///
/// Never inlined, so `valgrind --tool=callgrind
/// --toggle-collect='*testing*serve_sync*'` can count its instructions.
#[inline(never)]
pub fn serve_sync(
    mux: &Mux,
    packet: &[u8],
    client: SocketAddr,
    local: SocketAddr,
    proto: Proto,
    w: &mut ResponseWriter,
) -> Served {
    let meta = Meta {
        client,
        local,
        proto,
        received: Instant::now(),
    };
    match handle::serve_sync(mux, packet, meta, w, &mut None) {
        Handled::Reply => Served::Reply,
        Handled::Drop => Served::Drop,
        Handled::Defer(_) => Served::Defer,
    }
}
