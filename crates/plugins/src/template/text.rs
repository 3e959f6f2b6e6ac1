//! The part of Go's `text/template` that *template*'s records are written
//! in: text and `{{ }}` actions holding a field (`.Name`, `.Group.a`, …),
//! a string or number, `index`, `parseInt`, `.Meta "name"`, parenthesised
//! sub-expressions, `{{- -}}` trimming and `{{/* */}}` comments. A
//! template is parsed once at setup; a query only walks the parsed nodes.
//! What Go would accept beyond that (pipelines, variables, `if`, `range`,
//! the other builtins) is refused at setup, as the README says.

use std::fmt::Write as _;

use clusterdns_gocompat::strconv;

/// A parsed record template.
#[derive(Debug)]
pub(crate) struct Template {
    nodes: Vec<Node>,
    /// The template as Go prints its parse tree (`Tree.Root.String()`),
    /// CoreDNS's `template` label of the failure metrics.
    label: String,
    /// Whether any action reads the regex's match (`.Match`, `.Group`).
    reads_match: bool,
}

#[derive(Debug)]
enum Node {
    Text(String),
    /// A command and where it starts (line, byte in line), as Go's
    /// execution errors name the place.
    Action(Cmd, usize, usize),
}

/// One command: an operand alone or a function applied to operands.
#[derive(Debug)]
enum Cmd {
    Arg(Arg),
    Index(Arg, Arg),
    ParseInt(Arg, u32, i64),
    Meta(Arg),
}

#[derive(Debug)]
enum Arg {
    Field(Field),
    /// The value and the literal as written (quotes included).
    Str(String, String),
    Int(i64),
    Sub(Box<Cmd>),
}

/// The fields of CoreDNS's template data that can be read.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Field {
    Zone,
    Name,
    Regex,
    Class,
    Type,
    Remote,
    Match,
    Group,
    GroupKey(String),
    QuestionName,
    QuestionQtype,
    QuestionQclass,
    MessageId,
}

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

/// Why a template could not be parsed (the text after `template: NAME:`).
#[derive(Debug)]
pub(crate) struct ParseError {
    pub line: usize,
    pub msg: String,
}

impl Template {
    /// Parses `text`.
    pub(crate) fn parse(text: &str) -> Result<Template, ParseError> {
        Parser { src: text, pos: 0 }.parse()
    }

    /// The label CoreDNS's failure metrics carry for this template.
    pub(crate) fn label(&self) -> &str {
        &self.label
    }

    /// Whether running it needs the regex's captures.
    pub(crate) fn reads_match(&self) -> bool {
        self.reads_match
    }

    /// Whether it has no action at all (its text is the record).
    pub(crate) fn static_text(&self) -> Option<&str> {
        match self.nodes.as_slice() {
            [] => Some(""),
            [Node::Text(t)] => Some(t),
            _ => None,
        }
    }

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

    /// Writes the command as Go's parse tree prints it.
    fn print(&self, out: &mut String) {
        match self {
            Cmd::Arg(a) => a.print(out),
            Cmd::Index(a, b) => {
                out.push_str("index ");
                a.print(out);
                out.push(' ');
                b.print(out);
            }
            Cmd::ParseInt(s, base, bits) => {
                out.push_str("parseInt ");
                s.print(out);
                let _ = write!(out, " {base} {bits}");
            }
            Cmd::Meta(a) => {
                out.push_str(".Meta ");
                a.print(out);
            }
        }
    }

    fn reads_match(&self) -> bool {
        match self {
            Cmd::Arg(a) | Cmd::Meta(a) | Cmd::ParseInt(a, ..) => a.reads_match(),
            Cmd::Index(a, b) => a.reads_match() || b.reads_match(),
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

    fn print(&self, out: &mut String) {
        match self {
            // Go prints a string literal as it was quoted in the source.
            Arg::Str(_, quoted) => out.push_str(quoted),
            Arg::Int(n) => {
                let _ = write!(out, "{n}");
            }
            Arg::Sub(c) => {
                out.push('(');
                c.print(out);
                out.push(')');
            }
            Arg::Field(f) => out.push_str(match f {
                Field::Zone => ".Zone",
                Field::Name => ".Name",
                Field::Regex => ".Regex",
                Field::Class => ".Class",
                Field::Type => ".Type",
                Field::Remote => ".Remote",
                Field::Match => ".Match",
                Field::Group => ".Group",
                Field::GroupKey(k) => {
                    out.push_str(".Group.");
                    out.push_str(k);
                    return;
                }
                Field::QuestionName => ".Question.Name",
                Field::QuestionQtype => ".Question.Qtype",
                Field::QuestionQclass => ".Question.Qclass",
                Field::MessageId => ".Message.Id",
            }),
        }
    }

    fn reads_match(&self) -> bool {
        match self {
            Arg::Field(Field::Match | Field::Group | Field::GroupKey(_)) => true,
            Arg::Sub(c) => c.reads_match(),
            _ => false,
        }
    }
}

struct Parser<'s> {
    src: &'s str,
    pos: usize,
}

/// Go's builtin functions: known to its parser, not run here.
const BUILTINS: [&str; 19] = [
    "and", "call", "html", "js", "len", "not", "or", "print", "printf", "println", "urlquery",
    "eq", "ge", "gt", "le", "lt", "ne", "slice", "index",
];
const KEYWORDS: [&str; 10] = [
    "if", "else", "end", "range", "with", "define", "template", "block", "break", "continue",
];

/// A word of an action.
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Field(Vec<String>),
    Ident(String),
    Str(String, String),
    Num(i64, String),
    Open,
    Close,
}

impl Parser<'_> {
    fn err<T>(&self, msg: impl Into<String>) -> Result<T, ParseError> {
        let line = 1 + self.src[..self.pos.min(self.src.len())]
            .matches('\n')
            .count();
        Err(ParseError {
            line,
            msg: msg.into(),
        })
    }

    fn unsupported<T>(&self, what: &str) -> Result<T, ParseError> {
        self.err(format!(
            "{what} is not supported by clusterdns (only fields, index, parseInt and .Meta)"
        ))
    }

    fn parse(mut self) -> Result<Template, ParseError> {
        let mut nodes: Vec<Node> = Vec::new();
        let mut label = String::new();
        loop {
            let rest = &self.src[self.pos..];
            let Some(open) = rest.find("{{") else {
                if !rest.is_empty() {
                    nodes.push(Node::Text(rest.to_string()));
                }
                break;
            };
            let mut text = rest[..open].to_string();
            self.pos += open + 2;
            let after = &self.src[self.pos..];
            if after.starts_with('-') && after[1..].starts_with([' ', '\t', '\r', '\n']) {
                text.truncate(text.trim_end_matches([' ', '\t', '\r', '\n']).len());
                self.pos += 1;
            }
            if !text.is_empty() {
                nodes.push(Node::Text(text));
            }
            let (cmd, trim_right, start) = self.action()?;
            if let Some(cmd) = cmd {
                let before = &self.src[..start];
                let line = 1 + before.matches('\n').count();
                let col = before.rfind('\n').map_or(start, |nl| start - nl - 1);
                nodes.push(Node::Action(cmd, line, col));
            }
            if trim_right {
                let rest = &self.src[self.pos..];
                self.pos += rest.len() - rest.trim_start_matches([' ', '\t', '\r', '\n']).len();
            }
        }
        for n in &nodes {
            match n {
                Node::Text(t) => label.push_str(t),
                Node::Action(c, ..) => {
                    label.push_str("{{");
                    c.print(&mut label);
                    label.push_str("}}");
                }
            }
        }
        let reads_match = nodes.iter().any(|n| match n {
            Node::Action(c, ..) => c.reads_match(),
            Node::Text(_) => false,
        });
        Ok(Template {
            nodes,
            label,
            reads_match,
        })
    }

    /// One action after its `{{`: the command (none for a comment) and
    /// whether it ended with `-}}`.
    fn action(&mut self) -> Result<(Option<Cmd>, bool, usize), ParseError> {
        self.skip_space();
        let start = self.pos;
        if self.src[self.pos..].starts_with("/*") {
            let Some(end) = self.src[self.pos..].find("*/") else {
                return self.err("unclosed comment");
            };
            self.pos += end + 2;
            self.skip_space();
            return self.close().map(|t| (None, t, start));
        }
        let mut words = Vec::new();
        loop {
            self.skip_space();
            if let Some(trim) = self.try_close() {
                if words.is_empty() {
                    return self.err("missing value for command");
                }
                let cmd = self.command(words)?;
                return Ok((Some(cmd), trim, start));
            }
            words.push(self.token()?);
        }
    }

    fn skip_space(&mut self) {
        let rest = &self.src[self.pos..];
        self.pos += rest.len() - rest.trim_start_matches([' ', '\t', '\r', '\n']).len();
    }

    fn try_close(&mut self) -> Option<bool> {
        let rest = &self.src[self.pos..];
        if rest.starts_with("}}") {
            self.pos += 2;
            Some(false)
        } else if rest.starts_with("-}}") {
            self.pos += 3;
            Some(true)
        } else {
            None
        }
    }

    fn close(&mut self) -> Result<bool, ParseError> {
        match self.try_close() {
            Some(t) => Ok(t),
            None => self.err("comment ends before closing delimiter"),
        }
    }

    fn token(&mut self) -> Result<Tok, ParseError> {
        let rest = &self.src[self.pos..];
        let Some(c) = rest.chars().next() else {
            return self.err("unclosed action");
        };
        let word_end = |s: &str| {
            s.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
                .unwrap_or(s.len())
        };
        match c {
            '(' => {
                self.pos += 1;
                Ok(Tok::Open)
            }
            ')' => {
                self.pos += 1;
                Ok(Tok::Close)
            }
            '.' => {
                let end = word_end(rest);
                let text = &rest[..end];
                self.pos += end;
                if text == "." {
                    return self.unsupported("the dot alone (the whole template data)");
                }
                let parts: Vec<String> = text[1..].split('.').map(str::to_string).collect();
                // Go lexes `.1` as a number, which cannot follow a field.
                if let Some(n) = parts
                    .iter()
                    .skip(1)
                    .find(|p| p.starts_with(|c: char| c.is_ascii_digit()))
                {
                    return self.err(format!("unexpected \".{n}\" in operand"));
                }
                if parts.iter().any(String::is_empty) {
                    return self.err(format!("bad character {:?}", '.'));
                }
                Ok(Tok::Field(parts))
            }
            '"' => {
                let mut out = String::new();
                let mut it = rest.char_indices().skip(1);
                while let Some((i, c)) = it.next() {
                    match c {
                        '"' => {
                            self.pos += i + 1;
                            return Ok(Tok::Str(out, rest[..=i].to_string()));
                        }
                        '\\' => match it.next().map(|(_, c)| c) {
                            Some('n') => out.push('\n'),
                            Some('t') => out.push('\t'),
                            Some('r') => out.push('\r'),
                            Some('\\') => out.push('\\'),
                            Some('"') => out.push('"'),
                            Some('\'') => out.push('\''),
                            _ => return self.unsupported("this escape in a string"),
                        },
                        '\n' => return self.err("unterminated quoted string"),
                        c => out.push(c),
                    }
                }
                self.err("unterminated quoted string")
            }
            '`' => match rest[1..].find('`') {
                Some(end) => {
                    self.pos += end + 2;
                    Ok(Tok::Str(
                        rest[1..=end].to_string(),
                        rest[..end + 2].to_string(),
                    ))
                }
                None => self.err("unterminated raw quoted string"),
            },
            '-' | '0'..='9' => {
                let end = 1 + rest[1..]
                    .find(|c: char| !c.is_ascii_alphanumeric())
                    .unwrap_or(rest.len() - 1);
                let text = &rest[..end];
                self.pos += end;
                let (neg, body) = match text.strip_prefix('-') {
                    Some(b) => (true, b),
                    None => (false, text),
                };
                let v = if let Some(hex) = body.strip_prefix("0x").or(body.strip_prefix("0X")) {
                    i64::from_str_radix(hex, 16).ok()
                } else {
                    body.parse::<i64>().ok()
                };
                match v {
                    Some(v) => Ok(Tok::Num(if neg { -v } else { v }, text.to_string())),
                    None => self.unsupported(&format!("the number {text}")),
                }
            }
            '$' => self.unsupported("a variable"),
            '|' => self.unsupported("a pipeline"),
            '\'' => self.unsupported("a character constant"),
            c if c.is_alphabetic() || c == '_' => {
                let end = word_end(rest);
                let text = &rest[..end];
                self.pos += end;
                Ok(Tok::Ident(text.to_string()))
            }
            c => self.err(format!("unexpected {c:?} in command")),
        }
    }

    /// The words of one command (nested parentheses resolved).
    fn command(&self, words: Vec<Tok>) -> Result<Cmd, ParseError> {
        let mut it = words.into_iter().peekable();
        let cmd = self.command_in(&mut it)?;
        match it.next() {
            None => Ok(cmd),
            Some(_) => self.err("unexpected \")\" in operand"),
        }
    }

    fn command_in(
        &self,
        it: &mut std::iter::Peekable<std::vec::IntoIter<Tok>>,
    ) -> Result<Cmd, ParseError> {
        let mut args: Vec<(Arg, Option<Tok>)> = Vec::new();
        let head = it.next();
        let head = match head {
            Some(Tok::Ident(name)) => Some(name),
            Some(t) => {
                args.push((self.operand(t.clone(), it)?, Some(t)));
                None
            }
            None => return self.err("missing value for command"),
        };
        while let Some(t) = it.peek() {
            if *t == Tok::Close {
                break;
            }
            let t = it.next().unwrap_or(Tok::Close);
            if let Tok::Ident(name) = &t {
                return self.ident_err(name, false);
            }
            args.push((self.operand(t.clone(), it)?, Some(t)));
        }
        match head.as_deref() {
            None => {
                let mut args = args.into_iter();
                let (first, tok) = args.next().ok_or(ParseError {
                    line: 1,
                    msg: "missing value for command".into(),
                })?;
                let rest: Vec<Arg> = args.map(|(a, _)| a).collect();
                let meta = matches!(&tok, Some(Tok::Field(p)) if p.len() == 1 && p[0] == "Meta");
                match (first, rest.len()) {
                    (Arg::Field(_), 1) if meta => {
                        Ok(Cmd::Meta(rest.into_iter().next().unwrap_or(Arg::Int(0))))
                    }
                    _ if meta => self.unsupported(".Meta without one argument"),
                    (a, 0) => Ok(Cmd::Arg(a)),
                    (Arg::Field(_), _) => {
                        self.unsupported("arguments to a field that is no method")
                    }
                    _ => self.err("can't give argument to non-function"),
                }
            }
            Some("index") => {
                let mut args = args.into_iter().map(|(a, _)| a);
                match (args.next(), args.next(), args.next()) {
                    (Some(a), Some(b), None) => Ok(Cmd::Index(a, b)),
                    _ => self.unsupported("index with other than two arguments"),
                }
            }
            Some("parseInt") => {
                let mut args = args.into_iter().map(|(a, _)| a);
                match (args.next(), args.next(), args.next(), args.next()) {
                    (Some(s), Some(Arg::Int(base)), Some(Arg::Int(bits)), None) => {
                        match u32::try_from(base) {
                            Ok(base) => Ok(Cmd::ParseInt(s, base, bits)),
                            Err(_) => self.unsupported("a negative base"),
                        }
                    }
                    _ => self.unsupported(
                        "parseInt other than STRING BASE BITS with numbers for BASE and BITS",
                    ),
                }
            }
            Some(name) => self.ident_err(name, true),
        }
    }

    fn ident_err<T>(&self, name: &str, head: bool) -> Result<T, ParseError> {
        if KEYWORDS.contains(&name) {
            self.unsupported(&format!("{{{{{name}}}}}"))
        } else if BUILTINS.contains(&name) || name == "parseInt" {
            if head {
                self.unsupported(&format!("the function {name}"))
            } else {
                self.unsupported(&format!("{name} as an argument"))
            }
        } else if ["true", "false", "nil"].contains(&name) {
            self.unsupported(&format!("the constant {name}"))
        } else {
            self.err(format!("function {name:?} not defined"))
        }
    }

    fn operand(
        &self,
        t: Tok,
        it: &mut std::iter::Peekable<std::vec::IntoIter<Tok>>,
    ) -> Result<Arg, ParseError> {
        match t {
            Tok::Str(s, quoted) => Ok(Arg::Str(s, quoted)),
            Tok::Num(n, _) => Ok(Arg::Int(n)),
            Tok::Open => {
                let cmd = self.command_in(it)?;
                match it.next() {
                    Some(Tok::Close) => Ok(Arg::Sub(Box::new(cmd))),
                    _ => self.err("unclosed left paren"),
                }
            }
            Tok::Close => self.err("unexpected right paren"),
            Tok::Ident(name) => self.ident_err(&name, false),
            Tok::Field(parts) => {
                let p: Vec<&str> = parts.iter().map(String::as_str).collect();
                let f = match p.as_slice() {
                    ["Zone"] => Field::Zone,
                    ["Name"] => Field::Name,
                    ["Regex"] => Field::Regex,
                    ["Class"] => Field::Class,
                    ["Type"] => Field::Type,
                    ["Remote"] => Field::Remote,
                    ["Match"] => Field::Match,
                    ["Group"] => Field::Group,
                    ["Group", key] => Field::GroupKey((*key).to_string()),
                    ["Question", "Name"] => Field::QuestionName,
                    ["Question", "Qtype"] => Field::QuestionQtype,
                    ["Question", "Qclass"] => Field::QuestionQclass,
                    ["Message", "Id"] => Field::MessageId,
                    // `.Meta` only with its argument (see `command_in`).
                    ["Meta"] => Field::Zone,
                    _ => {
                        return self.unsupported(&format!("the field .{}", p.join(".")));
                    }
                };
                Ok(Arg::Field(f))
            }
        }
    }
}
