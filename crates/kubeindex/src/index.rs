//! The write side: one [`Index`] fed by watch events (or the YAML source), with
//! `apply` / `delete` / `reset` for every kind, that publishes [`Snapshot`]s.
//!
//! The index owns a working [`Snapshot`] whose shards it shares with the published one;
//! changes copy only the shards they touch (see `shard.rs`). [`Index::publish`] makes the
//! working state the current snapshot; the watch task calls it once per batch of events.
//!
//! **Relists** (`Init`, `InitApply`*, `InitDone`, e.g. after `410 Gone`) are applied in place
//! as mark-and-sweep: every listed object is converted and upserted as it streams in (an
//! object equal to the stored one is not even replaced) and its key recorded; at `InitDone`
//! the objects of that kind and scope that were not listed are removed. So a relist never
//! holds a second copy of the state: the extra memory is the set of listed keys (two
//! reference-counted pointers per object).

use std::collections::HashMap as StdHashMap;
use std::hash::BuildHasher as _;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::SystemTime;

use hashbrown::{DefaultHashBuilder, HashMap, HashSet, HashTable};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher;

mod compact;

pub(crate) use compact::{At, SEVERAL};

use crate::convert::{self, Interner, Skip, SkipFn};
use crate::hooks::{EventKind, IndexHooks, Kind, NoHooks, ProgrammingKind, SkipReason};
use crate::model::{
    EndpointSlice, KeyRef, LEGACY_ZONE_LABEL, NameKey, NameRef, Namespace, Node, ObjKey, Pod,
    Service, ZONE_LABEL,
};
use crate::shard::ShardMap;
use crate::snapshot::{IpOwner, ServiceEndpoints, Snapshot, Snapshots};

/// Which objects of a kind one watcher covers: a relist replaces exactly these.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Every namespace (and cluster-scoped kinds).
    All,
    /// One namespace (the `namespaces` option runs one watcher per namespace).
    Namespace(Arc<str>),
}

impl Scope {
    /// Scope of one namespace.
    pub fn namespace(ns: &str) -> Scope {
        Scope::Namespace(Arc::from(ns))
    }

    fn contains(&self, namespace: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Namespace(ns) => ns.eq_ignore_ascii_case(namespace),
        }
    }
}

/// A Kubernetes object type the index understands. Sealed.
pub trait IndexedObject: private::Sealed + Clone + std::fmt::Debug + Send + 'static {
    /// Its kind.
    const KIND: Kind;
    #[doc(hidden)]
    type Slim;
    #[doc(hidden)]
    fn meta(&self) -> &ObjectMeta;
    /// Drops managed fields and annotations (except what the index reads).
    #[doc(hidden)]
    fn strip(&mut self) {
        strip_meta(self.meta_mut(), None);
    }
    #[doc(hidden)]
    fn meta_mut(&mut self) -> &mut ObjectMeta;
    #[doc(hidden)]
    fn convert(&self, int: &mut Interner, skip: SkipFn<'_>) -> Result<Self::Slim, Skip>;
    /// Stores the slim object; returns its key (for relists).
    #[doc(hidden)]
    fn put(index: &mut Index, slim: Self::Slim) -> ObjKey;
}

fn strip_meta(meta: &mut ObjectMeta, keep_annotation: Option<&str>) {
    meta.managed_fields = None;
    match (keep_annotation, meta.annotations.as_mut()) {
        (Some(keep), Some(a)) => a.retain(|k, _| k == keep),
        _ => meta.annotations = None,
    }
}

mod private {
    pub trait Sealed {}
    impl Sealed for k8s_openapi::api::core::v1::Service {}
    impl Sealed for k8s_openapi::api::discovery::v1::EndpointSlice {}
    impl Sealed for k8s_openapi::api::core::v1::Pod {}
    impl Sealed for k8s_openapi::api::core::v1::Namespace {}
    impl Sealed for k8s_openapi::api::core::v1::Node {}
}

impl IndexedObject for core::Service {
    const KIND: Kind = Kind::Service;
    type Slim = Service;
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
    fn convert(&self, int: &mut Interner, skip: SkipFn<'_>) -> Result<Service, Skip> {
        convert::service(self, int, skip)
    }
    fn put(index: &mut Index, slim: Service) -> ObjKey {
        let key = ObjKey::new(&slim.namespace, &slim.name);
        index.put_service(slim);
        key
    }
}

impl IndexedObject for discovery::EndpointSlice {
    const KIND: Kind = Kind::EndpointSlice;
    type Slim = (EndpointSlice, Option<SystemTime>);
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
    fn strip(&mut self) {
        strip_meta(&mut self.metadata, Some(convert::TRIGGER_TIME_ANNOTATION));
    }
    fn convert(&self, int: &mut Interner, skip: SkipFn<'_>) -> Result<Self::Slim, Skip> {
        convert::endpoint_slice(self, int, skip)
    }
    fn put(index: &mut Index, (slice, trigger): Self::Slim) -> ObjKey {
        let key = ObjKey::new(&slice.namespace, &slice.name);
        index.put_slice(slice, trigger);
        key
    }
}

impl IndexedObject for core::Pod {
    const KIND: Kind = Kind::Pod;
    type Slim = Pod;
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
    fn convert(&self, int: &mut Interner, skip: SkipFn<'_>) -> Result<Pod, Skip> {
        convert::pod(self, int, skip)
    }
    fn put(index: &mut Index, slim: Pod) -> ObjKey {
        let key = ObjKey::new(&slim.namespace, &slim.name);
        if index.compact.is_some() {
            index.put_pod_compact(slim);
        } else {
            index.put_pod(slim);
        }
        key
    }
}

impl IndexedObject for core::Namespace {
    const KIND: Kind = Kind::Namespace;
    type Slim = Namespace;
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
    fn convert(&self, int: &mut Interner, _skip: SkipFn<'_>) -> Result<Namespace, Skip> {
        convert::namespace(self, int)
    }
    fn put(index: &mut Index, slim: Namespace) -> ObjKey {
        let key = ObjKey::new(&index.no_namespace, &slim.name);
        index.put_namespace(slim);
        key
    }
}

impl IndexedObject for core::Node {
    const KIND: Kind = Kind::Node;
    type Slim = Node;
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
    /// A Node's status (its image list, conditions, addresses) is most of its size and is
    /// rewritten by every kubelet heartbeat; only the zone label is read.
    fn strip(&mut self) {
        strip_meta(&mut self.metadata, None);
        if let Some(labels) = self.metadata.labels.as_mut() {
            labels.retain(|k, _| k == ZONE_LABEL || k == LEGACY_ZONE_LABEL);
        }
        self.spec = None;
        self.status = None;
    }
    fn convert(&self, int: &mut Interner, _skip: SkipFn<'_>) -> Result<Node, Skip> {
        convert::node(self, int)
    }
    fn put(index: &mut Index, slim: Node) -> ObjKey {
        let key = ObjKey::new(&index.no_namespace, &slim.name);
        index.put_node(slim);
        key
    }
}

/// Stores a cluster-scoped object under `name`, unless an equal one is there: whether the
/// map changed.
fn put_named<T: PartialEq>(map: &mut ShardMap<NameKey, Arc<T>>, name: &Arc<str>, obj: T) -> bool {
    if map.get(&NameRef(name)).is_some_and(|old| **old == obj) {
        return false;
    }
    map.insert(NameKey(Arc::clone(name)), Arc::new(obj));
    true
}

/// The names of a cluster-scoped map that a relist (its keys in `seen`) did not list.
fn unlisted<T>(map: &ShardMap<NameKey, Arc<T>>, seen: &HashSet<ObjKey>) -> Vec<Arc<str>> {
    map.iter()
        .map(|(k, _)| &k.0)
        .filter(|n| {
            !seen.contains(&KeyRef {
                namespace: "",
                name: n,
            })
        })
        .cloned()
        .collect()
}

/// Pods by namespace and name, keyed by the pods themselves: no second copy of the key.
#[derive(Default)]
struct PodTable {
    hasher: DefaultHashBuilder,
    table: HashTable<Arc<Pod>>,
}

fn is_pod(p: &Pod, namespace: &str, name: &str) -> bool {
    p.namespace.eq_ignore_ascii_case(namespace) && p.name.eq_ignore_ascii_case(name)
}

impl PodTable {
    fn hash(&self, namespace: &str, name: &str) -> u64 {
        self.hasher.hash_one(KeyRef { namespace, name })
    }
    fn get(&self, namespace: &str, name: &str) -> Option<&Arc<Pod>> {
        self.table
            .find(self.hash(namespace, name), |p| is_pod(p, namespace, name))
    }
    fn insert(&mut self, pod: Arc<Pod>) -> Option<Arc<Pod>> {
        let hash = self.hash(&pod.namespace, &pod.name);
        let hasher = &self.hasher;
        match self
            .table
            .find_mut(hash, |p| is_pod(p, &pod.namespace, &pod.name))
        {
            Some(slot) => Some(std::mem::replace(slot, pod)),
            None => {
                self.table.insert_unique(hash, pod, |p| {
                    hasher.hash_one(KeyRef {
                        namespace: &p.namespace,
                        name: &p.name,
                    })
                });
                None
            }
        }
    }
    fn remove(&mut self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        let hash = self.hash(namespace, name);
        let entry = self
            .table
            .find_entry(hash, |p| is_pod(p, namespace, name))
            .ok()?;
        Some(entry.remove().0)
    }
    fn keys(&self) -> impl Iterator<Item = ObjKey> + '_ {
        self.table
            .iter()
            .map(|p| ObjKey::new(&p.namespace, &p.name))
    }
    fn len(&self) -> usize {
        self.table.len()
    }
    fn allocation_size(&self) -> usize {
        self.table.allocation_size()
    }
}

/// The index. See the module doc.
pub struct Index {
    work: Snapshot,
    slices: HashMap<ObjKey, Arc<EndpointSlice>>,
    pods: PodTable,
    /// Pods as address → namespace only (`set_pods_compact`); `pods` stays empty then.
    compact: Option<compact::CompactPods>,
    relists: StdHashMap<(Kind, Scope), HashSet<ObjKey>>,
    pending_sync: HashSet<(Kind, Scope)>,
    interner: Interner,
    no_namespace: Arc<str>,
    dirty: bool,
    programming: Vec<(ProgrammingKind, SystemTime)>,
    snapshots: Snapshots,
    hooks: Arc<dyn IndexHooks>,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index")
            .field("generation", &self.work.generation)
            .field("services", &self.work.services.len())
            .field("slices", &self.slices.len())
            .field("pods", &self.pods.len())
            .field("compact_pods", &self.compact.as_ref().map(|c| c.len()))
            .field("dirty", &self.dirty)
            .finish_non_exhaustive()
    }
}

impl Default for Index {
    fn default() -> Self {
        Index::new()
    }
}

impl Index {
    /// An empty index without hooks.
    pub fn new() -> Index {
        Index::with_hooks(Arc::new(NoHooks))
    }

    /// An empty index reporting to `hooks`.
    pub fn with_hooks(hooks: Arc<dyn IndexHooks>) -> Index {
        let work = Snapshot::default();
        Index {
            snapshots: Snapshots::new(work.clone()),
            work,
            slices: HashMap::new(),
            pods: PodTable::default(),
            compact: None,
            relists: StdHashMap::new(),
            pending_sync: HashSet::new(),
            interner: Interner::default(),
            no_namespace: Arc::from(""),
            dirty: false,
            programming: Vec::new(),
            hooks,
        }
    }

    /// The handle that reads published snapshots.
    pub fn snapshots(&self) -> Snapshots {
        self.snapshots.clone()
    }

    /// The working state, including changes not yet published.
    pub fn working(&self) -> &Snapshot {
        &self.work
    }

    /// Declares whether Namespaces are followed (see [`Snapshot::namespaces_watched`]).
    pub fn set_namespaces_watched(&mut self, watched: bool) {
        if self.work.namespaces_watched != watched {
            self.work.namespaces_watched = watched;
            self.dirty = true;
        }
    }

    /// Declares a watcher that must finish its first list before the index is synced.
    pub fn expect_sync(&mut self, kind: Kind, scope: Scope) {
        if !self.work.synced {
            self.pending_sync.insert((kind, scope));
        }
    }

    /// Marks the index synced now (the YAML source, or tests).
    pub fn mark_synced(&mut self) {
        self.pending_sync.clear();
        if !self.work.synced {
            self.work.synced = true;
            self.dirty = true;
        }
    }

    /// Adds or updates an object (outside a relist).
    pub fn apply<K: IndexedObject>(&mut self, obj: K) {
        self.hooks.event(K::KIND, EventKind::Apply);
        self.ingest(obj, None);
    }

    /// Deletes an object, found by its namespace and name.
    pub fn delete<K: IndexedObject>(&mut self, obj: &K) {
        self.hooks.event(K::KIND, EventKind::Delete);
        let meta = obj.meta();
        let name = meta.name.as_deref().unwrap_or_default();
        let ns = meta.namespace.as_deref().unwrap_or_default();
        match K::KIND {
            Kind::Service => self.delete_service(ns, name),
            Kind::EndpointSlice => self.delete_slice(ns, name),
            Kind::Pod => self.delete_pod(ns, name),
            Kind::Namespace => self.delete_namespace(name),
            Kind::Node => self.delete_node(name),
        }
    }

    /// Replaces every object of `K`'s kind in `scope` with `objs` (a whole relist at once).
    pub fn reset<K: IndexedObject>(&mut self, scope: &Scope, objs: impl IntoIterator<Item = K>) {
        self.relist_begin(K::KIND, scope);
        for obj in objs {
            self.relist_apply(scope, obj);
        }
        self.relist_end(K::KIND, scope);
    }

    /// Applies one watcher event from the watcher covering `scope`.
    pub fn handle_event<K: IndexedObject>(&mut self, scope: &Scope, event: watcher::Event<K>) {
        match event {
            watcher::Event::Apply(obj) => self.apply(obj),
            watcher::Event::Delete(obj) => self.delete(&obj),
            watcher::Event::Init => self.relist_begin(K::KIND, scope),
            watcher::Event::InitApply(obj) => self.relist_apply(scope, obj),
            watcher::Event::InitDone => self.relist_end(K::KIND, scope),
        }
    }

    /// Starts a relist of `kind` in `scope`.
    pub fn relist_begin(&mut self, kind: Kind, scope: &Scope) {
        self.hooks.event(kind, EventKind::Init);
        // A relist restarted before it finished starts over with an empty seen-set.
        self.relists.insert((kind, scope.clone()), HashSet::new());
    }

    /// One object of a relist: applied now, remembered as seen.
    pub fn relist_apply<K: IndexedObject>(&mut self, scope: &Scope, obj: K) {
        self.hooks.event(K::KIND, EventKind::Apply);
        self.ingest(obj, Some(scope));
    }

    /// Ends a relist: objects of `kind` in `scope` that it did not list are removed.
    pub fn relist_end(&mut self, kind: Kind, scope: &Scope) {
        self.hooks.event(kind, EventKind::InitDone);
        let Some(seen) = self.relists.remove(&(kind, scope.clone())) else {
            tracing::debug!(%kind, ?scope, "relist end without begin");
            return;
        };
        let gone = |k: &ObjKey| scope.contains(&k.namespace) && !seen.contains(k);
        match kind {
            Kind::Service => {
                let doomed: Vec<ObjKey> = self
                    .work
                    .services
                    .iter()
                    .map(|(k, _)| k)
                    .filter(|k| gone(k))
                    .cloned()
                    .collect();
                for k in doomed {
                    self.delete_service(&k.namespace, &k.name);
                }
            }
            Kind::EndpointSlice => {
                let doomed: Vec<ObjKey> = self.slices.keys().filter(|k| gone(k)).cloned().collect();
                for k in doomed {
                    self.delete_slice(&k.namespace, &k.name);
                }
            }
            Kind::Pod if self.compact.is_some() => self.relist_end_compact(scope, &seen),
            Kind::Pod => {
                let doomed: Vec<ObjKey> = self.pods.keys().filter(|k| gone(k)).collect();
                for k in doomed {
                    self.delete_pod(&k.namespace, &k.name);
                }
            }
            Kind::Namespace => {
                for n in unlisted(&self.work.namespaces, &seen) {
                    self.delete_namespace(&n);
                }
            }
            Kind::Node => {
                for n in unlisted(&self.work.nodes, &seen) {
                    self.delete_node(&n);
                }
            }
        }
        drop(seen);
        self.interner.prune();
        self.relists.shrink_to_fit();
        self.pending_sync.remove(&(kind, scope.clone()));
        if self.pending_sync.is_empty() && !self.work.synced {
            tracing::info!("kubernetes index synced");
            self.work.synced = true;
            self.dirty = true;
        }
    }

    /// Publishes the working state if it changed; returns the new generation if it did.
    pub fn publish(&mut self) -> Option<u64> {
        if !self.dirty {
            return None;
        }
        self.dirty = false;
        self.work.generation += 1;
        let generation = self.work.generation;
        self.snapshots
            .shared
            .current
            .store(Arc::new(self.work.clone()));
        if self.work.synced && !self.snapshots.is_synced() {
            self.snapshots.shared.synced.send_replace(true);
        }
        self.hooks.published(generation);
        if !self.programming.is_empty() {
            let now = SystemTime::now();
            for (kind, trigger) in self.programming.drain(..) {
                let latency = now.duration_since(trigger).unwrap_or_default();
                self.hooks.dns_programming(kind, latency);
            }
        }
        Some(generation)
    }

    /// Whether there are unpublished changes.
    pub fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// Number of strings interned (namespace, node and port names).
    pub fn interned(&self) -> usize {
        self.interner.len()
    }

    /// Bytes held by the index's own hash tables (excluding the objects): for memory reports.
    pub fn table_bytes(&self) -> usize {
        let w = &self.work;
        w.services.table_bytes()
            + w.endpoints.table_bytes()
            + w.ips.table_bytes()
            + w.pods.table_bytes()
            + w.namespaces.table_bytes()
            + w.nodes.table_bytes()
            + self.slices.allocation_size()
            + self.pods.allocation_size()
            + w.compact.table_bytes()
            + self.compact.as_ref().map_or(0, |c| c.allocation_size())
    }

    // ----- per-kind state changes -------------------------------------------------------

    fn changed(&mut self) {
        self.dirty = true;
        self.work.modified = SystemTime::now();
    }

    pub(crate) fn note_watch_error(&self, kind: Kind, error: &str) {
        self.hooks.watch_error(kind, error);
    }

    pub(crate) fn note_skip(&self, kind: Kind, reason: SkipReason) {
        self.hooks.skipped(kind, reason);
    }

    fn skip(&mut self, kind: Kind, skip: Skip) {
        self.hooks.skipped(kind, skip.reason);
        match &skip.key {
            Some(key) => {
                tracing::debug!(%kind, namespace = %key.namespace, name = %key.name.escape_debug(), reason = %skip.reason, "object not indexed");
                match kind {
                    Kind::Service => self.delete_service(&key.namespace, &key.name),
                    Kind::EndpointSlice => self.delete_slice(&key.namespace, &key.name),
                    Kind::Pod => self.delete_pod(&key.namespace, &key.name),
                    Kind::Namespace => self.delete_namespace(&key.name),
                    Kind::Node => self.delete_node(&key.name),
                }
            }
            None => tracing::debug!(%kind, reason = %skip.reason, "object not indexed"),
        }
    }

    /// Converts and stores `obj`, dropping the raw object first.
    fn ingest<K: IndexedObject>(&mut self, obj: K, scope: Option<&Scope>) {
        let mut skips = Vec::new();
        let res = obj.convert(&mut self.interner, &mut |r| skips.push(r));
        drop(obj);
        for r in skips {
            self.hooks.skipped(K::KIND, r);
        }
        match res {
            Ok(slim) => {
                let key = K::put(self, slim);
                self.mark_seen(K::KIND, scope, key);
            }
            Err(skip) => self.skip(K::KIND, skip),
        }
    }

    fn mark_seen(&mut self, kind: Kind, scope: Option<&Scope>, key: ObjKey) {
        if let Some(scope) = scope
            && let Some(seen) = self.relists.get_mut(&(kind, scope.clone()))
        {
            seen.insert(key);
        }
    }

    fn put_service(&mut self, svc: Service) {
        let key = ObjKey::new(&svc.namespace, &svc.name);
        if self.work.services.get(&key).is_some_and(|old| **old == svc) {
            return;
        }
        let new = Arc::new(svc);
        let old = self.work.services.insert(key.clone(), Arc::clone(&new));
        let old_ips: &[IpAddr] = old.as_ref().map_or(&[], |o| &o.cluster_ips);
        self.reindex(IpOwner::Service(key), old_ips, &new.cluster_ips);
        self.changed();
        // CoreDNS's `serviceModified`: only an update moves the external
        // zones' serial, when the external addresses or the ports change.
        if let Some(old) = old
            && (old.external_ips() != new.external_ips()
                || !old.external_hostnames().eq(new.external_hostnames())
                || old.ports != new.ports)
        {
            self.work.ext_modified = self.work.modified;
        }
    }

    /// Removes service `namespace/name`, if present.
    pub fn delete_service(&mut self, namespace: &str, name: &str) {
        if let Some(old) = self.work.services.remove(&KeyRef { namespace, name }) {
            let key = ObjKey::new(&old.namespace, &old.name);
            self.reindex(IpOwner::Service(key), &old.cluster_ips, &[]);
            self.changed();
        }
    }

    fn put_slice(&mut self, slice: EndpointSlice, trigger: Option<SystemTime>) {
        let key = ObjKey::new(&slice.namespace, &slice.name);
        let old = self.slices.get(&key).cloned();
        if old.as_deref() == Some(&slice) {
            return;
        }
        let new = Arc::new(slice);
        self.slices.insert(key, Arc::clone(&new));
        let new_svc = ObjKey::new(&new.namespace, &new.service);
        if let Some(old) = &old {
            let old_svc = ObjKey::new(&old.namespace, &old.service);
            if old_svc != new_svc {
                self.merge_endpoints(old_svc, &old.name, None, None);
            }
        }
        if let Some(trigger) = trigger {
            let kind = self.work.services.get(&new_svc).and_then(|s| {
                if !s.headless {
                    Some(ProgrammingKind::ClusterIp)
                } else if s.has_selector {
                    Some(ProgrammingKind::HeadlessWithSelector)
                } else {
                    None
                }
            });
            if let Some(kind) = kind {
                self.programming.push((kind, trigger));
            }
        }
        let name = Arc::clone(&new.name);
        self.merge_endpoints(new_svc, &name, Some(new), trigger);
    }

    /// Removes EndpointSlice `namespace/name`, if present.
    pub fn delete_slice(&mut self, namespace: &str, name: &str) {
        if let Some(old) = self.slices.remove(&KeyRef { namespace, name }) {
            let svc = ObjKey::new(&old.namespace, &old.service);
            self.merge_endpoints(svc, &old.name, None, None);
        }
    }

    /// Replaces (or removes, with `add: None`) the slice named `slice` in `svc`'s endpoints.
    fn merge_endpoints(
        &mut self,
        svc: ObjKey,
        slice: &str,
        add: Option<Arc<EndpointSlice>>,
        trigger: Option<SystemTime>,
    ) {
        let current = self.work.endpoints.get(&svc).cloned();
        let mut slices: Vec<Arc<EndpointSlice>> = current
            .iter()
            .flat_map(|c| c.slices.iter())
            // The slices map's keys ignore ASCII case: so does the slice's
            // place in its service, or a slice renamed only in case would
            // stay behind after its deletion.
            .filter(|s| !s.name.eq_ignore_ascii_case(slice))
            .cloned()
            .collect();
        if let Some(add) = add {
            slices.push(add);
        }
        slices.sort_by(|a, b| a.name.cmp(&b.name));
        let ready_ips = |slices: &[Arc<EndpointSlice>]| -> Vec<IpAddr> {
            let mut ips: Vec<IpAddr> = slices
                .iter()
                .flat_map(|s| s.endpoints.iter())
                .filter(|e| e.is_ready())
                .map(|e| e.ip)
                .collect();
            ips.sort_unstable();
            ips.dedup();
            ips
        };
        let old_ips = current
            .as_ref()
            .map(|c| ready_ips(&c.slices))
            .unwrap_or_default();
        let new_ips = ready_ips(&slices);
        if slices.is_empty() {
            self.work.endpoints.remove(&svc);
        } else {
            let last_change = trigger.max(current.as_ref().and_then(|c| c.last_change));
            self.work.endpoints.insert(
                svc.clone(),
                Arc::new(ServiceEndpoints {
                    slices: slices.into(),
                    last_change,
                }),
            );
        }
        self.reindex(IpOwner::Endpoints(svc), &old_ips, &new_ips);
        self.changed();
    }

    fn put_pod(&mut self, pod: Pod) {
        if self
            .pods
            .get(&pod.namespace, &pod.name)
            .is_some_and(|old| **old == pod)
        {
            return;
        }
        let new = Arc::new(pod);
        if let Some(old) = self.pods.insert(Arc::clone(&new)) {
            self.unindex_pod(&old);
        }
        for ip in new.ips() {
            let at: Vec<Arc<Pod>> = self
                .work
                .pods
                .get(&ip)
                .into_iter()
                .flat_map(|p| p.iter().cloned())
                .chain(std::iter::once(Arc::clone(&new)))
                .collect();
            self.work.pods.insert(ip, at.into());
        }
        self.changed();
    }

    fn unindex_pod(&mut self, old: &Pod) {
        for ip in old.ips() {
            let Some(at) = self.work.pods.get(&ip) else {
                continue;
            };
            let rest: Vec<Arc<Pod>> = at
                .iter()
                .filter(|p| !(p.namespace == old.namespace && p.name == old.name))
                .cloned()
                .collect();
            if rest.is_empty() {
                self.work.pods.remove(&ip);
            } else {
                self.work.pods.insert(ip, rest.into());
            }
        }
    }

    /// Removes pod `namespace/name`, if present.
    pub fn delete_pod(&mut self, namespace: &str, name: &str) {
        if self.compact.is_some() {
            self.delete_pod_compact(namespace, name);
            return;
        }
        if let Some(old) = self.pods.remove(namespace, name) {
            self.unindex_pod(&old);
            self.changed();
        }
    }

    fn put_namespace(&mut self, ns: Namespace) {
        let name = Arc::clone(&ns.name);
        if put_named(&mut self.work.namespaces, &name, ns) {
            self.changed();
        }
    }

    /// Removes namespace `name`, if present (its services stay, as in CoreDNS, but an
    /// adapter finds the namespace missing).
    pub fn delete_namespace(&mut self, name: &str) {
        if self.work.namespaces.remove(&NameRef(name)).is_some() {
            self.changed();
        }
    }

    fn put_node(&mut self, node: Node) {
        let name = Arc::clone(&node.name);
        if put_named(&mut self.work.nodes, &name, node) {
            self.changed();
        }
    }

    /// Removes node `name`, if present.
    pub fn delete_node(&mut self, name: &str) {
        if self.work.nodes.remove(&NameRef(name)).is_some() {
            self.changed();
        }
    }

    /// Moves `owner` from the IPs in `old` to those in `new` in the reverse index.
    fn reindex(&mut self, owner: IpOwner, old: &[IpAddr], new: &[IpAddr]) {
        let small = old.len() + new.len() <= 16;
        let (old_set, new_set): (HashSet<IpAddr>, HashSet<IpAddr>) = if small {
            (HashSet::new(), HashSet::new())
        } else {
            (old.iter().copied().collect(), new.iter().copied().collect())
        };
        let in_new = |ip: &IpAddr| {
            if small {
                new.contains(ip)
            } else {
                new_set.contains(ip)
            }
        };
        let in_old = |ip: &IpAddr| {
            if small {
                old.contains(ip)
            } else {
                old_set.contains(ip)
            }
        };
        for ip in old.iter().filter(|ip| !in_new(ip)) {
            let Some(owners) = self.work.ips.get(ip) else {
                continue;
            };
            let rest: Vec<IpOwner> = owners.iter().filter(|o| **o != owner).cloned().collect();
            if rest.is_empty() {
                self.work.ips.remove(ip);
            } else {
                self.work.ips.insert(*ip, rest.into());
            }
        }
        for ip in new.iter().filter(|ip| !in_old(ip)) {
            let mut owners: Vec<IpOwner> = self
                .work
                .ips
                .get(ip)
                .map(|o| o.to_vec())
                .unwrap_or_default();
            if let Err(pos) = owners.binary_search(&owner) {
                owners.insert(pos, owner.clone());
                self.work.ips.insert(*ip, owners.into());
            }
        }
    }
}
