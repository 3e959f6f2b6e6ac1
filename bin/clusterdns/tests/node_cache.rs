//! `clusterdns node-cache` on the real kernel, in the lab's three network
//! namespaces (shared/reference/nodelocal-netns-lab.md): a pod, a node
//! running the agent with kube-proxy-style DNAT of the kube-dns ClusterIP
//! (10.96.0.10) and of kube-dns-upstream (10.96.0.11) to the cluster DNS,
//! and the cluster DNS (a clusterdns `serve` on 10.244.1.2). Every packet
//! stays in namespaces the test made; they are deleted when it ends.
//! Skipped, saying so, where namespaces cannot be made (not root).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_clusterdns");

/// The three namespaces, deleted (with everything in them) on drop.
/// The lab's addresses, per family.
struct Net {
    /// kube-dns's ClusterIP (intercepted).
    cluster: &'static str,
    /// kube-dns-upstream's ClusterIP.
    upstream: &'static str,
    /// The link-local address.
    local: &'static str,
    /// The cluster DNS pod.
    cdns: &'static str,
    /// The node's side of the pod's link, the pod, the node's side of the
    /// cluster DNS's link, and the prefix length of both links.
    node_pod: &'static str,
    pod: &'static str,
    node_cdns: &'static str,
    prefix: u8,
    /// `ip` or `ip -6`, `32` or `128`.
    ip: &'static str,
    host_bits: u8,
}

const V4: Net = Net {
    cluster: "10.96.0.10",
    upstream: "10.96.0.11",
    local: "169.254.20.10",
    cdns: "10.244.1.2",
    node_pod: "10.244.0.1",
    pod: "10.244.0.2",
    node_cdns: "10.244.1.1",
    prefix: 24,
    ip: "ip",
    host_bits: 32,
};

const V6: Net = Net {
    cluster: "fd00:96::10",
    upstream: "fd00:96::11",
    local: "fd00:169::10",
    cdns: "fd00:244:1::2",
    node_pod: "fd00:244::1",
    pod: "fd00:244::2",
    node_cdns: "fd00:244:1::1",
    prefix: 64,
    ip: "ip -6",
    host_bits: 128,
};

struct Lab {
    net: &'static Net,
    /// The node's iptables (kube-proxy's backend): `iptables-nft` or
    /// `iptables-legacy`.
    ipt: &'static str,
    pod: String,
    node: String,
    cdns: String,
    dir: tempfile::TempDir,
    children: Vec<Child>,
}

fn run(args: &[&str]) -> (bool, String) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("run");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

fn must(cmd: &str) {
    let (ok, out) = run(&["sh", "-c", cmd]);
    assert!(ok, "{cmd}: {out}");
}

const CDNS_COREFILE: &str = "cluster.local:53 {
    bind 10.244.1.2
    hosts {
        10.96.0.1 kubernetes.default.svc.cluster.local
    }
}
.:53 {
    bind 10.244.1.2
    hosts {
        192.0.2.7 www.example.org
    }
}
";

/// The node-local template: the addon's shape (cluster domain over TCP to
/// the upstream Service, the rest to __PILLAR__UPSTREAM__SERVERS__), plus
/// a zone only the node-local cache answers, to tell who answered.
const TEMPLATE: &str = "cluster.local:53 {
    errors
    cache {
        success 9984 30
        denial 9984 5
    }
    bind __PILLAR__LOCAL__DNS__ __PILLAR__DNS__SERVER__
    forward . __PILLAR__CLUSTER__DNS__ {
        force_tcp
    }
    prometheus 127.0.0.1:9253
    health 169.254.20.10:8080
}
nodelocal.test:53 {
    bind __PILLAR__LOCAL__DNS__
    hosts {
        198.51.100.1 who.nodelocal.test
    }
}
.:53 {
    errors
    cache 30
    bind __PILLAR__LOCAL__DNS__
    forward . __PILLAR__UPSTREAM__SERVERS__ {
            force_tcp
    }
}
";

impl Lab {
    fn new(tag: &str) -> Option<Lab> {
        Self::with_backend(tag, "iptables-nft")
    }

    fn with_backend(tag: &str, ipt: &'static str) -> Option<Lab> {
        Self::build(tag, &V4, ipt)
    }

    /// A lab whose kube-proxy writes its rules with `ipt`; the agent must
    /// detect that backend.
    fn build(tag: &str, net: &'static Net, ipt: &'static str) -> Option<Lab> {
        let id = format!("{tag}{}", std::process::id());
        let (pod, node, cdns) = (format!("p{id}"), format!("n{id}"), format!("c{id}"));
        if !run(&["ip", "netns", "add", &pod]).0 {
            eprintln!("skipped: cannot create network namespaces (needs root)");
            return None;
        }
        let ipt: &'static str = if net.host_bits == 32 {
            ipt
        } else if ipt == "iptables-nft" {
            "ip6tables-nft"
        } else {
            "ip6tables-legacy"
        };
        let lab = Lab {
            net,
            ipt,
            pod,
            node,
            cdns,
            dir: tempfile::tempdir().unwrap(),
            children: Vec::new(),
        };
        let (p, n, c) = (&lab.pod, &lab.node, &lab.cdns);
        must(&format!("ip netns add {n} && ip netns add {c}"));
        let Net {
            cluster,
            upstream,
            cdns,
            node_pod,
            pod,
            node_cdns,
            prefix,
            ip,
            host_bits,
            ..
        } = net;
        let dad = if *host_bits == 128 { " nodad" } else { "" };
        must(&format!(
            "ip -n {n} link add vpod type veth peer name eth0 netns {p} && \
             ip -n {n} link add vcdns type veth peer name eth0 netns {c} && \
             {ip} -n {n} addr add {node_pod}/{prefix} dev vpod{dad} && \
             {ip} -n {n} addr add {node_cdns}/{prefix} dev vcdns{dad} && \
             ip -n {n} link set vpod up && ip -n {n} link set vcdns up && ip -n {n} link set lo up && \
             {ip} -n {p} addr add {pod}/{prefix} dev eth0{dad} && ip -n {p} link set eth0 up && ip -n {p} link set lo up && \
             {ip} -n {p} route add default via {node_pod} && \
             {ip} -n {c} addr add {cdns}/{prefix} dev eth0{dad} && ip -n {c} link set eth0 up && ip -n {c} link set lo up && \
             {ip} -n {c} route add default via {node_cdns} && \
             {ip} -n {n} route add default via {cdns} && \
             ip netns exec {n} sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1"
        ));
        // kube-proxy, iptables mode: both Services DNAT to the cluster DNS.
        let to = if net.host_bits == 32 {
            format!("{cdns}:53")
        } else {
            format!("[{cdns}]:53")
        };
        let ipt_bin = if net.host_bits == 32 {
            ipt.to_string()
        } else {
            ipt.replacen("iptables", "ip6tables", 1)
        };
        for svc in [cluster, upstream] {
            for proto in ["udp", "tcp"] {
                for chain in ["PREROUTING", "OUTPUT"] {
                    must(&format!(
                        "ip netns exec {n} {ipt_bin} -t nat -A {chain} -d {svc}/{host_bits} -p {proto} --dport 53 -j DNAT --to-destination {to}"
                    ));
                }
            }
        }
        Some(lab)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Starts the cluster DNS in its namespace and waits until the pod
    /// resolves through kube-proxy's DNAT.
    fn start_cluster_dns(&mut self) {
        let cf = self.path("cdns.Corefile");
        std::fs::write(&cf, CDNS_COREFILE.replace("10.244.1.2", self.net.cdns)).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &self.cdns, BIN, "-quiet", "-conf"])
            .arg(&cf)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        self.children.push(child);
        self.wait_answer(
            self.net.cluster,
            "kubernetes.default.svc.cluster.local",
            false,
            "10.96.0.1",
        );
    }

    /// Starts the agent in the node namespace with `extra` flags.
    fn start_agent(&self, template: &str, extra: &[&str]) -> Child {
        self.start_agent_as(template, extra, "agent.log")
    }

    /// As `start_agent`, logging to `log` (in the lab's directory).
    fn start_agent_as(&self, template: &str, extra: &[&str], log: &str) -> Child {
        let base = self.path("base");
        std::fs::create_dir_all(&base).unwrap();
        std::fs::write(base.join("Corefile.base"), template).unwrap();
        let cm = self.path("kube-dns");
        std::fs::create_dir_all(&cm).unwrap();
        std::fs::write(
            cm.join("upstreamNameservers"),
            format!("[\"{}\"]", self.net.cdns),
        )
        .unwrap();
        let log = std::fs::File::create(self.path(log)).unwrap();
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.node, BIN, "node-cache"])
            .arg("-localip")
            .arg(format!("{},{}", self.net.local, self.net.cluster))
            .arg("-basecorefile")
            .arg(base.join("Corefile.base"))
            .arg("-conf")
            .arg(self.path("Corefile"))
            .arg("-kubednscm")
            .arg(&cm)
            .args(["-upstreamsvc", "kube-dns-upstream", "-syncinterval", "1ns"])
            .args(["-metrics-listen-address", "127.0.0.1:9353"])
            .arg("-pidfile")
            .arg(self.path("node-cache.pid"))
            // The default path is the host's: every lab (and every other
            // test run on the machine) would meet there, across network
            // namespaces. The lab's own directory, unless a test says.
            .args(if extra.contains(&"-handover-socket") {
                vec![]
            } else {
                vec!["-handover-socket".into(), self.path("handover.sock")]
            })
            .args(extra)
            .env("KUBE_DNS_UPSTREAM_SERVICE_HOST", self.net.upstream)
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        cmd.spawn().unwrap()
    }

    fn log(&self) -> String {
        self.log_of("agent.log")
    }

    fn log_of(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_default()
    }

    /// `dig +short` from the pod.
    fn dig(&self, server: &str, name: &str, tcp: bool) -> String {
        let mut a = vec![
            "ip", "netns", "exec", &self.pod, "dig", "+short", "+tries=1", "+time=1",
        ];
        let at = format!("@{server}");
        a.push(&at);
        a.push(name);
        if tcp {
            a.push("+tcp");
        }
        run(&a).1.trim().to_string()
    }

    fn wait_answer(&self, server: &str, name: &str, tcp: bool, want: &str) {
        let start = Instant::now();
        loop {
            let got = self.dig(server, name, tcp);
            if got == want {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{name} @{server}: {got:?}\nagent log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Asks `server` for `KUBERNETES` from a thread inside the pod's
    /// namespace, every 20 ms (each try waiting 100 ms), until answered
    /// from `server`'s address (a connected socket, as a stub resolver
    /// uses: a reply from another source is not taken); the time from
    /// `since` to that answer.
    fn first_answer_after(&self, server: &str, since: Instant, within: Duration) -> Duration {
        let ns = std::fs::File::open(format!("/run/netns/{}", self.pod)).unwrap();
        let server: std::net::SocketAddr = format!("{server}:53").parse().unwrap();
        std::thread::spawn(move || {
            use std::os::fd::AsRawFd;
            #[allow(unsafe_code)]
            // SAFETY: setns with an open namespace file moves only this thread.
            let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns");
            let sock = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
            sock.connect(server).unwrap();
            sock.set_read_timeout(Some(Duration::from_millis(100)))
                .unwrap();
            let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
            for label in KUBERNETES.split('.') {
                q.push(label.len() as u8);
                q.extend_from_slice(label.as_bytes());
            }
            q.extend_from_slice(&[0, 0, 1, 0, 1]);
            let mut buf = [0u8; 512];
            loop {
                assert!(since.elapsed() < within, "no answer within {within:?}");
                if sock.send(&q).is_ok()
                    && let Ok(n) = sock.recv(&mut buf)
                    // Our id, NOERROR, one answer or more.
                    && n > 12 && buf[..2] == [0x12, 0x34] && buf[3] & 0x0f == 0 && buf[7] > 0
                {
                    return since.elapsed();
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
        .join()
        .unwrap()
    }

    fn node(&self, cmd: &str) -> String {
        run(&["ip", "netns", "exec", &self.node, "sh", "-c", cmd]).1
    }

    fn nodelocal_rules(&self) -> Vec<String> {
        self.node(&format!("{}-save", self.ipt))
            .lines()
            .filter(|l| l.contains("NodeLocal DNS Cache"))
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in [&self.pod, &self.node, &self.cdns] {
            let _ = run(&["ip", "netns", "del", ns]);
        }
    }
}

fn signal(child: &Child, sig: &str) {
    // `ip netns exec` execs the binary, so the child's pid is the agent's.
    must(&format!("kill -{sig} {}", child.id()));
}

fn wait_exit(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(start.elapsed() < within, "the agent did not exit");
        std::thread::sleep(Duration::from_millis(50));
    }
}

const WHO: &str = "who.nodelocal.test";
const KUBERNETES: &str = "kubernetes.default.svc.cluster.local";

#[test]
fn iptables_mode_intercepts_resyncs_and_tears_down() {
    iptables_mode(Lab::new("i"));
}

#[test]
fn iptables_legacy_is_detected_and_used() {
    let lab = Lab::with_backend("l", "iptables-legacy");
    iptables_mode(lab);
}

fn iptables_mode(lab: Option<Lab>) {
    let Some(mut lab) = lab else { return };
    lab.start_cluster_dns();
    // Before the agent: the node-local zone is not answered.
    assert_eq!(lab.dig("10.96.0.10", WHO, false), "");
    let mut agent = lab.start_agent(TEMPLATE, &["-interception", "iptables"]);
    for ip in ["10.96.0.10", "169.254.20.10"] {
        for tcp in [false, true] {
            lab.wait_answer(ip, WHO, tcp, "198.51.100.1");
            // Cluster names through the agent (force_tcp to the upstream
            // Service), external names through the kube-dns ConfigMap's
            // upstreamNameservers.
            assert_eq!(lab.dig(ip, KUBERNETES, tcp), "10.96.0.1");
            assert_eq!(lab.dig(ip, "www.example.org", tcp), "192.0.2.7");
        }
    }
    let log = lab.log();
    assert!(
        log.contains(&format!("interception: iptables ({},", lab.ipt)),
        "{log}"
    );
    // Nothing in the other backend.
    let other = if lab.ipt == "iptables-nft" {
        "iptables-legacy-save"
    } else {
        "iptables-nft-save"
    };
    assert!(!lab.node(other).contains("NodeLocal DNS Cache"));
    // The rendered Corefile took the upstreams from the ConfigMap (UDP).
    let rendered = std::fs::read_to_string(lab.path("Corefile")).unwrap();
    assert!(
        rendered.contains("\n    forward . 10.244.1.2\n"),
        "{rendered}"
    );
    assert!(rendered.contains("forward . 10.96.0.11 {"), "{rendered}");
    // Exactly upstream's 24 rules (12 per address).
    let rules = lab.nodelocal_rules();
    assert_eq!(rules.len(), 24, "{rules:#?}");
    assert!(rules.contains(
        &"-A PREROUTING -d 10.96.0.10/32 -p udp -m udp --dport 53 -m comment --comment \"NodeLocal DNS Cache: skip conntrack\" -j NOTRACK".to_string()
    ));
    // Health on the link-local address, the agent's metrics.
    let health = lab.node("curl -s http://169.254.20.10:8080/health");
    assert_eq!(health.trim(), "OK");
    // The agent's counter, on its own listener and on the prometheus
    // plugin's, beside the server's metrics.
    for port in [9353, 9253] {
        let metrics = lab.node(&format!("curl -s http://127.0.0.1:{port}/metrics"));
        assert!(
            metrics.contains("coredns_nodecache_setup_errors_total{errortype=\"iptables\"} 0"),
            "{port}: {metrics}"
        );
    }
    let plugin = lab.node("curl -s http://127.0.0.1:9253/metrics");
    assert!(plugin.contains("coredns_dns_requests_total"), "{plugin}");
    // A rule deleted by hand is back within one sync interval (1 s).
    lab.node(&format!("{} -t raw -D PREROUTING -p udp -d 10.96.0.10 --dport 53 -j NOTRACK -m comment --comment 'NodeLocal DNS Cache: skip conntrack'", lab.ipt));
    assert_eq!(lab.nodelocal_rules().len(), 23);
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(lab.nodelocal_rules().len(), 24, "{}", lab.log());
    assert!(lab.log().contains(
        "Added back nodelocaldns rule - {raw PREROUTING [-p udp -d 10.96.0.10 --dport 53"
    ));
    // SIGTERM: rules and interface go; the pod falls back to cluster DNS.
    signal(&agent, "TERM");
    let status = wait_exit(&mut agent, Duration::from_secs(15));
    assert!(status.success(), "{status:?}\n{}", lab.log());
    assert!(lab.nodelocal_rules().is_empty());
    assert!(!lab.node("ip link show").contains("nodelocaldns"));
    assert_eq!(lab.dig("10.96.0.10", KUBERNETES, false), "10.96.0.1");
    assert_eq!(lab.dig("10.96.0.10", KUBERNETES, true), "10.96.0.1");
    assert_eq!(lab.dig("10.96.0.10", WHO, false), "");
}

#[test]
fn crash_safe_mode_falls_back_at_once_on_kill_9() {
    let Some(mut lab) = Lab::new("k") else { return };
    lab.start_cluster_dns();
    // The control: upstream's rules blackhole the node after kill -9.
    let mut agent = lab.start_agent(TEMPLATE, &["-interception", "iptables"]);
    lab.wait_answer("10.96.0.10", WHO, false, "198.51.100.1");
    let start = Instant::now();
    while lab.nodelocal_rules().len() < 24 {
        assert!(start.elapsed() < Duration::from_secs(30), "{}", lab.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    signal(&agent, "KILL");
    wait_exit(&mut agent, Duration::from_secs(5));
    // Refused, or timed out where the kernel rate-limits its ICMP errors.
    let got = lab.dig("10.96.0.10", KUBERNETES, false);
    assert!(got.contains("no servers could be reached"), "{got}");
    assert_eq!(lab.nodelocal_rules().len(), 24);
    // The crash-safe agent clears them once it serves.
    let mut agent = lab.start_agent(TEMPLATE, &[]);
    let start = Instant::now();
    while !(lab.nodelocal_rules().is_empty()
        && lab.node("nft list tables").contains("clusterdns_nodecache"))
    {
        assert!(start.elapsed() < Duration::from_secs(30), "{}", lab.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        lab.log()
            .contains("removed 24 stale node-cache iptables rules")
    );
    lab.wait_answer("10.96.0.10", WHO, false, "198.51.100.1");
    lab.wait_answer("10.96.0.10", WHO, true, "198.51.100.1");
    assert_eq!(lab.dig("10.96.0.10", KUBERNETES, true), "10.96.0.1");
    assert!(
        lab.log().contains("interception: crashsafe"),
        "{}",
        lab.log()
    );
    assert!(lab.nodelocal_rules().is_empty());
    // kill -9 under dnsperf load from the pod (1000 queries/s for 3 s,
    // the kill after 1 s): only what was in flight at the kill is lost.
    let mut gap = Duration::ZERO;
    let (sent, lost) = under_load(&lab, "10.96.0.10", 3, || {
        std::thread::sleep(Duration::from_secs(1));
        signal(&agent, "KILL");
        wait_exit(&mut agent, Duration::from_secs(5));
        let killed = Instant::now();
        // Queries are answered by the cluster DNS at once (the table and
        // the interface are still there: no teardown ran). Measured from
        // inside the pod's namespace without starting a process.
        gap = lab.first_answer_after("10.96.0.10", killed, Duration::from_secs(5));
    });
    assert_eq!(lab.dig("10.96.0.10", KUBERNETES, false), "10.96.0.1");
    eprintln!("kill -9 under load: {lost} of {sent} queries lost");
    assert!(sent >= 1000);
    assert!(lost * 100 <= sent, "{lost} of {sent}");
    assert_eq!(lab.dig("10.96.0.10", KUBERNETES, true), "10.96.0.1");
    assert_eq!(lab.dig("10.96.0.10", WHO, false), "");
    assert!(lab.node("nft list tables").contains("clusterdns_nodecache"));
    assert!(
        gap < Duration::from_secs(1),
        "first answer after kill -9: {gap:?}"
    );
    eprintln!("kill -9 -> first answer from cluster DNS: {gap:?}");
}

#[test]
fn a_bad_corefile_leaves_no_rules_and_no_interface() {
    let Some(lab) = Lab::new("b") else { return };
    let bad = TEMPLATE.replace("    errors\n    cache 30\n", "    no_such_plugin\n");
    for mode in ["iptables", "crashsafe"] {
        let mut agent = lab.start_agent(&bad, &["-interception", mode]);
        let status = wait_exit(&mut agent, Duration::from_secs(15));
        assert!(!status.success(), "{}", lab.log());
        assert!(lab.nodelocal_rules().is_empty(), "{}", lab.log());
        assert!(!lab.node("nft list tables").contains("clusterdns_nodecache"));
        assert!(
            !lab.node("ip link show").contains("nodelocaldns"),
            "{}",
            lab.log()
        );
    }
}

#[test]
fn wrong_flags_fail_before_the_node_is_touched() {
    let Some(lab) = Lab::new("f") else { return };
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &lab.node,
            BIN,
            "node-cache",
            "-localip",
            "169.254.20.10",
            "-conf",
        ])
        .arg(lab.path("Corefile"))
        .args(["-syncinterval", "30"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .starts_with("invalid value \"30\" for flag -syncinterval: parse error\nUsage of ")
    );
    // Invoked as `node-cache`.
    let link = lab.path("node-cache");
    std::os::unix::fs::symlink(BIN, &link).unwrap();
    let out = Command::new("ip")
        .args(["netns", "exec", &lab.node])
        .arg(&link)
        .args(["-localip", "nope", "-conf", "/x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "[FATAL] Error parsing flags - invalid localip specified - \"nope\", Exiting"
    );
    assert!(!lab.node("ip link show").contains("nodelocaldns"));
    assert!(lab.nodelocal_rules().is_empty());
}

#[test]
fn config_directories_are_polled_and_reloaded_with_signal() {
    let Some(mut lab) = Lab::new("r") else { return };
    lab.start_cluster_dns();
    let mut agent = lab.start_agent(
        TEMPLATE,
        &["-reloadwithsignal", "-interception", "iptables"],
    );
    lab.wait_answer("169.254.20.10", WHO, false, "198.51.100.1");
    assert_eq!(lab.dig("169.254.20.10", "who2.nodelocal.test", false), "");
    // The ConfigMaps change (written as the kubelet's projection does:
    // a new file renamed into place).
    let base = lab.path("base");
    let next = TEMPLATE.replace(
        "        198.51.100.1 who.nodelocal.test\n",
        "        198.51.100.1 who.nodelocal.test\n        198.51.100.2 who2.nodelocal.test\n",
    );
    std::fs::write(base.join(".tmp"), next).unwrap();
    std::fs::rename(base.join(".tmp"), base.join("Corefile.base")).unwrap();
    let cm = lab.path("kube-dns");
    std::fs::write(cm.join(".tmp"), r#"{"stub.test": ["10.244.1.2"]}"#).unwrap();
    std::fs::rename(cm.join(".tmp"), cm.join("stubDomains")).unwrap();
    // Polled every 10 s, then re-rendered and reloaded.
    let start = Instant::now();
    while lab.dig("169.254.20.10", "who2.nodelocal.test", false) != "198.51.100.2" {
        assert!(start.elapsed() < Duration::from_secs(25), "{}", lab.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    let rendered = std::fs::read_to_string(lab.path("Corefile")).unwrap();
    assert!(
        rendered.ends_with("\nstub.test:53 {\n    errors\n    cache 30\n    bind 169.254.20.10 10.96.0.10\n    forward . 10.244.1.2\n}\n"),
        "{rendered}"
    );
    assert!(
        lab.log()
            .contains("Updated Corefile with 1 custom stubdomains and upstream servers 10.244.1.2")
    );
    // An invalid ConfigMap keeps the Corefile and is counted.
    std::fs::write(cm.join("stubDomains"), r#"{"Bad_Domain": ["10.244.1.2"]}"#).unwrap();
    let start = Instant::now();
    while !lab
        .node("curl -s http://127.0.0.1:9353/metrics")
        .contains("coredns_nodecache_setup_errors_total{errortype=\"configmap\"} 1")
    {
        assert!(start.elapsed() < Duration::from_secs(25), "{}", lab.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        std::fs::read_to_string(lab.path("Corefile")).unwrap(),
        rendered
    );
    signal(&agent, "TERM");
    assert!(wait_exit(&mut agent, Duration::from_secs(15)).success());
}

#[test]
fn ipvs_layout_link_local_only() {
    let Some(mut lab) = Lab::new("v") else { return };
    lab.start_cluster_dns();
    // IPVS deployers give -localip the link-local address alone (the last
    // -localip wins, as with Go's flag package).
    let mut agent = lab.start_agent(
        TEMPLATE,
        &["-localip", "169.254.20.10", "-interception", "iptables"],
    );
    for tcp in [false, true] {
        lab.wait_answer("169.254.20.10", WHO, tcp, "198.51.100.1");
        assert_eq!(lab.dig("169.254.20.10", KUBERNETES, tcp), "10.96.0.1");
    }
    let start = Instant::now();
    while lab.nodelocal_rules().len() < 12 {
        assert!(start.elapsed() < Duration::from_secs(30), "{}", lab.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let rules = lab.nodelocal_rules();
    assert_eq!(rules.len(), 12, "{rules:#?}");
    assert!(rules.iter().all(|r| r.contains("169.254.20.10/32")));
    // The ClusterIP is left to kube-proxy.
    assert_eq!(lab.dig("10.96.0.10", WHO, false), "");
    assert_eq!(lab.dig("10.96.0.10", KUBERNETES, false), "10.96.0.1");
    let addrs = lab.node("ip -4 addr show dev nodelocaldns");
    assert!(
        addrs.contains("169.254.20.10/32") && !addrs.contains("10.96.0.10"),
        "{addrs}"
    );
    signal(&agent, "TERM");
    assert!(wait_exit(&mut agent, Duration::from_secs(15)).success());
    assert!(lab.nodelocal_rules().is_empty());
}

#[test]
fn ipv6_end_to_end_in_both_modes() {
    let Some(mut lab) = Lab::build("s", &V6, "iptables-nft") else {
        return;
    };
    lab.start_cluster_dns();
    let template = TEMPLATE.replace("health 169.254.20.10:8080", "health [fd00:169::10]:8080");
    let mut agent = lab.start_agent(&template, &["-interception", "iptables"]);
    for ip in [V6.cluster, V6.local] {
        for tcp in [false, true] {
            lab.wait_answer(ip, WHO, tcp, "198.51.100.1");
            assert_eq!(lab.dig(ip, KUBERNETES, tcp), "10.96.0.1");
            assert_eq!(lab.dig(ip, "www.example.org", tcp), "192.0.2.7");
        }
    }
    let start = Instant::now();
    while lab.nodelocal_rules().len() < 24 {
        assert!(start.elapsed() < Duration::from_secs(30), "{}", lab.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(lab.nodelocal_rules().iter().all(|r| r.contains("/128")));
    let health = lab.node("curl -s 'http://[fd00:169::10]:8080/health'");
    assert_eq!(health.trim(), "OK");
    signal(&agent, "TERM");
    assert!(wait_exit(&mut agent, Duration::from_secs(15)).success());
    assert!(lab.nodelocal_rules().is_empty());
    assert_eq!(lab.dig(V6.cluster, WHO, false), "");
    assert_eq!(lab.dig(V6.cluster, KUBERNETES, false), "10.96.0.1");
    // Crash-safe (ip6 table): kill -9 falls back at once.
    let mut agent = lab.start_agent(&template, &[]);
    lab.wait_answer(V6.cluster, WHO, false, "198.51.100.1");
    lab.wait_answer(V6.cluster, WHO, true, "198.51.100.1");
    assert!(
        lab.log().contains("interception: crashsafe"),
        "{}",
        lab.log()
    );
    assert!(
        lab.node("nft list tables")
            .contains("ip6 clusterdns_nodecache")
    );
    signal(&agent, "KILL");
    wait_exit(&mut agent, Duration::from_secs(5));
    assert_eq!(lab.dig(V6.cluster, KUBERNETES, false), "10.96.0.1");
    assert_eq!(lab.dig(V6.cluster, KUBERNETES, true), "10.96.0.1");
    assert_eq!(lab.dig(V6.cluster, WHO, false), "");
}

/// Runs dnsperf from the pod at `server` (1000 q/s for `secs` s) while
/// `during` runs; (sent, lost).
fn under_load(lab: &Lab, server: &str, secs: u32, during: impl FnOnce()) -> (u64, u64) {
    under_load_over(lab, server, "udp", secs, during)
}

/// As `under_load`, over `mode` (dnsperf's `-m`: udp or tcp).
fn under_load_over(
    lab: &Lab,
    server: &str,
    mode: &str,
    secs: u32,
    during: impl FnOnce(),
) -> (u64, u64) {
    let qfile = lab.path("queries");
    std::fs::write(&qfile, format!("{KUBERNETES} A\nwww.example.org A\n")).unwrap();
    let perf = Command::new("ip")
        .args([
            "netns", "exec", &lab.pod, "dnsperf", "-s", server, "-Q", "1000", "-t", "1",
        ])
        .args(["-m", mode, "-l", &secs.to_string(), "-d"])
        .arg(&qfile)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    during();
    let out = perf.wait_with_output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    let count = |what: &str| -> u64 {
        report
            .lines()
            .find_map(|l| l.trim().strip_prefix(what))
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {what:?} in {report}"))
    };
    (count("Queries sent:"), count("Queries lost:"))
}

#[test]
fn rolling_replacement_under_load() {
    let Some(mut lab) = Lab::new("u") else { return };
    lab.start_cluster_dns();
    for mode in ["iptables", "crashsafe"] {
        let mut agent = lab.start_agent(TEMPLATE, &["-interception", mode]);
        lab.wait_answer("10.96.0.10", WHO, false, "198.51.100.1");
        std::thread::sleep(Duration::from_millis(500));
        // A DaemonSet update with maxUnavailable: the old instance gets
        // SIGTERM, then the new one starts.
        let (sent, lost) = under_load(&lab, "10.96.0.10", 4, || {
            std::thread::sleep(Duration::from_secs(1));
            signal(&agent, "TERM");
            assert!(wait_exit(&mut agent, Duration::from_secs(15)).success());
            agent = lab.start_agent(TEMPLATE, &["-interception", mode]);
            lab.wait_answer("10.96.0.10", WHO, false, "198.51.100.1");
        });
        eprintln!("{mode}: SIGTERM then a new instance under load: {lost} of {sent} queries lost");
        assert!(sent >= 1000);
        assert!(lost * 100 <= sent, "{mode}: {lost} of {sent}");
        signal(&agent, "TERM");
        assert!(wait_exit(&mut agent, Duration::from_secs(15)).success());
    }
}

#[test]
fn sigint_and_sigquit_tear_down_and_skipteardown_does_not() {
    let Some(lab) = Lab::new("q") else { return };
    for (sig, extra) in [
        ("INT", None),
        ("QUIT", None),
        ("TERM", Some("-skipteardown")),
    ] {
        let mut flags = vec!["-interception", "iptables"];
        flags.extend(extra);
        let mut agent = lab.start_agent(TEMPLATE, &flags);
        let start = Instant::now();
        while lab.nodelocal_rules().len() < 24 {
            assert!(start.elapsed() < Duration::from_secs(30), "{}", lab.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        signal(&agent, sig);
        let status = wait_exit(&mut agent, Duration::from_secs(15));
        assert!(status.success(), "{sig}: {status:?}\n{}", lab.log());
        let left = lab.nodelocal_rules().len();
        let link = lab.node("ip link show").contains("nodelocaldns");
        if extra.is_some() {
            assert_eq!((left, link), (24, true), "{sig} with -skipteardown");
        } else {
            assert_eq!((left, link), (0, false), "{sig}\n{}", lab.log());
        }
    }
}

#[test]
fn without_interface_and_rules_for_a_pod_namespace() {
    // Cilium's local redirect runs node-cache in a pod's namespace with
    // -setupinterface=false -setupiptables=false, bound to an address the
    // pod already has (here the node's 10.244.0.1).
    let Some(mut lab) = Lab::new("c") else { return };
    lab.start_cluster_dns();
    let template = TEMPLATE.replace("health 169.254.20.10:8080", "health 10.244.0.1:8080");
    let mut agent = lab.start_agent(
        &template,
        &[
            "-localip",
            "10.244.0.1",
            "-setupinterface=false",
            "-setupiptables=false",
        ],
    );
    lab.wait_answer("10.244.0.1", WHO, false, "198.51.100.1");
    lab.wait_answer("10.244.0.1", WHO, true, "198.51.100.1");
    assert_eq!(lab.dig("10.244.0.1", KUBERNETES, false), "10.96.0.1");
    assert!(lab.log().contains("interception: none"), "{}", lab.log());
    assert!(!lab.node("ip link show").contains("nodelocaldns"));
    assert!(lab.nodelocal_rules().is_empty());
    assert!(!lab.node("nft list tables").contains("clusterdns_nodecache"));
    signal(&agent, "TERM");
    assert!(wait_exit(&mut agent, Duration::from_secs(15)).success());
    // The node's own address is untouched.
    assert!(
        lab.node("ip -4 addr show dev vpod")
            .contains("10.244.0.1/24")
    );
}

#[test]
fn a_missing_service_host_is_named_and_nothing_is_touched() {
    let Some(lab) = Lab::new("e") else { return };
    let base = lab.path("base");
    std::fs::create_dir_all(&base).unwrap();
    std::fs::write(base.join("Corefile.base"), TEMPLATE).unwrap();
    let out = Command::new("ip")
        .args(["netns", "exec", &lab.node, BIN, "node-cache"])
        .args([
            "-localip",
            "169.254.20.10,10.96.0.10",
            "-upstreamsvc",
            "kube-dns-upstream",
        ])
        .arg("-basecorefile")
        .arg(base.join("Corefile.base"))
        .arg("-conf")
        .arg(lab.path("Corefile"))
        .env_remove("KUBE_DNS_UPSTREAM_SERVICE_HOST")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("[FATAL] no Corefile to serve: $KUBE_DNS_UPSTREAM_SERVICE_HOST is not set"),
        "{text}"
    );
    assert!(!lab.path("Corefile").exists());
    assert!(!lab.node("ip link show").contains("nodelocaldns"));
    assert!(lab.nodelocal_rules().is_empty());
}

#[test]
fn a_port_conflict_leaves_no_rules() {
    let Some(mut lab) = Lab::new("o") else { return };
    // Something already listens on the health address (the link exists,
    // as a crashed predecessor would leave it).
    lab.node(
        "ip link add nodelocaldns type bridge && ip addr add 169.254.20.10/32 dev nodelocaldns",
    );
    let squat = lab.path("squat.Corefile");
    std::fs::write(&squat, ".:8080 {\n    bind 169.254.20.10\n    whoami\n}\n").unwrap();
    let squatter = Command::new("ip")
        .args(["netns", "exec", &lab.node, BIN, "-quiet", "-conf"])
        .arg(&squat)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    lab.children.push(squatter);
    let start = Instant::now();
    while !lab.node("ss -ltn").contains("169.254.20.10:8080") {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the squatter did not listen"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for mode in ["iptables", "crashsafe"] {
        let mut agent = lab.start_agent(TEMPLATE, &["-interception", mode]);
        let status = wait_exit(&mut agent, Duration::from_secs(15));
        assert!(!status.success(), "{}", lab.log());
        assert!(lab.log().contains("169.254.20.10:8080"), "{}", lab.log());
        assert!(lab.nodelocal_rules().is_empty(), "{}", lab.log());
        assert!(!lab.node("nft list tables").contains("clusterdns_nodecache"));
    }
}

/// An agent killed (SIGKILL) if the test ends without stopping it.
struct Running(Option<Child>);

impl Running {
    fn child(&mut self) -> &mut Child {
        self.0.as_mut().unwrap()
    }

    /// SIGTERM, and a clean exit within 15 s.
    fn terminate(&mut self) {
        signal(self.child(), "TERM");
        assert!(wait_exit(self.child(), Duration::from_secs(15)).success());
        self.0 = None;
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// What the interception looks like on the node: the crash-safe table
/// or upstream's rules.
fn interception(lab: &Lab, mode: &str) -> String {
    if mode == "crashsafe" {
        lab.node("nft list table ip clusterdns_nodecache 2>&1")
    } else {
        lab.nodelocal_rules().join("\n")
    }
}

fn wait_for(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < within, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A DaemonSet rolling update with `maxSurge: 1, maxUnavailable: 0`: the
/// new pod's instance starts beside the running one and takes its
/// sockets over the hand-over socket; then the old one gets SIGTERM. Under
/// dnsperf load from the pod, ten times in a row: not a query lost, and
/// the interception never changes (watched every few milliseconds).
#[test]
fn upgrade_hands_the_sockets_over_without_losing_a_query() {
    let Some(mut lab) = Lab::new("h") else { return };
    lab.start_cluster_dns();
    let sock = lab.path("run/node-cache.sock");
    let sock = sock.to_str().unwrap().to_string();
    for (mode, rounds, over) in [
        ("crashsafe", 10, "udp"),
        ("iptables", 3, "udp"),
        ("crashsafe", 3, "tcp"),
    ] {
        let flags = ["-interception", mode, "-handover-socket", &sock];
        let mut old_log = format!("{mode}{over}0.log");
        let mut old = Running(Some(lab.start_agent_as(TEMPLATE, &flags, &old_log)));
        lab.wait_answer(V4.cluster, WHO, false, "198.51.100.1");
        // iptables mode adds its rules one command at a time: the set is
        // complete once it holds still (no change for a second).
        let mut last = String::new();
        let mut since = Instant::now();
        wait_for("the interception", Duration::from_secs(30), || {
            let now = interception(&lab, mode);
            if now != last {
                last = now;
                since = Instant::now();
            }
            last.contains(V4.local) && since.elapsed() >= Duration::from_secs(1)
        });
        let before = interception(&lab, mode);
        for round in 1..=rounds {
            // Both addresses: the ClusterIP and the link-local one.
            let target = if round % 2 == 1 { V4.cluster } else { V4.local };
            let new_log = format!("{mode}{over}{round}.log");
            let watching = std::sync::atomic::AtomicBool::new(true);
            let mut changed = Vec::new();
            let mut new = None;
            let (sent, lost) = std::thread::scope(|s| {
                let watcher = s.spawn(|| {
                    let mut seen = Vec::new();
                    while watching.load(std::sync::atomic::Ordering::SeqCst) {
                        let now = interception(&lab, mode);
                        if now != before {
                            seen.push(now);
                        }
                    }
                    seen
                });
                let r = under_load_over(&lab, target, over, 2, || {
                    std::thread::sleep(Duration::from_millis(400));
                    let n = Running(Some(lab.start_agent_as(TEMPLATE, &flags, &new_log)));
                    wait_for("the hand-over", Duration::from_secs(10), || {
                        lab.log_of(&old_log).contains("serves on our")
                    });
                    std::thread::sleep(Duration::from_millis(300));
                    signal(old.child(), "TERM");
                    let st = wait_exit(old.child(), Duration::from_secs(15));
                    assert!(st.success(), "{}", lab.log_of(&old_log));
                    old.0 = None;
                    new = Some(n);
                });
                watching.store(false, std::sync::atomic::Ordering::SeqCst);
                changed = watcher.join().unwrap();
                r
            });
            let log = lab.log_of(&old_log);
            eprintln!(
                "{mode} round {round} @{target} over {over}: {lost} of {sent} queries lost during the upgrade"
            );
            assert!(sent >= 1500, "{sent}");
            assert_eq!(
                lost,
                0,
                "{mode} round {round}: old:\n{log}\nnew:\n{}",
                lab.log_of(&new_log)
            );
            assert!(
                changed.is_empty(),
                "{mode} round {round}: the interception changed during the upgrade: {changed:?}"
            );
            assert!(log.contains("handing over to process"), "{log}");
            assert!(
                lab.log_of(&new_log).contains("taking over from process"),
                "{}",
                lab.log_of(&new_log)
            );
            assert_eq!(lab.dig(target, KUBERNETES, true), "10.96.0.1");
            old = new.unwrap();
            old_log = new_log;
        }
        // The last one, with no successor, tears down as usual.
        old.terminate();
        assert!(
            !interception(&lab, mode).contains(V4.local),
            "{}",
            lab.log_of(&old_log)
        );
        assert!(!std::path::Path::new(&sock).exists());
    }
}

/// Crash-safe mode's fallback for the link-local address: kill -9 under
/// dnsperf load from the pod at 169.254.20.10, and the answers come from
/// the cluster DNS (through kube-dns-upstream) within a second, from the
/// address the pod asked.
#[test]
fn crash_safe_link_local_falls_back_to_the_upstream_service_on_kill_9() {
    let Some(mut lab) = Lab::new("l") else { return };
    lab.start_cluster_dns();
    let mut agent = Running(Some(
        lab.start_agent(TEMPLATE, &["-interception", "crashsafe"]),
    ));
    lab.wait_answer(V4.local, WHO, false, "198.51.100.1");
    assert!(
        lab.log()
            .contains("the link-local address falls back to 10.96.0.11"),
        "{}",
        lab.log()
    );
    wait_for("the table", Duration::from_secs(10), || {
        interception(&lab, "crashsafe").contains("ip daddr set 10.96.0.11")
    });
    // While we serve, the fallback stays out of the way: over UDP and TCP
    // the node-local cache answers the link-local address.
    assert_eq!(lab.dig(V4.local, WHO, true), "198.51.100.1");
    std::thread::sleep(Duration::from_millis(500));
    let mut gap = Duration::ZERO;
    let (sent, lost) = under_load(&lab, V4.local, 3, || {
        std::thread::sleep(Duration::from_secs(1));
        signal(agent.child(), "KILL");
        let killed = Instant::now();
        gap = lab.first_answer_after(V4.local, killed, Duration::from_secs(5));
        wait_exit(agent.child(), Duration::from_secs(5));
        agent.0 = None;
    });
    eprintln!("link-local, kill -9 under load: {lost} of {sent} queries lost");
    eprintln!("link-local, kill -9 -> first answer from cluster DNS: {gap:?}");
    assert!(sent >= 2500, "{sent}");
    assert!(lost * 100 <= sent, "{lost} of {sent}");
    assert!(gap < Duration::from_secs(1), "{gap:?}");
    // The table as listed is the table as made: installed once, never
    // "added back" by the syncs of every second since.
    assert_eq!(
        lab.log().matches("Added back nodelocaldns table").count(),
        1,
        "{}",
        lab.log()
    );
    // Answered by the cluster DNS, over UDP and TCP, at the address asked
    // (dig checks the reply's source): it knows nothing of nodelocal.test.
    assert_eq!(lab.dig(V4.local, KUBERNETES, false), "10.96.0.1");
    assert_eq!(lab.dig(V4.local, KUBERNETES, true), "10.96.0.1");
    assert_eq!(lab.dig(V4.local, WHO, false), "");
    // A new instance takes the address back at once.
    let mut agent = Running(Some(
        lab.start_agent(TEMPLATE, &["-interception", "crashsafe"]),
    ));
    lab.wait_answer(V4.local, WHO, false, "198.51.100.1");
    agent.terminate();
    assert!(!lab.node("nft list tables").contains("clusterdns_nodecache"));
}

/// `/ready` on the agent's metrics listener is a real query through the
/// cache at the link-local address: ready while it is answered; with the
/// cluster DNS gone and nothing cached, not ready, saying why; ready
/// again once the cluster DNS is back.
#[test]
fn ready_is_a_real_query_through_the_cache() {
    let Some(mut lab) = Lab::new("r") else { return };
    lab.start_cluster_dns();
    // No cache in the cluster zone, so each probe goes to the cluster DNS.
    let template = TEMPLATE.replace(
        "    cache {\n        success 9984 30\n        denial 9984 5\n    }\n",
        "",
    );
    let mut agent = Running(Some(lab.start_agent(&template, &[])));
    lab.wait_answer(V4.local, WHO, false, "198.51.100.1");
    let ready = |lab: &Lab| lab.node("curl -s -w ' %{http_code}' http://127.0.0.1:9353/ready");
    assert_eq!(ready(&lab), "OK\n 200", "{}", lab.log());
    assert!(
        lab.log().contains(&format!(
            "/ready asks {}:53 for kubernetes.default.svc.cluster.local.",
            V4.local
        )),
        "{}",
        lab.log()
    );
    // The cluster DNS goes away.
    for c in &mut lab.children {
        let _ = c.kill();
        let _ = c.wait();
    }
    lab.children.clear();
    let not_ready = ready(&lab);
    assert!(not_ready.ends_with(" 503"), "{not_ready}");
    assert!(
        not_ready.contains("kubernetes.default.svc.cluster.local."),
        "{not_ready}"
    );
    lab.start_cluster_dns();
    wait_for("ready again", Duration::from_secs(10), || {
        ready(&lab) == "OK\n 200"
    });
    agent.terminate();
}

/// A successor that took the sockets over and then died (kill -9) leaves
/// the old instance in charge: it still serves, and on SIGTERM tears down
/// as usual, since nobody would be left to serve.
#[test]
fn a_dead_successor_leaves_the_old_instance_in_charge() {
    let Some(mut lab) = Lab::new("d") else { return };
    lab.start_cluster_dns();
    let flags = ["-interception", "crashsafe"];
    let mut old = Running(Some(lab.start_agent_as(TEMPLATE, &flags, "old.log")));
    lab.wait_answer(V4.local, WHO, false, "198.51.100.1");
    let mut new = Running(Some(lab.start_agent_as(TEMPLATE, &flags, "new.log")));
    wait_for("the hand-over", Duration::from_secs(10), || {
        lab.log_of("old.log").contains("serves on our")
    });
    signal(new.child(), "KILL");
    wait_exit(new.child(), Duration::from_secs(5));
    new.0 = None;
    // The old instance's sockets never closed: it answers on.
    lab.wait_answer(V4.local, WHO, false, "198.51.100.1");
    lab.wait_answer(V4.cluster, WHO, true, "198.51.100.1");
    old.terminate();
    let log = lab.log_of("old.log");
    assert!(
        log.contains("the successor has gone: tearing down"),
        "{log}"
    );
    assert!(!lab.node("nft list tables").contains("clusterdns_nodecache"));
    assert!(!lab.node("ip link show").contains("nodelocaldns"));
}

/// A new instance whose Corefile is bad takes the sockets, fails before it
/// serves and exits: it touches nothing, and the running instance serves
/// on with its interception intact.
#[test]
fn a_successor_with_a_bad_corefile_leaves_everything_to_the_old_one() {
    let Some(mut lab) = Lab::new("f") else { return };
    lab.start_cluster_dns();
    let flags = ["-interception", "crashsafe"];
    let mut old = Running(Some(lab.start_agent_as(TEMPLATE, &flags, "old.log")));
    lab.wait_answer(V4.local, WHO, false, "198.51.100.1");
    wait_for("the interception", Duration::from_secs(10), || {
        interception(&lab, "crashsafe").contains(V4.local)
    });
    let before = interception(&lab, "crashsafe");
    let bad = TEMPLATE.replace("    errors\n    cache 30\n", "    no_such_plugin\n");
    let mut new = Running(Some(lab.start_agent_as(&bad, &flags, "new.log")));
    let st = wait_exit(new.child(), Duration::from_secs(15));
    new.0 = None;
    assert!(!st.success(), "{}", lab.log_of("new.log"));
    assert!(
        lab.log_of("new.log").contains("taking over from process"),
        "{}",
        lab.log_of("new.log")
    );
    assert_eq!(interception(&lab, "crashsafe"), before);
    assert!(lab.node("ip link show").contains("nodelocaldns"));
    assert_eq!(lab.dig(V4.cluster, WHO, false), "198.51.100.1");
    assert_eq!(lab.dig(V4.local, WHO, true), "198.51.100.1");
    wait_for(
        "the failed hand-over logged",
        Duration::from_secs(10),
        || lab.log_of("old.log").contains("hand-over to process"),
    );
    old.terminate();
    assert!(!lab.node("nft list tables").contains("clusterdns_nodecache"));
}
