//! Rewriting a reply back: the question as asked, the answer rules, the
//! OPT record as CoreDNS's scrub would leave it for the rewritten query.

use std::borrow::Cow;

use clusterdns_wire::{
    Class, Header, Message, MessageBuilder, Name, RData, Record, RecordData, RecordView, Rtype,
    Section,
};

use std::ops::Range;

use super::rules::{AnswerRule, Opt, Resp, StrRewriter, Text};

/// Option codes CoreDNS's scrub copies from a query's OPT into a reply
/// that has none (`edns.SupportedOption`), before the local codes the
/// rules register.
const SUPPORTED: &[u16] = &[1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12];

/// What to do to a reply.
pub(super) struct Plan<'a, 'r> {
    /// The question to write (the one asked), or `None` to keep the reply's.
    pub question: Option<(&'a Name, Rtype, Class)>,
    /// The rules that rewrite the reply, in the order they matched.
    pub resp: &'a [Resp<'r>],
    /// The rewritten query's OPT as the scrub sees it, when a rule
    /// changed it.
    pub scrub_opt: Option<&'a Opt>,
    /// The local option codes the rules register as supported.
    pub local_codes: &'a [u16],
    /// A CNAME rewrite: the record's old target, its new one, and the
    /// answer (records, TC) of the lookup of the new target.
    pub cname: Option<CnameSplice<'a>>,
}

/// The result of a `cname` rule's lookup.
pub(super) struct CnameSplice<'a> {
    pub from: Name,
    pub to: Name,
    pub lookup: Option<&'a [u8]>,
}

/// One record on its way to the new message.
struct Rr {
    section: Section,
    owner: Name,
    class: Class,
    ttl: u32,
    data: Data,
    /// From a CNAME lookup: CoreDNS's rules never visit these.
    fresh: bool,
}

/// A record's data: decoded when it holds names that may be compressed
/// (so it can be written again), else where its bytes are.
// Records live in a per-thread vector that is reused: boxing the decoded
// form would allocate per record.
#[allow(clippy::large_enum_variant)]
enum Data {
    /// The rdata at `at` in the reply (`lookup`: in the CNAME lookup's).
    Raw {
        rtype: Rtype,
        at: Range<usize>,
        lookup: bool,
    },
    Rec(RecordData),
}

/// Buffers kept per thread: the rewritten message and its records.
#[derive(Default)]
pub(super) struct Scratch {
    pub out: Vec<u8>,
    rrs: Vec<Rr>,
}

impl Rr {
    fn of(v: &RecordView<'_>, msg: &Message<'_>, lookup: bool) -> Option<Rr> {
        let data = match v.rtype {
            Rtype::CNAME | Rtype::NS | Rtype::PTR | Rtype::MX | Rtype::SRV | Rtype::SOA => {
                Data::Rec(v.to_owned_record(msg).ok()?.data)
            }
            // DNAME: one (uncompressed) name, read as a name anyway.
            t if t.0 == 39 => {
                let mut off = v.rdata.start;
                let target = Name::from_wire(msg.as_bytes(), &mut off).ok()?;
                Data::Rec(RecordData::Other {
                    rtype: t,
                    data: target.as_wire().to_vec(),
                })
            }
            t => Data::Raw {
                rtype: t,
                at: v.rdata.clone(),
                lookup,
            },
        };
        Some(Rr {
            section: v.section,
            owner: v.name,
            class: v.class,
            ttl: v.ttl,
            data,
            fresh: lookup,
        })
    }

    /// The value a value rewrite changes (CoreDNS
    /// `getRecordValueForRewrite`) through `rw`.
    fn rewrite_value(&mut self, rw: &dyn Fn(&Name) -> Option<Name>) {
        let Data::Rec(rec) = &mut self.data else {
            return;
        };
        let name = match rec {
            RecordData::Cname(n) | RecordData::Ns(n) | RecordData::Ptr(n) => n,
            RecordData::Mx { exchange, .. } => exchange,
            RecordData::Srv { target, .. } => target,
            RecordData::Soa { mname, .. } => mname,
            RecordData::Other { rtype, data } if rtype.0 == 39 => {
                if let Some(n) = Name::from_uncompressed(data).ok().and_then(|n| rw(&n)) {
                    *data = n.as_wire().to_vec();
                }
                return;
            }
            _ => return,
        };
        if let Some(n) = rw(name) {
            *name = n;
        }
    }
}

/// `name` with its suffix `from` (exact bytes, label-aligned) replaced by
/// `to`; `under`: only for names below `from`, not `from` itself.
fn swap_suffix(name: &Name, from: &Name, to: &Name, under: bool) -> Option<Name> {
    let w = name.as_wire();
    let f = from.as_wire();
    let off = w.len().checked_sub(f.len())?;
    let mut pos = 0;
    while pos < off {
        pos += 1 + usize::from(w[pos]);
    }
    if pos != off || w[off..] != *f || (under && off == 0) {
        return None;
    }
    let mut buf = [0u8; 600];
    let t = to.as_wire();
    buf[..off].copy_from_slice(&w[..off]);
    buf[off..off + t.len()].copy_from_slice(t);
    Name::from_uncompressed(&buf[..off + t.len()]).ok()
}

/// A fixed rewriter on a name: on wire names when it can, else on text.
fn rewrite_with(s: &StrRewriter, name: &Name) -> Option<Name> {
    if let StrRewriter::Suffix {
        wire: Some(wire), ..
    } = s
    {
        return swap_suffix(name, &wire.0, &wire.1, true);
    }
    let text = Text::of(name);
    match s.rewrite(text.as_str()) {
        Cow::Owned(o) => Name::from_ascii(&o).ok(),
        Cow::Borrowed(_) => None,
    }
}

/// The response options of the message, for the `revert` rules.
struct MsgState {
    rcode: u16,
    opt_options: Option<Vec<(u16, Vec<u8>)>>,
}

/// Applies the rules, last first, to one record (`rr` is `None` for a
/// message without records: then only the rcode rules run).
fn apply(resp: &[Resp<'_>], st: &mut MsgState, mut rr: Option<&mut Rr>) {
    for r in resp.iter().rev() {
        match r {
            Resp::Rcode { old, new } => {
                if st.rcode == *old {
                    st.rcode = *new;
                }
            }
            Resp::EdnsRemove(code) => {
                if let Some(opts) = &mut st.opt_options
                    && let Some(i) = opts.iter().position(|(c, _)| c == code)
                {
                    opts.remove(i);
                }
            }
            Resp::EdnsRestore(code, old) => {
                if let Some(opts) = &mut st.opt_options
                    && let Some(o) = opts.iter_mut().find(|(c, _)| c == code)
                {
                    o.1 = old.clone();
                }
            }
            Resp::Cname(_) => {}
            _ => {
                let Some(rec) = rr.as_deref_mut() else {
                    continue;
                };
                record_rule(r, rec);
            }
        }
    }
}

/// A rule that changes a record.
fn record_rule(r: &Resp<'_>, rec: &mut Rr) {
    match r {
        Resp::Remap { from, to } => {
            let rw = |n: &Name| swap_suffix(n, from, to, false);
            if let Some(n) = rw(&rec.owner) {
                rec.owner = n;
            }
            rec.rewrite_value(&rw);
        }
        Resp::Answer(AnswerRule::Name(s)) => {
            if let Some(n) = rewrite_with(s, &rec.owner) {
                rec.owner = n;
            }
        }
        Resp::Answer(AnswerRule::Value(s)) => rec.rewrite_value(&|n| rewrite_with(s, n)),
        Resp::Ttl { min, max } => {
            if rec.ttl < *min {
                rec.ttl = *min;
            } else if rec.ttl > *max {
                rec.ttl = *max;
            }
        }
        _ => {}
    }
}

/// The first CNAME of the answer a `cname` rule retargets: its target
/// and the new one.
pub(super) fn cname_target(reply: &[u8], resp: &[Resp<'_>]) -> Option<(Name, Name)> {
    let msg = Message::parse(reply).ok()?;
    for v in msg.section(Section::Answer) {
        if v.rtype != Rtype::CNAME {
            continue;
        }
        let Ok(Record {
            data: RecordData::Cname(target),
            ..
        }) = v.to_owned_record(&msg)
        else {
            continue;
        };
        let text = Text::of(&target);
        for r in resp.iter().rev() {
            if let Resp::Cname(c) = r
                && let Some(to) = c.target(text.as_str())
                && let Ok(to) = Name::from_ascii(&to)
            {
                return Some((target, to));
            }
        }
    }
    None
}

/// Writes into `scratch.out` the reply `reply` rewritten after `plan`.
/// `None` when the reply does not parse (it is then left as it was).
pub(super) fn rewrite(reply: &[u8], plan: &Plan<'_, '_>, scratch: &mut Scratch) -> Option<()> {
    let msg = Message::parse(reply).ok()?;
    let mut header = msg.header();
    let rrs = &mut scratch.rrs;
    rrs.clear();
    // The reply's OPT: its TTL (extended rcode) and options; it stays
    // among the records too, for the per-record rules.
    // The options are only taken apart for the `revert` rules.
    let reverts = plan
        .resp
        .iter()
        .any(|r| matches!(r, Resp::EdnsRemove(_) | Resp::EdnsRestore(..)));
    let mut ext = 0u16;
    let mut opt_options = None;
    for v in msg.records() {
        if v.rtype == Rtype::OPT {
            ext = (v.ttl >> 24) as u16;
            if reverts {
                opt_options = Some(options(v.rdata_bytes(&msg)));
            }
        }
        rrs.push(Rr::of(&v, &msg, false)?);
    }
    let lookup = plan.cname.as_ref().and_then(|c| c.lookup);
    if let Some(splice) = &plan.cname {
        splice_cname(rrs, splice, &mut header);
    }
    let mut st = MsgState {
        rcode: (ext << 4) | u16::from(header.rcode_low()),
        opt_options,
    };
    // CoreDNS: authority, then answer, then additional.
    let order = [Section::Authority, Section::Answer, Section::Additional];
    if rrs.is_empty() {
        apply(plan.resp, &mut st, None);
    } else {
        for s in order {
            for rr in rrs.iter_mut().filter(|r| r.section == s && !r.fresh) {
                apply(plan.resp, &mut st, Some(rr));
            }
        }
    }
    header.set_rcode_low((st.rcode & 0xF) as u8);
    let mut b = MessageBuilder::new(&mut scratch.out, header);
    match plan.question {
        Some((name, t, c)) => b.push_question(name, t, c).ok()?,
        None => {
            if let Some((n, t, c)) = msg.question() {
                b.push_question(&n, t, c).ok()?;
            }
        }
    }
    let mut has_opt = false;
    for s in [Section::Answer, Section::Authority, Section::Additional] {
        for rr in rrs.iter().filter(|r| r.section == s) {
            match &rr.data {
                Data::Raw { rtype, at, .. } if *rtype == Rtype::OPT => {
                    has_opt = true;
                    let raw = reply.get(at.clone())?;
                    let (mut class, mut ttl) = (rr.class, rr.ttl);
                    if let Some(o) = plan.scrub_opt {
                        class = Class(o.udp_size);
                        ttl &= 0xff00;
                        if o.do_bit() {
                            ttl |= 0x8000;
                        }
                    }
                    // The rcode's high bits, as miekg/dns packs them.
                    ttl = (ttl & 0x00ff_ffff) | (u32::from(st.rcode >> 4) << 24);
                    let mut built = Vec::new();
                    let data = match &st.opt_options {
                        Some(opts) => {
                            for (code, d) in opts {
                                push_option(&mut built, *code, d);
                            }
                            &built[..]
                        }
                        None => raw,
                    };
                    let rd = RData::Raw {
                        rtype: Rtype::OPT,
                        data,
                    };
                    b.push(s, &Name::root(), class, ttl, &rd).ok()?;
                }
                Data::Raw {
                    rtype,
                    at,
                    lookup: from_lookup,
                } => {
                    let src = if *from_lookup { lookup? } else { reply };
                    let rd = RData::Raw {
                        rtype: *rtype,
                        data: src.get(at.clone())?,
                    };
                    b.push(s, &rr.owner, rr.class, rr.ttl, &rd).ok()?;
                }
                Data::Rec(rec) => {
                    b.push(s, &rr.owner, rr.class, rr.ttl, &rec.as_rdata())
                        .ok()?;
                }
            }
        }
    }
    if let (false, Some(o)) = (has_opt, plan.scrub_opt) {
        // The scrub gives a reply without OPT the query's, with the
        // options it knows.
        let mut data = Vec::new();
        for (code, d) in &o.options {
            if SUPPORTED.contains(code) || plan.local_codes.contains(code) {
                push_option(&mut data, *code, d);
            }
        }
        let ttl = (u32::from(st.rcode >> 4) << 24) | if o.do_bit() { 0x8000 } else { 0 };
        let rd = RData::Raw {
            rtype: Rtype::OPT,
            data: &data,
        };
        b.push(
            Section::Additional,
            &Name::root(),
            Class(o.udp_size),
            ttl,
            &rd,
        )
        .ok()?;
    }
    b.finish();
    Some(())
}

fn push_option(out: &mut Vec<u8>, code: u16, data: &[u8]) {
    out.extend_from_slice(&code.to_be_bytes());
    out.extend_from_slice(&(data.len() as u16).to_be_bytes());
    out.extend_from_slice(data);
}

fn options(data: &[u8]) -> Vec<(u16, Vec<u8>)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i + 4 <= data.len() {
        let code = u16::from_be_bytes([data[i], data[i + 1]]);
        let len = usize::from(u16::from_be_bytes([data[i + 2], data[i + 3]]));
        let Some(d) = data.get(i + 4..i + 4 + len) else {
            break;
        };
        out.push((code, d.to_vec()));
        i += 4 + len;
    }
    out
}

/// CoreDNS's CNAME rewrite: the answer keeps its CNAMEs up to the one
/// retargeted (which points at the new target), then the lookup's answer;
/// TC comes from the lookup.
fn splice_cname(rrs: &mut Vec<Rr>, splice: &CnameSplice<'_>, header: &mut Header) {
    let mut kept = Vec::with_capacity(rrs.len());
    let mut done = false;
    for mut rr in rrs.drain(..) {
        if rr.section != Section::Answer {
            kept.push(rr);
            continue;
        }
        if done {
            continue;
        }
        if let Data::Rec(RecordData::Cname(target)) = &mut rr.data {
            if *target == splice.from {
                *target = splice.to;
                done = true;
            }
            kept.push(rr);
        }
    }
    let mut tc = false;
    let mut extra = Vec::new();
    if let Some(m) = splice.lookup.and_then(|l| Message::parse(l).ok()) {
        tc = m.header().tc();
        extra.extend(
            m.section(Section::Answer)
                .filter_map(|v| Rr::of(&v, &m, true)),
        );
    }
    // Answers first, in order, then the other sections as they were.
    let (mut answers, others): (Vec<Rr>, Vec<Rr>) =
        kept.into_iter().partition(|r| r.section == Section::Answer);
    answers.extend(extra);
    answers.extend(others);
    *rrs = answers;
    header.set_flag(clusterdns_wire::header::FLAG_TC, tc);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remap_takes_the_name_and_names_under_it() {
        let n = |s: &str| Name::from_ascii(s).unwrap();
        let (from, to) = (n("b.x."), n("a.y."));
        assert_eq!(swap_suffix(&n("b.x."), &from, &to, false), Some(n("a.y.")));
        assert_eq!(
            swap_suffix(&n("c.b.x."), &from, &to, false),
            Some(n("c.a.y."))
        );
        assert_eq!(swap_suffix(&n("cb.x."), &from, &to, false), None);
        assert_eq!(swap_suffix(&n("B.x."), &from, &to, false), None);
        assert_eq!(swap_suffix(&n("b.x."), &from, &to, true), None);
    }
}
