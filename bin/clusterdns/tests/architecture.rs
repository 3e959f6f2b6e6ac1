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
        "{MARKER} x -->\n| crate | may depend on |\n|---|---|\n| `wire` | — |\n| `k8s` | `kube` |\n| `gone` | — |\n\nafter\n| `ignored` | — |\n"
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
            "clusterdns-k8s".to_owned(),
            vec![
                dep("clusterdns-kube", "normal", &["test-util"]),
                dep("clusterdns-wire", "normal", &[]),
                dep("clusterdns-test-support", "dev", &[]),
                dep("clusterdns-kube", "dev", &["test-util"]),
            ],
        ),
        ("clusterdns-new".to_owned(), vec![]),
    ]);
    let broken = violations(&rules, &packages);
    assert_eq!(broken.len(), 4, "{broken:#?}");
    assert!(broken[0].contains("clusterdns-k8s turns on clusterdns-kube's test-util in a normal"));
    assert!(broken[1].contains("clusterdns-k8s has a normal dependency on clusterdns-wire"));
    assert!(broken[2].contains("clusterdns-new has no row"));
    assert!(broken[3].contains("clusterdns-gone, which is not a crate"));
}
