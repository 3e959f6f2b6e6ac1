#![doc = include_str!("README.md")]

use std::sync::Arc;

use clusterdns_contract::metrics::{Counter, Family};
use clusterdns_contract::{Flow, Plugin, PluginDef, Request, ResponseWriter, SetupCtx};
use clusterdns_corefile::{ConfigError, Directive, normalize_zones};
use clusterdns_wire::{Name, Rcode, Rtype};

use crate::pkg::nets::Nets;

/// Registration of *acl*.
pub const DEF: PluginDef = PluginDef { name: "acl", setup };

/// What a matching policy does with a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Allow,
    Block,
    Filter,
    Drop,
}

/// One `ACTION [type ...] [net ...]` line.
#[derive(Debug)]
struct Policy {
    action: Action,
    /// The types it matches; `None` matches every type.
    types: Option<Vec<Rtype>>,
    nets: Nets,
}

impl Policy {
    fn matches(&self, qtype: Rtype, ip: std::net::IpAddr) -> bool {
        self.types.as_ref().is_none_or(|t| t.contains(&qtype)) && self.nets.contains(ip)
    }
}

/// The counters of one rule set's zone on one listener.
#[derive(Debug)]
struct ZoneCounters {
    blocked: Arc<Counter>,
    filtered: Arc<Counter>,
    dropped: Arc<Counter>,
}

/// One `acl` directive: its zones (each with its counters per listener,
/// resolved at setup so a query takes no lock) and its policies.
#[derive(Debug)]
struct Rule {
    zones: Vec<Name>,
    /// `counters[zone][server]`, in the order of `zones` and of the
    /// handler's `servers`.
    counters: Vec<Vec<ZoneCounters>>,
    policies: Vec<Policy>,
}

impl Rule {
    /// The longest of the rule's zones `qname` is in (CoreDNS
    /// `Zones.Matches`).
    fn zone_of(&self, qname: &Name) -> Option<usize> {
        self.zones
            .iter()
            .enumerate()
            .filter(|(_, z)| qname.ends_with(z))
            .max_by_key(|(_, z)| z.label_count())
            .map(|(i, _)| i)
    }
}

/// The *acl* handler.
#[derive(Debug)]
pub struct Acl {
    rules: Vec<Rule>,
    /// The block's listener labels, the index into the counters.
    servers: Vec<String>,
    /// `coredns_acl_allowed_requests_total` per listener.
    allowed: Vec<Arc<Counter>>,
}

const BLOCKED: &str = "coredns_acl_blocked_requests_total";
const FILTERED: &str = "coredns_acl_filtered_requests_total";
const ALLOWED: &str = "coredns_acl_allowed_requests_total";
const DROPPED: &str = "coredns_acl_dropped_requests_total";

/// Extended DNS error codes (RFC 8914) CoreDNS attaches.
const EDE_BLOCKED: u16 = 15;
const EDE_FILTERED: u16 = 17;

fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    let mut parsed = Vec::with_capacity(dirs.len());
    for d in dirs {
        parsed.push(parse(ctx, d)?);
    }
    let m = &ctx.shared.metrics;
    let family = |name: &'static str, help: &'static str, labels: &[&'static str]| {
        m.get_or_register(name, || Family::<Counter>::new(name, help, labels))
    };
    let zl: &[&'static str] = &["server", "zone", "view"];
    let blocked = family(BLOCKED, "Counter of DNS requests being blocked.", zl);
    let filtered = family(FILTERED, "Counter of DNS requests being filtered.", zl);
    let dropped = family(DROPPED, "Counter of DNS requests being dropped.", zl);
    let allowed = family(
        ALLOWED,
        "Counter of DNS requests being allowed.",
        &["server", "view"],
    );
    let view = ctx.view_name().to_owned();
    let servers = ctx.server_labels();
    let rules = parsed
        .into_iter()
        .map(|(zones, policies)| {
            let counters = zones
                .iter()
                .map(|z| {
                    let z = z.to_string();
                    servers
                        .iter()
                        .map(|s| ZoneCounters {
                            blocked: blocked.with(&[s, &z, &view]),
                            filtered: filtered.with(&[s, &z, &view]),
                            dropped: dropped.with(&[s, &z, &view]),
                        })
                        .collect()
                })
                .collect();
            Rule {
                zones,
                counters,
                policies,
            }
        })
        .collect();
    let allowed = servers.iter().map(|s| allowed.with(&[s, &view])).collect();
    ctx.add_plugin(Arc::new(Acl {
        rules,
        servers,
        allowed,
    }));
    Ok(())
}

/// Go's `%q` of a Corefile token: quoted, with `"` and `\` escaped.
fn quoted(s: &str) -> String {
    format!("{s:?}")
}

/// One `acl` directive: its zones and policies.
fn parse(ctx: &SetupCtx<'_>, d: &Directive) -> Result<(Vec<Name>, Vec<Policy>), ConfigError> {
    let zones: Vec<String> = if d.args.is_empty() {
        ctx.zones()
    } else {
        let mut out = Vec::new();
        for a in &d.args {
            // CoreDNS's `OriginsFromArgsOrServerBlock` skips what does not
            // normalise.
            if let Ok(zs) = normalize_zones(&a.text) {
                out.extend(zs);
            }
        }
        out
    };
    let zones = zones
        .iter()
        .filter_map(|z| Name::from_ascii(z).ok())
        .collect();
    let mut policies = Vec::with_capacity(d.block.len());
    for line in &d.block {
        policies.push(policy(line)?);
    }
    Ok((zones, policies))
}

/// `type` and `net`, the words that open a section (any case).
fn is_section(t: &str) -> bool {
    t.eq_ignore_ascii_case("type") || t.eq_ignore_ascii_case("net")
}

fn policy(line: &Directive) -> Result<Policy, ConfigError> {
    let action = match line.name.text.to_lowercase().as_str() {
        "allow" => Action::Allow,
        "block" => Action::Block,
        "filter" => Action::Filter,
        "drop" => Action::Drop,
        _ => {
            return Err(line.err(format!(
                "unexpected token {}; expect 'allow', 'block', 'filter' or 'drop'",
                quoted(&line.name.text)
            )));
        }
    };
    let args: Vec<&str> = line.arg_texts().collect();
    let mut types: Option<Vec<Rtype>> = None;
    let mut all_types = false;
    let mut nets: Option<Nets> = None;
    let mut rest = args.as_slice();
    while let Some((&head, tail)) = rest.split_first() {
        if !is_section(head) {
            return Err(line.err(format!(
                "unexpected token {}; expect 'type | net'",
                quoted(head)
            )));
        }
        let n = tail
            .iter()
            .position(|t| is_section(t))
            .unwrap_or(tail.len());
        let (tokens, next) = tail.split_at(n);
        rest = next;
        let section = head.to_lowercase();
        if tokens.is_empty() {
            return Err(line.err(format!(
                "no token specified in {} section",
                quoted(&section)
            )));
        }
        if section == "type" {
            let list = types.get_or_insert_with(Vec::new);
            for &t in tokens {
                if t == "*" {
                    all_types = true;
                    break;
                }
                // miekg/dns's `StringToType`: the mnemonic as it writes it.
                match Rtype::from_mnemonic(t).filter(|r| r.to_string() == t) {
                    Some(r) => list.push(r),
                    None => {
                        return Err(line.err(format!(
                            "unexpected token {}; expect legal QTYPE",
                            quoted(t)
                        )));
                    }
                }
            }
        } else {
            let set = nets.get_or_insert_with(Nets::default);
            for &t in tokens {
                if t == "*" {
                    *set = Nets::all();
                    break;
                }
                let t = normalize(t);
                if !set.insert_cidr(&t) {
                    return Err(line.err(format!("illegal CIDR notation {}", quoted(&t))));
                }
            }
        }
    }
    if all_types {
        types = None;
    }
    let mut nets = nets.unwrap_or_else(Nets::all);
    nets.seal();
    Ok(Policy {
        action,
        types,
        nets,
    })
}

/// A single address as a host network (`/32`, `/128`), as CoreDNS.
fn normalize(t: &str) -> String {
    if t.contains('/') {
        t.to_owned()
    } else if t.contains(':') {
        format!("{t}/128")
    } else {
        format!("{t}/32")
    }
}

impl Acl {
    fn server_index(&self, req: &Request<'_>) -> usize {
        self.servers
            .iter()
            .position(|s| s == req.server)
            .unwrap_or(0)
    }

    /// Writes CoreDNS's reply for `action` (REFUSED or empty NOERROR with
    /// an OPT of 4096 bytes, DO set, and the extended error).
    fn write(req: &Request<'_>, w: &mut ResponseWriter, rcode: Rcode, ede: u16) {
        // EDE option: code 15, length 2, INFO-CODE; no EXTRA-TEXT.
        let [hi, lo] = ede.to_be_bytes();
        let opt = [0, 15, 0, 2, hi, lo];
        let mut b = w.reply(req);
        b.set_rcode(rcode);
        let _ = b.push_opt(4096, true, &opt);
        b.finish();
        w.opt_added();
    }
}

impl Plugin for Acl {
    fn name(&self) -> &'static str {
        "acl"
    }

    fn query(&self, req: &Request<'_>, w: &mut ResponseWriter) -> Flow {
        let qname = req.qname_lower();
        let qtype = req.qtype();
        let ip = req.client.ip();
        for rule in &self.rules {
            let Some(zone) = rule.zone_of(qname) else {
                continue;
            };
            let Some(p) = rule.policies.iter().find(|p| p.matches(qtype, ip)) else {
                continue;
            };
            let counters = rule
                .counters
                .get(zone)
                .and_then(|c| c.get(self.server_index(req)));
            match p.action {
                Action::Allow => break,
                Action::Block => {
                    Self::write(req, w, Rcode::REFUSED, EDE_BLOCKED);
                    if let Some(c) = counters {
                        c.blocked.inc();
                    }
                    return Flow::Answered;
                }
                Action::Filter => {
                    Self::write(req, w, Rcode::NOERROR, EDE_FILTERED);
                    if let Some(c) = counters {
                        c.filtered.inc();
                    }
                    return Flow::Answered;
                }
                Action::Drop => {
                    // Nothing written: the server sends nothing.
                    w.clear();
                    if let Some(c) = counters {
                        c.dropped.inc();
                    }
                    return Flow::Answered;
                }
            }
        }
        if let Some(c) = self.allowed.get(self.server_index(req)) {
            c.inc();
        }
        Flow::Next
    }
}

#[cfg(test)]
mod tests;
