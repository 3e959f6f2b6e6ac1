//! Kubernetes watch and index: Services, EndpointSlices, Pods and Namespaces, kept slim and
//! published as immutable snapshots. This crate knows nothing of DNS serving: the
//! `kubernetes` plugin reads [`Snapshot`]s and turns them into records. The API client it
//! watches with comes from `clusterdns-kubeclient`.
//!
//! ```text
//!  kube-apiserver
//!     │  list+watch (streaming list, 410 → relist, backoff)         YAML file
//!     ▼                                                       (kubectl get -o yaml)
//!  watch.rs: one kube-rs watcher per kind (× namespace)              │
//!     │  Service  EndpointSlice  Pod(opt)  Namespace(opt)  Node(opt) │ yaml.rs
//!     ▼                                                              ▼
//!  index.rs: Index ── convert.rs: raw object → slim object at once (raw dropped)
//!     │   apply / delete / reset per kind; relist = mark & sweep in place
//!     │   working Snapshot: sharded copy-on-write maps (shard.rs)
//!     │     services   (ns,name) → Service
//!     │     endpoints  (ns,svc)  → [EndpointSlice]  merged per service
//!     │     ips        IP        → [Service | endpoints of service]   (PTR)
//!     │     pods       IP        → [Pod]                              (pods verified)
//!     │     compact    IP        → namespace id     (set_pods_compact: no Pod kept)
//!     │     namespaces name      → Namespace
//!     │     nodes      name      → Node (zone label)                 (zone_aware)
//!     ▼   publish(): once per batch of events drained from the watch streams
//!  ArcSwap<Snapshot> ──load()──▶ readers (no lock, no allocation), Snapshots::synced()
//! ```
//!
//! # Reading
//!
//! ```
//! use clusterdns_kubeindex::{yaml, Index};
//!
//! let mut index = Index::new();
//! yaml::load_str(&mut index, r#"
//! apiVersion: v1
//! kind: Service
//! metadata: { name: kubernetes, namespace: default }
//! spec: { clusterIP: 10.96.0.1, ports: [{ name: https, port: 443, protocol: TCP }] }
//! "#).unwrap();
//! let snapshots = index.snapshots();
//! let snap = snapshots.load();
//! let svc = snap.service("default", "Kubernetes").unwrap();
//! assert_eq!(svc.cluster_ips()[0].to_string(), "10.96.0.1");
//! assert_eq!(snap.reverse("10.96.0.1".parse().unwrap()).count(), 1);
//! ```
//!
//! Watching a live cluster (needs a cluster, so not run here):
//!
//! ```no_run
//! # async fn f() -> Result<(), clusterdns_kubeindex::Error> {
//! use std::{sync::Arc, time::Duration};
//! use clusterdns_kubeindex::{ClientSource, NoHooks, Watch, WatchConfig};
//!
//! let client = ClientSource::InCluster.client().await?;
//! let watch = Watch::spawn(client, &WatchConfig::default(), Arc::new(NoHooks));
//! let snapshots = watch.snapshots();
//! if !snapshots.wait_synced(Duration::from_secs(5)).await {
//!     // startup_timeout: serve anyway, SERVFAIL instead of NXDOMAIN until synced
//! }
//! # Ok(()) }
//! ```
//!
//! # Structural sharing: why sharded copy-on-write maps
//!
//! Every map of a snapshot is split into 256 hash tables behind `Arc`s (`shard.rs`).
//! Publishing clones 6 × 256 pointers; the first change to a shard after a publish copies
//! that shard only (its entries are `Arc`s and `Arc<str>`s: reference-count increments, no
//! deep copies), and later changes in the same batch reuse the copy. Lookups are one hash,
//! one shard pick, one SwissTable probe, with a borrowed case-insensitive key.
//!
//! So a change plus publish costs about the fixed pointer clones, whatever the cluster's
//! size, where cloning a flat map, what a publish would cost without sharing, grows
//! linearly with the cluster (`tests/memory.rs` measures both; the figures are in
//! BENCHMARKS.md, "Figures behind design choices"). Persistent HAMTs
//! (`im`, `rpds`) also give cheap updates, but add an `Arc` node per entry (tens of bytes per
//! object) and a pointer chase per trie level on every lookup; flat shards keep a lookup at
//! one probe and the overhead at the SwissTable's one control byte per slot.
//!
//! # Memory
//!
//! Objects are slimmed at once ([`model`]); namespace, node and port names are interned,
//! which keeps an object at a fraction of what CoreDNS holds for it (`tests/memory.rs`
//! counts the bytes per kind with a counting allocator; figures in BENCHMARKS.md). A relist
//! is mark-and-sweep in place ([`Index`]), so it adds one key per object rather than a
//! second copy of the index.

mod convert;
mod error;
mod hooks;
mod index;
pub mod model;
mod selector;
mod shard;
mod snapshot;
mod watch;
pub mod yaml;

pub use convert::{SERVICE_NAME_LABEL, TRIGGER_TIME_ANNOTATION};
pub use error::Error;
pub use hooks::{Counters, EventKind, IndexHooks, Kind, NoHooks, ProgrammingKind, SkipReason};
pub use index::{Index, IndexedObject, Scope};
pub use model::{
    AddressType, Conditions, Endpoint, EndpointSlice, LEGACY_ZONE_LABEL, Namespace, Node, ObjKey,
    Pod, Port, Protocol, Service, ServiceKind, ZONE_LABEL,
};
pub use selector::{LabelSelector, SelectorError};
pub use snapshot::{Counts, ReverseHit, ServiceEndpoints, Snapshot, Snapshots};
pub use watch::{Watch, WatchConfig};

/// The API client (configuration sources, TLS files, client-side limits, request observer)
/// lives in `clusterdns-kubeclient`; re-exported so that a watch's caller names one crate.
pub use clusterdns_kubeclient::{
    ClientLimits, ClientSource, DEFAULT_BURST, DEFAULT_QPS, RateLimit, RequestObserver, TlsFiles,
};

/// Re-exported so that callers build objects with the exact API version this crate uses.
pub use k8s_openapi;
