//! The server as a library: started with [`clusterdns_server::serve`] on
//! the caller's runtime, it reports `Serving` once every listener is bound
//! (a query sent at once is answered, no retry), reloads when asked and
//! stops when asked. Queries go through dig to 127.0.0.1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use clusterdns_server::{ConfigSource, Controller, Options, Serving, control, serve};

fn options(corefile: &std::path::Path) -> Options {
    Options {
        source: ConfigSource::File(corefile.to_path_buf()),
        dns_port: 53,
        registry: clusterdns_plugins::registry(),
        quiet: true,
        udp_workers: Some(2),
        banner: String::new(),
        metrics: None,
        inherited: Default::default(),
    }
}

/// Held by the tests that pick ports or fill the machine's TCP ports with
/// TIME_WAIT, so that one does not take another's.
static PORTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The caller's runtime, as a binary builds it.
fn runtime(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap()
}

/// `dig +short` of `name`/`qtype` at `addr` over UDP (or TCP).
fn dig(addr: SocketAddr, name: &str, qtype: &str, tcp: bool) -> String {
    let mut cmd = Command::new("dig");
    cmd.arg(format!("@{}", addr.ip()))
        .arg("-p")
        .arg(addr.port().to_string())
        .args([name, qtype, "+short", "+tries=1", "+time=2"]);
    if tcp {
        cmd.arg("+tcp");
    }
    let out = cmd.output().expect("dig runs");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Writes a Corefile serving `web.example.` at `ip` on 127.0.0.1, port 0.
fn hosts_on_port_zero(corefile: &std::path::Path, ip: &str) {
    let text = format!(
        ".:0 {{\n    bind 127.0.0.1\n    hosts {{\n        {ip} web.example.\n    }}\n}}\n"
    );
    std::fs::write(corefile, text).unwrap();
}

/// Waits (10 s at most) until the server started by `controller` serves;
/// `None` if it stopped first.
fn serving(rt: &tokio::runtime::Runtime, controller: &mut Controller) -> Option<Serving> {
    rt.block_on(async { tokio::time::timeout(Duration::from_secs(10), controller.serving()).await })
        .expect("serving within 10 s")
}

/// Asks the server to stop; `serve` returns Ok within 10 s.
fn stop(
    rt: &tokio::runtime::Runtime,
    controller: &Controller,
    server: tokio::task::JoinHandle<Result<(), clusterdns_server::ServerError>>,
) {
    controller.shutdown();
    let done = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(10), server).await })
        .expect("stopped within 10 s")
        .expect("the serve task did not panic");
    assert!(done.is_ok(), "{done:?}");
}

#[test]
fn serves_once_bound_reloads_and_stops_when_asked() {
    let _ports = PORTS.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let corefile = dir.path().join("Corefile");
    hosts_on_port_zero(&corefile, "10.1.2.3");
    let rt = runtime(2);
    let (mut controller, ctl) = control();
    let server = rt.spawn(serve(options(&corefile), ctl));
    let serving = serving(&rt, &mut controller).expect("serving, not stopped");
    assert_eq!(serving.dns.len(), 1, "{serving:?}");
    let addr = serving.dns[0];
    assert_eq!(addr.ip(), std::net::IpAddr::from([127, 0, 0, 1]));
    assert_ne!(addr.port(), 0, "the bound port, not the configured 0");
    // Bound means answering: the first query, UDP and TCP, no retry.
    assert_eq!(dig(addr, "web.example.", "A", false), "10.1.2.3");
    assert_eq!(dig(addr, "web.example.", "A", true), "10.1.2.3");

    // Reload on request: the listener stays, its zone table changes.
    hosts_on_port_zero(&corefile, "10.9.9.9");
    controller.reload();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if dig(addr, "web.example.", "A", false) == "10.9.9.9" {
            break;
        }
        assert!(Instant::now() < deadline, "reload not applied");
        std::thread::sleep(Duration::from_millis(50));
    }

    // Stop on request: `serve` returns Ok, and the port is closed.
    stop(&rt, &controller, server);
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
        assert!(Instant::now() < deadline, "still accepting TCP after stop");
        std::thread::sleep(Duration::from_millis(50));
    }
    let after = dig(addr, "web.example.", "A", false);
    assert!(after.contains("no servers could be reached"), "{after}");
}

/// A port-0 listener takes the UDP port the kernel picks for TCP too; a
/// client's connection in TIME_WAIT on that port refuses a listener (what
/// failed a CI run after tests that had closed thousands of connections).
/// Connect's ephemeral ports are even, so with those held by TIME_WAIT
/// about half of the kernel's UDP picks collide: each start here must
/// still serve, over UDP and TCP.
#[test]
fn port_zero_serves_while_time_wait_holds_tcp_ports() {
    let _ports = PORTS.lock().unwrap_or_else(|e| e.into_inner());
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let to = l.local_addr().unwrap();
    // The client closes first, so the TIME_WAIT is the client's port's.
    for _ in 0..15_000 {
        let Ok(c) = std::net::TcpStream::connect(to) else {
            break;
        };
        let Ok((a, _)) = l.accept() else { break };
        drop(c);
        drop(a);
    }
    let dir = tempfile::tempdir().unwrap();
    let corefile = dir.path().join("Corefile");
    hosts_on_port_zero(&corefile, "10.1.2.3");
    let rt = runtime(2);
    for start in 0..8 {
        let (mut controller, ctl) = control();
        let server = rt.spawn(serve(options(&corefile), ctl));
        let Some(serving) = serving(&rt, &mut controller) else {
            let err = rt.block_on(server).unwrap();
            panic!("start {start}: stopped before serving: {err:?}");
        };
        let addr = serving.dns[0];
        assert_eq!(
            dig(addr, "web.example.", "A", true),
            "10.1.2.3",
            "start {start}"
        );
        stop(&rt, &controller, server);
    }
}

#[test]
fn an_invalid_corefile_never_serves() {
    let dir = tempfile::tempdir().unwrap();
    let corefile = dir.path().join("Corefile");
    std::fs::write(&corefile, ".:0 {\n    nosuchplugin\n}\n").unwrap();
    let rt = runtime(1);
    let (mut controller, ctl) = control();
    let done = rt.block_on(serve(options(&corefile), ctl));
    let err = done.expect_err("an unknown plugin is an error");
    assert!(err.to_string().contains("nosuchplugin"), "{err}");
    assert!(rt.block_on(controller.serving()).is_none());
}

/// A second server started on duplicates of the first one's sockets
/// serves the same addresses; once the first stops, the second answers
/// everything, over UDP and TCP, on sockets that were never unbound.
#[test]
fn a_successor_adopts_the_sockets_and_the_port_stays_bound() {
    let _ports = PORTS.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    // A port free for UDP and TCP alike (port 0 lets the kernel pick a UDP
    // port whose TCP twin a client elsewhere on the machine may hold).
    let port = (0..100)
        .find_map(|_| {
            let t = std::net::TcpListener::bind("127.0.0.1:0").ok()?;
            let p = t.local_addr().ok()?.port();
            std::net::UdpSocket::bind(("127.0.0.1", p)).ok().map(|_| p)
        })
        .expect("a free port");
    let zone = |ip: &str| {
        format!(
            ".:{port} {{\n    bind 127.0.0.1\n    hosts {{\n        {ip} web.example.\n    }}\n}}\n"
        )
    };
    let (old_cf, new_cf) = (dir.path().join("old"), dir.path().join("new"));
    std::fs::write(&old_cf, zone("10.1.2.3")).unwrap();
    std::fs::write(&new_cf, zone("10.4.5.6")).unwrap();
    let rt = runtime(2);
    let (mut old, ctl) = control();
    let old_task = rt.spawn(serve(options(&old_cf), ctl));
    let Some(serving) = rt.block_on(old.serving()) else {
        panic!("old does not serve: {:?}", rt.block_on(old_task).unwrap());
    };
    let addr = serving.dns[0];
    let sockets = rt.block_on(old.exporter().sockets()).expect("the sockets");
    let udp = sockets
        .iter()
        .filter(|s| s.kind == clusterdns_server::SocketKind::Udp)
        .count();
    assert_eq!((udp, sockets.len()), (2, 3), "{sockets:?}");
    let mut opts = options(&new_cf);
    opts.inherited = clusterdns_server::Inherited::new(sockets);
    let left = opts.inherited.clone();
    let (mut new, ctl) = control();
    let _new_task = rt.spawn(serve(opts, ctl));
    let serving = rt.block_on(new.serving()).expect("new serves");
    assert_eq!(serving.dns, vec![addr], "the very same address and port");
    assert!(left.is_empty(), "every socket adopted");
    old.shutdown();
    rt.block_on(old_task).unwrap().unwrap();
    assert_eq!(dig(addr, "web.example.", "A", false), "10.4.5.6");
    assert_eq!(dig(addr, "web.example.", "A", true), "10.4.5.6");
    new.shutdown();
}
