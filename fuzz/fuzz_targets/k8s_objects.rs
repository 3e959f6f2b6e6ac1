//! Feeds Kubernetes objects, as the API server sends them, through the
//! functions the watch uses (decode, strip, `Index::handle_event`, publish)
//! and the YAML source (`yaml::load_str`). The input is lines:
//!
//! - `S`, `E`, `P`, `N`, `D` + a watch event (`{"type":"ADDED","object":{...}}`)
//!   of a Service, EndpointSlice, Pod, Namespace or Node;
//! - `s`, `e`, `p`, `n`, `d` + a list response (`{"kind":"ServiceList",
//!   "items":[...]}`): a relist (Init, InitApply each item, InitDone);
//!   `s:NS {...}` relists the watcher of namespace NS only;
//! - `Y` + the rest of the input: a YAML file for the offline source.
//!
//! After every line the index publishes, and the snapshot must be coherent:
//! every service, namespace and pod is found by its own name (and IP), every
//! ClusterIP and ready endpoint address points back at its owner in the
//! reverse index. At the end, empty relists of every kind must leave the
//! index empty, reverse index included. Nothing may panic.
#![no_main]

use std::net::IpAddr;
use std::sync::Mutex;

use clusterdns_kubeindex::k8s_openapi::api::core::v1 as core;
use clusterdns_kubeindex::k8s_openapi::api::discovery::v1 as discovery;
use clusterdns_kubeindex::{Counts, Index, IndexedObject, ReverseHit, Scope, Snapshot, yaml};
use kube::core::{ObjectList, WatchEvent};
use kube::runtime::watcher::Event;
use libfuzzer_sys::fuzz_target;
use serde::de::DeserializeOwned;

/// One watch event line: decoded as kube's watcher decodes the stream,
/// stripped as the watch strips it, handed to the index.
fn event<K: IndexedObject + DeserializeOwned>(index: &mut Index, json: &[u8]) {
    let Ok(ev) = serde_json::from_slice::<WatchEvent<K>>(json) else {
        return;
    };
    let ev = match ev {
        WatchEvent::Added(mut o) | WatchEvent::Modified(mut o) => {
            o.strip();
            Event::Apply(o)
        }
        WatchEvent::Deleted(mut o) => {
            o.strip();
            Event::Delete(o)
        }
        WatchEvent::Bookmark(_) | WatchEvent::Error(_) => return,
    };
    index.handle_event(&Scope::All, ev);
}

/// One list line: the watcher's relist of `scope`.
fn relist<K: IndexedObject + DeserializeOwned>(index: &mut Index, scope: &Scope, json: &[u8]) {
    let Ok(list) = serde_json::from_slice::<ObjectList<K>>(json) else {
        return;
    };
    index.handle_event::<K>(scope, Event::Init);
    for mut o in list.items {
        o.strip();
        index.handle_event(scope, Event::InitApply(o));
    }
    index.handle_event::<K>(scope, Event::InitDone);
}

fn reverse_has(snap: &Snapshot, ip: IpAddr, want: impl Fn(&ReverseHit<'_>) -> bool) -> bool {
    snap.reverse(ip).any(|h| want(&h))
}

/// The published snapshot agrees with itself.
fn check(snap: &Snapshot) {
    for s in snap.services() {
        let found = snap
            .service(s.namespace(), s.name())
            .expect("service by name");
        assert_eq!((found.namespace(), found.name()), (s.namespace(), s.name()));
        assert!(
            snap.service_bytes(s.namespace().as_bytes(), s.name().as_bytes())
                .is_some()
        );
        for &ip in s.cluster_ips() {
            assert!(
                reverse_has(snap, ip, |h| matches!(h, ReverseHit::Service(r)
                    if r.namespace() == s.namespace() && r.name() == s.name())),
                "ClusterIP {ip} of {}/{} not in the reverse index",
                s.namespace(),
                s.name()
            );
        }
    }
    for (key, eps) in snap.all_endpoints() {
        assert!(!eps.slices().is_empty(), "endpoints without slices");
        for (_, e) in eps.ready() {
            assert!(
                reverse_has(
                    snap,
                    e.ip(),
                    |h| matches!(h, ReverseHit::Endpoint { namespace, service, .. }
                    if namespace.eq_ignore_ascii_case(key.namespace())
                        && service.eq_ignore_ascii_case(key.name()))
                ),
                "ready endpoint {} of {}/{} not in the reverse index",
                e.ip(),
                key.namespace(),
                key.name()
            );
        }
    }
    for n in snap.namespaces() {
        assert!(snap.namespace(n.name()).is_some(), "namespace by name");
    }
    // Pods found at an address hold that address.
    let addrs = snap
        .services()
        .flat_map(|s| s.cluster_ips().iter().copied())
        .chain(
            snap.all_endpoints()
                .flat_map(|(_, eps)| eps.iter().map(|(_, e)| e.ip())),
        );
    for ip in addrs {
        for p in snap.pods_at(ip) {
            assert!(p.ips().any(|x| x == ip), "pod indexed under another IP");
            assert!(
                snap.pod(p.namespace(), ip).is_some(),
                "pod by namespace and IP"
            );
        }
    }
    let c = snap.counts();
    assert!(c.services_with_endpoints <= c.slices);
}

/// One index for every input: a new one sets up five sharded maps, which
/// would cost more than the input. Each input ends with the index emptied
/// (checked), so an input sees what the one before left only in the
/// interner (pruned), the generation and the synced flag.
static INDEX: Mutex<Option<Index>> = Mutex::new(None);

fuzz_target!(|data: &[u8]| {
    let mut guard = INDEX.lock().unwrap_or_else(|e| e.into_inner());
    let index = guard.get_or_insert_with(Index::new);
    index.set_namespaces_watched(true);
    let mut rest = data;
    while !rest.is_empty() {
        let (line, next) = match rest.iter().position(|&b| b == b'\n') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, &[][..]),
        };
        rest = next;
        let Some((&tag, body)) = line.split_first() else {
            continue;
        };
        let (scope, body) = match body.strip_prefix(b":") {
            Some(scoped) => {
                let end = scoped
                    .iter()
                    .position(|&b| b == b' ')
                    .unwrap_or(scoped.len());
                let ns = String::from_utf8_lossy(&scoped[..end]);
                (Scope::namespace(&ns), &scoped[end..])
            }
            None => (Scope::All, body),
        };
        match tag {
            b'S' => event::<core::Service>(index, body),
            b'E' => event::<discovery::EndpointSlice>(index, body),
            b'P' => event::<core::Pod>(index, body),
            b'N' => event::<core::Namespace>(index, body),
            b'D' => event::<core::Node>(index, body),
            b's' => relist::<core::Service>(index, &scope, body),
            b'e' => relist::<discovery::EndpointSlice>(index, &scope, body),
            b'p' => relist::<core::Pod>(index, &scope, body),
            b'n' => relist::<core::Namespace>(index, &scope, body),
            b'd' => relist::<core::Node>(index, &Scope::All, body),
            b'Y' => {
                // The rest of the input, this line's remainder included.
                let start = body.as_ptr() as usize - data.as_ptr() as usize;
                let text = String::from_utf8_lossy(&data[start..]);
                let _ = yaml::load_str(index, &text);
                rest = &[];
            }
            _ => continue,
        }
        index.publish();
        check(&index.snapshots().load());
    }
    // Empty relists of every kind: nothing may be left anywhere.
    index.reset::<core::Service>(&Scope::All, []);
    index.reset::<discovery::EndpointSlice>(&Scope::All, []);
    index.reset::<core::Pod>(&Scope::All, []);
    index.reset::<core::Namespace>(&Scope::All, []);
    index.reset::<core::Node>(&Scope::All, []);
    index.publish();
    let snap = index.snapshots().load();
    assert_eq!(
        snap.counts(),
        Counts::default(),
        "objects left after empty relists of every kind"
    );
});
