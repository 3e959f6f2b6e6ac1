//! Parsing a template as Go's text/template parses it, refusing at setup
//! what clusterdns does not run, with Go's error texts.

use super::{Arg, Cmd, Field, Node, ParseError, Template};

pub(super) struct Parser<'s> {
    pub(super) src: &'s str,
    pub(super) pos: usize,
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

    pub(super) fn parse(mut self) -> Result<Template, ParseError> {
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
            '+' | '-' | '0'..='9' => {
                // Go's lexer takes a sign, digits, letters (base prefixes,
                // hex digits) and underscores as one number, and reads an
                // integer as strconv.ParseInt(text, 0, 64) does: `010` is
                // octal 8, `0b101`, `0o17` and `1_000` are numbers too.
                let end = 1 + rest[1..]
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len() - 1);
                let text = &rest[..end];
                self.pos += end;
                match clusterdns_gocompat::strconv::parse_int(text, 0, 64) {
                    Ok(v) => Ok(Tok::Num(v, text.to_string())),
                    Err(_) => self.unsupported(&format!("the number {text}")),
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
