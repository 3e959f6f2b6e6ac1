//! The read side: an immutable [`Snapshot`] of the cluster, and the [`Snapshots`] handle that
//! hands out the current one.
//!
//! Loading the current snapshot is an `arc_swap` load (no lock, no allocation); every lookup
//! on it is a hash-table probe keyed case-insensitively, so mixed-case query names need no
//! lower-casing copy. A snapshot never changes: keep it for the whole of one DNS answer and
//! every lookup in that answer sees the same cluster.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use tokio::sync::watch;

use crate::index::{At, SEVERAL};
use crate::model::{
    Endpoint, EndpointSlice, KeyBytes, KeyRef, NameBytes, NameKey, NameRef, Namespace, Node,
    ObjKey, Pod, Service,
};
use crate::shard::ShardMap;

/// Who holds an IP, in the reverse index.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum IpOwner {
    /// A ClusterIP of this service.
    Service(ObjKey),
    /// A ready endpoint address of this service.
    Endpoints(ObjKey),
}

/// The endpoints of one service: all EndpointSlices labelled with its name, merged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceEndpoints {
    pub(crate) slices: Box<[Arc<EndpointSlice>]>,
    pub(crate) last_change: Option<SystemTime>,
}

impl ServiceEndpoints {
    /// The slices, sorted by slice name. Each slice carries its own ports.
    pub fn slices(&self) -> &[Arc<EndpointSlice>] {
        &self.slices
    }
    /// Every endpoint address with the slice it came from (for the slice's ports), ready or
    /// not. The same IP may appear in several slices; de-duplicate at the record level.
    pub fn iter(&self) -> impl Iterator<Item = (&EndpointSlice, &Endpoint)> {
        self.slices
            .iter()
            .flat_map(|s| s.endpoints.iter().map(move |e| (&**s, e)))
    }
    /// Only the ready addresses (what CoreDNS serves).
    pub fn ready(&self) -> impl Iterator<Item = (&EndpointSlice, &Endpoint)> {
        self.iter().filter(|(_, e)| e.is_ready())
    }
    /// Whether any address is ready.
    pub fn has_ready(&self) -> bool {
        self.ready().next().is_some()
    }
    /// The newest `endpoints.kubernetes.io/last-change-trigger-time` seen for this service.
    pub fn last_change(&self) -> Option<SystemTime> {
        self.last_change
    }
}

/// One answer of [`Snapshot::reverse`].
#[derive(Clone, Copy, Debug)]
pub enum ReverseHit<'a> {
    /// The IP is a ClusterIP of this service.
    Service(&'a Service),
    /// The IP is a ready endpoint address of service `namespace/service`.
    Endpoint {
        /// Namespace of the service.
        namespace: &'a str,
        /// Name of the service (the slice's `kubernetes.io/service-name`).
        service: &'a str,
        /// The endpoint address.
        endpoint: &'a Endpoint,
    },
}

/// Object counts of a snapshot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Services.
    pub services: usize,
    /// Services with at least one EndpointSlice.
    pub services_with_endpoints: usize,
    /// EndpointSlices.
    pub slices: usize,
    /// Endpoint addresses, over all slices.
    pub endpoints: usize,
    /// Pods with an IP.
    pub pods: usize,
    /// Pods in the compact Pod index (`Index::set_pods_compact`), which keeps
    /// no Pod objects (so `pods` is 0 then).
    pub compact_pods: usize,
    /// Namespaces.
    pub namespaces: usize,
    /// Distinct IPs in the reverse (PTR) index.
    pub reverse_ips: usize,
}

/// An immutable view of the cluster. See the module doc.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub(crate) generation: u64,
    pub(crate) modified: SystemTime,
    /// Time of the last update of a Service that changed its external IPs
    /// or ports (CoreDNS's `ModifiedExternal`: never an addition or a
    /// deletion); `UNIX_EPOCH` if none yet.
    pub(crate) ext_modified: SystemTime,
    pub(crate) synced: bool,
    pub(crate) namespaces_watched: bool,
    pub(crate) services: ShardMap<ObjKey, Arc<Service>>,
    pub(crate) endpoints: ShardMap<ObjKey, Arc<ServiceEndpoints>>,
    pub(crate) ips: ShardMap<IpAddr, Arc<[IpOwner]>>,
    pub(crate) pods: ShardMap<IpAddr, Arc<[Arc<Pod>]>>,
    pub(crate) namespaces: ShardMap<NameKey, Arc<Namespace>>,
    /// Empty unless Nodes are watched (`zone_aware`).
    pub(crate) nodes: ShardMap<NameKey, Arc<Node>>,
    /// The compact Pod index (`Index::set_pods_compact`): address → namespace id.
    pub(crate) compact: ShardMap<IpAddr, At>,
    /// Namespace names by id, for `compact`; only grows.
    pub(crate) compact_ns: Arc<Vec<Arc<str>>>,
}

impl Default for Snapshot {
    fn default() -> Self {
        Snapshot {
            generation: 0,
            modified: UNIX_EPOCH,
            ext_modified: UNIX_EPOCH,
            synced: false,
            namespaces_watched: true,
            services: ShardMap::default(),
            endpoints: ShardMap::default(),
            ips: ShardMap::default(),
            pods: ShardMap::default(),
            namespaces: ShardMap::default(),
            nodes: ShardMap::default(),
            compact: ShardMap::default(),
            compact_ns: Arc::default(),
        }
    }
}

impl Snapshot {
    /// An empty, unsynced snapshot.
    pub fn empty() -> Snapshot {
        Snapshot::default()
    }

    /// Increases by one with every published snapshot.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Time of the last change that affects DNS answers (`UNIX_EPOCH` if none yet).
    pub fn modified(&self) -> SystemTime {
        self.modified
    }

    /// SOA serial: [`modified`](Self::modified) in Unix seconds (mod 2^32).
    pub fn serial(&self) -> u32 {
        unix_serial(self.modified)
    }

    /// SOA serial of the external zones (*k8s_external*): the last update
    /// of a Service's external IPs or ports, in Unix seconds (mod 2^32);
    /// 0 until one, as in CoreDNS.
    pub fn external_serial(&self) -> u32 {
        unix_serial(self.ext_modified)
    }

    /// Every watched kind has completed its first list. Before that, answers that would be
    /// NXDOMAIN should be SERVFAIL (the data may just not be here yet).
    pub fn synced(&self) -> bool {
        self.synced
    }

    /// Whether Namespaces are followed. When they are not, [`namespace`](Self::namespace)
    /// knows nothing and an adapter should treat every namespace as existing.
    pub fn namespaces_watched(&self) -> bool {
        self.namespaces_watched
    }

    /// The service `namespace/name`, compared ignoring ASCII case.
    pub fn service(&self, namespace: &str, name: &str) -> Option<&Service> {
        self.services.get(&KeyRef { namespace, name }).map(|s| &**s)
    }

    /// [`service`](Self::service) with the names as bytes (DNS labels, no UTF-8 check
    /// needed): bytes that are not UTF-8 name no service.
    pub fn service_bytes(&self, namespace: &[u8], name: &[u8]) -> Option<&Service> {
        self.services
            .get(&KeyBytes { namespace, name })
            .map(|s| &**s)
    }

    /// Every service, in no particular order.
    pub fn services(&self) -> impl Iterator<Item = &Service> {
        self.services.values().map(|s| &**s)
    }

    /// The services of one namespace (ASCII case ignored), in no particular order. This walks
    /// every service; it is meant for zone transfers and debugging, not per query.
    pub fn services_in<'a>(&'a self, namespace: &'a str) -> impl Iterator<Item = &'a Service> + 'a {
        self.services()
            .filter(move |s| s.namespace.eq_ignore_ascii_case(namespace))
    }

    /// The merged EndpointSlices of service `namespace/name` (which need not exist as a
    /// Service object).
    pub fn endpoints(&self, namespace: &str, name: &str) -> Option<&ServiceEndpoints> {
        self.endpoints
            .get(&KeyRef { namespace, name })
            .map(|e| &**e)
    }

    /// Every service's endpoints, keyed by service, in no particular order.
    pub fn all_endpoints(&self) -> impl Iterator<Item = (&ObjKey, &ServiceEndpoints)> {
        self.endpoints.iter().map(|(k, e)| (k, &**e))
    }

    /// What `ip` belongs to, for PTR: first services whose ClusterIPs contain it (sorted by
    /// namespace/name; CoreDNS answers with the first), then every ready endpoint address
    /// equal to it (one per slice entry; de-duplicate by target name).
    pub fn reverse(&self, ip: IpAddr) -> impl Iterator<Item = ReverseHit<'_>> {
        let owners: &[IpOwner] = self.ips.get(&ip).map_or(&[], |o| &o[..]);
        let services = owners
            .iter()
            .filter_map(move |o| match o {
                IpOwner::Service(k) => self.services.get(k),
                IpOwner::Endpoints(_) => None,
            })
            .map(|s| ReverseHit::Service(s));
        let endpoints = owners
            .iter()
            .filter_map(move |o| match o {
                IpOwner::Endpoints(k) => self.endpoints.get(k).map(|e| (k, e)),
                IpOwner::Service(_) => None,
            })
            .flat_map(move |(k, eps)| {
                eps.ready()
                    .filter(move |(_, e)| e.ip == ip)
                    .map(move |(_, e)| ReverseHit::Endpoint {
                        namespace: &k.namespace,
                        service: &k.name,
                        endpoint: e,
                    })
            });
        services.chain(endpoints)
    }

    /// Pods whose IPs include `ip` (several for host-network pods).
    pub fn pods_at(&self, ip: IpAddr) -> impl Iterator<Item = &Pod> {
        self.pods
            .get(&ip)
            .into_iter()
            .flat_map(|p| p.iter().map(|p| &**p))
    }

    /// A pod in `namespace` (ASCII case ignored) with IP `ip` (`pods verified`).
    pub fn pod(&self, namespace: &str, ip: IpAddr) -> Option<&Pod> {
        self.pods_at(ip)
            .find(|p| p.namespace.eq_ignore_ascii_case(namespace))
    }

    /// The namespace of the Pod at `ip` from the compact Pod index
    /// (`Index::set_pods_compact`), by its primary address; `None` if no Pod is there
    /// or Pods of several namespaces are.
    pub fn compact_pod_namespace(&self, ip: IpAddr) -> Option<&str> {
        let at = self.compact.get(&ip)?;
        if at.ns == SEVERAL {
            return None;
        }
        self.compact_ns.get(at.ns as usize).map(|n| &**n)
    }

    /// The namespace of the ready EndpointSlice endpoints at `ip` whose `targetRef` is a
    /// Pod: `None` if there are none, or they are in several namespaces.
    pub fn endpoint_pod_namespace(&self, ip: IpAddr) -> Option<&str> {
        let owners: &[IpOwner] = self.ips.get(&ip).map_or(&[], |o| &o[..]);
        let mut found: Option<&str> = None;
        for o in owners {
            let IpOwner::Endpoints(k) = o else {
                continue;
            };
            let Some(eps) = self.endpoints.get(k) else {
                continue;
            };
            let to_pod = eps
                .slices
                .iter()
                .flat_map(|s| s.endpoints.iter())
                .any(|e| e.ip == ip && e.target_pod.is_some());
            if !to_pod {
                continue;
            }
            match found {
                None => found = Some(&k.namespace),
                Some(f) if f.eq_ignore_ascii_case(&k.namespace) => {}
                Some(_) => return None,
            }
        }
        found
    }

    /// The namespace `name`, ASCII case ignored.
    pub fn namespace(&self, name: &str) -> Option<&Namespace> {
        self.namespaces.get(&NameRef(name)).map(|n| &**n)
    }

    /// [`namespace`](Self::namespace) with the name as bytes (see
    /// [`service_bytes`](Self::service_bytes)).
    pub fn namespace_bytes(&self, name: &[u8]) -> Option<&Namespace> {
        self.namespaces.get(&NameBytes(name)).map(|n| &**n)
    }

    /// The node `name`, ASCII case ignored (only when Nodes are watched).
    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.get(&NameRef(name)).map(|n| &**n)
    }

    /// Every namespace, in no particular order.
    pub fn namespaces(&self) -> impl Iterator<Item = &Namespace> {
        self.namespaces.values().map(|n| &**n)
    }

    /// Object counts (walks the endpoints; not for the query path).
    pub fn counts(&self) -> Counts {
        let mut c = Counts {
            services: self.services.len(),
            services_with_endpoints: self.endpoints.len(),
            namespaces: self.namespaces.len(),
            reverse_ips: self.ips.len(),
            ..Counts::default()
        };
        for eps in self.endpoints.values() {
            c.slices += eps.slices.len();
            c.endpoints += eps.slices.iter().map(|s| s.endpoints.len()).sum::<usize>();
        }
        let mut pods = hashbrown::HashSet::new();
        for at in self.pods.values() {
            for p in at.iter() {
                pods.insert(Arc::as_ptr(p));
            }
        }
        c.pods = pods.len();
        c.compact_pods = self.compact.values().map(|at| at.pods as usize).sum();
        c
    }
}

pub(crate) struct Shared {
    pub(crate) current: ArcSwap<Snapshot>,
    pub(crate) synced: watch::Sender<bool>,
}

/// The handle readers keep: loads the current snapshot. Cheap to clone.
#[derive(Clone)]
pub struct Snapshots {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for Snapshots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshots")
            .field("generation", &self.load().generation)
            .field("synced", &self.is_synced())
            .finish()
    }
}

impl Snapshots {
    pub(crate) fn new(initial: Snapshot) -> Snapshots {
        let (synced, _) = watch::channel(initial.synced);
        Snapshots {
            shared: Arc::new(Shared {
                current: ArcSwap::from_pointee(initial),
                synced,
            }),
        }
    }

    /// The current snapshot, without locking or allocating. Hold the guard for one answer,
    /// not across awaits of unbounded length (use [`load_full`](Self::load_full) for that).
    pub fn load(&self) -> arc_swap::Guard<Arc<Snapshot>> {
        self.shared.current.load()
    }

    /// The current snapshot as an owned `Arc`.
    pub fn load_full(&self) -> Arc<Snapshot> {
        self.shared.current.load_full()
    }

    /// Every watched kind has completed its first list (the `ready` plugin's answer).
    pub fn is_synced(&self) -> bool {
        *self.shared.synced.borrow()
    }

    /// A receiver that sees `true` once synced (for `startup_timeout`).
    pub fn synced(&self) -> watch::Receiver<bool> {
        self.shared.synced.subscribe()
    }

    /// Waits until synced or `timeout`; returns whether synced.
    pub async fn wait_synced(&self, timeout: Duration) -> bool {
        let mut rx = self.synced();
        tokio::time::timeout(timeout, rx.wait_for(|s| *s))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}

/// `t` in Unix seconds, mod 2^32 (DNS serial arithmetic).
fn unix_serial(t: SystemTime) -> u32 {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    // Truncation intended: DNS serial arithmetic is mod 2^32.
    (secs & u64::from(u32::MAX)) as u32
}
