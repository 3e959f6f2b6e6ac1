//! `isolate`: per-namespace DNS isolation (beyond CoreDNS). A client whose
//! address is a Pod's sees the names of its own namespace and of the
//! allowed ones (by name, or by the namespace's labels); a name of any
//! other namespace is NXDOMAIN to it, as if it did not exist. Decided on
//! the names as they are (the query's namespace label, the Pod's
//! namespace, the namespace's labels in the snapshot): nothing is
//! allocated.

use std::net::IpAddr;

use clusterdns_contract::Request;
use clusterdns_kubeindex::{LabelSelector, Snapshot};
use clusterdns_wire::{Rtype, parse_reverse};

use super::Kubernetes;
use super::names::{is_reverse, split_at};

/// What a client whose address is no single Pod's may resolve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unknown {
    /// Everything (nodes, host-network Pods, anything outside the cluster).
    Allow,
    /// Only the names of the allowed namespaces.
    Deny,
}

/// The `isolate` policy.
#[derive(Debug)]
pub(crate) struct Isolation {
    /// Namespaces every client may resolve, lowercase.
    pub(crate) allow: Vec<String>,
    /// `isolate_namespace_labels`: namespaces whose labels match any of
    /// these are every client's too.
    pub(crate) labels: Vec<LabelSelector>,
    pub(crate) unknown: Unknown,
}

/// Whom the client is, as far as the policy goes.
enum Client<'s> {
    /// Every Pod at its address is in this namespace.
    In(&'s str),
    /// No Pod at its address, or Pods of several namespaces (host-network
    /// Pods share their node's address).
    Unknown,
}

fn client_of(snap: &Snapshot, ip: IpAddr) -> Client<'_> {
    let mut ns: Option<&str> = None;
    for pod in snap.pods_at(ip.to_canonical()) {
        match ns {
            None => ns = Some(pod.namespace()),
            Some(n) if n == pod.namespace() => {}
            Some(_) => return Client::Unknown,
        }
    }
    ns.map_or(Client::Unknown, Client::In)
}

impl Isolation {
    /// Whether `client` may see the names of namespace `ns`.
    fn sees(&self, snap: &Snapshot, client: &Client<'_>, ns: &[u8]) -> bool {
        if self
            .allow
            .iter()
            .any(|a| a.as_bytes().eq_ignore_ascii_case(ns))
        {
            return true;
        }
        let own = match client {
            Client::In(own) => own.as_bytes().eq_ignore_ascii_case(ns),
            Client::Unknown => self.unknown == Unknown::Allow,
        };
        own || self.labelled(snap, ns)
    }

    /// Whether namespace `ns` exists with labels `isolate_namespace_labels`
    /// allows.
    fn labelled(&self, snap: &Snapshot, ns: &[u8]) -> bool {
        if self.labels.is_empty() {
            return false;
        }
        let Some(ns) = snap.namespace_bytes(ns) else {
            return false;
        };
        self.labels.iter().any(|sel| sel.matches(|k| ns.label(k)))
    }
}

impl Kubernetes {
    /// Whether `isolate` hides the query's name (in the zone starting at
    /// `off` of the lowercase name) from its client. A name hidden is
    /// one naming a namespace the client may not see; for PTR, an
    /// address any of whose names is in such a namespace. Names of no
    /// namespace (the apex, `ns.dns`, `dns-version`) are never hidden.
    pub(super) fn hidden(&self, req: &Request<'_>, snap: &Snapshot, off: usize) -> bool {
        let Some(iso) = &self.isolation else {
            return false;
        };
        let lower = req.qname_lower();
        if is_reverse(lower) {
            if req.qtype() != Rtype::PTR {
                return false;
            }
            let Some(ip) = parse_reverse(lower) else {
                return false;
            };
            let client = client_of(snap, req.client.ip());
            let mut hidden = false;
            self.ptr_targets(snap, ip, &mut |t| {
                hidden |= !iso.sees(snap, &client, t.namespace);
            });
            return hidden;
        }
        let s = split_at(req.qname(), lower, off);
        let Ok(parsed) = s.parsed() else {
            return false;
        };
        if parsed.namespace.is_empty() {
            return false;
        }
        !iso.sees(snap, &client_of(snap, req.client.ip()), parsed.namespace)
    }
}
