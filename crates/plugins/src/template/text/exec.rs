//! Running a parsed template on one query's data, with Go's values,
//! printing and execution errors.

use std::fmt::Write as _;

use clusterdns_gocompat::strconv;

use super::{Arg, Cmd, Field, Node, Template};

/// What a query gives a template to read.
#[derive(Debug)]
pub(crate) struct Data<'a> {
    /// The matched zone (`example.`).
    pub zone: &'a str,
    /// The query name, lowercase.
    pub name: &'a str,
    /// The regex that matched, as written.
    pub regex: &'a str,
    /// The query class, or the template's when the query's is ANY.
    pub class: &'a str,
    /// The query type, or the template's when the query's is ANY.
    pub rtype: &'a str,
    /// The client's address.
    pub remote: &'a str,
    /// The query name as sent (`.Question.Name`).
    pub qname: &'a str,
    /// The query's type and class numbers and message ID.
    pub qtype: u16,
    pub qclass: u16,
    pub id: u16,
    /// The regex and its captures on the name, when the template reads them.
    pub caps: Option<(&'a regex::Regex, &'a regex::Captures<'a>)>,
}

/// A value met while running a template.
enum Val<'a> {
    Str(&'a str),
    Uint(u64),
    Int(i64),
    /// A map key that is not there: Go prints `<no value>`.
    NoValue,
    Match,
    Group,
}

impl Template {
    /// Runs the template on `d`, appending to `out`; the error is Go's
    /// execution error, worded after it.
    pub(crate) fn execute(&self, name: &str, d: &Data<'_>, out: &mut String) -> Result<(), String> {
        for n in &self.nodes {
            match n {
                Node::Text(t) => out.push_str(t),
                Node::Action(c, line, col) => {
                    let v = c.eval(d).map_err(|msg| {
                        let mut at = String::new();
                        c.print(&mut at);
                        format!(
                            "template: {name}:{line}:{col}: executing \"{name}\" at <{at}>: {msg}"
                        )
                    })?;
                    print(&v, d, out);
                }
            }
        }
        Ok(())
    }
}

fn print(v: &Val<'_>, d: &Data<'_>, out: &mut String) {
    match v {
        Val::Str(s) => out.push_str(s),
        Val::Uint(n) => {
            let _ = write!(out, "{n}");
        }
        Val::Int(n) => {
            let _ = write!(out, "{n}");
        }
        Val::NoValue => out.push_str("<no value>"),
        Val::Match => {
            out.push('[');
            for (i, m) in matches(d).enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(m);
            }
            out.push(']');
        }
        Val::Group => {
            // Go's fmt prints a map with its keys sorted.
            let mut pairs: Vec<(String, &str)> = Vec::new();
            if let Some((re, caps)) = d.caps {
                for (i, name) in re.capture_names().enumerate() {
                    let m = caps.get(i).map_or("", |m| m.as_str());
                    let key = i.to_string();
                    if !pairs.iter().any(|(k, _)| *k == key) {
                        pairs.push((key, m));
                    }
                    if let Some(name) = name {
                        match pairs.iter_mut().find(|(k, _)| k == name) {
                            Some(p) => p.1 = m,
                            None => pairs.push((name.to_string(), m)),
                        }
                    }
                }
            }
            pairs.sort();
            out.push_str("map[");
            for (i, (k, v)) in pairs.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                let _ = write!(out, "{k}:{v}");
            }
            out.push(']');
        }
    }
}

/// Every submatch, unmatched groups as "" (Go's `FindStringSubmatch`).
fn matches<'a>(d: &Data<'a>) -> impl Iterator<Item = &'a str> {
    d.caps
        .into_iter()
        .flat_map(|(_, caps)| caps.iter().map(|m| m.map_or("", |m| m.as_str())))
}

/// `.Group.key`: a named group, else a group number written as Go's
/// `strconv.Itoa` writes it.
fn group<'a>(d: &Data<'a>, key: &str) -> Option<&'a str> {
    let (re, caps) = d.caps?;
    let named = re.capture_names().position(|n| n == Some(key));
    let at = named.or_else(|| {
        let i: usize = key.parse().ok()?;
        (i.to_string() == key && i < caps.len()).then_some(i)
    })?;
    Some(caps.get(at).map_or("", |m| m.as_str()))
}

impl Cmd {
    fn eval<'a>(&'a self, d: &Data<'a>) -> Result<Val<'a>, String> {
        match self {
            Cmd::Arg(a) => a.eval(d),
            Cmd::Index(item, key) => {
                let item = item.eval(d)?;
                let key = key.eval(d)?;
                match (item, key) {
                    (Val::Match, Val::Int(i)) => usize::try_from(i)
                        .ok()
                        .and_then(|i| matches(d).nth(i))
                        .map(Val::Str)
                        .ok_or_else(|| format!("error calling index: index out of range: {i}")),
                    (Val::Group, Val::Str(k)) => Ok(Val::Str(group(d, k).unwrap_or(""))),
                    (Val::Match, _) => {
                        Err("error calling index: cannot index slice/array with type string".into())
                    }
                    (Val::Group, _) => {
                        Err("error calling index: value has type int; should be string".into())
                    }
                    _ => Err("error calling index: can't index item of type string".into()),
                }
            }
            Cmd::ParseInt(s, base, bits) => match s.eval(d)? {
                Val::Str(s) => strconv::parse_uint(s, i64::from(*base), *bits)
                    .map(Val::Uint)
                    .map_err(|e| format!("error calling parseInt: {e}")),
                Val::NoValue => Err("invalid value; expected string".into()),
                _ => Err("wrong type for value; expected string".into()),
            },
            // clusterdns's *metadata* carries no values.
            Cmd::Meta(_) => Ok(Val::Str("")),
        }
    }
}

impl Arg {
    fn eval<'a>(&'a self, d: &Data<'a>) -> Result<Val<'a>, String> {
        Ok(match self {
            Arg::Str(s, _) => Val::Str(s),
            Arg::Int(n) => Val::Int(*n),
            Arg::Sub(c) => return c.eval(d),
            Arg::Field(f) => match f {
                Field::Zone => Val::Str(d.zone),
                Field::Name => Val::Str(d.name),
                Field::Regex => Val::Str(d.regex),
                Field::Class => Val::Str(d.class),
                Field::Type => Val::Str(d.rtype),
                Field::Remote => Val::Str(d.remote),
                Field::Match => Val::Match,
                Field::Group => Val::Group,
                Field::GroupKey(k) => group(d, k).map_or(Val::NoValue, Val::Str),
                Field::QuestionName => Val::Str(d.qname),
                Field::QuestionQtype => Val::Uint(u64::from(d.qtype)),
                Field::QuestionQclass => Val::Uint(u64::from(d.qclass)),
                Field::MessageId => Val::Uint(u64::from(d.id)),
            },
        })
    }
}
