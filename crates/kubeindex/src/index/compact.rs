//! The compact Pod index (`client_index compact` of the `kubernetes` plugin): which
//! namespace the Pod at an address is in, and nothing else. A Pod costs one entry here
//! (a 64-bit hash of its namespace and name, its address and a namespace id) and one in
//! the snapshot's address map (address, namespace id, Pod count), instead of a slim
//! [`Pod`] with its name behind two maps. Only the primary address (`status.podIP`) is
//! kept: it is the one CoreDNS's Pod index knows a client by.
//!
//! Pods are told apart by the hash of their key alone; two Pods whose keys collide in
//! 64 bits would share an entry (about one chance in 10^9 at 100k Pods).

use std::hash::BuildHasher as _;
use std::net::IpAddr;
use std::sync::Arc;

use hashbrown::{DefaultHashBuilder, HashMap, HashSet};

use super::{Index, Scope};
use crate::model::{KeyRef, ObjKey, Pod};

/// Namespace id meaning "Pods of several namespaces share this address" (host-network
/// Pods on one node): such an address has no namespace.
pub(crate) const SEVERAL: u32 = u32::MAX;

/// What the snapshot keeps per address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct At {
    /// Index into [`Snapshot::compact_ns`](crate::Snapshot), or [`SEVERAL`].
    pub(crate) ns: u32,
    /// Pods at the address.
    pub(crate) pods: u32,
}

/// The writer's side: each Pod's address and namespace id, by the hash of its key.
#[derive(Default)]
pub(crate) struct CompactPods {
    hasher: DefaultHashBuilder,
    by_pod: HashMap<u64, (IpAddr, u32)>,
    ns_ids: HashMap<Arc<str>, u32>,
}

impl CompactPods {
    fn hash(&self, namespace: &str, name: &str) -> u64 {
        self.hasher.hash_one(KeyRef { namespace, name })
    }

    pub(crate) fn len(&self) -> usize {
        self.by_pod.len()
    }

    pub(crate) fn allocation_size(&self) -> usize {
        self.by_pod.allocation_size() + self.ns_ids.allocation_size()
    }
}

impl Index {
    /// Keeps Pods in the compact index (address → namespace) instead of as objects: for
    /// a consumer that only asks which namespace a client address is in. Call before
    /// any Pod is applied.
    pub fn set_pods_compact(&mut self) {
        if self.compact.is_none() {
            self.compact = Some(CompactPods::default());
        }
    }

    /// Whether Pods are kept compact (see [`set_pods_compact`](Self::set_pods_compact)).
    pub fn pods_compact(&self) -> bool {
        self.compact.is_some()
    }

    pub(super) fn put_pod_compact(&mut self, pod: Pod) {
        let Some(c) = self.compact.as_mut() else {
            return;
        };
        let hash = c.hash(&pod.namespace, &pod.name);
        let ns = match c.ns_ids.get(&*pod.namespace) {
            Some(&id) => id,
            None => {
                let names = Arc::make_mut(&mut self.work.compact_ns);
                let id = u32::try_from(names.len()).unwrap_or(SEVERAL - 1);
                names.push(Arc::clone(&pod.namespace));
                c.ns_ids.insert(Arc::clone(&pod.namespace), id);
                id
            }
        };
        let new = (pod.ip, ns);
        match c.by_pod.insert(hash, new) {
            Some(old) if old == new => return,
            Some(old) => self.compact_unindex(old),
            None => {}
        }
        let at = match self.work.compact.get(&pod.ip) {
            None => At { ns, pods: 1 },
            Some(at) => At {
                ns: if at.ns == ns { ns } else { SEVERAL },
                pods: at.pods.saturating_add(1),
            },
        };
        self.work.compact.insert(pod.ip, at);
        self.changed();
    }

    /// Removes the compact entry of Pod `namespace/name`, if present.
    pub(super) fn delete_pod_compact(&mut self, namespace: &str, name: &str) {
        let Some(c) = self.compact.as_mut() else {
            return;
        };
        let hash = c.hash(namespace, name);
        if let Some(old) = c.by_pod.remove(&hash) {
            self.compact_unindex(old);
            self.changed();
        }
    }

    /// Takes one Pod (already removed from `by_pod`) off its address.
    fn compact_unindex(&mut self, (ip, _ns): (IpAddr, u32)) {
        let Some(&at) = self.work.compact.get(&ip) else {
            return;
        };
        if at.pods <= 1 {
            self.work.compact.remove(&ip);
            return;
        }
        let ns = if at.ns == SEVERAL {
            // Rare (host-network Pods of several namespaces on one node): find out whether
            // the Pods left there still span several namespaces.
            self.compact_recount(ip)
        } else {
            at.ns
        };
        self.work.compact.insert(
            ip,
            At {
                ns,
                pods: at.pods - 1,
            },
        );
    }

    fn compact_recount(&self, ip: IpAddr) -> u32 {
        let Some(c) = &self.compact else {
            return SEVERAL;
        };
        let mut found = None;
        for &(at, ns) in c.by_pod.values() {
            if at != ip {
                continue;
            }
            match found {
                None => found = Some(ns),
                Some(f) if f == ns => {}
                Some(_) => return SEVERAL,
            }
        }
        found.unwrap_or(SEVERAL)
    }

    /// The end of a Pod relist in compact mode: the Pods of `scope` whose keys were not
    /// listed are removed.
    pub(super) fn relist_end_compact(&mut self, scope: &Scope, seen: &HashSet<ObjKey>) {
        let Some(c) = &self.compact else {
            return;
        };
        let listed: HashSet<u64> = seen.iter().map(|k| c.hash(&k.namespace, &k.name)).collect();
        let names = &self.work.compact_ns;
        let doomed: Vec<u64> = c
            .by_pod
            .iter()
            .filter(|(h, (_, ns))| {
                !listed.contains(*h) && names.get(*ns as usize).is_some_and(|n| scope.contains(n))
            })
            .map(|(h, _)| *h)
            .collect();
        for hash in doomed {
            if let Some(old) = self.compact.as_mut().and_then(|c| c.by_pod.remove(&hash)) {
                self.compact_unindex(old);
                self.changed();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1 as core;

    use crate::{Index, Scope};

    fn pod(ns: &str, name: &str, ip: &str) -> core::Pod {
        let mut p = core::Pod::default();
        p.metadata.namespace = Some(ns.into());
        p.metadata.name = Some(name.into());
        p.status = Some(core::PodStatus {
            pod_ip: Some(ip.into()),
            phase: Some("Running".into()),
            ..Default::default()
        });
        p
    }

    fn ns_at(index: &Index, ip: &str) -> Option<String> {
        index
            .working()
            .compact_pod_namespace(ip.parse().unwrap())
            .map(str::to_string)
    }

    #[test]
    fn keeps_address_to_namespace_through_updates_deletes_and_relists() {
        let mut index = Index::new();
        index.set_pods_compact();
        index.apply(pod("a", "p1", "10.0.0.1"));
        index.apply(pod("a", "p1", "10.0.0.1"));
        index.apply(pod("b", "p2", "10.0.0.2"));
        assert_eq!(ns_at(&index, "10.0.0.1").as_deref(), Some("a"));
        assert_eq!(ns_at(&index, "10.0.0.2").as_deref(), Some("b"));
        // No Pod objects are kept.
        assert_eq!(
            index.working().pods_at("10.0.0.1".parse().unwrap()).count(),
            0
        );

        // A new address for the same Pod moves it.
        index.apply(pod("a", "p1", "10.0.0.3"));
        assert_eq!(ns_at(&index, "10.0.0.1"), None);
        assert_eq!(ns_at(&index, "10.0.0.3").as_deref(), Some("a"));

        // Host-network Pods of two namespaces on one address: none, until one goes.
        index.apply(pod("a", "h1", "10.0.0.9"));
        index.apply(pod("b", "h2", "10.0.0.9"));
        assert_eq!(ns_at(&index, "10.0.0.9"), None);
        index.delete(&pod("a", "h1", "10.0.0.9"));
        assert_eq!(ns_at(&index, "10.0.0.9").as_deref(), Some("b"));

        // A finished Pod is forgotten.
        let mut done = pod("b", "p2", "10.0.0.2");
        done.status.as_mut().unwrap().phase = Some("Succeeded".into());
        index.apply(done);
        assert_eq!(ns_at(&index, "10.0.0.2"), None);

        // A relist sweeps the Pods it did not list, in its scope only.
        index.reset(&Scope::namespace("a"), [pod("a", "p1", "10.0.0.3")]);
        assert_eq!(ns_at(&index, "10.0.0.3").as_deref(), Some("a"));
        assert_eq!(ns_at(&index, "10.0.0.9").as_deref(), Some("b"));
        index.reset(&Scope::All, Vec::<core::Pod>::new());
        assert_eq!(ns_at(&index, "10.0.0.3"), None);
        assert_eq!(ns_at(&index, "10.0.0.9"), None);
        assert!(index.is_dirty());
    }
}
