#![doc = include_str!("README.md")]

mod reply;
mod rules;
mod setup;

use std::cell::RefCell;
use std::sync::Arc;

use clusterdns_contract::{
    BoxFuture, ChainTail, Deferred, Flow, Outcome, Plugin, PluginDef, PluginError, Request,
    ResponseWriter, SetupCtx,
};
use clusterdns_corefile::{ConfigError, Directive};
use clusterdns_wire::{HEADER_LEN, Query, Rcode};

use reply::{CnameSplice, Plan};
use rules::{EdnsKind, Kind, Opt, Pass, Resp, Rule};

/// Registration of *rewrite*.
pub const DEF: PluginDef = PluginDef {
    name: "rewrite",
    setup: setup_rewrite,
};

fn setup_rewrite(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    // CoreDNS reads every `rewrite` line of the block into one handler,
    // the rules in Corefile order.
    let mut rules = Vec::new();
    for d in dirs {
        let words = setup::words(d);
        rules.push(setup::rule(&words).map_err(|e| d.err(e))?);
    }
    let local_codes = rules
        .iter()
        .filter_map(|r| match &r.kind {
            Kind::Edns(e) => match &e.kind {
                EdnsKind::Local { code, .. } => Some(*code),
                _ => None,
            },
            _ => None,
        })
        .collect();
    let cname = rules.iter().any(|r| matches!(r.kind, Kind::Cname(_)));
    let tail = ChainTail::default();
    ctx.add_plugin(Arc::new(Rewrite {
        rules,
        local_codes,
        cname,
        tail: tail.clone(),
    }));
    ctx.bind_tail(&tail);
    Ok(())
}

/// The *rewrite* handler.
#[derive(Debug)]
pub struct Rewrite {
    rules: Vec<Rule>,
    /// The codes of the `edns0 local` rules, which CoreDNS adds to the
    /// options its scrub copies into replies.
    local_codes: Vec<u16>,
    /// A `cname` rule needs lookups: such a handler works on the
    /// asynchronous path.
    cname: bool,
    /// The plugins behind this one, which get the rewritten query.
    tail: ChainTail,
}

/// What the synchronous pass hands the asynchronous one: where the
/// plugins behind deferred, if they ran.
struct Note(Option<Deferred>);

thread_local! {
    /// Per-thread scratch for the rewritten query and the rewritten reply.
    static SCRATCH: RefCell<(Vec<u8>, reply::Scratch)> = RefCell::new((Vec::new(), reply::Scratch::default()));
}

/// The rules' verdict on one query.
// The big variant is the one a rewrite uses, once per query on the
// stack; boxing it would allocate for every rewritten query.
#[allow(clippy::large_enum_variant)]
enum Verdict<'r> {
    /// Nothing to do.
    Pass,
    /// A rewritten name is not a name.
    Bad(PluginError),
    /// Run the plugins behind on the query as changed; `revert`: the
    /// reply is rewritten back.
    Rewrite { pass: Pass<'r>, revert: bool },
}

impl Rewrite {
    fn verdict<'r>(&'r self, req: &Request<'_>) -> Verdict<'r> {
        let mut pass = Pass::new(req);
        match pass.run(&self.rules, req) {
            // CoreDNS's error is a bare message (no `plugin/rewrite:`).
            Err(rules::BadName(n)) => Verdict::Bad(PluginError::Upstream {
                plugin: "rewrite",
                source: std::io::Error::other(format!("invalid name after rewrite: {n}")),
            }),
            Ok(revert) if revert || pass.changed(req) => Verdict::Rewrite { pass, revert },
            Ok(_) => Verdict::Pass,
        }
    }

    /// The reply the plugins behind wrote, rewritten back; the flow to
    /// return.
    fn finish(
        &self,
        req: &Request<'_>,
        pass: &Pass<'_>,
        revert: bool,
        outcome: Outcome,
        w: &mut ResponseWriter,
        cname: Option<CnameSplice<'_>>,
    ) -> Flow {
        if let Some(e) = outcome.error {
            return self.failed(req, pass, revert, e, w);
        }
        if !revert && pass.opt.is_none() {
            return Flow::Answered;
        }
        let scrub = scrub_opt(pass);
        let plan = Plan {
            question: revert.then(|| (req.qname(), req.qtype(), req.qclass())),
            resp: &pass.resp,
            scrub_opt: scrub.as_ref(),
            local_codes: &self.local_codes,
            cname,
        };
        SCRATCH.with(|s| {
            let mut fresh = reply::Scratch::default();
            let mut guard = s.try_borrow_mut();
            let scratch = match guard.as_deref_mut() {
                Ok((_, sc)) => sc,
                Err(_) => &mut fresh,
            };
            if reply::rewrite(w.bytes(), &plan, scratch).is_some() {
                std::mem::swap(w.raw_buffer(), &mut scratch.out);
            }
        });
        Flow::Answered
    }

    /// The plugins behind failed: CoreDNS's reverter writes the error
    /// reply itself, through the rcode rules; when those change nothing,
    /// the server's error reply is the same one.
    fn failed(
        &self,
        req: &Request<'_>,
        pass: &Pass<'_>,
        revert: bool,
        e: PluginError,
        w: &mut ResponseWriter,
    ) -> Flow {
        let e = match e {
            // The tail ran out: the error is this plugin's, as in CoreDNS.
            PluginError::NoNext { .. } => PluginError::NoNext { plugin: "rewrite" },
            e => e,
        };
        if !revert {
            return Flow::Fail(e);
        }
        let mut rcode = e.rcode().0;
        for r in pass.resp.iter().rev() {
            if let Resp::Rcode { old, new } = r
                && rcode == *old
            {
                rcode = *new;
            }
        }
        if rcode == e.rcode().0 {
            return Flow::Fail(e);
        }
        let mut b = w.reply(req);
        b.set_rcode(Rcode(rcode));
        b.finish();
        Flow::Answered
    }

    async fn serve_async(
        &self,
        req: &Request<'_>,
        w: &mut ResponseWriter,
        from: Option<Deferred>,
    ) -> Flow {
        let (pass, revert) = match self.verdict(req) {
            Verdict::Pass => return Flow::Next,
            Verdict::Bad(e) => return Flow::Fail(e),
            Verdict::Rewrite { pass, revert } => (pass, revert),
        };
        let Some(tail) = self.tail.get() else {
            return Flow::Next;
        };
        if tail.plugins().is_empty() {
            return self.failed(
                req,
                &pass,
                revert,
                PluginError::NoNext { plugin: "rewrite" },
                w,
            );
        }
        let mut packet = Vec::new();
        let changed = pass.changed(req);
        if changed {
            build_query(req, &pass, &mut packet);
        }
        let parsed = if changed {
            Query::parse(&packet).ok()
        } else {
            None
        };
        let inner_owned = parsed.as_ref().map(|q| inner_request(req, q));
        let inner = inner_owned.as_ref().unwrap_or(req);
        let outcome = match from {
            Some(d) => tail.run_async_from(d, inner, w).await,
            None => tail.run_async(inner, w).await,
        };
        let mut lookup = Vec::new();
        let mut splice = None;
        if self.cname
            && outcome.error.is_none()
            && let Some((from, to)) = reply::cname_target(w.bytes(), &pass.resp)
        {
            let mut q = Vec::new();
            lookup_query(&to, pass.qtype, &mut q);
            if let Ok(lq) = Query::parse(&q) {
                let lreq = inner_request(req, &lq);
                let mut lw = ResponseWriter::new();
                let o = tail.run_async(&lreq, &mut lw).await;
                if o.error.is_none() {
                    lookup = lw.bytes().to_vec();
                    splice = Some((from, to));
                }
            }
        }
        let cname = splice.map(|(from, to)| CnameSplice {
            from,
            to,
            lookup: Some(&lookup),
        });
        self.finish(req, &pass, revert, outcome, w, cname)
    }
}

/// The OPT CoreDNS's scrub reads from the rewritten query: as the rules
/// left it, with the `revert` rules undone once.
fn scrub_opt(pass: &Pass<'_>) -> Option<Opt> {
    let mut o = pass.opt.clone()?;
    for r in pass.resp.iter().rev() {
        match r {
            Resp::EdnsRemove(code) => {
                if let Some(i) = o.options.iter().position(|(c, _)| c == code) {
                    o.options.remove(i);
                }
            }
            Resp::EdnsRestore(code, old) => {
                if let Some(x) = o.options.iter_mut().find(|(c, _)| c == code) {
                    x.1 = old.clone();
                }
            }
            _ => {}
        }
    }
    Some(o)
}

/// The request the plugins behind see: the rewritten query, the rest as
/// received.
fn inner_request<'a>(req: &'a Request<'_>, q: &'a Query<'a>) -> Request<'a> {
    Request {
        query: q,
        client: req.client,
        local: req.local,
        proto: req.proto,
        zone: req.zone,
        server: req.server,
        received: req.received,
        edits: req.edits.copied(),
    }
}

/// The query as the rules left it: header and other records as received,
/// the question rewritten, the OPT record replaced (or added).
fn build_query(req: &Request<'_>, pass: &Pass<'_>, out: &mut Vec<u8>) {
    let raw = req.query.raw();
    out.clear();
    out.extend_from_slice(&raw[..HEADER_LEN]);
    let name = pass.wire.as_ref().unwrap_or(req.qname());
    out.extend_from_slice(name.as_wire());
    out.extend_from_slice(&pass.qtype.to_be_bytes());
    out.extend_from_slice(&pass.qclass.to_be_bytes());
    let rest = &raw[req.query.question_range().end..];
    let Some(opt) = &pass.opt else {
        out.extend_from_slice(rest);
        return;
    };
    let base = req.query.question_range().end;
    let (before, after, added) = match req.query.edns() {
        // The OPT record: root owner (1), type, class, TTL, length (10).
        Some(e) if e.options.start >= base + 11 => (
            &raw[base..e.options.start - 11],
            &raw[e.options.end..],
            false,
        ),
        _ => (rest, &[][..], true),
    };
    out.extend_from_slice(before);
    out.push(0);
    out.extend_from_slice(&41u16.to_be_bytes());
    out.extend_from_slice(&opt.udp_size.to_be_bytes());
    out.extend_from_slice(&opt.ttl.to_be_bytes());
    let len_at = out.len();
    out.extend_from_slice(&[0, 0]);
    opt.encode(out);
    let len = (out.len() - len_at - 2) as u16;
    out[len_at..len_at + 2].copy_from_slice(&len.to_be_bytes());
    out.extend_from_slice(after);
    if added {
        let ar = u16::from_be_bytes([out[10], out[11]]).saturating_add(1);
        out[10..12].copy_from_slice(&ar.to_be_bytes());
    }
}

/// The query CoreDNS's upstream lookup sends for a CNAME's new target:
/// RD set, class IN, no EDNS.
fn lookup_query(name: &clusterdns_wire::Name, qtype: u16, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&fastrand::u16(..).to_be_bytes());
    out.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    out.extend_from_slice(name.as_wire());
    out.extend_from_slice(&qtype.to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
}

impl Plugin for Rewrite {
    fn name(&self) -> &'static str {
        "rewrite"
    }

    fn query(&self, req: &Request<'_>, w: &mut ResponseWriter) -> Flow {
        let (pass, revert) = match self.verdict(req) {
            Verdict::Pass => return Flow::Next,
            Verdict::Bad(e) => return Flow::Fail(e),
            Verdict::Rewrite { pass, revert } => (pass, revert),
        };
        if self.cname {
            return w.defer_with(Box::new(Note(None)));
        }
        let Some(tail) = self.tail.get() else {
            return Flow::Next;
        };
        if tail.plugins().is_empty() {
            return self.failed(
                req,
                &pass,
                revert,
                PluginError::NoNext { plugin: "rewrite" },
                w,
            );
        }
        if !pass.changed(req) {
            return match tail.run_sync(req, w) {
                Ok(o) => self.finish(req, &pass, revert, o, w, None),
                Err(d) => w.defer_with(Box::new(Note(Some(d)))),
            };
        }
        let ran = SCRATCH.with(|s| {
            let mut fresh = Vec::new();
            let mut guard = s.try_borrow_mut();
            let packet = match guard.as_deref_mut() {
                Ok((p, _)) => p,
                Err(_) => &mut fresh,
            };
            build_query(req, &pass, packet);
            let q = Query::parse(packet).ok()?;
            let inner = inner_request(req, &q);
            Some(tail.run_sync(&inner, w))
        });
        match ran {
            // The rewritten query does not parse (too long for a message).
            None => Flow::Fail(PluginError::ServerFailure {
                plugin: "rewrite",
                msg: "rewritten query does not parse".into(),
            }),
            Some(Ok(o)) => self.finish(req, &pass, revert, o, w, None),
            Some(Err(d)) => w.defer_with(Box::new(Note(Some(d)))),
        }
    }

    fn query_async<'a>(
        &'a self,
        req: &'a Request<'a>,
        w: &'a mut ResponseWriter,
    ) -> BoxFuture<'a, Flow> {
        Box::pin(async move {
            let from = w.take_note::<Note>().and_then(|n| n.0);
            self.serve_async(req, w, from).await
        })
    }
}

#[cfg(test)]
mod tests;
