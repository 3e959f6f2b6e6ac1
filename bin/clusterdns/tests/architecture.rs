//! The crate dependency rules of ARCHITECTURE.md, checked against `cargo metadata`.
//!
//! The rules are the table after the `dependency rules` marker in ARCHITECTURE.md: one row
//! per crate of the workspace, naming the crates of ours it may depend on (normal and build
//! dependencies; dev-dependencies are free). A dependency missing from its crate's row, a
//! crate without a row, or a row for no crate fails this test, so the map and the manifests
//! change together. A crate's `test-util` feature (its test helpers) is turned on only by
//! dev-dependencies, so the helpers never reach the product.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

const MARKER: &str = "<!-- dependency rules:";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `wire` → `clusterdns-wire`; `bin` → `clusterdns`.
fn package_name(short: &str) -> String {
    if short == "bin" {
        "clusterdns".to_owned()
    } else {
        format!("clusterdns-{short}")
    }
}

/// The rules table of ARCHITECTURE.md: package → packages of ours it may depend on.
fn rules(text: &str) -> Result<BTreeMap<String, BTreeSet<String>>, String> {
    let start = text
        .find(MARKER)
        .ok_or_else(|| format!("ARCHITECTURE.md has no `{MARKER}` marker"))?;
    let mut rows = BTreeMap::new();
    for line in text[start..].lines().skip(1) {
        let line = line.trim();
        if !line.starts_with('|') {
            if rows.is_empty() {
                continue;
            }
            break;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let [krate, allowed, ..] = cells[..] else {
            return Err(format!("rules row with fewer than two cells: {line}"));
        };
        if !krate.starts_with('`') {
            continue; // the header and its rule
        }
        let names = |cell: &str| -> BTreeSet<String> {
            cell.split(',')
                .map(|n| n.trim().trim_matches('`'))
                .filter(|n| !n.is_empty() && *n != "—")
                .map(package_name)
                .collect()
        };
        let name = package_name(krate.trim_matches('`'));
        if rows.insert(name.clone(), names(allowed)).is_some() {
            return Err(format!("two rules rows for {name}"));
        }
    }
    if rows.is_empty() {
        return Err("the rules table after the marker is empty".to_owned());
    }
    Ok(rows)
}

/// One dependency of a workspace package on another.
#[derive(Debug)]
struct Dep {
    name: String,
    /// `normal`, `build` or `dev`.
    kind: String,
    /// The features it turns on.
    features: Vec<String>,
}

/// Each workspace package → its dependencies among the workspace packages, from
/// `cargo metadata`.
fn workspace() -> BTreeMap<String, Vec<Dep>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .arg("--manifest-path")
        .arg(root().join("Cargo.toml"))
        .output()
        .expect("running cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    let packages = meta["packages"].as_array().expect("packages");
    let ours: BTreeSet<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .filter_map(|d| {
                    let name = d["name"].as_str()?;
                    ours.contains(name).then(|| Dep {
                        name: name.to_owned(),
                        kind: d["kind"].as_str().unwrap_or("normal").to_owned(),
                        features: d["features"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|f| f.as_str().map(str::to_owned))
                            .collect(),
                    })
                })
                .collect();
            (p["name"].as_str().expect("name").to_owned(), deps)
        })
        .collect()
}

/// Every way `packages` breaks `rules`, as sentences.
fn violations(
    rules: &BTreeMap<String, BTreeSet<String>>,
    packages: &BTreeMap<String, Vec<Dep>>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (name, deps) in packages {
        let Some(allowed) = rules.get(name) else {
            out.push(format!(
                "{name} has no row in ARCHITECTURE.md's dependency rules"
            ));
            continue;
        };
        for Dep {
            name: dep,
            kind,
            features,
        } in deps
        {
            if kind == "dev" {
                continue;
            }
            if !allowed.contains(dep) {
                out.push(format!(
                    "{name} has a {kind} dependency on {dep}, which its row in \
                     ARCHITECTURE.md's dependency rules does not allow"
                ));
            }
            if features.iter().any(|f| f == "test-util") {
                out.push(format!(
                    "{name} turns on {dep}'s test-util in a {kind} dependency: test helpers \
                     would reach the product"
                ));
            }
        }
    }
    for name in rules.keys() {
        if !packages.contains_key(name) {
            out.push(format!("ARCHITECTURE.md's dependency rules name {name}, which is not a crate of the workspace"));
        }
    }
    out
}

#[test]
fn crate_dependencies_follow_architecture_md() {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let rules = rules(&text).unwrap_or_else(|e| panic!("{e}"));
    let packages = workspace();
    let broken = violations(&rules, &packages);
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// The checker itself: a forbidden arrow, test helpers in a normal dependency, a crate without
/// a row and a row without a crate are each reported; a dev-dependency is not.
#[test]
fn a_forbidden_arrow_is_reported() {
    let text = format!(
        "{MARKER} x -->\n| crate | may depend on |\n|---|---|\n| `wire` | — |\n| `kubeindex` | `kubeclient` |\n| `gone` | — |\n\nafter\n| `ignored` | — |\n"
    );
    let rules = rules(&text).unwrap();
    assert_eq!(rules.len(), 3);
    let dep = |n: &str, k: &str, f: &[&str]| Dep {
        name: n.to_owned(),
        kind: k.to_owned(),
        features: f.iter().map(|f| (*f).to_owned()).collect(),
    };
    let packages = BTreeMap::from([
        ("clusterdns-wire".to_owned(), vec![]),
        (
            "clusterdns-kubeindex".to_owned(),
            vec![
                dep("clusterdns-kubeclient", "normal", &["test-util"]),
                dep("clusterdns-wire", "normal", &[]),
                dep("clusterdns-test-support", "dev", &[]),
                dep("clusterdns-kubeclient", "dev", &["test-util"]),
            ],
        ),
        ("clusterdns-new".to_owned(), vec![]),
    ]);
    let broken = violations(&rules, &packages);
    assert_eq!(broken.len(), 4, "{broken:#?}");
    assert!(
        broken[0].contains(
            "clusterdns-kubeindex turns on clusterdns-kubeclient's test-util in a normal"
        )
    );
    assert!(broken[1].contains("clusterdns-kubeindex has a normal dependency on clusterdns-wire"));
    assert!(broken[2].contains("clusterdns-new has no row"));
    assert!(broken[3].contains("clusterdns-gone, which is not a crate"));
}

/// The plugins' own folders (and single-file plugins) under `crates/plugins/src`: every
/// module but the shared ones (`pkg`, the test harness, the crate root).
fn plugin_modules(src: &Path) -> BTreeSet<String> {
    std::fs::read_dir(src)
        .expect("crates/plugins/src")
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().into_string().ok()?;
            let name = match name.strip_suffix(".rs") {
                Some(stem) => stem.to_owned(),
                None if e.path().is_dir() => name,
                None => return None,
            };
            (!["pkg", "testutil", "lib"].contains(&name.as_str())).then_some(name)
        })
        .collect()
}

/// Every path to another plugin in `text`, a file of plugin `owner` (`crate::<plugin>`, or
/// enough `super::` to reach the crate root and then a plugin), outside its tests (a
/// `tests.rs`, or the item after a `#[cfg(test)]`: tests may end a chain with another
/// plugin), as sentences naming `file` and the line.
fn cross_plugin_uses(
    owner: &str,
    file: &str,
    text: &str,
    plugins: &BTreeSet<String>,
) -> Vec<String> {
    if file.ends_with("/tests.rs") {
        return Vec::new();
    }
    // The file's module path below the crate root (`acl/nets.rs` is
    // `acl::nets`, `acl/mod.rs` is `acl`), so `super::` resolves.
    let mut module: Vec<&str> = file
        .split_once("crates/plugins/src/")
        .map_or(file, |(_, rel)| rel)
        .trim_end_matches(".rs")
        .split('/')
        .collect();
    if module.last() == Some(&"mod") {
        module.pop();
    }
    let mut out = Vec::new();
    // A `#[cfg(test)]` item is skipped: one line if it ends there (`mod
    // tests;`), else until its braces close.
    let (mut skipping, mut depth) = (false, 0i32);
    for (n, line) in text.lines().enumerate() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]") {
            skipping = true;
            continue;
        }
        if skipping {
            if t.starts_with("#[") {
                continue;
            }
            depth += line.matches('{').count() as i32 - line.matches('}').count() as i32;
            if depth <= 0 && (t.ends_with(';') || t.ends_with('}')) {
                skipping = false;
                depth = 0;
            }
            continue;
        }
        let mut rest = line;
        loop {
            let (at, up) = match (rest.find("crate::"), rest.find("super::")) {
                (None, None) => break,
                (Some(c), Some(s)) if s < c => (s, true),
                (Some(c), _) => (c, false),
                (None, Some(s)) => (s, true),
            };
            // Each `super::` is one module up from the file's; a path
            // reaches another plugin only from the crate root.
            let mut level = module.len();
            if up {
                rest = &rest[at..];
                while let Some(r) = rest.strip_prefix("super::") {
                    level = level.saturating_sub(1);
                    rest = r;
                }
                if level > 0 {
                    continue;
                }
            } else {
                rest = &rest[at + "crate::".len()..];
            }
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name != owner && plugins.contains(&name) {
                let how = if up { "super::" } else { "crate::" };
                out.push(format!(
                    "{file}:{}: plugin {owner} uses {how}{name} (crate::{name}), another plugin's \
                     internals (move the shared piece to crates/plugins/src/pkg or the plugin \
                     contract)",
                    n + 1
                ));
            }
        }
    }
    out
}

/// Plugins never use one another's internals (ARCHITECTURE.md, crate map): what two plugins
/// share lives in `crates/plugins/src/pkg` or in the contract crate.
#[test]
fn plugins_do_not_import_each_other() {
    let src = root().join("crates/plugins/src");
    let plugins = plugin_modules(&src);
    assert!(
        plugins.contains("kubernetes") && plugins.contains("acl"),
        "{plugins:?}"
    );
    let mut broken = Vec::new();
    let mut files = vec![];
    for p in &plugins {
        let single = src.join(format!("{p}.rs"));
        if single.is_file() {
            files.push((p.clone(), single));
            continue;
        }
        let mut dirs = vec![src.join(p)];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).expect("plugin folder").flatten() {
                let path = e.path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|x| x == "rs") {
                    files.push((p.clone(), path));
                }
            }
        }
    }
    for (owner, path) in &files {
        let text = std::fs::read_to_string(path).expect("plugin source");
        let rel = path
            .strip_prefix(root())
            .unwrap_or(path)
            .display()
            .to_string();
        broken.extend(cross_plugin_uses(owner, &rel, &text, &plugins));
    }
    assert!(files.len() > 40, "{} plugin files read", files.len());
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// The checker itself: an import of another plugin's internals is reported with its line; a
/// plugin's own paths, the shared `pkg`, and tests are not.
#[test]
fn a_cross_plugin_import_is_reported() {
    let plugins: BTreeSet<String> = ["acl", "kubernetes", "whoami"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    let text = "use crate::pkg::nets::Nets;\nuse crate::kubernetes::Index;\nfn f() {\n    \
                let n = crate::acl::Nets::all();\n}\n#[cfg(test)]\nmod tests {\n    \
                use crate::whoami::Whoami;\n}\n";
    let broken = cross_plugin_uses("kubernetes", "kubernetes/zone.rs", text, &plugins);
    assert_eq!(broken.len(), 1, "{broken:#?}");
    assert!(
        broken[0].starts_with("kubernetes/zone.rs:4: plugin kubernetes uses crate::acl "),
        "{}",
        broken[0]
    );
    assert!(cross_plugin_uses("kubernetes", "kubernetes/tests.rs", text, &plugins).is_empty());
    // Relative paths resolve from the file's module: from
    // `kubernetes/zone/a.rs`, `super::super::super::acl` is the acl plugin
    // and `super::super::Index` kubernetes' own; from `kubernetes/mod.rs`
    // `super::acl` is acl. A line after a one-line `#[cfg(test)] mod
    // tests;` is read.
    let relative =
        "use super::super::Index;\n#[cfg(test)]\nmod tests;\nuse super::super::super::acl::Nets;\n";
    let broken = cross_plugin_uses("kubernetes", "kubernetes/zone/a.rs", relative, &plugins);
    assert_eq!(broken.len(), 1, "{broken:#?}");
    assert!(
        broken[0].starts_with("kubernetes/zone/a.rs:4: plugin kubernetes uses super::acl"),
        "{}",
        broken[0]
    );
    assert!(
        cross_plugin_uses(
            "kubernetes",
            "kubernetes/zone.rs",
            "use super::Index;\n",
            &plugins
        )
        .is_empty()
    );
    assert_eq!(
        cross_plugin_uses(
            "kubernetes",
            "kubernetes/zone.rs",
            "use super::super::acl;\n",
            &plugins
        )
        .len(),
        1
    );
    let broken = cross_plugin_uses(
        "kubernetes",
        "kubernetes/mod.rs",
        "use super::acl::Nets;\n",
        &plugins,
    );
    assert_eq!(broken.len(), 1, "{broken:#?}");
}
