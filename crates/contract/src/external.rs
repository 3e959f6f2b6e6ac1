//! The contract between *k8s_external* and the plugin that knows the
//! cluster's Services (CoreDNS's `external.Externaler`): the plugin
//! answers [`Plugin::externaler`](crate::Plugin::externaler) with itself,
//! and *k8s_external* finds it by name in the chain behind it.

use std::net::IpAddr;

use clusterdns_wire::{Name, Rcode};

use crate::Request;

/// What one record of an external answer points at.
// Entries live in a buffer reused per thread, so a Name inline costs
// no allocation; boxing it would cost one per PTR entry.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExternalHost {
    /// An address (A, AAAA, and the SRV target's address).
    Ip(IpAddr),
    /// A PTR target relative to the first external zone (`name.namespace.`).
    Name(Name),
    /// A hostname (a LoadBalancer ingress without IP): answered with a
    /// CNAME to it and what a lookup of it gives.
    Alias(Name),
}

/// One service entry of an external answer (CoreDNS's `msg.Service` as
/// *k8s_external* reads it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExternalService {
    /// Where it points.
    pub host: ExternalHost,
    /// The port, for SRV records; `None` for a Service or slice without
    /// ports (CoreDNS's port -1), which has addresses but no SRV record.
    pub port: Option<u16>,
    /// The SRV target: `service.namespace.ZONE.`, or
    /// `endpoint.service.namespace.ZONE.` for a headless service's endpoint,
    /// or the hostname of an [`ExternalHost::Alias`].
    pub target: Name,
    /// The TTL of the SRV record (the source plugin's own TTL).
    pub ttl: u32,
}

/// A plugin that can answer names under an external zone from its data
/// (*kubernetes*: Services' external IPs and LoadBalancer ingress).
pub trait Externaler: Send + Sync {
    /// CoreDNS `External`: the entries for the query name of `req` under
    /// the external zone `zone` (lowercase), appended to `out` (empty on
    /// entry). The rcode tells NXDOMAIN from NODATA when `out` stays empty.
    /// `headless`: headless services answer with their endpoints.
    fn external(
        &self,
        req: &Request<'_>,
        zone: &Name,
        headless: bool,
        out: &mut Vec<ExternalService>,
    ) -> Rcode;

    /// CoreDNS `ExternalAddress`: the addresses of this server as seen
    /// from outside the cluster (the external IPs of its own Service, else
    /// the server's local addresses), appended to `out`.
    fn external_addresses(&self, headless: bool, out: &mut Vec<IpAddr>);

    /// CoreDNS `ExternalSerial`: the SOA serial of the external zones.
    fn external_serial(&self) -> u32;
}
