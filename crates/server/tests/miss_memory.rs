//! The heap after many forwarded misses (issue 15: node-cache's RSS after
//! its miss phase): the server's live bytes, counted by a global allocator
//! that tracks what is allocated and not yet freed, must not grow with the
//! number of queries once the cache is full. The Corefile is node-cache's
//! cluster block (cache in front of `forward … force_tcp`) and a `whoami`
//! upstream on the same server; the queries are real UDP datagrams to
//! 127.0.0.1 ports.
// A counting global allocator needs `unsafe impl GlobalAlloc`; it only
// forwards to `System`.
#![allow(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use clusterdns_server::{ConfigSource, Options, control, serve};

/// Forwards to [`System`]; keeps the bytes live in the whole process.
struct Live;

/// Bytes allocated and not freed, in the whole process.
static LIVE: AtomicI64 = AtomicI64::new(0);

/// Live blocks by requested size (below 4 KiB): what a failure names, so
/// that a leak is found by its size (forward once leaked its coalescing
/// key, one block of the query's length plus one per forwarded query).
static BY_SIZE: [AtomicI64; 4096] = [const { AtomicI64::new(0) }; 4096];

fn note(size: usize, d: i64) {
    if let Some(c) = BY_SIZE.get(size) {
        c.fetch_add(d, Ordering::Relaxed);
    }
}

fn by_size() -> Vec<i64> {
    BY_SIZE.iter().map(|c| c.load(Ordering::Relaxed)).collect()
}

// SAFETY: every call is forwarded unchanged to the system allocator.
unsafe impl GlobalAlloc for Live {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        note(layout.size(), 1);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        note(layout.size(), 1);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        note(layout.size(), -1);
        note(new_size, 1);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        note(layout.size(), -1);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Live = Live;

/// An A query for `name` with ID `id`.
fn query(id: u16, name: &str) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[1, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.trim_end_matches('.').split('.') {
        q.push(u8::try_from(label.len()).unwrap());
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

/// Asks `n` distinct names starting at `first`, up to `window` in flight;
/// returns how many were answered with NOERROR.
fn ask(sock: &UdpSocket, to: SocketAddr, first: u32, n: u32, window: u32) -> u32 {
    let mut sent = 0;
    let mut answered = 0;
    let mut in_flight = 0;
    let mut buf = [0u8; 1500];
    loop {
        while sent < n && in_flight < window {
            let i = first + sent;
            let name = format!("m{i:07}.default.svc.cluster.local.");
            sock.send_to(&query((i % 65_536) as u16, &name), to)
                .unwrap();
            sent += 1;
            in_flight += 1;
        }
        if in_flight == 0 {
            return answered;
        }
        match sock.recv_from(&mut buf) {
            Ok((len, _)) => {
                in_flight -= 1;
                if len >= 12 && buf[3] & 0x0f == 0 {
                    answered += 1;
                }
            }
            // Two seconds without a reply: what is outstanding is lost.
            Err(_) => in_flight = 0,
        }
    }
}

#[test]
fn live_heap_stays_flat_over_forwarded_misses() {
    let dir = tempfile::tempdir().unwrap();
    let corefile = dir.path().join("Corefile");
    // Port 5389 on two loopback addresses of this test's own.
    std::fs::write(
        &corefile,
        "cluster.local:5389 {\n    bind 127.0.0.93\n    cache {\n        success 9984 30\n        denial 9984 5\n    }\n    forward . 127.0.0.94:5389 {\n        force_tcp\n    }\n}\n\
         .:5389 {\n    bind 127.0.0.94\n    whoami\n}\n",
    )
    .unwrap();
    let opts = Options {
        source: ConfigSource::File(corefile.clone()),
        dns_port: 53,
        registry: clusterdns_plugins::registry(),
        quiet: true,
        udp_workers: Some(1),
        banner: String::new(),
        metrics: None,
        inherited: Default::default(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (mut controller, ctl) = control();
    let _server = rt.spawn(serve(opts, ctl));
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(10), controller.serving()).await
    })
    .expect("serving within 10 s")
    .expect("serving");
    let to: SocketAddr = "127.0.0.93:5389".parse().unwrap();
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();

    // Fill the cache (and every pool, map and buffer the path keeps).
    let warm = 20_000;
    assert!(ask(&sock, to, 0, warm, 200) > warm * 9 / 10);
    std::thread::sleep(Duration::from_millis(200));
    let before = LIVE.load(Ordering::Relaxed);
    let sizes_before = by_size();
    let n = 40_000;
    let ok = ask(&sock, to, warm, n, 200);
    assert!(ok > n * 9 / 10, "{ok} of {n} answered");
    std::thread::sleep(Duration::from_millis(200));
    let after = LIVE.load(Ordering::Relaxed);
    // The sizes whose live count grew most: (more blocks, size).
    let mut grown: Vec<(i64, usize)> = by_size()
        .iter()
        .zip(&sizes_before)
        .enumerate()
        .map(|(size, (a, b))| (a - b, size))
        .collect();
    grown.sort_unstable();
    let grown = &grown[grown.len() - 5..];
    let per_query = (after - before) as f64 / f64::from(n);
    eprintln!(
        "live heap {before} -> {after} bytes over {n} misses ({per_query:.1} B/query); \
         most grown (blocks, size): {grown:?}"
    );
    // The full cache is replaced entry by entry; what the path keeps per
    // query must be nothing (a few KiB of map growth and timing slack).
    assert!(
        after - before < 512 * 1024,
        "live heap grew {} bytes over {n} forwarded misses ({per_query:.1} B/query); \
         most grown (blocks, size): {grown:?}",
        after - before
    );
    controller.shutdown();
}
