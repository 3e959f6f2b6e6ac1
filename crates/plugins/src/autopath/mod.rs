#![doc = include_str!("README.md")]

mod memo;

use std::cell::Cell;
use std::sync::{Arc, OnceLock};

use clusterdns_contract::metrics::{Counter, Family};
use clusterdns_contract::{
    BoxFuture, Chain, ChainTail, Flow, Outcome, Plugin, PluginDef, PluginError, Request,
    ResponseWriter, SetupCtx,
};
use clusterdns_corefile::{ConfigError, Directive};
use clusterdns_wire::{Class, Message, MessageBuilder, Name, RData, Rcode, Record, Rtype, Section};

/// Registration of *autopath*.
pub const DEF: PluginDef = PluginDef {
    name: "autopath",
    setup,
};

const NAME: &str = "autopath";

/// Where the search path comes from.
enum Source {
    /// A `resolv.conf` file: its search domains, then the root (the name
    /// as asked).
    File(Vec<Name>),
    /// `@NAME`: the plugin of that name behind *autopath*, asked per
    /// query; found at start-up, and absent when the block has none.
    Plugin(Arc<OnceLock<Arc<dyn Plugin>>>),
}

/// The *autopath* handler: walks the client's search path on the server
/// and answers the first query of the walk with the first reply that is
/// not NXDOMAIN.
pub struct AutoPath {
    /// Zones it acts in (lowercase).
    zones: Vec<Name>,
    source: Source,
    /// The plugins behind it, which answer each name of the walk.
    tail: ChainTail,
    /// `coredns_autopath_success_total` by `server` label, resolved at
    /// setup so counting takes no lock.
    success: Vec<(String, Arc<Counter>)>,
    family: Arc<Family<Counter>>,
    /// Walks answered wholly from the cache, served again in one step.
    memo: memo::Memo,
}

impl std::fmt::Debug for AutoPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AutoPath")
            .field("zones", &self.zones)
            .finish_non_exhaustive()
    }
}

fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    // CoreDNS reads every line and the last one wins.
    let mut parsed = None;
    for d in dirs {
        let Some(last) = d.args.last() else {
            return Err(d.err("no resolv-conf specified"));
        };
        let source = match last.text.strip_prefix('@') {
            Some(name) => (Some(name.to_owned()), Vec::new()),
            None => {
                let path = clusterdns_contract::parse::config_path(ctx.config_dir, &last.text);
                let search = clusterdns_contract::parse::resolv_search(&path).map_err(|e| {
                    last.err(format!(
                        "failed to parse {:?}: open {}: {e}",
                        last.text, last.text
                    ))
                })?;
                (None, search)
            }
        };
        let zone_args = &d.args[..d.args.len() - 1];
        let zones = if zone_args.is_empty() {
            ctx.zones()
                .iter()
                .filter_map(|z| Name::from_ascii(z).ok())
                .collect()
        } else {
            clusterdns_contract::parse::origins(zone_args.iter().map(|t| t.text.as_str()))
        };
        parsed = Some((zones, source));
    }
    let Some((zones, (plugin, search))) = parsed else {
        return clusterdns_contract::parse::once(dirs).map(|_| ());
    };
    let family = ctx
        .shared
        .metrics
        .get_or_register("coredns_autopath_success_total", || {
            Family::<Counter>::new(
                "coredns_autopath_success_total",
                "Counter of requests that did autopath.",
                &["server"],
            )
        });
    let success = ctx
        .server_labels()
        .into_iter()
        .map(|l| {
            let c = family.with(&[&l]);
            (l, c)
        })
        .collect();
    let tail = ChainTail::default();
    let source = match plugin {
        None => {
            let mut names = clusterdns_contract::parse::search_names(&search);
            names.push(Name::root());
            Source::File(names)
        }
        Some(name) => {
            let found: Arc<OnceLock<Arc<dyn Plugin>>> = Arc::default();
            // CoreDNS looks the plugin up among all of the block's; only
            // plugins behind autopath (kubernetes) can give a search path,
            // so one before it is one that does not implement it.
            let in_block = ctx.block.directives_named(&name).next().is_some();
            let (hook_tail, hook_found) = (tail.clone(), found.clone());
            ctx.shared.on_startup.push(Box::new(move || {
                let p = hook_tail
                    .get()
                    .and_then(|c| c.plugins().iter().find(|p| p.name() == name));
                match p {
                    Some(p) if p.auto_pather().is_some() => {
                        let _ = hook_found.set(p.clone());
                        Ok(())
                    }
                    None if !in_block => Ok(()),
                    _ => Err(format!(
                        "plugin/{NAME}: {name} does not implement the AutoPather interface"
                    )),
                }
            }));
            Source::Plugin(found)
        }
    };
    ctx.add_plugin(Arc::new(AutoPath {
        zones,
        source,
        tail: tail.clone(),
        success,
        family,
        memo: memo::Memo::default(),
    }));
    ctx.bind_tail(&tail);
    Ok(())
}

thread_local! {
    /// The search path of the query at hand (reused: no allocation per
    /// query once grown).
    static SEARCH: Cell<Vec<Name>> = const { Cell::new(Vec::new()) };
    /// The packet of the walk's query at hand.
    static PACKET: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
    /// The reply to the walk's first query, kept while the walk goes on.
    static FIRST: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// A walk that met a plugin needing the asynchronous path: where it
/// stopped, for [`Plugin::query_async`].
struct Walk {
    search: Vec<Name>,
    base: usize,
    at: usize,
    first: Vec<u8>,
}

/// What to do after one name of the walk.
enum Step {
    /// Try the next name.
    Next,
    /// The walk ends with this flow (the reply is in the writer).
    Done(Flow),
}

impl AutoPath {
    /// The client's search path into `out` (empty: no walk).
    fn search_path(&self, req: &Request<'_>, out: &mut Vec<Name>) {
        match &self.source {
            Source::File(s) => out.extend_from_slice(s),
            Source::Plugin(p) => {
                if let Some(ap) = p.get().and_then(|p| p.auto_pather()) {
                    ap.auto_path(req, out);
                }
            }
        }
    }

    /// The start of a walk: `Ok(None)` when the query is not autopath's,
    /// else the length of the labels left of the first search domain in
    /// the name's wire form (CoreDNS's `dnsutil.TrimZone`, an error when
    /// nothing is left): each name of the walk is those labels followed
    /// by a search domain ([`Query::renamed_suffix`]).
    ///
    /// [`Query::renamed_suffix`]: clusterdns_wire::Query::renamed_suffix
    fn base(&self, req: &Request<'_>, search: &[Name]) -> Result<Option<usize>, Flow> {
        let Some(first) = search.first() else {
            return Ok(None);
        };
        let lower = req.qname_lower();
        if !lower.ends_with(first) {
            return Ok(None);
        }
        match lower.len() - first.len() {
            0 => Err(Flow::Fail(PluginError::ServerFailure {
                plugin: NAME,
                msg: format!(
                    "trimzone: overshot qname: {}for zone {}",
                    req.qname(),
                    first
                ),
            })),
            keep => Ok(Some(keep)),
        }
    }

    /// After the walk's query number `i` was answered (`outcome`, reply in
    /// `w`): CoreDNS's checks, in its order.
    fn after(
        &self,
        req: &Request<'_>,
        w: &mut ResponseWriter,
        i: usize,
        outcome: Outcome,
        first: &mut Vec<u8>,
    ) -> Step {
        if let Some(e) = outcome.error {
            return Step::Done(Flow::Fail(e));
        }
        if w.rcode() == Rcode::NXDOMAIN {
            // Kept for the end of a walk that finds nothing; a walk that
            // stops at its first name never needs the copy.
            if i == 0 {
                first.clear();
                first.extend_from_slice(w.bytes());
            }
            return Step::Next;
        }
        cnamer(w, req.qname());
        self.count_success(req.server);
        Step::Done(Flow::Answered)
    }

    /// `coredns_autopath_success_total` + 1.
    fn count_success(&self, server: &str) {
        if let Some((_, c)) = self.success.iter().find(|(l, _)| l == server) {
            c.inc();
        } else {
            self.family.with(&[server]).inc();
        }
    }

    /// Every name of the walk tried: the first reply, as it was.
    fn give_first(w: &mut ResponseWriter, first: &[u8]) -> Flow {
        w.set_message(first);
        Flow::Answered
    }

    /// The walk from name `from` on the receiving thread; defers to the
    /// asynchronous path at the first plugin that needs it. A walk whose
    /// every step was a cache hit is kept under `key` ([`memo`]).
    fn walk_sync(
        &self,
        tail: &Chain,
        req: &Request<'_>,
        w: &mut ResponseWriter,
        search: &[Name],
        base: usize,
        key: &[u8],
    ) -> Flow {
        let mut packet = PACKET.take();
        let mut first = FIRST.take();
        let mut steps = memo::STEPS.take();
        steps.clear();
        let mut all_stored = true;
        let mut flow = None;
        for (i, s) in search.iter().enumerate() {
            // The client's query with the question's name replaced
            // (header, type, class, OPT kept), not parsed again. A name
            // past 255 bytes cannot exist: as NXDOMAIN.
            let Ok(q) = req.query.renamed_suffix(base, s, &mut packet) else {
                continue;
            };
            let inner = req.for_query(&q, req.edits.fork());
            match tail.run_sync(&inner, w) {
                Ok(outcome) => {
                    // Before `after`, whose CNAME splice rewrites the reply.
                    match w.take_stored() {
                        Some(s) if all_stored => steps.push(s),
                        _ => all_stored = false,
                    }
                    if let Step::Done(f) = self.after(req, w, i, outcome, &mut first) {
                        if all_stored && matches!(f, Flow::Answered) && !w.is_per_client() {
                            self.memo.keep(key, w, &steps, req.received);
                        }
                        flow = Some(f);
                        break;
                    }
                }
                Err(_) => {
                    w.forget_note();
                    let walk = Walk {
                        search: search.to_vec(),
                        base,
                        at: i,
                        first: first.clone(),
                    };
                    flow = Some(w.defer_with(Box::new(walk)));
                    break;
                }
            }
        }
        let flow = flow.unwrap_or_else(|| Self::give_first(w, &first));
        steps.clear();
        memo::STEPS.set(steps);
        PACKET.set(packet);
        FIRST.set(first);
        flow
    }
}

impl Plugin for AutoPath {
    fn name(&self) -> &'static str {
        NAME
    }

    fn query(&self, req: &Request<'_>, w: &mut ResponseWriter) -> Flow {
        let lower = req.qname_lower();
        if !self.zones.iter().any(|z| lower.ends_with(z)) {
            return Flow::Next;
        }
        let Some(tail) = self.tail.get() else {
            return Flow::Next;
        };
        let mut search = SEARCH.take();
        search.clear();
        self.search_path(req, &mut search);
        let flow = match self.base(req, &search) {
            Ok(None) => Flow::Next,
            Ok(Some(base)) => memo::Memo::with_key(req, &search, |key| {
                if self.memo.serve(key, req, w) {
                    self.count_success(req.server);
                    Flow::Answered
                } else {
                    self.walk_sync(tail, req, w, &search, base, key)
                }
            }),
            Err(fail) => fail,
        };
        SEARCH.set(search);
        flow
    }

    fn query_async<'a>(
        &'a self,
        req: &'a Request<'a>,
        w: &'a mut ResponseWriter,
    ) -> BoxFuture<'a, Flow> {
        Box::pin(async move {
            let Some(tail) = self.tail.get() else {
                return Flow::Fail(PluginError::NoNext { plugin: NAME });
            };
            let walk = match w.take_note::<Walk>() {
                Some(walk) => *walk,
                // Not deferred by `query` (a walk started over): from the top.
                None => {
                    let mut search = Vec::new();
                    self.search_path(req, &mut search);
                    match self.base(req, &search) {
                        Ok(None) => {
                            return tail
                                .run_async(req, w)
                                .await
                                .error
                                .map_or(Flow::Answered, Flow::Fail);
                        }
                        Ok(Some(base)) => Walk {
                            search,
                            base,
                            at: 0,
                            first: Vec::new(),
                        },
                        Err(fail) => return fail,
                    }
                }
            };
            let Walk {
                search,
                base,
                at,
                mut first,
            } = walk;
            let mut packet = Vec::new();
            for (i, s) in search.iter().enumerate().skip(at) {
                let Ok(q) = req.query.renamed_suffix(base, s, &mut packet) else {
                    continue;
                };
                let inner = req.for_query(&q, req.edits.fork());
                let outcome = tail.run_async(&inner, w).await;
                if let Step::Done(f) = self.after(req, w, i, outcome, &mut first) {
                    return f;
                }
            }
            Self::give_first(w, &first)
        })
    }
}

/// CoreDNS's `cnamer`: a CNAME from the name asked to the owner of the
/// first answer record not named so (with that record's TTL) goes first
/// in the answer, and the question gets the name asked back. The usual
/// reply is spliced ([`splice`]); any other is decoded and written anew
/// ([`rewrite`]); one that does not parse is left as it is.
fn cnamer(w: &mut ResponseWriter, original: &Name) {
    // The reply moves out of the writer (no copy), whose buffer takes a
    // spare one to write the new message in.
    let mut old = OLD.take();
    std::mem::swap(w.raw_buffer(), &mut old);
    if splice(&old, w.raw_buffer(), original).is_none() {
        let mut records = RECORDS.take();
        records.clear();
        rewrite(&old, &mut records, w, original);
        RECORDS.set(records);
    }
    OLD.set(old);
}

thread_local! {
    /// The reply being rewritten by [`cnamer`].
    static OLD: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
    /// Its records, decoded.
    static RECORDS: Cell<Vec<(Section, Record)>> = const { Cell::new(Vec::new()) };
}

/// Offset of the question's name: right after the header.
const QNAME_AT: usize = clusterdns_wire::HEADER_LEN;

/// [`cnamer`] without decoding the records, for the reply a walk ends with
/// nearly always: its first answer record is named as its question (the
/// walk's name). Writes into `out` the header (one more answer), the
/// question with the name asked, the CNAME (owner: a pointer to that
/// question; target: the old question's name written whole) and then the
/// old records byte for byte, each compression pointer moved
/// ([`clusterdns_wire::relocate_records`]): one into the old question to
/// the CNAME's target, which holds the same bytes, one into the records by
/// the distance they moved. Re-encoding costs several times this (the
/// records decoded to owned names and every name compressed again).
/// `None` (with `out` left for [`rewrite`] to overwrite) for any other
/// reply: no answer, a first answer named otherwise, or one named as asked.
fn splice(old: &[u8], out: &mut Vec<u8>, original: &Name) -> Option<()> {
    let header = clusterdns_wire::Header::parse(old).ok()?;
    if header.qdcount != 1 || header.ancount == 0 {
        return None;
    }
    let mut qend = QNAME_AT;
    let qname = Name::from_wire(old, &mut qend).ok()?;
    let qname_end = qend;
    let qtype_class = old.get(qend..qend + 4)?;
    qend += 4;
    // The first answer record: its owner and TTL make the CNAME.
    let mut at = qend;
    let owner = Name::from_wire(old, &mut at).ok()?;
    if owner.as_wire() != qname.as_wire() || owner.eq_ignore_case(original) {
        return None;
    }
    let ttl = old.get(at + 4..at + 8)?;
    let records =
        usize::from(header.ancount) + usize::from(header.nscount) + usize::from(header.arcount);
    let target = qname.as_wire();
    let header = clusterdns_wire::Header {
        ancount: header.ancount.checked_add(1)?,
        ..header
    };
    out.clear();
    out.extend_from_slice(&header.to_bytes());
    out.extend_from_slice(original.as_wire());
    out.extend_from_slice(qtype_class);
    // Owner: the question's name (a pointer to offset 12).
    out.extend_from_slice(&[0xC0, QNAME_AT as u8]);
    out.extend_from_slice(&Rtype::CNAME.0.to_be_bytes());
    out.extend_from_slice(&Class::IN.0.to_be_bytes());
    out.extend_from_slice(ttl);
    out.extend_from_slice(&u16::try_from(target.len()).ok()?.to_be_bytes());
    let copy_at = out.len();
    out.extend_from_slice(target);
    let start = out.len();
    clusterdns_wire::relocate_records(old, qend, records, out, |p| {
        if p >= qend {
            Some(p - qend + start)
        } else if (QNAME_AT..qname_end).contains(&p) {
            Some(p - QNAME_AT + copy_at)
        } else {
            None
        }
    })
    .ok()?;
    // Bytes after the last record are dropped, as re-encoding drops them.
    (out.len() <= clusterdns_wire::MAX_MESSAGE_LEN).then_some(())
}

fn rewrite(
    old: &[u8],
    records: &mut Vec<(Section, Record)>,
    w: &mut ResponseWriter,
    original: &Name,
) {
    let Ok(m) = Message::parse(old) else { return };
    let Some((_, qtype, qclass)) = m.question() else {
        return;
    };
    let target = m
        .section(Section::Answer)
        .find(|r| !r.name.eq_ignore_case(original))
        .map(|r| (r.name, r.ttl));
    for r in m.records() {
        let Ok(rec) = r.to_owned_record(&m) else {
            return;
        };
        records.push((r.section, rec));
    }
    let buf = w.raw_buffer();
    let mut b = MessageBuilder::new(buf, m.header());
    let mut ok = b.push_question(original, qtype, qclass).is_ok();
    if let Some((name, ttl)) = target {
        ok &= b
            .push(
                Section::Answer,
                original,
                Class::IN,
                ttl,
                &RData::Cname(&name),
            )
            .is_ok();
    }
    for (section, rec) in records.iter() {
        ok &= b.push_record(*section, rec).is_ok();
    }
    b.finish();
    if !ok {
        w.set_message(old);
    }
}

#[cfg(test)]
mod tests;
