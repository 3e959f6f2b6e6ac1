//! The hot-path promise of ARCHITECTURE.md, checked: answers we own
//! (whoami, hosts, any, chaos, cache hits, kubernetes records, file zones) and the
//! response hooks of prometheus, errors (no error), loadbalance and cache
//! are produced by `serve_sync` with **zero heap allocations per query**.
//!
//! Each scenario builds an [`Instance`] from Corefile text with the real
//! plugin registry, warms up, then counts the allocations made on this
//! thread across 10,000 `serve_sync` calls with varied IDs, qname case,
//! client family, transport and EDNS (none; plain; DO bit with a COOKIE
//! option). Every reply is checked (ID, rcode, answer count) so the test
//! cannot pass by answering nothing.
//!
//! Debugging: `CLUSTERDNS_ALLOC_TRACE=N cargo test -p clusterdns-server
//! --test alloc -- --nocapture` prints the backtrace of the first `N`
//! allocations counted in each scenario.

// A counting global allocator needs `unsafe impl GlobalAlloc`; it only
// forwards to `System`.
#![allow(unsafe_code)]
#![allow(clippy::unwrap_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use clusterdns_contract::metrics::Registry;
use clusterdns_contract::{Flow, Plugin, PluginDef, Proto, Request, ResponseWriter, SetupCtx};
use clusterdns_corefile::{ConfigError, Directive};
use clusterdns_server::testing::{Served, serve_sync};
use clusterdns_server::{ConfigSource, Instance, Mux};
use clusterdns_wire::Header;

/// Forwards to [`System`]; counts on threads that asked for it.
struct Counting;

thread_local! {
    /// Counting is on for this thread.
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
    /// Allocations (alloc, alloc_zeroed, realloc) counted on this thread.
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
    /// Bytes requested by those allocations.
    static BYTES: Cell<u64> = const { Cell::new(0) };
    /// Replies with TC seen on this thread.
    static TRUNCATED: Cell<u64> = const { Cell::new(0) };
}

/// Backtraces still to print (from `CLUSTERDNS_ALLOC_TRACE`).
static TRACE_LEFT: AtomicUsize = AtomicUsize::new(0);

fn record(size: usize) {
    let on = ACTIVE.try_with(Cell::get).unwrap_or(false);
    if !on {
        return;
    }
    let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
    let _ = BYTES.try_with(|c| c.set(c.get() + size as u64));
    if TRACE_LEFT.load(Ordering::Relaxed) > 0 {
        TRACE_LEFT.fetch_sub(1, Ordering::Relaxed);
        // The backtrace allocates: not counted, not traced.
        let _ = ACTIVE.try_with(|a| a.set(false));
        let bt = std::backtrace::Backtrace::force_capture();
        eprintln!("allocation of {size} bytes:\n{bt}");
        let _ = ACTIVE.try_with(|a| a.set(true));
    }
}

// SAFETY: every call is forwarded unchanged to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        record(new_size);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `f` with counting on for this thread; returns (allocations, bytes).
fn counted(f: impl FnOnce()) -> (u64, u64) {
    ALLOCS.with(|c| c.set(0));
    BYTES.with(|c| c.set(0));
    ACTIVE.with(|a| a.set(true));
    f();
    ACTIVE.with(|a| a.set(false));
    (ALLOCS.with(Cell::get), BYTES.with(Cell::get))
}

/// How a query carries EDNS.
#[derive(Clone, Copy, Debug)]
enum Edns {
    None,
    /// OPT, payload 1232, no DO, no options.
    Plain,
    /// OPT, payload 4096, DO bit, an 8-byte client COOKIE.
    DoCookie,
}

const EDNS: [Edns; 3] = [Edns::None, Edns::Plain, Edns::DoCookie];

/// One question of a scenario and what its reply must look like.
#[derive(Clone, Copy, Debug)]
struct Ask {
    name: &'static str,
    qtype: u16,
    qclass: u16,
    rcode: u8,
    /// Minimum answer count.
    answers: u16,
}

const IN: u16 = 1;
const CH: u16 = 3;
const A: u16 = 1;
const AAAA: u16 = 28;
const PTR: u16 = 12;
const TXT: u16 = 16;
const SRV: u16 = 33;
const ANY: u16 = 255;
const NOERROR: u8 = 0;
const REFUSED: u8 = 5;
const SERVFAIL: u8 = 2;
const NXDOMAIN: u8 = 3;

const fn ask(name: &'static str, qtype: u16, rcode: u8, answers: u16) -> Ask {
    Ask {
        name,
        qtype,
        qclass: IN,
        rcode,
        answers,
    }
}

/// A query packet: ID, RD, the name with letters' case flipped by `case`
/// bits, and the OPT of `edns`.
fn packet(id: u16, a: &Ask, case: u64, edns: Edns) -> Vec<u8> {
    let arcount: u16 = if matches!(edns, Edns::None) { 0 } else { 1 };
    let mut p = Vec::with_capacity(128);
    p.extend_from_slice(&id.to_be_bytes());
    p.extend_from_slice(&0x0100u16.to_be_bytes());
    p.extend_from_slice(&[0, 1, 0, 0, 0, 0]);
    p.extend_from_slice(&arcount.to_be_bytes());
    let mut bit = 0;
    for label in a.name.trim_end_matches('.').split('.') {
        p.push(label.len() as u8);
        for b in label.bytes() {
            let flip = b.is_ascii_alphabetic() && (case >> (bit % 64)) & 1 == 1;
            bit += 1;
            p.push(if flip { b ^ 0x20 } else { b });
        }
    }
    p.push(0);
    p.extend_from_slice(&a.qtype.to_be_bytes());
    p.extend_from_slice(&a.qclass.to_be_bytes());
    match edns {
        Edns::None => {}
        Edns::Plain => {
            p.extend_from_slice(&[0, 0, 41]);
            p.extend_from_slice(&1232u16.to_be_bytes());
            p.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
        }
        Edns::DoCookie => {
            p.extend_from_slice(&[0, 0, 41]);
            p.extend_from_slice(&4096u16.to_be_bytes());
            p.extend_from_slice(&[0, 0, 0x80, 0]);
            // RDLENGTH 12: COOKIE (10), length 8, client cookie.
            p.extend_from_slice(&[0, 12, 0, 10, 0, 8]);
            p.extend_from_slice(&case.to_be_bytes());
        }
    }
    p
}

/// One query to send: packet, client, transport, and the question it asks.
struct Shot {
    packet: Vec<u8>,
    id: u16,
    client: SocketAddr,
    proto: Proto,
    ask: Ask,
    /// The largest reply the client accepts.
    limit: usize,
}

/// `n` shots cycling through every (question, EDNS) pair, with random IDs
/// and case; every 7th over TCP, every other from IPv6.
fn shots(asks: &[Ask], n: usize, rng: &mut fastrand::Rng) -> Vec<Shot> {
    let v4: SocketAddr = "127.0.0.1:40000".parse().unwrap();
    let v6: SocketAddr = "[::1]:40001".parse().unwrap();
    (0..n)
        .map(|i| {
            let a = asks[i % asks.len()];
            let edns = EDNS[(i / asks.len()) % EDNS.len()];
            let id = rng.u16(..);
            let case = rng.u64(..);
            let proto = if i % 7 == 3 { Proto::Tcp } else { Proto::Udp };
            let limit = match (proto, edns) {
                (Proto::Tcp, _) => 65535,
                (Proto::Udp, Edns::None) => 512,
                (Proto::Udp, Edns::Plain) => 1232,
                (Proto::Udp, Edns::DoCookie) => 4096,
            };
            Shot {
                packet: packet(id, &a, case, edns),
                id,
                client: if i % 2 == 0 { v4 } else { v6 },
                proto,
                ask: a,
                limit,
            }
        })
        .collect()
}

/// Serves `s` and checks the reply. Allocates nothing unless it fails.
fn serve_and_check(mux: &Mux, s: &Shot, w: &mut ResponseWriter) {
    let local: SocketAddr = match s.client {
        SocketAddr::V4(_) => SocketAddr::from(([127, 0, 0, 1], 53)),
        SocketAddr::V6(_) => SocketAddr::from(([0u16, 0, 0, 0, 0, 0, 0, 1], 53)),
    };
    let served = serve_sync(mux, &s.packet, s.client, local, s.proto, w);
    let h = Header::parse(w.bytes()).ok();
    let tc = h.as_ref().is_some_and(|h| h.flags & 0x0200 != 0);
    if tc {
        TRUNCATED.with(|t| t.set(t.get() + 1));
    }
    let ok = served == Served::Reply
        && w.bytes().len() <= s.limit
        && (!tc || s.proto == Proto::Udp)
        && h.as_ref().is_some_and(|h| {
            h.id == s.id && h.rcode_low() == s.ask.rcode && (tc || h.ancount >= s.ask.answers)
        });
    if !ok {
        ACTIVE.with(|a| a.set(false));
        panic!(
            "{:?} {} type {}: served {served:?}, {} bytes (limit {}), reply header {h:?}",
            s.proto,
            s.ask.name,
            s.ask.qtype,
            w.bytes().len(),
            s.limit
        );
    }
}

/// What one measured run saw.
struct Measured {
    allocs: u64,
    bytes: u64,
    /// Measured replies with TC.
    truncated: u64,
    /// The metrics page after the run.
    metrics: String,
}

const WARMUP: usize = 100;
const MEASURED: usize = 10_000;

/// Builds `corefile` (relative paths under `dir`) with `registry`, warms
/// up, then counts what `MEASURED` queries allocate.
fn measure(
    label: &str,
    corefile: &str,
    dir: &Path,
    asks: &[Ask],
    registry: &[PluginDef],
) -> Measured {
    assert!(
        asks.len() * EDNS.len() <= WARMUP,
        "{label}: warm-up too short"
    );
    let source = ConfigSource::Text {
        name: dir.join("Corefile"),
        text: corefile.to_owned(),
    };
    let metrics = Arc::new(Registry::new());
    let instance = Instance::build(&source, registry, 53, metrics.clone())
        .unwrap_or_else(|e| panic!("{label}: {e}"));
    let mux = &instance.listeners[0].mux;
    // Seeded, so the varied inputs are the same on every run.
    let mut rng = fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15 ^ label.len() as u64);
    let warm = shots(asks, WARMUP, &mut rng);
    let hot = shots(asks, MEASURED, &mut rng);
    let mut w = ResponseWriter::new();
    for s in &warm {
        serve_and_check(mux, s, &mut w);
    }
    let trace = std::env::var("CLUSTERDNS_ALLOC_TRACE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    TRACE_LEFT.store(trace, Ordering::Relaxed);
    TRUNCATED.with(|t| t.set(0));
    let (allocs, bytes) = counted(|| {
        for s in &hot {
            serve_and_check(mux, s, &mut w);
        }
    });
    TRACE_LEFT.store(0, Ordering::Relaxed);
    eprintln!("{label}: {allocs} allocations, {bytes} bytes in {MEASURED} queries");
    Measured {
        allocs,
        bytes,
        truncated: TRUNCATED.with(Cell::get),
        metrics: metrics.render(),
    }
}

/// [`measure`] with the real plugins; asserts nothing was allocated.
fn zero_alloc(label: &str, corefile: &str, dir: &Path, asks: &[Ask]) -> Measured {
    let m = measure(label, corefile, dir, asks, &clusterdns_plugins::registry());
    assert_eq!(
        (m.allocs, m.bytes),
        (0, 0),
        "{label}: allocations, bytes in {MEASURED} queries \
         (CLUSTERDNS_ALLOC_TRACE=5 -- --nocapture shows where)"
    );
    m
}

/// The sum of every series of `family` on a metrics page.
fn metric_sum(page: &str, family: &str) -> f64 {
    page.lines()
        .filter(|l| {
            l.strip_prefix(family)
                .is_some_and(|r| r.starts_with('{') || r.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A plugin that allocates 16 bytes per query, then passes it on.
#[derive(Debug)]
struct Leaky;

impl Plugin for Leaky {
    fn name(&self) -> &'static str {
        "leaky"
    }
    fn query(&self, _req: &Request<'_>, _w: &mut ResponseWriter) -> Flow {
        std::hint::black_box(Box::new([0u8; 16]));
        Flow::Next
    }
}

fn leaky_setup(ctx: &mut SetupCtx<'_>, _dirs: &[&Directive]) -> Result<(), ConfigError> {
    ctx.add_plugin(Arc::new(Leaky));
    Ok(())
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// The counter itself: an allocation on this thread is seen, one on
/// another thread meanwhile is not.
#[test]
fn counter_counts_this_thread_only() {
    let (n, bytes) = counted(|| {
        let v: Vec<u8> = Vec::with_capacity(100);
        std::hint::black_box(&v);
    });
    assert_eq!((n, bytes), (1, 100));
    let barrier = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        s.spawn(|| {
            barrier.wait();
            std::hint::black_box(Vec::<u8>::with_capacity(1000));
            barrier.wait();
        });
        let (n, bytes) = counted(|| {
            barrier.wait();
            barrier.wait();
        });
        assert_eq!((n, bytes), (0, 0));
    });
}

/// The harness sees an allocation made inside a chain: one per query.
#[test]
fn harness_sees_a_plugin_that_allocates() {
    let d = tempdir();
    let mut registry = vec![PluginDef {
        name: "leaky",
        setup: leaky_setup,
    }];
    registry.extend(clusterdns_plugins::registry());
    let m = measure(
        "leaky+whoami",
        ".:53 {\n leaky\n whoami\n}",
        d.path(),
        &[ask("example.org.", A, NOERROR, 0)],
        &registry,
    );
    assert_eq!((m.allocs, m.bytes), (MEASURED as u64, 16 * MEASURED as u64));
}

#[test]
fn whoami() {
    let d = tempdir();
    zero_alloc(
        "whoami",
        ".:53 {\n whoami\n}",
        d.path(),
        &[
            ask("example.org.", A, NOERROR, 0),
            ask("a.long.name.example.org.", AAAA, NOERROR, 0),
            ask("x.", TXT, NOERROR, 0),
        ],
    );
}

#[test]
fn erratic() {
    let d = tempdir();
    // Dropping off (a dropped query writes nothing to measure), and no
    // truncation: the harness takes TC over TCP for a server bug, where
    // erratic sets it on purpose (a TC reply is built as the others).
    zero_alloc(
        "erratic",
        ".:53 {\n erratic {\n  drop 0\n }\n}",
        d.path(),
        &[
            ask("example.org.", A, NOERROR, 1),
            ask("a.long.name.example.org.", AAAA, NOERROR, 1),
            ask("x.", TXT, SERVFAIL, 0),
        ],
    );
}

const HOSTS: &str = "hosts {
  10.0.0.1 a.example.org
  10.0.0.2 a.example.org
  10.0.0.3 a.example.org
  fd00::1 a.example.org
  10.0.0.9 b.example.org b.alias.example.org
  ttl 60
 }";

fn hosts_asks() -> Vec<Ask> {
    vec![
        ask("a.example.org.", A, NOERROR, 3),
        ask("a.example.org.", AAAA, NOERROR, 1),
        ask("b.alias.example.org.", A, NOERROR, 1),
        ask("1.0.0.10.in-addr.arpa.", PTR, NOERROR, 1),
        ask(
            "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa.",
            PTR,
            NOERROR,
            1,
        ),
        // Name known, type not: NODATA. Name unknown: SERVFAIL (hosts has
        // no SOA for an NXDOMAIN, as CoreDNS).
        ask("b.example.org.", AAAA, NOERROR, 0),
        ask("nope.example.org.", A, SERVFAIL, 0),
    ]
}

#[test]
fn hosts() {
    let d = tempdir();
    zero_alloc(
        "hosts",
        &format!(".:53 {{\n {HOSTS}\n}}"),
        d.path(),
        &hosts_asks(),
    );
}

#[test]
fn any() {
    let d = tempdir();
    zero_alloc(
        "any",
        ".:53 {\n any\n whoami\n}",
        d.path(),
        &[
            ask("example.org.", ANY, NOERROR, 1),
            ask("a.b.example.org.", ANY, NOERROR, 1),
        ],
    );
}

#[test]
fn chaos() {
    let d = tempdir();
    let ch = |name| Ask {
        name,
        qtype: TXT,
        qclass: CH,
        rcode: NOERROR,
        answers: 1,
    };
    zero_alloc(
        "chaos",
        ".:53 {\n chaos clusterdns-test alice bob\n}",
        d.path(),
        &[
            ch("version.bind."),
            ch("version.server."),
            Ask {
                answers: 2,
                ..ch("authors.bind.")
            },
            ch("hostname.bind."),
            ch("id.server."),
        ],
    );
}

/// acl in front of hosts: allowed queries, and the REFUSED and empty
/// NOERROR replies (with their extended error) it writes itself.
#[test]
fn acl_policies() {
    let d = tempdir();
    let mut asks = hosts_asks();
    asks.push(ask("a.example.org.", SRV, REFUSED, 0));
    asks.push(ask("a.example.org.", TXT, NOERROR, 0));
    zero_alloc(
        "acl+hosts",
        &format!(
            ".:53 {{\n acl {{\n  block type SRV\n  filter type TXT net 127.0.0.0/8 ::1\n  allow net 127.0.0.0/8 ::1\n  block\n }}\n {HOSTS}\n}}"
        ),
        d.path(),
        &asks,
    );
}

/// Blocks chosen by their views: the server asks the first block's view
/// (false) then the second's (true) for every query.
#[test]
fn view_selection() {
    let d = tempdir();
    zero_alloc(
        "view+hosts",
        &format!(
            ".:53 {{\n view tcp {{\n  expr proto() == 'tcp' && type() in ['MX', 'SRV']\n }}\n whoami\n}}\n\
             .:53 {{\n view local {{\n  expr (incidr(client_ip(), '127.0.0.0/8') or incidr(client_ip(), '::1/128')) and type() != 'MX' and class() == 'IN'\n }}\n {HOSTS}\n}}\n\
             .:53 {{\n whoami\n}}"
        ),
        d.path(),
        &hosts_asks(),
    );
}

/// kubeadm's plugin order with the hooks that run after an answer:
/// prometheus counts, errors sees no error, loadbalance shuffles.
#[test]
fn kubeadm_hooks_around_hosts() {
    let d = tempdir();
    let m = zero_alloc(
        "prometheus+errors+loadbalance+hosts",
        &format!(
            ".:53 {{\n errors\n health {{\n  lameduck 5s\n }}\n ready\n \
             prometheus :9153\n loadbalance\n {HOSTS}\n}}"
        ),
        d.path(),
        &hosts_asks(),
    );
    let n = metric_sum(&m.metrics, "coredns_dns_requests_total");
    assert_eq!(n, (WARMUP + MEASURED) as f64, "{}", m.metrics);
}

/// cache in front of hosts: after the warm-up every query is a hit, but
/// for hosts' SERVFAIL, an rcode the server writes, which CoreDNS's cache
/// never sees and so never stores.
#[test]
fn cache_hits() {
    let d = tempdir();
    let asks = hosts_asks();
    let m = zero_alloc(
        "cache+hosts",
        &format!(".:53 {{\n prometheus :9153\n cache 30\n {HOSTS}\n}}"),
        d.path(),
        &asks,
    );
    let hits = metric_sum(&m.metrics, "coredns_cache_hits_total");
    let cached = asks.iter().filter(|a| a.rcode != SERVFAIL).count();
    let want = MEASURED * cached / asks.len();
    assert!(
        hits >= want as f64,
        "{hits} hits, want {want}: {}",
        m.metrics
    );
}

/// The kubernetes plugin on a snapshot file (no API server): service,
/// SRV, PTR, pod and negative answers, behind kubeadm's hooks; with
/// `cache`, every query after the warm-up is a hit, so the lookup itself
/// is measured without it. `options`: more lines in the plugin's block.
fn kubernetes(label: &str, cache: &str, options: &str) -> Measured {
    let d = tempdir();
    let objects = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../plugins/src/kubernetes/testdata/objects.yaml"),
    )
    .unwrap();
    std::fs::write(d.path().join("cluster.yaml"), objects).unwrap();
    zero_alloc(
        label,
        &format!(
            ".:53 {{
 errors
 prometheus :9153
 kubernetes cluster.local in-addr.arpa ip6.arpa {{
  snapshot cluster.yaml
  pods insecure
  fallthrough in-addr.arpa ip6.arpa
  ttl 30
  {options}
 }}
 {cache}
 loadbalance
}}"
        ),
        d.path(),
        &[
            ask("svc1.kplug.svc.cluster.local.", A, NOERROR, 1),
            ask("dual.kplug.svc.cluster.local.", AAAA, NOERROR, 1),
            ask("_http._tcp.svc1.kplug.svc.cluster.local.", SRV, NOERROR, 1),
            ask("1.77.96.10.in-addr.arpa.", PTR, NOERROR, 1),
            ask("10-1-2-3.kplug.pod.cluster.local.", A, NOERROR, 1),
            ask("nope.kplug.svc.cluster.local.", A, NXDOMAIN, 0),
            ask("svc1.kplug.svc.cluster.local.", TXT, NOERROR, 0),
        ],
    )
}

#[test]
fn kubernetes_snapshot() {
    let m = kubernetes("kubernetes", "", "");
    assert_eq!(metric_sum(&m.metrics, "coredns_cache_hits_total"), 0.0);
}

#[test]
fn kubernetes_snapshot_cache_hits() {
    let m = kubernetes("cache+kubernetes", "cache 30", "");
    let hits = metric_sum(&m.metrics, "coredns_cache_hits_total");
    assert!(hits >= MEASURED as f64, "{hits} hits: {}", m.metrics);
}

/// `isolate`: the client (no Pod) is looked up and the namespace of every
/// name (and of every PTR target) compared with the allowed one, per query.
#[test]
fn kubernetes_snapshot_isolated() {
    kubernetes(
        "kubernetes isolate",
        "",
        "isolate kplug\n  isolate_unknown deny",
    );
}

/// Replies the server writes itself: REFUSED for a zone not served and
/// for a non-IN class without chaos.
#[test]
fn server_refusals() {
    let d = tempdir();
    zero_alloc(
        "refused",
        "example.org:53 {\n whoami\n}",
        d.path(),
        &[
            ask("example.net.", A, REFUSED, 0),
            Ask {
                qclass: CH,
                ..ask("version.bind.", TXT, REFUSED, 0)
            },
            ask("www.example.org.", A, NOERROR, 0),
        ],
    );
}

/// A reply too large for the client is truncated (TC, cut to size) in
/// place.
#[test]
fn truncation() {
    let d = tempdir();
    let mut hosts = String::from("hosts {\n");
    for i in 1..=60 {
        hosts.push_str(&format!("  10.1.0.{i} big.example.org\n"));
        hosts.push_str(&format!("  fd00::1:{i:x} big.example.org\n"));
    }
    hosts.push_str(" }");
    let m = zero_alloc(
        "truncation",
        &format!(".:53 {{\n {hosts}\n}}"),
        d.path(),
        &[
            ask("big.example.org.", A, NOERROR, 60),
            ask("big.example.org.", AAAA, NOERROR, 60),
        ],
    );
    // UDP without EDNS (512 bytes): both; with 1232: the AAAA set.
    assert!(
        m.truncated > MEASURED as u64 / 4,
        "{} truncated",
        m.truncated
    );
}

/// Not a check: serves one question 10,000 times, for instruction counts.
/// `CLUSTERDNS_PROFILE=whoami|hosts-a|hosts-aaaa|hosts-ptr4|hosts-ptr6`,
/// `hooks-hosts-a` (kubeadm's errors, prometheus, loadbalance around
/// hosts), `cache-hosts-a` (cache hits),
/// `k8s-a|k8s-aaaa|k8s-srv|k8s-ptr|k8s-pod|k8s-nx` (the kubernetes plugin
/// on its test snapshot behind errors, prometheus and loadbalance; without
/// them with `CLUSTERDNS_PROFILE_HOOKS=0`),
/// EDNS from `CLUSTERDNS_PROFILE_EDNS=none|plain|do` (default none):
///
/// ```text
/// cargo test --release -p clusterdns-server --test alloc --no-run
/// CLUSTERDNS_PROFILE=hosts-a valgrind --tool=callgrind \
///   --toggle-collect='clusterdns_server::testing::serve_sync' \
///   target/release/deps/alloc-* profile --exact --ignored
/// ```
///
/// Instructions per query = the total / 10,000 (plus a warm-up of 100).
#[test]
#[ignore]
fn profile() {
    let which = std::env::var("CLUSTERDNS_PROFILE").unwrap_or_else(|_| "whoami".into());
    let edns = match std::env::var("CLUSTERDNS_PROFILE_EDNS").as_deref() {
        Ok("plain") => Edns::Plain,
        Ok("do") => Edns::DoCookie,
        _ => Edns::None,
    };
    let (corefile, a) = match which.as_str() {
        "whoami" => (
            ".:53 {\n whoami\n}".to_owned(),
            ask("example.org.", A, NOERROR, 0),
        ),
        "hosts-a" => (
            format!(".:53 {{\n {HOSTS}\n}}"),
            ask("a.example.org.", A, NOERROR, 3),
        ),
        "hosts-aaaa" => (
            format!(".:53 {{\n {HOSTS}\n}}"),
            ask("a.example.org.", AAAA, NOERROR, 1),
        ),
        "hosts-ptr4" => (format!(".:53 {{\n {HOSTS}\n}}"), hosts_asks()[3]),
        "hosts-ptr6" => (format!(".:53 {{\n {HOSTS}\n}}"), hosts_asks()[4]),
        "hooks-hosts-a" => (
            format!(
                ".:53 {{\n errors\n health\n ready\n prometheus :9153\n loadbalance\n {HOSTS}\n}}"
            ),
            ask("a.example.org.", A, NOERROR, 3),
        ),
        "cache-hosts-a" => (
            format!(".:53 {{\n prometheus :9153\n cache 30\n {HOSTS}\n}}"),
            ask("a.example.org.", A, NOERROR, 3),
        ),
        k if k.starts_with("k8s-") => {
            let a = match k {
                "k8s-a" => ask("svc1.kplug.svc.cluster.local.", A, NOERROR, 1),
                "k8s-aaaa" => ask("dual.kplug.svc.cluster.local.", AAAA, NOERROR, 1),
                "k8s-srv" => ask("_http._tcp.svc1.kplug.svc.cluster.local.", SRV, NOERROR, 1),
                "k8s-ptr" => ask("1.77.96.10.in-addr.arpa.", PTR, NOERROR, 1),
                "k8s-pod" => ask("10-1-2-3.kplug.pod.cluster.local.", A, NOERROR, 1),
                "k8s-nx" => ask("nope.kplug.svc.cluster.local.", A, NXDOMAIN, 0),
                other => panic!("unknown CLUSTERDNS_PROFILE {other}"),
            };
            // CLUSTERDNS_PROFILE_HOOKS=0: the kubernetes plugin alone.
            let hooks = std::env::var("CLUSTERDNS_PROFILE_HOOKS").as_deref() != Ok("0");
            let (pre, post) = if hooks {
                (" errors\n prometheus :9153\n", " loadbalance\n")
            } else {
                ("", "")
            };
            (
                format!(
                    ".:53 {{\n{pre} kubernetes cluster.local in-addr.arpa ip6.arpa {{\n  \
                     snapshot {}\n  pods insecure\n  \
                     fallthrough in-addr.arpa ip6.arpa\n  ttl 30\n }}\n{post}}}",
                    Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("../plugins/src/kubernetes/testdata/objects.yaml")
                        .display()
                ),
                a,
            )
        }
        other => panic!("unknown CLUSTERDNS_PROFILE {other}"),
    };
    let d = tempdir();
    let source = ConfigSource::Text {
        name: d.path().join("Corefile"),
        text: corefile,
    };
    let instance = Instance::build(
        &source,
        &clusterdns_plugins::registry(),
        53,
        Arc::new(Registry::new()),
    )
    .unwrap();
    let mux = &instance.listeners[0].mux;
    let mut rng = fastrand::Rng::with_seed(7);
    let limit = match edns {
        Edns::None => 512,
        Edns::Plain => 1232,
        Edns::DoCookie => 4096,
    };
    let all: Vec<Shot> = (0..WARMUP + MEASURED)
        .map(|_| {
            let id = rng.u16(..);
            Shot {
                packet: packet(id, &a, rng.u64(..), edns),
                id,
                client: SocketAddr::from(([127, 0, 0, 1], 40000)),
                proto: Proto::Udp,
                ask: a,
                limit,
            }
        })
        .collect();
    let mut w = ResponseWriter::new();
    for s in &all {
        serve_and_check(mux, s, &mut w);
    }
}

/// *file*: positive answers with NS and glue, CNAME chains, wildcards,
/// MX targets, referrals, NXDOMAIN and NODATA with the SOA.
#[test]
fn file_zone() {
    const MX: u16 = 15;
    const NS: u16 = 2;
    let d = tempdir();
    std::fs::write(
        d.path().join("db.example.org"),
        "$ORIGIN example.org.\n$TTL 300\n@ IN SOA ns1 hostmaster 1 7200 3600 1209600 300\n\
         @ IN NS ns1\n@ IN MX 10 mx1\nns1 IN A 192.0.2.2\nmx1 IN A 192.0.2.25\n\
         www IN A 192.0.2.10\nwww IN A 192.0.2.11\nalias IN CNAME chain\nchain IN CNAME www\n\
         *.wild IN A 192.0.2.20\nsub IN NS ns.sub\nns.sub IN A 192.0.2.53\n",
    )
    .unwrap();
    zero_alloc(
        "file",
        "example.org:53 {\n file db.example.org\n}",
        d.path(),
        &[
            ask("www.example.org.", A, NOERROR, 2),
            ask("alias.example.org.", A, NOERROR, 4),
            ask("x.wild.example.org.", A, NOERROR, 1),
            ask("example.org.", MX, NOERROR, 1),
            ask("example.org.", NS, NOERROR, 1),
            ask("host.sub.example.org.", A, NOERROR, 0),
            ask("nope.example.org.", A, NXDOMAIN, 0),
            ask("www.example.org.", AAAA, NOERROR, 0),
        ],
    );
}
