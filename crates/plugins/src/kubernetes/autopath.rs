//! The search path of a query's client for *autopath* (CoreDNS
//! `Kubernetes.AutoPath`): the namespace of the Pod at the client's
//! address, with `pods verified` only.

use clusterdns_contract::{AutoPather, Request};
use clusterdns_wire::Name;

use super::Kubernetes;
use super::lookup::PodMode;

impl AutoPather for Kubernetes {
    fn auto_path(&self, req: &Request<'_>, out: &mut Vec<Name>) {
        let Some((zone, _)) = self.zone_for(req.qname_lower()) else {
            return;
        };
        let ip = req.client.ip();
        let snap = self.snapshots.load();
        let namespace = if self.opts.pods == PodMode::Verified {
            // CoreDNS indexes pods by `status.podIP` only.
            snap.pods_at(ip)
                .find(|p| p.primary_ip() == ip)
                .map(|p| p.namespace())
        } else if self.client_compact {
            super::compact::client_namespace(&snap, ip)
        } else {
            None
        };
        let Some(namespace) = namespace else {
            return;
        };
        let Ok(svc) = zone.prepend_label(b"svc") else {
            return;
        };
        let Ok(ns) = svc.prepend_label(namespace.as_bytes()) else {
            return;
        };
        out.extend([ns.to_lowercase(), svc, *zone]);
        out.extend_from_slice(&self.host_search);
        out.push(Name::root());
    }
}
