//! The search path of a query's client for *autopath* (CoreDNS
//! `Kubernetes.AutoPath`): the namespace of the Pod at the client's
//! address, with `pods verified` only.

use clusterdns_plugin::{AutoPather, Request};
use clusterdns_wire::Name;

use super::Kubernetes;
use super::lookup::PodMode;

impl AutoPather for Kubernetes {
    fn auto_path(&self, req: &Request<'_>, out: &mut Vec<Name>) {
        let Some((zone, _)) = self.zone_for(req.qname_lower()) else {
            return;
        };
        if self.opts.pods != PodMode::Verified {
            return;
        }
        let ip = req.client.ip();
        let snap = self.snapshots.load();
        // CoreDNS indexes pods by `status.podIP` only.
        let Some(pod) = snap.pods_at(ip).find(|p| p.primary_ip() == ip) else {
            return;
        };
        let Ok(svc) = zone.prepend_label(b"svc") else {
            return;
        };
        let Ok(ns) = svc.prepend_label(pod.namespace().as_bytes()) else {
            return;
        };
        out.extend([ns.to_lowercase(), svc, *zone]);
        out.extend_from_slice(&self.host_search);
        out.push(Name::root());
    }
}
