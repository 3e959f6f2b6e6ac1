//! The Kubernetes API client of clusterdns, apart from anything DNS: where the client's
//! configuration comes from ([`ClientSource`]: the pod's service account, a kubeconfig file,
//! or an explicit endpoint with [`TlsFiles`]), and the client-side limits and request
//! observer that client-go applies for CoreDNS ([`ClientLimits`], [`RequestObserver`]).
//!
//! `clusterdns-kubeindex` (the watch, the index and its snapshots) builds on it; a job that talks
//! to the API server without the DNS index (the autoscaler) uses this crate alone.
//!
//! ```no_run
//! # async fn f() -> Result<(), clusterdns_kubeclient::Error> {
//! use clusterdns_kubeclient::{ClientLimits, ClientSource};
//!
//! let source = ClientSource::from_options(None, None, None); // in-cluster
//! let client = source.client_with(&ClientLimits::coredns(5.0, 10, 0)).await?;
//! # drop(client);
//! # Ok(()) }
//! ```

mod client;
mod error;
mod ratelimit;

pub use client::{ClientSource, TlsFiles};
pub use error::Error;
pub use ratelimit::{ClientLimits, DEFAULT_BURST, DEFAULT_QPS, RateLimit, RequestObserver};

/// Re-exported so that callers use the exact kube-rs version the client is built with.
pub use kube;
