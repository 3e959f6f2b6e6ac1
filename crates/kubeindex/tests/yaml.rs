//! The offline YAML source.

use std::sync::Arc;

use clusterdns_kubeindex::{Counters, Index, Kind, ReverseHit, SkipReason, yaml};

/// What `kubectl get ns,svc,endpointslices,pods -A -o yaml` prints (trimmed).
const KUBECTL_LIST: &str = r#"
apiVersion: v1
items:
- apiVersion: v1
  kind: Namespace
  metadata:
    labels:
      kubernetes.io/metadata.name: default
    name: default
    resourceVersion: "15"
    uid: 6f2c1f9e-0000-4000-8000-000000000001
  spec:
    finalizers: [kubernetes]
  status:
    phase: Active
- apiVersion: v1
  kind: Namespace
  metadata:
    name: kube-system
- apiVersion: v1
  kind: Service
  metadata:
    creationTimestamp: "2026-01-01T00:00:00Z"
    labels:
      component: apiserver
      provider: kubernetes
    managedFields:
    - apiVersion: v1
      fieldsType: FieldsV1
      fieldsV1:
        f:spec:
          f:ports: {}
      manager: kube-apiserver
      operation: Update
      time: "2026-01-01T00:00:00Z"
    name: kubernetes
    namespace: default
    resourceVersion: "200"
  spec:
    clusterIP: 10.96.0.1
    clusterIPs: [10.96.0.1]
    internalTrafficPolicy: Cluster
    ipFamilies: [IPv4]
    ipFamilyPolicy: SingleStack
    ports:
    - name: https
      port: 443
      protocol: TCP
      targetPort: 6443
    sessionAffinity: None
    type: ClusterIP
  status:
    loadBalancer: {}
- apiVersion: v1
  kind: Service
  metadata:
    name: kube-dns
    namespace: kube-system
  spec:
    clusterIP: 10.96.0.10
    ports:
    - {name: dns, port: 53, protocol: UDP, targetPort: 53}
    - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}
    selector:
      k8s-app: kube-dns
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  addressType: IPv4
  endpoints:
  - addresses: [10.244.0.5]
    conditions: {ready: true, serving: true, terminating: false}
    nodeName: node-1
    targetRef: {kind: Pod, name: coredns-abc, namespace: kube-system}
  metadata:
    annotations:
      endpoints.kubernetes.io/last-change-trigger-time: "2026-01-01T00:00:00Z"
    labels:
      kubernetes.io/service-name: kube-dns
    name: kube-dns-x7k2p
    namespace: kube-system
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
- apiVersion: v1
  kind: Pod
  metadata:
    name: coredns-abc
    namespace: kube-system
  spec:
    containers:
    - name: coredns
      image: coredns/coredns:1.14.7
  status:
    phase: Running
    podIP: 10.244.0.5
    podIPs:
    - ip: 10.244.0.5
- apiVersion: apps/v1
  kind: Deployment
  metadata:
    name: coredns
    namespace: kube-system
kind: List
metadata:
  resourceVersion: ""
"#;

#[test]
fn kubectl_list_output() {
    let mut index = Index::new();
    let report = yaml::load_str(&mut index, KUBECTL_LIST).unwrap();
    assert_eq!(
        report,
        yaml::LoadReport {
            services: 2,
            endpoint_slices: 1,
            pods: 1,
            namespaces: 2,
            nodes: 0,
            ignored: 1,
            undecodable: 0,
        }
    );
    let snapshots = index.snapshots();
    assert!(snapshots.is_synced());
    let snap = snapshots.load();
    assert!(snap.namespaces_watched());
    assert_eq!(
        snap.service("default", "kubernetes").unwrap().cluster_ips()[0].to_string(),
        "10.96.0.1"
    );
    let dns = snap.service("kube-system", "kube-dns").unwrap();
    assert_eq!(dns.ports().len(), 2);
    let eps = snap.endpoints("kube-system", "kube-dns").unwrap();
    assert_eq!(eps.ready().count(), 1);
    assert!(eps.last_change().is_some());
    let hit = snap.reverse("10.244.0.5".parse().unwrap()).next().unwrap();
    assert!(matches!(
        hit,
        ReverseHit::Endpoint {
            service: "kube-dns",
            ..
        }
    ));
    assert_eq!(
        snap.pod("kube-system", "10.244.0.5".parse().unwrap())
            .unwrap()
            .name(),
        "coredns-abc"
    );
    assert_eq!(
        snap.namespace("default")
            .unwrap()
            .label("kubernetes.io/metadata.name"),
        Some("default")
    );
}

#[test]
fn multi_document_objects_and_reload() {
    let docs = r#"
apiVersion: v1
kind: Namespace
metadata: {name: demo}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: demo}
spec: {clusterIP: None, ports: [{name: http, port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: demo
  labels: {kubernetes.io/service-name: web}
addressType: IPv6
endpoints:
- addresses: ["fd00::1"]
  hostname: web-0
ports: [{name: http, port: 80}]
---
# an empty document
---
apiVersion: v1
kind: ServiceList
items:
- apiVersion: v1
  kind: Service
  metadata: {name: db, namespace: demo}
  spec: {clusterIP: 10.0.0.20}
"#;
    let counters = Arc::new(Counters::default());
    let mut index = Index::with_hooks(counters.clone());
    let report = yaml::load_str(&mut index, docs).unwrap();
    assert_eq!(report.services, 2);
    assert_eq!(report.endpoint_slices, 1);
    let snapshots = index.snapshots();
    {
        let snap = snapshots.load();
        assert!(snap.service("demo", "web").unwrap().is_headless());
        let (_, e) = snap
            .endpoints("demo", "web")
            .unwrap()
            .iter()
            .next()
            .unwrap();
        assert_eq!(e.hostname(), Some("web-0"));
        assert_eq!(snap.generation(), 1);
    }

    // Reload with one service less: it goes, the rest stays.
    let fewer = docs
        .replace("kind: ServiceList", "kind: List")
        .replace("name: db,", "name: db2,");
    yaml::load_str(&mut index, &fewer).unwrap();
    let snap = snapshots.load();
    assert!(snap.service("demo", "db").is_none());
    assert!(snap.service("demo", "db2").is_some());
    assert!(snap.service("demo", "web").is_some());
    assert_eq!(counters.skipped(Kind::Service, SkipReason::Undecodable), 0);
}

#[test]
fn bad_documents_are_skipped_syntax_errors_change_nothing() {
    let mut index = Index::new();
    yaml::load_str(
        &mut index,
        "apiVersion: v1\nkind: Service\nmetadata: {name: a, namespace: x}\nspec: {clusterIP: 10.0.0.1}\n",
    )
    .unwrap();
    // A Service whose ports is not a list, a Pod with a wrong apiVersion, a scalar document.
    let bad = r#"
apiVersion: v1
kind: Service
metadata: {name: b, namespace: x}
spec: {ports: 7}
---
apiVersion: v2
kind: Pod
metadata: {name: p, namespace: x}
---
just a string
---
apiVersion: v1
kind: Service
metadata: {name: c, namespace: x}
spec: {clusterIP: 10.0.0.3}
"#;
    let report = yaml::load_str(&mut index, bad).unwrap();
    assert_eq!(report.undecodable, 2);
    assert_eq!(report.ignored, 1);
    assert_eq!(report.services, 1);
    let snapshots = index.snapshots();
    assert!(snapshots.load().service("x", "c").is_some());
    assert!(snapshots.load().service("x", "a").is_none());
    assert!(
        !snapshots.load().namespaces_watched(),
        "no Namespace objects in the YAML"
    );

    let generation = snapshots.load().generation();
    let err = yaml::load_str(&mut index, "kind: [unclosed").unwrap_err();
    assert!(err.to_string().contains("YAML"), "{err}");
    assert_eq!(snapshots.load().generation(), generation);
    assert!(snapshots.load().service("x", "c").is_some());

    let missing = yaml::load_file(
        &mut index,
        std::path::Path::new("/nonexistent/objects.yaml"),
    );
    assert!(
        missing
            .unwrap_err()
            .to_string()
            .contains("/nonexistent/objects.yaml")
    );
}
