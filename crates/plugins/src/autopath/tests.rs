use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::Arc;

use clusterdns_contract::metrics::Registry;
use clusterdns_contract::testing::{self, Reply};
use clusterdns_contract::{Chain, Flow, Plugin, Request, ResponseWriter, SetupCtx, Shared};
use clusterdns_corefile::{ProcessEnv, parse_key, parse_str};
use clusterdns_wire::{Class, Name, Query, RData, Rcode, Rtype, Section};

use super::DEF;
use crate::testutil::setup_err;

/// Answers `x.b.test.` (any case) with an A record; NXDOMAIN otherwise.
struct Fake;

impl Plugin for Fake {
    fn name(&self) -> &'static str {
        "fake"
    }
    fn query(&self, req: &Request<'_>, w: &mut ResponseWriter) -> Flow {
        let found = req.qname_lower().to_string() == "x.b.test.";
        let mut b = w.reply(req);
        if found {
            let a = RData::A(Ipv4Addr::new(10, 0, 0, 1));
            let _ = b.push(Section::Answer, req.qname(), Class::IN, 7, &a);
        } else {
            b.set_rcode(Rcode::NXDOMAIN);
        }
        b.finish();
        Flow::Answered
    }
}

/// `autopath FILE` (search `a.test b.test`) in front of [`Fake`].
fn chain(dir: &Path) -> Chain {
    std::fs::write(dir.join("resolv.conf"), "search A.test b.test\n").unwrap();
    let cf = parse_str(
        ".:53 {\n autopath resolv.conf\n}\n",
        Path::new("Corefile"),
        &ProcessEnv,
    )
    .unwrap();
    let block = &cf.blocks[0];
    let keys: Vec<_> = block.keys.iter().map(|k| parse_key(k).unwrap()).collect();
    let mut shared = Shared::new(Arc::new(Registry::new()));
    let mut ctx = SetupCtx::new(block, &keys, dir, &mut shared);
    let dirs: Vec<_> = block.directives_named("autopath").collect();
    (DEF.setup)(&mut ctx, &dirs).unwrap();
    ctx.add_plugin(Arc::new(Fake));
    Chain::new(ctx.take_plugins())
}

fn ask(c: &Chain, name: &str) -> Reply {
    let pkt = testing::query(name, Rtype::A);
    let q = Query::parse(&pkt).unwrap();
    let zone = Name::root();
    let req = testing::request(&q, &zone);
    let mut w = ResponseWriter::new();
    c.run_sync(&req, &mut w).unwrap();
    let m = clusterdns_wire::Message::parse(w.bytes()).unwrap();
    assert_eq!(m.header().id, 0x1234);
    let (qn, _, _) = m.question().unwrap();
    assert_eq!(qn.to_string(), name, "the question is the name asked");
    testing::reply(w.bytes())
}

#[test]
fn the_walk_answers_with_a_cname_to_the_name_found() {
    let dir = std::env::temp_dir().join(format!("autopath-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let c = chain(&dir);
    let r = ask(&c, "X.a.test.");
    assert_eq!(r.rcode, Rcode::NOERROR);
    assert_eq!(
        r.answer,
        [
            "X.a.test.\t7\tIN\tCNAME\tX.b.test.",
            "X.b.test.\t7\tIN\tA\t10.0.0.1"
        ]
    );
    // Nothing found: the first reply, NXDOMAIN, for the name asked.
    let r = ask(&c, "y.a.test.");
    assert_eq!((r.rcode, r.answer.len()), (Rcode::NXDOMAIN, 0));
    // Not in the first search domain: passed on untouched.
    let r = ask(&c, "x.b.test.");
    assert_eq!(r.answer, ["x.b.test.\t7\tIN\tA\t10.0.0.1"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn setup_errors_are_coredns_texts() {
    assert_eq!(
        setup_err(DEF, ". {\n autopath\n}"),
        "no resolv-conf specified"
    );
    assert_eq!(
        setup_err(DEF, ". {\n autopath example.org /nonexistent/r.conf\n}"),
        "failed to parse \"/nonexistent/r.conf\": open /nonexistent/r.conf: no such file or directory"
    );
}

/// A reply as an upstream compresses it: names in the answer, the
/// authority and the rdata point into the question and into earlier
/// records; an OPT record last.
fn upstream_reply(qname: &str) -> Vec<u8> {
    let name = |s: &str| Name::from_ascii(s).unwrap();
    let q = name(qname);
    let alias = name("alias.b.test.");
    let mut buf = Vec::new();
    let header = clusterdns_wire::Header {
        id: 0x4321,
        flags: 0x8180,
        ..Default::default()
    };
    let mut b = clusterdns_wire::MessageBuilder::new(&mut buf, header);
    b.push_question(&q, Rtype::A, Class::IN).unwrap();
    b.push(Section::Answer, &q, Class::IN, 11, &RData::Cname(&alias))
        .unwrap();
    let a = RData::A(Ipv4Addr::new(10, 0, 0, 2));
    b.push(Section::Answer, &alias, Class::IN, 12, &a).unwrap();
    let ns = name("ns.x.b.test.");
    b.push(
        Section::Authority,
        &name("b.test."),
        Class::IN,
        13,
        &RData::Ns(&ns),
    )
    .unwrap();
    let mx = RData::Mx {
        preference: 1,
        exchange: &name("mx.alias.b.test."),
    };
    b.push(Section::Additional, &alias, Class::IN, 14, &mx)
        .unwrap();
    b.push_opt(1232, false, &[]).unwrap();
    b.finish();
    buf
}

/// The spliced reply reads record for record as the re-encoded one, and
/// is the size of the old one plus the CNAME and the longer question.
#[test]
fn the_splice_reads_as_the_reencoded_reply() {
    let old = upstream_reply("x.b.test.");
    let original = Name::from_ascii("X.a.test.").unwrap();
    let mut spliced = Vec::new();
    super::splice(&old, &mut spliced, &original).expect("the usual reply splices");
    let mut w = ResponseWriter::new();
    super::rewrite(&old, &mut Vec::new(), &mut w, &original);
    let (s, r) = (testing::reply(&spliced), testing::reply(w.bytes()));
    assert_eq!(s.header, r.header);
    assert_eq!(s.answer, r.answer);
    assert_eq!(
        s.answer[0], "X.a.test.\t11\tIN\tCNAME\tx.b.test.",
        "the CNAME to the walk's name"
    );
    assert_eq!(s.authority, r.authority);
    assert_eq!(s.additional, r.additional);
    let m = clusterdns_wire::Message::parse(&spliced).unwrap();
    assert_eq!(m.question().unwrap().0.to_string(), "X.a.test.");
    assert_eq!(m.opt().map(|e| e.udp_size), Some(1232));
    let grown = "X.a.test.".len() - "x.b.test.".len() + 2 + 10 + "x.b.test.".len() + 1;
    assert_eq!(spliced.len(), old.len() + grown);
}

/// Replies the splice does not take go to the re-encoding path.
#[test]
fn other_replies_are_not_spliced() {
    let original = Name::from_ascii("x.a.test.").unwrap();
    let mut out = Vec::new();
    // First answer named as asked (CoreDNS skips it for the CNAME target).
    let asked = upstream_reply("X.a.test.");
    assert!(super::splice(&asked, &mut out, &original).is_none());
    // No answer at all.
    let pkt = testing::query("x.b.test.", Rtype::A);
    let q = Query::parse(&pkt).unwrap();
    let mut w = ResponseWriter::new();
    w.reply_query(&q).finish();
    assert!(super::splice(w.bytes(), &mut out, &original).is_none());
    // Cut short inside the records.
    let mut cut = upstream_reply("x.b.test.");
    cut.truncate(cut.len() - 20);
    assert!(super::splice(&cut, &mut out, &original).is_none());
}

/// Like [`Fake`] (`x.b.test.` found, TTL 7; NXDOMAIN otherwise), counting
/// the queries it answers: the plugins behind the cache, asked live.
struct Counting(Arc<std::sync::atomic::AtomicUsize>);

impl Plugin for Counting {
    fn name(&self) -> &'static str {
        "counting"
    }
    fn query(&self, req: &Request<'_>, w: &mut ResponseWriter) -> Flow {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Fake.query(req, w)
    }
}

/// `autopath FILE` (search `a.test b.test`), then `CACHE` (when given),
/// then [`Counting`]: the chain, the live-query counter, the registry.
fn cached_chain(
    dir: &Path,
    cache: Option<&str>,
) -> (Chain, Arc<std::sync::atomic::AtomicUsize>, Arc<Registry>) {
    std::fs::write(dir.join("resolv.conf"), "search A.test b.test\n").unwrap();
    let text = format!(
        ".:53 {{\n autopath resolv.conf\n {}\n}}\n",
        cache.unwrap_or("")
    );
    let cf = parse_str(&text, Path::new("Corefile"), &ProcessEnv).unwrap();
    let block = &cf.blocks[0];
    let keys: Vec<_> = block.keys.iter().map(|k| parse_key(k).unwrap()).collect();
    let registry = Arc::new(Registry::new());
    let mut shared = Shared::new(registry.clone());
    let mut ctx = SetupCtx::new(block, &keys, dir, &mut shared);
    let dirs: Vec<_> = block.directives_named("autopath").collect();
    (DEF.setup)(&mut ctx, &dirs).unwrap();
    if cache.is_some() {
        let dirs: Vec<_> = block.directives_named("cache").collect();
        (crate::cache::DEF.setup)(&mut ctx, &dirs).unwrap();
    }
    let live = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    ctx.add_plugin(Arc::new(Counting(live.clone())));
    (Chain::new(ctx.take_plugins()), live, registry)
}

/// The reply to `name` from `client` arriving `after` from `t0`.
fn ask_at(
    c: &Chain,
    name: &str,
    client: [u8; 4],
    t0: std::time::Instant,
    after_ms: u64,
) -> Vec<u8> {
    let pkt = testing::query(name, Rtype::A);
    let q = Query::parse(&pkt).unwrap();
    let zone = Name::root();
    let mut req = testing::request(&q, &zone);
    req.client = std::net::SocketAddr::from((client, 40000));
    req.received = t0 + std::time::Duration::from_millis(after_ms);
    let mut w = ResponseWriter::new();
    c.run_sync(&req, &mut w).unwrap();
    w.bytes().to_vec()
}

fn live(n: &std::sync::atomic::AtomicUsize) -> usize {
    n.load(std::sync::atomic::Ordering::Relaxed)
}

/// The value of the metric line starting with `prefix` (0 when absent).
fn metric(r: &Registry, prefix: &str) -> u64 {
    r.render()
        .lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

fn autopath_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("autopath-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn answer_ttls(msg: &[u8]) -> Vec<String> {
    testing::reply(msg)
        .answer
        .iter()
        .map(|a| a.split('\t').nth(1).unwrap().to_string())
        .collect()
}

/// A walk the cache answered wholly is served again in one step: the
/// same bytes a walk gives at that moment (TTLs counting down), nothing
/// asked behind, the counters moved as by the walk; it ends when the
/// first of its entries (the NXDOMAIN's 5 s) expires, and the walk asks
/// the plugins behind again.
#[test]
fn a_walk_from_the_cache_is_served_again_until_its_first_entry_expires() {
    let dir = autopath_dir("memo");
    let (c, n, reg) = cached_chain(&dir, Some("cache 30"));
    let t0 = std::time::Instant::now();
    let me = [10, 0, 0, 1];
    let first = ask_at(&c, "X.a.test.", me, t0, 0);
    assert_eq!(
        live(&n),
        2,
        "the first walk asks both names behind the cache"
    );
    // Every name a cache hit: the walk is kept.
    assert_eq!(super::memo::KEPT.get(), 0, "a walk of misses is not kept");
    let walked = ask_at(&c, "X.a.test.", me, t0, 1500);
    assert_eq!(live(&n), 2);
    assert_eq!(super::memo::KEPT.get(), 1);
    assert_eq!(answer_ttls(&first), ["7", "7"]);
    assert_eq!(answer_ttls(&walked), ["6", "6"]);
    let hits = |d: &str| {
        metric(
            &reg,
            &format!("coredns_cache_hits_total{{server=\"dns://:53\",type=\"{d}\""),
        )
    };
    let requests = || metric(&reg, "coredns_cache_requests_total{");
    let success = || metric(&reg, "coredns_autopath_success_total{");
    let before = (hits("denial"), hits("success"), requests(), success());
    assert_eq!(
        before,
        (1, 1, 4, 2),
        "two walks: one of misses, one of hits"
    );
    let kept = ask_at(&c, "X.a.test.", me, t0, 1900);
    assert_eq!(
        kept, walked,
        "served again: the same bytes at the same second"
    );
    assert_eq!(live(&n), 2, "nothing asked behind");
    assert_eq!(super::memo::SERVED.get(), 1, "served from the kept walk");
    assert_eq!(
        (hits("denial"), hits("success"), requests(), success()),
        (2, 2, 6, 3),
        "counted as the walk counts: a hit per name, one autopath success"
    );
    // (The entries were stored within the first moments after `t0`: the
    // times asked are half a second past whole seconds.)
    // Another client walks at 3.5 s (its own key); the first is served the
    // kept walk, byte for byte what that walk gave.
    let other = ask_at(&c, "X.a.test.", [10, 0, 0, 2], t0, 3500);
    let kept = ask_at(&c, "X.a.test.", me, t0, 3500);
    assert_eq!(answer_ttls(&other), ["4", "4"]);
    assert_eq!(kept, other);
    assert_eq!(live(&n), 2);
    assert_eq!(super::memo::SERVED.get(), 2);
    // The case asked is the key's: another case walks (and is kept apart).
    let upper = ask_at(&c, "X.A.test.", me, t0, 3500);
    assert_eq!(
        testing::reply(&upper).answer[0],
        "X.A.test.\t4\tIN\tCNAME\tX.b.test."
    );
    // By 5.5 s the NXDOMAIN for X.a.test. expires: the walk runs and asks
    // it behind the cache again.
    let after = ask_at(&c, "X.a.test.", me, t0, 5500);
    assert_eq!(live(&n), 3, "the expired name asked again behind the cache");
    assert_eq!(
        super::memo::SERVED.get(),
        2,
        "an expired walk is not served"
    );
    assert_eq!(answer_ttls(&after), ["2", "2"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A walk with any name answered behind the cache is never kept, nor one
/// without a cache at all, nor one from a cache that does not count its
/// TTLs down (`keepttl`) or counts hits for prefetch.
#[test]
fn walks_not_wholly_from_a_counting_cache_are_not_kept() {
    for cache in [
        None,
        Some("cache 30 {\n keepttl\n }"),
        Some("cache 30 {\n prefetch 1\n }"),
    ] {
        let dir = autopath_dir("nomemo");
        let (c, n, _) = cached_chain(&dir, cache);
        let t0 = std::time::Instant::now();
        for i in 0..3 {
            ask_at(&c, "X.a.test.", [10, 0, 0, 1], t0, i * 100);
        }
        let walks = if cache.is_none() { 6 } else { 2 };
        assert_eq!(live(&n), walks, "{cache:?}");
        assert_eq!(super::memo::KEPT.get(), 0, "{cache:?}: nothing kept");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
