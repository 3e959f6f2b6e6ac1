//! Moving a node from upstream's node-local-dns to `clusterdns
//! node-cache` and back, in the netns lab, as the DaemonSet controller
//! does it: with `maxSurge: 1, maxUnavailable: 0` (ours' manifest; and a
//! `kubectl rollout undo` to upstream keeps the strategy of the revision
//! it returns to... under ours, the surge) the new Pod's instance starts
//! beside the old one and the old one gets SIGTERM once the new one is
//! ready; a re-apply of upstream's manifest (`maxUnavailable: 10%`)
//! stops ours first and starts upstream's after. Upstream's node-cache is
//! the stand-in of common/nodecache.rs (the reference CoreDNS, upstream's
//! setup and teardown in its order). Lookups run from the pod throughout
//! (dig over UDP and TCP, getent), at the kube-dns ClusterIP and the
//! link-local address, and each move must fail none of them; after each
//! move the interception and the interface are exactly the survivor's.
//! Skipped, saying so, without namespaces (not root) or the reference
//! CoreDNS (`scripts/rig build`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/nodecache.rs"]
mod lab;

use std::time::Duration;

use lab::*;

/// deploy/node-local-dns's `-ready-listen-address`: every address of the
/// node, port 9354 (the kubelet probes the node's own address).
const READY_LISTEN: &str = ":9354";
/// Where this test probes it: one of those addresses, the link-local one.
fn ready_url(lab: &Lab) -> String {
    if lab.net.host_bits == 32 {
        format!("http://{}:9354/ready", lab.net.local)
    } else {
        format!("http://[{}]:9354/ready", lab.net.local)
    }
}

/// Our instance in `mode`, with its readiness probe apart from the
/// metrics port (which upstream's holds while it runs).
fn ours(lab: &Lab, mode: &str, log: &str) -> Running {
    Running(Some(lab.start_agent_as(
        &template_for(lab.net),
        &["-interception", mode, "-ready-listen-address", READY_LISTEN],
        log,
    )))
}

/// What the kubelet's readiness probe would see: `/ready` answering 200.
fn wait_ready(lab: &Lab, log: &str) {
    wait_for("our /ready", Duration::from_secs(30), || {
        lab.node(&format!(
            "curl -s -o /dev/null -w '%{{http_code}}' --max-time 2 {}",
            ready_url(lab)
        ))
        .trim()
            == "200"
    });
    assert!(
        lab.log_of(log).contains("/ready on http://"),
        "{}",
        lab.log_of(log)
    );
}

/// The interface holds both local addresses.
fn interface_complete(lab: &Lab) -> bool {
    let a = lab.node("ip addr show dev nodelocaldns");
    let bits = lab.net.host_bits;
    a.contains(&format!("{}/{bits}", lab.net.local))
        && a.contains(&format!("{}/{bits}", lab.net.cluster))
}

/// Who answers `who.nodelocal.test` at the link-local address.
fn who(lab: &Lab) -> String {
    lab.dig(lab.net.local, WHO, false)
}

fn assert_no_failures(what: &str, got: Lookups, logs: String) {
    eprintln!(
        "{what}: {} of {} lookups failed, {} answered after a retry {:?}",
        got.failed.len(),
        got.made,
        got.retried.len(),
        got.retried
    );
    assert!(got.made >= 6, "{what}: only {} lookups made", got.made);
    assert!(got.failed.is_empty(), "{what}: {:#?}\n{logs}", got.failed);
}

fn moves(tag: &str, net: &'static Net, mode: &str) {
    let Some(coredns) = clusterdns_test_support::reference_coredns() else {
        return;
    };
    let Some(mut lab) = Lab::build(tag, net, "iptables-nft") else {
        return;
    };
    let fam = if net.host_bits == 32 { "IPv4" } else { "IPv6" };
    lab.start_cluster_dns();
    let servers = [lab.net.cluster, lab.net.local];
    let upstream_rules = {
        let u = UpstreamNodeCache::start(&lab, &coredns);
        let r = UpstreamNodeCache::saved_rules(&lab);
        assert_eq!(r.len(), 24, "{r:#?}");
        u.stop();
        assert!(lab.nodelocal_rules().is_empty());
        r
    };

    // 1. Upstream's DaemonSet → ours (surge): ours starts beside it, is
    // ready, then upstream's stops and tears down.
    let u = UpstreamNodeCache::start(&lab, &coredns);
    lab.wait_answer(lab.net.local, WHO, false, UPSTREAM_WHO);
    let mut agent = None;
    let log = format!("in-{mode}.log");
    let got = lookups_during(&lab, &servers, KUBERNETES, "10.96.0.1", || {
        std::thread::sleep(Duration::from_millis(500));
        agent = Some(ours(&lab, mode, &log));
        wait_ready(&lab, &log);
        // Beside upstream's: its live rules are not leftovers.
        assert_eq!(
            UpstreamNodeCache::saved_rules(&lab).len(),
            upstream_rules.len(),
            "{}",
            lab.log_of(&log)
        );
        std::thread::sleep(Duration::from_millis(500));
        u.stop();
        std::thread::sleep(Duration::from_secs(2));
    });
    let mut agent = agent.unwrap();
    assert_no_failures(
        &format!("upstream -> ours ({mode}, {fam})"),
        got,
        lab.log_of(&log),
    );
    // Ours put the interface back the moment upstream's teardown took it.
    wait_for("the interface back", Duration::from_secs(10), || {
        interface_complete(&lab)
    });
    assert!(
        lab.log_of(&log)
            .contains("another process serves our addresses"),
        "{}",
        lab.log_of(&log)
    );
    assert!(
        lab.log_of(&log).contains("putting them back"),
        "{}",
        lab.log_of(&log)
    );
    assert_eq!(who(&lab), "198.51.100.1");
    let ours_alone = settled(&lab, mode);
    if mode == "iptables" {
        assert_eq!(ours_alone.0, upstream_rules, "ours are upstream's rules");
    } else {
        assert!(ours_alone.1.is_some());
        assert!(ours_alone.0.iter().all(|r| r.contains("allow DNS traffic")));
    }
    // The metrics port, upstream's until it stopped, is ours now.
    wait_for("our metrics listener", Duration::from_secs(10), || {
        lab.log_of(&log)
            .contains("metrics on http://127.0.0.1:9353/metrics")
    });

    // 2. Back to upstream (rollout undo, surge): upstream's starts beside
    // ours, then ours stops and leaves it the interface and the rules.
    let mut back = None;
    let got = lookups_during(&lab, &servers, KUBERNETES, "10.96.0.1", || {
        std::thread::sleep(Duration::from_millis(500));
        back = Some(UpstreamNodeCache::start(&lab, &coredns));
        std::thread::sleep(Duration::from_millis(500));
        agent.terminate();
        std::thread::sleep(Duration::from_secs(2));
    });
    let back = back.unwrap();
    assert_no_failures(
        &format!("ours ({mode}, {fam}) -> upstream"),
        got,
        lab.log_of(&log),
    );
    assert!(
        lab.log_of(&log).contains("leaving the interface"),
        "{}",
        lab.log_of(&log)
    );
    assert!(interface_complete(&lab), "{}", lab.log_of(&log));
    assert_eq!(
        views(&lab),
        (upstream_rules.clone(), None),
        "{}",
        lab.log_of(&log)
    );
    assert_eq!(who(&lab), UPSTREAM_WHO);

    // 3. Forward again, then a re-apply of upstream's manifest (no
    // surge): ours stops alone and tears everything down; upstream's
    // starts a moment later. Clients of the ClusterIP fall back to the
    // cluster DNS through kube-proxy meanwhile; the link-local address has
    // nobody until upstream's serves, as in upstream's own rolling update,
    // so only the ClusterIP is counted while ours stops. Upstream's own
    // start-up then puts the addresses and rules in before its CoreDNS
    // listens (its order): what that costs is upstream's, printed, not
    // asserted.
    let log2 = format!("again-{mode}.log");
    let mut again = ours(&lab, mode, &log2);
    wait_ready(&lab, &log2);
    back.stop();
    wait_for("the interface back", Duration::from_secs(10), || {
        interface_complete(&lab)
    });
    let t0 = std::time::Instant::now();
    let samples = std::sync::Mutex::new(Vec::new());
    let got = lookups_during(&lab, &[lab.net.cluster], KUBERNETES, "10.96.0.1", || {
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let at = t0.elapsed();
                    let state = lab.node(&format!(
                        "{}-save -t raw | grep -c {}; ss -Hlnup | grep -c ':53 '; ip -br addr show dev nodelocaldns 2>&1",
                        if lab.net.host_bits == 32 { "iptables" } else { "ip6tables" },
                        lab.net.cluster
                    ));
                    samples
                        .lock()
                        .unwrap()
                        .push(format!("{at:?}: {}", state.replace('\n', " | ")));
                    std::thread::sleep(Duration::from_millis(20));
                }
            });
            std::thread::sleep(Duration::from_millis(500));
            eprintln!("{:?}: terminating ours", t0.elapsed());
            again.terminate();
            eprintln!("{:?}: ours exited", t0.elapsed());
            assert_eq!(views(&lab), (Vec::new(), None), "{}", lab.log_of(&log2));
            std::thread::sleep(Duration::from_secs(1));
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
        });
    });
    if !got.failed.is_empty() || !got.retried.is_empty() {
        eprintln!(
            "phase 3 samples ({fam}, {mode}):\n{}\nlog:\n{}",
            samples.lock().unwrap().join("\n"),
            lab.log_of(&log2)
        );
    }
    assert_no_failures(
        &format!("ours ({mode}, {fam}) -> nothing (no surge), ClusterIP"),
        got,
        lab.log_of(&log2),
    );
    let mut after = None;
    let got = lookups_during(&lab, &[lab.net.cluster], KUBERNETES, "10.96.0.1", || {
        std::thread::sleep(Duration::from_millis(300));
        after = Some(UpstreamNodeCache::start(&lab, &coredns));
        std::thread::sleep(Duration::from_secs(1));
    });
    eprintln!(
        "nothing -> upstream (its own start-up, {fam}), ClusterIP: {} of {} lookups failed",
        got.failed.len(),
        got.made
    );
    lab.wait_answer(lab.net.local, WHO, false, UPSTREAM_WHO);
    assert_eq!(views(&lab), (upstream_rules, None));
    after.unwrap().stop();
    assert_eq!(views(&lab), (Vec::new(), None));
}

#[test]
fn from_and_back_to_upstream_crash_safe() {
    moves("u", &V4, "crashsafe");
}

#[test]
fn from_and_back_to_upstream_iptables() {
    moves("v", &V4, "iptables");
}

/// The same over IPv6: a ULA link address and an IPv6 ClusterIP, the
/// rules in ip6tables, the sockets in /proc/net/{udp6,tcp6}.
#[test]
fn ipv6_from_and_back_to_upstream_crash_safe() {
    moves("w", &V6, "crashsafe");
}

#[test]
fn ipv6_from_and_back_to_upstream_iptables() {
    moves("x", &V6, "iptables");
}
