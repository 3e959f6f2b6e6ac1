//! Shared helpers for the binary's integration tests: start the real
//! `clusterdns` binary on a Corefile with a free loopback port, query it
//! with the real `dig`/`kdig`, stop it on drop.
#![allow(dead_code)]

pub mod autopath;
pub mod netns;
pub mod torture;

use std::io::Read;
use std::net::UdpSocket;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clusterdns_test_support::{Differential, Rig, RunningServer, ServerSpec};

/// The binary under test: `$CLUSTERDNS_BIN`, else the one Cargo built for
/// this test run.
pub fn binary() -> &'static std::path::Path {
    static BINARY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BINARY.get_or_init(|| match std::env::var_os("CLUSTERDNS_BIN") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_BIN_EXE_clusterdns")),
    })
}

/// The reference CoreDNS at `coredns` and this binary started on the same
/// Corefile template (`@PORT@` and the other substitutions of
/// [`clusterdns_test_support::ServerSpec`]), for differential tests.
pub fn differential(
    coredns: &std::path::Path,
    corefile: &str,
) -> clusterdns_test_support::Differential {
    clusterdns_test_support::Differential::between(
        None,
        clusterdns_test_support::ServerSpec::coredns_at(coredns, corefile),
        clusterdns_test_support::ServerSpec::clusterdns_at(binary(), corefile),
    )
    .expect("start both")
}

/// CoreDNS from the rig and this binary on the rig's `corefile`, with the
/// same template variables `vars` (`(KEY, value)` for `@KEY@`) on both.
pub fn rig_differential(rig: &Rig, corefile: &str, vars: &[(&str, &str)]) -> Differential {
    rig_differential_each(rig, corefile, vars, vars)
}

/// Like [`rig_differential`], with each server's own variables.
pub fn rig_differential_each(
    rig: &Rig,
    corefile: &str,
    reference_vars: &[(&str, &str)],
    candidate_vars: &[(&str, &str)],
) -> Differential {
    let reference = with_vars(ServerSpec::coredns(rig, corefile), reference_vars);
    let candidate = with_vars(
        ServerSpec::clusterdns_at(binary(), corefile),
        candidate_vars,
    );
    Differential::between(Some(rig), reference, candidate).expect("start both")
}

/// A Corefile serving the rig's cluster (`@KUBECONFIG@`) on 127.0.0.1,
/// `ready` on `@PORT_READY@`, and `plugins` (directive lines, indented by
/// four) after *kubernetes*.
pub fn kubernetes_ready_corefile(plugins: &str) -> String {
    format!(
        "
.:@PORT@ {{
    bind 127.0.0.1
    ready 127.0.0.1:@PORT_READY@
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig @KUBECONFIG@
    }}
{plugins}}}
"
    )
}

/// This binary alone on the rig's `corefile` (`@KUBECONFIG@` the rig's),
/// with the template variables `vars`.
pub fn start_on_rig(rig: &Rig, corefile: &str, vars: &[(&str, &str)]) -> RunningServer {
    let spec = ServerSpec::clusterdns_at(binary(), corefile)
        .var("KUBECONFIG", &rig.kubeconfig().display().to_string());
    RunningServer::start(&with_vars(spec, vars)).expect("clusterdns starts")
}

/// `spec` with each `(KEY, value)` of `vars` substituted for `@KEY@`.
fn with_vars(spec: ServerSpec, vars: &[(&str, &str)]) -> ServerSpec {
    vars.iter().fold(spec, |s, (k, v)| s.var(k, v))
}

/// The reference CoreDNS at `coredns` serving `corefile`, named `upstream`
/// (the server the ones under test forward to).
pub fn start_upstream(coredns: &std::path::Path, corefile: &str) -> RunningServer {
    RunningServer::start(&ServerSpec::coredns_at(coredns, corefile).named("upstream"))
        .expect("upstream")
}

/// A Service `name` in `ns` with `spec` (its lines, indented by two), as
/// YAML.
pub fn service_yaml(ns: &str, name: &str, spec: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n{spec}"
    )
}

/// A ClusterIP Service `web` in `ns` with the one port `http` (80/TCP), as
/// YAML: the plain Service most Kubernetes tests ask for.
pub fn web_service_yaml(ns: &str) -> String {
    service_yaml(
        ns,
        "web",
        "  ports: [{name: http, port: 80, protocol: TCP}]\n",
    )
}

/// An ExternalName Service `name` in `ns` for `target`, as YAML.
pub fn external_name_yaml(ns: &str, name: &str, target: &str) -> String {
    service_yaml(
        ns,
        name,
        &format!("  type: ExternalName\n  externalName: {target}\n"),
    )
}

/// A headless Service `name` in `ns` with one TCP port `port_name`/`port`,
/// as YAML.
pub fn headless_service_yaml(ns: &str, name: &str, port_name: &str, port: u16) -> String {
    service_yaml(
        ns,
        name,
        &format!(
            "  clusterIP: None\n  ports: [{{name: {port_name}, port: {port}, protocol: TCP}}]\n"
        ),
    )
}

/// The head of an EndpointSlice `slice` of Service `service` in `ns` for
/// addresses of `family` (`IPv4`, `IPv6`), as YAML: up to its
/// `addressType`, the caller adding its endpoints and ports.
pub fn endpoint_slice_head_yaml(ns: &str, service: &str, slice: &str, family: &str) -> String {
    format!(
        "apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {slice}
  namespace: {ns}
  labels: {{kubernetes.io/service-name: {service}}}
addressType: {family}
"
    )
}

/// An IPv4 EndpointSlice `slice` of Service `service` in `ns`, as YAML:
/// `endpoints` (address, hostname, ready) and then `ports` (the YAML list
/// of its ports).
pub fn endpoint_slice_yaml(
    ns: &str,
    service: &str,
    slice: &str,
    endpoints: &[(&str, Option<&str>, bool)],
    ports: &str,
) -> String {
    let mut y = endpoint_slice_head_yaml(ns, service, slice, "IPv4");
    y.push_str("endpoints:\n");
    for (addr, hostname, ready) in endpoints {
        y.push_str(&format!("- addresses: [{addr}]\n"));
        if let Some(h) = hostname {
            y.push_str(&format!("  hostname: {h}\n"));
        }
        y.push_str(&format!("  conditions: {{ready: {ready}}}\n"));
    }
    y.push_str(&format!("ports: {ports}\n"));
    y
}

/// The endpoints of [`dual_and_headless_yaml`]'s slice `headless-1`.
const HEADLESS_ENDPOINTS: [(&str, Option<&str>, bool); 3] = [
    ("10.210.0.1", Some("h0"), true),
    ("10.210.0.2", None, true),
    ("10.210.0.3", None, false),
];

/// A dual-stack Service `dual` (port http/80) and a headless `headless`
/// (port http/80) in `ns` with its EndpointSlice `headless-1`: 10.210.0.1
/// (hostname `h0`) and 10.210.0.2 ready, 10.210.0.3 not ready, `ports` the
/// slice's ports; as YAML.
pub fn dual_and_headless_yaml(ns: &str, ports: &str) -> String {
    format!(
        "apiVersion: v1
kind: Service
metadata: {{name: dual, namespace: {ns}}}
spec:
  ipFamilyPolicy: RequireDualStack
  ipFamilies: [IPv4, IPv6]
  ports: [{{name: http, port: 80, protocol: TCP}}]
---
{headless}---
{slice}",
        headless = headless_service_yaml(ns, "headless", "http", 80),
        slice = endpoint_slice_yaml(ns, "headless", "headless-1", &HEADLESS_ENDPOINTS, ports),
    )
}

/// Asserts that each Corefile of `cases` (`@P@` a free port) is refused by
/// the reference CoreDNS and by clusterdns with the same text, or started
/// by both ([`clusterdns_test_support::assert_setup_errors_agree`]); skips
/// without the reference CoreDNS (fails with `CLUSTERDNS_REQUIRE_RIG=1`).
#[track_caller]
pub fn setup_errors_read_as_coredns(cases: &[&str]) {
    if let Some(coredns) = clusterdns_test_support::reference_coredns() {
        clusterdns_test_support::assert_setup_errors_agree(&coredns, binary(), cases);
    }
}

/// [`setup_errors_read_as_coredns`] on each of `bodies` in a server block
/// ([`clusterdns_test_support::assert_block_setup_errors_agree`]).
#[track_caller]
pub fn block_setup_errors_read_as_coredns(bodies: &[&str]) {
    if let Some(coredns) = clusterdns_test_support::reference_coredns() {
        clusterdns_test_support::assert_block_setup_errors_agree(&coredns, binary(), bodies);
    }
}

/// A port free for both UDP and TCP on 127.0.0.1 right now, below the
/// ephemeral range and not handed out before in this process
/// ([`clusterdns_test_support::free_port`]).
pub fn free_port() -> u16 {
    clusterdns_test_support::free_port().expect("a free loopback port")
}

/// Starts the binary on `corefile` (every `{PORT}` replaced by a free
/// port), expects it to refuse the configuration and exit non-zero, and
/// returns what it printed (stdout then stderr).
pub fn config_error(corefile: &str) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("Corefile");
    std::fs::write(&path, corefile.replace("{PORT}", &free_port().to_string())).expect("write");
    let out = Command::new(binary())
        .arg("-conf")
        .arg(&path)
        .output()
        .expect("run");
    assert!(!out.status.success(), "{corefile} was accepted");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Starts `cmd` (a server's binary, or a wrapper running it) on the
/// Corefile at `path` (`-conf`), stdout and stderr piped.
pub fn spawn_conf(mut cmd: Command, path: &std::path::Path) -> std::process::Child {
    cmd.arg("-conf")
        .arg(path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {:?}: {e}", cmd.get_program()))
}

/// Runs `cmd` with stdin closed, asserts that it succeeded (else fails
/// with its status and stderr) and returns its stdout.
pub fn run_ok(cmd: &mut Command) -> String {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A kubeconfig in `dir` naming an API server port where nothing
/// listens: the autoscaler binds its health listener before its first
/// list of nodes, so its listener can be tested without a cluster.
pub fn unreachable_kubeconfig(dir: &std::path::Path) -> PathBuf {
    let path = dir.join("kubeconfig");
    let api = free_port();
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:{api}\n    insecure-skip-tls-verify: true\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n    token: t\n"
        ),
    )
    .expect("kubeconfig");
    path
}

/// A raw query for `name`/`A` with this ID (RD set, no EDNS).
pub fn query(name: &str, id: u16) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[1, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    for l in name.trim_end_matches('.').split('.') {
        q.push(l.len() as u8);
        q.extend_from_slice(l.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

/// `msg` framed for DNS over TCP: its length (two bytes), then itself.
pub fn frame(msg: &[u8]) -> Vec<u8> {
    let mut out = u16::try_from(msg.len())
        .expect("a message fits a TCP frame")
        .to_be_bytes()
        .to_vec();
    out.extend_from_slice(msg);
    out
}

/// Reads one message framed for DNS over TCP (see [`frame`]).
pub fn read_framed(r: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 2];
    r.read_exact(&mut len)?;
    let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
    r.read_exact(&mut buf)?;
    Ok(buf)
}

/// A running clusterdns.
pub struct Server {
    pub child: Child,
    pub port: u16,
    pub dir: tempfile::TempDir,
    pub corefile: PathBuf,
}

impl Server {
    /// Writes `corefile` (with every `{PORT}` replaced by a free port) to a
    /// temporary directory and starts the binary on it with `-conf`. Waits
    /// until the server answers a query over UDP on that port.
    pub fn start(corefile: &str) -> Server {
        Self::start_with(corefile, &[])
    }

    /// Like [`Server::start`], with extra files written next to the
    /// Corefile first (`(name, content)`).
    pub fn start_with(corefile: &str, files: &[(&str, &str)]) -> Server {
        Self::spawn(corefile, files, None)
    }

    /// Like [`Server::start`], inside the network namespace `ns` (the
    /// port is probed on the namespace's own 127.0.0.1).
    pub fn start_in(ns: &netns::Netns, corefile: &str) -> Server {
        Self::spawn(corefile, &[], Some(ns))
    }

    fn spawn(corefile: &str, files: &[(&str, &str)], ns: Option<&netns::Netns>) -> Server {
        let port = free_port();
        let dir = tempfile::tempdir().expect("tempdir");
        for (name, content) in files {
            std::fs::write(
                dir.path().join(name),
                content.replace("{PORT}", &port.to_string()),
            )
            .expect("write file");
        }
        let path = dir.path().join("Corefile");
        std::fs::write(&path, corefile.replace("{PORT}", &port.to_string()))
            .expect("write Corefile");
        let cmd = match ns {
            Some(ns) => ns.command(binary()),
            None => Command::new(binary()),
        };
        let child = spawn_conf(cmd, &path);
        let mut s = Server {
            child,
            port,
            dir,
            corefile: path,
        };
        s.wait_ready(ns);
        s
    }

    fn wait_ready(&mut self, ns: Option<&netns::Netns>) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let port = self.port;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                let (out, err) = self.output();
                panic!("clusterdns exited with {status}\nstdout:\n{out}\nstderr:\n{err}");
            }
            let answered = match ns {
                Some(ns) => ns.within(move || answers(port)),
                None => answers(port),
            };
            if answered {
                return;
            }
        }
        panic!("clusterdns did not answer on port {} within 20s", self.port);
    }

    /// Stops the process and returns what it printed: SIGTERM first, so
    /// that the query log's writer thread drains its queue before the
    /// exit (a SIGKILL right after a reply could lose the reply's log
    /// line), then SIGKILL after 3 s.
    pub fn stop(mut self) -> (String, String) {
        self.terminate();
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return self.output();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.output()
    }

    /// Sends SIGTERM and waits for the exit status (for shutdown tests).
    pub fn terminate(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
    }

    fn output(&mut self) -> (String, String) {
        let mut out = String::new();
        let mut err = String::new();
        if let Some(mut o) = self.child.stdout.take() {
            let _ = o.read_to_string(&mut out);
        }
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        (out, err)
    }

    /// Runs `dig @127.0.0.1 -p PORT +tries=2 +time=3 ARGS...` and returns stdout.
    pub fn dig(&self, args: &[&str]) -> String {
        dig(self.port, args)
    }

    /// Runs `kdig @127.0.0.1 -p PORT ARGS...` and returns stdout.
    pub fn kdig(&self, args: &[&str]) -> String {
        let out = Command::new("kdig")
            .arg("@127.0.0.1")
            .arg("-p")
            .arg(self.port.to_string())
            .arg("+retry=1")
            .arg("+timeout=3")
            .args(args)
            .output()
            .expect("run kdig (apt-get install knot-dnsutils)");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// Whether something answers a bare header (QR=0, no question: the server
/// answers FORMERR) on 127.0.0.1:`port` within 100 ms.
fn answers(port: u16) -> bool {
    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .expect("timeout");
    let probe = [0xab, 0xcd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let mut buf = [0u8; 512];
    let _ = sock.send_to(&probe, ("127.0.0.1", port));
    sock.recv_from(&mut buf).is_ok()
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `dig @127.0.0.1 -p PORT +tries=2 +time=3 ARGS...`, stdout.
pub fn dig(port: u16, args: &[&str]) -> String {
    let out = Command::new("dig")
        .arg("@127.0.0.1")
        .arg("-p")
        .arg(port.to_string())
        // One retry after 3 s: a loaded 2-core CI machine can miss a
        // single 2 s window; tests that need other timing pass their own.
        .arg("+tries=2")
        .arg("+time=3")
        .args(args)
        .output()
        .expect("run dig (apt-get install dnsutils)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The `status:` of a dig reply (`NOERROR`, `NXDOMAIN`, ...).
pub fn status(dig_output: &str) -> String {
    dig_output
        .split("status: ")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .unwrap_or("")
        .to_string()
}

/// Records of `+noall +answer`-style dig output, whitespace-normalised.
pub fn lines(dig_output: &str) -> Vec<String> {
    dig_output
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with(';'))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// One UDP query for `name` `qtype` from `src` (a Pod's loopback address,
/// see [`pod_addr`]) to `server`.
pub fn ask_from(
    src: std::net::Ipv4Addr,
    server: std::net::SocketAddr,
    name: &str,
    qtype: &str,
) -> clusterdns_test_support::Outcome {
    ask_query_from(
        src,
        server,
        &clusterdns_test_support::Query::new(name, qtype),
    )
}

/// Like [`ask_from`], for a query built by the caller.
pub fn ask_query_from(
    src: std::net::Ipv4Addr,
    server: std::net::SocketAddr,
    q: &clusterdns_test_support::Query,
) -> clusterdns_test_support::Outcome {
    let msg = q.to_wire().expect("query builds");
    clusterdns_test_support::exchange_from(server, src.into(), &msg, Duration::from_secs(3))
}

/// The reply's rcode name, else what happened instead.
pub fn rcode_name(o: &clusterdns_test_support::Outcome) -> String {
    o.response().map_or_else(
        || o.summary(),
        clusterdns_test_support::Response::rcode_name,
    )
}

/// A client address of this test process, 127.172.X.`n` (X from the
/// process id): a socket bound to it is the Pod whose `status.podIP` it is.
pub fn pod_addr(n: u8) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::new(127, 172, (std::process::id() % 250) as u8, n)
}

/// A Pod `name` in `ns` (bound to `node` when given) whose `status.podIP`
/// is `ip`: the rig runs no kubelet, so the test sets it.
pub fn pod_at(
    rig: &clusterdns_test_support::Rig,
    ns: &str,
    name: &str,
    node: Option<&str>,
    ip: std::net::IpAddr,
) {
    let node = node.map_or_else(String::new, |n| format!("  nodeName: {n}\n"));
    rig.apply_yaml(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n{node}  containers: [{{name: c, image: none}}]\n"
    ))
    .expect("pod");
    rig.set_pod_ip(ns, name, ip).expect("set the pod's IP");
}

/// Every question of `questions` asked from every address of `srcs` of
/// `reference` and of `candidate`: one line per answer that differs
/// (TTLs compared exactly), starting with `what`.
pub fn differences<Q: AsRef<str>>(
    what: &str,
    reference: std::net::SocketAddr,
    candidate: std::net::SocketAddr,
    srcs: &[std::net::Ipv4Addr],
    questions: &[(Q, &str)],
) -> Vec<String> {
    let mut out = Vec::new();
    for (qname, qtype) in questions {
        let qname = qname.as_ref();
        for src in srcs {
            let r = ask_from(*src, reference, qname, qtype);
            let c = ask_from(*src, candidate, qname, qtype);
            let diffs =
                clusterdns_test_support::compare(&r, &c, clusterdns_test_support::TtlMode::Exact);
            if !diffs.is_empty() {
                out.push(format!("{what}, {qname} {qtype} from {src}: {diffs:?}"));
            }
        }
    }
    out
}

/// The records of every `;; SECTION SECTION:` block of `dig`-style text
/// (`ANSWER`, `AUTHORITY`…), whitespace folded, in order.
pub fn dig_section(text: &str, section: &str) -> Vec<String> {
    let head = format!(";; {section} SECTION:");
    let mut out = Vec::new();
    let mut on = false;
    for line in text.lines() {
        if line.starts_with(&head) {
            on = true;
        } else if line.starts_with(";;") || line.trim().is_empty() {
            on = false;
        } else if on {
            out.push(line.split_whitespace().collect::<Vec<_>>().join(" "));
        }
    }
    out
}
