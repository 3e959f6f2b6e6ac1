//! The node-cache lab the `node_cache*` tests share: three network
//! namespaces (shared/reference/nodelocal-netns-lab.md) — a pod, a node
//! running the agent with kube-proxy-style DNAT of the kube-dns ClusterIP
//! and of kube-dns-upstream to the cluster DNS, and the cluster DNS (a
//! clusterdns `serve`) — per address family, with the agent's start-up,
//! `dig`/dnsperf from the pod and what the interception looks like.
//! Included by path (`#[path]`) by the tests that use it, so the other
//! test binaries do not build it.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

#[path = "netns.rs"]
mod netns;

pub const BIN: &str = env!("CARGO_BIN_EXE_clusterdns");

/// The lab's addresses, per family.
pub struct Net {
    /// kube-dns's ClusterIP (intercepted).
    pub cluster: &'static str,
    /// kube-dns-upstream's ClusterIP.
    pub upstream: &'static str,
    /// The link-local address.
    pub local: &'static str,
    /// The cluster DNS pod.
    pub cdns: &'static str,
    /// The node's side of the pod's link, the pod, the node's side of the
    /// cluster DNS's link, and the prefix length of both links.
    pub node_pod: &'static str,
    pub pod: &'static str,
    pub node_cdns: &'static str,
    pub prefix: u8,
    /// `ip` or `ip -6`, `32` or `128`.
    pub ip: &'static str,
    pub host_bits: u8,
}

pub const V4: Net = Net {
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

pub const V6: Net = Net {
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

/// The three namespaces, deleted (with everything in them) on drop.
pub struct Lab {
    pub net: &'static Net,
    /// The node's iptables (kube-proxy's backend): `iptables-nft` or
    /// `iptables-legacy`.
    pub ipt: &'static str,
    pub pod: Netns,
    pub node: Netns,
    pub cdns: Netns,
    pub dir: tempfile::TempDir,
    pub children: Vec<Child>,
}

/// The lab's commands and namespaces are the netns module's.
pub use netns::{Netns, must, run};

/// [`TEMPLATE`] with its health listener on `net`'s local address (the
/// template names the IPv4 one; IPv6 in brackets).
pub fn template_for(net: &Net) -> String {
    let health = if net.host_bits == 32 {
        format!("health {}:8080", net.local)
    } else {
        format!("health [{}]:8080", net.local)
    };
    TEMPLATE.replace("health 169.254.20.10:8080", &health)
}

pub const CDNS_COREFILE: &str = "cluster.local:53 {
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
pub const TEMPLATE: &str = "cluster.local:53 {
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
    pub fn new(tag: &str) -> Option<Lab> {
        Self::with_backend(tag, "iptables-nft")
    }

    pub fn with_backend(tag: &str, ipt: &'static str) -> Option<Lab> {
        Self::build(tag, &V4, ipt)
    }

    /// A lab whose kube-proxy writes its rules with `ipt`; the agent must
    /// detect that backend.
    pub fn build(tag: &str, net: &'static Net, ipt: &'static str) -> Option<Lab> {
        let id = format!("{tag}{}", std::process::id());
        let pod = Netns::new(&format!("p{id}"))?;
        let node = Netns::new(&format!("n{id}"))?;
        let cdns = Netns::new(&format!("c{id}"))?;
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
        let on_link = |addr: &str| format!("{addr}/{prefix}{dad}");
        let (n, p, c) = (&lab.node, &lab.pod, &lab.cdns);
        n.link("vpod", &on_link(node_pod), p, "eth0", &on_link(pod));
        n.link("vcdns", &on_link(node_cdns), c, "eth0", &on_link(cdns));
        p.sh(&format!("{ip} route add default via {node_pod}"));
        c.sh(&format!("{ip} route add default via {node_cdns}"));
        n.sh(&format!(
            "{ip} route add default via {cdns} && \
             sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1"
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
                    let dest = format!("{svc}/{host_bits}");
                    lab.node.dnat(&ipt_bin, chain, proto, &dest, 53, &to);
                }
            }
        }
        Some(lab)
    }

    /// [`Lab::serving_on`] IPv4.
    pub fn serving(tag: &str) -> Option<Lab> {
        Self::serving_on(tag, &V4)
    }

    /// A lab of `net` (kube-proxy on iptables-nft) with its cluster DNS
    /// started ([`Lab::start_cluster_dns`]).
    pub fn serving_on(tag: &str, net: &'static Net) -> Option<Lab> {
        let mut lab = Self::build(tag, net, "iptables-nft")?;
        lab.start_cluster_dns();
        Some(lab)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Starts the cluster DNS in its namespace and waits until the pod
    /// resolves through kube-proxy's DNAT.
    pub fn start_cluster_dns(&mut self) {
        let cf = self.path("cdns.Corefile");
        std::fs::write(&cf, CDNS_COREFILE.replace("10.244.1.2", self.net.cdns)).unwrap();
        let child = self
            .cdns
            .command(BIN)
            .args(["-quiet", "-conf"])
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
    pub fn start_agent(&self, template: &str, extra: &[&str]) -> Child {
        self.start_agent_as(template, extra, "agent.log")
    }

    /// As `start_agent`, logging to `log` (in the lab's directory).
    pub fn start_agent_as(&self, template: &str, extra: &[&str], log: &str) -> Child {
        let localip = format!("{},{}", self.net.local, self.net.cluster);
        let mut flags = vec!["-localip", &localip, "-upstreamsvc", "kube-dns-upstream"];
        flags.extend_from_slice(extra);
        let env = [("KUBE_DNS_UPSTREAM_SERVICE_HOST", self.net.upstream)];
        self.start_agent_with(template, &flags, &env, log)
    }

    /// Starts the agent in the node namespace with the lab's files (template,
    /// rendered Corefile, kube-dns ConfigMap, pidfile, hand-over socket,
    /// metrics on loopback) and `flags` for the rest (`-localip`,
    /// `-upstreamsvc`...), with `env` added to the environment (the upstream
    /// Service's `*_SERVICE_HOST`, what the Pod's spec sets).
    pub fn start_agent_with(
        &self,
        template: &str,
        flags: &[&str],
        env: &[(&str, &str)],
        log: &str,
    ) -> Child {
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
        let mut cmd = self.node.command(BIN);
        cmd.arg("node-cache")
            .arg("-basecorefile")
            .arg(base.join("Corefile.base"))
            .arg("-conf")
            .arg(self.path("Corefile"))
            .arg("-kubednscm")
            .arg(&cm)
            .args(["-syncinterval", "1ns"])
            .args(["-metrics-listen-address", "127.0.0.1:9353"])
            .arg("-pidfile")
            .arg(self.path("node-cache.pid"))
            // The default path is the host's: every lab (and every other
            // test run on the machine) would meet there, across network
            // namespaces. The lab's own directory, unless a test says.
            .args(if flags.contains(&"-handover-socket") {
                vec![]
            } else {
                vec!["-handover-socket".into(), self.path("handover.sock")]
            })
            .args(flags)
            .envs(env.iter().copied())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        cmd.spawn().unwrap()
    }

    /// An agent started with `flags` ([`Lab::start_agent_as`], logging to
    /// `log`), once the node-local zone answers on the link-local address.
    pub fn answering_agent(&self, flags: &[&str], log: &str) -> Running {
        let agent = Running(Some(self.start_agent_as(TEMPLATE, flags, log)));
        self.wait_answer(self.net.local, WHO, false, "198.51.100.1");
        agent
    }

    /// A plain TCP listener on `ip:port` in the node namespace (no
    /// `SO_REUSEPORT`, as Go's `http.ListenAndServe`), for the caller to
    /// stop.
    pub fn plain_listener(&self, ip: &str, port: u16) -> Child {
        self.node
            .command("python3")
            .arg("-c")
            .arg(format!(
                "import socket,time\ns=socket.socket()\ns.bind(('{ip}',{port}))\n\
                 s.listen()\ntime.sleep(3600)"
            ))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }

    pub fn log(&self) -> String {
        self.log_of("agent.log")
    }

    pub fn log_of(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_default()
    }

    /// `dig +short` from the pod.
    pub fn dig(&self, server: &str, name: &str, tcp: bool) -> String {
        let mut a = self.pod.exec().to_vec();
        a.extend(["dig", "+short", "+tries=1", "+time=1"]);
        let at = format!("@{server}");
        a.push(&at);
        a.push(name);
        if tcp {
            a.push("+tcp");
        }
        run(&a).1.trim().to_string()
    }

    pub fn wait_answer(&self, server: &str, name: &str, tcp: bool, want: &str) {
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
    pub fn first_answer_after(&self, server: &str, since: Instant, within: Duration) -> Duration {
        let server: std::net::SocketAddr = format!("{server}:53").parse().unwrap();
        self.pod.within(move || {
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
    }

    pub fn node(&self, cmd: &str) -> String {
        self.node.try_sh(cmd).1
    }

    /// The lab's nftables family: `ip` or `ip6`.
    pub fn family(&self) -> &'static str {
        if self.net.host_bits == 32 {
            "ip"
        } else {
            "ip6"
        }
    }

    pub fn nodelocal_rules(&self) -> Vec<String> {
        self.node(&format!("{}-save", self.ipt))
            .lines()
            .filter(|l| l.contains("NodeLocal DNS Cache"))
            .map(str::to_string)
            .collect()
    }

    /// Our rules in the other iptables backend (there must be none).
    pub fn other_backend_rules(&self) -> Vec<String> {
        let other = if self.ipt.ends_with("-nft") {
            self.ipt.replace("-nft", "-legacy")
        } else {
            self.ipt.replace("-legacy", "-nft")
        };
        self.node(&format!("{other}-save"))
            .lines()
            .filter(|l| l.contains("NodeLocal DNS Cache"))
            .map(str::to_string)
            .collect()
    }

    /// Hardens the node as hardened node images do
    /// (shared/reference/nodelocal-netns-lab.md), in its iptables backend:
    /// filter INPUT and OUTPUT policy DROP, accepting loopback, on INPUT
    /// what conntrack has seen (ESTABLISHED, RELATED) and on OUTPUT what it
    /// tracks (NEW too), and ICMPv6 (neighbour discovery). A query or a
    /// reply a NOTRACK rule untracked is none of these: unless an ACCEPT
    /// rule names it, the policy drops it. Forwarded traffic (kube-proxy's
    /// DNAT to the cluster DNS) is not filtered.
    pub fn harden(&self) {
        let ipt = self.ipt;
        let mut rules = vec![
            "-A INPUT -i lo -j ACCEPT",
            "-A INPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT",
            "-A OUTPUT -o lo -j ACCEPT",
            "-A OUTPUT -m conntrack --ctstate NEW,ESTABLISHED,RELATED -j ACCEPT",
        ];
        if self.net.host_bits == 128 {
            rules.extend([
                "-A INPUT -p ipv6-icmp -j ACCEPT",
                "-A OUTPUT -p ipv6-icmp -j ACCEPT",
            ]);
        }
        rules.extend(["-P INPUT DROP", "-P OUTPUT DROP"]);
        for r in rules {
            self.node.sh(&format!("{ipt} -w 5 {r}"));
        }
    }

    /// The node's filter table as its backend saves it, without what
    /// changes by itself: the comment lines (the time) and the chains'
    /// packet counters.
    pub fn filter_table(&self) -> String {
        self.node(&format!("{}-save -t filter", self.ipt))
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| match l.split_once(" [") {
                Some((chain, _)) if l.starts_with(':') => format!("{chain}\n"),
                _ => format!("{l}\n"),
            })
            .collect()
    }

    /// The pod's `resolv.conf` names `nameserver` (with a Pod's search
    /// path and ndots:5), for the programs run in it (`getent`).
    pub fn pod_nameserver(&self, nameserver: &str) {
        self.pod.write_pod_etc(nameserver, "default", "ndots:5");
    }

    /// `getent ahostsv4 NAME` in the pod: its output. In an IPv6 lab the
    /// pod has no IPv4 address but loopback, and getaddrinfo's
    /// `AI_ADDRCONFIG` would then ask nothing for IPv4: there `getent
    /// hosts` (gethostbyname2, AAAA then A, no such filter) asks instead.
    pub fn getent(&self, name: &str) -> String {
        let db = if self.net.host_bits == 32 {
            "ahostsv4"
        } else {
            "hosts"
        };
        let mut a = self.pod.exec().to_vec();
        a.extend(["getent", db, name]);
        run(&a).1
    }

    /// `rounds` lookups of `name` from the pod at `server`, each by dig
    /// over UDP, dig over TCP and getent (glibc, with `server` in its
    /// `resolv.conf`): the ones that did not answer `want`.
    pub fn failed_lookups(
        &self,
        server: &str,
        name: &str,
        want: &str,
        rounds: usize,
    ) -> Vec<String> {
        self.pod_nameserver(server);
        let mut failed = Vec::new();
        for round in 0..rounds {
            for tcp in [false, true] {
                let got = self.dig(server, name, tcp);
                if got != want {
                    failed.push(format!("{round}: dig @{server} {name} tcp={tcp}: {got:?}"));
                }
            }
            let got = self.getent(name);
            if !got.lines().any(|l| l.starts_with(&format!("{want} "))) {
                failed.push(format!(
                    "{round}: getent {name} (nameserver {server}): {got:?}"
                ));
            }
        }
        failed
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in [&self.pod, &self.node, &self.cdns] {
            // What a failed test left running there (an agent it owned as
            // a bare Child): killed, not left in an orphaned namespace.
            let (_, pids) = run(&["ip", "netns", "pids", &ns.name]);
            for pid in pids.split_whitespace() {
                let _ = run(&["kill", "-KILL", pid]);
            }
        }
        // The namespaces (and the pod's /etc/netns/NAME) go as they drop.
    }
}

pub fn signal(child: &Child, sig: &str) {
    // `ip netns exec` execs the binary, so the child's pid is the agent's.
    must(&format!("kill -{sig} {}", child.id()));
}

pub fn wait_exit(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(start.elapsed() < within, "the agent did not exit");
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub const WHO: &str = "who.nodelocal.test";
pub const KUBERNETES: &str = "kubernetes.default.svc.cluster.local";

/// Runs dnsperf from the pod at `server` (1000 q/s for `secs` s) while
/// `during` runs; (sent, lost).
pub fn under_load(lab: &Lab, server: &str, secs: u32, during: impl FnOnce()) -> (u64, u64) {
    under_load_over(lab, server, "udp", secs, during)
}

/// As `under_load`, over `mode` (dnsperf's `-m`: udp or tcp).
pub fn under_load_over(
    lab: &Lab,
    server: &str,
    mode: &str,
    secs: u32,
    during: impl FnOnce(),
) -> (u64, u64) {
    let qfile = lab.path("queries");
    std::fs::write(&qfile, format!("{KUBERNETES} A\nwww.example.org A\n")).unwrap();
    let perf = lab
        .pod
        .command("dnsperf")
        .args(["-s", server, "-Q", "1000", "-t", "1"])
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

/// An agent killed (SIGKILL) if the test ends without stopping it.
pub struct Running(pub Option<Child>);

impl Running {
    pub fn child(&mut self) -> &mut Child {
        self.0.as_mut().unwrap()
    }

    /// SIGTERM, and a clean exit within 15 s.
    pub fn terminate(&mut self) {
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
pub fn interception(lab: &Lab, mode: &str) -> String {
    if mode == "crashsafe" {
        lab.node(&format!(
            "nft list table {} clusterdns_nodecache 2>&1",
            lab.family()
        ))
    } else {
        lab.nodelocal_rules().join("\n")
    }
}

pub fn wait_for(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < within, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The node's interception as two views: upstream's rules (sorted: a
/// duplicate shows as a line twice) and the crash-safe table, `None` when
/// absent.
pub fn views(lab: &Lab) -> (Vec<String>, Option<String>) {
    let mut rules = lab.nodelocal_rules();
    rules.sort();
    let mut a = lab.node.exec().to_vec();
    a.extend(["nft", "list", "table", lab.family(), "clusterdns_nodecache"]);
    let (ok, table) = run(&a);
    (rules, ok.then_some(table))
}

/// Waits until the interception holds still for a second with `mode`'s
/// part present (iptables mode adds its rules one command at a time);
/// returns it.
pub fn settled(lab: &Lab, mode: &str) -> (Vec<String>, Option<String>) {
    let mut last = views(lab);
    let mut since = Instant::now();
    wait_for("the interception", Duration::from_secs(30), || {
        let now = views(lab);
        if now != last {
            last = now;
            since = Instant::now();
        }
        let present = if mode == "crashsafe" {
            last.1.as_deref().is_some_and(|t| t.contains(lab.net.local))
        } else {
            last.0.iter().any(|r| r.contains(lab.net.local))
        };
        present && since.elapsed() >= Duration::from_secs(1)
    });
    last
}

/// DaemonSet rolling updates with `maxSurge: 1, maxUnavailable: 0`, in
/// the lab: each new pod's instance starts beside the running one and
/// takes its sockets over the hand-over socket; then the old one gets
/// SIGTERM. What the interception must look like in each mode is taken
/// first from an instance started alone.
pub struct Upgrades<'a> {
    lab: &'a Lab,
    template: &'a str,
    sock: String,
    iptables: Vec<String>,
    /// Crash-safe mode's ACCEPT rules: iptables mode's, so a change of
    /// mode leaves them as they are.
    accepts: Vec<String>,
    table: String,
    series: std::sync::atomic::AtomicUsize,
}

impl<'a> Upgrades<'a> {
    pub fn new(lab: &'a Lab, template: &'a str) -> Self {
        let sock = lab
            .path("run/node-cache.sock")
            .to_str()
            .unwrap()
            .to_string();
        let mut u = Upgrades {
            lab,
            template,
            sock,
            iptables: Vec::new(),
            accepts: Vec::new(),
            table: String::new(),
            series: std::sync::atomic::AtomicUsize::new(0),
        };
        for mode in ["iptables", "crashsafe"] {
            let log = format!("alone-{mode}.log");
            let mut one = Running(Some(lab.start_agent_as(template, &u.flags(mode), &log)));
            lab.wait_answer(lab.net.cluster, WHO, false, "198.51.100.1");
            let (rules, table) = settled(lab, mode);
            one.terminate();
            if mode == "iptables" {
                assert_eq!(table, None, "{}", lab.log_of(&log));
                let mut unique = rules.clone();
                unique.dedup();
                assert_eq!(unique, rules, "duplicated rules");
                u.iptables = rules;
            } else {
                let accepts: Vec<String> = u
                    .iptables
                    .iter()
                    .filter(|r| r.contains("allow DNS traffic"))
                    .cloned()
                    .collect();
                assert!(!accepts.is_empty());
                assert_eq!(
                    rules, accepts,
                    "crash-safe mode keeps only the ACCEPT rules"
                );
                u.accepts = accepts;
                u.table = table.unwrap();
            }
            assert_eq!(views(lab), (Vec::new(), None), "{}", lab.log_of(&log));
        }
        u
    }

    /// Ten crash-safe updates over UDP, three in iptables mode, three
    /// crash-safe over TCP ([`Upgrades::series`]).
    pub fn same_mode_series(&self) {
        self.series(&["crashsafe"; 11], "udp");
        self.series(&["iptables"; 4], "udp");
        self.series(&["crashsafe"; 4], "tcp");
    }

    fn flags(&self, mode: &'a str) -> [&str; 4] {
        ["-interception", mode, "-handover-socket", &self.sock]
    }

    /// The interception an instance in `mode` keeps, and nothing else.
    pub fn expected(&self, mode: &str) -> (Vec<String>, Option<String>) {
        if mode == "crashsafe" {
            (self.accepts.clone(), Some(self.table.clone()))
        } else {
            (self.iptables.clone(), None)
        }
    }

    /// An instance in `modes[0]`, then one update to each next mode in
    /// turn, under dnsperf load from the pod over `over` (udp or tcp), at
    /// the ClusterIP and the link-local address in turn: not a query
    /// lost. Watched every few milliseconds meanwhile: between instances
    /// of one mode the interception never changes; from one mode to the
    /// other, one of the two is complete at every moment, and the ACCEPT
    /// rules both modes share are never touched. After each
    /// update the new mode's interception is there exactly (no rule
    /// duplicated), the old one's is gone; after the last instance's
    /// SIGTERM, nothing is left.
    pub fn series(&self, modes: &[&'a str], over: &str) {
        let lab = self.lab;
        let net = lab.net;
        let n = self
            .series
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut old_log = format!("s{n}-0-{}.log", modes[0]);
        let mut old = Running(Some(lab.start_agent_as(
            self.template,
            &self.flags(modes[0]),
            &old_log,
        )));
        lab.wait_answer(net.cluster, WHO, false, "198.51.100.1");
        assert_eq!(
            settled(lab, modes[0]),
            self.expected(modes[0]),
            "{}",
            lab.log_of(&old_log)
        );
        for (round, pair) in modes.windows(2).enumerate() {
            let (from, to) = (pair[0], pair[1]);
            let round = round + 1;
            let target = if round % 2 == 1 {
                net.cluster
            } else {
                net.local
            };
            let new_log = format!("s{n}-{round}-{to}.log");
            let before = self.expected(from);
            let after = self.expected(to);
            let watching = std::sync::atomic::AtomicBool::new(true);
            let mut wrong = Vec::new();
            let mut new = None;
            let (sent, lost) = std::thread::scope(|s| {
                let watcher = s.spawn(|| {
                    let mut seen = Vec::new();
                    while watching.load(std::sync::atomic::Ordering::SeqCst) {
                        let now = views(lab);
                        let accepts = self.accepts.iter().all(|a| now.0.contains(a));
                        let ok = if from == to {
                            now == before
                        } else {
                            // The two views are read one after the other:
                            // the rules again after the table, so that a
                            // moment with neither complete is one (the
                            // rules only grow, or only shrink, while the
                            // table is there).
                            accepts
                                && (now.0 == self.iptables
                                    || now.1.as_ref() == Some(&self.table)
                                    || views(lab).0 == self.iptables)
                        };
                        if !ok {
                            seen.push(now);
                        }
                    }
                    seen
                });
                let r = under_load_over(lab, target, over, 2, || {
                    std::thread::sleep(Duration::from_millis(400));
                    let next = Running(Some(lab.start_agent_as(
                        self.template,
                        &self.flags(to),
                        &new_log,
                    )));
                    wait_for("the hand-over", Duration::from_secs(10), || {
                        lab.log_of(&old_log).contains("serves on our")
                    });
                    std::thread::sleep(Duration::from_millis(300));
                    signal(old.child(), "TERM");
                    let st = wait_exit(old.child(), Duration::from_secs(15));
                    assert!(st.success(), "{}", lab.log_of(&old_log));
                    old.0 = None;
                    new = Some(next);
                });
                watching.store(false, std::sync::atomic::Ordering::SeqCst);
                wrong = watcher.join().unwrap();
                r
            });
            let log = lab.log_of(&old_log);
            eprintln!(
                "{from} -> {to} round {round} @{target} over {over}: {lost} of {sent} queries lost during the upgrade"
            );
            // At least half the offered load: dnsperf waits for its
            // outstanding queries on a busy machine.
            assert!(
                sent >= 1000 && lost == 0,
                "{from} -> {to} round {round}: {lost} of {sent} lost; old:\n{log}\nnew:\n{}",
                lab.log_of(&new_log)
            );
            assert!(
                wrong.is_empty(),
                "{from} -> {to} round {round}: the interception was {} during the upgrade: {wrong:?}",
                if from == to { "changed" } else { "incomplete" }
            );
            assert!(log.contains("handing over to process"), "{log}");
            assert!(
                lab.log_of(&new_log).contains("taking over from process"),
                "{}",
                lab.log_of(&new_log)
            );
            assert_eq!(lab.dig(target, KUBERNETES, true), "10.96.0.1");
            // The new instance's rules may still be going in.
            let mut now = views(lab);
            let start = Instant::now();
            while now != after && start.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(50));
                now = views(lab);
            }
            assert_eq!(
                now,
                after,
                "{from} -> {to} round {round}: old:\n{log}\nnew:\n{}",
                lab.log_of(&new_log)
            );
            old = new.unwrap();
            old_log = new_log;
        }
        // The last one, with no successor, tears down as usual.
        old.terminate();
        assert_eq!(views(lab), (Vec::new(), None), "{}", lab.log_of(&old_log));
        assert!(!std::path::Path::new(&self.sock).exists());
    }
}

/// A stand-in for upstream's node-cache (k8s-dns-node-cache: CoreDNS
/// inside an agent), for moves between it and ours. The serving part is
/// the reference CoreDNS itself (upstream's node-cache is CoreDNS and its
/// plugins, with `SO_REUSEPORT` on every listener) with the lab template
/// rendered as upstream renders it, answering `who.nodelocal.test` with
/// 198.51.100.2 so a test tells who answered; the agent part is a shell
/// doing what upstream's does, in its order: at start the interface
/// (made if missing; a bridge, as this kernel has no dummy links), its
/// addresses, then its twelve rules per address, each checked with `-C`
/// and inserted with `-I` when missing; a plain listener (no
/// `SO_REUSEPORT`, as Go's `http.ListenAndServe`) on the metrics port;
/// at stop, once CoreDNS has exited, each rule deleted once (`-D`), then
/// the interface by name. It does not resync while it runs (upstream
/// does every minute), which only makes a test stricter.
pub struct UpstreamNodeCache<'a> {
    lab: &'a Lab,
    coredns: Option<Child>,
    metrics: Option<Child>,
}

/// What the stand-in answers for [`WHO`]; ours answers 198.51.100.1.
pub const UPSTREAM_WHO: &str = "198.51.100.2";

impl<'a> UpstreamNodeCache<'a> {
    /// Upstream's rules: (table, chain, match and target) for each local
    /// address, in upstream's order.
    fn rules(lab: &Lab) -> Vec<(&'static str, &'static str, String)> {
        let mut out = Vec::new();
        let (c1, c2) = (
            "-m comment --comment 'NodeLocal DNS Cache: skip conntrack'",
            "-m comment --comment 'NodeLocal DNS Cache: allow DNS traffic'",
        );
        for l in [lab.net.local, lab.net.cluster] {
            for p in ["udp", "tcp"] {
                out.push((
                    "raw",
                    "PREROUTING",
                    format!("-p {p} -d {l} --dport 53 -j NOTRACK {c1}"),
                ));
                out.push((
                    "filter",
                    "INPUT",
                    format!("-p {p} -d {l} --dport 53 -j ACCEPT {c2}"),
                ));
                out.push((
                    "raw",
                    "OUTPUT",
                    format!("-p {p} -s {l} --sport 53 -j NOTRACK {c1}"),
                ));
                out.push((
                    "filter",
                    "OUTPUT",
                    format!("-p {p} -s {l} --sport 53 -j ACCEPT {c2}"),
                ));
                out.push((
                    "raw",
                    "OUTPUT",
                    format!("-p {p} -d {l} --dport 53 -j NOTRACK {c1}"),
                ));
            }
            out.push((
                "raw",
                "OUTPUT",
                format!("-p tcp -d {l} --dport 8080 -j NOTRACK {c1}"),
            ));
            out.push((
                "raw",
                "OUTPUT",
                format!("-p tcp -s {l} --sport 8080 -j NOTRACK {c1}"),
            ));
        }
        out
    }

    /// Upstream's rules as the node's `iptables-save` lists them, sorted.
    pub fn saved_rules(lab: &Lab) -> Vec<String> {
        let mut r = lab.nodelocal_rules();
        r.sort();
        r
    }

    /// Sets up as upstream does and starts serving; returns once its
    /// CoreDNS has bound the local addresses.
    pub fn start(lab: &'a Lab, coredns: &std::path::Path) -> Self {
        let Net {
            local,
            cluster,
            upstream,
            cdns,
            ip,
            host_bits,
            ..
        } = lab.net;
        // Upstream's dummy interface is NOARP, so its IPv6 addresses skip
        // duplicate address detection; on the lab's bridge (no dummy
        // here) that takes `nodad`.
        let dad = if *host_bits == 128 { " nodad" } else { "" };
        lab.node.sh(&format!(
            "(ip link show nodelocaldns >/dev/null 2>&1 || ip link add nodelocaldns type bridge) && \
             {ip} addr replace {local}/{host_bits} dev nodelocaldns{dad} && \
             {ip} addr replace {cluster}/{host_bits} dev nodelocaldns{dad}"
        ));
        for (table, chain, spec) in Self::rules(lab) {
            // `spec` quotes its comments: not through `sh -c '...'`.
            must(&format!(
                "ip netns exec {n} {ipt} -w 5 -t {table} -C {chain} {spec} 2>/dev/null || \
                 ip netns exec {n} {ipt} -w 5 -t {table} -I {chain} 1 {spec}",
                n = lab.node.name,
                ipt = lab.ipt
            ));
        }
        let cf = lab.path("upstream.Corefile");
        let corefile = template_for(lab.net)
            .replace("__PILLAR__LOCAL__DNS__", local)
            .replace("__PILLAR__DNS__SERVER__", cluster)
            .replace("__PILLAR__CLUSTER__DNS__", upstream)
            .replace("__PILLAR__UPSTREAM__SERVERS__", cdns)
            .replace("198.51.100.1", UPSTREAM_WHO);
        std::fs::write(&cf, corefile).unwrap();
        let log = std::fs::File::create(lab.path("upstream.log")).unwrap();
        let coredns = lab
            .node
            .command(coredns)
            .arg("-conf")
            .arg(&cf)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let metrics = lab.plain_listener("127.0.0.1", 9353);
        let u = UpstreamNodeCache {
            lab,
            coredns: Some(coredns),
            metrics: Some(metrics),
        };
        let pid = u.coredns.as_ref().unwrap().id();
        let bound = if host_bits == &32 {
            format!("{local}:53")
        } else {
            format!("[{local}]:53")
        };
        wait_for(
            "upstream's CoreDNS to serve",
            Duration::from_secs(20),
            || {
                lab.node("ss -lunp")
                    .lines()
                    .any(|l| l.contains(&bound) && l.contains(&format!("pid={pid},")))
            },
        );
        u
    }

    /// The log of its CoreDNS.
    pub fn log(&self) -> String {
        self.lab.log_of("upstream.log")
    }

    /// SIGTERM: CoreDNS exits, then the rules and the interface go.
    pub fn stop(mut self) {
        if let Some(mut c) = self.coredns.take() {
            signal(&c, "TERM");
            wait_exit(&mut c, Duration::from_secs(15));
        }
        if let Some(mut m) = self.metrics.take() {
            let _ = m.kill();
            let _ = m.wait();
        }
        for (table, chain, spec) in Self::rules(self.lab) {
            // Upstream logs a rule already gone and goes on.
            let _ = self.lab.node(&format!(
                "{} -w 5 -t {table} -D {chain} {spec}",
                self.lab.ipt
            ));
        }
        let _ = self.lab.node("ip link del nodelocaldns");
    }
}

impl Drop for UpstreamNodeCache<'_> {
    fn drop(&mut self) {
        for c in [self.coredns.take(), self.metrics.take()]
            .into_iter()
            .flatten()
        {
            let mut c = c;
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// What [`lookups_during`] saw.
#[derive(Debug, Default)]
pub struct Lookups {
    pub made: usize,
    /// Lookups that got no answer, or a wrong one, after the client's
    /// retries.
    pub failed: Vec<String>,
    /// dig lookups answered only after a retry (dig says so).
    pub retried: Vec<String>,
}

/// Lookups from the pod, one after the other, while `during` runs: for
/// each server `dig` over UDP and over TCP with its default retries, and
/// getent (glibc, the server in the pod's `resolv.conf`), each asking
/// `name` and expecting `want`.
pub fn lookups_during(
    lab: &Lab,
    servers: &[&str],
    name: &str,
    want: &str,
    during: impl FnOnce(),
) -> Lookups {
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let looker = s.spawn(|| {
            let mut seen = Lookups::default();
            let t0 = Instant::now();
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                for server in servers {
                    for tcp in [false, true] {
                        let at = format!("@{server}");
                        let mut a = lab.pod.exec().to_vec();
                        a.extend(["dig", "+short", &at, name]);
                        if tcp {
                            a.push("+tcp");
                        }
                        let began = t0.elapsed();
                        let got = run(&a).1.trim().to_string();
                        seen.made += 1;
                        let what = format!(
                            "{began:?}..{:?}: dig {at} {name} tcp={tcp}: {got:?}",
                            t0.elapsed()
                        );
                        if got.lines().last() != Some(want) {
                            seen.failed.push(what);
                        } else if got != want {
                            seen.retried.push(what);
                        }
                    }
                    // resolv.conf is read per lookup: one per server.
                    lab.pod_nameserver(server);
                    let began = t0.elapsed();
                    let got = lab.getent(name);
                    seen.made += 1;
                    if !got.lines().any(|l| l.starts_with(&format!("{want} "))) {
                        seen.failed.push(format!(
                            "{began:?}..{:?}: getent {name} via {server}: {got:?}; the node's conntrack then: {}",
                            t0.elapsed(),
                            lab.node("conntrack -L -f ipv6 2>/dev/null; conntrack -L 2>/dev/null")
                        ));
                    }
                }
            }
            seen
        });
        during();
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        looker.join().unwrap()
    })
}
