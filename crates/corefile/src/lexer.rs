//! Splits Corefile text into tokens, as Caddy's `lexer.go` does.

use std::path::Path;
use std::sync::Arc;

use crate::Token;

/// Lexes `text` (from `file`) into tokens. Never fails: an unterminated quote runs to the end.
pub(crate) fn lex(text: &str, file: &Arc<Path>) -> Vec<Token> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut tokens = Vec::new();
    let mut val = String::new();
    let mut start = 1u32;
    let mut line = 1u32;
    let (mut quoted, mut escaped, mut comment) = (false, false, false);
    let mut emit = |val: &mut String, start: u32| {
        tokens.push(Token {
            text: std::mem::take(val),
            file: file.clone(),
            line: start,
        });
    };

    for ch in text.chars() {
        if quoted {
            if !escaped && ch == '\\' {
                escaped = true;
                continue;
            }
            if !escaped && ch == '"' {
                // The closing quote ends the token even without whitespace; `""` is a token.
                quoted = false;
                emit(&mut val, start);
                continue;
            }
            if ch == '\n' {
                line = line.saturating_add(1);
            }
            // Only `\"` is an escape; any other backslash is kept.
            if escaped && ch != '"' {
                val.push('\\');
            }
            val.push(ch);
            escaped = false;
            continue;
        }
        if ch == '\r' {
            continue;
        }
        if ch.is_whitespace() {
            if ch == '\n' {
                line = line.saturating_add(1);
                comment = false;
            }
            if !val.is_empty() {
                emit(&mut val, start);
            }
            continue;
        }
        comment |= ch == '#';
        if comment {
            continue;
        }
        if val.is_empty() {
            start = line;
            if ch == '"' {
                quoted = true;
                continue;
            }
        }
        val.push(ch);
    }
    if !val.is_empty() {
        emit(&mut val, start);
    }
    tokens
}

/// Replaces `{%VAR%}`, then `{$VAR}`, inside one token (Caddy's `replaceEnvVars`).
///
/// Unset variables become empty. Unlike Caddy, an inserted value is not scanned again by the
/// same pass, so a variable whose value refers to itself cannot loop.
pub(crate) fn substitute(text: &str, env: &dyn crate::Env) -> String {
    if !text.contains('{') {
        return text.to_owned();
    }
    let windows = replace_refs(text, "{%", "%}", env);
    replace_refs(&windows, "{$", "}", env)
}

fn replace_refs(text: &str, open: &str, close: &str, env: &dyn crate::Env) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(open) {
        // Like Caddy, the closing marker is searched from the opening one, and an empty
        // name (`{$}`, `{%}`) stops substitution for the rest of the token.
        let Some(end) = rest[at..].find(close) else {
            break;
        };
        if end <= open.len() {
            break;
        }
        out.push_str(&rest[..at]);
        out.push_str(
            &env.get(&rest[at + open.len()..at + end])
                .unwrap_or_default(),
        );
        rest = &rest[at + end + close.len()..];
    }
    out.push_str(rest);
    out
}
