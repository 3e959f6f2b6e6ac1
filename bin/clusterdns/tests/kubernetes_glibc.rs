//! glibc as a search-path generator: `getent ahosts`/`getent hosts`/`getent
//! ahostsv4` for the short names a pod resolves, from a network namespace with
//! a pod-like `resolv.conf` (`search default.svc.cluster.local
//! svc.cluster.local cluster.local`, `options ndots:5`), once against the
//! reference CoreDNS and once against clusterdns, both on the shared rig
//! (test-rig.md §5).
//!
//! The servers cannot run inside the namespace: they must reach the rig's
//! apiserver on the host's 127.0.0.1. So each namespace (the "pod") gets a
//! veth pair to the host, like a pod's link to its node; the namespace end is
//! 10.253.X.2, the host end 10.253.X.1 is the pod's `nameserver`, and a small
//! UDP proxy of this test listens on 10.253.X.1:53, forwards to the server on
//! 127.0.0.1 and records every query in arrival order with the response.
//! Only these two namespaces use the addresses.
//!
//! Compared per name and database: getent's output and exit status, the exact
//! sequence of queries glibc sent (type, name, flags, EDNS) with the rcode each
//! server returned, and every response glibc received, record by record (TTL
//! included; only the random message id is not compared). Any difference fails.
//!
//! Needs root, `ip netns` and the rig; skipped with a message otherwise,
//! unless `CLUSTERDNS_REQUIRE_RIG=1`. The namespaces, veth pairs and
//! `/etc/netns/NAME` are removed on drop, also when the test fails.

mod common;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::Path;
use std::process::Output;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use clusterdns_test_support::{
    Difference, Outcome, Response, Rig, ScratchDir, ServerProcess, TtlMode, compare, free_port,
};
use common::netns::Netns;

/// The pod's `resolv.conf` (namespace `default`, as a pod in it gets) with
/// `@ADDR@` the proxy's address.
const RESOLV_CONF: &str = "nameserver @ADDR@
search default.svc.cluster.local svc.cluster.local cluster.local
options ndots:5
";

/// The servers under test: like a kubeadm Corefile, *kubernetes* and then
/// *forward* for everything else (and for ExternalName targets).
const COREFILE: &str = "
.:@PORT@ {
    bind 127.0.0.1
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig @KUBECONFIG@
    }
    forward . 127.0.0.1:@UPSTREAM@
}
";

/// The upstream both forward to (a CoreDNS): `ext.example.test` exists,
/// other names get what *hosts* says without `fallthrough` (SERVFAIL).
const UPSTREAM_COREFILE: &str = "
.:@PORT@ {
    bind 127.0.0.1
    hosts {
        10.1.2.3 ext.example.test
        fd00:1::3 ext.example.test
    }
}
";

/// Starts a server on `corefile` (with `@PORT@` a free port) on 127.0.0.1.
fn start_server(
    label: &str,
    program: &Path,
    corefile: &str,
    dir: &ScratchDir,
) -> (ServerProcess, SocketAddr) {
    let port = free_port().expect("free port");
    let path = dir.path().join(format!("{label}.Corefile"));
    std::fs::write(&path, corefile.replace("@PORT@", &port.to_string())).expect("write Corefile");
    let args: Vec<String> = vec!["-conf".into(), path.display().to_string()];
    let mut process = ServerProcess::spawn(
        label,
        program,
        &args,
        &dir.path().join(format!("{label}.log")),
    )
    .expect("start the server");
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    process
        .wait_listening(addr, Duration::from_secs(30))
        .expect("server listening");
    (process, addr)
}

/// A network namespace (the pod) linked to the host by a veth pair: host
/// end `HOST` with 10.253.X.1/30, namespace end 10.253.X.2/30, and
/// fd00::10/128 on its `lo` (a global IPv6 address, so glibc's AI_ADDRCONFIG
/// asks for AAAA too), with `/etc/netns/NAME/{resolv.conf,hosts,nsswitch.conf}`.
/// Deleted, with its veth pair and `/etc/netns/NAME`, on drop.
struct Pod {
    netns: Netns,
    /// The host end's address: where the server listens.
    server: String,
}

impl Pod {
    /// `None` when namespaces cannot be created here (not root, no `ip`).
    fn create(name: &str, link: &str, subnet: u8) -> Option<Pod> {
        let mut netns = Netns::new(name)?;
        let server = format!("10.253.{subnet}.1");
        netns.link_host(
            &format!("{link}h"),
            &format!("{server}/30"),
            &format!("{link}n"),
            &format!("10.253.{subnet}.2/30"),
        );
        netns.sh("ip addr add fd00::10/128 dev lo nodad");
        netns.write_etc(&[
            ("resolv.conf", &RESOLV_CONF.replace("@ADDR@", &server)),
            ("hosts", "127.0.0.1 localhost\n::1 localhost\n"),
            ("nsswitch.conf", "hosts: files dns\n"),
        ]);
        Some(Pod { netns, server })
    }

    /// `ip netns exec NAME ARGS...`.
    fn exec(&self, args: &[&str]) -> Output {
        self.netns.output(args)
    }
}

/// One query as the proxy saw it, with the response it relayed.
#[derive(Debug, Clone)]
struct Exchange {
    /// The question, request flags and EDNS of the query, as glibc sent it.
    query: String,
    /// The response (`None` if none came back).
    response: Option<Response>,
}

impl Exchange {
    /// The query and the response's rcode and flags.
    fn line(&self) -> String {
        match &self.response {
            Some(r) => format!("{} -> {} [{}]", self.query, r.rcode_name(), r.flags),
            None => format!("{} -> no response", self.query),
        }
    }
}

/// The question and request flags of a query message, as text.
fn describe_query(msg: &[u8]) -> String {
    // A query parses like a response: same header, question and OPT.
    match Response::parse(msg) {
        Ok(q) => format!(
            "{} [{}] edns={:?}",
            q.question.join(" "),
            q.flags,
            q.edns.as_ref().map(|e| (e.udp_size, e.dnssec_ok))
        ),
        Err(e) => format!("unparsable query ({e}): {msg:02x?}"),
    }
}

/// A UDP proxy on `listen` (port 53 of the host end of the veth) in front of
/// a server on 127.0.0.1, recording every exchange in arrival order.
struct Proxy {
    log: Arc<Mutex<Vec<Exchange>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Proxy {
    fn start(listen: SocketAddr, server: SocketAddr) -> Proxy {
        let down = UdpSocket::bind(listen).expect("bind the proxy on port 53");
        down.set_nonblocking(true).expect("nonblocking");
        let log: Arc<Mutex<Vec<Exchange>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (log2, stop2) = (log.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            // One upstream socket per client address and port; pending
            // exchanges by (client, id) -> index in the log.
            let mut ups: HashMap<SocketAddr, UdpSocket> = HashMap::new();
            let mut pending: HashMap<(SocketAddr, u16), usize> = HashMap::new();
            let mut buf = [0u8; 65535];
            while !stop2.load(Ordering::Relaxed) {
                let mut idle = true;
                while let Ok((n, client)) = down.recv_from(&mut buf) {
                    idle = false;
                    let msg = &buf[..n];
                    let id = u16::from_be_bytes([
                        msg.first().copied().unwrap_or(0),
                        msg.get(1).copied().unwrap_or(0),
                    ]);
                    let mut l = log2.lock().unwrap_or_else(|e| e.into_inner());
                    l.push(Exchange {
                        query: describe_query(msg),
                        response: None,
                    });
                    pending.insert((client, id), l.len() - 1);
                    let up = ups.entry(client).or_insert_with(|| {
                        let s = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("upstream socket");
                        s.set_nonblocking(true).expect("nonblocking");
                        s
                    });
                    let _ = up.send_to(msg, server);
                }
                for (client, up) in &ups {
                    while let Ok(n) = up.recv(&mut buf) {
                        idle = false;
                        let msg = &buf[..n];
                        let id = u16::from_be_bytes([
                            msg.first().copied().unwrap_or(0),
                            msg.get(1).copied().unwrap_or(0),
                        ]);
                        if let Some(i) = pending.remove(&(*client, id)) {
                            let mut l = log2.lock().unwrap_or_else(|e| e.into_inner());
                            if let Some(e) = l.get_mut(i) {
                                e.response = Response::parse(msg).ok();
                            }
                        }
                        let _ = down.send_to(msg, client);
                    }
                }
                if idle {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        });
        Proxy {
            log,
            stop,
            thread: Some(thread),
        }
    }

    /// Takes the exchanges recorded so far.
    fn take(&self) -> Vec<Exchange> {
        std::mem::take(&mut *self.log.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A DNS server on 127.0.0.1 serving one namespace through a proxy.
struct NsServer {
    label: &'static str,
    // Fields drop in order: proxy and server stop before the namespace goes.
    proxy: Proxy,
    process: ServerProcess,
    netns: Pod,
    _dir: ScratchDir,
}

impl NsServer {
    fn start(
        label: &'static str,
        netns: Pod,
        program: &Path,
        kubeconfig: &Path,
        upstream: SocketAddr,
    ) -> NsServer {
        let dir = ScratchDir::new(label).expect("scratch dir");
        let corefile = COREFILE
            .replace("@KUBECONFIG@", &kubeconfig.display().to_string())
            .replace("@UPSTREAM@", &upstream.port().to_string());
        let (process, server) = start_server(label, program, &corefile, &dir);
        let listen = SocketAddr::from((
            netns.server.parse::<Ipv4Addr>().expect("server address"),
            53,
        ));
        NsServer {
            label,
            proxy: Proxy::start(listen, server),
            process,
            netns,
            _dir: dir,
        }
    }

    fn log(&self) -> String {
        self.process.log_tail(8000)
    }

    /// Waits until `name A` answers with `want` records from inside the
    /// namespace (the server has synced and seen the test's objects).
    fn wait_answers(&mut self, name: &str, want: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = self.netns.exec(&[
                "dig",
                "+tries=1",
                "+time=1",
                "+short",
                &format!("@{}", self.netns.server),
                name,
                "A",
            ]);
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            if out.status.success() && text.lines().filter(|l| !l.trim().is_empty()).count() == want
            {
                self.proxy.take();
                return;
            }
            if let Some(status) = self.process.exited() {
                panic!("{} exited ({status}):\n{}", self.label, self.log());
            }
            assert!(
                Instant::now() < deadline,
                "{} does not answer {name} with {want} records: {text:?} {}\n{}",
                self.label,
                String::from_utf8_lossy(&out.stderr),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Runs `getent DB NAME` in the namespace; returns its exit status and
    /// output, and the exchanges the proxy relayed meanwhile.
    fn getent(&mut self, db: &str, name: &str) -> (String, Vec<Exchange>) {
        self.proxy.take();
        let out = self.netns.exec(&["getent", db, name]);
        // getent has exited: every response it waited for has been relayed.
        std::thread::sleep(Duration::from_millis(20));
        let result = format!(
            "exit {}\n{}",
            out.status.code().map_or("signal".into(), |c| c.to_string()),
            String::from_utf8_lossy(&out.stdout)
        );
        (result, self.proxy.take())
    }
}

fn objects(ns: &str) -> String {
    format!(
        "{web}---\n{dual_and_headless}---\n{extname}",
        web = common::web_service_yaml(ns),
        dual_and_headless =
            common::dual_and_headless_yaml(ns, "[{name: http, port: 8080, protocol: TCP}]"),
        extname = common::external_name_yaml(ns, "extname", "ext.example.test")
    )
}

#[test]
fn glibc_search_path_walk_matches_coredns() {
    // Root and `ip netns` first (cheap), then the rig.
    let pid = std::process::id();
    // Per-process subnets, so that two runs at once do not collide.
    let subnet = u8::try_from(pid % 120).unwrap_or(0) * 2;
    let Some(ref_ns) = Pod::create(&format!("cdns-ref-{pid}"), &format!("cr{pid}"), subnet) else {
        return;
    };
    let Some(cand_ns) = Pod::create(&format!("cdns-cand-{pid}"), &format!("cc{pid}"), subnet + 1)
    else {
        return;
    };
    let Some(rig) = Rig::get() else {
        return;
    };
    let ns = rig.namespace("glibc").expect("test namespace");
    let n = ns.name().to_string();
    rig.apply_yaml(&objects(&n)).expect("create the objects");

    let upstream_dir = ScratchDir::new("upstream").expect("scratch dir");
    let (_upstream, upstream) =
        start_server("upstream", &rig.coredns(), UPSTREAM_COREFILE, &upstream_dir);
    let mut reference = NsServer::start(
        "coredns",
        ref_ns,
        &rig.coredns(),
        &rig.kubeconfig(),
        upstream,
    );
    let mut candidate = NsServer::start(
        "clusterdns",
        cand_ns,
        common::binary(),
        &rig.kubeconfig(),
        upstream,
    );
    for s in [&mut reference, &mut candidate] {
        s.wait_answers("kubernetes.default.svc.cluster.local", 1);
        s.wait_answers(&format!("headless.{n}.svc.cluster.local"), 2);
        s.wait_answers(&format!("dual.{n}.svc.cluster.local"), 1);
    }

    let names = [
        "kubernetes".to_string(),
        "kubernetes.default".to_string(),
        "kubernetes.default.svc".to_string(),
        "kubernetes.default.svc.cluster.local".to_string(),
        "kubernetes.default.svc.cluster.local.".to_string(),
        "KuberNetes.Default".to_string(),
        format!("web.{n}"),
        format!("web.{n}.svc"),
        format!("dual.{n}"),
        format!("headless.{n}"),
        format!("h0.headless.{n}"),
        format!("extname.{n}"),
        format!("missing.{n}"),
        n.clone(),
        "ext.example.test".to_string(),
        "nope.example.test".to_string(),
        "a.b.c.d.ext.example.test".to_string(),
        "cluster.local".to_string(),
    ];
    let mut failures = String::new();
    let (mut compared, mut found, mut exchanges) = (0, 0, 0);
    for name in &names {
        for db in ["ahosts", "hosts", "ahostsv4"] {
            let (r_out, r_x) = reference.getent(db, name);
            let (c_out, c_x) = candidate.getent(db, name);
            compared += 1;
            exchanges += r_x.len();
            if r_out.starts_with("exit 0") {
                found += 1;
            }
            assert!(
                !r_x.is_empty(),
                "no query seen for getent {db} {name} (is the namespace's resolv.conf used?)"
            );
            let lines = |x: &[Exchange]| x.iter().map(Exchange::line).collect::<Vec<_>>();
            let (r_l, c_l) = (lines(&r_x), lines(&c_x));
            let mut responses = Vec::new();
            for (r, c) in r_x.iter().zip(&c_x) {
                let (Some(rr), Some(cr)) = (&r.response, &c.response) else {
                    continue;
                };
                let d: Vec<Difference> = compare(
                    &Outcome::Response(rr.clone()),
                    &Outcome::Response(cr.clone()),
                    TtlMode::Exact,
                )
                .into_iter()
                .filter(|d| !matches!(d, Difference::Id { .. }))
                .collect();
                if !d.is_empty() {
                    responses.push(format!(
                        "  response to {}:\n    {}\n  coredns:\n{rr}\n  clusterdns:\n{cr}",
                        r.query,
                        d.iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join("\n    ")
                    ));
                }
            }
            if r_out != c_out || r_l != c_l || !responses.is_empty() {
                let _ = writeln!(
                    failures,
                    "getent {db} {name}:\n  coredns:    {}\n  clusterdns: {}\n  coredns queries:\n    {}\n  clusterdns queries:\n    {}\n{}",
                    r_out.trim().replace('\n', "\n              "),
                    c_out.trim().replace('\n', "\n              "),
                    r_l.join("\n    "),
                    c_l.join("\n    "),
                    responses.join("\n"),
                );
            } else {
                eprintln!(
                    "getent {db} {name}: {} ({} queries)",
                    r_out.lines().next().unwrap_or(""),
                    r_x.len()
                );
            }
        }
    }
    eprintln!(
        "{compared} getent runs compared, {found} resolved, {exchanges} queries and responses compared"
    );
    // The cases are not vacuous: some names resolve, some do not.
    assert!(
        found >= 20 && found < compared,
        "{found} of {compared} resolved"
    );
    assert!(failures.is_empty(), "glibc saw differences:\n{failures}");
}
