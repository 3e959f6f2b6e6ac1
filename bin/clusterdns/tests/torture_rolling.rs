//! Torture scenario (issue 18): a rolling restart of cluster DNS loses no
//! query. Two clusterdns instances, each in a network namespace of its own,
//! sit behind a kube-proxy-style DNAT of the Service IP 10.96.0.10 on a
//! "node" namespace; dnsperf asks the Service from a client namespace. Each
//! round one instance gets SIGTERM: its `/ready` must fail at once while it
//! keeps answering through the `health` plugin's lameduck period; the test
//! then does what the endpoints controller and kube-proxy do (the endpoint
//! leaves the Service's chain in one `iptables-restore`, its UDP flows are
//! cleared from conntrack), the instance exits, is started again, turns
//! ready and goes back into the chain. dnsperf must count 0 lost.
//! `CLUSTERDNS_TORTURE=long`: 10 rounds (short form: 3). Skipped, saying
//! so, where namespaces cannot be made (not root) or `conntrack` is missing.

mod common;

use std::net::SocketAddr;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::netns::{Netns, run};
use common::torture::{dnsperf, finish, long, report};

const SERVICE: &str = "10.96.0.10";
const LAMEDUCK_S: u64 = 3;

/// Instance `i`'s (1 or 2) address.
fn addr(i: usize) -> String {
    format!("10.250.{i}.2")
}

fn corefile(i: usize) -> String {
    let a = addr(i);
    format!(
        ".:53 {{
    bind {a}
    health {a}:8080 {{
        lameduck {LAMEDUCK_S}s
    }}
    ready {a}:8181
    hosts {{
        10.96.0.1 kubernetes.default.svc.cluster.local
        192.0.2.{i} who.rolling.test
    }}
}}
"
    )
}

struct Lab {
    client: Netns,
    node: Netns,
    dns: [Netns; 2],
    dir: tempfile::TempDir,
    /// The running instances (index 0 is instance 1).
    running: [Option<Child>; 2],
}

impl Lab {
    fn new() -> Option<Lab> {
        if !run(&["conntrack", "--version"]).0 {
            clusterdns_test_support::skip("no `conntrack` (scripts/install-deps installs it)");
            return None;
        }
        let id = std::process::id();
        let client = Netns::new(&format!("rc{id}"))?;
        let node = Netns::new(&format!("rn{id}"))?;
        let dns = [
            Netns::new(&format!("r1{id}"))?,
            Netns::new(&format!("r2{id}"))?,
        ];
        node.link("vcl", "10.250.0.1/24", &client, "eth0", "10.250.0.2/24");
        client.sh("ip route add default via 10.250.0.1");
        for (k, ns) in dns.iter().enumerate() {
            let i = k + 1;
            node.link(
                &format!("vd{i}"),
                &format!("10.250.{i}.1/24"),
                ns,
                "eth0",
                &format!("{}/24", addr(i)),
            );
            ns.sh(&format!("ip route add default via 10.250.{i}.1"));
        }
        node.sh("sysctl -qw net.ipv4.ip_forward=1");
        // Counts replies the node forwards without a conntrack entry: the
        // reply to a query in flight when its flow was cleared leaves
        // un-NATed, from the instance's address rather than the Service's
        // (a client on a connected socket, as glibc's, drops it).
        node.sh(
            "iptables-nft -A FORWARD -p udp --sport 53 -m conntrack --ctstate NEW \
             -m comment --comment orphan-reply -j ACCEPT",
        );
        let lab = Lab {
            client,
            node,
            dns,
            dir: tempfile::tempdir().expect("tempdir"),
            running: [None, None],
        };
        // kube-proxy's layout: the Service's chain picks an endpoint's
        // chain, which DNATs.
        let mut rules =
            String::from("*nat\n:DNS-SVC - [0:0]\n:DNS-EP1 - [0:0]\n:DNS-EP2 - [0:0]\n");
        for proto in ["udp", "tcp"] {
            rules.push_str(&format!(
                "-A PREROUTING -d {SERVICE}/32 -p {proto} --dport 53 -j DNS-SVC\n"
            ));
        }
        for i in 1..=2 {
            for proto in ["udp", "tcp"] {
                rules.push_str(&format!(
                    "-A DNS-EP{i} -p {proto} -j DNAT --to-destination {}:53\n",
                    addr(i)
                ));
            }
        }
        rules.push_str("COMMIT\n");
        lab.restore(&rules);
        lab.endpoints(&[1, 2]);
        Some(lab)
    }

    /// Applies iptables-restore input on the node without flushing the
    /// rest: one transaction, as kube-proxy writes.
    fn restore(&self, rules: &str) {
        let path = self.dir.path().join("rules");
        std::fs::write(&path, rules).expect("write rules");
        self.node.sh(&format!(
            "iptables-nft-restore --noflush < {}",
            path.display()
        ));
    }

    /// The Service's endpoints become `eps` (instances 1 and/or 2).
    fn endpoints(&self, eps: &[usize]) {
        let mut rules = String::from("*nat\n:DNS-SVC - [0:0]\n");
        for (k, i) in eps.iter().enumerate() {
            let left = eps.len() - k;
            if left > 1 {
                rules.push_str(&format!(
                    "-A DNS-SVC -m statistic --mode random --probability {:.5} -j DNS-EP{i}\n",
                    1.0 / left as f64
                ));
            } else {
                rules.push_str(&format!("-A DNS-SVC -j DNS-EP{i}\n"));
            }
        }
        rules.push_str("COMMIT\n");
        self.restore(&rules);
    }

    /// kube-proxy's clean-up for a UDP endpoint that left: its flows'
    /// conntrack entries go, so their next packets are DNATed afresh.
    fn clear_flows(&self, i: usize) {
        let _ = self.node.try_sh(&format!(
            "conntrack -D -p udp --orig-dst {SERVICE} --dst-nat {} 2>/dev/null",
            addr(i)
        ));
    }

    /// Replies forwarded without a conntrack entry so far (see `new`).
    fn orphan_replies(&self) -> u64 {
        let (_, out) = self.node.try_sh("iptables-nft -nvxL FORWARD");
        out.lines()
            .find(|l| l.contains("orphan-reply"))
            .and_then(|l| l.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    }

    fn start(&mut self, i: usize) {
        let cf = self.dir.path().join(format!("Corefile.{i}"));
        std::fs::write(&cf, corefile(i)).expect("write Corefile");
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("dns{i}.log")))
            .expect("log");
        let child = self.dns[i - 1]
            .command(common::binary())
            .arg("-conf")
            .arg(&cf)
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .expect("start clusterdns");
        self.running[i - 1] = Some(child);
    }

    fn log(&self, i: usize) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("dns{i}.log"))).unwrap_or_default()
    }

    fn ready(&self, i: usize) -> u16 {
        let a: SocketAddr = format!("{}:8181", addr(i)).parse().expect("addr");
        self.node.http_status(a, "/ready")
    }

    fn health(&self, i: usize) -> u16 {
        let a: SocketAddr = format!("{}:8080", addr(i)).parse().expect("addr");
        self.node.http_status(a, "/health")
    }

    /// `dig +short` from the node straight to instance `i`.
    fn dig_direct(&self, i: usize) -> String {
        self.node
            .try_sh(&format!(
                "dig +short +tries=2 +time=2 @{} who.rolling.test",
                addr(i)
            ))
            .1
            .trim()
            .to_string()
    }

    fn wait(&self, what: &str, within: Duration, mut cond: impl FnMut() -> bool) -> Duration {
        let t = Instant::now();
        while !cond() {
            assert!(
                t.elapsed() < within,
                "{what} not within {within:?}\ninstance 1:\n{}\ninstance 2:\n{}",
                self.log(1),
                self.log(2)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        t.elapsed()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for c in self.running.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn rolling_restart_behind_a_dnat_loses_no_query() {
    let rounds: usize = if long() { 10 } else { 3 };
    let Some(mut lab) = Lab::new() else {
        return;
    };
    for i in 1..=2 {
        lab.start(i);
        lab.wait("instance ready", Duration::from_secs(20), || {
            lab.ready(i) == 200
        });
    }
    let from_client = |lab: &Lab| {
        lab.client
            .try_sh(&format!(
                "dig +short +tries=1 +time=1 @{SERVICE} kubernetes.default.svc.cluster.local"
            ))
            .1
            .trim()
            .to_string()
    };
    lab.wait("the Service answering", Duration::from_secs(10), || {
        from_client(&lab) == "10.96.0.1"
    });

    let qfile = lab.dir.path().join("queries.txt");
    std::fs::write(
        &qfile,
        "kubernetes.default.svc.cluster.local A\nwho.rolling.test A\n",
    )
    .expect("query file");
    let round_time = Duration::from_secs(LAMEDUCK_S + 4);
    let secs = (round_time.as_secs() as usize * rounds + 3) as u32;
    let exec = lab.client.exec();
    let perf = dnsperf(&exec, SERVICE, 53, &qfile, secs, 1000, false);
    std::thread::sleep(Duration::from_secs(1));
    let started = Instant::now();
    let (mut unready_ms, mut exit_ms, mut restart_ms) = (Vec::new(), Vec::new(), Vec::new());
    let mut lameduck_answers = 0;
    for r in 0..rounds {
        let round_start = Instant::now();
        let i = r % 2 + 1;
        let other = 3 - i;
        let pid = lab.running[i - 1].as_ref().map(Child::id).expect("running");
        common::netns::must(&format!("kill -TERM {pid}"));
        let sigterm = Instant::now();
        // The kubelet's readiness probe sees it fail; the endpoint leaves.
        lab.wait(
            "/ready failing after SIGTERM",
            Duration::from_secs(2),
            || lab.ready(i) != 200,
        );
        unready_ms.push(sigterm.elapsed().as_millis());
        lab.endpoints(&[other]);
        lab.clear_flows(i);
        // Lameduck: still answering, health still 200.
        if lab.dig_direct(i) == format!("192.0.2.{i}") && lab.health(i) == 200 {
            lameduck_answers += 1;
        }
        let child = lab.running[i - 1].as_mut().expect("running");
        let exited = wait_exit(child, Duration::from_secs(LAMEDUCK_S + 8));
        exit_ms.push(sigterm.elapsed().as_millis());
        assert!(
            exited.success(),
            "instance {i} exit: {exited}\n{}",
            lab.log(i)
        );
        lab.running[i - 1] = None;
        let t = Instant::now();
        lab.start(i);
        lab.wait(
            "the restarted instance ready",
            Duration::from_secs(20),
            || lab.ready(i) == 200,
        );
        restart_ms.push(t.elapsed().as_millis());
        lab.endpoints(&[1, 2]);
        if let Some(rest) = round_time.checked_sub(round_start.elapsed()) {
            std::thread::sleep(rest);
        }
    }
    let took = started.elapsed();
    let perf = finish(perf);
    let orphans = lab.orphan_replies();
    let max = |v: &[u128]| v.iter().max().copied().unwrap_or(0).to_string();
    report(
        "rolling-restart",
        &[
            ("rounds", rounds.to_string()),
            ("secs", format!("{:.0}", took.as_secs_f64())),
            ("sent", perf.sent.to_string()),
            ("lost", perf.lost.to_string()),
            ("orphan_replies", orphans.to_string()),
            ("lameduck_answered", format!("{lameduck_answers}/{rounds}")),
            ("unready_max_ms", max(&unready_ms)),
            ("exit_max_ms", max(&exit_ms)),
            ("restart_ready_max_ms", max(&restart_ms)),
        ],
    );
    assert!(perf.sent > 1000, "{}", perf.text);
    assert_eq!(
        perf.lost,
        0,
        "queries lost in the rolling restart:\n{}\ninstance 1:\n{}\ninstance 2:\n{}",
        perf.text,
        lab.log(1),
        lab.log(2)
    );
    assert!(perf.only("NOERROR"), "{}", perf.rcodes);
    assert_eq!(
        lameduck_answers, rounds,
        "an instance stopped answering in lameduck"
    );
    let lameduck_ms = u128::from(LAMEDUCK_S) * 1000;
    assert!(
        exit_ms.iter().all(|&ms| ms >= lameduck_ms),
        "exited before the lameduck ended: {exit_ms:?}"
    );
}

fn wait_exit(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let t = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return status;
        }
        assert!(t.elapsed() < within, "no exit within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
