//! The part of Go's `text/template` that *template*'s records are written
//! in: text and `{{ }}` actions holding a field (`.Name`, `.Group.a`, …),
//! a string or number, `index`, `parseInt`, `.Meta "name"`, parenthesised
//! sub-expressions, `{{- -}}` trimming and `{{/* */}}` comments. A
//! template is parsed once at setup; a query only walks the parsed nodes.
//! What Go would accept beyond that (pipelines, variables, `if`, `range`,
//! the other builtins) is refused at setup, as the README says.

mod exec;
mod parse;

use std::fmt::Write as _;

use parse::Parser;

pub(crate) use exec::Data;

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
}

impl Cmd {
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
