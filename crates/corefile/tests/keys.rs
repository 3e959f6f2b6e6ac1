//! Server keys `[SCHEME://]ZONE[:PORT]`, CIDR reverse zones, and plugin zone arguments.

use std::path::Path;
use std::sync::Arc;

use clusterdns_corefile::{
    Scheme, Token, normalize_zone, normalize_zones, parse_key, reverse_zones_for_cidr,
};

fn tok(text: &str) -> Token {
    Token {
        text: text.to_string(),
        file: Arc::from(Path::new("Corefile")),
        line: 7,
    }
}

#[test]
fn valid_keys() {
    let cases: &[(&str, Scheme, &[&str], Option<u16>)] = &[
        (".", Scheme::Dns, &["."], None),
        (".:53", Scheme::Dns, &["."], Some(53)),
        (
            "example.org:1053",
            Scheme::Dns,
            &["example.org."],
            Some(1053),
        ),
        ("Example.ORG.", Scheme::Dns, &["example.org."], None),
        (
            "cluster.local:53",
            Scheme::Dns,
            &["cluster.local."],
            Some(53),
        ),
        ("dns://.:53", Scheme::Dns, &["."], Some(53)),
        ("tls://example.org", Scheme::Tls, &["example.org."], None),
        ("quic://.:8853", Scheme::Quic, &["."], Some(8853)),
        ("grpc://.", Scheme::Grpc, &["."], None),
        ("https://.:8443", Scheme::Https, &["."], Some(8443)),
        ("https3://.", Scheme::Https3, &["."], None),
        ("unix://sock", Scheme::Unix, &["sock."], None),
        (".:0", Scheme::Dns, &["."], Some(0)),
        (".:00053", Scheme::Dns, &["."], Some(53)),
        // Go's Atoi takes a sign.
        (".:+53", Scheme::Dns, &["."], Some(53)),
        (
            "_tcp.example.org",
            Scheme::Dns,
            &["_tcp.example.org."],
            None,
        ),
        // RFC 2317 classless delegation names are not CIDRs.
        (
            "0/26.2.0.192.in-addr.arpa",
            Scheme::Dns,
            &["0/26.2.0.192.in-addr.arpa."],
            None,
        ),
        ("in-addr.arpa:53", Scheme::Dns, &["in-addr.arpa."], Some(53)),
        // CIDR on an octet / nibble boundary: one zone; host bits are ignored.
        ("10.0.0.0/24", Scheme::Dns, &["0.0.10.in-addr.arpa."], None),
        (
            "10.1.2.3/8:53",
            Scheme::Dns,
            &["10.in-addr.arpa."],
            Some(53),
        ),
        (
            "192.168.1.1/32",
            Scheme::Dns,
            &["1.1.168.192.in-addr.arpa."],
            None,
        ),
        ("0.0.0.0/0", Scheme::Dns, &["in-addr.arpa."], None),
        (
            "2001:db8::/32",
            Scheme::Dns,
            &["8.b.d.0.1.0.0.2.ip6.arpa."],
            None,
        ),
        (
            "2001:db8::/36:1053",
            Scheme::Dns,
            &["0.8.b.d.0.1.0.0.2.ip6.arpa."],
            Some(1053),
        ),
        ("fd00::/8", Scheme::Dns, &["d.f.ip6.arpa."], None),
        // Not on a boundary: rounded up, every zone in between.
        (
            "10.0.0.0/23",
            Scheme::Dns,
            &["0.0.10.in-addr.arpa.", "1.0.10.in-addr.arpa."],
            None,
        ),
        (
            "172.16.0.0/15",
            Scheme::Dns,
            &["16.172.in-addr.arpa.", "17.172.in-addr.arpa."],
            None,
        ),
        (
            "fd00::/7",
            Scheme::Dns,
            &["c.f.ip6.arpa.", "d.f.ip6.arpa."],
            None,
        ),
        (
            "2001:db8::/34",
            Scheme::Dns,
            &[
                "0.8.b.d.0.1.0.0.2.ip6.arpa.",
                "1.8.b.d.0.1.0.0.2.ip6.arpa.",
                "2.8.b.d.0.1.0.0.2.ip6.arpa.",
                "3.8.b.d.0.1.0.0.2.ip6.arpa.",
            ],
            None,
        ),
    ];
    for (text, scheme, zones, port) in cases {
        let key = parse_key(&tok(text)).unwrap_or_else(|e| panic!("{text}: {e}"));
        let got: Vec<&str> = key.zones.iter().map(String::as_str).collect();
        assert_eq!(
            (key.scheme, got.as_slice(), key.port),
            (*scheme, *zones, *port),
            "{text}"
        );
        assert_eq!(key.token.text, *text);
    }
}

#[test]
fn cidr_splits_into_many_zones() {
    let key = parse_key(&tok("10.0.0.0/27")).unwrap();
    assert_eq!(key.zones.len(), 32);
    assert_eq!(key.zones[0], "0.0.0.10.in-addr.arpa.");
    assert_eq!(key.zones[31], "31.0.0.10.in-addr.arpa.");
    assert_eq!(
        reverse_zones_for_cidr("10.0.0.0".parse().unwrap(), 17).len(),
        128
    );
    assert_eq!(
        reverse_zones_for_cidr("10.0.128.0".parse().unwrap(), 17)[0],
        "128.0.10.in-addr.arpa."
    );
    assert_eq!(reverse_zones_for_cidr("::".parse().unwrap(), 125).len(), 8);
    assert_eq!(
        reverse_zones_for_cidr("::".parse().unwrap(), 0),
        ["ip6.arpa."]
    );
    // A prefix past the address length counts as the full length.
    assert_eq!(
        reverse_zones_for_cidr("1.2.3.4".parse().unwrap(), 99),
        ["4.3.2.1.in-addr.arpa."]
    );
}

#[test]
fn invalid_keys() {
    let long = format!("{}.org", "a.".repeat(130));
    let long_msg = format!("specified zone is too long: {} > 255", long.len());
    let label = format!("{}.org", "a".repeat(64));
    let label_msg = format!("zone is not a valid domain name: {label}");
    let cases: &[(&str, &str)] = &[
        (".:", "expecting data after last colon: \".:\""),
        (
            "dns://example.org:",
            "expecting data after last colon: \"example.org:\"",
        ),
        (".:65536", "address 65536: invalid port"),
        (".:-1", "address -1: invalid port"),
        (
            "example.org:abc",
            "zone is not a valid domain name: example.org:abc",
        ),
        ("", "zone is not a valid domain name: "),
        ("a..b", "zone is not a valid domain name: a..b"),
        (
            ".example.org",
            "zone is not a valid domain name: .example.org",
        ),
        (
            "foo://example.org",
            "zone is not a valid domain name: foo://example.org",
        ),
        ("[::1]:53", "zone is not a valid domain name: [::1]"),
        ("::/0", "invalid CIDR ::/0"),
        ("0::/8", "invalid CIDR 0::/8"),
        ("::ffff:10.0.0.0/104", "invalid CIDR ::ffff:10.0.0.0/104"),
        (&long, &long_msg),
        (&label, &label_msg),
    ];
    for (text, msg) in cases {
        let err = parse_key(&tok(text)).expect_err(text);
        assert_eq!((err.line, err.msg.as_str()), (7, *msg), "{text}");
    }
}

#[test]
fn schemes() {
    for scheme in Scheme::ALL {
        let text = format!("{scheme}example.org");
        assert_eq!(Scheme::split(&text), (scheme, "example.org"));
    }
    assert_eq!(Scheme::Https3.to_string(), "https3://");
    assert_eq!(Scheme::split("DNS://x"), (Scheme::Dns, "DNS://x"));
    let ports: Vec<_> = Scheme::ALL.iter().map(|s| s.default_port()).collect();
    assert_eq!(
        ports,
        [
            Some(53),
            Some(853),
            Some(853),
            Some(443),
            Some(443),
            Some(443),
            None
        ]
    );
    assert_eq!(
        parse_key(&tok("tls://.")).unwrap().port_or_default(),
        Some(853)
    );
    assert_eq!(
        parse_key(&tok("tls://.:5353")).unwrap().port_or_default(),
        Some(5353)
    );
}

#[test]
fn plugin_zone_arguments() {
    assert_eq!(normalize_zone("Cluster.Local"), Ok("cluster.local.".into()));
    assert_eq!(normalize_zone("10.0.0.0/8"), Ok("10.in-addr.arpa.".into()));
    assert_eq!(
        normalize_zone("dns://example.org:53"),
        Ok("example.org.".into())
    );
    assert_eq!(
        normalize_zone("10.0.0.0/23"),
        Err("10.0.0.0/23 expands to 2 reverse zones".to_string())
    );
    assert_eq!(normalize_zones("10.0.0.0/23").unwrap().len(), 2);
    assert!(normalize_zone("a..b").is_err());
    // An escaped final dot is not the root label.
    assert_eq!(normalize_zone("a\\."), Ok("a\\..".to_string()));
}
