//! The rules and what one query's pass over them changes.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::net::IpAddr;

use clusterdns_contract::Request;
use clusterdns_wire::Name;
use regex::Regex;

/// What happens after a rule that did something.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// The rules after it are not looked at.
    Stop,
    /// The next rule is looked at too.
    Continue,
}

/// One rule of the plugin.
#[derive(Debug)]
pub(super) struct Rule {
    pub mode: Mode,
    pub kind: Kind,
}

/// The kinds of rule.
#[derive(Debug)]
pub(super) enum Kind {
    Name(Box<NameRule>),
    Class(u16, u16),
    Type(u16, u16),
    Ttl { m: Match, min: u32, max: u32 },
    Rcode { m: Match, old: u16, new: u16 },
    Edns(Edns),
    Cname(Cname),
}

/// How a name is matched: against the query name in lowercase with its
/// final dot, as CoreDNS's `state.Name()` reads it.
#[derive(Debug)]
pub(super) enum Match {
    Exact(String),
    Prefix(String),
    Suffix(String),
    Substring(String),
    Regex(Regex),
}

impl Match {
    pub fn is_match(&self, name: &str) -> bool {
        match self {
            Match::Exact(s) => name == s,
            Match::Prefix(s) => name.starts_with(s.as_str()),
            Match::Suffix(s) => name.ends_with(s.as_str()),
            Match::Substring(s) => name.contains(s.as_str()),
            Match::Regex(re) => re.is_match(name),
        }
    }
}

/// A `name` rule.
#[derive(Debug)]
pub(super) struct NameRule {
    pub m: Match,
    /// `answer auto` (always for exact rules; suffix rules carry theirs
    /// in `answers`).
    pub auto: bool,
    pub replacement: String,
    /// An exact rule's FROM and TO as names, when both are.
    pub wire: Option<Box<(Name, Name)>>,
    /// The explicit answer rules, in order.
    pub answers: Vec<AnswerRule>,
}

/// A fixed rewrite of a name in a reply.
#[derive(Debug, Clone)]
pub(super) enum StrRewriter {
    /// The whole name becomes `replacement` with `{N}` groups filled in.
    Regex { re: Regex, replacement: String },
    /// A name ending in `suffix` gets `replacement` in its stead.
    Suffix {
        suffix: String,
        replacement: String,
        /// Both as names, when both start with a dot (label-aligned): then
        /// the rewrite is done on wire names.
        wire: Option<Box<(Name, Name)>>,
    },
}

impl StrRewriter {
    /// A suffix rewriter, with its wire form when it has one.
    pub fn suffix(suffix: &str, replacement: &str) -> StrRewriter {
        let as_name = |s: &str| {
            s.strip_prefix('.')
                .filter(|rest| !rest.is_empty() && !rest.starts_with('.'))
                .and_then(|rest| Name::from_ascii(rest).ok())
        };
        let wire = as_name(suffix).zip(as_name(replacement)).map(Box::new);
        StrRewriter::Suffix {
            suffix: suffix.to_string(),
            replacement: replacement.to_string(),
            wire,
        }
    }
}

impl StrRewriter {
    pub fn rewrite<'s>(&self, src: &'s str) -> Cow<'s, str> {
        match self {
            StrRewriter::Regex { re, replacement } => match re.captures(src) {
                Some(caps) => Cow::Owned(fill_groups(replacement, &caps)),
                None => Cow::Borrowed(src),
            },
            StrRewriter::Suffix {
                suffix,
                replacement,
                ..
            } => match src.strip_suffix(suffix.as_str()) {
                Some(before) => Cow::Owned(format!("{before}{replacement}")),
                None => Cow::Borrowed(src),
            },
        }
    }
}

/// `replacement` with `{0}`, `{1}`, … replaced by the groups, in that
/// order (a group that did not take part is empty).
pub(super) fn fill_groups(replacement: &str, caps: &regex::Captures<'_>) -> String {
    let mut s = replacement.to_string();
    for i in 0..caps.len() {
        let key = format!("{{{i}}}");
        if s.contains(&key) {
            s = s.replace(&key, caps.get(i).map_or("", |m| m.as_str()));
        }
    }
    s
}

/// An `answer name` or `answer value` option.
#[derive(Debug)]
pub(super) enum AnswerRule {
    Name(StrRewriter),
    Value(StrRewriter),
}

/// A `cname` rule.
#[derive(Debug)]
pub(super) struct Cname {
    pub m: Match,
    pub to: String,
}

impl Cname {
    /// The new target for a CNAME pointing at `target` (lowercase text),
    /// if the rule applies to it.
    pub fn target(&self, target: &str) -> Option<String> {
        match &self.m {
            Match::Exact(from) => (target == from).then(|| self.to.clone()),
            Match::Prefix(p) => target
                .strip_prefix(p.as_str())
                .map(|after| format!("{}{after}", self.to)),
            Match::Suffix(s) => target
                .strip_suffix(s.as_str())
                .map(|before| format!("{before}{}", self.to)),
            Match::Substring(s) => target
                .contains(s.as_str())
                .then(|| target.replace(s.as_str(), &self.to)),
            Match::Regex(re) => re.captures(target).map(|c| fill_groups(&self.to, &c)),
        }
    }
}

/// An `edns0` rule.
#[derive(Debug)]
pub(super) struct Edns {
    pub action: EdnsAction,
    pub kind: EdnsKind,
    pub revert: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EdnsAction {
    Append,
    Replace,
    Set,
    Unset,
}

#[derive(Debug)]
pub(super) enum EdnsKind {
    Local { code: u16, data: EdnsData },
    Nsid,
    Subnet { v4: u8, v6: u8 },
}

#[derive(Debug)]
pub(super) enum EdnsData {
    Fixed(Vec<u8>),
    Variable(Variable),
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Variable {
    Qname,
    Qtype,
    ClientIp,
    ClientPort,
    Protocol,
    ServerIp,
    ServerPort,
    /// A metadata label: no plugin here provides metadata, so the rule
    /// never applies (as in CoreDNS when the label has no value).
    Metadata,
}

/// Option codes miekg/dns decodes into their own types: a `local` rule
/// does not see an option with one of these codes as its own.
const TYPED_CODES: &[u16] = &[1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12, 15, 0xFDE9];

const NSID: u16 = 3;
const SUBNET: u16 = 8;

/// The query's OPT record as the rules leave it.
#[derive(Debug, Clone)]
pub(super) struct Opt {
    pub udp_size: u16,
    pub ttl: u32,
    pub options: Vec<(u16, Vec<u8>)>,
}

impl Opt {
    pub fn do_bit(&self) -> bool {
        self.ttl & 0x8000 != 0
    }

    /// The option list in wire form.
    pub fn encode(&self, out: &mut Vec<u8>) {
        for (code, data) in &self.options {
            out.extend_from_slice(&code.to_be_bytes());
            out.extend_from_slice(&(data.len() as u16).to_be_bytes());
            out.extend_from_slice(data);
        }
    }
}

/// What a reply must get back, collected as the rules match.
// Held by value in one vector per rewritten query: boxing the names of
// `Remap` would allocate twice more for it.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(super) enum Resp<'r> {
    /// `answer auto`: names (and values) equal to or under `from` get
    /// `to` in its place.
    Remap {
        from: Name,
        to: Name,
    },
    Answer(&'r AnswerRule),
    Ttl {
        min: u32,
        max: u32,
    },
    Rcode {
        old: u16,
        new: u16,
    },
    /// `revert` of an option the rule added.
    EdnsRemove(u16),
    /// `revert` of an option the rule changed: its old data.
    EdnsRestore(u16, Vec<u8>),
    Cname(&'r Cname),
}

/// A name's presentation text, lowercase, on the stack (at most 255
/// wire bytes, four text bytes each when escaped).
pub(super) struct Text {
    buf: [u8; 1024],
    len: usize,
}

impl Text {
    pub fn of(name: &Name) -> Text {
        let mut t = Text {
            buf: [0; 1024],
            len: 0,
        };
        // Labels of letters, digits, `-` and `_` are their own text: copied
        // without the formatter (the common case, on every rewritten query).
        let plain = |b: &u8| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_';
        if name.is_root() || !name.labels().all(|l| l.iter().all(plain)) {
            let _ = write!(t, "{name}");
            return t;
        }
        for label in name.labels() {
            t.buf[t.len..t.len + label.len()].copy_from_slice(label);
            t.len += label.len();
            t.buf[t.len] = b'.';
            t.len += 1;
        }
        t
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

impl std::fmt::Write for Text {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        let dst = self.buf.get_mut(self.len..end).ok_or(std::fmt::Error)?;
        dst.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// One query's pass over the rules: the question and OPT as the rules
/// leave them, and what the reply must get back.
pub(super) struct Pass<'r> {
    /// `state.Name()` of the query as received.
    orig: Text,
    /// The query name in lowercase.
    orig_wire: Name,
    /// The name once a rule rewrote it.
    name: Option<Cow<'r, str>>,
    /// Its wire form, checked.
    pub wire: Option<Name>,
    pub qtype: u16,
    pub qclass: u16,
    /// The OPT record once an edns0 rule touched it.
    pub opt: Option<Opt>,
    pub resp: Vec<Resp<'r>>,
}

/// A rewritten name that is not a domain name (CoreDNS's error text).
pub(super) struct BadName(pub String);

impl<'r> Pass<'r> {
    pub fn new(req: &Request<'_>) -> Pass<'r> {
        Pass {
            orig: Text::of(req.qname_lower()),
            orig_wire: *req.qname_lower(),
            name: None,
            wire: None,
            qtype: req.qtype().0,
            qclass: req.qclass().0,
            opt: None,
            resp: Vec::new(),
        }
    }

    /// The current question name, as the rules match it.
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or(self.orig.as_str())
    }

    /// Whether the question or OPT changed.
    pub fn changed(&self, req: &Request<'_>) -> bool {
        self.name.is_some()
            || self.opt.is_some()
            || self.qtype != req.qtype().0
            || self.qclass != req.qclass().0
    }

    fn set_name(&mut self, new: Cow<'r, str>) {
        self.name = Some(new);
        self.wire = None;
    }

    /// Runs the rules; `Ok(true)` when a rule that matched stopped them
    /// or left work for the reply (the reply is then rewritten back).
    pub fn run(&mut self, rules: &'r [Rule], req: &Request<'_>) -> Result<bool, BadName> {
        for rule in rules {
            if !self.apply(rule, req) {
                continue;
            }
            if self.name.is_some() && self.wire.is_none() {
                match Name::from_ascii(self.name()) {
                    Ok(n) if self.name().ends_with('.') || self.name() == "." => {
                        self.wire = Some(n)
                    }
                    _ => return Err(BadName(self.name().to_string())),
                }
            }
            if rule.mode == Mode::Stop {
                return Ok(true);
            }
        }
        Ok(!self.resp.is_empty())
    }

    /// One rule; whether it did its rewrite (CoreDNS `RewriteDone`).
    fn apply(&mut self, rule: &'r Rule, req: &Request<'_>) -> bool {
        match &rule.kind {
            Kind::Name(n) => self.apply_name(n),
            Kind::Class(from, to) => {
                let hit = self.qclass == *from;
                if hit {
                    self.qclass = *to;
                }
                hit
            }
            Kind::Type(from, to) => {
                let hit = self.qtype == *from;
                if hit {
                    self.qtype = *to;
                }
                hit
            }
            Kind::Ttl { m, min, max } => {
                let hit = m.is_match(self.name());
                if hit {
                    self.resp.push(Resp::Ttl {
                        min: *min,
                        max: *max,
                    });
                }
                hit
            }
            Kind::Rcode { m, old, new } => {
                let hit = m.is_match(self.name());
                if hit {
                    self.resp.push(Resp::Rcode {
                        old: *old,
                        new: *new,
                    });
                }
                hit
            }
            Kind::Edns(e) => self.apply_edns(e, req),
            Kind::Cname(c) => {
                self.resp.push(Resp::Cname(c));
                true
            }
        }
    }

    fn apply_name(&mut self, n: &'r NameRule) -> bool {
        let cur = self.name();
        let new: Cow<'r, str> = match &n.m {
            Match::Exact(from) => {
                if cur != from {
                    return false;
                }
                Cow::Borrowed(n.replacement.as_str())
            }
            Match::Prefix(p) => match cur.strip_prefix(p.as_str()) {
                Some(after) => Cow::Owned(format!("{}{after}", n.replacement)),
                None => return false,
            },
            Match::Suffix(s) => match cur.strip_suffix(s.as_str()) {
                Some(before) => Cow::Owned(format!("{before}{}", n.replacement)),
                None => return false,
            },
            Match::Substring(s) => {
                if !cur.contains(s.as_str()) {
                    return false;
                }
                Cow::Owned(cur.replace(s.as_str(), &n.replacement))
            }
            Match::Regex(re) => match re.captures(cur) {
                Some(caps) => Cow::Owned(fill_groups(&n.replacement, &caps)),
                None => return false,
            },
        };
        if n.auto {
            // The reply's names go back from the new name to the one
            // asked (lowercase), as CoreDNS's remap does; compared as wire
            // names (the same test as its string one for names whose
            // labels hold no dots), so no text per record.
            let to = match (&n.m, n.wire.as_deref()) {
                (Match::Exact(_), Some((from, _))) => Some(*from),
                _ => self.wire.or(Some(self.orig_wire)),
            };
            let from = match (&n.m, n.wire.as_deref()) {
                (Match::Exact(_), Some((_, to))) => Some(*to),
                _ => Name::from_ascii(&new).ok(),
            };
            if let (Some(from), Some(to)) = (from, to) {
                self.resp.push(Resp::Remap { from, to });
            }
        }
        self.resp.extend(n.answers.iter().map(Resp::Answer));
        self.set_name(new);
        true
    }

    /// The OPT to edit: the query's, or a new one of 4096 bytes.
    fn opt_mut(&mut self, req: &Request<'_>) -> &mut Opt {
        self.opt.get_or_insert_with(|| match req.query.edns() {
            Some(e) => Opt {
                udp_size: e.udp_size,
                ttl: (u32::from(e.ext_rcode) << 24)
                    | (u32::from(e.version) << 16)
                    | if e.do_bit { 0x8000 } else { 0 },
                options: req
                    .query
                    .edns_options()
                    .map(|(c, d)| (c, d.to_vec()))
                    .collect(),
            },
            None => Opt {
                udp_size: 4096,
                ttl: 0,
                options: Vec::new(),
            },
        })
    }

    fn apply_edns(&mut self, e: &'r Edns, req: &Request<'_>) -> bool {
        let (code, data, variable) = match &e.kind {
            EdnsKind::Local { code, data } => match data {
                EdnsData::Fixed(d) => (*code, Some(Cow::Borrowed(d.as_slice())), false),
                EdnsData::Variable(v) => match self.variable(*v, req) {
                    Some(d) => (*code, Some(Cow::Owned(d)), true),
                    None => return false,
                },
            },
            EdnsKind::Nsid => (NSID, None, false),
            EdnsKind::Subnet { .. } => (SUBNET, None, false),
        };
        let action = e.action;
        let revert = e.revert;
        let ecs = match e.kind {
            EdnsKind::Subnet { v4, v6 } => Some(ecs_data(req.client.ip(), v4, v6)),
            _ => None,
        };
        let opt = self.opt_mut(req);
        if action == EdnsAction::Unset {
            opt.options.retain(|(c, _)| *c != code);
            return true;
        }
        let mine = |c: u16| match e.kind {
            EdnsKind::Local { .. } => c == code && !TYPED_CODES.contains(&c),
            _ => c == code,
        };
        let mut resp = None;
        if let Some(i) = opt.options.iter().position(|(c, _)| mine(*c)) {
            match action {
                EdnsAction::Replace | EdnsAction::Set => {
                    // CoreDNS restores by the option's Code field, which
                    // miekg/dns leaves 0 in the NSID and subnet options it
                    // reads from a query: only local options get theirs back.
                    if revert && matches!(e.kind, EdnsKind::Local { .. }) {
                        resp = Some(Resp::EdnsRestore(code, opt.options[i].1.clone()));
                    }
                    opt.options[i].1 = match (&e.kind, &data, &ecs) {
                        (EdnsKind::Subnet { .. }, _, Some(d)) => d.clone(),
                        (_, Some(d), _) => d.to_vec(),
                        _ => Vec::new(),
                    };
                    self.resp.extend(resp);
                    return true;
                }
                // CoreDNS: a variable or subnet rule leaves an option
                // that is there alone; the others append another.
                _ if variable || matches!(e.kind, EdnsKind::Subnet { .. }) => return false,
                _ => {}
            }
        }
        if matches!(action, EdnsAction::Append | EdnsAction::Set) {
            let bytes = match (&data, ecs) {
                (_, Some(d)) => d,
                (Some(d), None) => d.to_vec(),
                (None, None) => Vec::new(),
            };
            opt.options.push((code, bytes));
            if revert {
                self.resp.push(Resp::EdnsRemove(code));
            }
            return true;
        }
        false
    }

    /// The data of an EDNS0 local variable.
    fn variable(&self, v: Variable, req: &Request<'_>) -> Option<Vec<u8>> {
        let ip = |a: IpAddr, v4: bool| match (a, v4) {
            (IpAddr::V4(a), true) => Some(a.octets().to_vec()),
            (IpAddr::V4(a), false) => Some(a.to_ipv6_mapped().octets().to_vec()),
            (IpAddr::V6(a), false) => Some(a.octets().to_vec()),
            // An IPv6 server address for an IPv4 client has no 4-byte form.
            (IpAddr::V6(a), true) => a.to_ipv4_mapped().map(|a| a.octets().to_vec()),
        };
        let v4 = req.client.is_ipv4();
        match v {
            Variable::Qname => Some(match &self.name {
                Some(n) => n.as_bytes().to_vec(),
                None => req.qname().to_string().into_bytes(),
            }),
            Variable::Qtype => Some(self.qtype.to_be_bytes().to_vec()),
            Variable::ClientIp => ip(req.client.ip(), v4),
            Variable::ServerIp => ip(req.local.ip(), v4),
            Variable::ClientPort => Some(req.client.port().to_be_bytes().to_vec()),
            Variable::ServerPort => Some(req.local.port().to_be_bytes().to_vec()),
            Variable::Protocol => Some(req.proto.as_str().as_bytes().to_vec()),
            Variable::Metadata => None,
        }
    }
}

/// An ECS option's data for `client` (RFC 7871): family, source prefix,
/// scope 0, the address cut to the prefix.
fn ecs_data(client: IpAddr, v4: u8, v6: u8) -> Vec<u8> {
    let (family, bits, octets): (u16, u8, Vec<u8>) = match client {
        IpAddr::V4(a) => (1, v4, a.octets().to_vec()),
        IpAddr::V6(a) => (2, v6, a.octets().to_vec()),
    };
    let mut out = Vec::with_capacity(4 + octets.len());
    out.extend_from_slice(&family.to_be_bytes());
    out.push(bits);
    out.push(0);
    let keep = usize::from(bits).div_ceil(8);
    for (i, b) in octets.iter().take(keep).enumerate() {
        let left = usize::from(bits).saturating_sub(i * 8);
        let mask = if left >= 8 { 0xff } else { !(0xffu8 >> left) };
        out.push(b & mask);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ecs_cuts_the_address_to_the_prefix() {
        assert_eq!(
            ecs_data("10.1.2.3".parse().unwrap(), 24, 56),
            [0, 1, 24, 0, 10, 1, 2]
        );
        assert_eq!(
            ecs_data("10.1.2.255".parse().unwrap(), 20, 56),
            [0, 1, 20, 0, 10, 1, 0]
        );
        assert_eq!(ecs_data("10.1.2.3".parse().unwrap(), 0, 56), [0, 1, 0, 0]);
    }
}
