//! The *kubernetes* plugin through the real binary, fed by `snapshot FILE`:
//! the demo configuration, records over UDP and TCP, readiness, metrics.

mod common;

use common::{Server, free_port, lines, status};

const DEMO_COREFILE: &str = include_str!("../../../demo/Corefile");
const DEMO_CLUSTER: &str = include_str!("../../../demo/cluster.yaml");
const OBJECTS: &str = include_str!("../../../crates/plugins/src/kubernetes/testdata/objects.yaml");

fn http_get(port: u16, path: &str) -> (u16, String) {
    let r =
        clusterdns_test_support::http_get(std::net::SocketAddr::from(([127, 0, 0, 1], port)), path);
    (r.status, r.text())
}

/// The demo Corefile on free ports (so it runs next to other tests).
fn demo() -> (Server, u16, u16) {
    let (ready, metrics, health) = (free_port(), free_port(), free_port());
    let corefile = DEMO_COREFILE
        .replace(".:1053", ".:{PORT}")
        .replace("127.0.0.1:18181", &format!("127.0.0.1:{ready}"))
        .replace("127.0.0.1:19153", &format!("127.0.0.1:{metrics}"))
        .replace("127.0.0.1:18080", &format!("127.0.0.1:{health}"));
    assert_ne!(corefile, DEMO_COREFILE);
    let s = Server::start_with(&corefile, &[("cluster.yaml", DEMO_CLUSTER)]);
    (s, ready, metrics)
}

#[test]
fn demo_answers_the_api_service() {
    let (s, ready, metrics) = demo();
    let out = s.dig(&["+noall", "+answer", "kubernetes.default.svc.cluster.local"]);
    assert_eq!(
        lines(&out),
        ["kubernetes.default.svc.cluster.local. 5 IN A 10.96.0.1"]
    );
    // The rest of the demo still works: hosts and whoami.
    let out = s.dig(&["+noall", "+answer", "web.demo.example"]);
    assert_eq!(lines(&out), ["web.demo.example. 3600 IN A 10.0.0.10"]);
    let out = s.dig(&["whoever.example"]);
    assert_eq!(status(&out), "NOERROR");
    assert!(out.contains("whoever.example."), "{out}");
    // Headless, SRV, PTR, ExternalName, pods, NXDOMAIN with SOA.
    let out = s.dig(&["+noall", "+answer", "db.demo.svc.cluster.local"]);
    let mut got = lines(&out);
    got.sort();
    assert_eq!(
        got,
        [
            "db.demo.svc.cluster.local. 5 IN A 10.244.1.10",
            "db.demo.svc.cluster.local. 5 IN A 10.244.2.11",
        ]
    );
    let out = s.dig(&[
        "+noall",
        "+answer",
        "+additional",
        "_http._tcp.web.demo.svc.cluster.local",
        "SRV",
    ]);
    assert_eq!(
        lines(&out),
        [
            "_http._tcp.web.demo.svc.cluster.local. 5 IN SRV 0 50 80 web.demo.svc.cluster.local.",
            "web.demo.svc.cluster.local. 5 IN A 10.96.1.20",
            "web.demo.svc.cluster.local. 5 IN AAAA fd00:10:96::1:20",
        ]
    );
    let out = s.dig(&["+noall", "+answer", "-x", "10.96.0.10"]);
    assert_eq!(
        lines(&out),
        ["10.0.96.10.in-addr.arpa. 5 IN PTR kube-dns.kube-system.svc.cluster.local."]
    );
    let out = s.dig(&["+noall", "+answer", "docs.demo.svc.cluster.local", "CNAME"]);
    assert_eq!(
        lines(&out),
        ["docs.demo.svc.cluster.local. 5 IN CNAME docs.example.org."]
    );
    let out = s.dig(&["+noall", "+answer", "10-1-2-3.demo.pod.cluster.local"]);
    assert_eq!(
        lines(&out),
        ["10-1-2-3.demo.pod.cluster.local. 5 IN A 10.1.2.3"]
    );
    let out = s.dig(&["db-2.db.demo.svc.cluster.local"]);
    assert_eq!(status(&out), "NXDOMAIN");
    assert!(out.contains("flags: qr aa rd"), "{out}");
    assert!(
        out.contains(
            "cluster.local.\t\t5\tIN\tSOA\tns.dns.cluster.local. hostmaster.cluster.local."
        ),
        "{out}"
    );
    // PTR of an address nobody has falls through to whoami.
    let out = s.dig(&["-x", "192.0.2.1"]);
    assert_eq!(status(&out), "NOERROR");
    // Ready at once with a snapshot.
    let (code, body) = http_get(ready, "/ready");
    assert_eq!(code, 200, "{body}");
    let (code, _) = http_get(metrics, "/metrics");
    assert_eq!(code, 200);
}

#[test]
fn fixture_over_udp_and_tcp_keeps_case() {
    let corefile = ".:{PORT} {
    bind 127.0.0.1
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        snapshot objects.yaml
        ttl 30
    }
}";
    let s = Server::start_with(corefile, &[("objects.yaml", OBJECTS)]);
    for proto in ["+notcp", "+tcp"] {
        let out = s.dig(&[
            proto,
            "+noall",
            "+answer",
            "Web-0.HDLS.kplug.svc.Cluster.Local",
        ]);
        assert_eq!(
            lines(&out),
            ["Web-0.HDLS.kplug.svc.Cluster.Local. 30 IN A 10.244.7.10"],
            "{proto}"
        );
        let out = s.dig(&[
            proto,
            "+noall",
            "+answer",
            "+additional",
            "_http._tcp.dual.kplug.svc.cluster.local",
            "SRV",
        ]);
        assert_eq!(
            lines(&out),
            [
                "_http._tcp.dual.kplug.svc.cluster.local. 30 IN SRV 0 50 80 dual.kplug.svc.cluster.local.",
                "dual.kplug.svc.cluster.local. 30 IN A 10.96.77.2",
                "dual.kplug.svc.cluster.local. 30 IN AAAA fd00:10:96::7702",
            ],
            "{proto}"
        );
    }
    // NODATA (AAAA of a v4 service) and NXDOMAIN carry the SOA, TTL min(ttl, 300).
    let out = s.dig(&["svc1.kplug.svc.cluster.local", "AAAA"]);
    assert_eq!(status(&out), "NOERROR");
    assert!(out.contains("ANSWER: 0, AUTHORITY: 1"), "{out}");
    let out = s.dig(&["+noall", "+authority", "nope.kplug.svc.cluster.local"]);
    let soa = lines(&out);
    assert_eq!(soa.len(), 1, "{out}");
    assert!(
        soa[0].starts_with(
            "cluster.local. 30 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. "
        )
    );
    assert!(soa[0].ends_with(" 7200 1800 86400 30"), "{soa:?}");
    let out = s.dig(&["+short", "dns-version.cluster.local", "TXT"]);
    assert_eq!(out.trim(), "\"1.1.0\"");
}

#[test]
fn unreachable_api_server_is_servfail_and_not_ready() {
    let ready = free_port();
    let corefile = format!(
        ".:{{PORT}} {{
    bind 127.0.0.1
    ready 127.0.0.1:{ready}
    kubernetes cluster.local {{
        endpoint http://127.0.0.1:1
        startup_timeout 300ms
    }}
}}"
    );
    let s = Server::start(&corefile);
    // The listeners may answer before the start-up hooks are done: let the
    // startup_timeout pass.
    std::thread::sleep(std::time::Duration::from_millis(800));
    // Names that would be NXDOMAIN are SERVFAIL until synced; NODATA stays.
    let out = s.dig(&["svc1.kplug.svc.cluster.local"]);
    assert_eq!(status(&out), "SERVFAIL", "{out}");
    assert!(out.contains("AUTHORITY: 1"), "{out}");
    let out = s.dig(&["svc.cluster.local"]);
    assert_eq!(status(&out), "NOERROR", "{out}");
    let (code, body) = http_get(ready, "/ready");
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("kubernetes"), "{body}");
    let (stdout, _) = s.stop();
    assert!(
        stdout
            .contains("[WARNING] plugin/kubernetes: starting server with unsynced Kubernetes API"),
        "{stdout}"
    );
}

/// An ExternalName whose target leaves the zone is deferred by the
/// synchronous pass and resolved by the plugins after *kubernetes* (here
/// *forward* to a second clusterdns holding the target in *hosts*): the
/// reply is the CNAME, then the upstream's answer, over UDP and TCP.
#[test]
fn an_external_name_leaving_the_zone_is_resolved_through_forward() {
    let upstream = Server::start(
        ".:{PORT} {
    bind 127.0.0.1
    hosts {
        10.1.2.3 ext.example.com
    }
}",
    );
    let corefile = format!(
        ".:{{PORT}} {{
    bind 127.0.0.1
    kubernetes cluster.local {{
        snapshot objects.yaml
        ttl 30
    }}
    forward . 127.0.0.1:{}
}}",
        upstream.port
    );
    let s = Server::start_with(&corefile, &[("objects.yaml", OBJECTS)]);
    for proto in ["+notcp", "+tcp"] {
        let out = s.dig(&[proto, "+noall", "+answer", "Ext.kplug.svc.cluster.local"]);
        assert_eq!(
            lines(&out),
            [
                "Ext.kplug.svc.cluster.local. 30 IN CNAME ext.example.com.",
                "ext.example.com. 3600 IN A 10.1.2.3",
            ],
            "{proto}"
        );
    }
}
