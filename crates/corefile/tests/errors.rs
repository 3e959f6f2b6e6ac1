//! Every parse error, with the line it is reported at; and environment substitution.

use std::collections::HashMap;
use std::path::Path;

use clusterdns_corefile::{Env, ProcessEnv, parse_str};

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A file name that resolves nowhere, so file imports cannot find anything by accident.
const MAIN: &str = "/nonexistent-clusterdns-test/Corefile";

#[test]
fn error_messages_and_lines() {
    let deep = format!(". {{\n{}", "a {\n".repeat(101));
    let cases: &[(&str, &str, u32, &str)] = &[
        (
            "one-line block",
            ". { log }",
            1,
            "Unexpected '}' because no matching opening brace",
        ),
        (
            "close on directive line",
            ". {\n log }\n",
            2,
            "Unexpected '}' because no matching opening brace",
        ),
        (
            "stray close as key",
            ". {\n log\n}\n}\n",
            4,
            "Unexpected '}' because no matching opening brace",
        ),
        (
            "close in single-block form",
            ".\nlog\n}\n",
            3,
            "Unexpected '}' because no matching opening brace",
        ),
        (
            "close after sub-block",
            ". {\n foo {\n  a\n } }\n}",
            4,
            "Unexpected '}' because no matching opening brace",
        ),
        (
            "close after multi-line quote",
            ". {\n a \"x\ny\" }\n}",
            3,
            "Unexpected '}' because no matching opening brace",
        ),
        (
            "unclosed block",
            ". {\n log\n",
            2,
            "Syntax error: Unexpected token 'log', expecting '}'",
        ),
        (
            "unclosed sub-block",
            ". {\n foo {\n  bar\n",
            3,
            "Unexpected EOF",
        ),
        ("comma at EOF", "a,\n", 1, "Unexpected EOF"),
        (
            "comma before brace",
            "a, {\n}",
            1,
            "Expected another address but had '{' - check for extra comma",
        ),
        (
            "comma, newline, brace",
            "a,\n{\n}",
            2,
            "Expected another address but had '{' - check for extra comma",
        ),
        (
            "brace on next line",
            ". {\n foo\n {\n }\n}",
            3,
            "Unexpected '{' - a block must open on the same line as its directive",
        ),
        (
            "brace as sub-line",
            ". {\n foo {\n  {\n  }\n }\n}",
            3,
            "Unexpected '{' - a block must open on the same line as its directive",
        ),
        (
            "token after block",
            ". {\n foo { a\n } b\n}",
            3,
            "Unexpected token 'b' after '}', expecting a line break",
        ),
        ("too deep", &deep, 102, "Blocks nested more than 100 deep"),
        (
            "import without argument",
            ". {\n import\n}",
            2,
            "Wrong argument count or unexpected line ending after 'import'",
        ),
        (
            "import two arguments",
            ". {\n import a b\n}",
            2,
            "Import takes only one argument (glob pattern or file)",
        ),
        (
            "import empty",
            ". {\n import \"\"\n}",
            2,
            "Import requires a non-empty filepath",
        ),
        (
            "import unset variable",
            ". {\n import {$UNSET}\n}",
            2,
            "Import requires a non-empty filepath",
        ),
        (
            "import missing file",
            ". {\n\n import missing.conf\n}",
            3,
            "File to import not found: missing.conf",
        ),
        (
            "two stars",
            ". {\n import */*.conf\n}",
            2,
            "Glob pattern may only contain one wildcard (*), but has others: /nonexistent-clusterdns-test/*/*.conf",
        ),
        (
            "two question marks",
            ". {\n import a??\n}",
            2,
            "Glob pattern may only contain one wildcard (*), but has others: /nonexistent-clusterdns-test/a??",
        ),
        (
            "character class",
            ". {\n import [ab].conf\n}",
            2,
            "Glob pattern may only contain one wildcard (*), but has others: /nonexistent-clusterdns-test/[ab].conf",
        ),
        (
            "open bracket",
            ". {\n import [ab.conf\n}",
            2,
            "Failed to use import pattern [ab.conf: syntax error in pattern",
        ),
        (
            "snippet twice",
            "(s) {\n a\n}\n(s) {\n b\n}",
            4,
            "redeclaration of previously declared snippet s",
        ),
        (
            "snippet without braces",
            "(s)\nlog\n",
            2,
            "Unexpected token 'log', expecting '{'",
        ),
        (
            "unclosed snippet",
            "(s) {\n a {\n }\n",
            3,
            "Syntax error: Unexpected token '}', expecting '}'",
        ),
        (
            "snippet imports itself",
            "(s) {\n a\n import s\n}",
            3,
            "Snippet 's' imports itself",
        ),
        (
            "snippet cycle",
            "(a) {\n import b\n}\n(b) {\n import a\n}\n. {\n import a\n}",
            5,
            "Import cycle: snippet 'a' imports itself",
        ),
        (
            "unclosed quote",
            ". {\n a \"b }\n",
            2,
            "Syntax error: Unexpected token 'b }\n', expecting '}'",
        ),
    ];
    for (name, text, line, msg) in cases {
        let err = parse_str(text, Path::new(MAIN), &env(&[])).expect_err(name);
        assert_eq!((err.line, err.msg.as_str()), (*line, *msg), "{name}");
        assert_eq!(&*err.file, Path::new(MAIN), "{name}");
    }
}

#[test]
fn display_is_coredns_wording() {
    let err = parse_str("a,", Path::new("Corefile"), &env(&[])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Corefile:1 - Error during parsing: Unexpected EOF"
    );
}

#[test]
fn directive_helpers() {
    let text = ".:53 {\n forward . 1.1.1.1\n forward\n log\n}";
    let corefile = parse_str(text, Path::new("Corefile"), &env(&[])).unwrap();
    let block = &corefile.blocks[0];
    let forwards: Vec<_> = block.directives_named("forward").collect();
    assert_eq!(forwards.len(), 2);
    assert_eq!(
        forwards[0].arg_err().to_string(),
        "Corefile:2 - Error during parsing: Wrong argument count or unexpected line ending after '1.1.1.1'"
    );
    assert_eq!(
        forwards[1].arg_err().msg,
        "Wrong argument count or unexpected line ending after 'forward'"
    );
    assert_eq!(forwards[1].err("boom").line, 3);
    assert_eq!(
        forwards[0].arg_texts().collect::<Vec<_>>(),
        [".", "1.1.1.1"]
    );
}

#[test]
fn accepted_forms_that_look_odd() {
    let ok = |text: &str| parse_str(text, Path::new(MAIN), &env(&[])).unwrap().blocks;
    // An empty block on one line, and a brace-only server block.
    assert!(ok(". { }")[0].directives.is_empty());
    // A glob with no match only warns.
    assert!(
        ok(". {\n import nothing-*.conf\n}")[0]
            .directives
            .is_empty()
    );
    // A block whose keys are all empty is dropped, as in CoreDNS.
    assert!(ok("{$UNSET} {\n log\n}\n").is_empty());
    // `import` not first on a line is an ordinary token.
    assert_eq!(
        ok(". {\n foo import x\n}")[0].directives[0].args[0].text,
        "import"
    );
    // Inside a sub-block `import` after `{` on the same line is an ordinary sub-line.
    assert_eq!(
        ok(". {\n foo { import x\n }\n}")[0].directives[0].block[0]
            .name
            .text,
        "import"
    );
}

#[test]
fn env_substitution() {
    let vars = env(&[
        ("A", "alpha"),
        ("B", "b c"),
        ("SELF", "{$SELF}"),
        ("Q", "\"}\""),
        ("EMPTY", ""),
    ]);
    let text = ". {\n t {$A}{$B} {%A%}-{$A} {$SELF} {$Q} x{$EMPTY}y {$MISSING} {%MISSING%}\n}";
    let corefile = parse_str(text, Path::new("Corefile"), &vars).unwrap();
    let args: Vec<_> = corefile.blocks[0].directives[0]
        .arg_texts()
        .map(str::to_owned)
        .collect();
    // Values are never re-tokenised nor re-scanned; unset is empty (and the token is kept).
    assert_eq!(
        args,
        ["alphab c", "alpha-alpha", "{$SELF}", "\"}\"", "xy", "", ""]
    );
}

#[test]
fn process_env_is_safe_on_odd_names() {
    for key in ["", "A=B", "NUL\0", "CLUSTERDNS_SURELY_UNSET_VARIABLE"] {
        assert_eq!(ProcessEnv.get(key), None, "{key:?}");
    }
    // No panic on names that the platform cannot look up.
    let corefile = parse_str(". {\n a {$A=B} {$}\n}", Path::new("Corefile"), &ProcessEnv).unwrap();
    assert_eq!(corefile.blocks[0].directives[0].args[0].text, "");
}
