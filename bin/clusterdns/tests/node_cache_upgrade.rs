//! The zero-loss upgrade of `clusterdns node-cache` beyond the IPv4,
//! one-mode case of node_cache.rs: over IPv6 (a link-local-style /128
//! and an IPv6 kube-dns ClusterIP in the lab's namespaces, dnsperf from
//! the pod at both), and updates whose new instance runs the other
//! interception mode (iptables → crash-safe and back), each under dnsperf
//! load with not a query lost, no rule left behind and none duplicated.
//! Skipped, saying so, where namespaces cannot be made (not root).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/nodecache.rs"]
mod lab;

use lab::*;

/// [`Upgrades`] in a lab of `net` with its cluster DNS serving, on the
/// template for `net`, given to `run`.
fn upgrades(tag: &str, net: &'static Net, run: impl FnOnce(&Upgrades<'_>)) {
    let Some(lab) = Lab::serving_on(tag, net) else {
        return;
    };
    let template = template_for(net);
    run(&Upgrades::new(&lab, &template));
}

/// As node_cache.rs's IPv4 upgrade test, over IPv6: ten crash-safe
/// updates over UDP, three in iptables mode (ip6tables), three crash-safe
/// over TCP.
#[test]
fn ipv6_upgrade_hands_the_sockets_over_without_losing_a_query() {
    upgrades("6", &V6, |u| u.same_mode_series());
}

/// Updates that change the interception mode, IPv4: iptables → crash-safe
/// → iptables → crash-safe → iptables over UDP, then crash-safe →
/// iptables → crash-safe over TCP. The new instance removes the old
/// mode's rules (or table) only once its own are in, and the old one no
/// longer puts its own back.
#[test]
fn upgrade_across_interception_modes_loses_nothing_and_leaves_nothing() {
    upgrades("x", &V4, |u| {
        u.series(
            &["iptables", "crashsafe", "iptables", "crashsafe", "iptables"],
            "udp",
        );
        u.series(&["crashsafe", "iptables", "crashsafe"], "tcp");
    });
}

/// The same across modes over IPv6 (ip6tables and the ip6 table).
#[test]
fn ipv6_upgrade_across_interception_modes() {
    upgrades("y", &V6, |u| {
        u.series(&["iptables", "crashsafe", "iptables", "crashsafe"], "udp");
        u.series(&["crashsafe", "iptables"], "tcp");
    });
}
