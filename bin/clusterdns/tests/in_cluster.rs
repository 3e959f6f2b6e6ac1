//! As the pod would run: the binary started the way the kubelet starts
//! deploy/cluster-dns's container, and nothing else. On a private rig with
//! deploy/cluster-dns applied:
//!
//! - the Corefile is the `coredns` ConfigMap's, read back from the API server,
//!   at the path the Deployment mounts it (`/etc/coredns`, here under `/run`,
//!   see below) and with the Deployment's own `args`;
//! - the credentials are a token minted for the `coredns` ServiceAccount
//!   (`kubectl create token`), the rig's CA and the namespace, laid out as a
//!   projected volume is (`..data` pointing at a timestamped directory, the
//!   files as links through it) at `/var/run/secrets/kubernetes.io/serviceaccount`,
//!   the path kube-rs (and client-go) read: no override, no kubeconfig;
//! - the environment is only `KUBERNETES_SERVICE_HOST=10.96.0.1` and
//!   `KUBERNETES_SERVICE_PORT=443`, the `kubernetes` Service;
//! - it runs as uid/gid 65532 with `NET_BIND_SERVICE` as its only capability
//!   (the image's user and the Deployment's securityContext), in a network
//!   namespace of its own (the pod's), so the Corefile's ports (53, 8080,
//!   8181, 9153) are its own.
//!
//! The pod namespace has a veth link to the host (10.251.16.2, host end
//! 10.251.16.1) and, like kube-proxy, a DNAT rule for 10.96.0.1:443 to a
//! TCP relay of this test on 10.251.16.1 that passes the bytes on to the
//! rig's apiserver on 127.0.0.1 (the rig listens on loopback only). TLS is
//! end to end: the binary checks the apiserver's certificate for 10.96.0.1
//! (the rig puts the Service address in it, as kubeadm does). The mount
//! namespace of the process has the pod directory of this test over `/run`
//! (`/var/run` is a link to it), so nothing on the host is written.
//! `/etc/resolv.conf` (`forward . /etc/resolv.conf`) names an address the pod
//! namespace routes to a blackhole: no query leaves the machine.
//!
//! Checked: with deploy/'s ClusterRole exactly, `/ready` turns 200 and cluster
//! names resolve, and the apiserver answered every request of the binary with
//! a 2xx (it asks for nothing it is not granted). With one verb taken out of
//! the role, the binary says which (a log line naming the verb and the
//! resource) and `/ready` stays 503: it does not hang silently.
//!
//! Needs root (`ip netns`, `iptables`, `unshare`, `setpriv`) and the rig's
//! binaries (`scripts/rig build`); skipped with a message otherwise, unless
//! `CLUSTERDNS_REQUIRE_RIG=1`.

mod common;

use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clusterdns_test_support::{PrivateRig, Rig, ServerProcess, eventually, skip, workspace_root};
use serde_json::Value as Json;

use common::netns::{Netns, run};
use common::run_ok;

const NETNS: &str = "cdns16-pod";
const HOST_LINK: &str = "cdns16h";
const POD_LINK: &str = "cdns16n";
const HOST_ADDR: &str = "10.251.16.1";
const POD_ADDR: &str = "10.251.16.2";
/// The `kubernetes` Service's ClusterIP on the rig (first of 10.96.0.0/16).
const SERVICE_HOST: &str = "10.96.0.1";
/// Where the pod's resolv.conf points: routed to a blackhole in the pod namespace.
const NO_UPSTREAM: &str = "192.0.2.53";
/// The image's user (scripts/image).
const UID: &str = "65532";

/// The pod's network namespace with its veth link, default route, blackhole
/// upstream and `/etc/netns/NAME/resolv.conf`; removed on drop. `None`
/// (after [`skip`]) when namespaces cannot be made here.
fn pod_netns() -> Option<Netns> {
    // Left over from a run that was killed (the host end goes in `link_host`).
    let _ = run(&["ip", "netns", "del", NETNS]);
    let mut ns = Netns::new(NETNS)?;
    ns.link_host(
        HOST_LINK,
        &format!("{HOST_ADDR}/30"),
        POD_LINK,
        &format!("{POD_ADDR}/30"),
    );
    ns.sh(&format!(
        "ip route add default via {HOST_ADDR} && ip route add blackhole {NO_UPSTREAM}/32"
    ));
    ns.write_etc(&[("resolv.conf", &format!("nameserver {NO_UPSTREAM}\n"))]);
    Some(ns)
}

/// kube-proxy's part: the `kubernetes` Service's address to `HOST_ADDR:relay_port`.
fn route_service(ns: &Netns, relay_port: u16) {
    let service = format!("{SERVICE_HOST}/32");
    let relay = format!("{HOST_ADDR}:{relay_port}");
    ns.dnat("iptables", "OUTPUT", "tcp", &service, 443, &relay);
}

/// Passes TCP connections on `HOST_ADDR:port` to `upstream`, byte for byte
/// (the Service's DNAT ends here); stops accepting on drop.
struct Relay {
    port: u16,
    stop: Arc<AtomicBool>,
}

impl Relay {
    fn start(upstream: String) -> Relay {
        let listener = TcpListener::bind((HOST_ADDR, 0)).expect("bind the relay");
        let port = listener.local_addr().expect("addr").port();
        listener.set_nonblocking(true).expect("nonblocking");
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let _ = client.set_nonblocking(false);
                        let Ok(server) = TcpStream::connect(&upstream) else {
                            continue;
                        };
                        for (mut from, mut to) in [
                            (client.try_clone(), server.try_clone()),
                            (server.try_clone(), client.try_clone()),
                        ]
                        .into_iter()
                        .filter_map(|(a, b)| Some((a.ok()?, b.ok()?)))
                        {
                            std::thread::spawn(move || {
                                let _ = std::io::copy(&mut from, &mut to);
                                let _ = to.shutdown(Shutdown::Write);
                            });
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        Relay { port, stop }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// What the kubelet would put under `/run` for this container: the
/// ServiceAccount's projected volume and the ConfigMap volume, both in the
/// kubelet's layout (files are links through `..data` to a timestamped
/// directory, so that an update swaps one link), plus the binary (where the
/// image has it, `/clusterdns`, is not ours to write; a copy here, so that
/// uid 65532 may run it).
fn lay_out_pod(dir: &Path, token: &str, ca: &[u8], corefile: &str) -> (PathBuf, PathBuf, PathBuf) {
    fn projected(dir: &Path, files: &[(&str, &[u8])]) {
        let data = dir.join("..2026_12_01_00_00_00.000000001");
        std::fs::create_dir_all(&data).expect("mkdir");
        for (name, bytes) in files {
            std::fs::write(data.join(name), bytes).expect("write");
            std::fs::set_permissions(data.join(name), PermissionsExt::from_mode(0o644))
                .expect("chmod");
            symlink(Path::new("..data").join(name), dir.join(name)).expect("symlink");
        }
        symlink(data.file_name().expect("name"), dir.join("..data")).expect("symlink");
    }
    let sa = dir.join("secrets/kubernetes.io/serviceaccount");
    projected(
        &sa,
        &[
            ("token", token.as_bytes()),
            ("ca.crt", ca),
            ("namespace", b"kube-system"),
        ],
    );
    let config = dir.join("coredns");
    projected(&config, &[("Corefile", corefile.as_bytes())]);
    let binary = dir.join("clusterdns");
    std::fs::copy(common::binary(), &binary).expect("copy the binary");
    for d in walk_dirs(dir) {
        std::fs::set_permissions(&d, PermissionsExt::from_mode(0o755)).expect("chmod");
    }
    (sa, config, binary)
}

fn walk_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    for e in std::fs::read_dir(dir).expect("read_dir").flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(walk_dirs(&e.path()));
        }
    }
    out
}

/// Starts the binary as the container: in the pod namespace, with `pod` over
/// `/run`, as uid 65532 with only `NET_BIND_SERVICE`, an empty environment
/// but the Service's two variables, and `args` (the Deployment's, with its
/// ConfigMap mount point moved under `/run`).
fn start_pod(pod: &Path, args: &[String], log: &Path) -> ServerProcess {
    let script = format!(
        "mount --bind {pod} /run && exec setpriv --reuid {UID} --regid {UID} --clear-groups \
         --inh-caps=-all,+net_bind_service --ambient-caps=+net_bind_service \
         --bounding-set=-all,+net_bind_service \
         env -i KUBERNETES_SERVICE_HOST={SERVICE_HOST} KUBERNETES_SERVICE_PORT=443 \
         /run/clusterdns \"$@\"",
        pod = pod.display()
    );
    let mut all: Vec<String> = [
        "netns",
        "exec",
        NETNS,
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        &script,
        "sh",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    all.extend(args.iter().cloned());
    ServerProcess::spawn("pod", Path::new("ip"), &all, log).expect("start the pod")
}

/// The status code of `GET http://POD_ADDR:port/path`, or `None`.
fn http_status(port: u16, path: &str) -> Option<u16> {
    let addr = std::net::SocketAddr::new(POD_ADDR.parse().ok()?, port);
    let status = clusterdns_test_support::http_get(addr, path).status;
    (status != 0).then_some(status)
}

/// `dig +short` of `name` `qtype` at the pod's :53.
fn dig(name: &str, qtype: &str) -> String {
    run_ok(Command::new("dig").args([
        &format!("@{POD_ADDR}"),
        "+short",
        "+time=2",
        "+tries=1",
        name,
        qtype,
    ]))
    .trim()
    .to_string()
}

fn get_json(rig: &Rig, args: &[&str]) -> Json {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    let out = rig
        .kubectl(&all)
        .unwrap_or_else(|e| panic!("kubectl {all:?}: {e}"));
    serde_json::from_str(&out).expect("kubectl's JSON")
}

/// The apiserver's `https://127.0.0.1:PORT` from the rig's kubeconfig, as `host:port`.
fn apiserver(rig: &Rig) -> String {
    let kc = std::fs::read_to_string(rig.kubeconfig()).expect("kubeconfig");
    let server = kc
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .expect("server: in the kubeconfig");
    server
        .trim()
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_string()
}

/// Everything needed to start the "pod" once more (after a role change).
struct Pod {
    dir: tempfile::TempDir,
    args: Vec<String>,
}

impl Pod {
    fn prepare(private: &PrivateRig) -> Pod {
        let rig = private.rig();
        let cm = get_json(rig, &["-n", "kube-system", "configmap", "coredns"]);
        let corefile = cm["data"]["Corefile"].as_str().expect("Corefile");
        let dep = get_json(rig, &["-n", "kube-system", "deployment", "coredns"]);
        let spec = &dep["spec"]["template"]["spec"];
        assert_eq!(spec["serviceAccountName"], "coredns");
        let c = &spec["containers"][0];
        assert_eq!(c["volumeMounts"][0]["mountPath"], "/etc/coredns");
        assert!(
            c.get("env").is_none(),
            "the container has no env of its own"
        );
        let args: Vec<String> = c["args"]
            .as_array()
            .expect("args")
            .iter()
            .map(|a| {
                a.as_str()
                    .expect("string arg")
                    .replace("/etc/coredns", "/run/coredns")
            })
            .collect();
        let token = rig
            .kubectl(&[
                "-n",
                "kube-system",
                "create",
                "token",
                "coredns",
                "--duration=1h",
            ])
            .expect("kubectl create token");
        let ca = std::fs::read(private.dir().join("run/certs/ca.crt")).expect("the rig's CA");
        let dir = tempfile::tempdir().expect("tempdir");
        lay_out_pod(dir.path(), token.trim(), &ca, corefile);
        Pod { dir, args }
    }

    fn start(&self, log: &Path) -> ServerProcess {
        start_pod(self.dir.path(), &self.args, log)
    }
}

fn have_tools() -> bool {
    for tool in ["ip", "iptables", "unshare", "setpriv", "dig"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            skip(&format!("no `{tool}` on PATH"));
            return false;
        }
    }
    true
}

#[test]
fn the_pod_serves_with_the_granted_rbac_and_names_a_missing_verb() {
    if !have_tools() {
        return;
    }
    let Some(private) = PrivateRig::start(&[("RIG_APISERVER_V", "3")]) else {
        return;
    };
    let rig = private.rig();
    let Some(netns) = pod_netns() else {
        return;
    };
    let relay = Relay::start(apiserver(rig));
    route_service(&netns, relay.port);
    let kustomization = workspace_root().join("deploy/cluster-dns");
    rig.kubectl(&["apply", "-k", kustomization.to_str().expect("utf-8")])
        .expect("kubectl apply -k deploy/cluster-dns");
    let ns = rig.namespace("incluster").expect("namespace");
    rig.kubectl_with_input(
        &["-n", ns.name(), "apply", "-f", "-"],
        "apiVersion: v1\nkind: Service\nmetadata: {name: web}\n\
         spec: {selector: {app: web}, ports: [{port: 80}]}\n",
    )
    .expect("a Service");
    let web = get_json(rig, &["-n", ns.name(), "service", "web"]);
    let web_ip = web["spec"]["clusterIP"].as_str().expect("clusterIP");

    let pod = Pod::prepare(&private);
    let logs = tempfile::tempdir().expect("tempdir");

    // With deploy/'s role as it is.
    let log = logs.path().join("granted.log");
    let mut server = pod.start(&log);
    eventually(30, "/ready 200", || {
        if let Some(status) = server.exited() {
            panic!("exited ({status}):\n{}", server.log_tail(4000));
        }
        match http_status(8181, "/ready") {
            Some(200) => Ok(()),
            other => Err(format!("{other:?}\n{}", server.log_tail(2000))),
        }
    });
    assert_eq!(
        dig("kubernetes.default.svc.cluster.local", "A"),
        SERVICE_HOST
    );
    assert_eq!(
        dig(&format!("web.{}.svc.cluster.local", ns.name()), "A"),
        web_ip
    );
    assert_eq!(http_status(8080, "/health"), Some(200));
    assert_eq!(http_status(9153, "/metrics"), Some(200));
    server.stop();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !text.contains("forbidden"),
        "a request was refused with the granted role:\n{text}"
    );
    // The apiserver's own account: every request the binary made was granted.
    // Its requests are the ones with no User-Agent (kube-rs sends none; every
    // other client of the rig names itself). The apiserver logs a request
    // when it ends: the watches end with the process, logged a moment later.
    let log_path = private.dir().join("run/logs/kube-apiserver.log");
    let ours: Vec<String> = eventually(20, "the binary's requests in the apiserver's log", || {
        let text = std::fs::read_to_string(&log_path).map_err(|e| e.to_string())?;
        let ours: Vec<String> = text
            .lines()
            .filter(|l| l.contains("] \"HTTP\" ") && l.contains(" userAgent=\"\" "))
            .map(String::from)
            .collect();
        // Services, EndpointSlices, Namespaces (Pods only with `pods verified`).
        if ours.len() >= 3 {
            Ok(ours)
        } else {
            Err(format!("{ours:#?}"))
        }
    });
    for l in &ours {
        assert!(l.contains(" resp=200"), "not granted: {l}");
    }

    // One verb fewer: `watch` on Services.
    let role = workspace_root().join("deploy/cluster-dns/clusterrole.yaml");
    let role = std::fs::read_to_string(role).expect("clusterrole.yaml");
    let narrowed = role.replacen(
        "    resources: [services, pods, namespaces]\n    verbs: [list, watch]\n",
        "    resources: [pods, namespaces]\n    verbs: [list, watch]\n  \
         - apiGroups: [\"\"]\n    resources: [services]\n    verbs: [list]\n",
        1,
    );
    assert_ne!(narrowed, role);
    rig.apply_yaml(&narrowed).expect("the narrowed role");
    let log = logs.path().join("narrowed.log");
    let mut server = pod.start(&log);
    let line = eventually(30, "a log line naming the refused verb", || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.lines()
            .find(|l| {
                l.starts_with("[ERROR] plugin/kubernetes: Failed to watch *v1.Service: ")
                    && l.contains(r#"cannot watch resource "services""#)
                    && l.contains("system:serviceaccount:kube-system:coredns")
            })
            .map(String::from)
            .ok_or(text)
    });
    eprintln!("the line: {line}");
    // Still not ready ten seconds on, and still running.
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        assert!(server.exited().is_none(), "{}", server.log_tail(4000));
        assert_ne!(
            http_status(8181, "/ready"),
            Some(200),
            "ready without Services"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    server.stop();
}
