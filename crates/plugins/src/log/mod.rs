#![doc = include_str!("README.md")]

mod format;

use std::cell::RefCell;
use std::sync::Arc;

use clusterdns_contract::{Flow, Outcome, Plugin, PluginDef, Request, ResponseWriter, SetupCtx};
use clusterdns_corefile::{ConfigError, Directive};
use clusterdns_wire::{Message, Name, Opcode, Rcode, Rtype};

pub use format::{COMBINED_LOG_FORMAT, COMMON_LOG_FORMAT, Format};

/// Registration of *log*.
pub const DEF: PluginDef = PluginDef { name: "log", setup };

fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    let rules = parse(dirs)?;
    ctx.add_plugin(Arc::new(Log { rules }));
    Ok(())
}

/// The response classes of `class` (CoreDNS `response.Class`).
pub mod class {
    /// NOERROR with data, or a delegation.
    pub const SUCCESS: u8 = 1;
    /// NXDOMAIN or NODATA.
    pub const DENIAL: u8 = 2;
    /// Everything else.
    pub const ERROR: u8 = 4;
    /// Every class.
    pub const ALL: u8 = 7;
}

/// One `log` rule: queries under `scope` are logged with `format` when
/// their reply's class is in `classes`.
#[derive(Debug)]
pub struct Rule {
    /// The name scope (lowercase).
    pub scope: Name,
    /// The classes logged (bits of [`class`]).
    pub classes: u8,
    /// The parsed format.
    pub format: Format,
}

/// Reads every `log` directive of a block into rules, in order.
fn parse(dirs: &[&Directive]) -> Result<Vec<Rule>, ConfigError> {
    let mut rules = Vec::new();
    for d in dirs {
        let args: Vec<&str> = d.arg_texts().collect();
        let (names, format): (&[&str], String) = match args.len() {
            0 => (&["."], COMMON_LOG_FORMAT.to_string()),
            1 => (&args[..], COMMON_LOG_FORMAT.to_string()),
            n if args[n - 1].contains('{') => (
                &args[..n - 1],
                args[n - 1]
                    .replace("{common}", COMMON_LOG_FORMAT)
                    .replace("{combined}", COMBINED_LOG_FORMAT),
            ),
            _ => (&args[..], COMMON_LOG_FORMAT.to_string()),
        };
        let mut classes = 0u8;
        for line in &d.block {
            match line.name.text.as_str() {
                "class" => {
                    if line.args.is_empty() {
                        return Err(line.arg_err());
                    }
                    for a in &line.args {
                        classes |= match a.text.as_str() {
                            "all" => class::ALL,
                            "success" => class::SUCCESS,
                            "denial" => class::DENIAL,
                            "error" => class::ERROR,
                            other => {
                                return Err(a.err(format!("invalid Class: {other}")));
                            }
                        };
                    }
                }
                other => return Err(line.err(format!("unknown property '{other}'"))),
            }
        }
        if classes == 0 {
            classes = class::ALL;
        }
        for n in names {
            let scope = fqdn_name(n).map_err(|e| d.err(format!("invalid name {n}: {e}")))?;
            rules.push(Rule {
                scope,
                classes,
                format: Format::parse(&format),
            });
        }
    }
    Ok(rules)
}

fn fqdn_name(s: &str) -> Result<Name, clusterdns_wire::NameError> {
    let mut n = if s.ends_with('.') {
        Name::from_ascii(s)?
    } else {
        Name::from_ascii(&format!("{s}."))?
    };
    n.make_lowercase();
    Ok(n)
}

/// The *log* handler.
#[derive(Debug)]
pub struct Log {
    rules: Vec<Rule>,
}

thread_local! {
    /// The line buffer of this worker thread, reused for every line.
    static LINE: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(512));
}

impl Plugin for Log {
    fn name(&self) -> &'static str {
        "log"
    }

    fn query(&self, _req: &Request<'_>, _w: &mut ResponseWriter) -> Flow {
        Flow::Next
    }

    fn response(&self, req: &Request<'_>, w: &mut ResponseWriter, _outcome: &Outcome) {
        let qname = req.qname_lower();
        let Some(rule) = self.rules.iter().find(|r| qname.ends_with(&r.scope)) else {
            return;
        };
        if rule.classes != class::ALL && rule.classes & classify(req, w.bytes()) == 0 {
            return;
        }
        LINE.with(|line| {
            let Ok(mut buf) = line.try_borrow_mut() else {
                return;
            };
            buf.clear();
            buf.extend_from_slice(b"[INFO] ");
            rule.format
                .render(req, w.bytes(), w.uncompressed_len(), &mut buf);
            buf.push(b'\n');
            clusterdns_contract::log::raw(&buf);
        });
    }
}

/// CoreDNS's `response.Typify` then `Classify` of a reply, as a class bit.
pub fn classify(req: &Request<'_>, reply: &[u8]) -> u8 {
    let Ok(m) = Message::parse(reply) else {
        return class::ERROR;
    };
    let h = m.header();
    let op = h.opcode();
    if op == Opcode::UPDATE || op == Opcode::NOTIFY {
        return class::ERROR;
    }
    if req.qtype() == Rtype::AXFR || req.qtype() == Rtype::IXFR {
        return class::ERROR;
    }
    let rcode = Rcode(u16::from(h.rcode_low()));
    if h.ancount > 0 && rcode == Rcode::NOERROR {
        return class::SUCCESS;
    }
    if h.ancount > 0 && rcode == Rcode::NXDOMAIN {
        return class::ERROR;
    }
    let soa = m
        .section(clusterdns_wire::Section::Authority)
        .any(|r| r.rtype == Rtype::SOA);
    if soa && rcode == Rcode::NOERROR {
        return class::DENIAL;
    }
    if rcode == Rcode::NXDOMAIN {
        return class::DENIAL;
    }
    if rcode == Rcode::SERVFAIL || rcode == Rcode::NOTIMP {
        return class::ERROR;
    }
    // NOERROR without data or SOA: data or a delegation.
    if rcode == Rcode::NOERROR {
        return class::SUCCESS;
    }
    class::ERROR
}

#[cfg(test)]
mod tests;
