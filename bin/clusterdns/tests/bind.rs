//! The *bind* plugin through the real binary.

mod common;
mod ops;

use std::net::{SocketAddr, UdpSocket};
use std::process::Command;
use std::time::Duration;

use common::{Server, free_port, status};

fn dig_at(ip: &str, port: u16, args: &[&str]) -> String {
    let out = Command::new("dig")
        .arg(format!("@{ip}"))
        .args(["-p", &port.to_string(), "+tries=1", "+time=2"])
        .args(args)
        .output()
        .expect("dig");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn two_addresses_same_port_each_own_zone() {
    let mp = free_port();
    let s = Server::start(&format!(
        "a.test:{{PORT}} {{\n    bind 127.0.0.1\n    prometheus 127.0.0.1:{mp}\n    whoami\n}}\nb.test:{{PORT}} {{\n    bind 127.0.0.2\n    whoami\n}}\n"
    ));
    let p = s.port;
    assert_eq!(
        status(&dig_at("127.0.0.1", p, &["x.a.test", "A"])),
        "NOERROR"
    );
    assert_eq!(
        status(&dig_at("127.0.0.1", p, &["x.b.test", "A"])),
        "REFUSED"
    );
    assert_eq!(
        status(&dig_at("127.0.0.2", p, &["x.b.test", "A"])),
        "NOERROR"
    );
    assert_eq!(
        status(&dig_at("127.0.0.2", p, &["+tcp", "x.b.test", "A"])),
        "NOERROR"
    );
    assert_eq!(
        status(&dig_at("127.0.0.2", p, &["x.a.test", "A"])),
        "REFUSED"
    );
    // The server label carries the address.
    let (_, text) = ops::get_ok(mp, "/metrics");
    let srv = format!("dns://127.0.0.1:{p}");
    let l = [
        ("server", srv.as_str()),
        ("zone", "a.test."),
        ("view", ""),
        ("proto", "udp"),
        ("family", "1"),
        ("type", "A"),
    ];
    assert_eq!(
        ops::value(&text, "coredns_dns_requests_total", &l),
        Some(1.0),
        "{text}"
    );
}

#[test]
fn interface_name_with_except() {
    let s =
        Server::start("a.test:{PORT} {\n    bind lo {\n        except ::1\n    }\n    whoami\n}\n");
    let p = s.port;
    assert_eq!(
        status(&dig_at("127.0.0.1", p, &["x.a.test", "A"])),
        "NOERROR"
    );
    // ::1 was excepted: nothing listens there.
    let r = dig_at("::1", p, &["x.a.test", "A"]);
    assert!(!r.contains("status:"), "{r}");
}

#[test]
fn unknown_interface_is_a_config_error() {
    let text = common::config_error(".:1 {\n    bind nosuchif0\n}\n");
    assert!(
        text.contains("plugin/bind")
            && text.contains("not a valid IP address or interface name: \"nosuchif0\""),
        "{text}"
    );
}

/// Sends `query(name)` from `from` to `to` and returns where the reply came
/// from (`None`: no reply within 2 s).
fn reply_source(from: &str, to: SocketAddr, name: &str) -> Option<SocketAddr> {
    let sock = UdpSocket::bind(from).expect("bind client");
    sock.set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    sock.send_to(&common::query(name, 0x5150), to)
        .expect("send");
    let mut buf = [0u8; 512];
    let (n, src) = sock.recv_from(&mut buf).ok()?;
    assert!(n >= 12 && buf[..2] == [0x51, 0x50], "not our reply");
    Some(src)
}

// Without `bind` the block listens on the wildcard addresses; a UDP reply
// must leave from the address the query was sent to (as CoreDNS's do,
// through IP_PKTINFO), or the client drops it: here the route back to
// 127.0.0.1 would pick 127.0.0.1 as the source of a reply to a query sent
// to 127.0.0.2. Both the synchronous path (whoami) and a deferred one
// (forward, answered later from the worker's future) are asked.
#[test]
fn wildcard_udp_replies_from_the_address_asked() {
    let upstream = Server::start(".:{PORT} {\n    bind 127.0.0.1\n    whoami\n}\n");
    let s = Server::start(&format!(
        "fwd.test:{{PORT}} {{\n    forward . 127.0.0.1:{}\n}}\n.:{{PORT}} {{\n    whoami\n}}\n",
        upstream.port
    ));
    for to in ["127.0.0.1", "127.0.0.2", "127.0.0.3"] {
        let to: SocketAddr = format!("{to}:{}", s.port).parse().expect("addr");
        for name in ["who.example", "x.fwd.test"] {
            assert_eq!(
                reply_source("127.0.0.1:0", to, name),
                Some(to),
                "{name} asked at {to}"
            );
        }
    }
}

// The same across a link, IPv4 and IPv6: the server's namespace has its
// link address (10.201.0.1, fd20:1::1) and a second address on `lo`
// (10.202.0.2, fd20:2::2) that the client routes through the link. A reply
// sourced by the route back would come from the link address.
#[test]
fn wildcard_udp_replies_from_a_second_address_across_a_link() {
    let Some((srv, cli)) = common::netns::Netns::pair("pktsrv", "pktcli") else {
        return;
    };
    srv.link("eth0", "10.201.0.1/24", &cli, "eth0", "10.201.0.9/24");
    srv.sh(
        "ip addr add fd20:1::1/64 dev eth0 nodad && ip addr add 10.202.0.2/32 dev lo && \
         ip addr add fd20:2::2/128 dev lo",
    );
    cli.sh(
        "ip addr add fd20:1::9/64 dev eth0 nodad && ip route add 10.202.0.0/24 via 10.201.0.1 && \
         ip -6 route add fd20:2::/64 via fd20:1::1",
    );
    let s = Server::start_in(&srv, ".:{PORT} {\n    whoami\n}\n");
    let port = s.port;
    let asked: Vec<(&str, SocketAddr)> = vec![
        (
            "10.201.0.9:0",
            format!("10.202.0.2:{port}").parse().expect("v4"),
        ),
        (
            "[fd20:1::9]:0",
            format!("[fd20:2::2]:{port}").parse().expect("v6"),
        ),
        (
            "10.201.0.9:0",
            format!("10.201.0.1:{port}").parse().expect("v4"),
        ),
        (
            "[fd20:1::9]:0",
            format!("[fd20:1::1]:{port}").parse().expect("v6"),
        ),
    ];
    for (from, to) in asked {
        let got = cli.within(move || reply_source(from, to, "who.example"));
        assert_eq!(got, Some(to), "asked at {to} from {from}");
    }
    drop(s);
}

// A cluster DNS with `hostNetwork: true` behind the kube-dns Service, as
// kube-proxy's iptables mode lays it out: the Pod asks the ClusterIP
// (10.96.0.10, fd00:96::10), the node DNATs it to the node's own address
// (10.250.0.1, fd20:250::1, not on the Pod's link), and conntrack turns the
// reply's source back into the ClusterIP only if the reply leaves from the
// node's address. Sourced by the route back to the Pod it would leave from
// the Pod link's gateway address, and the Pod would drop it.
#[test]
fn wildcard_udp_replies_through_a_clusterip_dnat() {
    let Some((node, pod)) = common::netns::Netns::pair("dnatnode", "dnatpod") else {
        return;
    };
    node.link("cni0", "10.244.0.1/24", &pod, "eth0", "10.244.0.9/24");
    node.sh(
        "ip addr add fd44::1/64 dev cni0 nodad && ip addr add 10.250.0.1/32 dev lo && \
         ip addr add fd20:250::1/128 dev lo",
    );
    pod.sh(
        "ip addr add fd44::9/64 dev eth0 nodad && ip route add default via 10.244.0.1 && \
         ip -6 route add default via fd44::1",
    );
    let s = Server::start_in(&node, ".:{PORT} {\n    whoami\n}\n");
    let port = s.port;
    let v4 = format!("10.250.0.1:{port}");
    node.dnat("iptables", "PREROUTING", "udp", "10.96.0.10/32", 53, &v4);
    let v6 = format!("[fd20:250::1]:{port}");
    node.dnat("ip6tables", "PREROUTING", "udp", "fd00:96::10/128", 53, &v6);
    for (from, to) in [
        ("10.244.0.9:0", "10.96.0.10:53"),
        ("[fd44::9]:0", "[fd00:96::10]:53"),
    ] {
        let to: SocketAddr = to.parse().expect("addr");
        let got = pod.within(move || reply_source(from, to, "who.example"));
        assert_eq!(got, Some(to), "asked the ClusterIP {to} from {from}");
    }
    drop(s);
}
