//! Builds the syntax tree, expanding `import` on the way (Caddy's `parse.go`).
//!
//! Tokens come from a stack of frames: the main file at the bottom, then every snippet or
//! file being imported. A frame stays on the stack until a token below it is read, so the
//! frames that have started reading are exactly the chain of imports that led to the current
//! token, which is what cycle detection checks.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use crate::lexer::{lex, substitute};
use crate::{ConfigError, Corefile, Directive, Env, SYNTAX_ERROR, ServerBlock, Token, glob};

/// Caddy's cap on snippet imports per parse. Fuzz builds use a lower one (and a lower token
/// cap): the fuzzer breeds nested snippet imports that expand to the caps, and at the real
/// caps each such input takes milliseconds, which starves the campaign; the lower caps reach
/// the same code, the cap errors included, at a hundredth of the cost.
const MAX_SNIPPET_EXPANSIONS: usize = if cfg!(fuzzing) { 100 } else { 10_000 };
/// Caddy's cap on file imports per parse.
const MAX_FILE_EXPANSIONS: usize = 100_000;
/// Our cap on tokens after all imports, so fan-out cannot exhaust memory.
const MAX_TOKENS: usize = if cfg!(fuzzing) { 20_000 } else { 1_000_000 };
/// Our cap on nested `{ }` inside a directive.
const MAX_NESTING: usize = 100;
/// Our cap on the size of one file.
const MAX_FILE_BYTES: u64 = 16 << 20;

#[derive(Debug, PartialEq)]
enum Origin {
    File(PathBuf),
    Snippet(String),
}

struct Frame {
    tokens: Arc<[Token]>,
    pos: usize,
    origin: Origin,
}

struct Parser<'a> {
    env: &'a dyn Env,
    main: Arc<Path>,
    frames: Vec<Frame>,
    /// The last token read, for line breaks and EOF errors.
    prev: Option<Token>,
    /// The next token starts a line whatever its position (it follows an import).
    force_new_line: bool,
    snippets: HashMap<String, Arc<[Token]>>,
    snippet_expansions: usize,
    file_expansions: usize,
    token_budget: usize,
    files: Vec<PathBuf>,
}

pub(crate) fn parse(text: &str, file_name: &Path, env: &dyn Env) -> Result<Corefile, ConfigError> {
    let main: Arc<Path> = Arc::from(file_name);
    let tokens = lex(text, &main);
    let mut parser = Parser {
        env,
        main: main.clone(),
        token_budget: MAX_TOKENS.saturating_sub(tokens.len()),
        frames: vec![Frame {
            tokens: tokens.into(),
            pos: 0,
            origin: Origin::File(absolute(file_name)),
        }],
        prev: None,
        force_new_line: false,
        snippets: HashMap::new(),
        snippet_expansions: 0,
        file_expansions: 0,
        files: Vec::new(),
    };
    let mut blocks = Vec::new();
    while let Some((tok, new_line)) = parser.next() {
        blocks.extend(parser.server_block(tok, new_line)?);
    }
    Ok(Corefile {
        blocks,
        files: parser.files,
    })
}

impl Parser<'_> {
    fn next(&mut self) -> Option<(Token, bool)> {
        while self.frames.last().is_some_and(|f| f.pos >= f.tokens.len()) {
            self.frames.pop();
        }
        let frame = self.frames.last_mut()?;
        let tok = frame.tokens.get(frame.pos)?.clone();
        frame.pos += 1;
        let new_line = self.starts_line(&tok);
        self.force_new_line = false;
        self.prev = Some(tok.clone());
        Some((tok, new_line))
    }

    /// The next token if it is on the current line (Caddy's `NextArg`).
    fn next_on_line(&mut self) -> Option<Token> {
        let tok = self.frames.iter().rev().find_map(|f| f.tokens.get(f.pos))?;
        if self.starts_line(tok) {
            return None;
        }
        self.next().map(|(tok, _)| tok)
    }

    fn starts_line(&self, tok: &Token) -> bool {
        self.force_new_line || self.prev.as_ref().is_none_or(|prev| breaks_line(prev, tok))
    }

    fn subst(&self, tok: Token) -> Token {
        Token {
            text: substitute(&tok.text, self.env),
            ..tok
        }
    }

    /// Caddy's `SyntaxErr("}")` at the end of the input inside a server
    /// block or a snippet: the last token read was not the closing brace.
    fn unclosed_err(&self) -> ConfigError {
        match &self.prev {
            Some(tok) => tok.err(format!(
                "{SYNTAX_ERROR}Unexpected token '{}', expecting '}}'",
                tok.text
            )),
            None => self.eof_err(),
        }
    }

    fn eof_err(&self) -> ConfigError {
        const MSG: &str = "Unexpected EOF";
        match &self.prev {
            Some(tok) => tok.err(MSG),
            None => ConfigError {
                file: self.main.clone(),
                line: 0,
                msg: MSG.into(),
            },
        }
    }

    /// Parses a block's keys and body; `None` for a snippet or a block without keys.
    fn server_block(
        &mut self,
        first: Token,
        new_line: bool,
    ) -> Result<Option<ServerBlock>, ConfigError> {
        let at = first.clone();
        let mut keys: Vec<Token> = Vec::new();
        let (mut tok, mut new_line) = (first, new_line);
        // The previous key ended in a comma, so another must follow.
        let mut more = false;
        let end = loop {
            // Like Caddy, after an import the keys go on with whatever it brought.
            let imported = tok.text == "import" && new_line;
            if imported {
                self.import(&tok)?;
            } else if tok.text == "{" {
                if more {
                    return Err(
                        tok.err("Expected another address but had '{' - check for extra comma")
                    );
                }
                break Some(tok);
            } else if tok.text == "}" {
                return Err(unexpected_close(&tok));
            } else {
                let mut key = self.subst(tok);
                if !key.text.is_empty() {
                    more = key.text.ends_with(',');
                    if more {
                        key.text.pop();
                    }
                    keys.push(key);
                }
            }
            match self.next() {
                None if more => return Err(self.eof_err()),
                None => break None,
                Some((next, true)) if !more && !imported => break Some(next),
                Some((next, nl)) => (tok, new_line) = (next, nl),
            }
        };
        let directives = match end {
            None => Vec::new(),
            Some(open) => {
                if let [key] = keys.as_slice()
                    && let Some(name) = key.text.strip_prefix('(').and_then(|k| k.strip_suffix(')'))
                {
                    let (key, name) = (key.clone(), name.to_owned());
                    return self.snippet(&key, name, &open).map(|()| None);
                }
                if open.text == "{" {
                    self.directives(None, true)?
                } else {
                    self.directives(Some(open), false)?
                }
            }
        };
        if keys.is_empty() {
            tracing::warn!(
                "{}:{} - server block without keys ignored",
                at.file.display(),
                at.line
            );
            return Ok(None);
        }
        Ok(Some(ServerBlock { keys, directives }))
    }

    /// Stores a snippet's raw tokens, up to the matching `}`.
    fn snippet(&mut self, key: &Token, name: String, open: &Token) -> Result<(), ConfigError> {
        if self.snippets.contains_key(&name) {
            return Err(key.err(format!(
                "redeclaration of previously declared snippet {name}"
            )));
        }
        if open.text != "{" {
            return Err(open.err(format!("Unexpected token '{}', expecting '{{'", open.text)));
        }
        let mut body = Vec::new();
        let mut depth = 1usize;
        loop {
            let Some((tok, _)) = self.next() else {
                return Err(self.unclosed_err());
            };
            match tok.text.as_str() {
                "{" => depth += 1,
                "}" if depth == 1 => break,
                "}" => depth -= 1,
                _ => {}
            }
            body.push(tok);
        }
        // Reject a direct self-import now, even if the snippet is never used.
        for (i, pair) in body.windows(2).enumerate() {
            let (keyword, arg) = (&pair[0], &pair[1]);
            let line_start = i == 0 || breaks_line(&body[i - 1], keyword);
            if line_start
                && keyword.text == "import"
                && !breaks_line(keyword, arg)
                && substitute(&arg.text, self.env) == name
            {
                return Err(arg.err(format!("Snippet '{name}' imports itself")));
            }
        }
        self.snippets.insert(name, body.into());
        Ok(())
    }

    /// Directive lines of a server block, up to its `}` (or EOF without braces).
    fn directives(
        &mut self,
        mut first: Option<Token>,
        braced: bool,
    ) -> Result<Vec<Directive>, ConfigError> {
        let mut out = Vec::new();
        loop {
            let tok = match first.take().or_else(|| self.next().map(|(tok, _)| tok)) {
                Some(tok) => tok,
                None if braced => return Err(self.unclosed_err()),
                None => return Ok(out),
            };
            match tok.text.as_str() {
                "}" if braced => return Ok(out),
                "}" => return Err(unexpected_close(&tok)),
                "{" => return Err(unexpected_open(&tok)),
                "import" => self.import(&tok)?,
                _ => out.push(self.line(tok, 0)?.0),
            }
        }
    }

    /// One line starting at `name`; `depth` 0 is a directive, more is inside its block.
    /// Also returns whether a `}` on the line closed the enclosing block.
    fn line(&mut self, name: Token, depth: usize) -> Result<(Directive, bool), ConfigError> {
        let mut dir = Directive {
            name: self.subst(name),
            args: Vec::new(),
            block: Vec::new(),
        };
        while let Some(tok) = self.next_on_line() {
            match tok.text.as_str() {
                "{" => {
                    dir.block = self.sub_block(depth + 1, &tok)?;
                    // Only a `}` closing an enclosing block may follow on the same line.
                    return match self.next_on_line() {
                        None => Ok((dir, false)),
                        Some(close) if close.text == "}" && depth > 0 => Ok((dir, true)),
                        Some(close) if close.text == "}" => Err(unexpected_close(&close)),
                        Some(other) => Err(other.err(format!(
                            "Unexpected token '{}' after '}}', expecting a line break",
                            other.text
                        ))),
                    };
                }
                "}" if depth > 0 => return Ok((dir, true)),
                "}" => return Err(unexpected_close(&tok)),
                _ => {
                    let arg = self.subst(tok);
                    dir.args.push(arg);
                }
            }
        }
        Ok((dir, false))
    }

    /// The lines of a `{ }` block whose `{` was just read.
    fn sub_block(&mut self, depth: usize, open: &Token) -> Result<Vec<Directive>, ConfigError> {
        if depth > MAX_NESTING {
            return Err(open.err(format!("Blocks nested more than {MAX_NESTING} deep")));
        }
        let mut lines = Vec::new();
        loop {
            let Some((tok, new_line)) = self.next() else {
                return Err(self.eof_err());
            };
            match tok.text.as_str() {
                "}" => return Ok(lines),
                "{" => return Err(unexpected_open(&tok)),
                "import" if new_line => self.import(&tok)?,
                _ => {
                    let (line, closed) = self.line(tok, depth)?;
                    lines.push(line);
                    if closed {
                        return Ok(lines);
                    }
                }
            }
        }
    }

    /// Replaces `import ARG` by the snippet or files it names.
    fn import(&mut self, keyword: &Token) -> Result<(), ConfigError> {
        let Some(arg) = self.next_on_line() else {
            return Err(
                keyword.err("Wrong argument count or unexpected line ending after 'import'")
            );
        };
        let pattern = substitute(&arg.text, self.env);
        if pattern.is_empty() {
            return Err(arg.err("Import requires a non-empty filepath"));
        }
        if let Some(extra) = self.next_on_line() {
            return Err(extra.err("Import takes only one argument (glob pattern or file)"));
        }
        if let Some(body) = self.snippets.get(&pattern).cloned() {
            let origin = Origin::Snippet(pattern);
            if self.in_import_chain(&origin) {
                return Err(arg.err(format!(
                    "Import cycle: snippet '{}' imports itself",
                    arg.text
                )));
            }
            if self.snippet_expansions >= MAX_SNIPPET_EXPANSIONS {
                return Err(arg.err(format!(
                    "maximum snippet import depth ({MAX_SNIPPET_EXPANSIONS}) exceeded"
                )));
            }
            self.snippet_expansions += 1;
            self.push(
                &arg,
                vec![Frame {
                    tokens: body,
                    pos: 0,
                    origin,
                }],
            )?;
        } else {
            let frames = self.read_imports(&arg, &pattern)?;
            self.push(&arg, frames)?;
        }
        self.force_new_line = true;
        Ok(())
    }

    /// Lexes the files that an import pattern names, in match order.
    fn read_imports(&mut self, arg: &Token, pattern: &str) -> Result<Vec<Frame>, ConfigError> {
        if self.file_expansions >= MAX_FILE_EXPANSIONS {
            return Err(arg.err(format!(
                "maximum file import depth ({MAX_FILE_EXPANSIONS}) exceeded"
            )));
        }
        self.file_expansions += 1;
        let importer = absolute(&arg.file);
        let dir = importer.parent().unwrap_or(Path::new("/"));
        let full = clean(&dir.join(pattern));
        let shown = full.display();
        let text = full.to_string_lossy();
        if text.matches('*').count() > 1
            || text.matches('?').count() > 1
            || text.contains('[') && text.contains(']')
        {
            return Err(arg.err(format!(
                "Glob pattern may only contain one wildcard (*), but has others: {shown}"
            )));
        }
        if text.contains('[') {
            return Err(arg.err(format!(
                "Failed to use import pattern {pattern}: syntax error in pattern"
            )));
        }
        let matches = glob::expand(&full);
        if matches.is_empty() {
            if !glob::has_wildcard(&text) {
                return Err(arg.err(format!("File to import not found: {pattern}")));
            }
            tracing::warn!("No files matching import glob pattern: {pattern}");
        }
        let mut frames = Vec::with_capacity(matches.len());
        for path in matches {
            let origin = Origin::File(path);
            let Origin::File(path) = &origin else {
                continue;
            };
            if self.in_import_chain(&origin) {
                return Err(arg.err(format!("Import cycle: {} imports itself", path.display())));
            }
            let source = read_source(path)
                .map_err(|e| arg.err(format!("Could not import {}: {e}", path.display())))?;
            if !self.files.contains(path) {
                self.files.push(path.clone());
            }
            let file: Arc<Path> = Arc::from(path.as_path());
            frames.push(Frame {
                tokens: lex(&source, &file).into(),
                pos: 0,
                origin,
            });
        }
        Ok(frames)
    }

    /// Whether `origin` is being read: its frame has started and not been left.
    fn in_import_chain(&self, origin: &Origin) -> bool {
        self.frames.iter().any(|f| f.pos > 0 && f.origin == *origin)
    }

    /// Pushes imported frames so that the first is read first.
    fn push(&mut self, at: &Token, frames: Vec<Frame>) -> Result<(), ConfigError> {
        for frame in frames.into_iter().rev() {
            self.token_budget = self
                .token_budget
                .checked_sub(frame.tokens.len())
                .ok_or_else(|| {
                    at.err(format!(
                        "Corefile too large: more than {MAX_TOKENS} tokens after imports"
                    ))
                })?;
            self.frames.push(frame);
        }
        Ok(())
    }
}

/// Whether `tok` is on a later line (or in another file) than `prev` ends on.
fn breaks_line(prev: &Token, tok: &Token) -> bool {
    let breaks = u32::try_from(prev.text.matches('\n').count()).unwrap_or(u32::MAX);
    prev.file != tok.file || prev.line.saturating_add(breaks) < tok.line
}

fn unexpected_close(tok: &Token) -> ConfigError {
    tok.err("Unexpected '}' because no matching opening brace")
}

fn unexpected_open(tok: &Token) -> ConfigError {
    tok.err("Unexpected '{' - a block must open on the same line as its directive")
}

/// Reads a Corefile or an imported file; the error is a short reason.
pub(crate) fn read_source(path: &Path) -> Result<String, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    if file.metadata().map_err(|e| e.to_string())?.is_dir() {
        return Err("is a directory".into());
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(format!("larger than {MAX_FILE_BYTES} bytes"));
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// `path` made absolute against the working directory and lexically cleaned (Go's `Abs`).
pub(crate) fn absolute(path: &Path) -> PathBuf {
    clean(&std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()))
}

/// Removes `.` and resolves `..` lexically, like Go's `filepath.Clean`.
fn clean(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}
