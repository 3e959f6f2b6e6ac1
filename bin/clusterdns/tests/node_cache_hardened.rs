//! `clusterdns node-cache` on a hardened node: the lab's node
//! (common/nodecache.rs) with filter INPUT and OUTPUT policy DROP in its
//! iptables backend (`Lab::harden`), legacy and nft, IPv4 and IPv6 (an
//! IPv6-only node: ip6tables, the ULA local address of the lab's IPv6
//! runs in the link-local address's role). A query a NOTRACK rule
//! untracked is dropped there unless an ACCEPT rule names it, so
//! crash-safe mode keeps upstream's ACCEPT rules beside its table. In
//! every mode (`auto` too, which chooses crash-safe there) a Pod resolves
//! through the cache (dig and getent, every failed lookup counted);
//! after kill -9 in crash-safe mode it resolves through the fallback;
//! teardown leaves no rule behind and the node's own rules as they were.
//! Skipped, saying so, where namespaces cannot be made (not root).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/nodecache.rs"]
mod lab;

use std::time::Duration;

use lab::*;

const CACHE: &str = "198.51.100.1";
const CLUSTER: &str = "10.96.0.1";
/// Lookups per address and check (each one dig over UDP, one over TCP
/// and one getent).
const ROUNDS: usize = 5;

#[test]
fn hardened_node_iptables_nft() {
    hardened(hardened_lab("hn", &V4, "iptables-nft"));
}

#[test]
fn hardened_node_iptables_legacy() {
    hardened(hardened_lab("hl", &V4, "iptables-legacy"));
}

#[test]
fn hardened_ipv6_node_ip6tables_nft() {
    hardened(hardened_lab("h6n", &V6, "iptables-nft"));
}

#[test]
fn hardened_ipv6_node_ip6tables_legacy() {
    hardened(hardened_lab("h6l", &V6, "iptables-legacy"));
}

/// A lab of `net`'s family whose kube-proxy and firewall use `backend`
/// (its ip6tables for IPv6), hardened, with the cluster DNS running.
fn hardened_lab(tag: &str, net: &'static Net, backend: &'static str) -> Option<Lab> {
    let mut lab = Lab::build(tag, net, backend)?;
    lab.start_cluster_dns();
    lab.harden();
    Some(lab)
}

/// Asserts that every lookup of `name` at each of `servers` answered
/// `want`.
fn resolves(lab: &Lab, servers: &[&str], name: &str, want: &str, what: &str) {
    for server in servers {
        let failed = lab.failed_lookups(server, name, want, ROUNDS);
        eprintln!(
            "{what}: {name} @{server}: {} of {} lookups failed",
            failed.len(),
            ROUNDS * 3
        );
        assert!(failed.is_empty(), "{what}: {failed:#?}\n{}", lab.log());
    }
}

/// The node's two addresses: the ClusterIP and the local address.
fn both(lab: &Lab) -> [&'static str; 2] {
    [lab.net.cluster, lab.net.local]
}

fn hardened(lab: Option<Lab>) {
    let Some(lab) = lab else { return };
    let template = template_for(lab.net);
    let firewall = lab.filter_table();
    assert!(firewall.contains(":INPUT DROP\n"), "{firewall}");
    assert!(firewall.contains(":OUTPUT DROP\n"), "{firewall}");
    // Before the agent, the Pod resolves through kube-proxy's DNAT
    // (forwarded: the policies do not apply); the link-local address has
    // nothing behind it.
    assert_eq!(lab.dig(lab.net.cluster, KUBERNETES, false), CLUSTER);
    // (`-interception`, the mode it must choose): `auto` chooses
    // crash-safe mode on a hardened node too, ACCEPT rules and all.
    for (flag, mode) in [
        ("iptables", "iptables"),
        ("crashsafe", "crashsafe"),
        ("auto", "crashsafe"),
    ] {
        let mut agent = Running(Some(lab.start_agent(&template, &["-interception", flag])));
        lab.wait_answer(lab.net.cluster, WHO, false, CACHE);
        let (rules, table) = settled(&lab, mode);
        let log = lab.log();
        assert!(log.contains(&format!("interception: {mode}")), "{log}");
        let accepts: Vec<&String> = rules
            .iter()
            .filter(|r| r.contains("allow DNS traffic"))
            .collect();
        // Upstream's four ACCEPT rules per address, in either mode.
        assert_eq!(accepts.len(), 8, "{rules:#?}");
        if mode == "crashsafe" {
            assert_eq!(accepts.len(), rules.len(), "NOTRACK rules: {rules:#?}");
            assert!(table.is_some());
            assert!(
                log.contains(&format!("accepted in {} filter INPUT/OUTPUT", lab.ipt)),
                "{log}"
            );
        } else {
            assert_eq!(rules.len(), 24, "{rules:#?}");
        }
        assert_eq!(lab.other_backend_rules(), Vec::<String>::new());
        let what = format!("-interception={flag}, serving");
        resolves(&lab, &both(&lab), WHO, CACHE, &what);
        resolves(&lab, &both(&lab), KUBERNETES, CLUSTER, &what);
        if flag == "crashsafe" {
            crash_safe_specifics(&lab, &template, &mut agent);
        }
        agent.terminate();
        assert_eq!(views(&lab), (Vec::new(), None), "{}", lab.log());
        assert_eq!(lab.other_backend_rules(), Vec::<String>::new());
        assert!(!lab.node("ip link show").contains("nodelocaldns"));
        assert_eq!(lab.filter_table(), firewall, "the node's own rules");
        // Torn down: the ClusterIP is the cluster DNS's again.
        assert_eq!(lab.dig(lab.net.cluster, KUBERNETES, false), CLUSTER);
        assert_eq!(lab.dig(lab.net.cluster, WHO, false), "");
    }
}

/// Crash-safe mode under the DROP policy, past serving: the periodic sync
/// puts a deleted ACCEPT rule back; a hostNetwork client of the ClusterIP
/// is not intercepted (the limit the READMEs state); kill -9 leaves the
/// Pod resolving through the fallback; a new instance adopts what the
/// dead one left, duplicating nothing.
fn crash_safe_specifics(lab: &Lab, template: &str, agent: &mut Running) {
    let before = views(lab);
    let (ipt, cluster, local) = (lab.ipt, lab.net.cluster, lab.net.local);
    lab.node(&format!(
        "{ipt} -w 5 -D INPUT -p udp -d {cluster} --dport 53 -j ACCEPT -m comment --comment 'NodeLocal DNS Cache: allow DNS traffic'"
    ));
    // No count right after the delete: the agent's sync (every 1ns here)
    // may have put it back already. Its log says it saw the rule gone.
    wait_for("the ACCEPT rule back", Duration::from_secs(10), || {
        views(lab) == before
    });
    assert!(
        lab.log().contains(&format!(
            "Added back nodelocaldns rule - {{filter INPUT [-p udp -d {cluster} --dport 53 -j ACCEPT"
        )),
        "{}",
        lab.log()
    );
    // The node itself (a hostNetwork Pod): the link-local address is
    // served by the cache, the ClusterIP by the cluster DNS.
    let host_dig = |server: &str, name: &str| {
        lab.node(&format!("dig +short +tries=1 +time=1 @{server} {name}"))
            .trim()
            .to_string()
    };
    assert_eq!(host_dig(local, WHO), CACHE);
    assert_eq!(host_dig(cluster, WHO), "");
    assert_eq!(host_dig(cluster, KUBERNETES), CLUSTER);

    // kill -9: no teardown runs; the table, the ACCEPT rules and the
    // interface stay, and the Pod resolves through the cluster DNS at
    // the ClusterIP (through kube-proxy's DNAT) and at a link-local
    // address (through kube-dns-upstream's). The IPv6 lab's local
    // address is a ULA (as upstream's `fd00::10`), which has no fallback
    // (crates/nodecache/README.md): nothing answers it until a cache
    // runs again.
    signal(agent.child(), "KILL");
    wait_exit(agent.child(), Duration::from_secs(5));
    agent.0 = None;
    assert_eq!(views(lab), before);
    let falls_back = local.starts_with("169.254.") || local.starts_with("fe80:");
    let fallback: &[&str] = if falls_back {
        &[cluster, local]
    } else {
        &[cluster]
    };
    resolves(
        lab,
        fallback,
        KUBERNETES,
        CLUSTER,
        "crashsafe, after kill -9",
    );
    for server in fallback {
        assert_eq!(lab.dig(server, WHO, false), "", "@{server}: not the cache");
    }
    if !falls_back {
        let got = lab.dig(local, KUBERNETES, false);
        assert!(got.contains("no servers could be reached"), "{got:?}");
    }

    // A new instance takes over what the dead one left: the same table,
    // the same ACCEPT rules, none twice.
    *agent = Running(Some(
        lab.start_agent(template, &["-interception", "crashsafe"]),
    ));
    lab.wait_answer(cluster, WHO, false, CACHE);
    assert_eq!(settled(lab, "crashsafe"), before, "{}", lab.log());
    resolves(lab, &both(lab), WHO, CACHE, "crashsafe, restarted");
}

/// The control: the table without the ACCEPT rules does not serve a
/// hardened node (the periodic sync held off, the ACCEPT rules deleted
/// by hand), which is why crash-safe mode keeps them.
#[test]
fn hardened_node_needs_the_accept_rules() {
    needs_the_accept_rules(hardened_lab("ha", &V4, "iptables-nft"));
}

#[test]
fn hardened_ipv6_node_needs_the_accept_rules() {
    needs_the_accept_rules(hardened_lab("ha6", &V6, "iptables-nft"));
}

fn needs_the_accept_rules(lab: Option<Lab>) {
    let Some(lab) = lab else { return };
    let mut agent = Running(Some(lab.start_agent(
        &template_for(lab.net),
        &["-interception", "crashsafe", "-syncinterval", "3600ns"],
    )));
    lab.wait_answer(lab.net.cluster, WHO, false, CACHE);
    settled(&lab, "crashsafe");
    resolves(&lab, &both(&lab), WHO, CACHE, "with the ACCEPT rules");
    lab.node(&format!(
        "{ipt}-save -t filter | grep 'allow DNS traffic' | sed 's/^-A/{ipt} -w 5 -D/' | sh",
        ipt = lab.ipt
    ));
    assert!(lab.nodelocal_rules().is_empty());
    for server in both(&lab) {
        for tcp in [false, true] {
            let got = lab.dig(server, WHO, tcp);
            assert!(
                got.contains("no servers could be reached"),
                "@{server} tcp={tcp}: {got:?}"
            );
        }
    }
    agent.terminate();
    assert_eq!(views(&lab), (Vec::new(), None), "{}", lab.log());
}

/// DaemonSet updates from one interception mode to the other on a
/// hardened node, under dnsperf load from the Pod: not a query lost, so
/// the ACCEPT rules both modes share were there throughout (the watcher
/// of `Upgrades::series` checks it too).
#[test]
fn hardened_node_upgrade_across_modes_loses_nothing() {
    upgrade_across_modes(hardened_lab("hu", &V4, "iptables-nft"));
}

#[test]
fn hardened_ipv6_node_upgrade_across_modes_loses_nothing() {
    upgrade_across_modes(hardened_lab("hu6", &V6, "iptables-nft"));
}

fn upgrade_across_modes(lab: Option<Lab>) {
    let Some(lab) = lab else { return };
    let template = template_for(lab.net);
    let u = Upgrades::new(&lab, &template);
    u.series(&["iptables", "crashsafe", "iptables"], "udp");
    u.series(&["crashsafe", "iptables", "crashsafe"], "tcp");
}
