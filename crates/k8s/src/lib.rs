//! Kubernetes watch and index: Services, EndpointSlices, Pods, Namespaces as immutable snapshots.
