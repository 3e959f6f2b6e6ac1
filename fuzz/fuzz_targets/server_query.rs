//! Feeds arbitrary packets through the server's whole synchronous pass
//! (parse, checks, zone selection, the plugin chains, scrub) with a fixed
//! Corefile of real plugins: kubernetes (from the plugin's test objects),
//! file, hosts, template, rewrite, chaos, whoami, any, acl, loadbalance,
//! erratic.
//! The packet's ID picks the transport (bit 0: TCP) and the client's
//! family (bit 1: IPv6).
//! Checks that:
//! - nothing panics;
//! - every reply parses as a message, is a response with the query's ID,
//!   fits what the client accepts (512, the query's EDNS size, or 65535 on
//!   TCP; only a truncated reply with no records may be larger), and each
//!   of its records decodes;
//! - a reply to a query that parses asks its question back, unless it is
//!   FORMERR or NOTIMP (the header alone, as CoreDNS sends them);
//! - at start-up, the Corefile answers a name of each kind of data it holds
//!   (so the packets reach loaded plugins, not empty ones).
#![no_main]

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use clusterdns_contract::metrics::Registry;
use clusterdns_contract::{Proto, ResponseWriter};
use clusterdns_server::testing::{Served, serve_sync};
use clusterdns_server::{ConfigSource, Instance, Mux};
use clusterdns_wire::{Message, Query, Rcode};
use libfuzzer_sys::fuzz_target;

const COREFILE: &str = r#"cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {
 kubernetes cluster.local in-addr.arpa ip6.arpa {
  snapshot cluster.yaml
  pods insecure
  fallthrough in-addr.arpa ip6.arpa
  ttl 30
 }
 loadbalance
 whoami
}
example.org:53 {
 file db.example.org
}
erratic.test:53 {
 erratic {
  drop 0
  large
 }
}
.:53 {
 acl {
  block type AXFR
  allow
 }
 rewrite name suffix .rw.test. .example.org.
 any
 chaos clusterdns-fuzz alice bob
 hosts {
  192.0.2.1 h.test
  2001:db8::1 h.test
  fallthrough
 }
 template IN A tmpl.test {
  match ^(?P<a>[0-9]+)\.tmpl\.test\.$
  answer "{{ .Name }} 60 IN A 192.0.2.{{ .Group.a }}"
  fallthrough
 }
 whoami
}
"#;

const ZONE: &str = "$ORIGIN example.org.\n$TTL 300\n\
@ IN SOA ns1 hostmaster 1 7200 3600 1209600 300\n@ IN NS ns1\n@ IN MX 10 mx1\n\
ns1 IN A 192.0.2.2\nmx1 IN A 192.0.2.25\nwww IN A 192.0.2.10\nwww IN A 192.0.2.11\n\
www IN AAAA 2001:db8::10\nalias IN CNAME chain\nchain IN CNAME www\n*.wild IN A 192.0.2.20\n\
sub IN NS ns.sub\nns.sub IN A 192.0.2.53\n@ IN TXT \"v=fuzz\" \"second string\"\n";

const OBJECTS: &str = include_str!("../../crates/plugins/src/kubernetes/testdata/objects.yaml");

/// The instance, built once: setting up the plugins per input would cost
/// more than the query. Nothing in this Corefile keeps state between
/// queries that changes a reply (no cache; erratic counts the queries but
/// drops, delays and truncates none), so an input's reply does not depend
/// on the others.
/// The instance lives as long as the process. Its start-up hooks are not
/// `Sync`, so it cannot sit in a static: a thread-local keeps it
/// (libFuzzer runs every input on one thread), and through it LeakSanitizer
/// still sees the instance as reachable, so a leak it reports is one that a
/// query made.
fn mux() -> &'static Mux {
    thread_local! {
        static INSTANCE: &'static Instance = Box::leak(Box::new(build()));
    }
    static CHECKED: OnceLock<()> = OnceLock::new();
    let i: &'static Instance = INSTANCE.with(|i| *i);
    let mux = &i.listeners[0].mux;
    CHECKED.get_or_init(|| check(mux));
    mux
}

/// The Corefile's instance, its data written to a temporary directory.
fn build() -> Instance {
    let dir = std::env::temp_dir().join(format!("clusterdns-fuzz-server-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(dir.join("db.example.org"), ZONE).expect("zone");
    std::fs::write(dir.join("cluster.yaml"), OBJECTS).expect("objects");
    let source = ConfigSource::Text {
        name: dir.join("Corefile"),
        text: COREFILE.to_string(),
    };
    let i = Instance::build(
        &source,
        &clusterdns_plugins::registry(),
        53,
        Arc::new(Registry::new()),
    )
    .unwrap_or_else(|e| panic!("fuzz Corefile: {e}"));
    // One port: the wildcard listeners (IPv4, and IPv6 where it binds)
    // share its server blocks; the first serves every family here.
    assert!(!i.listeners.is_empty(), "a listener");
    i
}

/// The start-up hooks are not run (they start reload tasks, which need a
/// runtime): the data the target relies on is loaded at setup, which these
/// answers check once.
fn check(mux: &Mux) {
    for name in [
        "svc1.kplug.svc.cluster.local",
        "www.example.org",
        "h.test",
        "7.tmpl.test",
        "x.erratic.test",
    ] {
        let reply = ask(mux, name);
        let m = Message::parse(&reply).expect("a reply");
        assert!(
            m.rcode() == Rcode::NOERROR && m.header().ancount > 0,
            "the fuzz Corefile answers no A for {name}"
        );
    }
}

/// A query for `name` A over UDP, as a client on 127.0.0.1 sends it.
fn ask(mux: &Mux, name: &str) -> Vec<u8> {
    let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in name.split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    let mut w = ResponseWriter::new();
    let served = serve_sync(
        mux,
        &q,
        "127.0.0.1:40000".parse().expect("address"),
        "127.0.0.1:53".parse().expect("address"),
        Proto::Udp,
        &mut w,
    );
    assert_eq!(served, Served::Reply, "{name} answered synchronously");
    w.bytes().to_vec()
}

fuzz_target!(|data: &[u8]| {
    let mux = mux();
    let id = (data.len() >= 2).then(|| u16::from_be_bytes([data[0], data[1]]));
    let bits = id.unwrap_or(0);
    let proto = if bits & 1 == 1 {
        Proto::Tcp
    } else {
        Proto::Udp
    };
    let (client, local): (SocketAddr, SocketAddr) = if bits & 2 == 2 {
        ("[::1]:40001".parse().unwrap(), "[::1]:53".parse().unwrap())
    } else {
        (
            "127.0.0.1:40000".parse().unwrap(),
            "127.0.0.1:53".parse().unwrap(),
        )
    };
    let mut w = ResponseWriter::new();
    if serve_sync(mux, data, client, local, proto, &mut w) != Served::Reply {
        return;
    }
    let reply = w.bytes();
    let m = Message::parse(reply).unwrap_or_else(|e| panic!("reply does not parse: {e:?}"));
    let h = m.header();
    assert!(h.flags & 0x8000 != 0, "QR set");
    if let Some(id) = id {
        assert_eq!(h.id, id, "reply ID");
    }
    let q = Query::parse(data).ok();
    let limit = match (proto, q.as_ref().and_then(|q| q.edns())) {
        (Proto::Tcp, _) => 65535,
        (Proto::Udp, Some(e)) => usize::from(e.udp_size).max(512),
        (Proto::Udp, None) => 512,
    };
    let truncated_empty = h.flags & 0x0200 != 0 && h.ancount == 0 && h.nscount == 0;
    assert!(
        reply.len() <= limit || truncated_empty,
        "{} bytes over the client's {limit}",
        reply.len()
    );
    for view in m.records() {
        view.to_owned_record(&m)
            .unwrap_or_else(|e| panic!("a record of the reply does not decode: {e:?}"));
    }
    // FORMERR and NOTIMP (an opcode other than QUERY and NOTIFY) are
    // the header alone, as miekg's rejections are (CoreDNS 1.14.7 answers
    // an UPDATE with NOTIMP and QUERY: 0).
    if let Some(q) = q
        && m.rcode() != Rcode::FORMERR
        && m.rcode() != Rcode::NOTIMP
    {
        let (name, qtype, qclass) = m.question().expect("reply has the question");
        assert_eq!((qtype, qclass), (q.qtype(), q.qclass()));
        assert!(name.eq_ignore_case(q.qname()), "question name");
    }
});
