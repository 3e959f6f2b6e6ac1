use std::net::SocketAddr;

use clusterdns_contract::{Proto, testing};
use clusterdns_wire::{Name, Query, Rtype};

use super::*;

fn compile_err(src: &str) -> String {
    match Program::compile(src) {
        Ok(_) => panic!("{src:?} compiled"),
        Err(e) => e.0,
    }
}

/// Whether `src` is true for `name`/`qtype` from `client` over `proto`.
fn truth(src: &str, name: &str, qtype: Rtype, client: &str, proto: Proto) -> bool {
    let p = Program::compile(src).unwrap_or_else(|e| panic!("{src}: {}", e.0));
    let pkt = testing::query_edns(name, qtype, 1232, true);
    let q = Query::parse(&pkt).unwrap();
    let zone = Name::root();
    let mut req = testing::request(&q, &zone);
    req.client = client.parse::<SocketAddr>().unwrap();
    req.proto = proto;
    p.is_true(&req)
}

fn t(src: &str) -> bool {
    truth(
        src,
        "Www.Example.COM.",
        Rtype::AAAA,
        "10.0.0.7:4242",
        Proto::Udp,
    )
}

#[test]
fn the_documented_functions_and_operators() {
    for src in [
        "incidr(client_ip(), '10.0.0.0/24')",
        "!incidr(client_ip(), '10.0.1.0/24')",
        "incidr('10.0.0.7', '10.0.0.0/8')",
        "client_ip() == '10.0.0.7'",
        "port() == '4242'",
        "name() == 'www.example.com.'",
        r"name() matches '^www\\.example\\.com\\.$'",
        "name() not matches '^abc'",
        "type() == 'AAAA'",
        "type() in ['A', 'AAAA']",
        "type() not in ['MX']",
        "class() == 'IN' && proto() == 'udp'",
        "do() and bufsize() == 1232",
        "not (type() == 'A') or false",
        "(type() == 'A' && name() == 'x.') || client_ip() == '10.0.0.7'",
        "name() endsWith 'example.com.' and name() startsWith 'www' and name() contains 'ample'",
        "size() > 20 && id() >= 0 && opcode() == 0",
        "server_ip() == '127.0.0.1' && server_port() == '53'",
        "metadata('view/name') == ''",
        "len(name()) == 16 && upper(type()) == 'AAAA' && lower('A') == 'a'",
        "1 + 2 * 3 == 7 && 7 % 4 == 3 && 1 / 2 == 0.5 && -1 < 0",
        "'a' + 'b' == 'ab' && 'a' < 'b'",
        "type() == 'AAAA' ? true : false",
    ] {
        assert!(t(src), "{src}");
    }
    for src in [
        "incidr(client_ip(), '10.0.1.0/24')",
        "incidr(client_ip(), 'bogus')",
        "incidr('bogus', '10.0.0.0/8')",
        "type() == 'A'",
        "type() in []",
        "name() matches 'EXAMPLE'",
        "proto() == 'tcp'",
        "type() == 'A' ? true : 1",
        // Not a bool: false.
        "type()",
        "1",
    ] {
        assert!(!t(src), "{src}");
    }
    assert!(truth(
        "incidr(client_ip(), '2001:db8::/32') && proto() == 'tcp' && bufsize() == 65535",
        "a.",
        Rtype::A,
        "[2001:db8::9]:53",
        Proto::Tcp
    ));
    assert!(truth(
        "client_ip() == '2001:db8::9'",
        "a.",
        Rtype::A,
        "[2001:db8::9]:53",
        Proto::Udp
    ));
}

#[test]
fn compile_errors_read_as_expr_lang() {
    for (src, want) in [
        ("foo()", "unknown name foo (1:1)\n | foo()\n | ^"),
        ("bogus", "unknown name bogus (1:1)\n | bogus\n | ^"),
        (
            "type() == 1",
            "invalid operation: == (mismatched types string and int) (1:8)\n | type() == 1\n | .......^",
        ),
        (
            "incidr(client_ip())",
            "not enough arguments to call incidr (1:1)\n | incidr(client_ip())\n | ^",
        ),
        (
            "name() matches '['",
            "error parsing regexp: missing closing ]: `[` (1:8)\n | name() matches '['\n | .......^",
        ),
        (
            "type() ==",
            "unexpected token EOF (1:9)\n | type() ==\n | ........^",
        ),
        (
            "1 + 'a'",
            "invalid operation: + (mismatched types int and string) (1:3)\n | 1 + 'a'\n | ..^",
        ),
        (
            "not type() == 'A'",
            "invalid operation: not (mismatched type string) (1:1)\n | not type() == 'A'\n | ^",
        ),
        ("", "unexpected token EOF"),
    ] {
        assert_eq!(compile_err(src), want, "{src}");
    }
}
