//! The *prometheus* plugin through the real binary, its names and label
//! sets compared with the reference CoreDNS's /metrics.

mod common;
mod ops;

use std::collections::BTreeSet;

use common::{Server, free_port};

const QUERIES: &[&[&str]] = &[
    &["a.example.org", "A"],
    &["+tcp", "a.example.org", "AAAA"],
    &["+dnssec", "a.example.org", "HINFO"],
    &["x.bad.test", "MX"],
];

fn corefile(port: &str, mp: u16) -> String {
    format!(
        "example.org:{port} {{\n    prometheus 127.0.0.1:{mp}\n    whoami\n}}\nbad.test:{port} {{\n    prometheus 127.0.0.1:{mp}\n    log\n}}\n"
    )
}

#[test]
fn core_series_after_queries() {
    let mp = free_port();
    let s = Server::start(&corefile("{PORT}", mp));
    for q in QUERIES {
        s.dig(q);
    }
    assert_eq!(ops::rcode(&s.kdig(&["a.example.org", "A"])), "NOERROR");
    let (code, text) = ops::get_ok(mp, "/metrics");
    assert_eq!(code, 200);
    let srv = format!("dns://:{}", s.port);
    let z = [
        ("server", srv.as_str()),
        ("zone", "example.org."),
        ("view", ""),
    ];
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut v: Vec<(&str, &str)> = z.to_vec();
        v.extend_from_slice(extra);
        v
    };
    let v = |name: &str, l: Vec<(&str, &str)>| ops::value(&text, name, &l);
    assert_eq!(
        v(
            "coredns_dns_requests_total",
            with(&[("proto", "udp"), ("family", "1"), ("type", "A")])
        ),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        v(
            "coredns_dns_requests_total",
            with(&[("proto", "tcp"), ("family", "1"), ("type", "AAAA")])
        ),
        Some(1.0)
    );
    assert_eq!(
        v(
            "coredns_dns_requests_total",
            with(&[("proto", "udp"), ("family", "1"), ("type", "other")])
        ),
        Some(1.0)
    );
    assert_eq!(v("coredns_dns_do_requests_total", with(&[])), Some(1.0));
    assert_eq!(
        v(
            "coredns_dns_responses_total",
            with(&[("rcode", "NOERROR"), ("plugin", "whoami")])
        ),
        Some(4.0)
    );
    assert_eq!(
        v("coredns_dns_request_duration_seconds_count", with(&[])),
        Some(4.0)
    );
    assert_eq!(
        v(
            "coredns_dns_request_size_bytes_count",
            with(&[("proto", "udp")])
        ),
        Some(3.0)
    );
    assert_eq!(
        v(
            "coredns_dns_response_size_bytes_count",
            with(&[("proto", "tcp")])
        ),
        Some(1.0)
    );
    let bad = [
        ("server", srv.as_str()),
        ("zone", "bad.test."),
        ("view", ""),
        ("rcode", "SERVFAIL"),
        ("plugin", ""),
    ];
    assert_eq!(
        ops::value(&text, "coredns_dns_responses_total", &bad),
        Some(1.0),
        "{text}"
    );
    assert_eq!(ops::value(&text, "coredns_panics_total", &[]), Some(0.0));
    assert_eq!(
        ops::value(&text, "coredns_reload_failed_total", &[]),
        Some(0.0)
    );
    for name in ["prometheus", "whoami"] {
        let l = [
            ("server", srv.as_str()),
            ("zone", "example.org."),
            ("view", ""),
            ("name", name),
        ];
        assert_eq!(
            ops::value(&text, "coredns_plugin_enabled", &l),
            Some(1.0),
            "{text}"
        );
    }
    assert!(
        text.contains("coredns_dns_request_duration_seconds_bucket{server=\""),
        "{text}"
    );
    assert!(
        text.contains("le=\"0.00025\"") && text.contains("le=\"8.192\""),
        "{text}"
    );
    assert!(text.contains("le=\"64000\""), "{text}");
}

/// CoreDNS's `:9153` listens on both families (Go's wildcard).
#[test]
fn a_wildcard_address_answers_on_both_families() {
    let mp = free_port();
    let s = Server::start(&format!(
        ".:{{PORT}} {{\n    prometheus :{mp}\n    whoami\n}}\n"
    ));
    for (family, (code, text)) in ["IPv4", "IPv6"].iter().zip(ops::get_both(mp, "/metrics")) {
        assert_eq!(code, 200, "{family}");
        assert!(text.contains("coredns_build_info{"), "{family}: {text}");
    }
    drop(s);
}

/// Names, label names and (except `plugin`, see the README) label values.
fn shape(text: &str, port: u16) -> BTreeSet<String> {
    ops::samples(text)
        .into_iter()
        .filter(|(n, _, _)| n.starts_with("coredns_") && !n.ends_with("_bucket"))
        // CoreDNS counts queries refused before any plugin under zone
        // "dropped" (README, Differences).
        .filter(|(_, l, _)| !l.iter().any(|(k, v)| k == "zone" && v == "dropped"))
        // Families only clusterdns has, each listed as an addition in its
        // plugin's README (log: lines dropped rather than block answers).
        .filter(|(n, _, _)| n != "coredns_log_lines_dropped_total")
        .filter(|(n, _, _)| {
            // Families only CoreDNS has (plugins not in this comparison).
            ![
                "coredns_forward_",
                "coredns_hosts_",
                "coredns_local_",
                "coredns_health_",
            ]
            .iter()
            .any(|p| n.starts_with(p))
        })
        .map(|(n, l, _)| {
            let labels: Vec<String> = l
                .into_iter()
                .map(|(k, v)| match k.as_str() {
                    "version" | "revision" | "goversion" | "plugin" => format!("{k}=*"),
                    _ => format!("{k}={}", v.replace(&port.to_string(), "PORT")),
                })
                .collect();
            format!("{n}{{{}}}", labels.join(","))
        })
        .collect()
}

#[test]
fn same_names_and_labels_as_reference_coredns() {
    let Some(bin) = ops::coredns() else {
        eprintln!("reference CoreDNS not built (scripts/rig build); skipped");
        return;
    };
    let port = free_port();
    let mp = free_port();
    let cd = ops::CoreDns::start(&bin, &corefile(&port.to_string(), mp), port);
    for q in QUERIES {
        common::dig(port, q);
    }
    let (_, theirs) = ops::get_ok(mp, "/metrics");
    drop(cd);
    let mp2 = free_port();
    let s = Server::start(&corefile("{PORT}", mp2));
    for q in QUERIES {
        s.dig(q);
    }
    let (_, ours) = ops::get_ok(mp2, "/metrics");
    let (t, o) = (shape(&theirs, port), shape(&ours, s.port));
    let missing: Vec<&String> = t.difference(&o).collect();
    let extra: Vec<&String> = o.difference(&t).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "missing {missing:#?}\nextra {extra:#?}"
    );
    // The Go client's process_* families (the dashboards' memory and CPU
    // panels): the same names, help and types.
    let process = |text: &str| -> BTreeSet<String> {
        text.lines()
            .filter(|l| l.starts_with("# HELP process_") || l.starts_with("# TYPE process_"))
            .map(str::to_owned)
            .collect()
    };
    assert!(process(&theirs).len() >= 12, "{theirs}");
    assert_eq!(process(&ours), process(&theirs));
}
