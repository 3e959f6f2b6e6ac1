//! *k8s_external* against the reference CoreDNS on the same Corefile, on
//! the shared rig: Services with `externalIPs` and LoadBalancer ingress,
//! headless Services and their endpoints, the apex's SOA and NS and the
//! `dns` subdomain, reverse names, `apex`/`ttl`/`fallthrough`, and the
//! setup errors. Every reply is compared record by record, TTLs and SOA
//! serials included (the LoadBalancer status is set before the servers
//! start, so neither sees an update that moves the external serial).

mod common;

use std::time::{Duration, Instant};

use clusterdns_test_support::{Query, Rig};

fn objects(ns: &str) -> String {
    let service = |name: &str, spec: &str| common::service_yaml(ns, name, spec);
    [
        service(
            "ext",
            "  externalIPs: [192.0.2.10, 192.0.2.11, 2001:db8::10]
  ports: [{name: http, port: 80, protocol: TCP}, {name: dns, port: 53, protocol: UDP}]\n",
        ),
        service(
            "lb",
            "  type: LoadBalancer\n  ports: [{name: https, port: 443, protocol: TCP}]\n",
        ),
        service(
            "lbh",
            "  type: LoadBalancer
  ports: [{name: https, port: 443, protocol: TCP}, {name: http, port: 80, protocol: TCP}]\n",
        ),
        service(
            "plain",
            "  ports: [{name: http, port: 80, protocol: TCP}]\n",
        ),
        service(
            "noports",
            "  clusterIP: None\n  externalIPs: [192.0.2.30]\n",
        ),
        common::headless_service_yaml(ns, "hl", "http", 8080),
        common::endpoint_slice_yaml(
            ns,
            "hl",
            "hl-1",
            &[
                ("10.211.0.1", Some("web-0"), true),
                ("10.211.0.2", None, true),
                ("10.211.0.3", None, false),
            ],
            "[{name: http, port: 8080, protocol: TCP}]",
        ),
        service(
            "hlx",
            "  clusterIP: None
  externalIPs: [192.0.2.20]
  ports: [{name: http, port: 80, protocol: TCP}]\n",
        ),
    ]
    .join("---\n")
}

/// The upstream behind `fallthrough` and for LoadBalancer hostnames:
/// `lb.example.test` has an A record, everything else is NXDOMAIN with
/// its own SOA.
const UPSTREAM: &str = r#".:@PORT@ {
    bind 127.0.0.1
    template IN A lb.example.test {
        answer "{{ .Name }} 60 IN A 10.1.2.4"
    }
    template ANY ANY . {
        rcode NXDOMAIN
        authority ". 60 IN SOA upstream.test. b.root. 1 7200 1800 86400 30"
    }
}
"#;

const COREFILE: &str = "
.:@PORT@ {
    bind 127.0.0.1
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig @KUBECONFIG@
    }
    k8s_external example.org 2.0.192.in-addr.arpa {
        headless
    }
    forward . 127.0.0.1:@UPSTREAM@
}
example.net:@PORT@ {
    bind 127.0.0.1
    kubernetes cluster.local {
        kubeconfig @KUBECONFIG@
        ttl 17
    }
    k8s_external {
        apex ApexLabel
        ttl 60
        fallthrough example.net
    }
    forward . 127.0.0.1:@UPSTREAM@
}
";

#[test]
fn external_names_are_answered_as_coredns_answers_them() {
    let Some(rig) = Rig::get() else { return };
    let coredns = rig.coredns();
    let up = common::start_upstream(&coredns, UPSTREAM);
    let port = up.addr.port().to_string();
    let space = rig.namespace("ext17").expect("namespace");
    let ns = space.name().to_string();
    rig.apply_yaml(&objects(&ns)).expect("objects");
    let status =
        r#"{"status":{"loadBalancer":{"ingress":[{"ip":"198.51.100.7"},{"ip":"2001:db8::7"}]}}}"#;
    rig.kubectl(&[
        "-n",
        &ns,
        "patch",
        "service",
        "lb",
        "--subresource=status",
        "--type=merge",
        "-p",
        status,
    ])
    .expect("load balancer status");
    let status = r#"{"status":{"loadBalancer":{"ingress":[{"hostname":"lb.example.test"}]}}}"#;
    rig.kubectl(&[
        "-n",
        &ns,
        "patch",
        "service",
        "lbh",
        "--subresource=status",
        "--type=merge",
        "-p",
        status,
    ])
    .expect("load balancer status");

    let d = common::rig_differential(&rig, COREFILE, &[("UPSTREAM", &port)]);

    let probe = Query::new(&format!("lb.{ns}.example.org."), "A");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let c = d.query(&probe);
        let ok = |o: &clusterdns_test_support::Outcome| {
            o.response().is_some_and(|r| !r.answer.is_empty())
        };
        if ok(&c.reference) && ok(&c.candidate) {
            break;
        }
        assert!(Instant::now() < deadline, "not synced:\n{c}");
        std::thread::sleep(Duration::from_millis(200));
    }

    let mut cases: Vec<(String, &str)> = Vec::new();
    for zone in ["example.org.", "example.net."] {
        for (name, qtype) in [
            ("", "SOA"),
            ("", "NS"),
            ("", "A"),
            ("", "TXT"),
            ("ext.@NS@.", "A"),
            ("EXT.@NS@.", "AAAA"),
            ("ext.@NS@.", "SRV"),
            ("ext.@NS@.", "TXT"),
            ("ext.@NS@.", "PTR"),
            ("_http._tcp.ext.@NS@.", "SRV"),
            ("_dns._udp.ext.@NS@.", "SRV"),
            ("_http._udp.ext.@NS@.", "SRV"),
            ("_http._tcp.ext.@NS@.", "A"),
            ("x.y.z.ext.@NS@.", "A"),
            ("lb.@NS@.", "A"),
            ("lb.@NS@.", "AAAA"),
            ("_https._tcp.lb.@NS@.", "SRV"),
            ("lbh.@NS@.", "A"),
            ("lbh.@NS@.", "AAAA"),
            ("lbh.@NS@.", "SRV"),
            ("_https._tcp.lbh.@NS@.", "SRV"),
            ("_https._tcp.lbh.@NS@.", "A"),
            ("plain.@NS@.", "A"),
            ("noports.@NS@.", "A"),
            ("missing.@NS@.", "A"),
            ("@NS@.", "A"),
            ("no-such-namespace.", "A"),
            ("hl.@NS@.", "A"),
            ("hl.@NS@.", "SRV"),
            ("web-0.hl.@NS@.", "A"),
            ("10-211-0-2.hl.@NS@.", "A"),
            ("web-9.hl.@NS@.", "A"),
            ("_http._tcp.hl.@NS@.", "SRV"),
            ("hlx.@NS@.", "A"),
            ("web-0.hlx.@NS@.", "A"),
            ("dns.", "A"),
            ("ns1.dns.", "A"),
            ("ns1.dns.", "AAAA"),
            ("ns2.dns.", "A"),
            ("a.ns1.dns.", "A"),
            ("apexlabel.", "A"),
            ("ns1.apexlabel.", "A"),
            ("ns1.ApexLabel.", "TXT"),
        ] {
            let name = format!("{name}{zone}").replace("@NS@", &ns);
            cases.push((name, qtype));
        }
    }
    for (name, qtype) in [
        ("10.2.0.192.in-addr.arpa.", "PTR"),
        ("20.2.0.192.in-addr.arpa.", "PTR"),
        ("99.2.0.192.in-addr.arpa.", "PTR"),
        ("2.0.192.in-addr.arpa.", "SOA"),
        ("10.2.0.192.in-addr.arpa.", "A"),
    ] {
        cases.push((name.to_string(), qtype));
    }
    let mut failed = Vec::new();
    for (name, qtype) in &cases {
        for c in d.query_udp_and_tcp(&Query::new(name, qtype)) {
            if !c.agree() {
                failed.push(c.to_string());
            }
        }
    }
    // Not only agreement on nothing: the external addresses are there.
    let c = d.query(&Query::new(&format!("ext.{ns}.example.org."), "A"));
    let answers = c.candidate.response().map_or(0, |r| r.answer.len());
    assert_eq!(answers, 2, "{c}");
    // A LoadBalancer hostname: its CNAME, then the upstream's address.
    let c = d.query(&Query::new(&format!("lbh.{ns}.example.org."), "A"));
    let got: Vec<String> = c
        .candidate
        .response()
        .map(|r| r.answer.iter().map(|a| a.rtype.clone()).collect())
        .unwrap_or_default();
    assert_eq!(got, ["CNAME", "A", "CNAME", "A"], "{c}");
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[test]
fn setup_errors_read_as_coredns() {
    common::setup_errors_read_as_coredns(&[
        ".:@P@ {\n    k8s_external example.org {\n        ttl\n    }\n    whoami\n}\n",
        ".:@P@ {\n    k8s_external example.org {\n        ttl x\n    }\n    whoami\n}\n",
        ".:@P@ {\n    k8s_external example.org {\n        ttl 3601\n    }\n    whoami\n}\n",
        ".:@P@ {\n    k8s_external example.org {\n        ttl -1\n    }\n    whoami\n}\n",
        ".:@P@ {\n    k8s_external example.org {\n        apex\n    }\n    whoami\n}\n",
        ".:@P@ {\n    k8s_external example.org {\n        foo\n    }\n    whoami\n}\n",
        ".:@P@ {\n    k8s_external example.org\n    whoami\n}\n",
    ]);
}
