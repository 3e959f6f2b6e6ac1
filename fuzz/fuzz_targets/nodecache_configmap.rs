//! Feeds the kube-dns ConfigMap's two keys (`stubDomains`,
//! `upstreamNameservers`, JSON as the mounted files hold them) to
//! node-cache's parser and renders the Corefile template with what it
//! accepts. The input: one byte choosing the template (modulo 3: the one
//! deploy/ ships, upstream's TCP upstream block, one forwarding everything
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
use std::sync::OnceLock;

use clusterdns_corefile::{parse_key, parse_str};
use clusterdns_nodecache::template::{self, Params};
use clusterdns_nodecache::{KubeDnsConfig, TemplateError};
use libfuzzer_sys::fuzz_target;

/// The template we ship (deploy/node-local-dns/configmap.yaml's
/// `Corefile`): four server blocks, its `.:53` forward already UDP.
const SHIPPED: &str = include_str!("../../deploy/node-local-dns/configmap.yaml");

/// Upstream's TCP upstream block alone: custom upstreams replace it with
/// the UDP form.
const TCP_TEMPLATE: &str = ".:53 {
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

/// The ConfigMap's `Corefile: |` block scalar, its indentation removed.
fn shipped() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        let (_, after) = SHIPPED
            .split_once("  Corefile: |\n")
            .expect("the ConfigMap has a Corefile");
        let mut text = String::new();
        for line in after.lines() {
            match line.strip_prefix("    ") {
                Some(l) => text.push_str(l),
                None if line.trim().is_empty() => {}
                None => break,
            }
            text.push('\n');
        }
        assert!(text.contains(template::UPSTREAM_SERVERS), "{text}");
        text
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&choice, rest)) = data.split_first() else {
        return;
    };
    let (base, blocks) = match choice % 3 {
        0 => (shipped(), 4),
        1 => (TCP_TEMPLATE, 1),
        _ => (UDP_TEMPLATE, 2),
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
                && domain.bytes().all(|b| b.is_ascii_lowercase()
                    || b.is_ascii_digit()
                    || b == b'-'
                    || b == b'.'),
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
        assert!(
            !r.text.contains(placeholder),
            "{placeholder} left in\n{}",
            r.text
        );
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
