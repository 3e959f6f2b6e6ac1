//! `client_index compact` (beyond CoreDNS): *autopath* learns a client's namespace
//! without `pods verified`. The Pod watch feeds the compact Pod index of
//! `clusterdns-kubeindex` (address → namespace id, no Pod objects kept); a client found
//! there, or else at a ready EndpointSlice endpoint whose `targetRef` is a Pod, gets
//! the search path of that namespace. Pod names (`1-2-3-4.ns.pod`) keep the answers of
//! the `pods` mode in force.

use std::net::IpAddr;

use clusterdns_corefile::{ConfigError, Directive};
use clusterdns_kubeindex::Snapshot;

/// Parses `client_index compact` (the only index so far).
pub(super) fn parse(p: &Directive, args: &[&str]) -> Result<bool, ConfigError> {
    match args {
        ["compact"] => Ok(true),
        [other] => Err(p.err(format!(
            "wrong value for client_index: {other}, must be: compact"
        ))),
        _ => Err(p.arg_err()),
    }
}

/// The namespace autopath gives the client at `ip`.
pub(super) fn client_namespace(snap: &Snapshot, ip: IpAddr) -> Option<&str> {
    let ip = ip.to_canonical();
    snap.compact_pod_namespace(ip)
        .or_else(|| snap.endpoint_pod_namespace(ip))
}
