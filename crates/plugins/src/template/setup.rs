//! Reading `template` directives, with CoreDNS's error texts.

use std::sync::Arc;

use clusterdns_contract::{BlockChain, SetupCtx};
use clusterdns_corefile::{ConfigError, Directive, normalize_zones};
use clusterdns_wire::{Class, Name, Rcode, Record, Rtype};
use regex::Regex;

use super::text::Template;
use super::{Rr, TemplatePlugin, Tmpl};
use clusterdns_gocompat::regexp as goregexp;

/// CoreDNS refuses longer patterns (they can exhaust memory compiling).
const MAX_REGEX_LEN: usize = 10_000;

pub(super) fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    let mut templates = Vec::new();
    let mut all_zones: Vec<Name> = Vec::new();
    for d in dirs {
        let t = parse(ctx, d)?;
        all_zones.extend(t.zones.iter().map(|z| z.0));
        templates.push(t);
    }
    let metrics = super::Metrics::new(&ctx.shared.metrics);
    // CNAME targets are looked up through the whole block again, as
    // CoreDNS's re-entry of its server does.
    let tail = BlockChain::default();
    ctx.bind_chain(&tail);
    ctx.add_plugin(Arc::new(TemplatePlugin {
        zones: all_zones,
        templates,
        metrics,
        tail,
    }));
    Ok(())
}

/// Zones as CoreDNS's `OriginsFromArgsOrServerBlock`: bad ones skipped.
fn origins(args: &[&str], block: &[String]) -> Vec<(Name, String)> {
    let src: Vec<&str> = if args.is_empty() {
        block.iter().map(String::as_str).collect()
    } else {
        args.to_vec()
    };
    src.into_iter()
        .filter_map(|a| normalize_zones(a).ok())
        .flatten()
        .filter_map(|z| Some((Name::from_ascii(&z).ok()?, z)))
        .collect()
}

/// A mnemonic exactly as miekg/dns spells it (its maps are case-sensitive).
fn exact<T: std::str::FromStr + Copy>(
    s: &str,
    mnemonic: impl Fn(T) -> Option<&'static str>,
) -> Option<T> {
    let v: T = s.parse().ok()?;
    (mnemonic(v) == Some(s)).then_some(v)
}

fn parse(ctx: &SetupCtx<'_>, d: &Directive) -> Result<Tmpl, ConfigError> {
    let args: Vec<&str> = d.arg_texts().collect();
    let Some(class) = args.first() else {
        return Err(d.arg_err());
    };
    let qclass = match exact::<Class>(class, Class::mnemonic) {
        // ClassToString knows these only.
        Some(c) if super::class_text(c) == *class => c,
        _ => return Err(d.args[0].err(format!("invalid query class {class}"))),
    };
    let Some(rtype) = args.get(1) else {
        return Err(d.arg_err());
    };
    let Some(qtype) = exact::<Rtype>(rtype, Rtype::mnemonic) else {
        return Err(d.args[1].err(format!("invalid RR class {rtype}")));
    };
    let zones = origins(&args[2..], &ctx.zones());
    let mut t = Tmpl {
        zones,
        qclass,
        qtype,
        regex: Vec::new(),
        reads_match: false,
        answer: Vec::new(),
        additional: Vec::new(),
        authority: Vec::new(),
        rcode: Rcode::NOERROR,
        ederror: None,
        fall: None,
    };
    for p in &d.block {
        let pargs: Vec<&str> = p.arg_texts().collect();
        let name = p.name.text.as_str();
        match name {
            "match" => {
                if pargs.is_empty() {
                    return Err(p.arg_err());
                }
                for re in pargs {
                    if re.len() > MAX_REGEX_LEN {
                        return Err(p.err(format!(
                            "regex pattern too long: {} > {MAX_REGEX_LEN}",
                            re.len()
                        )));
                    }
                    let r = Regex::new(re).map_err(|e| {
                        let why = goregexp::describe(re, &e);
                        p.err(format!(
                            "could not parse regex: {re}, error parsing regexp: {why}"
                        ))
                    })?;
                    t.regex.push(r);
                }
            }
            "answer" | "additional" | "authority" => {
                if pargs.is_empty() {
                    return Err(p.arg_err());
                }
                let last = pargs.last().copied().unwrap_or("");
                // CoreDNS ends two of the three messages with a newline.
                let nl = if name == "answer" { "" } else { "\n" };
                for text in &pargs {
                    let tpl = Template::parse(text).map_err(|e| {
                        p.err(format!(
                            "could not compile template: {last}, template: {name}:{}: {}{nl}",
                            e.line, e.msg
                        ))
                    })?;
                    t.reads_match |= tpl.reads_match();
                    let fixed = tpl
                        .static_text()
                        .filter(|s| !s.trim().is_empty())
                        .and_then(|s| s.parse::<Record>().ok());
                    let rr = Rr { text: tpl, fixed };
                    match name {
                        "answer" => t.answer.push(rr),
                        "additional" => t.additional.push(rr),
                        _ => t.authority.push(rr),
                    }
                }
            }
            "rcode" => {
                let Some(code) = pargs.first() else {
                    return Err(p.arg_err());
                };
                if pargs.len() > 1 {
                    // Caddy reads the next word as the next property.
                    return Err(p.args[1].err(format!(
                        "Wrong argument count or unexpected line ending after '{}'",
                        pargs[1]
                    )));
                }
                let Some(rc) = exact::<Rcode>(code, Rcode::mnemonic).or(match *code {
                    "BADVERS" => Some(Rcode::BADVERS),
                    _ => None,
                }) else {
                    return Err(p.err(format!("unknown rcode {code}")));
                };
                if rc.0 > 15 {
                    return Err(p.err(format!(
                        "rcode {code} needs EDNS0, which clusterdns's template does not add"
                    )));
                }
                t.rcode = rc;
            }
            "ederror" => {
                if pargs.is_empty() || pargs.len() > 2 {
                    return Err(p.arg_err());
                }
                let code = pargs[0].parse::<u16>().map_err(|_| {
                    let last = pargs.last().copied().unwrap_or("");
                    let what = if pargs[0].bytes().all(|b| b.is_ascii_digit()) && !pargs[0].is_empty() {
                        "value out of range"
                    } else {
                        "invalid syntax"
                    };
                    p.err(format!(
                        "error parsing extended DNS error code {last}, strconv.ParseUint: parsing {:?}: {what}\n",
                        pargs[0]
                    ))
                })?;
                t.ederror = Some((
                    code,
                    pargs.get(1).map_or(String::new(), |s| (*s).to_string()),
                ));
            }
            "fallthrough" => {
                t.fall = Some(if pargs.is_empty() {
                    vec![Name::root()]
                } else {
                    origins(&pargs, &[]).into_iter().map(|z| z.0).collect()
                });
            }
            // Accepted and ignored, as CoreDNS does ("remove soon").
            "upstream" => {}
            _ => {
                return Err(p.err(format!(
                    "Wrong argument count or unexpected line ending after '{name}'"
                )));
            }
        }
    }
    if t.regex.is_empty() {
        t.regex
            .push(Regex::new(".*").map_err(|e| d.err(e.to_string()))?);
    }
    Ok(t)
}
