//! Rewriting a reply back: the question as asked, the answer rules, the
//! OPT record as CoreDNS's scrub would leave it for the rewritten query.

use std::borrow::Cow;

use clusterdns_wire::{
    Class, Header, Message, MessageBuilder, Name, RData, Record, RecordData, RecordView, Rtype,
    Section,
};

use super::rules::{AnswerRule, Opt, Resp, Text};

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
    rec: Record,
    /// From a CNAME lookup: CoreDNS's rules never visit these.
    fresh: bool,
}

/// A record's owned form; rdata of types whose names may be compressed
/// is decoded (so it can be written again), others kept as bytes.
fn owned(v: &RecordView<'_>, msg: &Message<'_>) -> Option<Record> {
    match v.rtype {
        Rtype::CNAME | Rtype::NS | Rtype::PTR | Rtype::MX | Rtype::SRV | Rtype::SOA => {
            v.to_owned_record(msg).ok()
        }
        _ if v.rtype.0 == 39 => {
            // DNAME: one (uncompressed) name, read as a name anyway.
            let mut off = v.rdata.start;
            let target = Name::from_wire(msg.as_bytes(), &mut off).ok()?;
            Some(Record {
                name: v.name,
                class: v.class,
                ttl: v.ttl,
                data: RecordData::Other {
                    rtype: Rtype(39),
                    data: target.as_wire().to_vec(),
                },
            })
        }
        _ => Some(Record {
            name: v.name,
            class: v.class,
            ttl: v.ttl,
            data: RecordData::Other {
                rtype: v.rtype,
                data: v.rdata_bytes(msg).to_vec(),
            },
        }),
    }
}

/// The name a value rewrite looks at (CoreDNS `getRecordValueForRewrite`).
fn value_name(rec: &mut Record) -> Option<&mut Name> {
    match &mut rec.data {
        RecordData::Cname(n) | RecordData::Ns(n) | RecordData::Ptr(n) => Some(n),
        RecordData::Mx { exchange, .. } => Some(exchange),
        RecordData::Srv { target, .. } => Some(target),
        RecordData::Soa { mname, .. } => Some(mname),
        _ => None,
    }
}

/// A DNAME's target, kept as wire bytes in `Other`.
fn dname_target(rec: &mut Record) -> Option<&mut Vec<u8>> {
    match &mut rec.data {
        RecordData::Other { rtype, data } if rtype.0 == 39 => Some(data),
        _ => None,
    }
}

/// `rw` on a name; the name stays when the result is not one.
fn rewrite_name(name: &mut Name, rw: impl Fn(&str) -> Option<String>) {
    let text = Text::of(name);
    if let Some(new) = rw(text.as_str())
        && let Ok(n) = Name::from_ascii(&new)
    {
        *name = n;
    }
}

/// The value of a record through `rw`.
fn rewrite_value(rec: &mut Record, rw: &dyn Fn(&str) -> Option<String>) {
    if let Some(n) = value_name(rec) {
        rewrite_name(n, rw);
    } else if let Some(wire) = dname_target(rec)
        && let Ok(mut n) = Name::from_uncompressed(wire)
    {
        rewrite_name(&mut n, rw);
        *wire = n.as_wire().to_vec();
    }
}

/// CoreDNS's remap of `answer auto`: `src` equal to `from` or under it.
fn remap(src: &str, from: &str, to: &str) -> Option<String> {
    if src == from {
        return Some(to.to_string());
    }
    let head = src.strip_suffix(from)?;
    head.ends_with('.').then(|| format!("{head}{to}"))
}

/// The response options of the message, for the `revert` rules.
struct MsgState {
    rcode: u16,
    opt_options: Option<Vec<(u16, Vec<u8>)>>,
}

/// Applies the rules, last first, to one record (`rr` is `None` for a
/// message without records: then only the rcode rules run).
fn apply(resp: &[Resp<'_>], st: &mut MsgState, mut rr: Option<&mut Record>) {
    for r in resp.iter().rev() {
        match r {
            Resp::Rcode { old, new } => {
                if st.rcode == *old {
                    st.rcode = *new;
                }
            }
            _ if rr.is_none() => {}
            Resp::Remap { from, to } => {
                let rec = rr.as_deref_mut().expect("checked");
                let rw = |s: &str| remap(s, from, to);
                rewrite_name(&mut rec.name, rw);
                rewrite_value(rec, &rw);
            }
            Resp::Answer(a) => {
                let rec = rr.as_deref_mut().expect("checked");
                match a {
                    AnswerRule::Name(s) => rewrite_name(&mut rec.name, |n| match s.rewrite(n) {
                        Cow::Owned(o) => Some(o),
                        Cow::Borrowed(_) => None,
                    }),
                    AnswerRule::Value(s) => rewrite_value(rec, &|n| match s.rewrite(n) {
                        Cow::Owned(o) => Some(o),
                        Cow::Borrowed(_) => None,
                    }),
                }
            }
            Resp::Ttl { min, max } => {
                let rec = rr.as_deref_mut().expect("checked");
                if rec.ttl < *min {
                    rec.ttl = *min;
                } else if rec.ttl > *max {
                    rec.ttl = *max;
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
        }
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

/// Writes into `out` the reply `reply` rewritten after `plan`. `None`
/// when the reply does not parse (it is then left as it was).
pub(super) fn rewrite(reply: &[u8], plan: &Plan<'_, '_>, out: &mut Vec<u8>) -> Option<()> {
    let msg = Message::parse(reply).ok()?;
    let mut header = msg.header();
    let mut rrs: Vec<Rr> = Vec::with_capacity(
        usize::from(header.ancount) + usize::from(header.nscount) + usize::from(header.arcount),
    );
    // The reply's OPT: its TTL (extended rcode) and options; it stays
    // among the records too, for the per-record rules.
    let mut ext = 0u16;
    let mut opt_options = None;
    for v in msg.records() {
        if v.rtype == Rtype::OPT {
            ext = (v.ttl >> 24) as u16;
            opt_options = Some(options(v.rdata_bytes(&msg)));
        }
        rrs.push(Rr {
            section: v.section,
            rec: owned(&v, &msg)?,
            fresh: false,
        });
    }
    if let Some(splice) = &plan.cname {
        splice_cname(&mut rrs, splice, &mut header);
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
                apply(plan.resp, &mut st, Some(&mut rr.rec));
            }
        }
    }
    header.set_rcode_low((st.rcode & 0xF) as u8);
    let mut b = MessageBuilder::new(out, header);
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
            if rr.rec.rtype() == Rtype::OPT {
                has_opt = true;
                let mut data = Vec::new();
                let (mut class, mut ttl) = (rr.rec.class, rr.rec.ttl);
                if let Some(o) = plan.scrub_opt {
                    class = Class(o.udp_size);
                    ttl &= 0xff00;
                    if o.do_bit() {
                        ttl |= 0x8000;
                    }
                }
                // The rcode's high bits, as miekg/dns packs them.
                ttl = (ttl & 0x00ff_ffff) | (u32::from(st.rcode >> 4) << 24);
                for (code, d) in st.opt_options.iter().flatten() {
                    push_option(&mut data, *code, d);
                }
                let rd = RData::Raw {
                    rtype: Rtype::OPT,
                    data: &data,
                };
                b.push(s, &Name::root(), class, ttl, &rd).ok()?;
            } else {
                b.push_record(s, &rr.rec).ok()?;
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
        if let RecordData::Cname(target) = &mut rr.rec.data {
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
        for v in m.section(Section::Answer) {
            if let Some(rec) = owned(&v, &m) {
                extra.push(Rr {
                    section: Section::Answer,
                    rec,
                    fresh: true,
                });
            }
        }
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
        assert_eq!(remap("b.x.", "b.x.", "a.y."), Some("a.y.".into()));
        assert_eq!(remap("c.b.x.", "b.x.", "a.y."), Some("c.a.y.".into()));
        assert_eq!(remap("cb.x.", "b.x.", "a.y."), None);
    }
}
