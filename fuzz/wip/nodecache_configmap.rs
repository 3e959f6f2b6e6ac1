//! Feeds the kube-dns ConfigMap's two keys (`stubDomains`,
//! `upstreamNameservers`, JSON as the mounted files hold them) to
//! node-cache's parser and renders the Corefile template with what it
//! accepts. The input: one byte choosing the template (even: upstream's
//! addon template, whose `.:53` forward goes over TCP; odd: one forwarding
//! over UDP), then `stubDomains`, a NUL, `upstreamNameservers` (an empty
//! key is an absent file). Checks that:
//! - nothing panics;
//! - an accepted ConfigMap has DNS-1123 stub domains and at most three
//!   upstreams;
//! - a ConfigMap that renders gives a Corefile that parses, one server
//!   block per stub domain after the template's, every key parsing, and no
//!   placeholder node-cache fills left.
#![no_main]

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;

use clusterdns_corefile::{parse_key, parse_str};
use clusterdns_nodecache::template::{self, Params};
use clusterdns_nodecache::{KubeDnsConfig, TemplateError};
use libfuzzer_sys::fuzz_target;

/// Upstream's addon template (nodelocaldns.yaml after the deployer's sed of
/// the domain): three server blocks.
const TCP_TEMPLATE: &str = "cluster.local:53 {
    errors
    cache {
            success 9984 30
            denial 9984 5
    }
    reload
    loop
    bind __PILLAR__LOCAL__DNS__ __PILLAR__DNS__SERVER__
    forward . __PILLAR__CLUSTER__DNS__ {
            force_tcp
    }
    prometheus __PROMETHEUS__ENDPOINT__
    health __PILLAR__LOCAL__DNS__:8080
    }
in-addr.arpa:53 {
    errors
    cache 30
    bind __PILLAR__LOCAL__DNS__ __PILLAR__DNS__SERVER__
    forward . __PILLAR__CLUSTER__DNS__ {
            force_tcp
    }
    }
.:53 {
    errors
    cache 30
    bind __PILLAR__LOCAL__DNS__ __PILLAR__DNS__SERVER__
    forward . __PILLAR__UPSTREAM__SERVERS__ {
            force_tcp
    }
    }
";

/// A template whose upstream block is already UDP (upstream's warning
/// path): two server blocks.
const UDP_TEMPLATE: &str = "cluster.local:53 {
    bind __PILLAR__LOCAL__DNS__
    forward . __PILLAR__CLUSTER__DNS__
    }
.:53 {
    bind __PILLAR__LOCAL__DNS__
    forward . __PILLAR__UPSTREAM__SERVERS__
    }
";

fuzz_target!(|data: &[u8]| {
    let Some((&choice, rest)) = data.split_first() else {
        return;
    };
    let (base, blocks) = if choice & 1 == 0 {
        (TCP_TEMPLATE, 3)
    } else {
        (UDP_TEMPLATE, 2)
    };
    let text = String::from_utf8_lossy(rest);
    let (stub, upstream) = text.split_once('\0').unwrap_or((&text, ""));
    let key = |s: &str| (!s.is_empty()).then_some(s.to_string());
    let (stub, upstream) = (key(stub), key(upstream));
    let cm = match KubeDnsConfig::from_values(stub.as_deref(), upstream.as_deref()) {
        Ok(cm) => cm,
        Err(e) => {
            assert!(matches!(e, TemplateError::Invalid(_)), "{e:?}");
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    assert!(cm.upstream_nameservers.len() <= 3);
    for domain in cm.stub_domains.keys() {
        assert!(
            !domain.is_empty()
                && domain.len() <= 253
                && domain
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.'),
            "{domain:?}"
        );
    }
    let cluster_dns: Result<IpAddr, TemplateError> = Ok(IpAddr::from([10, 96, 0, 10]));
    let params = Params {
        local_ip_str: "169.254.20.10,10.96.0.10",
        dns_port: 53,
        cluster_dns: &cluster_dns,
        prometheus: ":9253",
    };
    let Ok(r) = template::render(base, &params, &cm) else {
        return;
    };
    for placeholder in [
        template::UPSTREAM_SERVERS,
        template::CLUSTER_DNS,
        template::LOCAL_DNS,
        template::DNS_SERVER,
        template::PROMETHEUS_ENDPOINT,
    ] {
        assert!(!r.text.contains(placeholder), "{placeholder} left in\n{}", r.text);
    }
    let parsed = parse_str(
        &r.text,
        Path::new("/nonexistent-clusterdns-fuzz/Corefile"),
        &HashMap::new(),
    )
    .unwrap_or_else(|e| panic!("rendered Corefile does not parse: {e}\n{}", r.text));
    assert_eq!(
        parsed.blocks.len(),
        blocks + cm.stub_domains.len(),
        "{}",
        r.text
    );
    for block in &parsed.blocks {
        for key in &block.keys {
            if let Err(e) = parse_key(key) {
                panic!("key {key:?} does not parse: {e}\n{}", r.text);
            }
        }
    }
});
