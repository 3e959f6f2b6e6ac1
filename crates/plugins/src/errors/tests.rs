use std::sync::Arc;

use clusterdns_contract::log::Level;
use clusterdns_contract::testing;
use clusterdns_contract::{Chain, Outcome, PluginError, ResponseWriter};
use clusterdns_wire::{Name, Query, Rcode, Rtype};

use super::*;
use crate::testutil::{setup, setup_err};

fn parsed(corefile: &str) -> Errors {
    let owned = crate::testutil::directives(corefile, "errors");
    let dirs: Vec<&Directive> = owned.iter().collect();
    parse(&dirs).unwrap()
}

#[test]
fn setup_accepts() {
    for c in [
        ". {\n errors\n}",
        ". {\n errors stdout\n}",
        ". {\n errors {\n stacktrace\n }\n}",
        ". {\n errors {\n consolidate 5m \".* i/o timeout$\" warning\n }\n}",
        ". {\n errors {\n consolidate 30s ^Failed info show_first\n consolidate 1m x debug\n }\n}",
        ". {\n errors {\n consolidate 1s x show_first\n }\n}",
    ] {
        let r = setup(DEF, c).unwrap_or_else(|e| panic!("{c}: {e}"));
        assert_eq!(r.plugins.len(), 1, "{c}");
    }
}

#[test]
fn setup_rejects() {
    let cases = [
        (
            ". {\n errors\n errors\n}",
            "this plugin can only be used once per Server Block",
        ),
        (". {\n errors file.log\n}", "invalid log file: file.log"),
        (
            ". {\n errors a b\n}",
            "Wrong argument count or unexpected line ending after 'b'",
        ),
        (
            ". {\n errors {\n foo\n }\n}",
            "Syntax error: Unexpected token 'foo', expecting 'Unknown field foo'",
        ),
        (
            ". {\n errors {\n consolidate 1m\n }\n}",
            "Wrong argument count or unexpected line ending after '1m'",
        ),
        (
            ". {\n errors {\n consolidate 1x re\n }\n}",
            "time: unknown unit \"x\" in duration \"1x\"",
        ),
        (
            ". {\n errors {\n consolidate 1m re critical\n }\n}",
            "unknown option in consolidate: critical",
        ),
        (
            ". {\n errors {\n consolidate 1m re info error\n }\n}",
            "multiple log levels specified in consolidate",
        ),
        (
            ". {\n errors {\n consolidate 1m re show_first info\n }\n}",
            "log level must come before show_first in consolidate",
        ),
        (
            ". {\n errors {\n consolidate 1m re info show_first x\n }\n}",
            "Wrong argument count or unexpected line ending after 'x'",
        ),
    ];
    for (c, want) in cases {
        assert_eq!(setup_err(DEF, c), want, "{c}");
    }
    let long = format!(
        ". {{\n errors {{\n consolidate 1m {}\n }}\n}}",
        "a".repeat(10_001)
    );
    assert_eq!(
        setup_err(DEF, &long),
        "regex pattern too long: 10001 > 10000"
    );
    assert!(
        setup_err(DEF, ". {\n errors {\n consolidate 1m (\n }\n}").contains("regex parse error")
    );
}

#[test]
fn consolidate_registers_hooks() {
    let r = setup(DEF, ". {\n errors {\n consolidate 1m x\n }\n}").unwrap();
    assert_eq!(r.shared.on_startup.len(), 1);
    assert_eq!(r.shared.on_shutdown.len(), 1);
    let r = setup(DEF, ". {\n errors\n}").unwrap();
    assert!(r.shared.on_startup.is_empty());
}

#[test]
fn line_is_coredns_format() {
    let pkt = testing::query("Example.ORG.", Rtype::AAAA);
    let q = Query::parse(&pkt).unwrap();
    let zone = Name::root();
    let req = testing::request(&q, &zone);
    let e = PluginError::NoNext { plugin: "whoami" };
    let o = Outcome {
        rcode: Rcode::SERVFAIL,
        plugin: "whoami",
        error: None,
    };
    assert_eq!(
        Errors::line(&req, &o, &e.to_string()),
        "2 example.org. AAAA: plugin/whoami: no next plugin found"
    );
}

#[test]
fn classify_counts_first_matching_pattern() {
    let e = parsed(
        ". {\n errors {\n consolidate 1m timeout warning\n consolidate 1m . info show_first\n }\n}",
    );
    // Not matched by any pattern: logged at ERROR.
    let plain = parsed(". {\n errors\n}");
    assert_eq!(plain.classify("x"), Some(Some(Level::Error)));
    // Matched: consolidated, counted.
    assert_eq!(e.classify("read: i/o timeout"), None);
    assert_eq!(e.classify("read: i/o timeout"), None);
    assert_eq!(e.patterns[0].count.load(Ordering::Relaxed), 2);
    // show_first: the first is logged at the pattern's level, the rest counted.
    assert_eq!(e.classify("other"), Some(Some(Level::Info)));
    assert_eq!(e.classify("other"), None);
    assert_eq!(e.patterns[1].count.load(Ordering::Relaxed), 2);
    // After stop, counts are flushed and errors are logged directly.
    e.stop();
    assert_eq!(e.patterns[0].count.load(Ordering::Relaxed), 0);
    assert_eq!(e.classify("timeout"), Some(Some(Level::Warning)));
}

#[test]
fn response_hook_runs_on_errors_only() {
    // A chain of only `errors` runs out: SERVFAIL with NoNext, logged.
    let r = setup(DEF, ". {\n errors\n}").unwrap();
    let chain = Chain::new(r.plugins.clone());
    let pkt = testing::query("example.org.", Rtype::A);
    let q = Query::parse(&pkt).unwrap();
    let zone = Name::root();
    let req = testing::request(&q, &zone);
    let mut w = ResponseWriter::new();
    let o = chain.run_sync(&req, &mut w).unwrap();
    assert_eq!(o.rcode, Rcode::SERVFAIL);
    assert_eq!(
        o.error.map(|e| e.to_string()).as_deref(),
        Some("plugin/errors: no next plugin found")
    );
    let _: Arc<dyn clusterdns_contract::Plugin> = r.plugins[0].clone();
}
