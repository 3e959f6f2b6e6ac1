//! Transport and lifecycle of clusterdns, the counterpart of CoreDNS's
//! `core/dnsserver` and caddy's start/reload/stop.
//!
//! ```text
//!  UDP socket (one per worker task, SO_REUSEPORT)        TCP listener (tokio)
//!     │ recvmmsg batch                                     │ per connection
//!     ▼                                                    ▼
//!  handle::serve_sync ── parse ── checks ── mux (longest zone) ── Chain::run_sync
//!     │  Reply: scrub (OPT, truncate) → sendmmsg batch
//!     │  Defer: park (packet copy, parsed query, zone, plugin) → future the worker drives
//!     │         → Chain::run_async_from (the deferring plugin's query_async) → scrub → sendto
//!     ▼
//!  admin HTTP (health, ready, metrics routes registered by plugins)
//! ```
//!
//! An [`Instance`] is one parsed and set-up Corefile. [`serve`] binds its
//! listeners, reports [`Serving`] and serves until its [`Controller`]
//! asks it to stop; a reload swaps in a new instance without dropping
//! queries (the listeners stay; only each listener's zone table is swapped
//! atomically). The process around it (the binary) owns the runtime, the
//! signals and the pidfile, and drives the controller.
//!
//! TCP clients meet the limits of [`TcpLimits`] (read 3 s, write 5 s,
//! idle 10 s, half the open-file limit of connections with stalled
//! writers and then the longest idle ones closed first under pressure,
//! pipelined queries answered a few at a time through serving permits,
//! one reply held per connection and a [`TCP_SEND_BUFFER`] of kernel
//! buffer); UDP queries longer than 4,096 bytes
//! are served from their first 4,096 (answered when the message ends
//! within them, FORMERR otherwise, as CoreDNS does with its 512).

mod admin;
pub mod explain;
mod handle;
mod instance;
mod mux;
mod passed;
mod run;
mod sys;
mod tcp;
/// For this crate's integration tests only (`tests/alloc.rs` turns on
/// `test-util` through its self dev-dependency); never in the product.
#[cfg(any(test, feature = "test-util"))]
#[doc(hidden)]
pub mod testing;
mod udp;

pub use explain::{Explanation, explain};
pub use instance::{ConfigSource, Instance, InstanceError, ListenerSpec};
pub use mux::Mux;
pub use passed::{Exporter, Inherited, PassedSocket, SocketKind};
pub use run::{Control, Controller, Options, ServerError, Serving, control, serve};
pub use tcp::{TCP_GRACE, TCP_SEND_BUFFER, TcpLimits};
