//! Zone transfers of the cluster zone (CoreDNS's `kubernetes/xfr.go`):
//! the SOA, the apex NS records and their addresses, then per service
//! (sorted by name) its A/AAAA and SRV records (ClusterIP, NodePort and
//! LoadBalancer services), its endpoints' records (headless ones) or its
//! CNAME (ExternalName), then the SOA again. Pods and reverse records are
//! not sent, as in CoreDNS. A slow path: records are built owned.

use std::net::IpAddr;

use clusterdns_contract::transfer::{TransferError, Transferer};
use clusterdns_kubeindex::{Service, ServiceKind, Snapshot};
use clusterdns_wire::{Name, Record, RecordData};

use super::Kubernetes;
use super::lookup::{EpLabel, Target, host_ip};
use super::names::{HOSTMASTER, NS_DNS, join_wire, split_at};

impl Transferer for Kubernetes {
    fn transfer(
        &self,
        zone: &Name,
        serial: u32,
        out: &mut dyn FnMut(&Record),
    ) -> Result<(), TransferError> {
        // Any name in the zones, as CoreDNS's `plugin.Zones.Matches`: the
        // records are then named under that name.
        if self.zone_for(zone).is_none() {
            return Err(TransferError::NotAuthoritative);
        }
        let snap = self.snapshots.load_full();
        let soa = self
            .soa_record(zone, &snap)
            .ok_or(TransferError::NotAuthoritative)?;
        out(&soa);
        if serial != 0 && snap.serial() == serial {
            return Ok(());
        }
        self.ns_records(zone, &snap, out);
        let mut services: Vec<&Service> = snap
            .services()
            .filter(|s| self.opts.namespace_exposed(&snap, s.namespace().as_bytes()))
            .collect();
        services.sort_by(|a, b| a.name().cmp(b.name()));
        for svc in services {
            self.service_records(zone, &snap, svc, out);
        }
        out(&soa);
        Ok(())
    }
}

impl Kubernetes {
    fn soa_record(&self, zone: &Name, snap: &Snapshot) -> Option<Record> {
        let (mut m, mut r) = ([0u8; 255], [0u8; 255]);
        let mname = Name::from_uncompressed(join_wire(&mut m, NS_DNS, zone.as_wire())?).ok()?;
        let rname = Name::from_uncompressed(join_wire(&mut r, HOSTMASTER, zone.as_wire())?).ok()?;
        Some(Record::new(
            *zone,
            self.ttl.min(300),
            RecordData::Soa {
                mname,
                rname,
                serial: snap.serial(),
                refresh: 7200,
                retry: 1800,
                expire: 86400,
                minimum: self.ttl,
            },
        ))
    }

    /// One NS record per name server name, then every name server address.
    fn ns_records(&self, zone: &Name, snap: &Snapshot, out: &mut dyn FnMut(&Record)) {
        let s = split_at(zone, zone, 0);
        let mut addrs = Vec::new();
        self.ns_addrs(snap, &mut |n, ip| {
            if let Some(name) = self.ns_name(n, &s) {
                addrs.push((name, host_ip(ip)));
            }
        });
        let mut hosts: Vec<Name> = Vec::new();
        for (name, _) in &addrs {
            if !hosts.contains(name) {
                hosts.push(*name);
                out(&Record::new(*zone, self.ttl, RecordData::Ns(*name)));
            }
        }
        for (name, ip) in addrs {
            out(&self.addr_record(name, ip));
        }
    }

    fn addr_record(&self, name: Name, ip: IpAddr) -> Record {
        let data = match host_ip(ip) {
            IpAddr::V4(v4) => RecordData::A(v4),
            IpAddr::V6(v6) => RecordData::Aaaa(v6),
        };
        Record::new(name, self.ttl, data)
    }

    fn service_records(
        &self,
        zone: &Name,
        snap: &Snapshot,
        svc: &Service,
        out: &mut dyn FnMut(&Record),
    ) {
        let zw = zone.as_wire();
        let base = Target {
            label: None,
            name: svc.name().as_bytes(),
            namespace: svc.namespace().as_bytes(),
            kind: b"svc",
        };
        let Some(svc_name) = base.name(zw) else {
            return;
        };
        // `_name._proto.` + the service (or endpoint) name.
        let srv_owner = |port: &str, proto: &str| -> Option<Name> {
            let p = format!("_{}", port.to_ascii_lowercase());
            let t = format!("_{}", proto.to_ascii_lowercase());
            svc_name
                .prepend_label(t.as_bytes())
                .ok()?
                .prepend_label(p.as_bytes())
                .ok()
        };
        let srv = |owner: Name, weight: u16, port: u16, target: Name| {
            Record::new(
                owner,
                self.ttl,
                RecordData::Srv {
                    priority: 0,
                    weight,
                    port,
                    target,
                },
            )
        };
        match svc.kind() {
            ServiceKind::ExternalName => {
                // Only a name makes a CNAME (an address there does not).
                let Some(ext) = svc.external_name() else {
                    return;
                };
                if ext.parse::<IpAddr>().is_ok() {
                    return;
                }
                if let Ok(t) = Name::from_ascii(ext) {
                    out(&Record::new(svc_name, self.ttl, RecordData::Cname(t)));
                }
            }
            _ if !svc.is_headless() && !svc.cluster_ips().is_empty() => {
                for ip in svc.cluster_ips() {
                    out(&self.addr_record(svc_name, *ip));
                }
                for p in svc.ports() {
                    out(&srv(svc_name, 100, p.port(), svc_name));
                    let Some(name) = p.name().filter(|n| !n.is_empty()) else {
                        continue;
                    };
                    if let Some(owner) = srv_owner(name, p.protocol().as_str()) {
                        out(&srv(owner, 100, p.port(), svc_name));
                    }
                }
            }
            _ => {
                let Some(eps) = snap.endpoints(svc.namespace(), svc.name()) else {
                    return;
                };
                for slice in eps.slices() {
                    let ready: Vec<_> = slice.endpoints().iter().filter(|e| e.is_ready()).collect();
                    let weight = srv_weight(ready.len());
                    for ep in ready {
                        out(&self.addr_record(svc_name, ep.ip()));
                        let t = Target {
                            label: Some(EpLabel::of(ep, self.opts.pod_names)),
                            ..base
                        };
                        let Some(host) = t.name(zw) else { continue };
                        out(&self.addr_record(host, ep.ip()));
                        for p in slice.ports() {
                            let Some(name) = p.name().filter(|n| !n.is_empty()) else {
                                continue;
                            };
                            if let Some(owner) = srv_owner(name, p.protocol().as_str()) {
                                out(&srv(owner, weight, p.port(), host));
                            }
                        }
                    }
                }
            }
        }
    }
}

/// CoreDNS's `calcSRVWeight`: each of `n` equal records gets 100/n of
/// 100, rounded down (at least 1), computed in floating point as it does.
fn srv_weight(n: usize) -> u16 {
    if n == 0 {
        return 1;
    }
    // Precision: n is a count of endpoints, far below 2^52.
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let w = ((100.0 / (100.0 * n as f64)) * 100.0).floor() as u16;
    w.max(1)
}

#[cfg(test)]
mod tests {
    #[test]
    fn srv_weights_as_coredns() {
        let w: Vec<u16> = [1, 2, 3, 4, 5, 7, 10, 101, 1000]
            .into_iter()
            .map(super::srv_weight)
            .collect();
        assert_eq!(w, [100, 50, 33, 25, 20, 14, 10, 1, 1]);
    }
}
