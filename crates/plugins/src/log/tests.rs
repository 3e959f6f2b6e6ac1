use std::net::SocketAddr;

use clusterdns_contract::testing;
use clusterdns_contract::{Chain, Proto, ResponseWriter};
use clusterdns_wire::{Name, Query, Rtype};

use super::*;
use crate::testutil::{setup, setup_err};

fn rules(corefile: &str) -> Vec<Rule> {
    let owned = crate::testutil::directives(corefile, "log");
    let dirs: Vec<&Directive> = owned.iter().collect();
    parse(&dirs).unwrap()
}

#[test]
fn setup_accepts_every_form() {
    let r = rules(". {\n log\n}");
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].scope.to_string(), ".");
    assert_eq!(r[0].classes, class::ALL);
    assert_eq!(r[0].format, Format::parse(COMMON_LOG_FORMAT));

    let r = rules(". {\n log Example.org\n}");
    assert_eq!(r[0].scope.to_string(), "example.org.");

    // Two names, no format: both default.
    let r = rules(". {\n log a.org b.org\n}");
    assert_eq!(r.len(), 2);
    assert_eq!(r[1].format, Format::parse(COMMON_LOG_FORMAT));

    // Names then a format with {combined}.
    let r = rules(". {\n log a.org b.org \"{combined} x\"\n}");
    assert_eq!(r.len(), 2);
    assert_eq!(
        r[0].format,
        Format::parse(&format!("{COMBINED_LOG_FORMAT} x"))
    );

    // Classes, OR-ed over lines and applied to every name of the line.
    let r = rules(". {\n log . {\n class denial\n class error\n }\n}");
    assert_eq!(r[0].classes, class::DENIAL | class::ERROR);
    let r = rules(". {\n log a. b. {\n class success all\n }\n}");
    assert_eq!(r[1].classes, class::ALL);

    // Several log lines: rules in order.
    let r = rules(". {\n log a.\n log\n}");
    assert_eq!(r.len(), 2);
    assert_eq!(r[1].scope.to_string(), ".");
    assert!(setup(DEF, ". {\n log\n}").is_ok());
}

#[test]
fn setup_rejects() {
    let cases = [
        (
            ". {\n log {\n class\n }\n}",
            "Wrong argument count or unexpected line ending after 'class'",
        ),
        (". {\n log {\n class bad\n }\n}", "invalid Class: bad"),
        (". {\n log {\n format x\n }\n}", "unknown property 'format'"),
    ];
    for (c, want) in cases {
        assert_eq!(setup_err(DEF, c), want, "{c}");
    }
}

#[test]
fn format_parsing_matches_coredns_replacer() {
    // Unknown placeholders and stray braces stay literal.
    let f = Format::parse("A } {foo} {type} {/meta} {");
    let pkt = testing::query("x.org.", Rtype::MX);
    let q = Query::parse(&pkt).unwrap();
    let zone = Name::root();
    let req = testing::request(&q, &zone);
    let mut out = Vec::new();
    f.render(&req, &[], 0, &mut out);
    assert_eq!(String::from_utf8(out).unwrap(), "A } {foo} MX - {");
}

fn render(fmt: &str, req: &Request<'_>, reply: &[u8]) -> String {
    let mut out = Vec::new();
    let rsize = clusterdns_wire::uncompressed_len(reply).unwrap_or(reply.len());
    Format::parse(fmt).render(req, reply, rsize, &mut out);
    String::from_utf8(out).unwrap()
}

#[test]
fn default_format_renders_every_field() {
    let pkt = testing::query_edns("Example.ORG.", Rtype::AAAA, 1232, true);
    let q = Query::parse(&pkt).unwrap();
    let zone = Name::root();
    let mut req = testing::request(&q, &zone);
    req.client = "[2001:db8::1]:40000".parse::<SocketAddr>().unwrap();
    req.proto = Proto::Tcp;
    let mut w = ResponseWriter::new();
    let mut b = w.reply(&req);
    b.set_aa(true);
    b.set_rcode(Rcode::NXDOMAIN);
    b.finish();
    let line = render(COMMON_LOG_FORMAT, &req, w.bytes());
    let (head, dur) = line.rsplit_once(' ').unwrap();
    assert_eq!(
        head,
        format!(
            "[2001:db8::1]:40000 - 4660 \"AAAA IN example.org. tcp {} true 65535\" NXDOMAIN qr,aa,rd {}",
            pkt.len(),
            w.bytes().len()
        )
    );
    // Go's strconv.FormatFloat(secs, 'f', -1, 64) + "s": no exponent.
    assert!(dur.ends_with('s') && !dur.contains('e'), "{dur}");
    let secs: f64 = dur.trim_end_matches('s').parse().unwrap();
    assert!((0.0..5.0).contains(&secs), "{dur}");

    // UDP: bufsize is the EDNS size; without EDNS 512 and do=false.
    req.proto = Proto::Udp;
    assert_eq!(
        render("{>bufsize} {>do} {>opcode} {local}", &req, w.bytes()),
        "1232 true 0 127.0.0.1"
    );
    let pkt = testing::query("a.", Rtype(65280));
    let q = Query::parse(&pkt).unwrap();
    let req = testing::request(&q, &zone);
    assert_eq!(
        render(
            "{type} {class} {>bufsize} {>do} {remote} {rcode} {>rflags} {rsize}",
            &req,
            &[]
        ),
        "TYPE65280 IN 512 false 127.0.0.1 - - 0"
    );
}

#[test]
fn classify_like_coredns() {
    let pkt = testing::query("example.org.", Rtype::A);
    let q = Query::parse(&pkt).unwrap();
    let zone = Name::root();
    let req = testing::request(&q, &zone);
    let mut w = ResponseWriter::new();
    w.write_error(&req, Rcode::NXDOMAIN);
    assert_eq!(classify(&req, w.bytes()), class::DENIAL);
    w.write_error(&req, Rcode::SERVFAIL);
    assert_eq!(classify(&req, w.bytes()), class::ERROR);
    w.write_error(&req, Rcode::REFUSED);
    assert_eq!(classify(&req, w.bytes()), class::ERROR);
    w.write_error(&req, Rcode::NOERROR);
    assert_eq!(classify(&req, w.bytes()), class::SUCCESS);
    let mut b = w.reply(&req);
    b.push(
        clusterdns_wire::Section::Authority,
        &Name::from_ascii("example.org.").unwrap(),
        clusterdns_wire::Class::IN,
        60,
        &clusterdns_wire::RData::Soa {
            mname: &Name::from_ascii("ns.example.org.").unwrap(),
            rname: &Name::from_ascii("h.example.org.").unwrap(),
            serial: 1,
            refresh: 2,
            retry: 3,
            expire: 4,
            minimum: 5,
        },
    )
    .unwrap();
    b.finish();
    assert_eq!(classify(&req, w.bytes()), class::DENIAL, "NODATA");
}

#[test]
fn class_filter_and_scope_select_the_rule() {
    // Only denial is logged under example.org; nothing else matches.
    let r = setup(DEF, ". {\n log example.org {\n class denial\n }\n}").unwrap();
    let chain = Chain::new(r.plugins.clone());
    let pkt = testing::query("a.example.org.", Rtype::A);
    let q = Query::parse(&pkt).unwrap();
    let zone = Name::root();
    let req = testing::request(&q, &zone);
    let mut w = ResponseWriter::new();
    // Runs out: SERVFAIL (error class): not logged, and no panic.
    let o = chain.run_sync(&req, &mut w).unwrap();
    assert_eq!(o.rcode, Rcode::SERVFAIL);
}
