//! The plugin contract of clusterdns, the Rust counterpart of CoreDNS's
//! `plugin/plugin.go` and `plugin.md`.
//!
//! A server block's plugins form a [`Chain`], ordered by `plugin.cfg`. A
//! query walks the chain front to back; each plugin's [`Plugin::query`]
//! returns a typed [`Flow`]:
//!
//! ```text
//!  query ──► prometheus ─► errors ─► log ─► cache ─► kubernetes ─► forward
//!              Next         Next      Next   Next     Answered
//!  response ◄─ prometheus ◄ errors ◄─ log ◄─ cache ◄──────┘  (reverse order,
//!              (count)      (report)  (print) (store)        only plugins
//!                                                            that said Next)
//! ```
//!
//! * `Answered`: the plugin wrote a complete reply into the
//!   [`ResponseWriter`]; the chain stops and the plugins before it see the
//!   reply through [`Plugin::response`], in reverse order.
//! * `Next`: not mine (or fall through); the next plugin is asked.
//! * `Async`: this plugin needs I/O (an upstream). The server then resumes
//!   the query on the asynchronous path at that plugin
//!   ([`Chain::run_async_from`]), where its [`Plugin::query_async`] is
//!   awaited at once (its `query` is not asked again; what `query` learned
//!   can travel as a note, [`ResponseWriter::defer_with`]); the plugins
//!   before it passed the query on without side effects, and their
//!   response hooks still run at the end.
//! * `Fail(e)`: an error; the server writes the reply for `e.rcode()`
//!   ([`PluginError::rcode`] is the one error→rcode mapping) and the
//!   `errors` plugin reports it.
//!
//! The synchronous path is the hot path: answers we own (cache hits,
//! cluster records, hosts) are served on the receiving thread without
//! allocation, lock or task spawn.

mod autopath;
mod chain;
// Go durations moved down to the Corefile crate (the node-cache agent
// parses its flags with them without the contract); callers are unchanged.
pub use clusterdns_corefile::duration;
mod error;
mod external;
pub mod parse;
mod request;
pub mod response;
pub mod setup;
/// Query packets, requests and reply decoding for tests; never in the
/// product (other crates' tests turn on the `test-util` feature).
#[cfg(any(test, feature = "test-util"))]
pub mod testing;
pub mod transfer;
mod writer;

pub use autopath::AutoPather;
pub use chain::{BoxFuture, Chain, Deferred, Flow, Outcome, Plugin, note_or_query};
pub use error::PluginError;
pub use external::{ExternalHost, ExternalService, Externaler};
pub use request::{Edits, Family, Proto, Request};
pub use setup::{
    BlockChain, BlockFilter, ChainTail, ConnLimits, HttpReply, HttpRoute, PluginDef, ReadyList,
    SetupCtx, SetupFn, Shared,
};
pub use writer::{OptAt, ResponseWriter, StoreHits, Stored};

// The metrics registry, log lines and admin listeners' sockets live in
// clusterdns-observe, which agents that are not plugins use too; plugins
// (and the server) keep reaching them here.
pub use clusterdns_observe::{
    NAMESPACE, debug, error, info, listen, log, metrics, process, warning,
};
