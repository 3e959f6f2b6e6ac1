//! Builders for API objects, as the API server would send them.
#![allow(dead_code)]

use std::collections::BTreeMap;

use clusterdns_kubeindex::k8s_openapi::api::core::v1::ObjectReference;
use clusterdns_kubeindex::k8s_openapi::api::core::v1::{
    Namespace, Pod, PodIP, PodStatus, Service, ServicePort, ServiceSpec,
};
use clusterdns_kubeindex::k8s_openapi::api::discovery::v1::{
    Endpoint, EndpointConditions, EndpointPort, EndpointSlice,
};
use clusterdns_kubeindex::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub fn meta(ns: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: (!ns.is_empty()).then(|| ns.to_owned()),
        ..ObjectMeta::default()
    }
}

/// A ClusterIP service (`ips[0] == "None"` for headless) with `(name, protocol, port)` ports.
pub fn svc(ns: &str, name: &str, ips: &[&str], ports: &[(&str, &str, i32)]) -> Service {
    Service {
        metadata: meta(ns, name),
        spec: Some(ServiceSpec {
            cluster_ip: ips.first().map(|s| (*s).to_owned()),
            cluster_ips: Some(ips.iter().map(|s| (*s).to_owned()).collect()),
            ports: Some(
                ports
                    .iter()
                    .map(|(n, p, port)| ServicePort {
                        name: (!n.is_empty()).then(|| (*n).to_owned()),
                        protocol: Some((*p).to_owned()),
                        port: *port,
                        ..ServicePort::default()
                    })
                    .collect(),
            ),
            selector: Some(BTreeMap::from([("app".to_owned(), name.to_owned())])),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

pub fn external(ns: &str, name: &str, target: &str) -> Service {
    Service {
        metadata: meta(ns, name),
        spec: Some(ServiceSpec {
            type_: Some("ExternalName".to_owned()),
            external_name: Some(target.to_owned()),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// One endpoint: address, ready condition, hostname, target pod.
#[derive(Clone, Default)]
pub struct Ep {
    pub ip: &'static str,
    pub ready: Option<bool>,
    pub serving: Option<bool>,
    pub terminating: Option<bool>,
    pub hostname: Option<&'static str>,
    pub pod: Option<&'static str>,
}

pub fn ep(ip: &'static str) -> Ep {
    Ep {
        ip,
        ..Ep::default()
    }
}

pub fn endpoint(e: &Ep) -> Endpoint {
    Endpoint {
        addresses: vec![e.ip.to_owned()],
        conditions: Some(EndpointConditions {
            ready: e.ready,
            serving: e.serving,
            terminating: e.terminating,
        }),
        hostname: e.hostname.map(str::to_owned),
        node_name: Some("node-1".to_owned()),
        target_ref: e.pod.map(|p| ObjectReference {
            kind: Some("Pod".to_owned()),
            name: Some(p.to_owned()),
            ..ObjectReference::default()
        }),
        ..Endpoint::default()
    }
}

pub fn slice_with(
    ns: &str,
    name: &str,
    service: &str,
    address_type: &str,
    endpoints: Vec<Endpoint>,
    ports: &[(&str, &str, i32)],
) -> EndpointSlice {
    let mut m = meta(ns, name);
    m.labels = Some(BTreeMap::from([(
        "kubernetes.io/service-name".to_owned(),
        service.to_owned(),
    )]));
    EndpointSlice {
        metadata: m,
        address_type: address_type.to_owned(),
        endpoints,
        ports: Some(
            ports
                .iter()
                .map(|(n, p, port)| EndpointPort {
                    name: Some((*n).to_owned()),
                    protocol: Some((*p).to_owned()),
                    port: Some(*port),
                    ..EndpointPort::default()
                })
                .collect(),
        ),
    }
}

pub fn slice(
    ns: &str,
    name: &str,
    service: &str,
    eps: &[Ep],
    ports: &[(&str, &str, i32)],
) -> EndpointSlice {
    let v6 = eps.first().is_some_and(|e| e.ip.contains(':'));
    slice_with(
        ns,
        name,
        service,
        if v6 { "IPv6" } else { "IPv4" },
        eps.iter().map(endpoint).collect(),
        ports,
    )
}

pub fn pod(ns: &str, name: &str, ips: &[&str]) -> Pod {
    Pod {
        metadata: meta(ns, name),
        status: Some(PodStatus {
            phase: Some("Running".to_owned()),
            pod_ip: ips.first().map(|s| (*s).to_owned()),
            pod_ips: Some(
                ips.iter()
                    .map(|s| PodIP {
                        ip: (*s).to_owned(),
                    })
                    .collect(),
            ),
            ..PodStatus::default()
        }),
        ..Pod::default()
    }
}

pub fn ns(name: &str, labels: &[(&str, &str)]) -> Namespace {
    let mut m = meta("", name);
    m.labels = Some(
        labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    );
    Namespace {
        metadata: m,
        ..Namespace::default()
    }
}

pub fn ip(s: &str) -> std::net::IpAddr {
    s.parse().expect("test IP")
}

/// A watch of the objects and namespaces labelled `tag` (list then
/// watch, no streaming lists), once it has synced: `what` names it when
/// it does not within 15 s.
pub async fn synced_watch(
    client: kube::Client,
    tag: &str,
    what: &str,
) -> clusterdns_kubeindex::Watch {
    let config = clusterdns_kubeindex::WatchConfig {
        labels: Some(tag.to_string()),
        namespace_labels: Some(tag.to_string()),
        streaming_lists: false,
        ..clusterdns_kubeindex::WatchConfig::default()
    };
    let watch = clusterdns_kubeindex::Watch::spawn(
        client,
        &config,
        std::sync::Arc::new(clusterdns_kubeindex::NoHooks),
    );
    assert!(
        watch
            .snapshots()
            .wait_synced(std::time::Duration::from_secs(15))
            .await,
        "{what}: no sync"
    );
    watch
}
