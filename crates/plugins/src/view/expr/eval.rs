//! Evaluation of a checked tree for one query. Any run-time error makes
//! the expression false, so errors carry no text.

use std::borrow::Cow;
use std::net::IpAddr;

use clusterdns_contract::Request;
use regex::Regex;

use super::{BinOp, Func, Node, Value};
use crate::pkg::nets::Nets;

/// A run-time error: the expression is then false.
#[derive(Debug)]
pub(super) struct EvalError;

pub(super) fn eval<'p>(n: &'p Node, req: &Request<'_>) -> Result<Value<'p>, EvalError> {
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
