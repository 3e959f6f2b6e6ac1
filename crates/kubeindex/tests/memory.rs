//! Memory and publish cost at scale: 10k services, 50k endpoints (10k slices), 100k pods.
//!
//! Prints bytes per object, publish cost and relist peak; asserts only generous bounds.
//! Run with `cargo test -p clusterdns-kubeindex --release --test memory -- --nocapture`.
//! `CLUSTERDNS_MEM_SCALE=0.1` shrinks the load (e.g. for slow debug runs).
#![allow(unsafe_code)]

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use clusterdns_kubeindex::{Index, Kind, Scope};
use common::*;

/// Counts live and peak requested heap bytes.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only adds counters.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            let live = LIVE.fetch_add(new_size, Ordering::Relaxed) + new_size;
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

struct Scale {
    namespaces: usize,
    services: usize,
    endpoints_per_service: usize,
    pods: usize,
}

fn scale() -> Scale {
    let f: f64 = std::env::var("CLUSTERDNS_MEM_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let n = |x: f64| ((x * f) as usize).max(1);
    Scale {
        namespaces: n(100.0),
        services: n(10_000.0),
        endpoints_per_service: 5,
        pods: n(100_000.0),
    }
}

fn v4(i: usize, base: u8) -> String {
    format!(
        "10.{}.{}.{}",
        base as usize + i / 65536,
        (i / 256) % 256,
        i % 256
    )
}

fn ns_name(i: usize, s: &Scale) -> String {
    format!("team-{}", i % s.namespaces)
}

fn service_obj(i: usize, s: &Scale) -> clusterdns_kubeindex::k8s_openapi::api::core::v1::Service {
    svc(
        &ns_name(i, s),
        &format!("service-{i}-backend"),
        &[&v4(i, 96)],
        &[("http", "TCP", 80), ("metrics", "TCP", 9090)],
    )
}

fn slice_obj(
    i: usize,
    s: &Scale,
    gen_: usize,
) -> clusterdns_kubeindex::k8s_openapi::api::discovery::v1::EndpointSlice {
    let eps: Vec<_> = (0..s.endpoints_per_service)
        .map(|e| {
            let n = i * s.endpoints_per_service + e;
            let mut x = endpoint(&ep("0.0.0.0"));
            x.addresses = vec![v4(n + gen_, 128)];
            x.node_name = Some(format!("node-{}", n % 500));
            x.target_ref = Some(
                clusterdns_kubeindex::k8s_openapi::api::core::v1::ObjectReference {
                    kind: Some("Pod".into()),
                    name: Some(format!("service-{i}-backend-7d9f8c6b5-{e:05}")),
                    ..Default::default()
                },
            );
            x
        })
        .collect();
    slice_with(
        &ns_name(i, s),
        &format!("service-{i}-backend-abcde"),
        &format!("service-{i}-backend"),
        "IPv4",
        eps,
        &[("http", "TCP", 8080), ("metrics", "TCP", 9090)],
    )
}

fn pod_obj(i: usize, s: &Scale) -> clusterdns_kubeindex::k8s_openapi::api::core::v1::Pod {
    pod(
        &ns_name(i, s),
        &format!("workload-{}-7d9f8c6b5-{:05}", i / 10, i % 100_000),
        &[&v4(i, 160)],
    )
}

fn load_all(index: &mut Index, s: &Scale) -> [usize; 3] {
    let mut deltas = [0; 3];
    let base = live();
    for i in 0..s.services {
        index.apply(service_obj(i, s));
    }
    index.publish();
    deltas[0] = live() - base;
    let base = live();
    for i in 0..s.services {
        index.apply(slice_obj(i, s, 0));
    }
    index.publish();
    deltas[1] = live() - base;
    let base = live();
    for i in 0..s.pods {
        index.apply(pod_obj(i, s));
    }
    index.publish();
    deltas[2] = live() - base;
    deltas
}

#[test]
fn bytes_per_object_publish_cost_and_relist_peak() {
    let s = scale();
    let start = live();
    let mut index = Index::new();
    for i in 0..s.namespaces {
        index.apply(ns(&format!("team-{i}"), &[("team", "x")]));
    }
    let [svc_bytes, slice_bytes, pod_bytes] = load_all(&mut index, &s);
    index.publish();
    let steady = live() - start;
    let counts = index.snapshots().load().counts();
    let endpoints = counts.endpoints;
    let objects = counts.services + counts.endpoints + counts.pods;
    println!("loaded: {counts:?}");
    println!(
        "services:  {:>10} B  {:>6.0} B/service",
        svc_bytes,
        svc_bytes as f64 / s.services as f64
    );
    println!(
        "endpoints: {:>10} B  {:>6.0} B/endpoint ({} per slice)",
        slice_bytes,
        slice_bytes as f64 / endpoints as f64,
        s.endpoints_per_service
    );
    println!(
        "pods:      {:>10} B  {:>6.0} B/pod",
        pod_bytes,
        pod_bytes as f64 / s.pods as f64
    );
    println!(
        "total:     {:>10} B  {:>6.0} B/object over {objects} objects (services + endpoints + pods; CoreDNS ~850)",
        steady,
        steady as f64 / objects as f64
    );
    println!(
        "index hash tables: {} B; interned strings: {}",
        index.table_bytes(),
        index.interned()
    );
    // Requested bytes; malloc adds ~8-16 B per allocation. Generous bound, not a target.
    assert!(
        steady / objects < 600,
        "{} B/object is too close to CoreDNS's",
        steady / objects
    );

    // Publish cost: one change + publish, while a reader holds the previous snapshot.
    let services = |index: &mut Index, r: usize| {
        index.apply(svc(
            "team-1",
            "service-1-backend",
            &[&format!("10.250.{}.{}", r / 256, r % 256)],
            &[],
        ))
    };
    let slices = |index: &mut Index, r: usize| {
        let mut sl = slice_obj(1, &s, r + 1);
        sl.endpoints.truncate(3);
        index.apply(sl);
    };
    let pods = |index: &mut Index, r: usize| {
        index.apply(pod(
            "team-1",
            "workload-1-7d9f8c6b5-00010",
            &[&format!("10.251.{}.{}", r / 256, r % 256)],
        ))
    };
    for (what, change) in [
        ("Service", &services as &dyn Fn(&mut Index, usize)),
        ("EndpointSlice", &slices),
        ("Pod", &pods),
    ] {
        let snapshots = index.snapshots();
        let rounds = 200;
        let t = Instant::now();
        for r in 0..rounds {
            let _reader = snapshots.load_full();
            change(&mut index, r);
            index.publish();
        }
        println!(
            "one {what} change + publish: {:?}",
            t.elapsed() / rounds as u32
        );
    }

    // The alternative: clone a flat map of the services on every publish.
    let flat: std::collections::HashMap<(String, String), std::sync::Arc<String>> = (0..s.services)
        .map(|i| {
            (
                (ns_name(i, &s), format!("service-{i}")),
                std::sync::Arc::new(String::new()),
            )
        })
        .collect();
    let t = Instant::now();
    for _ in 0..20 {
        std::hint::black_box(flat.clone());
    }
    println!(
        "for comparison, cloning a flat {}-entry service map: {:?}",
        s.services,
        t.elapsed() / 20
    );
    drop(flat);

    // Relist of everything (what follows a 410 Gone), objects streamed one at a time and
    // published every 1024 events like the watch task; nothing changed in the meantime.
    let steady = live() - start;
    PEAK.store(live(), Ordering::Relaxed);
    let mut n = 0;
    let mut tick = |index: &mut Index| {
        n += 1;
        if n % 1024 == 0 {
            index.publish();
        }
    };
    for (kind, count) in [
        (Kind::Service, s.services),
        (Kind::EndpointSlice, s.services),
        (Kind::Pod, s.pods),
    ] {
        index.relist_begin(kind, &Scope::All);
        for i in 0..count {
            match kind {
                Kind::Service => index.relist_apply(&Scope::All, service_obj(i, &s)),
                Kind::EndpointSlice => index.relist_apply(&Scope::All, slice_obj(i, &s, 0)),
                _ => index.relist_apply(&Scope::All, pod_obj(i, &s)),
            }
            tick(&mut index);
        }
        index.relist_end(kind, &Scope::All);
        index.publish();
    }
    let peak = PEAK.load(Ordering::Relaxed) - start;
    let ratio = peak as f64 / steady as f64;
    println!("relist peak: {peak} B = {ratio:.2}x steady state ({steady} B)");
    assert!(ratio <= 1.5, "relist peak {ratio:.2}x steady state");
    let after = index.snapshots().load().counts();
    assert_eq!(after.services, counts.services);
    assert_eq!(after.pods, counts.pods);
    drop(index);

    // The same Pods in the compact index (`client_index compact`): address → namespace.
    let start = live();
    let mut compact = Index::new();
    compact.set_pods_compact();
    for i in 0..s.pods {
        compact.apply(pod_obj(i, &s));
    }
    compact.publish();
    let compact_bytes = live() - start;
    println!(
        "pods, compact index: {:>10} B  {:>6.0} B/pod (full index above: {:.0} B/pod)",
        compact_bytes,
        compact_bytes as f64 / s.pods as f64,
        pod_bytes as f64 / s.pods as f64
    );
    assert!(
        compact_bytes < pod_bytes / 2,
        "compact {compact_bytes} B against {pod_bytes} B"
    );
}
