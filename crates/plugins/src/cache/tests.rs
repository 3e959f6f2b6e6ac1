//! Unit tests of the cache with a controllable clock and a fake next
//! plugin.

use std::sync::atomic::{AtomicU32, AtomicU64};

use clusterdns_contract::metrics::Registry;
use clusterdns_contract::{Chain, Plugin, testing};
use clusterdns_wire::{Class, Header, Message, MessageBuilder, Query, RData, Rtype, Section};

use super::insert::answers_question;
use super::*;

#[derive(Debug, Default)]
struct ManualClock(AtomicU64);

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// A next plugin answering `A 192.0.2.1` (TTL `ttl`), or NXDOMAIN with an
/// SOA for names starting with `nx`, and counting its calls.
#[derive(Debug)]
struct Upstream {
    ttl: u32,
    calls: AtomicU32,
    with_opt: bool,
}

impl Plugin for Upstream {
    fn name(&self) -> &'static str {
        "upstream"
    }
    fn query(&self, req: &Request<'_>, w: &mut ResponseWriter) -> Flow {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let nx = req
            .qname_lower()
            .first_label()
            .is_some_and(|l| l.starts_with(b"nx"));
        let mut b = w.reply(req);
        b.set_ra(true);
        b.set_ad(true);
        if nx {
            b.set_rcode(Rcode::NXDOMAIN);
            let zone = Name::root();
            let ns = Name::from_ascii("ns.").expect("n");
            let soa = RData::Soa {
                mname: &ns,
                rname: &ns,
                serial: 1,
                refresh: 2,
                retry: 3,
                expire: 4,
                minimum: 60,
            };
            b.push(Section::Authority, &zone, Class::IN, self.ttl, &soa)
                .expect("soa");
        } else {
            b.push(
                Section::Answer,
                req.qname(),
                Class::IN,
                self.ttl,
                &RData::A([192, 0, 2, 1].into()),
            )
            .expect("a");
        }
        if self.with_opt {
            b.push_opt(1232, false, &[]).expect("opt");
        }
        b.finish();
        Flow::Answered
    }
}

struct Rig {
    clock: Arc<ManualClock>,
    up: Arc<Upstream>,
    chain: Chain,
    registry: Arc<Registry>,
}

fn rig(cfg: Config, ttl: u32) -> Rig {
    let clock = Arc::new(ManualClock::default());
    let registry = Arc::new(Registry::new());
    let inner = setup::build(
        cfg,
        clock.clone(),
        Metrics::new(&registry, ".".into(), String::new()),
    );
    let up = Arc::new(Upstream {
        ttl,
        calls: AtomicU32::new(0),
        with_opt: true,
    });
    let chain = Chain::new(vec![
        Arc::new(Cache { inner }) as Arc<dyn Plugin>,
        up.clone() as Arc<dyn Plugin>,
    ]);
    Rig {
        clock,
        up,
        chain,
        registry,
    }
}

impl Rig {
    fn ask(&self, pkt: &[u8]) -> Vec<u8> {
        let q = Query::parse(pkt).expect("query");
        let zone = Name::root();
        let req = testing::request(&q, &zone);
        let mut w = ResponseWriter::new();
        self.chain.run_sync(&req, &mut w).expect("sync");
        w.bytes().to_vec()
    }
    fn calls(&self) -> u32 {
        self.up.calls.load(Ordering::SeqCst)
    }
    fn advance(&self, ms: u64) {
        self.clock.0.fetch_add(ms, Ordering::SeqCst);
    }
}

/// The server mirrors the client's OPT at a position the writer knows: a
/// hit and a stored reply whose OPT was stripped both tell it there is
/// none; a reply that keeps an OPT (not the last record) leaves it to look.
#[test]
fn stored_replies_and_hits_say_they_have_no_opt() {
    use clusterdns_contract::OptAt;
    let r = rig(Config::default(), 100);
    let pkt = testing::query("www.example.org.", Rtype::A);
    let q = Query::parse(&pkt).expect("query");
    let zone = Name::root();
    let req = testing::request(&q, &zone);
    r.ask(&pkt);
    let mut w = ResponseWriter::new();
    r.chain.run_sync(&req, &mut w).expect("sync");
    assert_eq!(r.calls(), 1, "a hit");
    assert_eq!(w.opt(), OptAt::Absent, "hit");
    // A reply from elsewhere (an upstream), OPT last or not.
    let other = testing::query("other.example.org.", Rtype::A);
    let oq = Query::parse(&other).expect("query");
    let oreq = testing::request(&oq, &zone);
    let outcome = Outcome {
        rcode: Rcode::NOERROR,
        plugin: "upstream",
        error: None,
    };
    for opt_last in [true, false] {
        let mut msg = Vec::new();
        let mut b = MessageBuilder::reply_to(&oq, &mut msg);
        let a = RData::A([192, 0, 2, 9].into());
        b.push(Section::Answer, oq.qname(), Class::IN, 60, &a)
            .expect("a");
        if !opt_last {
            b.push_opt(1232, false, &[]).expect("opt");
        }
        b.push(Section::Additional, oq.qname(), Class::IN, 60, &a)
            .expect("a");
        if opt_last {
            b.push_opt(1232, false, &[]).expect("opt");
        }
        b.finish();
        let mut w = ResponseWriter::new();
        w.set_message(&msg);
        r.chain.plugins()[0].response(&oreq, &mut w, &outcome);
        let want = if opt_last {
            OptAt::Absent
        } else {
            OptAt::Unknown
        };
        assert_eq!(w.opt(), want, "OPT last: {opt_last}");
        assert_eq!(
            testing::reply(w.bytes()).header.arcount,
            if opt_last { 1 } else { 2 }
        );
        // Stored, the reply's compression savings are the entry's, so the
        // response size needs no walk; not stored, they stay unknown.
        let walked = clusterdns_wire::uncompressed_len(w.bytes()).expect("len");
        assert_eq!(w.uncompressed_len(), walked);
        let saved = w.compression_saved();
        if opt_last {
            assert_eq!(saved, Some(walked - w.bytes().len()));
            assert!(walked > w.bytes().len(), "the owners are compressed");
        } else {
            assert_eq!(saved, None);
        }
    }
}

#[test]
fn hit_decrements_ttl_and_restores_id_and_case() {
    let r = rig(Config::default(), 100);
    let first = r.ask(&testing::query("www.example.org.", Rtype::A));
    let rep = testing::reply(&first);
    assert_eq!(rep.answer, vec!["www.example.org.\t100\tIN\tA\t192.0.2.1"]);
    // OPT removed (the server mirrors the client's) and AD cleared.
    assert_eq!(rep.header.arcount, 0);
    assert!(!rep.header.ad());
    r.advance(2500);
    let mut pkt = testing::query("WWW.Example.ORG.", Rtype::A);
    pkt[0..2].copy_from_slice(&0x4242u16.to_be_bytes());
    let second = r.ask(&pkt);
    assert_eq!(r.calls(), 1, "second query is a hit");
    let rep = testing::reply(&second);
    assert_eq!(rep.header.id, 0x4242);
    assert!(rep.header.aa(), "cache replies are authoritative");
    assert!(rep.header.ra());
    assert_eq!(rep.answer, vec!["WWW.Example.ORG.\t98\tIN\tA\t192.0.2.1"]);
    let text = r.registry.render();
    assert!(text.contains("coredns_cache_hits_total{server=\"dns://:53\",type=\"success\",view=\"\",zones=\".\"} 1"), "{text}");
    assert!(
        text.contains("coredns_cache_misses_total{server=\"dns://:53\",view=\"\",zones=\".\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("coredns_cache_requests_total{server=\"dns://:53\",view=\"\",zones=\".\"} 2"),
        "{text}"
    );
    assert!(
        text.contains(
            "coredns_cache_entries{server=\"dns://:53\",type=\"success\",view=\"\",zones=\".\"} 1"
        ),
        "{text}"
    );
}

#[test]
fn expiry_is_a_miss_and_ttl_is_clamped() {
    let r = rig(Config::default(), 1);
    let first = testing::reply(&r.ask(&testing::query("a.example.", Rtype::A)));
    // MINTTL 5 raises the TTL of the first reply too.
    assert_eq!(first.answer, vec!["a.example.\t5\tIN\tA\t192.0.2.1"]);
    r.advance(4999);
    r.ask(&testing::query("a.example.", Rtype::A));
    assert_eq!(r.calls(), 1);
    r.advance(1);
    r.ask(&testing::query("a.example.", Rtype::A));
    assert_eq!(r.calls(), 2, "TTL 0 is a miss");
    let cfg = Config {
        pttl: 30,
        ..Config::default()
    };
    let r = rig(cfg, 1000);
    let rep = testing::reply(&r.ask(&testing::query("a.example.", Rtype::A)));
    assert_eq!(rep.answer, vec!["a.example.\t30\tIN\tA\t192.0.2.1"]);
    // The maximum wins over the minimum (checked against CoreDNS 1.14.7:
    // `cache 1` answers TTL 1).
    let cfg = Config {
        pttl: 1,
        ..Config::default()
    };
    let r = rig(cfg, 1000);
    let rep = testing::reply(&r.ask(&testing::query("a.example.", Rtype::A)));
    assert_eq!(rep.answer, vec!["a.example.\t1\tIN\tA\t192.0.2.1"]);
}

#[test]
fn denial_is_cached_with_its_own_ttl() {
    let r = rig(Config::default(), 120);
    let q = testing::query("nx.example.", Rtype::A);
    assert_eq!(testing::reply(&r.ask(&q)).rcode, Rcode::NXDOMAIN);
    r.advance(10_000);
    let rep = testing::reply(&r.ask(&q));
    assert_eq!(rep.rcode, Rcode::NXDOMAIN);
    assert_eq!(rep.authority.len(), 1);
    assert!(rep.authority[0].contains("\t110\t"), "{:?}", rep.authority);
    assert_eq!(r.calls(), 1);
    let text = r.registry.render();
    assert!(text.contains("type=\"denial\""), "{text}");
}

#[test]
fn do_and_cd_bits_make_separate_entries() {
    let r = rig(Config::default(), 60);
    r.ask(&testing::query("a.example.", Rtype::A));
    r.ask(&testing::query_edns("a.example.", Rtype::A, 1232, true));
    let mut cd = testing::query("a.example.", Rtype::A);
    cd[3] |= 0x10;
    r.ask(&cd);
    assert_eq!(r.calls(), 3);
    r.ask(&testing::query_edns("a.example.", Rtype::A, 1232, true));
    assert_eq!(r.calls(), 3);
}

#[test]
fn keepttl_and_disable() {
    let cfg = Config {
        keepttl: true,
        ..Config::default()
    };
    let r = rig(cfg, 100);
    r.ask(&testing::query("a.example.", Rtype::A));
    r.advance(50_000);
    let rep = testing::reply(&r.ask(&testing::query("a.example.", Rtype::A)));
    assert_eq!(rep.answer, vec!["a.example.\t100\tIN\tA\t192.0.2.1"]);
    let cfg = Config {
        pexcept: vec![Name::from_ascii("example.").expect("n")],
        ..Config::default()
    };
    let r = rig(cfg, 100);
    r.ask(&testing::query("a.example.", Rtype::A));
    r.ask(&testing::query("a.example.", Rtype::A));
    assert_eq!(r.calls(), 2, "success caching disabled");
    r.ask(&testing::query("nx.example.", Rtype::A));
    r.ask(&testing::query("nx.example.", Rtype::A));
    assert_eq!(r.calls(), 3, "denial still cached");
}

#[test]
fn serve_stale_answers_expired_entries_with_ttl_zero() {
    let cfg = Config {
        stale_s: 3600,
        ..Config::default()
    };
    let r = rig(cfg, 10);
    r.ask(&testing::query("a.example.", Rtype::A));
    r.advance(20_000);
    let rep = testing::reply(&r.ask(&testing::query("a.example.", Rtype::A)));
    assert_eq!(rep.answer, vec!["a.example.\t0\tIN\tA\t192.0.2.1"]);
    assert_eq!(r.calls(), 1);
    assert!(r.registry.render().contains(
        "coredns_cache_served_stale_total{server=\"dns://:53\",view=\"\",zones=\".\"} 1"
    ));
    r.advance(3_600_000);
    r.ask(&testing::query("a.example.", Rtype::A));
    assert_eq!(r.calls(), 2, "past the stale window it is a miss");
}

#[test]
fn entries_are_bounded() {
    let cfg = Config {
        pcap: 1024,
        ..Config::default()
    };
    let r = rig(cfg, 60);
    for i in 0..5000 {
        r.ask(&testing::query(&format!("n{i}.example."), Rtype::A));
    }
    let text = r.registry.render();
    let line = text
        .lines()
        .find(|l| l.starts_with("coredns_cache_entries{") && l.contains("success"))
        .expect("entries gauge");
    let n: f64 = line
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .expect("value");
    assert!(n <= 1024.0, "{line}");
    assert!(
        text.contains("coredns_cache_evictions_total{server=\"dns://:53\",type=\"success\""),
        "{text}"
    );
}

#[test]
fn truncated_and_mismatched_replies_are_not_stored() {
    let r = rig(Config::default(), 60);
    // A reply to another question: counted as a drop.
    let q = testing::query("a.example.", Rtype::A);
    let parsed = Query::parse(&q).expect("q");
    let zone = Name::root();
    let req = testing::request(&parsed, &zone);
    let mut w = ResponseWriter::new();
    let mut b = MessageBuilder::new(
        w.buffer_mut(),
        Header {
            id: 1,
            flags: 0x8180,
            ..Header::default()
        },
    );
    let other = Name::from_ascii("b.example.").expect("n");
    b.push_question(&other, Rtype::A, Class::IN).expect("q");
    b.push(
        Section::Answer,
        &other,
        Class::IN,
        60,
        &RData::A([192, 0, 2, 9].into()),
    )
    .expect("a");
    b.finish();
    let cache = &r.chain.plugins()[0];
    let outcome = Outcome {
        rcode: Rcode::NOERROR,
        plugin: "x",
        error: None,
    };
    cache.response(&req, &mut w, &outcome);
    assert!(
        r.registry
            .render()
            .contains("coredns_cache_drops_total{server=\"dns://:53\",view=\"\",zones=\".\"} 1")
    );
    // Truncated: not stored.
    let mut w = ResponseWriter::new();
    let mut b = w.reply(&req);
    b.set_tc(true);
    b.finish();
    cache.response(&req, &mut w, &outcome);
    r.ask(&q);
    assert_eq!(r.calls(), 1);
}

#[test]
fn setup_parses_coredns_options() {
    use clusterdns_corefile::{ProcessEnv, parse_str};
    let parse1 = |text: &str| {
        let cf = parse_str(text, std::path::Path::new("Corefile"), &ProcessEnv).expect("parse");
        let d = cf.blocks[0].directives[0].clone();
        setup::parse(&d, &[".".to_string()])
    };
    let c = parse1(
        ". {\n cache 300 example.org {\n success 5000 600 10\n denial 100 60\n prefetch 2 30s 20%\n serve_stale 10m verify\n servfail 10s\n disable denial sub.example.org\n keepttl\n }\n}\n",
    )
    .expect("config");
    assert_eq!((c.pttl, c.nttl), (600, 60));
    assert_eq!((c.pcap, c.ncap, c.minpttl), (5000, 100, 10));
    assert_eq!(
        (c.prefetch, c.prefetch_window_ms, c.percentage),
        (2, 30_000, 20)
    );
    assert_eq!(
        (c.stale_s, c.verify, c.failttl, c.keepttl),
        (600, true, 10, true)
    );
    assert_eq!(c.zones[0].to_string(), "example.org.");
    assert_eq!(c.nexcept[0].to_string(), "sub.example.org.");
    for (bad, msg) in [
        (
            ". {\n cache 0\n}\n",
            "cache TTL can not be zero or negative: 0",
        ),
        (
            ". {\n cache {\n prefetch -1\n }\n}\n",
            "prefetch amount should be positive: -1",
        ),
        (
            ". {\n cache {\n prefetch 1 1m 5%\n }\n}\n",
            "percentage should fall in range [10, 90]: 5",
        ),
        (
            ". {\n cache {\n servfail 10m\n }\n}\n",
            "caching SERVFAIL responses over 5 minutes is not permitted",
        ),
        (
            ". {\n cache {\n serve_stale 1h later\n }\n}\n",
            "invalid value for serve_stale refresh mode: later",
        ),
        (
            ". {\n cache {\n bogus\n }\n}\n",
            "Wrong argument count or unexpected line ending after 'bogus'",
        ),
    ] {
        let e = parse1(bad).expect_err(bad).to_string();
        assert!(e.contains(msg), "{bad}: {e}");
    }
}

/// `answers_question` as CoreDNS's `answersQuestion`, on both of its
/// paths: the walk-free one for answers without a CNAME and the chain.
#[test]
fn answers_question_follows_the_chain_and_the_class() {
    let name = |s: &str| Name::from_ascii(s).expect("name");
    let (q, t, other) = (name("Www.Example."), name("t.example."), name("x.example."));
    let ip = RData::A("10.1.2.3".parse().expect("ip"));
    // (question type, class, answers) -> whether they answer it.
    type Answer<'a> = (&'a Name, Class, RData<'a>);
    let check = |qtype: Rtype, qclass: Class, answers: &[Answer<'_>]| {
        let mut buf = Vec::new();
        let header = Header {
            flags: 0x8180,
            ..Header::default()
        };
        let mut b = MessageBuilder::new(&mut buf, header);
        b.push_question(&q, qtype, qclass).expect("question");
        for (owner, class, data) in answers {
            b.push(Section::Answer, owner, *class, 30, data)
                .expect("record");
        }
        b.finish();
        let m = Message::parse(&buf).expect("parse");
        let question = m.question().expect("question");
        answers_question(&m, &question)
    };
    let lower = name("www.example.");
    let (a, any, cname, inn, ch) = (Rtype::A, Rtype::ANY, Rtype::CNAME, Class::IN, Class::CH);
    // No CNAME: a record of the type at the name (any case).
    assert!(check(a, inn, &[(&lower, inn, ip)]));
    assert!(!check(Rtype::AAAA, inn, &[(&lower, inn, ip)]));
    assert!(!check(a, inn, &[(&other, inn, ip)]));
    assert!(!check(a, inn, &[(&lower, ch, ip)]));
    assert!(check(a, Class::ANY, &[(&lower, ch, ip)]));
    assert!(check(any, inn, &[(&lower, inn, ip)]));
    assert!(!check(any, inn, &[(&other, inn, ip)]));
    assert!(!check(cname, inn, &[(&lower, inn, ip)]));
    // A chain: the type at its end, not at the name.
    let to_t = RData::Cname(&t);
    assert!(check(a, inn, &[(&lower, inn, to_t), (&t, inn, ip)]));
    assert!(!check(a, inn, &[(&lower, inn, to_t), (&lower, inn, ip)]));
    assert!(check(cname, inn, &[(&lower, inn, to_t)]));
    assert!(check(any, inn, &[(&lower, inn, to_t)]));
    // A CNAME of another class is no chain.
    assert!(check(a, inn, &[(&lower, ch, to_t), (&lower, inn, ip)]));
    // Two targets, or a loop: nothing.
    let to_x = RData::Cname(&other);
    assert!(!check(
        a,
        inn,
        &[(&lower, inn, to_t), (&lower, inn, to_x), (&t, inn, ip)]
    ));
    let back = RData::Cname(&lower);
    assert!(!check(a, inn, &[(&lower, inn, to_t), (&t, inn, back)]));
}

/// A reply stored again as it was (kubernetes' NXDOMAIN for a search
/// domain of a walk, asked again when its 5 s entry runs out) renews the
/// entry in place: the same entry, its TTL started again, the answers
/// as before.
#[test]
fn the_same_reply_stored_again_renews_its_entry() {
    let clock = Arc::new(ManualClock::default());
    let registry = Arc::new(Registry::new());
    let inner = setup::build(
        Config::default(),
        clock.clone(),
        Metrics::new(&registry, ".".into(), String::new()),
    );
    let up = Arc::new(Upstream {
        ttl: 5,
        calls: AtomicU32::new(0),
        with_opt: true,
    });
    let r = Rig {
        clock,
        up: up.clone(),
        chain: Chain::new(vec![
            Arc::new(Cache {
                inner: inner.clone(),
            }) as Arc<dyn Plugin>,
            up as Arc<dyn Plugin>,
        ]),
        registry,
    };
    let pkt = testing::query("nx1.example.", Rtype::A);
    let k = Inner::key_of(&Query::parse(&pkt).expect("query"));
    let entry = || inner.neg.with(k, |e| Some(e.clone())).expect("an entry");
    let first = r.ask(&pkt);
    let stored = entry();
    r.advance(5_500);
    let again = r.ask(&pkt);
    assert_eq!(r.calls(), 2, "asked again once expired");
    assert!(Arc::ptr_eq(&stored, &entry()), "renewed in place");
    assert_eq!(stored.stored_at(), 5_500);
    assert_eq!(again, first, "the same answer, TTL 5 again");
    r.advance(2_000);
    let hit = testing::reply(&r.ask(&pkt));
    assert_eq!(r.calls(), 2, "a hit");
    assert_eq!(hit.rcode, Rcode::NXDOMAIN);
    assert_eq!(hit.authority.len(), 1);
    assert!(
        hit.authority[0].contains("\t3\tIN\tSOA\t"),
        "{:?}",
        hit.authority
    );
}
