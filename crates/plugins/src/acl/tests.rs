use std::net::SocketAddr;

use clusterdns_contract::testing;
use clusterdns_contract::{Chain, Flow, Plugin, Request, ResponseWriter};
use clusterdns_wire::{Message, Name, Query, Rcode, Rtype};

use super::*;
use crate::testutil::{setup, setup_err};

/// Answers every query NOERROR with AA set: what the plugins behind
/// *acl* would do.
struct Answer;

impl Plugin for Answer {
    fn name(&self) -> &'static str {
        "answer"
    }
    fn query(&self, req: &Request<'_>, w: &mut ResponseWriter) -> Flow {
        let mut b = w.reply(req);
        b.set_aa(true);
        b.finish();
        Flow::Answered
    }
}

/// What the chain of `corefile`'s acl then [`Answer`] did with `name`/`qtype`
/// from `client`: `None` when nothing was written, else the rcode, the AA
/// bit and the extended error code.
fn outcome(corefile: &str, name: &str, qtype: Rtype, client: &str) -> Option<(Rcode, bool, u16)> {
    let mut plugins = setup(DEF, corefile).expect("setup").plugins;
    plugins.push(Arc::new(Answer));
    let chain = Chain::new(plugins);
    let pkt = testing::query(name, qtype);
    let q = Query::parse(&pkt).unwrap();
    let zone = Name::root();
    let mut req = testing::request(&q, &zone);
    req.client = SocketAddr::new(client.parse().unwrap(), 5300);
    let mut w = ResponseWriter::new();
    chain.run_sync(&req, &mut w).unwrap();
    if w.bytes().is_empty() {
        return None;
    }
    let m = Message::parse(w.bytes()).unwrap();
    let ede = m
        .opt()
        .and_then(|o| {
            o.option(w.bytes(), 15)
                .map(|v| u16::from_be_bytes([v[0], v[1]]))
        })
        .unwrap_or(0);
    Some((m.rcode(), m.header().aa(), ede))
}

const ALLOWED: Option<(Rcode, bool, u16)> = Some((Rcode::NOERROR, true, 0));
const BLOCK: Option<(Rcode, bool, u16)> = Some((Rcode::REFUSED, false, EDE_BLOCKED));
const FILTER: Option<(Rcode, bool, u16)> = Some((Rcode::NOERROR, false, EDE_FILTERED));

#[test]
fn policies_in_order() {
    let c = ". {\n acl {\n  allow net 192.168.1.0/24\n  block type A AAAA net 192.168.0.0/16\n  filter type MX\n  drop net 10.0.0.1 2001:db8::/32\n }\n}";
    for (name, t, ip, want) in [
        ("a.example.", Rtype::A, "192.168.1.9", ALLOWED),
        ("a.example.", Rtype::A, "192.168.2.9", BLOCK),
        ("a.example.", Rtype::TXT, "192.168.2.9", ALLOWED),
        ("a.example.", Rtype::MX, "192.168.2.9", FILTER),
        ("a.example.", Rtype::MX, "127.0.0.1", FILTER),
        ("a.example.", Rtype::A, "10.0.0.1", None),
        ("a.example.", Rtype::A, "10.0.0.2", ALLOWED),
        ("a.example.", Rtype::A, "2001:db8::5", None),
    ] {
        assert_eq!(outcome(c, name, t, ip), want, "{name} {t} {ip}");
    }
}

#[test]
fn rule_sets_by_zone() {
    let c = "example.org {\n acl a.example.org {\n  block net 192.168.1.0/24\n }\n acl {\n  filter net 10.0.0.0/8\n  allow\n  block\n }\n acl {\n  block\n }\n}";
    for (name, ip, want) in [
        ("x.a.example.org.", "192.168.1.1", BLOCK),
        ("x.b.example.org.", "192.168.1.1", ALLOWED),
        ("x.b.example.org.", "10.1.1.1", FILTER),
        ("x.a.example.org.", "10.1.1.1", FILTER),
    ] {
        assert_eq!(outcome(c, name, Rtype::A, ip), want, "{name} {ip}");
    }
    // A rule set with no policy matching passes to the next set.
    let c = ". {\n acl {\n  block net 10.0.0.0/8\n }\n acl {\n  filter type * net *\n }\n}";
    assert_eq!(outcome(c, "a.", Rtype::A, "10.0.0.1"), BLOCK);
    assert_eq!(outcome(c, "a.", Rtype::A, "11.0.0.1"), FILTER);
}

#[test]
fn counters_per_zone_and_listener() {
    let r = setup(
        DEF,
        ".:1053 {\n acl example.org {\n  block net 10.0.0.0/8\n }\n}",
    )
    .unwrap();
    let acl = &r.plugins[0];
    let pkt = testing::query("a.example.org.", Rtype::A);
    let q = Query::parse(&pkt).unwrap();
    let zone = Name::root();
    let mut req = testing::request(&q, &zone);
    req.server = "dns://:1053";
    for ip in ["10.0.0.1", "10.0.0.2", "11.0.0.1"] {
        req.client = SocketAddr::new(ip.parse().unwrap(), 1);
        let mut w = ResponseWriter::new();
        acl.query(&req, &mut w);
    }
    let text = r.shared.metrics.render();
    assert!(
        text.contains(
            "coredns_acl_blocked_requests_total{server=\"dns://:1053\",view=\"\",zone=\"example.org.\"} 2"
        ),
        "{text}"
    );
    assert!(
        text.contains("coredns_acl_allowed_requests_total{server=\"dns://:1053\",view=\"\"} 1"),
        "{text}"
    );
}

#[test]
fn setup_errors_as_coredns() {
    for (c, want) in [
        (
            ". {\n acl {\n  deny net 10.0.0.0/8\n }\n}",
            "unexpected token \"deny\"; expect 'allow', 'block', 'filter' or 'drop'",
        ),
        (
            ". {\n acl {\n  block foo\n }\n}",
            "unexpected token \"foo\"; expect 'type | net'",
        ),
        (
            ". {\n acl {\n  block type\n }\n}",
            "no token specified in \"type\" section",
        ),
        (
            ". {\n acl {\n  block NET\n }\n}",
            "no token specified in \"net\" section",
        ),
        (
            ". {\n acl {\n  block type a\n }\n}",
            "unexpected token \"a\"; expect legal QTYPE",
        ),
        (
            ". {\n acl {\n  block net 10.0.0.0/33\n }\n}",
            "illegal CIDR notation \"10.0.0.0/33\"",
        ),
        (
            ". {\n acl {\n  block net 10.0.0\n }\n}",
            "illegal CIDR notation \"10.0.0/32\"",
        ),
    ] {
        assert_eq!(setup_err(DEF, c), want, "{c}");
    }
    // `*` ends its section's list unread, as in CoreDNS.
    assert!(setup(DEF, ". {\n acl {\n  block type * bogus net * bogus\n }\n}").is_ok());
}
