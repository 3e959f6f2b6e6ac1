//! Unit tests of *rewrite*'s setup; its answers are tested against
//! CoreDNS in `bin/clusterdns/tests/rewrite.rs`.

use super::DEF;
use crate::testutil::{directives, setup, setup_err};

#[test]
fn a_block_is_one_rule_and_every_line_joins_one_handler() {
    let c = ". {\n rewrite stop {\n  name regex (.*)\\.a {1}.b\n  answer name (.*)\\.b {1}.a\n }\n rewrite type A AAAA\n}";
    let d = directives(c, "rewrite");
    assert_eq!(
        super::setup::words(&d[0]),
        [
            "stop", "name", "regex", "(.*)\\.a", "{1}.b", "answer", "name", "(.*)\\.b", "{1}.a"
        ]
    );
    assert_eq!(setup(DEF, c).unwrap().plugins.len(), 1);
}

#[test]
fn errors_name_the_line() {
    let e = setup(DEF, ". {\n whoami\n rewrite type A\n}")
        .err()
        .unwrap();
    assert_eq!(e.line, 3);
    assert_eq!(e.msg, "type rules must have exactly two arguments");
    assert_eq!(
        setup_err(
            DEF,
            ". {\n rewrite name suffix a b answer name x y answer auto\n}"
        ),
        "auto name answer rule cannot be combined with explicit name anwer rules"
    );
}

use clusterdns_contract::testing;
use clusterdns_wire::{Name, Query, Rtype};

use super::rules::{Pass, Rule, Text};

fn rules(lines: &[&str]) -> Vec<Rule> {
    lines
        .iter()
        .map(|l| {
            let words: Vec<String> = l.split_whitespace().map(String::from).collect();
            super::setup::rule(&words).expect("rule")
        })
        .collect()
}

/// The name the rules leave for `qname`, or the bad name they made.
fn run(rules: &[Rule], qname: &str) -> Result<(String, bool), String> {
    let pkt = testing::query(qname, Rtype::A);
    let q = Query::parse(&pkt).expect("query");
    let zone = Name::root();
    let req = testing::request(&q, &zone);
    let mut pass = Pass::new(&req);
    match pass.run(rules, &req) {
        Ok(revert) => Ok((pass.name().to_string(), revert)),
        Err(super::rules::BadName(n)) => Err(n),
    }
}

#[test]
fn names_are_matched_lowercase_with_their_dot() {
    let r = rules(&["name prefix WWW a", "name suffix .example.org. .test."]);
    assert_eq!(
        run(&r, "WWW.Example.ORG"),
        Ok(("a.example.org.".into(), true))
    );
    assert_eq!(run(&r, "x.example.org"), Ok(("x.test.".into(), true)));
    assert_eq!(run(&r, "wwwx.example"), Ok(("wwwx.example.".into(), false)));
}

#[test]
fn continue_goes_on_and_stop_ends() {
    let r = rules(&[
        "continue name suffix .one. .two.",
        "name suffix .two. .three.",
        "name suffix .three. .four.",
    ]);
    assert_eq!(run(&r, "a.one"), Ok(("a.three.".into(), true)));
    // A continue rule without answer rules leaves nothing to revert.
    let r = rules(&["continue name prefix a b"]);
    assert_eq!(run(&r, "a.x"), Ok(("b.x.".into(), false)));
}

#[test]
fn regex_groups_fill_the_replacement() {
    let r = rules(&[r"name regex (.*)-(us-west-1)\.example\.org {1}.service.{2}.consul"]);
    assert_eq!(
        run(&r, "ftp-us-west-1.example.org"),
        Ok(("ftp.service.us-west-1.consul.".into(), true))
    );
    let r = rules(&[r"name regex (.*)\.bad {1}..x"]);
    assert_eq!(run(&r, "a.bad"), Err("a..x.".into()));
}

#[test]
fn text_of_a_name_escapes_as_miekg() {
    let plain = Name::from_ascii("Www.Example-1.org.").unwrap();
    assert_eq!(Text::of(&plain).as_str(), "Www.Example-1.org.");
    let odd = Name::from_ascii("a\\ b.c\\.d.").unwrap();
    assert_eq!(Text::of(&odd).as_str(), "a\\ b.c\\.d.");
    assert_eq!(Text::of(&Name::root()).as_str(), ".");
}
