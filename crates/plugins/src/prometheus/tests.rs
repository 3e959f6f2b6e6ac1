use clusterdns_contract::testing;
use clusterdns_contract::{Chain, Proto, ResponseWriter, Shared};
use clusterdns_wire::{Name, Query, Rtype};

use super::*;
use crate::testutil::{SetupResult, setup as run_setup, setup_err};

#[test]
fn setup_accepts() {
    let r = run_setup(DEF, "example.org:1053 {\n prometheus\n}").unwrap();
    assert_eq!(r.shared.routes[0].addr, "127.0.0.1:9153".parse().unwrap());
    assert_eq!(r.shared.routes[0].path, "/metrics");
    assert_eq!(r.plugins.len(), 1);
    let r = run_setup(DEF, ". {\n prometheus :9253 {\n runtime_metrics\n }\n}").unwrap();
    assert_eq!(r.shared.routes[0].addr, "0.0.0.0:9253".parse().unwrap());
}

#[test]
fn setup_rejects() {
    let cases = [
        (
            ". {\n prometheus\n prometheus\n}",
            "this plugin can only be used once per Server Block",
        ),
        (
            ". {\n prometheus a b\n}",
            "Wrong argument count or unexpected line ending after 'b'",
        ),
        (
            ". {\n prometheus 9153\n}",
            "address 9153: missing port in address",
        ),
        (". {\n prometheus {\n bogus\n }\n}", "unknown option: bogus"),
        (
            ". {\n prometheus {\n runtime_metrics x\n }\n}",
            "Wrong argument count or unexpected line ending after 'x'",
        ),
        (
            ". {\n prometheus {\n tls\n }\n}",
            "Wrong argument count or unexpected line ending after 'tls'",
        ),
        (
            ". {\n prometheus {\n tls cfg.yaml\n }\n}",
            "tls is not supported yet",
        ),
    ];
    for (c, want) in cases {
        assert_eq!(setup_err(DEF, c), want, "{c}");
    }
}

#[test]
fn type_buckets() {
    assert_eq!(type_index(Rtype::A), 0);
    assert_eq!(type_label(type_index(Rtype::HTTPS)), "HTTPS");
    assert_eq!(type_label(type_index(Rtype::ANY)), "ANY");
    assert_eq!(type_label(type_index(Rtype::HINFO)), "other");
    assert_eq!(type_label(type_index(Rtype(65280))), "other");
    assert_eq!(rcode_label(3), "NXDOMAIN");
    assert_eq!(rcode_label(12), "RCODE12");
}

/// Runs queries through `prometheus` + the whoami handler and checks the
/// rendered series.
/// Sets up `prometheus` of `corefile`'s first block followed by `then`
/// (in chain order, as the server adds them): its chain and shared state.
fn chain_with(corefile: &str, then: Vec<Arc<dyn Plugin>>) -> (Chain, Shared) {
    let cf = clusterdns_corefile::parse_str(
        corefile,
        std::path::Path::new("Corefile"),
        &clusterdns_corefile::ProcessEnv,
    )
    .unwrap();
    let block = &cf.blocks[0];
    let keys: Vec<_> = block
        .keys
        .iter()
        .map(clusterdns_corefile::parse_key)
        .collect::<Result<_, _>>()
        .unwrap();
    let mut shared = Shared::new(Arc::new(Registry::new()));
    let plugins = {
        let mut ctx = SetupCtx::new(block, &keys, std::path::Path::new("."), &mut shared);
        let dirs: Vec<_> = block.directives_named("prometheus").collect();
        (DEF.setup)(&mut ctx, &dirs).unwrap();
        for p in then {
            ctx.add_plugin(p);
        }
        ctx.take_plugins()
    };
    (Chain::new(plugins), shared)
}

/// Runs `x. A` through `chain`; the metrics text then.
fn query_x(chain: &Chain, shared: &Shared) -> String {
    let zone = Name::root();
    let pkt = testing::query("x.", Rtype::A);
    let q = Query::parse(&pkt).unwrap();
    let req = testing::request(&q, &zone);
    let mut w = ResponseWriter::new();
    chain.run_sync(&req, &mut w).unwrap();
    shared.metrics.render()
}

/// A handler that passes every query on.
struct PassOn;

impl Plugin for PassOn {
    fn name(&self) -> &'static str {
        "log"
    }
    fn query(&self, _req: &Request<'_>, _w: &mut ResponseWriter) -> Flow {
        Flow::Next
    }
}

#[test]
fn plugin_label_is_the_handler_after_prometheus() {
    // CoreDNS names the plugin right after prometheus, whichever answers.
    let (chain, shared) = chain_with(
        ". {\n prometheus\n}",
        vec![Arc::new(PassOn), Arc::new(crate::whoami::Whoami)],
    );
    let text = query_x(&chain, &shared);
    assert!(
        text.contains(r#"coredns_dns_responses_total{plugin="log",rcode="NOERROR",server="dns://:53",view="",zone="."} 1"#),
        "{text}"
    );
}

#[test]
fn counts_queries_with_coredns_labels() {
    let (chain, shared) = chain_with(
        "example.org {\n prometheus\n}",
        vec![Arc::new(crate::whoami::Whoami)],
    );
    let r = SetupResult {
        plugins: Vec::new(),
        shared,
        root: None,
    };
    let zone = Name::from_ascii("example.org.").unwrap();
    let run = |pkt: &[u8], proto: Proto| {
        let q = Query::parse(pkt).unwrap();
        let mut req = testing::request(&q, &zone);
        req.proto = proto;
        let mut w = ResponseWriter::new();
        chain.run_sync(&req, &mut w).unwrap();
    };
    let a = testing::query("a.example.org.", Rtype::A);
    run(&a, Proto::Udp);
    run(&a, Proto::Udp);
    run(
        &testing::query_edns("b.example.org.", Rtype::HINFO, 1232, true),
        Proto::Tcp,
    );
    let text = r.shared.metrics.render();
    let has = |s: &str| assert!(text.contains(s), "missing {s} in\n{text}");
    has(
        r#"coredns_dns_requests_total{family="1",proto="udp",server="dns://:53",type="A",view="",zone="example.org."} 2"#,
    );
    has(
        r#"coredns_dns_requests_total{family="1",proto="tcp",server="dns://:53",type="other",view="",zone="example.org."} 1"#,
    );
    has(r#"coredns_dns_do_requests_total{server="dns://:53",view="",zone="example.org."} 1"#);
    has(
        r#"coredns_dns_responses_total{plugin="whoami",rcode="NOERROR",server="dns://:53",view="",zone="example.org."} 3"#,
    );
    has(
        r#"coredns_dns_request_duration_seconds_count{server="dns://:53",view="",zone="example.org."} 3"#,
    );
    has(
        r#"coredns_dns_request_size_bytes_bucket{proto="udp",server="dns://:53",view="",zone="example.org.",le="100"} 2"#,
    );
    has(
        r#"coredns_dns_response_size_bytes_count{proto="tcp",server="dns://:53",view="",zone="example.org."} 1"#,
    );
    has("coredns_panics_total 0");
    has("coredns_reload_failed_total 0");
    has(r#"coredns_build_info{goversion="rustc",revision=""#);
    // Unused label sets are not shown.
    assert!(
        !text.contains(r#"proto="tcp",family="1",type="A""#),
        "{text}"
    );
}

#[test]
fn server_failure_has_empty_plugin_label() {
    let r = run_setup(DEF, ". {\n prometheus\n}").unwrap();
    let text = query_x(&Chain::new(r.plugins.clone()), &r.shared);
    assert!(
        text.contains(r#"coredns_dns_responses_total{plugin="",rcode="SERVFAIL",server="dns://:53",view="",zone="."} 1"#),
        "{text}"
    );
}

#[test]
fn plugin_enabled_set_on_startup() {
    let mut r = run_setup(
        DEF,
        "example.org:1053 {\n prometheus\n whoami\n log\n health\n debug\n timeouts 5s\n}",
    )
    .unwrap();
    for h in std::mem::take(&mut r.shared.on_startup) {
        h().unwrap();
    }
    let text = r.shared.metrics.render();
    for name in ["prometheus", "whoami", "log"] {
        let s = format!(
            r#"coredns_plugin_enabled{{name="{name}",server="dns://:1053",view="",zone="example.org."}} 1"#
        );
        assert!(text.contains(&s), "missing {s} in\n{text}");
    }
    for name in ["health", "debug", "timeouts"] {
        assert!(!text.contains(&format!(r#"name="{name}""#)), "{text}");
    }
}
