//! The interface and the rules on the real kernel, each test in a network
//! namespace of its own (unshare(CLONE_NEWNET) on a fresh thread: the
//! kernel drops the namespace, its links and its rules with the thread).
//! Skipped, with a line saying so, where namespaces cannot be made (not
//! root).

use std::net::IpAddr;
use std::process::Command;
use std::time::Duration;

use clusterdns_nodecache::iptables::{self, Backend, Iptables, RuleSet};
use clusterdns_nodecache::{Agent, Flags, LinkKind, Netif, SetupMetrics};
use clusterdns_observe::metrics::Registry;

/// Runs `f` on a new thread inside a new network namespace, on a
/// current-thread runtime (so every socket and child process the test
/// makes is in that namespace). `None` when namespaces are unavailable.
fn in_netns<T: Send + 'static>(
    f: impl FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = T>>> + Send + 'static,
) -> Option<T> {
    std::thread::spawn(move || {
        #[allow(unsafe_code)]
        // SAFETY: unshare takes a flag and changes only this thread's
        // network namespace.
        let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
        if rc != 0 {
            eprintln!("skipped: unshare(CLONE_NEWNET) failed (needs root)");
            return None;
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        Some(rt.block_on(f()))
    })
    .join()
    .expect("test thread")
}

fn sh(cmd: &str) -> String {
    let out = Command::new("sh").arg("-c").arg(cmd).output().expect("sh");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn flags(args: &[&str]) -> Flags {
    let a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    clusterdns_nodecache::flags::parse(&a).expect("flags")
}

fn ips(s: &str) -> Vec<IpAddr> {
    s.split(',').map(|i| i.parse().expect("ip")).collect()
}

#[test]
fn interface_holds_every_localip_and_falls_back_to_a_bridge() {
    in_netns(|| {
        Box::pin(async {
            let reg = Registry::new();
            let m = SetupMetrics::new(&reg);
            let n = Netif::new("nodelocaldns", &ips("169.254.20.10,10.96.0.10"), m.clone())
                .expect("netlink");
            let kind = n.ensure().await.expect("ensure");
            let has_dummy =
                sh("ip link add probe0 type dummy 2>/dev/null && echo yes").contains("yes");
            if has_dummy {
                assert_eq!(kind, LinkKind::Dummy);
            } else {
                assert_eq!(kind, LinkKind::Bridge);
                assert_eq!(m.fallbacks(), 1);
                assert_eq!(n.kind().await.expect("kind").as_deref(), Some("bridge"));
            }
            let mut a = n.addresses().await.expect("addrs");
            a.sort();
            assert_eq!(a, ips("10.96.0.10,169.254.20.10"));
            let shown = sh("ip -4 addr show dev nodelocaldns");
            assert!(shown.contains("inet 169.254.20.10/32"), "{shown}");
            assert!(shown.contains("inet 10.96.0.10/32"), "{shown}");
            // The addresses are local: a socket binds them.
            std::net::UdpSocket::bind("10.96.0.10:0").expect("bind the ClusterIP");
            // Ensuring again changes nothing and is not an error.
            assert_eq!(n.ensure().await.expect("again"), LinkKind::Existing);
            // An address removed by hand comes back.
            sh("ip addr del 10.96.0.10/32 dev nodelocaldns");
            n.ensure().await.expect("again");
            assert_eq!(n.addresses().await.expect("addrs").len(), 2);
            n.remove().await.expect("remove");
            assert_eq!(n.index().await.expect("index"), None);
            n.remove().await.expect("remove twice is fine");
            assert_eq!(m.errors("interface_add"), 0);
            let text = reg.render();
            assert!(
                text.contains(
                    "coredns_nodecache_setup_errors_total{errortype=\"interface_add\"} 0"
                ),
                "{text}"
            );
        })
    });
}

#[test]
fn ipv6_addresses_are_slash_128_and_usable_at_once() {
    in_netns(|| {
        Box::pin(async {
            let m = SetupMetrics::new(&Registry::new());
            let n = Netif::new("nodelocaldns", &ips("fd00::10"), m).expect("netlink");
            n.ensure().await.expect("ensure");
            let shown = sh("ip -6 addr show dev nodelocaldns");
            assert!(shown.contains("inet6 fd00::10/128"), "{shown}");
            std::net::UdpSocket::bind("[fd00::10]:0").expect("bind at once (no DAD)");
        })
    });
}

/// Upstream's rules for one address as `iptables-save` prints them: the
/// twelve rules of node-cache's `initIptables`, each inserted at the top,
/// so a chain lists them in reverse order of insertion.
fn expected_save(ip: &str, bits: u8) -> (Vec<String>, Vec<String>) {
    let nt = "-m comment --comment \"NodeLocal DNS Cache: skip conntrack\" -j NOTRACK";
    let ac = "-m comment --comment \"NodeLocal DNS Cache: allow DNS traffic\" -j ACCEPT";
    let raw = vec![
        format!("-A PREROUTING -d {ip}/{bits} -p udp -m udp --dport 53 {nt}"),
        format!("-A PREROUTING -d {ip}/{bits} -p tcp -m tcp --dport 53 {nt}"),
        format!("-A OUTPUT -s {ip}/{bits} -p tcp -m tcp --sport 8080 {nt}"),
        format!("-A OUTPUT -d {ip}/{bits} -p tcp -m tcp --dport 8080 {nt}"),
        format!("-A OUTPUT -d {ip}/{bits} -p udp -m udp --dport 53 {nt}"),
        format!("-A OUTPUT -d {ip}/{bits} -p tcp -m tcp --dport 53 {nt}"),
        format!("-A OUTPUT -s {ip}/{bits} -p udp -m udp --sport 53 {nt}"),
        format!("-A OUTPUT -s {ip}/{bits} -p tcp -m tcp --sport 53 {nt}"),
    ];
    let filter = vec![
        format!("-A INPUT -d {ip}/{bits} -p udp -m udp --dport 53 {ac}"),
        format!("-A INPUT -d {ip}/{bits} -p tcp -m tcp --dport 53 {ac}"),
        format!("-A OUTPUT -s {ip}/{bits} -p udp -m udp --sport 53 {ac}"),
        format!("-A OUTPUT -s {ip}/{bits} -p tcp -m tcp --sport 53 {ac}"),
    ];
    (raw, filter)
}

async fn rules_exact(backend: Backend, ip: &str, bits: u8) {
    let ipv6 = bits == 128;
    let reg = Registry::new();
    let m = SetupMetrics::new(&reg);
    let ipt = Iptables::detect(ipv6, Some(backend)).await;
    let set = RuleSet::new(ipt, iptables::rules(&ips(ip), 53, 8080), m.clone());
    let done = set.ensure().await;
    assert_eq!((done.added, done.errors), (12, 0), "{done:?}");
    let (raw, filter) = expected_save(ip, bits);
    assert_eq!(set.iptables().save("raw").await.expect("save"), raw);
    assert_eq!(set.iptables().save("filter").await.expect("save"), filter);
    // Idempotent: a second pass adds nothing.
    assert_eq!(set.ensure().await.added, 0);
    assert_eq!(set.iptables().save("raw").await.expect("save"), raw);
    // A rule deleted by hand comes back on the next pass.
    let bin = set.iptables().binary().to_string();
    let del = format!(
        "{bin} -t raw -D PREROUTING -p udp -d {ip} --dport 53 -j NOTRACK -m comment --comment 'NodeLocal DNS Cache: skip conntrack'"
    );
    assert!(
        Command::new("sh")
            .arg("-c")
            .arg(&del)
            .status()
            .expect("sh")
            .success()
    );
    assert_eq!(set.iptables().save("raw").await.expect("save").len(), 7);
    assert_eq!(set.ensure().await.added, 1);
    assert_eq!(set.iptables().save("raw").await.expect("save").len(), 8);
    // A duplicate (what a flaky -C made of upstream, kubernetes/dns#568)
    // is removed.
    let dup = format!(
        "{bin} -t filter -I INPUT -p tcp -d {ip} --dport 53 -j ACCEPT -m comment --comment 'NodeLocal DNS Cache: allow DNS traffic'"
    );
    assert!(
        Command::new("sh")
            .arg("-c")
            .arg(&dup)
            .status()
            .expect("sh")
            .success()
    );
    assert_eq!(set.ensure().await.deduplicated, 1);
    let mut got = set.iptables().save("filter").await.expect("save");
    let mut want = filter.clone();
    got.sort();
    want.sort();
    assert_eq!(got, want);
    // Teardown removes every rule, and leaves others alone.
    let other = format!("{bin} -t raw -A PREROUTING -p udp --dport 5353 -j NOTRACK");
    assert!(
        Command::new("sh")
            .arg("-c")
            .arg(&other)
            .status()
            .expect("sh")
            .success()
    );
    assert_eq!(set.remove().await, 12);
    assert_eq!(set.iptables().save("raw").await.expect("save").len(), 1);
    assert!(
        set.iptables()
            .save("filter")
            .await
            .expect("save")
            .is_empty()
    );
    assert_eq!(m.errors("iptables"), 0);
}

#[test]
fn rules_are_upstreams_with_iptables_nft() {
    in_netns(|| Box::pin(rules_exact(Backend::Nft, "169.254.20.10", 32)));
}

#[test]
fn rules_are_upstreams_with_iptables_legacy() {
    in_netns(|| Box::pin(rules_exact(Backend::Legacy, "10.96.0.10", 32)));
}

#[test]
fn rules_are_upstreams_with_ip6tables() {
    in_netns(|| Box::pin(rules_exact(Backend::Nft, "fd00::10", 128)));
}

#[test]
fn backend_detection_follows_kubelets_hint_chain() {
    in_netns(|| {
        Box::pin(async {
            // Nothing anywhere: nft.
            assert_eq!(Iptables::detect(false, None).await.backend(), Backend::Nft);
            // kubelet left its hint chain in the legacy tables.
            sh("iptables-legacy -t mangle -N KUBE-IPTABLES-HINT");
            assert_eq!(
                Iptables::detect(false, None).await.backend(),
                Backend::Legacy
            );
            // ... and in nft too: nft wins, as iptables-wrappers decides.
            sh("iptables-nft -t mangle -N KUBE-KUBELET-CANARY");
            assert_eq!(Iptables::detect(false, None).await.backend(), Backend::Nft);
        })
    });
}

#[test]
fn errors_are_counted_not_fatal() {
    in_netns(|| {
        Box::pin(async {
            let reg = Registry::new();
            let f = flags(&[
                "-localip",
                "169.254.20.10",
                "-conf",
                "/tmp/x",
                "-setupinterface=false",
            ]);
            let agent = Agent::new(&f, &reg).await.expect("agent");
            // A rule that the kernel refuses (bad chain): counted, and the
            // others are still installed.
            let m = agent.metrics().clone();
            let ipt = Iptables::detect(false, Some(Backend::Nft)).await;
            let mut set = iptables::rules(&ips("169.254.20.10"), 53, 8080);
            set[0].chain = "NO-SUCH-CHAIN";
            let rs = RuleSet::new(ipt, set, m.clone());
            let done = rs.ensure().await;
            assert_eq!((done.added, done.errors), (11, 1));
            assert_eq!(m.errors("iptables"), 1);
            assert!(
                reg.render()
                    .contains("coredns_nodecache_setup_errors_total{errortype=\"iptables\"} 1")
            );
        })
    });
}

#[test]
fn agent_sync_and_teardown() {
    in_netns(|| {
        Box::pin(async {
            let reg = Registry::new();
            let f = flags(&[
                "-localip",
                "169.254.20.10,10.96.0.10",
                "-conf",
                "/tmp/x",
                "-interception=iptables",
            ]);
            let agent = Agent::new(&f, &reg).await.expect("agent");
            assert!(!agent.crash_safe());
            let done = agent.sync().await;
            assert_eq!((done.added, done.errors), (24, 0));
            assert!(sh("ip -4 addr show dev nodelocaldns").contains("10.96.0.10/32"));
            agent.teardown().await;
            assert!(!sh("ip link show").contains("nodelocaldns"));
            assert!(!sh("iptables-save").contains("NodeLocal DNS Cache"));
            // -skipteardown leaves everything.
            let f = flags(&[
                "-localip",
                "169.254.20.10",
                "-conf",
                "/tmp/x",
                "-skipteardown",
            ]);
            let agent = Agent::new(&f, &reg).await.expect("agent");
            agent.sync().await;
            agent.teardown().await;
            tokio::time::sleep(Duration::from_millis(10)).await;
            assert!(sh("ip link show").contains("nodelocaldns"));
            assert!(agent.crash_safe());
            assert!(sh("nft list tables").contains("clusterdns_nodecache"));
        })
    });
}

#[test]
fn crash_safe_table_installs_atomically_and_lists_as_built() {
    use clusterdns_nodecache::crashsafe::{CrashSafe, wildcard_listener};
    in_netns(|| {
        Box::pin(async {
            let cs = CrashSafe::new(&ips("169.254.20.10,10.96.0.10"), 53, 8080);
            cs.supported().await.expect("supported");
            assert_eq!(cs.listed().await, None);
            cs.install().await.expect("install");
            assert_eq!(cs.listed().await.as_deref(), Some(cs.table().as_str()));
            assert!(cs.intact().await);
            // Replacing is one transaction and leaves one table.
            cs.install().await.expect("again");
            assert_eq!(
                sh("nft list tables")
                    .matches("clusterdns_nodecache")
                    .count(),
                1
            );
            // A rule deleted by hand shows.
            sh("nft flush chain ip clusterdns_nodecache prerouting");
            assert!(!cs.intact().await);
            cs.install().await.expect("again");
            assert!(cs.intact().await);
            cs.remove().await.expect("remove");
            assert_eq!(cs.listed().await, None);
            cs.remove().await.expect("absent is fine");
            let v6 = CrashSafe::new(&ips("fd00::10"), 53, 8080);
            v6.install().await.expect("install v6");
            assert!(v6.intact().await);
            // With the link-local fallback (both families): as listed.
            for (local, up) in [
                ("169.254.20.10,10.96.0.10", "10.96.0.11"),
                ("fe80::10,fd00::10", "fd00::11"),
            ] {
                let fb =
                    CrashSafe::new(&ips(local), 53, 8080).with_fallback(ips(up).first().copied());
                assert!(fb.fallback().is_some(), "{local}");
                fb.install().await.expect("install with fallback");
                assert_eq!(fb.listed().await.as_deref(), Some(fb.table().as_str()));
                fb.remove().await.expect("remove");
            }

            assert_eq!(wildcard_listener(5399), None);
            let _s = std::net::UdpSocket::bind("0.0.0.0:5399").expect("bind");
            let _t = std::net::UdpSocket::bind("127.0.0.1:5398").expect("bind");
            let found = wildcard_listener(5399).expect("found");
            assert!(found.contains("00000000:1517"), "{found}");
            assert_eq!(wildcard_listener(5398), None);
        })
    });
}

#[test]
fn crash_safe_is_the_default_and_clears_upstreams_stale_rules() {
    in_netns(|| {
        Box::pin(async {
            let reg = Registry::new();
            // A crashed upstream node-cache left its rules.
            let old = RuleSet::new(
                Iptables::detect(false, None).await,
                iptables::rules(&ips("10.96.0.10"), 53, 8080),
                SetupMetrics::new(&Registry::new()),
            );
            assert_eq!(old.ensure().await.added, 12);
            let f = flags(&["-localip", "169.254.20.10,10.96.0.10", "-conf", "/tmp/x"]);
            let agent = Agent::new(&f, &reg).await.expect("agent");
            assert!(agent.crash_safe());
            // The table, and the ACCEPT rules of 169.254.20.10: those of
            // 10.96.0.10 are the crashed instance's, kept as they are.
            assert_eq!(agent.sync().await.added, 5);
            let saved = sh("iptables-save");
            assert!(!saved.contains(iptables::SKIP_CONNTRACK), "{saved}");
            assert_eq!(saved.matches(iptables::ALLOW_DNS).count(), 8, "{saved}");
            assert!(sh("nft list tables").contains("clusterdns_nodecache"));
            // Intact: nothing to do.
            assert_eq!(agent.sync().await.added, 0);
            sh("nft delete table ip clusterdns_nodecache");
            assert_eq!(agent.sync().await.added, 1);
            agent.teardown().await;
            assert!(!sh("nft list tables").contains("clusterdns_nodecache"));
            assert!(!sh("iptables-save").contains("NodeLocal DNS Cache"));
            assert!(!sh("ip link show").contains("nodelocaldns"));

            // Something else on 0.0.0.0:53: auto falls back to iptables,
            // crashsafe refuses before touching anything.
            let _s = std::net::UdpSocket::bind("0.0.0.0:53").expect("bind");
            let agent = Agent::new(&f, &reg).await.expect("agent");
            assert!(!agent.crash_safe());
            let f = flags(&[
                "-localip",
                "169.254.20.10",
                "-conf",
                "/tmp/x",
                "-interception=crashsafe",
            ]);
            let e = Agent::new(&f, &reg).await.unwrap_err().to_string();
            assert!(e.contains("wildcard"), "{e}");
            assert!(!sh("ip link show").contains("nodelocaldns"));
        })
    });
}
