//! `clusterdns explain`'s account of a query: which zone, what the
//! labels read as, the objects of the snapshot behind the answer, and why
//! a name error is NXDOMAIN rather than NODATA. Cold path only.

use clusterdns_contract::Request;
use clusterdns_kubeindex::{Service, ServiceKind, Snapshot};
use clusterdns_wire::Rtype;

use super::Kubernetes;
use super::lookup::Found;
use super::lookup::PodMode;
use super::names::{PodOrSvc, split_at};
use super::plan::{Plan, family_of};
use super::zone::in_zone;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn describe_service(svc: &Service) -> String {
    let ips: Vec<String> = svc.cluster_ips().iter().map(ToString::to_string).collect();
    let kind = match svc.kind() {
        ServiceKind::ExternalName => format!(
            "ExternalName to {}",
            svc.external_name().unwrap_or("(no name)")
        ),
        _ if svc.is_headless() => "headless (answers are its ready endpoints)".to_string(),
        ServiceKind::ClusterIp => format!("ClusterIP {}", ips.join(", ")),
        ServiceKind::NodePort => format!("NodePort, ClusterIP {}", ips.join(", ")),
        ServiceKind::LoadBalancer => format!("LoadBalancer, ClusterIP {}", ips.join(", ")),
    };
    let ports: Vec<String> = svc
        .ports()
        .iter()
        .map(|p| {
            format!(
                "{}/{}{}",
                p.port(),
                p.protocol().as_str(),
                p.name().map(|n| format!(" ({n})")).unwrap_or_default()
            )
        })
        .collect();
    format!(
        "Service {}/{}: {kind}; ports {}",
        svc.namespace(),
        svc.name(),
        if ports.is_empty() {
            "none".to_string()
        } else {
            ports.join(", ")
        }
    )
}

impl Kubernetes {
    /// [`clusterdns_contract::Plugin::explain`].
    pub(super) fn explain_query(&self, req: &Request<'_>) -> Vec<String> {
        let lower = req.qname_lower();
        let Some((zone, off)) = self.zone_for(lower) else {
            let zones: Vec<String> = self.zones.iter().map(ToString::to_string).collect();
            return vec![format!(
                "{lower} is in none of its zones ({}): passed on",
                zones.join(" ")
            )];
        };
        let snap = self.snapshots.load();
        let c = snap.counts();
        let pods = if self.client_compact {
            format!("{} Pods in the compact index", c.compact_pods)
        } else {
            format!("{} Pods", c.pods)
        };
        let mut out = vec![format!(
            "zone {zone}; the index {} ({} Services, {} EndpointSlices with {} addresses, {pods}, \
             {} Namespaces)",
            if snap.synced() {
                "is synced"
            } else {
                "is NOT synced yet (a name not found is SERVFAIL until the first list completes)"
            },
            c.services,
            c.slices,
            c.endpoints,
            c.namespaces
        )];
        if self.no_aaaa && req.qtype() == Rtype::AAAA && !self.falls_through(lower) {
            out.push("no_aaaa: AAAA is NODATA at once, nothing is looked up".into());
            return out;
        }
        if self.hidden(req, &snap, off) {
            out.push(format!(
                "isolate: the name belongs to a namespace {} may not see, so it is answered as \
                 if it did not exist",
                req.client.ip()
            ));
        }
        let s = split_at(req.qname(), lower, off);
        match s.parsed() {
            Err(_) => out.push(
                "the labels left of the zone are not a cluster name (SERVICE.NAMESPACE.svc, \
                 ENDPOINT.SERVICE.NAMESPACE.svc, _PORT._PROTO.SERVICE.NAMESPACE.svc, \
                 IP.NAMESPACE.pod): the name does not exist"
                    .into(),
            ),
            Ok(p) => self.explain_parsed(&snap, &p, &mut out),
        }
        let qtype = req.qtype();
        let mut plan = self.plan(&snap, &s, qtype);
        if self.zone_filter(req, &snap, qtype, &mut plan) {
            self.explain_zone(req, &snap, qtype, &plan, &mut out);
        }
        out.push(match plan {
            Plan::NameError if self.falls_through(lower) => {
                "the name does not exist here: fallthrough passes it to the next plugin".into()
            }
            Plan::NameError => "so: NXDOMAIN (the name does not exist), with the zone's SOA".into(),
            Plan::NoData => format!(
                "so: NODATA (the name exists, but has no {qtype} records), with the zone's SOA"
            ),
            Plan::Addrs(found) => {
                let n = match found {
                    Found::Pod { ip, .. } => usize::from(family_of(qtype, ip)),
                    Found::ClusterIp { svc, .. } => svc
                        .cluster_ips()
                        .iter()
                        .filter(|ip| family_of(qtype, **ip))
                        .count(),
                    Found::Endpoints { eps, zone, .. } => eps
                        .ready()
                        .filter(|(_, e)| family_of(qtype, e.ip()))
                        .filter(|(_, e)| zone.is_none_or(|z| in_zone(e, z)))
                        .count(),
                    Found::External(svc) => {
                        return {
                            out.push(format!(
                                "so: a CNAME to {}, then its {qtype} records from the plugins after this one",
                                svc.external_name().unwrap_or("(no name)")
                            ));
                            out
                        };
                    }
                };
                if n == 0 {
                    format!(
                        "so: NODATA (the name exists; none of its addresses is {})",
                        if qtype == Rtype::AAAA { "IPv6" } else { "IPv4" }
                    )
                } else {
                    format!("so: {n} {qtype} record(s)")
                }
            }
            Plan::Srv(_) => "so: SRV records of the matching ports".into(),
            Plan::Cname(target) => format!("so: a CNAME to {target}"),
            Plan::Ptr { ip, .. } => format!("so: PTR records for {ip}"),
            Plan::NsAddrs => "so: the addresses of this DNS server (ns.dns)".into(),
            Plan::Version => "so: the schema version TXT record".into(),
            Plan::Soa => "so: the zone's SOA".into(),
            Plan::Ns => "so: the zone's NS record".into(),
        });
        out
    }

    /// `zone_aware` narrowed (or could have narrowed) a headless Service's
    /// answer: the client's zone and its source, and which endpoints stay.
    fn explain_zone(
        &self,
        req: &Request<'_>,
        snap: &Snapshot,
        qtype: Rtype,
        plan: &Plan<'_, '_>,
        out: &mut Vec<String>,
    ) {
        let (Some(za), Plan::Addrs(found) | Plan::Srv(found)) = (&self.zone_aware, plan) else {
            return;
        };
        let Found::Endpoints { eps, zone, .. } = found else {
            return;
        };
        out.push(format!(
            "zone_aware: {}",
            za.explain_client_zone(snap, req.client.ip())
        ));
        let fits = |ip| qtype == Rtype::SRV || family_of(qtype, ip);
        let ready: Vec<_> = eps.ready().filter(|(_, e)| fits(e.ip())).collect();
        let ips = |v: &[&clusterdns_kubeindex::Endpoint]| {
            v.iter()
                .map(|e| e.ip().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        out.push(match zone {
            Some(z) => {
                let kept: Vec<_> = ready
                    .iter()
                    .map(|(_, e)| *e)
                    .filter(|e| in_zone(e, z))
                    .collect();
                format!(
                    "zone_aware: kept the {} of {} ready endpoints meant for zone {z} \
                     (hints.forZones, else the endpoint's zone): {}",
                    kept.len(),
                    ready.len(),
                    ips(&kept)
                )
            }
            None => {
                let all: Vec<_> = ready.iter().map(|(_, e)| *e).collect();
                format!(
                    "zone_aware: every ready endpoint kept ({}): {}",
                    if za.client_zone_known(snap, req.client.ip()) {
                        "none of the asked family is meant for the client's zone"
                    } else {
                        "the client's zone is unknown"
                    },
                    ips(&all)
                )
            }
        });
    }

    fn explain_parsed(&self, snap: &Snapshot, p: &super::names::Parsed<'_>, out: &mut Vec<String>) {
        let ns = text(p.namespace);
        match p.kind {
            None => out.push("the zone apex, or svc/pod under it: names exist below".into()),
            Some(PodOrSvc::Pod) => {
                let mode = match self.opts.pods {
                    PodMode::Disabled => "disabled: Pod names do not exist",
                    PodMode::Insecure => "insecure: any address in an existing namespace",
                    PodMode::Verified => "verified: only a Pod with that address there",
                };
                out.push(format!(
                    "a Pod name: address {} in namespace {ns:?} (pods {mode})",
                    text(p.service)
                ));
            }
            Some(PodOrSvc::Svc) => {
                if p.namespace.is_empty() {
                    out.push("NAMESPACE.svc: a namespace, no Service named".into());
                    return;
                }
                if !self.opts.namespaces.is_empty()
                    && !self
                        .opts
                        .namespaces
                        .iter()
                        .any(|n| n.eq_ignore_ascii_case(&ns))
                {
                    out.push(format!(
                        "namespace {ns:?} is not among the exposed ones (`namespaces`)"
                    ));
                }
                let ns_known = if snap.namespaces_watched() {
                    if snap.namespace_bytes(p.namespace).is_some() {
                        "exists"
                    } else {
                        "does not exist"
                    }
                } else {
                    "is not followed (no Namespace objects)"
                };
                if p.service.is_empty() {
                    out.push(format!("namespace {ns:?} {ns_known}"));
                    return;
                }
                let name = text(p.service);
                let Some(svc) = snap.service_bytes(p.namespace, p.service) else {
                    out.push(format!(
                        "no Service {name:?} in namespace {ns:?} (the namespace {ns_known})"
                    ));
                    return;
                };
                out.push(describe_service(svc));
                if let Some(eps) = snap.endpoints(svc.namespace(), svc.name()) {
                    let ready = eps.ready().count();
                    let all = eps.iter().count();
                    let slices: Vec<&str> = eps.slices().iter().map(|s| s.name()).collect();
                    out.push(format!(
                        "EndpointSlices {}: {ready} of {all} addresses ready",
                        slices.join(", ")
                    ));
                } else {
                    out.push("no EndpointSlice for it".into());
                }
                if !p.endpoint.is_empty() {
                    out.push(format!("endpoint label {:?}", text(p.endpoint)));
                }
                if !p.port.is_empty() {
                    out.push(format!(
                        "port {:?}, protocol {:?}",
                        text(p.port),
                        text(p.protocol)
                    ));
                }
            }
        }
    }
}
