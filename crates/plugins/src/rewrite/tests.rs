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
