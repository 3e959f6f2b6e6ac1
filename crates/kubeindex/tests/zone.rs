//! What `zone_aware` reads from the index: endpoint zones and hints, a Pod's node, a Node's
//! zone label; loaded from YAML (the `snapshot` source), no cluster.

use clusterdns_kubeindex::k8s_openapi::api::core::v1 as core;
use clusterdns_kubeindex::{Index, Scope, yaml};

const OBJECTS: &str = r#"
apiVersion: v1
kind: Node
metadata:
  name: node-a
  labels: {topology.kubernetes.io/zone: zone-a, kubernetes.io/os: linux}
---
apiVersion: v1
kind: Node
metadata:
  name: node-old
  labels: {failure-domain.beta.kubernetes.io/zone: zone-old}
---
apiVersion: v1
kind: Node
metadata: {name: node-none}
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: ns}
spec: {nodeName: node-a, containers: [{name: c, image: none}]}
status: {podIP: 10.0.0.7}
---
apiVersion: v1
kind: Pod
metadata: {name: pending, namespace: ns}
spec: {containers: [{name: c, image: none}]}
status: {podIP: 10.0.0.8}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: db-1
  namespace: ns
  labels: {kubernetes.io/service-name: db}
addressType: IPv4
endpoints:
- addresses: [10.1.0.1]
  zone: zone-a
- addresses: [10.1.0.2]
  zone: zone-b
  hints: {forZones: [{name: zone-a}, {name: zone-c}]}
- addresses: [10.1.0.3]
"#;

#[test]
fn zones_hints_and_nodes_are_indexed() {
    let mut index = Index::new();
    let report = yaml::load_str(&mut index, OBJECTS).expect("loads");
    assert_eq!(report.nodes, 3);
    let snap = index.snapshots().load_full();

    assert_eq!(snap.node("node-a").and_then(|n| n.zone()), Some("zone-a"));
    assert_eq!(snap.node("NODE-A").map(|n| n.name()), Some("node-a"));
    assert_eq!(
        snap.node("node-old").and_then(|n| n.zone()),
        Some("zone-old")
    );
    assert_eq!(snap.node("node-none").map(|n| n.zone()), Some(None));
    assert!(snap.node("node-x").is_none());

    let pod = |ip: &str| snap.pods_at(ip.parse().expect("ip")).next().expect("pod");
    assert_eq!(pod("10.0.0.7").node_name(), Some("node-a"));
    assert_eq!(pod("10.0.0.8").node_name(), None);

    let eps = snap.endpoints("ns", "db").expect("endpoints");
    let got: Vec<(String, Option<&str>, Vec<&str>)> = eps
        .iter()
        .map(|(_, e)| (e.ip().to_string(), e.zone(), e.for_zones().collect()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("10.1.0.1".to_string(), Some("zone-a"), vec![]),
            (
                "10.1.0.2".to_string(),
                Some("zone-b"),
                vec!["zone-a", "zone-c"]
            ),
            ("10.1.0.3".to_string(), None, vec![]),
        ]
    );
}

#[test]
fn nodes_follow_updates_deletes_and_relists() {
    let mut index = Index::new();
    yaml::load_str(&mut index, OBJECTS).expect("loads");
    let node = |name: &str, zone: Option<&str>| {
        let mut n = core::Node::default();
        n.metadata.name = Some(name.to_string());
        if let Some(z) = zone {
            n.metadata.labels = Some(
                [("topology.kubernetes.io/zone".to_string(), z.to_string())]
                    .into_iter()
                    .collect(),
            );
        }
        n
    };
    index.apply(node("node-none", Some("zone-late")));
    index.delete(&node("node-old", None));
    index.publish();
    let snap = index.snapshots().load_full();
    assert_eq!(
        snap.node("node-none").and_then(|n| n.zone()),
        Some("zone-late")
    );
    assert!(snap.node("node-old").is_none());

    // A relist that lists one node leaves only that one.
    index.reset(&Scope::All, [node("node-b", Some("zone-b"))]);
    index.publish();
    let snap = index.snapshots().load_full();
    assert_eq!(snap.node("node-b").and_then(|n| n.zone()), Some("zone-b"));
    assert!(snap.node("node-a").is_none() && snap.node("node-none").is_none());
}
