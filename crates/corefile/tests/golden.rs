//! Golden parse fixtures: every `tests/data/NAME.corefile` is parsed and dumped, and the
//! dump must equal `tests/data/NAME.ast`. Run with `BLESS=1` to rewrite the `.ast` files
//! (then review the diff).
//!
//! Dump format: `block KEY...` per server block, then one line per directive indented two
//! spaces per nesting level, prefixed with its line number. A token on a different line than
//! its directive (or key line) gets `@LINE`; a token from another file gets `@FILE:LINE`.
//! Tokens that are empty or hold spaces, quotes, `\` or `@` are written as Rust strings.
//! A fixture that fails to parse dumps as `error: MESSAGE`.

use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::path::Path;

use clusterdns_corefile::{Corefile, Directive, Token, parse_str};

/// The environment every fixture sees.
fn env() -> HashMap<String, String> {
    [
        ("ZONE", "Example.ORG"),
        ("PORT", "1053"),
        ("UPSTREAMS", "8.8.8.8 8.8.4.4"),
        ("BRACE", "{"),
        ("SNIP", "common"),
        ("WIN", "windows"),
        ("NESTED", "{$ZONE}"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn word(tok: &Token, line: u32, main: &Path) -> Result<String, fmt::Error> {
    let plain = !tok.text.is_empty()
        && !tok
            .text
            .contains(|c: char| c.is_whitespace() || matches!(c, '"' | '\\' | '@'));
    let mut out = if plain {
        tok.text.clone()
    } else {
        format!("{:?}", tok.text)
    };
    if *tok.file != *main {
        let name = tok.file.file_name().unwrap_or_default().to_string_lossy();
        write!(out, "@{name}:{}", tok.line)?;
    } else if tok.line != line {
        write!(out, "@{}", tok.line)?;
    }
    Ok(out)
}

fn dump_directive(out: &mut String, d: &Directive, depth: usize, main: &Path) -> fmt::Result {
    let line = d.name.line;
    write!(
        out,
        "{line:>3}| {}{}",
        "  ".repeat(depth),
        word(&d.name, line, main)?
    )?;
    for arg in &d.args {
        write!(out, " {}", word(arg, line, main)?)?;
    }
    out.push('\n');
    for sub in &d.block {
        dump_directive(out, sub, depth + 1, main)?;
    }
    Ok(())
}

fn dump(corefile: &Corefile, main: &Path) -> Result<String, fmt::Error> {
    let mut out = String::new();
    for block in &corefile.blocks {
        let line = block.keys.first().map_or(0, |k| k.line);
        write!(out, "block@{line}")?;
        for key in &block.keys {
            write!(out, " {}", word(key, line, main)?)?;
        }
        out.push('\n');
        for d in &block.directives {
            dump_directive(&mut out, d, 0, main)?;
        }
    }
    Ok(out)
}

#[test]
fn golden_fixtures() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let bless = std::env::var_os("BLESS").is_some();
    let mut cases: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "corefile"))
        .collect();
    cases.sort();
    assert!(cases.len() >= 10, "fixtures missing from {}", dir.display());
    let mut failed = Vec::new();
    for case in &cases {
        let text = String::from_utf8(std::fs::read(case).unwrap()).unwrap();
        let main = Path::new("Corefile");
        let got = match parse_str(&text, main, &env()) {
            Ok(corefile) => dump(&corefile, main).expect("dump"),
            Err(e) => format!("error: {e}\n"),
        };
        let expected_path = case.with_extension("ast");
        if bless {
            std::fs::write(&expected_path, &got).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_default();
        if got != expected {
            failed.push(format!(
                "{}:\n--- expected\n{expected}--- got\n{got}",
                case.display()
            ));
        }
    }
    assert!(
        failed.is_empty(),
        "{} fixture(s) differ:\n{}",
        failed.len(),
        failed.join("\n")
    );
}
