//! Every compiled-in plugin has a README in CoreDNS's format, and every
//! `~~~ corefile` example in it is a Corefile clusterdns accepts (parsed and
//! set up with the real plugins; nothing is bound).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clusterdns_contract::metrics::Registry;
use clusterdns_server::{ConfigSource, Instance};

fn readme_path(plugin: &str) -> PathBuf {
    let module = if plugin == "loop" { "loop_" } else { plugin };
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../crates/plugins/src")
        .join(module)
        .join("README.md")
}

/// The `~~~ corefile` blocks of a README, with their first line number.
fn corefile_examples(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let fence = line.trim_start().starts_with("~~~") || line.trim_start().starts_with("```");
        match (&mut current, fence) {
            (None, true) if line.contains("corefile") => current = Some((i + 1, String::new())),
            (Some(_), true) => out.extend(current.take()),
            (Some((_, body)), false) => {
                body.push_str(line);
                body.push('\n');
            }
            _ => {}
        }
    }
    out
}

#[test]
fn every_plugin_has_a_readme_with_the_coredns_sections() {
    for def in clusterdns_plugins::registry() {
        let path = readme_path(def.name);
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for section in [
            format!("# {}", def.name),
            "## Name".into(),
            "## Description".into(),
            "## Syntax".into(),
            "## Examples".into(),
        ] {
            assert!(
                text.lines().any(|l| l.trim() == section),
                "{} lacks a `{section}` line",
                path.display()
            );
        }
        assert!(
            !corefile_examples(&text).is_empty(),
            "{} has no ~~~ corefile example",
            path.display()
        );
    }
}

#[test]
fn every_corefile_example_sets_up() {
    let registry = clusterdns_plugins::registry();
    let mut checked = 0;
    for def in &registry {
        let path = readme_path(def.name);
        let text = std::fs::read_to_string(&path).expect("readme");
        for (line, corefile) in corefile_examples(&text) {
            // Examples of `{$ENV}` substitution need a variable this test
            // cannot set (std::env::set_var is banned); the corefile
            // crate's tests cover substitution.
            if corefile.contains("{$") {
                continue;
            }
            let source = ConfigSource::Text {
                name: path.with_file_name(format!("README.md:{line}")),
                text: corefile.clone(),
            };
            if let Err(e) = Instance::build(&source, &registry, 53, Arc::new(Registry::new())) {
                // Examples that name files of the reader's machine (TLS
                // certificates, a resolv.conf) are valid but cannot set up
                // here; anything else is a broken example.
                let msg = e.to_string().to_lowercase();
                if msg.contains("no such file or directory") {
                    println!(
                        "{}:{line}: needs a file this machine lacks: {e}",
                        path.display()
                    );
                    continue;
                }
                panic!(
                    "{}:{line}: example does not set up: {e}\n{corefile}",
                    path.display()
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= registry.len(), "only {checked} examples checked");
}
