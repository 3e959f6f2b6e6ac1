//! The parser, which is also the type checker: each node comes with its
//! static type, so a mismatch fails at setup with expr-lang's text and
//! position, and constant patterns and CIDRs are compiled once here.

use std::borrow::Cow;

use regex::Regex;

use super::lex::{Kind, OPS, Token};
use super::{BinOp, CompileError, FUNCS, Func, Node, Ty, Value, located};
use crate::pkg::nets::Nets;
use clusterdns_gocompat::regexp as goregexp;

pub(super) struct Parser<'s> {
    pub(super) src: &'s str,
    pub(super) tokens: Vec<Token>,
    pub(super) at: usize,
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
    pub(super) fn peek(&self) -> &Token {
        &self.tokens[self.at.min(self.tokens.len() - 1)]
    }

    fn next(&mut self) -> Token {
        let t = self.peek().clone();
        if self.at < self.tokens.len() - 1 {
            self.at += 1;
        }
        t
    }

    pub(super) fn unexpected(&self) -> CompileError {
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
    pub(super) fn expr(&mut self, min: u8) -> Result<(Node, Ty), CompileError> {
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
