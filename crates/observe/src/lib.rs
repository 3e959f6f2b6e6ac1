//! Observability shared by every job of the binary: the Prometheus
//! [`metrics`] registry, the process [`log`] lines in CoreDNS's format,
//! and the sockets of the admin HTTP listeners that serve the metrics and
//! the probes ([`listen`]: Go's addresses, dual-stack wildcards).
//!
//! This crate sits under the plugin contract (`clusterdns-contract`
//! re-exports it), so an agent that is not a plugin, such as the node-cache
//! agent or the autoscaler, can count and log the same way without taking
//! on the plugin contract. It knows nothing of DNS.

pub mod listen;
pub mod log;
pub mod metrics;
pub mod process;

/// Metric namespace shared by every metric, as in CoreDNS.
pub const NAMESPACE: &str = "coredns";
