//! API object -> slim object. Reads only what DNS needs; everything else (managed fields,
//! annotations, status, specs of no interest) is never copied and goes when the raw object is
//! dropped right after conversion.
//!
//! Nothing here panics on API data: bad parts are skipped and reported through `skip`, bad
//! objects become a [`Skip`] that still carries the object's key when it has one, so that an
//! update to an invalid object removes the previous valid version instead of serving it.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::hooks::SkipReason;
use crate::model::{
    AddressType, Conditions, Endpoint, EndpointSlice, LEGACY_ZONE_LABEL, Namespace, Node, ObjKey,
    Pod, Port, Protocol, Service, ServiceExtra, ServiceKind, Topology, ZONE_LABEL,
};

/// Label naming an EndpointSlice's service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// Annotation with the time of the change that triggered an EndpointSlice update.
pub const TRIGGER_TIME_ANNOTATION: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// Longest DNS label.
const MAX_LABEL: usize = 63;
/// Longest object name the API allows (DNS subdomain).
const MAX_NAME: usize = 253;

/// An object that was not indexed.
#[derive(Debug)]
pub struct Skip {
    /// Its key, when it had a usable one: the index drops any previous version.
    pub(crate) key: Option<ObjKey>,
    pub(crate) reason: SkipReason,
}

/// Shares repeated strings (namespace, node and port names).
#[derive(Debug, Default)]
pub struct Interner {
    set: hashbrown::HashSet<Arc<str>>,
}

impl Interner {
    pub(crate) fn intern(&mut self, s: &str) -> Arc<str> {
        if let Some(found) = self.set.get(s) {
            return Arc::clone(found);
        }
        let new: Arc<str> = Arc::from(s);
        self.set.insert(Arc::clone(&new));
        new
    }

    /// Forgets strings nothing else holds.
    pub(crate) fn prune(&mut self) {
        self.set.retain(|s| Arc::strong_count(s) > 1);
        self.set.shrink_to_fit();
    }

    pub(crate) fn len(&self) -> usize {
        self.set.len()
    }
}

/// Reports a skipped part of an object.
pub type SkipFn<'a> = &'a mut dyn FnMut(SkipReason);

fn key_of(meta: &ObjectMeta, int: &mut Interner, max_name: usize) -> Result<ObjKey, Skip> {
    let (Some(ns), Some(name)) = (meta.namespace.as_deref(), meta.name.as_deref()) else {
        return Err(Skip {
            key: None,
            reason: SkipReason::MissingName,
        });
    };
    if ns.is_empty() || name.is_empty() {
        return Err(Skip {
            key: None,
            reason: SkipReason::MissingName,
        });
    }
    if ns.len() > MAX_LABEL || name.len() > MAX_NAME {
        return Err(Skip {
            key: None,
            reason: SkipReason::NameTooLong,
        });
    }
    let key = ObjKey {
        namespace: int.intern(ns),
        name: Arc::from(name),
    };
    if name.len() > max_name {
        return Err(Skip {
            key: Some(key),
            reason: SkipReason::NameTooLong,
        });
    }
    Ok(key)
}

fn parse_ip(s: &str, skip: SkipFn<'_>) -> Option<IpAddr> {
    match s.parse::<IpAddr>() {
        Ok(ip) => Some(ip),
        Err(_) => {
            tracing::debug!(address = %s.escape_debug(), "skipping invalid IP address");
            skip(SkipReason::InvalidIp);
            None
        }
    }
}

fn port(
    name: Option<&str>,
    protocol: Option<&str>,
    number: Option<i32>,
    int: &mut Interner,
    skip: SkipFn<'_>,
) -> Option<Port> {
    let protocol = match protocol {
        None => Some(Protocol::Tcp),
        Some(p) => Protocol::parse(p),
    };
    let number = number
        .and_then(|n| u16::try_from(n).ok())
        .filter(|n| *n != 0);
    let (Some(protocol), Some(number)) = (protocol, number) else {
        skip(SkipReason::InvalidPort);
        return None;
    };
    Some(Port {
        name: name.filter(|n| !n.is_empty()).map(|n| int.intern(n)),
        protocol,
        port: number,
    })
}

fn ports<T>(
    items: &[T],
    int: &mut Interner,
    skip: SkipFn<'_>,
    fields: impl Fn(&T) -> (Option<&str>, Option<&str>, Option<i32>),
) -> Box<[Port]> {
    items
        .iter()
        .filter_map(|p| {
            let (name, protocol, number) = fields(p);
            port(name, protocol, number, int, skip)
        })
        .collect()
}

/// Converts a Service.
pub(crate) fn service(
    svc: &core::Service,
    int: &mut Interner,
    skip: SkipFn<'_>,
) -> Result<Service, Skip> {
    let key = key_of(&svc.metadata, int, MAX_LABEL)?;
    let spec = svc.spec.as_ref();
    let kind = match spec.and_then(|s| s.type_.as_deref()) {
        None | Some("ClusterIP") => ServiceKind::ClusterIp,
        Some("NodePort") => ServiceKind::NodePort,
        Some("LoadBalancer") => ServiceKind::LoadBalancer,
        Some("ExternalName") => ServiceKind::ExternalName,
        Some(other) => {
            tracing::debug!(service = %key.name, namespace = %key.namespace, r#type = %other.escape_debug(), "unknown service type, treated as ClusterIP");
            ServiceKind::ClusterIp
        }
    };
    let ip_strings: Vec<&str> = match spec {
        Some(s) => match (&s.cluster_ips, &s.cluster_ip) {
            (Some(ips), _) if !ips.is_empty() => ips.iter().map(String::as_str).collect(),
            (_, Some(ip)) => vec![ip.as_str()],
            _ => Vec::new(),
        },
        None => Vec::new(),
    };
    let headless = ip_strings.first().is_some_and(|ip| *ip == "None");
    let cluster_ips: Box<[IpAddr]> = if headless || kind == ServiceKind::ExternalName {
        Box::default()
    } else {
        ip_strings
            .iter()
            .filter(|s| !s.is_empty())
            .filter_map(|s| parse_ip(s, skip))
            .collect()
    };
    let raw_ports = spec.and_then(|s| s.ports.as_deref()).unwrap_or_default();
    let ports = ports(raw_ports, int, skip, |p: &core::ServicePort| {
        (p.name.as_deref(), p.protocol.as_deref(), Some(p.port))
    });

    let mut extra = ServiceExtra::default();
    if kind == ServiceKind::ExternalName {
        extra.external_name = spec
            .and_then(|s| s.external_name.as_deref())
            .filter(|n| !n.is_empty())
            .map(Box::from);
    }
    let mut external_ips: Vec<IpAddr> = spec
        .and_then(|s| s.external_ips.as_deref())
        .unwrap_or_default()
        .iter()
        .filter_map(|s| parse_ip(s, skip))
        .collect();
    let mut hostnames = Vec::new();
    let ingress = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_deref())
        .unwrap_or_default();
    for ing in ingress {
        if let Some(ip) = ing.ip.as_deref().and_then(|s| parse_ip(s, skip)) {
            external_ips.push(ip);
        }
        if let Some(h) = ing.hostname.as_deref().filter(|h| !h.is_empty()) {
            hostnames.push(Box::from(h));
        }
    }
    extra.external_ips = external_ips.into();
    extra.external_hostnames = hostnames.into();

    Ok(Service {
        namespace: key.namespace,
        name: key.name,
        kind,
        headless,
        publish_not_ready: spec
            .and_then(|s| s.publish_not_ready_addresses)
            .unwrap_or(false),
        has_selector: spec
            .and_then(|s| s.selector.as_ref())
            .is_some_and(|s| !s.is_empty()),
        cluster_ips,
        ports,
        extra: (extra != ServiceExtra::default()).then(|| Box::new(extra)),
    })
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_LABEL
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Converts an EndpointSlice; also returns its last-change trigger time.
pub(crate) fn endpoint_slice(
    slice: &discovery::EndpointSlice,
    int: &mut Interner,
    skip: SkipFn<'_>,
) -> Result<(EndpointSlice, Option<SystemTime>), Skip> {
    let key = key_of(&slice.metadata, int, MAX_NAME)?;
    let service = slice
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(SERVICE_NAME_LABEL))
        .filter(|s| !s.is_empty());
    let Some(service) = service else {
        return Err(Skip {
            key: Some(key),
            reason: SkipReason::NoServiceLabel,
        });
    };
    if service.len() > MAX_LABEL {
        return Err(Skip {
            key: Some(key),
            reason: SkipReason::NameTooLong,
        });
    }
    let address_type = match slice.address_type.as_str() {
        "IPv4" => AddressType::V4,
        "IPv6" => AddressType::V6,
        _ => AddressType::Fqdn,
    };
    let mut endpoints = Vec::with_capacity(slice.endpoints.len());
    let mut topologies = Vec::new();
    for ep in &slice.endpoints {
        let cond = ep.conditions.as_ref();
        let conditions = Conditions::new(
            cond.and_then(|c| c.ready),
            cond.and_then(|c| c.serving),
            cond.and_then(|c| c.terminating),
        );
        let hostname = match ep.hostname.as_deref() {
            Some(h) if is_dns_label(h) => Some(Box::from(h)),
            Some(_) => {
                skip(SkipReason::InvalidHostname);
                None
            }
            None => None,
        };
        let target_pod = ep
            .target_ref
            .as_ref()
            .filter(|r| r.kind.as_deref().is_none_or(|k| k == "Pod"))
            .and_then(|r| r.name.as_deref())
            .filter(|n| !n.is_empty() && n.len() <= MAX_LABEL)
            .map(Box::from);
        let node_name = ep
            .node_name
            .as_deref()
            .filter(|n| !n.is_empty() && n.len() <= MAX_NAME)
            .map(|n| int.intern(n));
        let topology = topology(ep, int, &mut topologies);
        for addr in &ep.addresses {
            let Some(ip) = parse_ip(addr, skip) else {
                continue;
            };
            endpoints.push(Endpoint {
                ip,
                conditions,
                hostname: hostname.clone(),
                node_name: node_name.clone(),
                target_pod: target_pod.clone(),
                topology: topology.clone(),
            });
        }
    }
    let ports = ports(slice.ports.as_deref().unwrap_or_default(), int, skip, |p| {
        (p.name.as_deref(), p.protocol.as_deref(), p.port)
    });
    let trigger = slice
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(TRIGGER_TIME_ANNOTATION))
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .and_then(|t| u64::try_from(t.as_nanosecond()).ok())
        .map(|ns| UNIX_EPOCH + Duration::from_nanos(ns));
    Ok((
        EndpointSlice {
            namespace: key.namespace,
            name: key.name,
            service: Arc::from(service.as_str()),
            address_type,
            endpoints: endpoints.into(),
            ports,
        },
        trigger,
    ))
}

/// An endpoint's zone and hints, the same `Arc` as an earlier endpoint's of the slice
/// (in `seen`) that has the same; `None` when it has neither.
fn topology(
    ep: &discovery::Endpoint,
    int: &mut Interner,
    seen: &mut Vec<Arc<Topology>>,
) -> Option<Arc<Topology>> {
    let zone = ep
        .zone
        .as_deref()
        .filter(|z| !z.is_empty())
        .map(|z| int.intern(z));
    let for_zones: Box<[Arc<str>]> = ep
        .hints
        .as_ref()
        .and_then(|h| h.for_zones.as_deref())
        .unwrap_or_default()
        .iter()
        .filter(|z| !z.name.is_empty())
        .map(|z| int.intern(&z.name))
        .collect();
    if zone.is_none() && for_zones.is_empty() {
        return None;
    }
    let t = Topology { zone, for_zones };
    if let Some(same) = seen.iter().find(|s| ***s == t) {
        return Some(Arc::clone(same));
    }
    let t = Arc::new(t);
    seen.push(Arc::clone(&t));
    Some(t)
}

/// Converts a Pod. Pods that are deleting, finished, or have no IP are skips (with their key).
pub(crate) fn pod(pod: &core::Pod, int: &mut Interner, skip: SkipFn<'_>) -> Result<Pod, Skip> {
    let key = key_of(&pod.metadata, int, MAX_NAME)?;
    let status = pod.status.as_ref();
    let finished = matches!(
        status.and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed" | "Unknown")
    );
    let without_ip = |key| Skip {
        key: Some(key),
        reason: SkipReason::PodWithoutIp,
    };
    if finished || pod.metadata.deletion_timestamp.is_some() {
        return Err(without_ip(key));
    }
    let mut ips: Vec<IpAddr> = Vec::with_capacity(2);
    let primary = status
        .and_then(|s| s.pod_ip.as_deref())
        .filter(|s| !s.is_empty());
    if let Some(ip) = primary {
        ips.extend(parse_ip(ip, skip));
    }
    for ip in status
        .and_then(|s| s.pod_ips.as_deref())
        .unwrap_or_default()
    {
        if Some(ip.ip.as_str()) == primary {
            continue;
        }
        if let Some(ip) = parse_ip(&ip.ip, skip)
            && !ips.contains(&ip)
        {
            ips.push(ip);
        }
    }
    let Some(&ip) = ips.first() else {
        return Err(without_ip(key));
    };
    let ip2 = ips
        .iter()
        .copied()
        .find(|other| other.is_ipv4() != ip.is_ipv4());
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty() && n.len() <= MAX_NAME)
        .map(|n| int.intern(n));
    Ok(Pod {
        namespace: key.namespace,
        name: key.name,
        ip,
        ip2,
        node,
    })
}

/// Converts a Node: its name and zone label.
pub(crate) fn node(node: &core::Node, int: &mut Interner) -> Result<Node, Skip> {
    let Some(name) = node.metadata.name.as_deref().filter(|n| !n.is_empty()) else {
        return Err(Skip {
            key: None,
            reason: SkipReason::MissingName,
        });
    };
    if name.len() > MAX_NAME {
        return Err(Skip {
            key: Some(ObjKey {
                namespace: int.intern(""),
                name: Arc::from(name),
            }),
            reason: SkipReason::NameTooLong,
        });
    }
    let labels = node.metadata.labels.as_ref();
    let zone = labels
        .and_then(|l| l.get(ZONE_LABEL).or_else(|| l.get(LEGACY_ZONE_LABEL)))
        .filter(|z| !z.is_empty())
        .map(|z| int.intern(z));
    Ok(Node {
        name: int.intern(name),
        zone,
    })
}

/// Converts a Namespace.
pub(crate) fn namespace(ns: &core::Namespace, int: &mut Interner) -> Result<Namespace, Skip> {
    let Some(name) = ns.metadata.name.as_deref().filter(|n| !n.is_empty()) else {
        return Err(Skip {
            key: None,
            reason: SkipReason::MissingName,
        });
    };
    if name.len() > MAX_LABEL {
        // Keyed, so that the index forgets any earlier version (names can't change, but a
        // YAML reload can hold anything).
        return Err(Skip {
            key: Some(ObjKey {
                namespace: int.intern(""),
                name: Arc::from(name),
            }),
            reason: SkipReason::NameTooLong,
        });
    }
    let labels = ns
        .metadata
        .labels
        .iter()
        .flatten()
        .map(|(k, v)| (Box::from(k.as_str()), Box::from(v.as_str())))
        .collect();
    Ok(Namespace {
        name: int.intern(name),
        labels,
    })
}
