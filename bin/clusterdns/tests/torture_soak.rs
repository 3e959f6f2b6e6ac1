//! Torture scenario (issue 18), soak: a mixed workload (cluster names
//! from the rig's API server, forwarded names through a cache, names that
//! do not exist) at a steady rate while a Service is created or deleted
//! every second, in back-to-back dnsperf windows. Targets: nothing lost,
//! RSS flat (every window within 10 % of the first window's), latency not
//! growing (the last third's mean within 1.5x the first third's, plus
//! 1 ms for a shared machine's jitter). Short form: 4 windows of 10 s at
//! 2,000 q/s; long form (`CLUSTERDNS_TORTURE=long`): 30 windows of 60 s at
//! `CLUSTERDNS_SOAK_QPS` (default 20,000, about 80 % of what a release
//! build answers here on this workload).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use clusterdns_test_support::Rig;

use common::Server;
use common::torture::{self, dnsperf, finish, long, report};

/// dnsperf's `Average Latency (s):` in ms.
fn mean_latency_ms(text: &str) -> Option<f64> {
    let v = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Average Latency (s):"))?
        .split_whitespace()
        .next()?
        .parse::<f64>()
        .ok()?;
    Some(v * 1000.0)
}

fn kubectl_service(rig: &Rig, ns: &str, name: &str, create: bool) {
    let yaml = format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {ns}}}\n\
         spec: {{ports: [{{name: http, port: 80}}]}}\n"
    );
    let _ = if create {
        rig.apply_yaml(&yaml)
    } else {
        rig.delete_yaml(&yaml)
    };
}

#[test]
fn soak_mixed_load_with_changes_every_second() {
    let Some(rig) = Rig::get() else { return };
    let ns = rig.namespace("soak").expect("namespace");
    kubectl_service(&rig, ns.name(), "stable", true);

    // The upstream for forwarded names: a second clusterdns with hosts.
    let upstream = Server::start(
        ".:{PORT} {\n    bind 127.0.0.1\n    hosts {\n        10.1.0.1 www.soak.test\n        \
         10.1.0.2 api.soak.test\n    }\n}\n",
    );
    let corefile = format!(
        ".:{{PORT}} {{\n    bind 127.0.0.1\n    errors\n    cache 30\n    \
         kubernetes cluster.local in-addr.arpa ip6.arpa {{\n        kubeconfig {}\n        \
         fallthrough in-addr.arpa ip6.arpa\n    }}\n    forward . 127.0.0.1:{}\n}}\n",
        rig.kubeconfig().display(),
        upstream.port
    );
    let mut s = Server::start(&corefile);
    let pid = s.child.id();
    let stable = format!("stable.{}.svc.cluster.local", ns.name());
    clusterdns_test_support::eventually(60, &format!("{stable} answered"), || {
        let out = s.dig(&[&stable, "A"]);
        if common::status(&out) == "NOERROR" && !common::lines(&out).is_empty() {
            Ok(())
        } else {
            Err(out)
        }
    });

    let qfile = s.dir.path().join("queries.txt");
    let mut q = String::new();
    for _ in 0..4 {
        q.push_str(&format!("{stable} A\n"));
        q.push_str("kubernetes.default.svc.cluster.local A\n");
        q.push_str("www.soak.test A\napi.soak.test A\n");
    }
    // The Services that come and go, and names that never exist.
    for i in 0..4 {
        q.push_str(&format!("churn-{i}.{}.svc.cluster.local A\n", ns.name()));
        q.push_str(&format!("nope-{i}.{}.svc.cluster.local A\n", ns.name()));
    }
    q.push_str(&format!("{stable} AAAA\n1.0.96.10.in-addr.arpa PTR\n"));
    std::fs::write(&qfile, q).expect("query file");

    // One change a second: Service churn-(k % 4) created, then deleted.
    let stop = Arc::new(AtomicBool::new(false));
    let changes = Arc::new(AtomicU64::new(0));
    let changer = {
        let (rig, ns, stop, changes) = (
            rig.clone(),
            ns.name().to_string(),
            stop.clone(),
            changes.clone(),
        );
        std::thread::spawn(move || {
            let mut k = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let name = format!("churn-{}", (k / 2) % 4);
                kubectl_service(&rig, &ns, &name, k.is_multiple_of(2));
                changes.fetch_add(1, Ordering::Relaxed);
                k += 1;
                std::thread::sleep(Duration::from_secs(1));
            }
        })
    };

    let (windows, secs) = if long() { (30, 60) } else { (4, 10) };
    let qps: u32 = if long() {
        std::env::var("CLUSTERDNS_SOAK_QPS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(20_000)
    } else {
        2_000
    };
    let mut rss = Vec::new();
    let mut lat = Vec::new();
    let (mut sent, mut lost) = (0u64, 0u64);
    for _ in 0..windows {
        let p = finish(dnsperf(&[], "127.0.0.1", s.port, &qfile, secs, qps, false));
        sent += p.sent;
        lost += p.lost;
        lat.push(mean_latency_ms(&p.text).unwrap_or(f64::NAN));
        rss.push(torture::vmrss_kib(pid).unwrap_or(0));
    }
    stop.store(true, Ordering::Relaxed);
    let _ = changer.join();

    let third = (windows / 3).max(1);
    let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len() as f64;
    let first_lat = mean(&lat[..third]);
    let last_lat = mean(&lat[lat.len() - third..]);
    let base = rss[0] as f64;
    let spread = rss
        .iter()
        .map(|r| (*r as f64 - base).abs() / base)
        .fold(0.0, f64::max);
    report(
        "soak",
        &[
            ("windows", windows.to_string()),
            ("window_s", secs.to_string()),
            ("qps", qps.to_string()),
            ("sent", sent.to_string()),
            ("lost", lost.to_string()),
            ("changes", changes.load(Ordering::Relaxed).to_string()),
            ("rss_first_kib", rss[0].to_string()),
            (
                "rss_max_kib",
                rss.iter().max().copied().unwrap_or(0).to_string(),
            ),
            ("rss_spread_pct", format!("{:.1}", spread * 100.0)),
            ("rss_spread_pct.max", "10".to_string()),
            ("lat_first_ms", format!("{first_lat:.3}")),
            ("lat_last_ms", format!("{last_lat:.3}")),
        ],
    );
    assert!(matches!(s.child.try_wait(), Ok(None)), "the server died");
    assert_eq!(lost, 0, "queries lost over the soak");
    assert!(spread <= 0.10, "RSS not flat: {rss:?} KiB");
    assert!(
        last_lat <= first_lat * 1.5 + 1.0,
        "latency grew: {lat:?} ms per window"
    );
}
