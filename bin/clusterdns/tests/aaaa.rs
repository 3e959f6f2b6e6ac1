//! `no_aaaa` (issue 19, "AAAA without IPv6") through the real binary and
//! `dig`: *forward* answers AAAA NODATA without asking its upstream (a
//! counting loopback upstream proves it), *kubernetes* answers AAAA NODATA
//! at once with the SOA it writes for every NODATA; with the option off
//! both answer as the reference CoreDNS does.

mod common;
mod fault;

use common::{Server, config_error, lines, status};
use fault::Fault;

const DEMO_CLUSTER: &str = include_str!("../../../demo/cluster.yaml");

/// The authority section's records of a `dig` reply, whitespace folded.
fn authority(dig_output: &str) -> Vec<String> {
    common::dig_section(dig_output, "AUTHORITY")
}

fn flags(dig_output: &str) -> String {
    dig_output
        .lines()
        .find_map(|l| l.strip_prefix(";; flags: "))
        .and_then(|l| l.split(';').next())
        .unwrap_or("")
        .to_string()
}

#[test]
fn forward_no_aaaa_answers_nodata_without_the_upstream() {
    let f = Fault::start(31);
    let s = Server::start(&format!(
        ".:{{PORT}} {{\n forward . {} {{\n  no_aaaa\n  except internal.example\n }}\n}}\n",
        f.to()
    ));
    for proto in ["+notcp", "+tcp"] {
        let out = s.dig(&[proto, "www.Example.org", "AAAA"]);
        assert_eq!(status(&out), "NOERROR", "{out}");
        assert_eq!(flags(&out), "qr aa rd ra", "{out}");
        assert!(out.contains("ANSWER: 0,"), "{out}");
        assert_eq!(
            authority(&out),
            [". 30 IN SOA ns.dns. hostmaster. 1 7200 1800 86400 30"],
            "{out}"
        );
    }
    assert_eq!(f.queries(), 0, "AAAA reached the upstream");
    // A still goes upstream.
    let out = s.dig(&["+noall", "+answer", "www.example.org", "A"]);
    assert_eq!(lines(&out), ["www.example.org. 300 IN A 192.0.2.31"]);
    assert_eq!(f.queries(), 1);
    // An excepted name is not this forward's: the next plugin (none) has it.
    let out = s.dig(&["x.internal.example", "AAAA"]);
    assert_ne!(status(&out), "NOERROR", "{out}");
    assert_eq!(f.queries(), 1);
}

#[test]
fn forward_no_aaaa_soa_is_named_after_from() {
    let f = Fault::start(32);
    let s = Server::start(&format!(
        ".:{{PORT}} {{\n forward Example.ORG {} {{\n  no_aaaa\n }}\n}}\n",
        f.to()
    ));
    let out = s.dig(&["a.example.org", "AAAA"]);
    assert_eq!(
        authority(&out),
        ["example.org. 30 IN SOA ns.dns.example.org. hostmaster.example.org. 1 7200 1800 86400 30"],
        "{out}"
    );
    assert_eq!(f.queries(), 0);
}

#[test]
fn forward_without_no_aaaa_is_coredns() {
    let Some(cd) = clusterdns_test_support::reference_coredns() else {
        return;
    };
    let f = Fault::start(33);
    let corefile = format!(".:{{PORT}} {{\n forward . {}\n}}\n", f.to());
    let us = Server::start(&corefile);
    let them = fault::start_binary(&cd, &corefile);
    for args in [
        &["b.example", "AAAA"][..],
        &["+tcp", "b.example", "AAAA"],
        &["b.example", "A"],
    ] {
        let a = fault::normalize(&us.dig(args));
        let b = fault::normalize(&them.dig(args));
        assert!(a.iter().any(|l| l.contains("status: ")), "{args:?}: {a:?}");
        assert_eq!(a, b, "{args:?}");
    }
    // Both asked the upstream for every query (no cache in front).
    assert_eq!(f.queries(), 6);
}

/// A server with *kubernetes* on the demo objects, `extra` in its block.
fn kubernetes(extra: &str) -> Server {
    let corefile = format!(
        ".:{{PORT}} {{\n bind 127.0.0.1\n kubernetes cluster.local in-addr.arpa ip6.arpa {{\n  snapshot cluster.yaml\n  fallthrough in-addr.arpa ip6.arpa\n{extra} }}\n}}\n"
    );
    Server::start_with(&corefile, &[("cluster.yaml", DEMO_CLUSTER)])
}

#[test]
fn kubernetes_no_aaaa_is_nodata_with_the_zone_soa() {
    let on = kubernetes("  no_aaaa\n");
    let off = kubernetes("");
    // The SOA kubernetes writes for its negative answers, from an
    // NXDOMAIN of the same server and the same case.
    for zone in ["cluster.local", "Cluster.LOCAL"] {
        let nx = on.dig(&[&format!("nobody.demo.svc.{zone}"), "A"]);
        assert_eq!(status(&nx), "NXDOMAIN", "{nx}");
        let soa = authority(&nx);
        assert_eq!(soa.len(), 1, "{nx}");
        assert!(soa[0].starts_with(&format!(
            "{zone}. 5 IN SOA ns.dns.{zone}. hostmaster.{zone}. "
        )));
        // A dual-stack Service, a missing one, a pod name: all NODATA.
        for name in ["web.demo.svc", "nobody.demo.svc", "10-1-2-3.demo.pod"] {
            for proto in ["+notcp", "+tcp"] {
                let out = on.dig(&[proto, &format!("{name}.{zone}"), "AAAA"]);
                assert_eq!(status(&out), "NOERROR", "{out}");
                assert_eq!(flags(&out), "qr aa rd", "{out}");
                assert!(out.contains("ANSWER: 0,"), "{out}");
                assert_eq!(authority(&out), soa, "{name} {proto}");
            }
        }
    }
    // A is untouched.
    let out = on.dig(&["+noall", "+answer", "web.demo.svc.cluster.local", "A"]);
    assert_eq!(
        lines(&out),
        ["web.demo.svc.cluster.local. 5 IN A 10.96.1.20"]
    );
    // Without the option the same names answer as before: the IPv6
    // ClusterIP, NXDOMAIN.
    let out = off.dig(&["+noall", "+answer", "web.demo.svc.cluster.local", "AAAA"]);
    assert_eq!(
        lines(&out),
        ["web.demo.svc.cluster.local. 5 IN AAAA fd00:10:96::1:20"]
    );
    let out = off.dig(&["nobody.demo.svc.cluster.local", "AAAA"]);
    assert_eq!(status(&out), "NXDOMAIN", "{out}");
    // The fallthrough zones are still looked up: an ip6.arpa name nobody
    // has falls through (to nothing here), as without the option.
    let a = on.dig(&["-x", "fd00::99", "AAAA"]);
    let b = off.dig(&["-x", "fd00::99", "AAAA"]);
    assert_eq!(status(&a), status(&b), "{a}\n{b}");
}

#[test]
fn bad_no_aaaa_arguments_are_refused_with_file_and_line() {
    let e = config_error(
        ".:{PORT} {\n kubernetes cluster.local {\n  snapshot /dev/null\n  no_aaaa yes\n }\n}\n",
    );
    assert!(e.contains("plugin/kubernetes"), "{e}");
    assert!(e.contains("Corefile:4"), "{e}");
    assert!(
        e.contains("Wrong argument count or unexpected line ending after 'yes'"),
        "{e}"
    );
    let e = config_error(".:{PORT} {\n forward . 127.0.0.1 {\n  no_aaaa 30\n }\n}\n");
    assert!(e.contains("plugin/forward"), "{e}");
    assert!(e.contains("Corefile:3"), "{e}");
    assert!(
        e.contains("Wrong argument count or unexpected line ending after '30'"),
        "{e}"
    );
}

/// Both servers on a private apiserver: with the option off clusterdns
/// answers AAAA as CoreDNS does; with it on, the NODATA for an IPv4-only
/// Service is CoreDNS's own NODATA (its SOA included), and only names
/// that do not exist answer differently (NODATA, not NXDOMAIN).
#[test]
fn kubernetes_against_coredns_on_a_private_apiserver() {
    use clusterdns_test_support::{Differential, PrivateRig, Query, ServerSpec};
    use std::path::Path;
    use std::time::{Duration, Instant};

    let Some(private) = PrivateRig::start(&[("RIG_KCM", "0")]) else {
        return;
    };
    let rig = private.rig();
    let ns = rig.namespace("aaaa").expect("namespace");
    let ns = ns.name();
    rig.apply_yaml(&format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: {ns}}}\n\
         spec: {{ports: [{{name: http, port: 80, protocol: TCP}}]}}\n\
         ---\napiVersion: v1\nkind: Service\nmetadata: {{name: hdls, namespace: {ns}}}\n\
         spec: {{clusterIP: None, ports: [{{name: http, port: 80, protocol: TCP}}]}}\n\
         ---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
         metadata: {{name: hdls-1, namespace: {ns}, labels: {{kubernetes.io/service-name: hdls}}}}\n\
         addressType: IPv4\nports: [{{name: http, port: 80, protocol: TCP}}]\n\
         endpoints: [{{addresses: [10.210.0.5], conditions: {{ready: true}}}}]\n"
    ))
    .expect("objects");
    let corefile = |extra: &str| {
        format!(
            "cluster.local:@PORT@ {{\n    bind 127.0.0.1\n    kubernetes cluster.local {{\n        kubeconfig @KUBECONFIG@\n        namespaces {ns}\n{extra}    }}\n}}\n"
        )
    };
    let ours = Path::new(env!("CARGO_BIN_EXE_clusterdns"));
    let start = |extra: &str| {
        Differential::between(
            Some(rig),
            ServerSpec::coredns(rig, &corefile("")),
            ServerSpec::clusterdns_at(ours, &corefile(extra)),
        )
        .expect("start both")
    };
    let settle = |diff: &Differential| {
        let probe = Query::new(&format!("hdls.{ns}.svc.cluster.local."), "A");
        let end = Instant::now() + Duration::from_secs(20);
        loop {
            let c = diff.query(&probe);
            if c.agree() && c.to_string().matches("10.210.0.5").count() >= 2 {
                return;
            }
            assert!(Instant::now() < end, "not settled:\n{c}");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let name = |n: &str| format!("{n}.{ns}.svc.cluster.local.");
    let off = start("");
    settle(&off);
    for n in ["web", "hdls", "nobody"] {
        off.query(&Query::new(&name(n), "AAAA")).assert_agree();
        off.query(&Query::new(&name(n), "AAAA").tcp())
            .assert_agree();
    }
    drop(off);
    let on = start("        no_aaaa\n");
    settle(&on);
    for n in ["web", "hdls"] {
        on.query(&Query::new(&name(n), "AAAA")).assert_agree();
        on.query(&Query::new(&name(n), "A")).assert_agree();
    }
    let c = on.query(&Query::new(&name("nobody"), "AAAA"));
    assert!(!c.agree(), "{c}");
    let text = c.to_string();
    assert!(
        text.contains("NXDOMAIN") && text.contains("NOERROR"),
        "{text}"
    );
    // The same SOA in both (serial included).
    let soa = "cluster.local. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. ";
    assert_eq!(text.matches(soa).count(), 2, "{text}");
}
