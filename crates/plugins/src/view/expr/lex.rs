//! The lexer: expr-lang's tokens, with its texts for a number, string or
//! character it cannot read.

use super::{CompileError, located};

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Kind {
    Ident(String),
    Str(String),
    Int(i64),
    Float(f64),
    /// Operators and punctuation, as written.
    Op(&'static str),
    Eof,
}

#[derive(Debug, Clone)]
pub(super) struct Token {
    pub(super) kind: Kind,
    /// Byte offset in the source.
    pub(super) pos: usize,
}

pub(super) const OPS: &[&str] = &[
    "==", "!=", "<=", ">=", "&&", "||", "<", ">", "!", "+", "-", "*", "/", "%", "(", ")", "[", "]",
    ",", "?", ":",
];

pub(super) fn lex(src: &str) -> Result<Vec<Token>, CompileError> {
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
