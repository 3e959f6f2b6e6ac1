//! The subset of expr-lang (the expression language CoreDNS's *view*
//! compiles with) that *view* documents: literals, arrays, the query
//! functions, `incidr`, `metadata`, a few builtins, comparison, logic,
//! membership, string matching, arithmetic and `? :`. An expression is
//! parsed and type-checked once, at setup, with expr-lang's error texts and
//! positions; a query then walks the tree.

mod eval;
mod lex;
mod parse;

use std::borrow::Cow;

use clusterdns_contract::Request;
use regex::Regex;

use crate::pkg::nets::Nets;
use lex::Kind;
use parse::Parser;

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
        let tokens = lex::lex(src)?;
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
        matches!(eval::eval(&self.root, req), Ok(Value::Bool(true)))
    }
}

/// expr-lang's position text: `(line:column)`, then the source line and a
/// caret under the column.
fn located(src: &str, pos: usize, msg: &str) -> CompileError {
    let col = src[..pos.min(src.len())].chars().count() + 1;
    CompileError(format!(
        "{msg} (1:{col})\n | {src}\n | {}^",
        ".".repeat(col - 1)
    ))
}

#[cfg(test)]
mod tests;
