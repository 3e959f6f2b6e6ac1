//! `zone_aware`: headless answers from the client's zone (beyond CoreDNS).
//! A client whose zone is known gets, for a headless Service's name, only
//! the ready endpoints meant for its zone, or every ready endpoint when
//! none of the query's family is; see the README for the rule.

use std::net::IpAddr;

use clusterdns_contract::Request;
use clusterdns_kubeindex::{Endpoint, Snapshot};
use clusterdns_wire::Rtype;

use super::Kubernetes;
use super::lookup::{Found, Host};
use super::plan::{Plan, family_of};
use crate::pkg::nets::Nets;

/// `zone_aware`'s `CIDR ZONE` pairs in Corefile order: the networks, the
/// zone, and the CIDR as written (for `explain`).
pub(crate) type CidrZones = Vec<(Nets, Box<str>, Box<str>)>;

/// The `zone_aware` option.
#[derive(Debug)]
pub(crate) struct ZoneAware {
    /// `CIDR ZONE` pairs in Corefile order: the first network holding the
    /// client's address gives its zone. Empty: the zone is found through
    /// the client's Pod and its Node (Pods and Nodes are watched). The
    /// third field is the CIDR as written, for `explain`.
    pub(crate) map: CidrZones,
}

impl ZoneAware {
    /// Whether the client's zone comes from its Pod's Node.
    pub(crate) fn by_node(&self) -> bool {
        self.map.is_empty()
    }

    /// The zone of the client at `ip`, when known.
    fn client_zone<'a>(&'a self, snap: &'a Snapshot, ip: IpAddr) -> Option<&'a str> {
        let ip = ip.to_canonical();
        if !self.by_node() {
            return self
                .map
                .iter()
                .find(|(nets, ..)| nets.contains(ip))
                .map(|(_, zone, _)| &**zone);
        }
        // Pods sharing an address (host-network Pods) share their node;
        // Pods of several nodes at one address (a stale Pod left over
        // from a node that went away) name no one zone.
        let mut node: Option<&str> = None;
        for pod in snap.pods_at(ip) {
            let n = pod.node_name()?;
            match node {
                None => node = Some(n),
                Some(m) if m.eq_ignore_ascii_case(n) => {}
                Some(_) => return None,
            }
        }
        snap.node(node?)?.zone()
    }
}

impl ZoneAware {
    /// For `explain`: whether the client at `ip` has a zone.
    pub(crate) fn client_zone_known(&self, snap: &Snapshot, ip: IpAddr) -> bool {
        self.client_zone(snap, ip).is_some()
    }

    /// For `explain`: the zone [`client_zone`](Self::client_zone) gives the
    /// client at `ip`, and from what, or why it has none.
    pub(crate) fn explain_client_zone(&self, snap: &Snapshot, ip: IpAddr) -> String {
        let ip = ip.to_canonical();
        if !self.by_node() {
            return match self.map.iter().find(|(nets, ..)| nets.contains(ip)) {
                Some((_, zone, cidr)) => {
                    format!("the client {ip} is in zone {zone}: the CIDR map entry `{cidr} {zone}`")
                }
                None => {
                    format!("the client {ip} has no zone: it is in none of the CIDR map's networks")
                }
            };
        }
        let pods: Vec<_> = snap.pods_at(ip).collect();
        let Some(first) = pods.first() else {
            return format!("the client {ip} has no zone: no Pod has that address");
        };
        let who = format!("Pod {}/{}", first.namespace(), first.name());
        let Some(node) = first.node_name() else {
            return format!("the client {ip} has no zone: {who} is on no Node (not scheduled)");
        };
        if pods
            .iter()
            .any(|p| !p.node_name().is_some_and(|n| n.eq_ignore_ascii_case(node)))
        {
            return format!(
                "the client {ip} has no zone: Pods of several Nodes (or none) have that address"
            );
        }
        match snap.node(node).map(|n| n.zone()) {
            None => format!(
                "the client {ip} has no zone: {who} is on Node {node}, which the index does not \
                 hold (Nodes must be listed and watched)"
            ),
            Some(None) => format!(
                "the client {ip} has no zone: {who} is on Node {node}, which has no \
                 topology.kubernetes.io/zone label"
            ),
            Some(Some(zone)) => format!(
                "the client {ip} is in zone {zone}: {who} is on Node {node}, labelled \
                 topology.kubernetes.io/zone={zone}"
            ),
        }
    }
}

/// Whether `ep` is meant for `zone`: its `hints.forZones` when it has
/// hints (what kube-proxy follows), else its own `zone`.
pub(crate) fn in_zone(ep: &Endpoint, zone: &str) -> bool {
    if ep.has_zone_hints() {
        ep.for_zones().any(|z| z == zone)
    } else {
        ep.zone() == Some(zone)
    }
}

impl Kubernetes {
    /// With `zone_aware`, narrows a headless Service's addresses (A, AAAA)
    /// or SRV records in `plan` to the client's zone. Whether the answer
    /// depends on the client (so that no cache keyed on the question
    /// keeps it): every headless Service's name does, even when the
    /// client's zone is unknown or nothing was narrowed.
    pub(super) fn zone_filter<'s>(
        &'s self,
        req: &Request<'_>,
        snap: &'s Snapshot,
        qtype: Rtype,
        plan: &mut Plan<'s, '_>,
    ) -> bool {
        let Some(za) = &self.zone_aware else {
            return false;
        };
        let (Plan::Addrs(found) | Plan::Srv(found)) = plan else {
            return false;
        };
        let Found::Endpoints { svc, endpoint, .. } = *found else {
            return false;
        };
        // A name with an endpoint label asks for that endpoint.
        if !svc.is_headless() || !endpoint.is_empty() {
            return false;
        }
        let Some(client) = za.client_zone(snap, req.client.ip()) else {
            return true;
        };
        set_zone(found, Some(client));
        let mut any = false;
        found.for_each(&mut |e| {
            if let Host::Ip(ip) = e.host {
                any |= qtype == Rtype::SRV || family_of(qtype, ip);
            }
        });
        if !any {
            set_zone(found, None);
        }
        true
    }
}

fn set_zone<'s>(found: &mut Found<'s, '_>, to: Option<&'s str>) {
    if let Found::Endpoints { zone, .. } = found {
        *zone = to;
    }
}
