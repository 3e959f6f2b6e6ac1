#![doc = include_str!("README.md")]

mod metrics;
mod setup;
mod text;

use std::cell::RefCell;
use std::fmt::Write as _;

use clusterdns_contract::{
    BlockChain, BoxFuture, Flow, Plugin, PluginDef, PluginError, Request, ResponseWriter,
};
use clusterdns_wire::{Class, Name, Rcode, Record, RecordData, Rtype, Section};
use regex::Regex;

use metrics::Metrics;
use text::{Data, Template};

/// Registration of *template*.
pub const DEF: PluginDef = PluginDef {
    name: "template",
    setup: setup::setup,
};

/// One record template of a section.
#[derive(Debug)]
struct Rr {
    text: Template,
    /// The record, parsed at setup, when the template has no action.
    fixed: Option<Record>,
}

/// One `template` directive.
#[derive(Debug)]
struct Tmpl {
    zones: Vec<(Name, String)>,
    qclass: Class,
    qtype: Rtype,
    regex: Vec<Regex>,
    /// Whether a record reads `.Match` or `.Group`.
    reads_match: bool,
    answer: Vec<Rr>,
    additional: Vec<Rr>,
    authority: Vec<Rr>,
    rcode: Rcode,
    /// `ederror`: the info code and extra text.
    ederror: Option<(u16, String)>,
    /// `fallthrough`: the zones that fall through, if any.
    fall: Option<Vec<Name>>,
}

/// The *template* handler: its templates, tried in order.
#[derive(Debug)]
pub struct TemplatePlugin {
    zones: Vec<Name>,
    templates: Vec<Tmpl>,
    metrics: Metrics,
    /// The block's whole chain, for the targets of CNAME answers.
    tail: BlockChain,
}

/// The longest of `zones` that `name` is in.
fn longest<'z, T>(zones: &'z [T], name: &Name, zone: impl Fn(&T) -> &Name) -> Option<&'z T> {
    zones
        .iter()
        .filter(|z| name.ends_with(zone(z)))
        .max_by_key(|z| zone(z).len())
}

/// A class as miekg/dns's `ClassToString` names it ("" when it has none).
fn class_text(c: Class) -> &'static str {
    match c.0 {
        1 => "IN",
        2 => "CS",
        3 => "CH",
        4 => "HS",
        254 => "NONE",
        255 => "ANY",
        _ => "",
    }
}

/// How deep CNAME targets are looked up through this plugin again.
const MAX_DEPTH: u8 = 8;

tokio::task_local! {
    /// The lookup depth of the query being answered.
    static DEPTH: u8;
}

thread_local! {
    /// The texts a query's templates read and render, reused per thread.
    static BUFS: RefCell<Bufs> = const { RefCell::new(Bufs::new()) };
}

/// Text buffers, kept per thread so that rendering allocates no string.
struct Bufs {
    /// The query name, lowercase (what the regexes see).
    name: String,
    /// The rendered record.
    rr: String,
    /// The client's address.
    remote: String,
    /// The query name as sent.
    qname: String,
}

impl Bufs {
    const fn new() -> Bufs {
        Bufs {
            name: String::new(),
            rr: String::new(),
            remote: String::new(),
            qname: String::new(),
        }
    }
}

/// A reply worked out on the synchronous pass whose CNAME answers need
/// their targets looked up.
struct Pending {
    rcode: Rcode,
    answer: Vec<Record>,
    authority: Vec<Record>,
    additional: Vec<Record>,
    ederror: Option<(u16, String)>,
}

/// What a matching template makes of a query.
enum Reply {
    /// The records, in reply order (answer, authority, additional).
    Records(Pending),
    /// `rcode SERVFAIL`, or no regex matched without fallthrough.
    ServFail,
}

impl Plugin for TemplatePlugin {
    fn name(&self) -> &'static str {
        "template"
    }

    fn query(&self, req: &Request<'_>, w: &mut ResponseWriter) -> Flow {
        let lower = req.qname_lower();
        if longest(&self.zones, lower, |z| z).is_none() {
            return Flow::Next;
        }
        BUFS.with(|b| {
            let Ok(mut bufs) = b.try_borrow_mut() else {
                return Flow::Fail(PluginError::ServerFailure {
                    plugin: "template",
                    msg: "re-entered".into(),
                });
            };
            let bufs = &mut *bufs;
            bufs.name.clear();
            let _ = write!(bufs.name, "{lower}");
            for t in &self.templates {
                let Some(zone) = longest(&t.zones, lower, |z| &z.0) else {
                    continue;
                };
                let (qc, qt) = (req.qclass(), req.qtype());
                if t.qclass != Class::ANY && qc != Class::ANY && qc != t.qclass {
                    continue;
                }
                if t.qtype != Rtype::ANY && qt != Rtype::ANY && qt != t.qtype {
                    continue;
                }
                let reply = match self.run(t, &zone.1, req, bufs) {
                    Ok(Some(r)) => r,
                    Ok(None) => continue,
                    Err(e) => return Flow::Fail(e),
                };
                return match reply {
                    Reply::ServFail => {
                        w.write_error(req, Rcode::SERVFAIL);
                        Flow::Answered
                    }
                    Reply::Records(p) => {
                        let chase = matches!(qt, Rtype::A | Rtype::AAAA)
                            && p.answer.iter().any(|r| r.rtype() == Rtype::CNAME);
                        if chase {
                            w.defer_with(Box::new(p))
                        } else {
                            write(w, req, &p, &[]);
                            Flow::Answered
                        }
                    }
                };
            }
            Flow::Next
        })
    }

    fn query_async<'a>(
        &'a self,
        req: &'a Request<'a>,
        w: &'a mut ResponseWriter,
    ) -> BoxFuture<'a, Flow> {
        Box::pin(async move {
            // Asked without the synchronous pass: it runs, then the chase.
            let p = match clusterdns_contract::note_or_query::<Pending>(self, req, w) {
                Ok(p) => *p,
                Err(flow) => return flow,
            };
            // Each CNAME answer's target, asked of the whole block again,
            // as CoreDNS's upstream asks its whole server.
            // CoreDNS recurses without a bound on a CNAME loop; here the
            // depth is capped.
            let depth = DEPTH.try_with(|d| *d).unwrap_or(0);
            let chain = self.tail.get();
            let mut found: Vec<Option<Vec<u8>>> = Vec::with_capacity(p.answer.len());
            for r in &p.answer {
                let up = match (&r.data, &chain) {
                    (RecordData::Cname(target), Some(chain)) if depth < MAX_DEPTH => {
                        let ask = crate::pkg::upstream::lookup(chain, req, target, req.qtype());
                        DEPTH.scope(depth + 1, ask).await
                    }
                    _ => None,
                };
                found.push(up);
            }
            write(w, req, &p, &found);
            Flow::Answered
        })
    }
}

impl TemplatePlugin {
    /// Matches `t`'s regexes on `name` and renders its records; `None`
    /// when the query falls through to the next template.
    fn run(
        &self,
        t: &Tmpl,
        zone: &str,
        req: &Request<'_>,
        bufs: &mut Bufs,
    ) -> Result<Option<Reply>, PluginError> {
        let Bufs {
            name,
            rr,
            remote,
            qname,
        } = bufs;
        let name = name.as_str();
        let mut matched = None;
        for re in &t.regex {
            if t.reads_match {
                if let Some(caps) = re.captures(name) {
                    matched = Some((re, Some(caps)));
                    break;
                }
            } else if re.is_match(name) {
                matched = Some((re, None));
                break;
            }
        }
        let Some((re, caps)) = matched else {
            let falls = t
                .fall
                .as_ref()
                .is_some_and(|zs| zs.iter().any(|z| req.qname_lower().ends_with(z)));
            return Ok(if falls { None } else { Some(Reply::ServFail) });
        };
        let (qc, qt) = (req.qclass(), req.qtype());
        let class = class_text(if qc == Class::ANY { t.qclass } else { qc });
        let rtype = (if qt == Rtype::ANY { t.qtype } else { qt })
            .mnemonic()
            .unwrap_or("");
        self.metrics.matched(req.server, zone, class, rtype);
        if t.rcode == Rcode::SERVFAIL {
            return Ok(Some(Reply::ServFail));
        }
        let mut p = Pending {
            rcode: t.rcode,
            answer: Vec::new(),
            authority: Vec::new(),
            additional: Vec::new(),
            ederror: t.ederror.clone(),
        };
        if t.answer.is_empty() && t.authority.is_empty() && t.additional.is_empty() {
            return Ok(Some(Reply::Records(p)));
        }
        remote.clear();
        let _ = write!(remote, "{}", req.client.ip());
        qname.clear();
        let _ = write!(qname, "{}", req.qname());
        let d = Data {
            zone,
            name,
            regex: re.as_str(),
            class,
            rtype,
            remote,
            qname,
            qtype: qt.0,
            qclass: qc.0,
            id: req.query.header().id,
            caps: caps.as_ref().map(|c| (re, c)),
        };
        // CoreDNS renders answer, additional, authority in that order and
        // stops at the first failure.
        let labels = (req.server, zone, class, rtype);
        for (section, list, out) in [
            ("answer", &t.answer, &mut p.answer),
            ("additional", &t.additional, &mut p.additional),
            ("authority", &t.authority, &mut p.authority),
        ] {
            for r in list {
                match self.render(r, section, &d, rr, labels)? {
                    Some(rec) => out.push(rec),
                    None => return Ok(Some(Reply::ServFail)),
                }
            }
        }
        Ok(Some(Reply::Records(p)))
    }

    fn render(
        &self,
        r: &Rr,
        section: &'static str,
        d: &Data<'_>,
        buf: &mut String,
        labels: (&str, &str, &str, &str),
    ) -> Result<Option<Record>, PluginError> {
        if let Some(rec) = &r.fixed {
            return Ok(Some(rec.clone()));
        }
        // CoreDNS returns Go's error itself, which *errors* prints bare.
        let fail = |msg: String| PluginError::Upstream {
            plugin: "template",
            source: std::io::Error::other(msg),
        };
        buf.clear();
        if let Err(e) = r.text.execute(section, d, buf) {
            self.metrics
                .template_failed(labels, section, r.text.label());
            return Err(fail(e));
        }
        // Text without a record (empty, blank, a comment) is no record
        // to miekg/dns either; CoreDNS then trips over the nil record and
        // its panic recovery answers SERVFAIL.
        let body = buf.trim_start();
        if body.is_empty() || body.starts_with(';') {
            return Ok(None);
        }
        match buf.parse::<Record>() {
            Ok(rec) => Ok(Some(rec)),
            Err(e) => {
                self.metrics.rr_failed(labels, section, r.text.label());
                Err(fail(e.to_string()))
            }
        }
    }
}

/// Writes the reply: AA, the template's rcode, the records, each CNAME
/// answer followed by the answers found for its target (`found`, by
/// answer position), the TC bit of the last lookup, and the `ederror`
/// option in an OPT record as CoreDNS adds it (payload 4096, DO set).
fn write(w: &mut ResponseWriter, req: &Request<'_>, p: &Pending, found: &[Option<Vec<u8>>]) {
    let mut b = w.reply(req);
    b.set_aa(true);
    b.set_rcode(p.rcode);
    for (i, r) in p.answer.iter().enumerate() {
        let _ = b.push_record(Section::Answer, r);
        if let Some(Some(up)) = found.get(i)
            && let Ok(msg) = clusterdns_wire::Message::parse(up)
        {
            b.set_tc(msg.header().tc());
            for rec in msg.section(Section::Answer) {
                if let Ok(r) = rec.to_owned_record(&msg) {
                    let _ = b.push_record(Section::Answer, &r);
                }
            }
        }
    }
    for r in &p.authority {
        let _ = b.push_record(Section::Authority, r);
    }
    for r in &p.additional {
        let _ = b.push_record(Section::Additional, r);
    }
    if let Some((code, text)) = &p.ederror {
        let mut opt = Vec::with_capacity(6 + text.len());
        opt.extend_from_slice(&15u16.to_be_bytes());
        let len = u16::try_from(2 + text.len()).unwrap_or(u16::MAX);
        opt.extend_from_slice(&len.to_be_bytes());
        opt.extend_from_slice(&code.to_be_bytes());
        opt.extend_from_slice(text.as_bytes());
        let _ = b.push_opt(4096, true, &opt);
        b.finish();
        // The writer takes replies it built to have no OPT record; set
        // the message again so the server finds this one.
        let msg = w.bytes().to_vec();
        w.set_message(&msg);
        return;
    }
    b.finish();
}

#[cfg(test)]
mod tests;
