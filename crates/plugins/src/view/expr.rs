//! The subset of expr-lang (the expression language CoreDNS's *view*
//! compiles with) that *view* documents: literals, arrays, the query
//! functions, `incidr`, `metadata`, a few builtins, comparison, logic,
//! membership, string matching, arithmetic and `? :`. An expression is
//! parsed and type-checked once, at setup, with expr-lang's error texts and
//! positions; a query then walks the tree.

use std::borrow::Cow;
use std::net::IpAddr;

use clusterdns_plugin::Request;
use regex::Regex;

use crate::pkg::goregexp;
use crate::pkg::nets::Nets;

/// A compile error, as expr-lang words it: the message, then the
/// position, the source and a caret under the offending column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileError(pub String);

/// The static type of an expression, as expr-lang's checker names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    Bool,
    Int,
    Float,
    Str,
    Array,
    Nil,
    /// Decided at run time (an array element, a `? :` of two types).
    Any,
}

impl Ty {
    fn name(self) -> &'static str {
        match self {
            Ty::Bool => "bool",
            Ty::Int => "int",
            Ty::Float => "float64",
            Ty::Str => "string",
            Ty::Array => "[]interface {}",
            Ty::Nil => "nil",
            Ty::Any => "interface {}",
        }
    }

    fn numeric(self) -> bool {
        matches!(self, Ty::Int | Ty::Float | Ty::Any)
    }

    fn is(self, t: Ty) -> bool {
        self == t || self == Ty::Any
    }
}

/// A value: a literal of the program, or one computed for a query
/// (strings borrow the program's literals and the static mnemonics of
/// types, classes and protocols, so most expressions allocate nothing).
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'p> {
    /// `true`, `false`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A string.
    Str(Cow<'p, str>),
    /// An array.
    Array(Vec<Value<'p>>),
    /// `nil`.
    Nil,
}

/// The functions an expression may call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Func {
    Bufsize,
    Class,
    ClientIp,
    Do,
    Id,
    Name,
    Opcode,
    Port,
    Proto,
    ServerIp,
    ServerPort,
    Size,
    Type,
    Incidr,
    Metadata,
    Len,
    Upper,
    Lower,
    Trim,
}

/// Name, parameter types and result type of every function.
const FUNCS: &[(&str, Func, &[Ty], Ty)] = &[
    ("bufsize", Func::Bufsize, &[], Ty::Int),
    ("class", Func::Class, &[], Ty::Str),
    ("client_ip", Func::ClientIp, &[], Ty::Str),
    ("do", Func::Do, &[], Ty::Bool),
    ("id", Func::Id, &[], Ty::Int),
    ("name", Func::Name, &[], Ty::Str),
    ("opcode", Func::Opcode, &[], Ty::Int),
    ("port", Func::Port, &[], Ty::Str),
    ("proto", Func::Proto, &[], Ty::Str),
    ("server_ip", Func::ServerIp, &[], Ty::Str),
    ("server_port", Func::ServerPort, &[], Ty::Str),
    ("size", Func::Size, &[], Ty::Int),
    ("type", Func::Type, &[], Ty::Str),
    ("incidr", Func::Incidr, &[Ty::Str, Ty::Str], Ty::Bool),
    ("metadata", Func::Metadata, &[Ty::Str], Ty::Str),
    ("len", Func::Len, &[Ty::Any], Ty::Int),
    ("upper", Func::Upper, &[Ty::Str], Ty::Str),
    ("lower", Func::Lower, &[Ty::Str], Ty::Str),
    ("trim", Func::Trim, &[Ty::Str], Ty::Str),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BinOp {
    Or,
    And,
    Eq,
    Ne,
    Lt,
    Gt,
    Le,
    Ge,
    In,
    Contains,
    StartsWith,
    EndsWith,
    Add,
    Sub,
    Mul,
    Div,
    Mod,
}

/// A checked expression.
#[derive(Debug)]
enum Node {
    Lit(Value<'static>),
    Array(Vec<Node>),
    Call(Func, Vec<Node>),
    Not(Box<Node>),
    Neg(Box<Node>),
    Binary(BinOp, Box<Node>, Box<Node>),
    /// `matches` with its pattern compiled at setup (`negated` for
    /// `not matches`).
    Matches(Box<Node>, Regex, bool),
    /// `matches` with a pattern known at run time only.
    MatchesDyn(Box<Node>, Box<Node>, bool),
    /// `incidr(client_ip(), 'CONSTANT')`: the client's address against
    /// ranges built at setup, without formatting the address.
    ClientInNets(Nets),
    Cond(Box<Node>, Box<Node>, Box<Node>),
}

/// A compiled expression.
#[derive(Debug)]
pub struct Program {
    root: Node,
}

impl Program {
    /// Parses and checks `src`.
    pub fn compile(src: &str) -> Result<Program, CompileError> {
        let tokens = lex(src)?;
        let mut p = Parser { src, tokens, at: 0 };
        let (root, _) = p.expr(0)?;
        if p.peek().kind != Kind::Eof {
            return Err(p.unexpected());
        }
        Ok(Program { root })
    }

    /// Whether the expression is `true` for `req` (anything else, an
    /// error included, is false, as CoreDNS's filter reads it).
    pub fn is_true(&self, req: &Request<'_>) -> bool {
        matches!(eval(&self.root, req), Ok(Value::Bool(true)))
    }
}

// ---------------------------------------------------------------- lexer

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Ident(String),
    Str(String),
    Int(i64),
    Float(f64),
    /// Operators and punctuation, as written.
    Op(&'static str),
    Eof,
}

#[derive(Debug, Clone)]
struct Token {
    kind: Kind,
    /// Byte offset in the source.
    pos: usize,
}

const OPS: &[&str] = &[
    "==", "!=", "<=", ">=", "&&", "||", "<", ">", "!", "+", "-", "*", "/", "%", "(", ")", "[", "]",
    ",", "?", ":",
];

/// expr-lang's position text: `(line:column)`, then the source line and a
/// caret under the column.
fn located(src: &str, pos: usize, msg: &str) -> CompileError {
    let col = src[..pos.min(src.len())].chars().count() + 1;
    CompileError(format!(
        "{msg} (1:{col})\n | {src}\n | {}^",
        ".".repeat(col - 1)
    ))
}

fn lex(src: &str) -> Result<Vec<Token>, CompileError> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        if c.is_ascii_alphabetic() || c == b'_' || c == b'$' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'$') {
                i += 1;
            }
            out.push(Token {
                kind: Kind::Ident(src[start..i].to_owned()),
                pos: start,
            });
        } else if c.is_ascii_digit() {
            while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'_') {
                i += 1;
            }
            let mut float = false;
            if i + 1 < b.len() && b[i] == b'.' && b[i + 1].is_ascii_digit() {
                float = true;
                i += 1;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
            }
            let text = src[start..i].replace('_', "");
            let kind = if float {
                text.parse().map(Kind::Float).ok()
            } else {
                text.parse().map(Kind::Int).ok()
            };
            let Some(kind) = kind else {
                return Err(located(src, start, "invalid number"));
            };
            out.push(Token { kind, pos: start });
        } else if c == b'\'' || c == b'"' {
            let (s, end) = string(src, i)?;
            out.push(Token {
                kind: Kind::Str(s),
                pos: start,
            });
            i = end;
        } else if let Some(op) = OPS.iter().find(|op| src[i..].starts_with(**op)) {
            out.push(Token {
                kind: Kind::Op(op),
                pos: start,
            });
            i += op.len();
        } else {
            let ch = src[i..].chars().next().unwrap_or('?');
            return Err(located(
                src,
                start,
                &format!("unrecognized character: U+{:04X} '{ch}'", ch as u32),
            ));
        }
    }
    out.push(Token {
        kind: Kind::Eof,
        pos: src.len().saturating_sub(1),
    });
    Ok(out)
}

/// A quoted string from `start` (at its quote); its value and the offset
/// past its closing quote.
fn string(src: &str, start: usize) -> Result<(String, usize), CompileError> {
    let quote = src.as_bytes()[start] as char;
    let mut out = String::new();
    let mut chars = src[start + 1..].char_indices();
    while let Some((off, c)) = chars.next() {
        if c == quote {
            return Ok((out, start + 1 + off + 1));
        }
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some((_, e)) = chars.next() else { break };
        out.push(match e {
            'n' => '\n',
            't' => '\t',
            'r' => '\r',
            'a' => '\x07',
            'b' => '\x08',
            'f' => '\x0c',
            'v' => '\x0b',
            '0' => '\0',
            '\\' | '\'' | '"' => e,
            _ => {
                return Err(located(src, start, "invalid char escape"));
            }
        });
    }
    Err(located(src, start, "literal not terminated"))
}

// ---------------------------------------------------------------- parser

struct Parser<'s> {
    src: &'s str,
    tokens: Vec<Token>,
    at: usize,
}

/// Binary operators by their text: operator, precedence (expr-lang's).
fn binary(t: &Kind) -> Option<(BinOp, u8)> {
    let text = match t {
        Kind::Op(o) => *o,
        Kind::Ident(w) => w.as_str(),
        _ => return None,
    };
    Some(match text {
        "or" | "||" => (BinOp::Or, 10),
        "and" | "&&" => (BinOp::And, 15),
        "==" => (BinOp::Eq, 20),
        "!=" => (BinOp::Ne, 20),
        "<" => (BinOp::Lt, 20),
        ">" => (BinOp::Gt, 20),
        "<=" => (BinOp::Le, 20),
        ">=" => (BinOp::Ge, 20),
        "in" => (BinOp::In, 20),
        // `matches` is handled apart (its pattern compiles at setup).
        "matches" => (BinOp::Eq, 20),
        "contains" => (BinOp::Contains, 20),
        "startsWith" => (BinOp::StartsWith, 20),
        "endsWith" => (BinOp::EndsWith, 20),
        "+" => (BinOp::Add, 30),
        "-" => (BinOp::Sub, 30),
        "*" => (BinOp::Mul, 60),
        "/" => (BinOp::Div, 60),
        "%" => (BinOp::Mod, 60),
        _ => return None,
    })
}

fn is_word(t: &Kind, w: &str) -> bool {
    matches!(t, Kind::Ident(x) if x == w)
}

impl<'s> Parser<'s> {
    fn peek(&self) -> &Token {
        &self.tokens[self.at.min(self.tokens.len() - 1)]
    }

    fn next(&mut self) -> Token {
        let t = self.peek().clone();
        if self.at < self.tokens.len() - 1 {
            self.at += 1;
        }
        t
    }

    fn unexpected(&self) -> CompileError {
        let t = self.peek();
        let what = match &t.kind {
            Kind::Eof => "EOF".to_owned(),
            Kind::Ident(s) => format!("Identifier({s:?})"),
            Kind::Str(s) => format!("String({s:?})"),
            Kind::Int(n) => format!("Number(\"{n}\")"),
            Kind::Float(n) => format!("Number(\"{n}\")"),
            Kind::Op(o) => format!("Operator({o:?})"),
        };
        if self.src.trim().is_empty() {
            return CompileError(format!("unexpected token {what}"));
        }
        located(self.src, t.pos, &format!("unexpected token {what}"))
    }

    fn err(&self, pos: usize, msg: &str) -> CompileError {
        located(self.src, pos, msg)
    }

    fn expect(&mut self, op: &str) -> Result<(), CompileError> {
        if self.peek().kind == Kind::Op(OPS.iter().find(|o| **o == op).copied().unwrap_or("")) {
            self.next();
            Ok(())
        } else {
            Err(self.unexpected())
        }
    }

    /// An expression of operators binding tighter than `min`, then `? :`.
    fn expr(&mut self, min: u8) -> Result<(Node, Ty), CompileError> {
        let (mut left, mut lt) = self.unary()?;
        loop {
            let t = self.peek().clone();
            // `not in`, `not matches`, … .
            let negated = is_word(&t.kind, "not")
                && self.tokens.get(self.at + 1).is_some_and(|n| {
                    binary(&n.kind).is_some_and(|(_, p)| p == 20)
                        && matches!(n.kind, Kind::Ident(_))
                });
            let op_tok = if negated {
                self.tokens[self.at + 1].clone()
            } else {
                t.clone()
            };
            let Some((op, prec)) = binary(&op_tok.kind) else {
                break;
            };
            if prec <= min {
                break;
            }
            self.next();
            if negated {
                self.next();
            }
            let (right, rt) = self.expr(prec)?;
            let pos = op_tok.pos;
            let word = match &op_tok.kind {
                Kind::Op(o) => (*o).to_owned(),
                Kind::Ident(w) => w.clone(),
                _ => String::new(),
            };
            (left, lt) = self.combine(op, &word, negated, pos, (left, lt), (right, rt))?;
        }
        if min == 0 && self.peek().kind == Kind::Op("?") {
            let q = self.next();
            if lt != Ty::Bool && lt != Ty::Any {
                return Err(self.err(
                    q.pos,
                    &format!("non-bool expression (type {}) used as condition", lt.name()),
                ));
            }
            let (a, at) = self.expr(0)?;
            self.expect(":")?;
            let (b, bt) = self.expr(0)?;
            let t = if at == bt { at } else { Ty::Any };
            return Ok((Node::Cond(Box::new(left), Box::new(a), Box::new(b)), t));
        }
        Ok((left, lt))
    }

    fn mismatch(&self, pos: usize, word: &str, a: Ty, b: Ty) -> CompileError {
        self.err(
            pos,
            &format!(
                "invalid operation: {word} (mismatched types {} and {})",
                a.name(),
                b.name()
            ),
        )
    }

    fn combine(
        &self,
        op: BinOp,
        word: &str,
        negated: bool,
        pos: usize,
        (l, lt): (Node, Ty),
        (r, rt): (Node, Ty),
    ) -> Result<(Node, Ty), CompileError> {
        let wrap = |n: Node| if negated { Node::Not(Box::new(n)) } else { n };
        let shown = if negated {
            format!("not {word}")
        } else {
            word.to_owned()
        };
        if word == "matches" {
            if !lt.is(Ty::Str) || !rt.is(Ty::Str) {
                return Err(self.mismatch(pos, &shown, lt, rt));
            }
            return Ok(match r {
                Node::Lit(Value::Str(ref pattern)) => {
                    let re = Regex::new(pattern).map_err(|e| {
                        self.err(
                            pos,
                            &format!("error parsing regexp: {}", goregexp::describe(pattern, &e)),
                        )
                    })?;
                    (Node::Matches(Box::new(l), re, negated), Ty::Bool)
                }
                r => (
                    Node::MatchesDyn(Box::new(l), Box::new(r), negated),
                    Ty::Bool,
                ),
            });
        }
        let ok = match op {
            BinOp::Or | BinOp::And => lt.is(Ty::Bool) && rt.is(Ty::Bool),
            BinOp::Eq | BinOp::Ne => {
                lt == rt
                    || lt == Ty::Any
                    || rt == Ty::Any
                    || lt == Ty::Nil
                    || rt == Ty::Nil
                    || (lt.numeric() && rt.numeric())
            }
            BinOp::Lt | BinOp::Gt | BinOp::Le | BinOp::Ge => {
                (lt.numeric() && rt.numeric()) || (lt.is(Ty::Str) && rt.is(Ty::Str))
            }
            BinOp::In => rt.is(Ty::Array),
            BinOp::Contains | BinOp::StartsWith | BinOp::EndsWith => {
                lt.is(Ty::Str) && rt.is(Ty::Str)
            }
            BinOp::Add => (lt.numeric() && rt.numeric()) || (lt.is(Ty::Str) && rt.is(Ty::Str)),
            BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Mod => lt.numeric() && rt.numeric(),
        };
        if !ok {
            return Err(self.mismatch(pos, &shown, lt, rt));
        }
        let ty = match op {
            BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Mod => {
                if lt == Ty::Str {
                    Ty::Str
                } else if lt == Ty::Int && rt == Ty::Int {
                    Ty::Int
                } else if lt == Ty::Any || rt == Ty::Any {
                    Ty::Any
                } else {
                    Ty::Float
                }
            }
            BinOp::Div => Ty::Float,
            _ => Ty::Bool,
        };
        Ok((wrap(Node::Binary(op, Box::new(l), Box::new(r))), ty))
    }

    fn unary(&mut self) -> Result<(Node, Ty), CompileError> {
        let t = self.peek().clone();
        let word = match &t.kind {
            Kind::Op("!") => Some("!"),
            Kind::Ident(w) if w == "not" => Some("not"),
            _ => None,
        };
        if let Some(word) = word {
            self.next();
            let (n, ty) = self.expr(50)?;
            if !ty.is(Ty::Bool) {
                return Err(self.err(
                    t.pos,
                    &format!("invalid operation: {word} (mismatched type {})", ty.name()),
                ));
            }
            return Ok((Node::Not(Box::new(n)), Ty::Bool));
        }
        if matches!(t.kind, Kind::Op("-") | Kind::Op("+")) {
            self.next();
            let (n, ty) = self.expr(90)?;
            if !ty.numeric() {
                let Kind::Op(o) = t.kind else { unreachable!() };
                return Err(self.err(
                    t.pos,
                    &format!("invalid operation: {o} (mismatched type {})", ty.name()),
                ));
            }
            return Ok(if t.kind == Kind::Op("-") {
                (Node::Neg(Box::new(n)), ty)
            } else {
                (n, ty)
            });
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<(Node, Ty), CompileError> {
        let t = self.peek().clone();
        let operand = matches!(
            t.kind,
            Kind::Int(_)
                | Kind::Float(_)
                | Kind::Str(_)
                | Kind::Ident(_)
                | Kind::Op("(")
                | Kind::Op("[")
        );
        if !operand {
            return Err(self.unexpected());
        }
        self.next();
        match t.kind {
            Kind::Int(n) => Ok((Node::Lit(Value::Int(n)), Ty::Int)),
            Kind::Float(n) => Ok((Node::Lit(Value::Float(n)), Ty::Float)),
            Kind::Str(s) => Ok((Node::Lit(Value::Str(Cow::Owned(s))), Ty::Str)),
            Kind::Op("(") => {
                let inner = self.expr(0)?;
                self.expect(")")?;
                Ok(inner)
            }
            Kind::Op("[") => {
                let mut items = Vec::new();
                if self.peek().kind != Kind::Op("]") {
                    loop {
                        items.push(self.expr(0)?.0);
                        if self.peek().kind == Kind::Op(",") {
                            self.next();
                            if self.peek().kind == Kind::Op("]") {
                                break;
                            }
                            continue;
                        }
                        break;
                    }
                }
                self.expect("]")?;
                Ok((Node::Array(items), Ty::Array))
            }
            Kind::Ident(w) => match w.as_str() {
                "true" => Ok((Node::Lit(Value::Bool(true)), Ty::Bool)),
                "false" => Ok((Node::Lit(Value::Bool(false)), Ty::Bool)),
                "nil" => Ok((Node::Lit(Value::Nil), Ty::Nil)),
                _ => self.call(&w, t.pos),
            },
            _ => Err(self.unexpected()),
        }
    }

    fn call(&mut self, name: &str, pos: usize) -> Result<(Node, Ty), CompileError> {
        let Some(&(_, f, params, ret)) = FUNCS.iter().find(|(n, ..)| *n == name) else {
            return Err(self.err(pos, &format!("unknown name {name}")));
        };
        if self.peek().kind != Kind::Op("(") {
            // A function used as a value: nothing documented does that.
            return Err(self.err(pos, &format!("function {name} must be called")));
        }
        self.next();
        let mut args = Vec::new();
        let mut types = Vec::new();
        while self.peek().kind != Kind::Op(")") {
            let (n, t) = self.expr(0)?;
            args.push(n);
            types.push(t);
            if self.peek().kind == Kind::Op(",") {
                self.next();
            } else {
                break;
            }
        }
        self.expect(")")?;
        if args.len() < params.len() {
            return Err(self.err(pos, &format!("not enough arguments to call {name}")));
        }
        if args.len() > params.len() {
            return Err(self.err(pos, &format!("too many arguments to call {name}")));
        }
        for (t, p) in types.iter().zip(params) {
            if *p != Ty::Any && !t.is(*p) {
                return Err(self.err(
                    pos,
                    &format!(
                        "cannot use {} as argument (type {}) to call {name} ",
                        t.name(),
                        p.name()
                    ),
                ));
            }
        }
        if let (Func::Incidr, [Node::Call(Func::ClientIp, _), Node::Lit(Value::Str(cidr))]) =
            (f, args.as_slice())
        {
            let mut nets = Nets::default();
            // An invalid CIDR stays a run-time error (false), as in CoreDNS.
            if nets.insert_cidr(cidr) {
                nets.seal();
                return Ok((Node::ClientInNets(nets), Ty::Bool));
            }
        }
        Ok((Node::Call(f, args), ret))
    }
}

// ---------------------------------------------------------------- evaluation

/// A run-time error: the expression is then false.
#[derive(Debug)]
struct EvalError;

fn eval<'p>(n: &'p Node, req: &Request<'_>) -> Result<Value<'p>, EvalError> {
    Ok(match n {
        Node::Lit(Value::Str(s)) => Value::Str(Cow::Borrowed(s)),
        Node::Lit(v) => v.clone(),
        Node::Array(items) => Value::Array(
            items
                .iter()
                .map(|i| eval(i, req))
                .collect::<Result<_, _>>()?,
        ),
        Node::Call(f, args) => call(*f, args, req)?,
        Node::Not(x) => match eval(x, req)? {
            Value::Bool(b) => Value::Bool(!b),
            _ => return Err(EvalError),
        },
        Node::Neg(x) => match eval(x, req)? {
            Value::Int(i) => Value::Int(i.checked_neg().ok_or(EvalError)?),
            Value::Float(f) => Value::Float(-f),
            _ => return Err(EvalError),
        },
        Node::ClientInNets(nets) => Value::Bool(nets.contains(req.client.ip())),
        Node::Matches(x, re, negated) => match eval(x, req)? {
            Value::Str(s) => Value::Bool(re.is_match(&s) != *negated),
            _ => return Err(EvalError),
        },
        Node::MatchesDyn(x, p, negated) => match (eval(x, req)?, eval(p, req)?) {
            (Value::Str(s), Value::Str(p)) => {
                let re = Regex::new(&p).map_err(|_| EvalError)?;
                Value::Bool(re.is_match(&s) != *negated)
            }
            _ => return Err(EvalError),
        },
        Node::Cond(c, a, b) => match eval(c, req)? {
            Value::Bool(true) => eval(a, req)?,
            Value::Bool(false) => eval(b, req)?,
            _ => return Err(EvalError),
        },
        Node::Binary(BinOp::And, a, b) => match eval(a, req)? {
            Value::Bool(false) => Value::Bool(false),
            Value::Bool(true) => match eval(b, req)? {
                Value::Bool(v) => Value::Bool(v),
                _ => return Err(EvalError),
            },
            _ => return Err(EvalError),
        },
        Node::Binary(BinOp::Or, a, b) => match eval(a, req)? {
            Value::Bool(true) => Value::Bool(true),
            Value::Bool(false) => match eval(b, req)? {
                Value::Bool(v) => Value::Bool(v),
                _ => return Err(EvalError),
            },
            _ => return Err(EvalError),
        },
        // Membership of an array written out: its items one by one, no
        // array built.
        Node::Binary(BinOp::In, a, b) if matches!(**b, Node::Array(_)) => {
            let x = eval(a, req)?;
            let Node::Array(items) = &**b else {
                return Err(EvalError);
            };
            let mut found = false;
            for i in items {
                if equal(&eval(i, req)?, &x) {
                    found = true;
                    break;
                }
            }
            Value::Bool(found)
        }
        Node::Binary(op, a, b) => binop(*op, eval(a, req)?, eval(b, req)?)?,
    })
}

fn as_f64(v: &Value<'_>) -> Option<f64> {
    match v {
        Value::Int(i) => Some(*i as f64),
        Value::Float(f) => Some(*f),
        _ => None,
    }
}

fn equal(a: &Value<'_>, b: &Value<'_>) -> bool {
    match (a, b) {
        (Value::Int(_) | Value::Float(_), Value::Int(_) | Value::Float(_)) => {
            as_f64(a) == as_f64(b)
        }
        _ => a == b,
    }
}

fn binop<'p>(op: BinOp, a: Value<'p>, b: Value<'p>) -> Result<Value<'p>, EvalError> {
    use std::cmp::Ordering;
    let order = |a: &Value<'_>, b: &Value<'_>| -> Result<Ordering, EvalError> {
        match (a, b) {
            (Value::Str(x), Value::Str(y)) => Ok(x.cmp(y)),
            _ => {
                let (x, y) = (as_f64(a).ok_or(EvalError)?, as_f64(b).ok_or(EvalError)?);
                x.partial_cmp(&y).ok_or(EvalError)
            }
        }
    };
    let strs = || match (&a, &b) {
        (Value::Str(x), Value::Str(y)) => Ok((x.as_ref(), y.as_ref())),
        _ => Err(EvalError),
    };
    Ok(match op {
        BinOp::Eq => Value::Bool(equal(&a, &b)),
        BinOp::Ne => Value::Bool(!equal(&a, &b)),
        BinOp::Lt => Value::Bool(order(&a, &b)? == Ordering::Less),
        BinOp::Gt => Value::Bool(order(&a, &b)? == Ordering::Greater),
        BinOp::Le => Value::Bool(order(&a, &b)? != Ordering::Greater),
        BinOp::Ge => Value::Bool(order(&a, &b)? != Ordering::Less),
        BinOp::In => match &b {
            Value::Array(items) => Value::Bool(items.iter().any(|i| equal(i, &a))),
            _ => return Err(EvalError),
        },
        BinOp::Contains => {
            let (x, y) = strs()?;
            Value::Bool(x.contains(y))
        }
        BinOp::StartsWith => {
            let (x, y) = strs()?;
            Value::Bool(x.starts_with(y))
        }
        BinOp::EndsWith => {
            let (x, y) = strs()?;
            Value::Bool(x.ends_with(y))
        }
        BinOp::Add => match (a, b) {
            (Value::Str(x), Value::Str(y)) => Value::Str(Cow::Owned(format!("{x}{y}"))),
            (Value::Int(x), Value::Int(y)) => Value::Int(x.checked_add(y).ok_or(EvalError)?),
            (x, y) => Value::Float(as_f64(&x).ok_or(EvalError)? + as_f64(&y).ok_or(EvalError)?),
        },
        BinOp::Sub | BinOp::Mul | BinOp::Mod => match (a, b) {
            (Value::Int(x), Value::Int(y)) => Value::Int(
                match op {
                    BinOp::Sub => x.checked_sub(y),
                    BinOp::Mul => x.checked_mul(y),
                    _ => x.checked_rem(y),
                }
                .ok_or(EvalError)?,
            ),
            (x, y) => {
                let (x, y) = (as_f64(&x).ok_or(EvalError)?, as_f64(&y).ok_or(EvalError)?);
                Value::Float(match op {
                    BinOp::Sub => x - y,
                    BinOp::Mul => x * y,
                    _ => x % y,
                })
            }
        },
        BinOp::Div => Value::Float(as_f64(&a).ok_or(EvalError)? / as_f64(&b).ok_or(EvalError)?),
        BinOp::And | BinOp::Or => return Err(EvalError),
    })
}

/// An address as Go's `net.IP.String` writes it (IPv4-mapped addresses
/// unmapped).
fn ip_text(ip: IpAddr) -> String {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => v6.to_string(),
        },
        v4 => v4.to_string(),
    }
}

/// A mnemonic without allocating, else its numeric form (`TYPE65280`).
fn mnemonic<'p>(m: Option<&'static str>, shown: impl FnOnce() -> String) -> Value<'p> {
    Value::Str(m.map_or_else(|| Cow::Owned(shown()), Cow::Borrowed))
}

fn call<'p>(f: Func, args: &'p [Node], req: &Request<'_>) -> Result<Value<'p>, EvalError> {
    let arg = |i: usize| -> Result<Value<'p>, EvalError> {
        args.get(i).map_or(Err(EvalError), |a| eval(a, req))
    };
    let text = |i: usize| -> Result<Cow<'p, str>, EvalError> {
        match arg(i)? {
            Value::Str(s) => Ok(s),
            _ => Err(EvalError),
        }
    };
    let owned = |s: String| Value::Str(Cow::Owned(s));
    Ok(match f {
        Func::Bufsize => Value::Int(req.size() as i64),
        Func::Class => mnemonic(req.qclass().mnemonic(), || req.qclass().to_string()),
        Func::ClientIp => owned(ip_text(req.client.ip())),
        Func::Do => Value::Bool(req.do_bit()),
        Func::Id => Value::Int(i64::from(req.query.id())),
        Func::Name => owned(req.qname_lower().to_string()),
        Func::Opcode => Value::Int(i64::from(req.query.header().opcode().0)),
        Func::Port => owned(req.client.port().to_string()),
        Func::Proto => Value::Str(Cow::Borrowed(req.proto.as_str())),
        Func::ServerIp => owned(ip_text(req.local.ip())),
        Func::ServerPort => owned(req.local.port().to_string()),
        Func::Size => Value::Int(req.query.raw().len() as i64),
        Func::Type => mnemonic(req.qtype().mnemonic(), || req.qtype().to_string()),
        Func::Incidr => {
            let ip: IpAddr = text(0)?.parse().map_err(|_| EvalError)?;
            let mut nets = Nets::default();
            if !nets.insert_cidr(&text(1)?) {
                return Err(EvalError);
            }
            nets.seal();
            Value::Bool(nets.contains(ip))
        }
        // No plugin of ours publishes metadata a view could read.
        Func::Metadata => {
            text(0)?;
            Value::Str(Cow::Borrowed(""))
        }
        Func::Len => match arg(0)? {
            Value::Str(s) => Value::Int(s.chars().count() as i64),
            Value::Array(a) => Value::Int(a.len() as i64),
            _ => return Err(EvalError),
        },
        Func::Upper => owned(text(0)?.to_uppercase()),
        Func::Lower => owned(text(0)?.to_lowercase()),
        Func::Trim => match text(0)? {
            Cow::Borrowed(s) => Value::Str(Cow::Borrowed(s.trim())),
            Cow::Owned(s) => owned(s.trim().to_owned()),
        },
    })
}

#[cfg(test)]
mod tests;
