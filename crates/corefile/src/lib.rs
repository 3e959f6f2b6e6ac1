//! Corefile syntax: lexer, parser, imports, snippets, server keys. No plugin knowledge.
//!
//! This crate turns Corefile text into a spanned syntax tree and nothing more: it does not
//! know which directives exist. It follows the Caddy v1 `caddyfile` package that CoreDNS
//! uses, so a Corefile that CoreDNS parses parses here into the same structure.
//!
//! # Grammar
//!
//! ```text
//! corefile   = { snippet | block }
//! snippet    = "(" NAME ")" "{" TOKENS-UNTIL-MATCHING-"}" "}"   (replayed by `import NAME`)
//! block      = keys ( "{" { line } "}" | { line } EOF )         (no braces: rest of the file)
//! keys       = key { key }   on one line; a key ending in "," continues on the next line
//! line       = "import" ARG NL | directive
//! directive  = NAME { ARG } [ "{" { subline } "}" ] NL
//! subline    = NAME { ARG } [ "{" { subline } "}" ] ( NL | "}" )
//! ```
//!
//! Lexing (Caddy's `lexer.go`):
//! - a leading UTF-8 BOM is dropped; `\r` outside quotes is ignored;
//! - tokens are split on Unicode whitespace and keep the line they start on;
//! - an unquoted `#` starts a comment anywhere, even inside a token (`foo#bar` is `foo`);
//! - `"` opens a quoted token only as a token's first character; the token ends at the
//!   closing quote (`"a"b` is `a` and `b`); inside, only `\"` is an escape and newlines are
//!   allowed;
//! - `{` and `}` are structural only as whole tokens: `.:53{` is one key.
//!
//! Parsing (Caddy's `parse.go`):
//! - a sub-block must open on its directive's line; at server-block level a `}` that is not
//!   first on its line is `Unexpected '}'` (so `. { log }` is an error, as in CoreDNS);
//! - `import` takes one argument: a snippet name if one is defined, else a file path or a
//!   glob (at most one `*` and one `?`, no `[...]`) relative to the importing file's
//!   directory. Imported tokens keep their own absolute file name;
//! - `{$VAR}` and `{%VAR%}` are replaced inside each token after lexing, never re-tokenised:
//!   a value with spaces stays one token, and a value `{` or `import` is not syntax.
//!
//! Where CoreDNS accepts input that then misbehaves, this parser reports an error instead:
//! a `{` on the line after its directive (CoreDNS folds it into that directive's arguments),
//! tokens after a block's closing `}` on the same line, a `}` in the brace-less form or as a
//! key, and import cycles (reported at once rather than after 10 000 expansions). Inside a
//! sub-block a `}` closes the block even after arguments on its line, where CoreDNS would
//! hand it to the plugin as an argument. Limits beyond Caddy's: 1 000 000 tokens after
//! imports, blocks nested 100 deep, files of 16 MiB.
//!
//! ```
//! use std::collections::HashMap;
//! use std::path::Path;
//!
//! let env = HashMap::from([("UP".to_string(), "8.8.8.8".to_string())]);
//! let text = ".:53 {\n    forward . {$UP} {\n        max_fails 3\n    }\n}\n";
//! let corefile = clusterdns_corefile::parse_str(text, Path::new("Corefile"), &env)?;
//! let forward = corefile.blocks[0].directives_named("forward").next().unwrap();
//! assert_eq!(forward.args[1].text, "8.8.8.8");
//! assert_eq!(forward.block[0].name.text, "max_fails");
//! # Ok::<(), clusterdns_corefile::ConfigError>(())
//! ```

mod glob;
mod key;
mod lexer;
mod parser;

/// Go's `net.ParseCIDR`, for the server keys and the plugins.
pub use clusterdns_gocompat::cidr;
/// Go's `time.ParseDuration` and `Duration.String`, for Corefile durations.
pub use clusterdns_gocompat::time as duration;

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use key::{
    Scheme, ServerKey, normalize_zone, normalize_zones, parse_key, reverse_zones_for_cidr,
};

/// One lexed word of a Corefile, with where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    /// The text, unquoted and with environment references replaced.
    pub text: String,
    /// The file it was read from: as given for the main file, absolute for imports.
    pub file: Arc<Path>,
    /// The 1-based line the token starts on.
    pub line: u32,
}

impl Token {
    /// An error located at this token.
    pub fn err(&self, msg: impl Into<String>) -> ConfigError {
        ConfigError {
            file: self.file.clone(),
            line: self.line,
            msg: msg.into(),
        }
    }
}

/// How the message of a Caddy syntax error starts: such an error prints
/// `FILE:LINE - Syntax error: …` where every other prints `FILE:LINE -
/// Error during parsing: …`, as Caddy words them.
pub const SYNTAX_ERROR: &str = "Syntax error: ";

/// A Corefile error at a file and line, worded like CoreDNS's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{}:{line} - {}{msg}",
    file.display(),
    if msg.starts_with(SYNTAX_ERROR) { "" } else { "Error during parsing: " }
)]
pub struct ConfigError {
    /// The file the offending token came from.
    pub file: Arc<Path>,
    /// Its line.
    pub line: u32,
    /// What is wrong.
    pub msg: String,
}

/// A parsed Corefile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Corefile {
    /// Server blocks in file order; snippets and blocks without keys are not included.
    pub blocks: Vec<ServerBlock>,
    /// Every file that was read, absolute, once each, in read order (the main file first
    /// when it was read from disk). A reload watcher can checksum these.
    pub files: Vec<PathBuf>,
}

/// One server block: its keys and its directives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerBlock {
    /// The keys, trailing commas removed; see [`parse_key`].
    pub keys: Vec<Token>,
    /// The directives in Corefile order.
    pub directives: Vec<Directive>,
}

impl ServerBlock {
    /// The directives called `name`, in Corefile order.
    pub fn directives_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Directive> {
        self.directives.iter().filter(move |d| d.name.text == name)
    }
}

/// A directive line, or a line inside a directive's `{ }` block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Directive {
    /// The first token of the line.
    pub name: Token,
    /// The other tokens of the line, before any `{`.
    pub args: Vec<Token>,
    /// The lines of a `{ }` block opened on this line, in order.
    pub block: Vec<Directive>,
}

impl Directive {
    /// An error located at the directive's name.
    pub fn err(&self, msg: impl Into<String>) -> ConfigError {
        self.name.err(msg)
    }

    /// Caddy's `ArgErr`: the line has too many or too few arguments.
    pub fn arg_err(&self) -> ConfigError {
        let last = self.args.last().unwrap_or(&self.name);
        last.err(format!(
            "Wrong argument count or unexpected line ending after '{}'",
            last.text
        ))
    }

    /// The arguments' texts.
    pub fn arg_texts(&self) -> impl Iterator<Item = &str> {
        self.args.iter().map(|t| t.text.as_str())
    }
}

/// Where `{$VAR}` and `{%VAR%}` get their values. Tests pass a `HashMap`.
pub trait Env {
    /// The value of `key`, or `None` when unset (which substitutes as empty).
    fn get(&self, key: &str) -> Option<String>;
}

/// The process environment.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn get(&self, key: &str) -> Option<String> {
        // `var_os` may panic on such keys; they can't be set anyway.
        if key.is_empty() || key.contains(['=', '\0']) {
            return None;
        }
        std::env::var_os(key).map(|v| v.to_string_lossy().into_owned())
    }
}

impl<S: std::hash::BuildHasher> Env for HashMap<String, String, S> {
    fn get(&self, key: &str) -> Option<String> {
        HashMap::get(self, key).cloned()
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Parses the Corefile at `path`; relative imports resolve against its directory.
pub fn parse_file(path: &Path, env: &dyn Env) -> Result<Corefile, ConfigError> {
    let file: Arc<Path> = Arc::from(path);
    let text = parser::read_source(path).map_err(|msg| ConfigError { file, line: 0, msg })?;
    let mut corefile = parse_str(&text, path, env)?;
    corefile.files.insert(0, parser::absolute(path));
    Ok(corefile)
}

/// Parses Corefile `text`. `file_name` names it in errors and anchors relative imports.
pub fn parse_str(text: &str, file_name: &Path, env: &dyn Env) -> Result<Corefile, ConfigError> {
    parser::parse(text, file_name, env)
}
