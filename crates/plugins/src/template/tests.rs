use clusterdns_contract::testing;
use clusterdns_wire::{Rcode, Rtype};

use super::DEF;
use super::text::Template;
use crate::testutil::{run, setup, setup_err};

#[test]
fn labels_print_as_go_prints_the_parse_tree() {
    for (text, label) in [
        (
            "{{ .Name }} 60 IN A {{ .Group.a}}",
            "{{.Name}} 60 IN A {{.Group.a}}",
        ),
        ("{{ index .Match 1 }}", "{{index .Match 1}}"),
        ("{{ parseInt .Group.b 16 8 }}", "{{parseInt .Group.b 16 8}}"),
        (
            "{{ index .Group \"x\" }} {{/* c */}}",
            "{{index .Group \"x\"}} ",
        ),
        ("a {{- .Name -}} b", "a{{.Name}}b"),
        (
            "{{ parseInt (index .Match 1) 10 8 }}",
            "{{parseInt (index .Match 1) 10 8}}",
        ),
    ] {
        let t = Template::parse(text).unwrap_or_else(|e| panic!("{text}: {}", e.msg));
        assert_eq!(t.label(), label);
    }
    for bad in [
        "{{ .Name | printf \"%s\" }}",
        "{{ if .Name }}x{{ end }}",
        "{{ $x := 1 }}",
        "{{ .Foo }}",
        "{{ foo }}",
        "{{ len .Match }}",
        "{{ .Name }",
        "{{ . }}",
    ] {
        assert!(Template::parse(bad).is_err(), "{bad} parsed");
    }
}

#[test]
fn setup_errors() {
    for (c, want) in [
        (". {\n template\n}", "Wrong argument count"),
        (". {\n template in A\n}", "invalid query class in"),
        (". {\n template IN X\n}", "invalid RR class X"),
        (
            ". {\n template IN A {\n  rcode NOPE\n }\n}",
            "unknown rcode NOPE",
        ),
        (
            ". {\n template IN A {\n  foo\n }\n}",
            "unexpected line ending after 'foo'",
        ),
        (
            ". {\n template IN A {\n  match\n }\n}",
            "Wrong argument count",
        ),
        (
            ". {\n template IN A {\n  match (\n }\n}",
            "could not parse regex: (",
        ),
        (
            ". {\n template IN A {\n  answer \"{{ nope }}\"\n }\n}",
            "could not compile template: {{ nope }}, template: answer:1: function \"nope\" not defined",
        ),
    ] {
        let e = setup_err(DEF, c);
        assert!(e.contains(want), "{c}: {e}");
    }
}

#[test]
fn answers_from_groups_and_falls_through() {
    let r = setup(
        DEF,
        ". {\n template IN A example {\n  match ^ip-(?P<a>[0-9]+)-(?P<b>[0-9]+)[.]example[.]$\n  answer \"{{ .Name }} 60 IN A 10.0.{{ .Group.a }}.{{ index .Match 2 }}\"\n  fallthrough\n }\n template ANY ANY example {\n  rcode NXDOMAIN\n }\n}",
    )
    .unwrap();
    let a = run(&r.plugins, &testing::query("IP-1-2.example.", Rtype::A));
    assert_eq!(a.answer, ["ip-1-2.example.\t60\tIN\tA\t10.0.1.2"]);
    assert!(a.header.aa());
    let a = run(&r.plugins, &testing::query("other.example.", Rtype::A));
    assert_eq!(a.rcode, Rcode::NXDOMAIN);
    let a = run(&r.plugins, &testing::query("other.org.", Rtype::A));
    assert_eq!(a.rcode, Rcode::SERVFAIL, "passed on");
}
