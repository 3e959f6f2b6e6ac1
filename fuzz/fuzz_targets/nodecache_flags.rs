//! Feeds node-cache's command line (the arguments after the program name,
//! NUL-separated) to its flag parser, then renders the Corefile template
//! with what it accepts, as node-cache does next. Checks that:
//! - nothing panics, and parsing is deterministic;
//! - a refusal has an exit code of 0 (help), 1 or 2 and a message;
//! - accepted flags have at least one local IP, all of one family, one per
//!   comma of `-localip`, a `-conf` path and a positive sync interval;
//! - the template renders with them, every `-localip` in its `bind` line.
#![no_main]

use std::net::IpAddr;

use clusterdns_nodecache::flags::{self, FlagsError};
use clusterdns_nodecache::template::{self, Params};
use clusterdns_nodecache::{KubeDnsConfig, TemplateError};
use libfuzzer_sys::fuzz_target;

const TEMPLATE: &str = "cluster.local:53 {
    bind __PILLAR__LOCAL__DNS__ __PILLAR__DNS__SERVER__
    forward . __PILLAR__CLUSTER__DNS__ {
            force_tcp
    }
    prometheus __PROMETHEUS__ENDPOINT__
    health __PILLAR__LOCAL__DNS__:8080
    }
.:53 {
    bind __PILLAR__LOCAL__DNS__ __PILLAR__DNS__SERVER__
    forward . __PILLAR__UPSTREAM__SERVERS__
    }
";

fuzz_target!(|data: &[u8]| {
    let args: Vec<String> = if data.is_empty() {
        Vec::new()
    } else {
        String::from_utf8_lossy(data)
            .split('\0')
            .map(str::to_string)
            .collect()
    };
    let first = flags::parse(&args);
    assert_eq!(first, flags::parse(&args), "deterministic");
    let f = match first {
        Ok(f) => f,
        Err(e) => {
            assert!(matches!(e.exit_code(), 0..=2));
            assert!(!e.to_string().is_empty());
            if let FlagsError::Syntax(_) = e {
                assert!(flags::usage("node-cache").contains("-localip"));
            }
            return;
        }
    };
    assert!(!f.local_ips.is_empty());
    assert_eq!(f.local_ips.len(), f.local_ip_str.split(',').count());
    assert!(
        f.local_ips
            .iter()
            .all(|ip| ip.is_ipv6() == f.local_ips[0].is_ipv6())
    );
    assert!(!f.corefile.is_empty());
    assert!(!f.sync_interval.is_zero());
    let cluster_dns: Result<IpAddr, TemplateError> = Ok(IpAddr::from([10, 96, 0, 10]));
    let r = template::render(
        TEMPLATE,
        &Params {
            local_ip_str: &f.local_ip_str,
            dns_port: f.dns_port,
            cluster_dns: &cluster_dns,
            prometheus: &f.prometheus_listen_address,
        },
        &KubeDnsConfig::default(),
    )
    .expect("the default ConfigMap always renders");
    let bind = format!("bind {} \n", f.local_ip_str.replace(',', " "));
    assert!(r.text.contains(&bind), "{bind:?} not in\n{}", r.text);
});
