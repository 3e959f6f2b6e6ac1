//! Record text as miekg/dns's zone parser reads it, the one parser of the
//! presentation format here: the *file* plugin's master files ([`Reader`]:
//! `$ORIGIN`, `$TTL`, `$INCLUDE`, `@`, relative names, owners carried over
//! by leading blanks, parentheses, comments, quoted strings, TTL and class
//! in either order) and one record's text as `dns.NewRR` reads it
//! ([`parse_rr`], behind `Record`'s `FromStr`: *template*'s answers).
//! Errors carry the file, line and column and are worded as miekg/dns
//! words them, which is what CoreDNS reports.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use crate::{Class, Name, Record, RecordData, Rtype};

/// How deep `$INCLUDE`s may nest (miekg/dns allows 7).
const MAX_INCLUDE_DEPTH: usize = 7;

/// A zone-file error, printed as miekg/dns prints its `ParseError`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ZoneFileError {
    /// The file as named (the main file as given, includes as written).
    pub file: String,
    /// What is wrong.
    pub err: String,
    /// The offending token.
    pub token: String,
    /// 1-based line.
    pub line: u32,
    /// Column, counted as miekg/dns counts it.
    pub col: u32,
}

impl ZoneFileError {
    /// An error at token `t` of `file`.
    fn at(file: &str, err: impl Into<String>, t: &Tok) -> Self {
        ZoneFileError {
            file: file.to_string(),
            err: err.into(),
            token: t.text.clone(),
            line: t.line,
            col: t.col,
        }
    }
}

/// An error at `toks[from]`, if there is a token there.
fn garbage(toks: &[Tok], from: usize, file: &str, msg: &str) -> Result<(), ZoneFileError> {
    match toks.get(from) {
        None => Ok(()),
        Some(t) => Err(ZoneFileError::at(file, msg, t)),
    }
}

impl fmt::Display for ZoneFileError {
    /// As miekg/dns's `ParseError`: the file first when there is one
    /// (`dns.NewRR` has none).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.file.is_empty() {
            write!(f, "{}: ", self.file)?;
        }
        write!(
            f,
            "dns: {}: {:?} at line: {}:{}",
            self.err, self.token, self.line, self.col
        )
    }
}

/// One word of an entry.
#[derive(Debug, Clone)]
struct Tok {
    text: String,
    quoted: bool,
    line: u32,
    col: u32,
}

/// One logical line (parentheses joined), with whether it started with a
/// blank (the owner is then the previous record's).
#[derive(Debug)]
struct Entry {
    indented: bool,
    toks: Vec<Tok>,
}

/// Splits `text` into entries.
fn lex(text: &str, file: &str) -> Result<Vec<Entry>, ZoneFileError> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut cur = Entry {
        indented: false,
        toks: Vec::new(),
    };
    let mut at_line_start = true;
    let mut parens = 0u32;
    let (mut line, mut col) = (1u32, 0u32);
    let mut i = 0;
    let err = |msg: &str, tok: &str, line, col| ZoneFileError {
        file: file.to_string(),
        err: msg.to_string(),
        token: tok.to_string(),
        line,
        col,
    };
    while i < b.len() {
        let c = b[i];
        match c {
            b'\n' => {
                i += 1;
                line += 1;
                col = 0;
                if parens == 0 {
                    if !cur.toks.is_empty() {
                        out.push(std::mem::replace(
                            &mut cur,
                            Entry {
                                indented: false,
                                toks: Vec::new(),
                            },
                        ));
                    }
                    at_line_start = true;
                }
            }
            b' ' | b'\t' | b'\r' => {
                if at_line_start && parens == 0 && cur.toks.is_empty() {
                    cur.indented = true;
                }
                at_line_start = false;
                i += 1;
                col += 1;
            }
            b';' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'(' => {
                at_line_start = false;
                parens += 1;
                i += 1;
                col += 1;
            }
            b')' => {
                at_line_start = false;
                if parens == 0 {
                    return Err(err("extra closing brace", ")", line, col + 1));
                }
                parens -= 1;
                i += 1;
                col += 1;
            }
            b'"' => {
                at_line_start = false;
                let (start_line, start_col) = (line, col + 1);
                let mut s = String::new();
                i += 1;
                col += 1;
                let mut closed = false;
                while i < b.len() {
                    let c = b[i];
                    if c == b'\\' && i + 1 < b.len() {
                        // Kept escaped: the rdata reader decodes it.
                        s.push('\\');
                        s.push(char::from(b[i + 1]));
                        i += 2;
                        col += 2;
                        continue;
                    }
                    if c == b'"' {
                        closed = true;
                        i += 1;
                        col += 1;
                        break;
                    }
                    if c == b'\n' {
                        line += 1;
                        col = 0;
                    } else {
                        col += 1;
                    }
                    push_byte(&mut s, c);
                    i += 1;
                }
                if !closed {
                    return Err(err("bad TXT Txt", " ", start_line, start_col));
                }
                cur.toks.push(Tok {
                    text: s,
                    quoted: true,
                    line,
                    col: end_col(b, i, col),
                });
            }
            _ => {
                at_line_start = false;
                let start = i;
                while i < b.len() {
                    let c = b[i];
                    if matches!(c, b' ' | b'\t' | b'\r' | b'\n' | b';' | b'(' | b')' | b'"') {
                        break;
                    }
                    if c == b'\\' && i + 1 < b.len() && b[i + 1] != b'\n' {
                        i += 2;
                        col += 2;
                    } else {
                        i += 1;
                        col += 1;
                    }
                }
                cur.toks.push(Tok {
                    text: String::from_utf8_lossy(&b[start..i]).into_owned(),
                    quoted: false,
                    line,
                    col: end_col(b, i, col),
                });
            }
        }
    }
    if parens > 0 {
        let (l, c) = cur.toks.last().map_or((line, col), |t| (t.line, t.col));
        return Err(err("garbage after rdata", "unbalanced brace", l, c));
    }
    if !cur.toks.is_empty() {
        out.push(cur);
    }
    Ok(out)
}

/// A byte of a quoted string (the file is UTF-8 text; bytes kept as they are).
fn push_byte(s: &mut String, c: u8) {
    if c.is_ascii() {
        s.push(char::from(c));
    } else {
        // Non-ASCII bytes survive as `\DDD` escapes, decoded with the rest.
        s.push_str(&format!("\\{c:03}"));
    }
}

/// miekg/dns reports a token's column as the column of the character
/// that ended it when that is a blank, else of its last character.
fn end_col(b: &[u8], i: usize, col: u32) -> u32 {
    match b.get(i) {
        Some(b' ' | b'\t') => col + 1,
        _ => col,
    }
}

/// Reads zone files into records.
pub struct Reader {
    /// The records in file order.
    pub records: Vec<Record>,
    origin: Name,
    default_ttl: Option<(u32, bool)>,
    last_owner: Option<Name>,
    depth: usize,
}

impl Reader {
    /// A reader at `origin`, with `default_ttl` (and whether it is a
    /// `$TTL`'s) for records that give none.
    fn new(origin: Name, default_ttl: Option<(u32, bool)>) -> Reader {
        Reader {
            records: Vec::new(),
            origin,
            default_ttl,
            last_owner: None,
            depth: 0,
        }
    }

    /// Reads `path` (named `shown` in errors) with `origin`.
    pub fn read(path: &Path, shown: &str, origin: &Name) -> Result<Vec<Record>, ZoneFileError> {
        let text = std::fs::read_to_string(path).map_err(|e| ZoneFileError {
            file: shown.to_string(),
            err: format!("failed to read `{shown}': {e}"),
            token: shown.to_string(),
            line: 0,
            col: 0,
        })?;
        let mut r = Reader::new(*origin, None);
        r.text(&text, shown, path.parent())?;
        Ok(r.records)
    }

    /// Reads `text` (the file named `file`, relative includes resolved
    /// against `dir`).
    pub fn text(
        &mut self,
        text: &str,
        file: &str,
        dir: Option<&Path>,
    ) -> Result<(), ZoneFileError> {
        for e in lex(text, file)? {
            self.entry(&e, file, dir)?;
        }
        Ok(())
    }

    fn entry(&mut self, e: &Entry, file: &str, dir: Option<&Path>) -> Result<(), ZoneFileError> {
        let err = |msg: &str, t: &Tok| ZoneFileError::at(file, msg, t);
        let toks = &e.toks;
        let mut at = 0;
        let owner = if e.indented {
            match self.last_owner {
                Some(o) => o,
                None => return Err(err("no owner name", &toks[0])),
            }
        } else {
            let t = &toks[0];
            at = 1;
            match t.text.as_str() {
                "$ORIGIN" => {
                    let Some(o) = toks.get(1) else {
                        return Err(err("expecting $ORIGIN value, not this...", t));
                    };
                    self.origin = self.name(&o.text).map_err(|_| err("bad origin name", o))?;
                    return garbage(toks, 2, file, "garbage after $ORIGIN");
                }
                "$TTL" => {
                    let Some(v) = toks.get(1) else {
                        return Err(err("expecting $TTL value, not this...", t));
                    };
                    let ttl = parse_ttl(&v.text)
                        .ok_or_else(|| err("expecting $TTL value, not this...", v))?;
                    self.default_ttl = Some((ttl, true));
                    return garbage(toks, 2, file, "garbage after $TTL");
                }
                "$INCLUDE" => return self.include(toks, file, dir),
                "$GENERATE" => return Err(err("$GENERATE is not supported", t)),
                _ => {}
            }
            self.name(&t.text).map_err(|_| err("bad owner name", t))?
        };
        self.last_owner = Some(owner);
        // TTL and class, in either order, then the type.
        let mut ttl = None;
        let mut class = None;
        let rtype = loop {
            let Some(t) = toks.get(at) else {
                let last = toks.last().unwrap_or(&toks[0]);
                let msg = if ttl.is_none() && class.is_none() {
                    "not a TTL"
                } else {
                    "expecting RR type or class, not this..."
                };
                return Err(err(msg, last));
            };
            at += 1;
            if let Some(v) = (ttl.is_none()).then(|| parse_ttl(&t.text)).flatten() {
                ttl = Some(v);
                continue;
            }
            if class.is_none()
                && let Some(c) = parse_class(&t.text)
            {
                class = Some(c);
                continue;
            }
            if let Some(rt) = parse_rtype(&t.text) {
                break rt;
            }
            let msg = match (ttl.is_some(), class.is_some()) {
                (false, _) => "not a TTL",
                (true, false) => "expecting RR type or class, not this...",
                (true, true) => "unknown RR type",
            };
            return Err(err(msg, t));
        };
        let ttl = match ttl {
            Some(v) => {
                if !self.default_ttl.is_some_and(|(_, directive)| directive) {
                    self.default_ttl = Some((v, false));
                }
                v
            }
            None => self.default_ttl.map_or(0, |(v, _)| v),
        };
        let rdata = &toks[at..];
        // A missing field is reported as miekg/dns reports it: a blank
        // at the type's column.
        let type_tok = &toks[at - 1];
        let after_type = Tok {
            text: " ".into(),
            quoted: false,
            line: type_tok.line,
            col: type_tok.col,
        };
        let data = self.rdata(rtype, rdata, &after_type, file)?;
        self.records.push(Record {
            name: owner,
            class: class.unwrap_or(Class::IN),
            ttl,
            data,
        });
        Ok(())
    }

    fn include(
        &mut self,
        toks: &[Tok],
        file: &str,
        dir: Option<&Path>,
    ) -> Result<(), ZoneFileError> {
        let err = |msg: String, t: &Tok| ZoneFileError::at(file, msg, t);
        let Some(f) = toks.get(1) else {
            return Err(err("expecting $INCLUDE value not this...".into(), &toks[0]));
        };
        if self.depth >= MAX_INCLUDE_DEPTH {
            return Err(err("too deeply nested $INCLUDE".into(), f));
        }
        let mut path = PathBuf::from(&f.text);
        if path.is_relative()
            && let Some(d) = dir
        {
            path = d.join(path);
        }
        let text = std::fs::read_to_string(&path).map_err(|e| {
            err(
                format!(
                    "failed to open `{}': open {}: {}",
                    f.text,
                    f.text,
                    io_text(&e)
                ),
                f,
            )
        })?;
        // An origin given with the include holds for that file only.
        let saved = self.origin;
        if let Some(o) = toks.get(2) {
            self.origin = self
                .name(&o.text)
                .map_err(|_| err("bad origin name".into(), o))?;
        }
        self.depth += 1;
        let r = self.text(&text, &f.text, path.parent());
        self.depth -= 1;
        self.origin = saved;
        r
    }

    /// A name in the file: `@`, absolute, or relative to the origin.
    fn name(&self, s: &str) -> Result<Name, ()> {
        if s == "@" {
            return Ok(self.origin);
        }
        if s.ends_with('.') && !s.ends_with("\\.") {
            return Name::from_ascii(s).map_err(|_| ());
        }
        let rel = Name::from_ascii(s).map_err(|_| ())?;
        rel.concat(&self.origin).map_err(|_| ())
    }

    fn rdata(
        &self,
        rtype: Rtype,
        t: &[Tok],
        last: &Tok,
        file: &str,
    ) -> Result<RecordData, ZoneFileError> {
        let ty = rtype.to_string();
        let bad = |field: &str, tok: Option<&Tok>| {
            let (token, line, col) = match tok {
                Some(x) => (x.text.clone(), x.line, x.col),
                None => (" ".to_string(), last.line, last.col),
            };
            ZoneFileError {
                file: file.to_string(),
                err: format!("bad {ty} {field}"),
                token,
                line,
                col,
            }
        };
        // Anything after the `n` rdata fields is an error.
        let no_more = |n: usize| garbage(t, n, file, "garbage after rdata");
        let name_at = |i: usize, field: &str| -> Result<Name, ZoneFileError> {
            let tok = t.get(i).ok_or_else(|| bad(field, None))?;
            self.name(&tok.text).map_err(|_| bad(field, Some(tok)))
        };
        let u16_at = |i: usize, field: &str| -> Result<u16, ZoneFileError> {
            let tok = t.get(i).ok_or_else(|| bad(field, None))?;
            tok.text.parse().map_err(|_| bad(field, Some(tok)))
        };
        // RFC 3597's `\# LEN HEX` stands for any type's rdata; a known
        // type's is decoded, so both forms give the same record.
        if t.first().is_some_and(|x| x.text == "\\#" && !x.quoted) {
            let len_tok = t.get(1).ok_or_else(|| bad("rdata", None))?;
            let len: usize = len_tok
                .text
                .parse()
                .map_err(|_| bad("rdata", Some(len_tok)))?;
            let hex: String = t[2..].iter().map(|x| x.text.as_str()).collect();
            let data = clusterdns_gocompat::hex::decode_string(&hex)
                .map_err(|_| bad("rdata", t.get(2)))?;
            if data.len() != len {
                return Err(ZoneFileError::at(file, "bad RFC3597 Rdata", len_tok));
            }
            let mut wire = vec![0; 12];
            wire.extend_from_slice(&data);
            return crate::record::decode_rdata(&wire, rtype, 12..wire.len())
                .map_err(|_| bad("rdata", t.get(2)));
        }
        let data = match rtype {
            Rtype::A => {
                let tok = t.first().ok_or_else(|| bad("A", None))?;
                let ip: Ipv4Addr = tok.text.parse().map_err(|_| bad("A", Some(tok)))?;
                no_more(1)?;
                RecordData::A(ip)
            }
            Rtype::AAAA => {
                let tok = t.first().ok_or_else(|| bad("AAAA", None))?;
                let ip: Ipv6Addr = tok.text.parse().map_err(|_| bad("AAAA", Some(tok)))?;
                no_more(1)?;
                RecordData::Aaaa(ip)
            }
            Rtype::NS => {
                let n = name_at(0, "Ns")?;
                no_more(1)?;
                RecordData::Ns(n)
            }
            Rtype::CNAME => {
                let n = name_at(0, "Target")?;
                no_more(1)?;
                RecordData::Cname(n)
            }
            Rtype::PTR => {
                let n = name_at(0, "Ptr")?;
                no_more(1)?;
                RecordData::Ptr(n)
            }
            Rtype::MX => {
                let preference = u16_at(0, "Pref")?;
                let exchange = name_at(1, "Mx")?;
                no_more(2)?;
                RecordData::Mx {
                    preference,
                    exchange,
                }
            }
            Rtype::SRV => {
                let priority = u16_at(0, "Priority")?;
                let weight = u16_at(1, "Weight")?;
                let port = u16_at(2, "Port")?;
                let target = name_at(3, "Target")?;
                no_more(4)?;
                RecordData::Srv {
                    priority,
                    weight,
                    port,
                    target,
                }
            }
            Rtype::TXT => {
                // No strings at all is a TXT without rdata to miekg/dns.
                let mut strings = Vec::new();
                for tok in t {
                    let s = unescape(&tok.text).ok_or_else(|| bad("Txt", Some(tok)))?;
                    // Longer strings are cut into 255-byte pieces, as miekg/dns does.
                    if s.is_empty() {
                        strings.push(s);
                        continue;
                    }
                    for piece in s.chunks(255) {
                        strings.push(piece.to_vec());
                    }
                }
                RecordData::Txt(strings)
            }
            Rtype::SOA => {
                let mname = name_at(0, "SOA Ns")?;
                let rname = name_at(1, "SOA Mbox")?;
                let mut v = [0u32; 5];
                for (k, slot) in v.iter_mut().enumerate() {
                    let field = ["Serial", "Refresh", "Retry", "Expire", "Minttl"][k];
                    let tok = t
                        .get(2 + k)
                        .ok_or_else(|| bad(&format!("SOA {field}"), None))?;
                    *slot = if k == 0 {
                        tok.text.parse().ok()
                    } else {
                        parse_ttl(&tok.text)
                    }
                    .ok_or_else(|| bad(&format!("SOA {field}"), Some(tok)))?;
                }
                no_more(7)?;
                RecordData::Soa {
                    mname,
                    rname,
                    serial: v[0],
                    refresh: v[1],
                    retry: v[2],
                    expire: v[3],
                    minimum: v[4],
                }
            }
            Rtype::CAA => {
                let flags_tok = t.first().ok_or_else(|| bad("CAA Flag", None))?;
                let flags: u8 = flags_tok
                    .text
                    .parse()
                    .map_err(|_| bad("CAA Flag", Some(flags_tok)))?;
                let tag = t.get(1).ok_or_else(|| bad("CAA Tag", None))?;
                let value = t.get(2).ok_or_else(|| bad("CAA Value", None))?;
                no_more(3)?;
                let v = unescape(&value.text).ok_or_else(|| bad("CAA Value", Some(value)))?;
                let tag = tag.text.as_bytes();
                let Ok(tag_len) = u8::try_from(tag.len()) else {
                    return Err(bad("CAA Tag", t.get(1)));
                };
                let mut data = vec![flags, tag_len];
                data.extend_from_slice(tag);
                data.extend_from_slice(&v);
                RecordData::Other {
                    rtype: Rtype::CAA,
                    data,
                }
            }
            Rtype::HINFO => {
                // miekg/dns: the strings as TXT's; one string holding
                // blanks is split at them; the OS is the rest, joined.
                let mut chunks = Vec::new();
                for tok in t {
                    chunks.push(unescape(&tok.text).ok_or_else(|| bad("HINFO Fields", Some(tok)))?);
                }
                if chunks.len() == 1 {
                    let words: Vec<Vec<u8>> = chunks[0]
                        .split(u8::is_ascii_whitespace)
                        .filter(|w| !w.is_empty())
                        .map(<[u8]>::to_vec)
                        .collect();
                    chunks = if words.len() > 1 {
                        words
                    } else {
                        vec![chunks.remove(0), Vec::new()]
                    };
                }
                let mut it = chunks.into_iter();
                let cpu = it.next().unwrap_or_default();
                let os = it.collect::<Vec<_>>().join(&b' ');
                RecordData::Hinfo { cpu, os }
            }
            // Other types only in RFC 3597's form (above).
            _ => return Err(bad("rdata", t.first())),
        };
        Ok(data)
    }
}

fn io_text(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}

/// A TTL: seconds, or BIND's `1w2d3h4m5s` form.
pub fn parse_ttl(s: &str) -> Option<u32> {
    if s.is_empty() {
        return None;
    }
    if s.bytes().all(|c| c.is_ascii_digit()) {
        return s.parse().ok();
    }
    let (mut total, mut cur) = (0u64, 0u64);
    let mut digits = false;
    for c in s.bytes() {
        match c {
            b'0'..=b'9' => {
                cur = cur * 10 + u64::from(c - b'0');
                digits = true;
                if cur > u64::from(u32::MAX) {
                    return None;
                }
            }
            _ => {
                let mult = match c.to_ascii_lowercase() {
                    b's' => 1,
                    b'm' => 60,
                    b'h' => 3600,
                    b'd' => 86400,
                    b'w' => 604_800,
                    _ => return None,
                };
                if !digits {
                    return None;
                }
                total += cur * mult;
                cur = 0;
                digits = false;
            }
        }
    }
    if digits {
        return None;
    }
    u32::try_from(total).ok()
}

fn parse_class(s: &str) -> Option<Class> {
    let c: Class = s.parse().ok()?;
    // Only mnemonics and CLASSnnn, never a bare number (that is a TTL).
    (!s.bytes().all(|b| b.is_ascii_digit())).then_some(c)
}

/// A type mnemonic or `TYPEnnn`, never a bare number.
fn parse_rtype(s: &str) -> Option<Rtype> {
    if s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    match Rtype::from_mnemonic(s) {
        Some(t) => Some(t),
        None => {
            s.get(..4).filter(|p| p.eq_ignore_ascii_case("TYPE"))?;
            s[4..].parse::<u16>().ok().map(Rtype)
        }
    }
}

/// One record's text as miekg/dns's `dns.NewRR` reads it: names relative
/// to the root, a TTL of 3600 where none is given, the first record of the
/// text. Text with no record in it is an error here (`NewRR` returns no
/// record and no error).
pub fn parse_rr(text: &str) -> Result<Record, ZoneFileError> {
    let mut r = Reader::new(Name::root(), Some((crate::record::DEFAULT_TTL, false)));
    // `$INCLUDE` is refused here: one record's text has no directory to
    // take a file from, and *template* has no reason to read files
    // (miekg/dns's NewRR would follow it).
    for e in lex(text, "")? {
        if e.toks.first().is_some_and(|t| t.text == "$INCLUDE") {
            return Err(ZoneFileError::at(
                "",
                "$INCLUDE directive not allowed",
                &e.toks[0],
            ));
        }
        r.entry(&e, "", None)?;
        if let Some(rec) = r.records.pop() {
            return Ok(rec);
        }
    }
    Err(ZoneFileError {
        file: String::new(),
        err: "no record".into(),
        token: text.to_owned(),
        line: 1,
        col: 0,
    })
}

/// Decodes a character-string's escapes (`\X`, `\DDD`).
fn unescape(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            let rest = &b[i + 1..];
            match rest {
                [x, y, z, ..] if x.is_ascii_digit() && y.is_ascii_digit() && z.is_ascii_digit() => {
                    let v =
                        u16::from(x - b'0') * 100 + u16::from(y - b'0') * 10 + u16::from(z - b'0');
                    // Past 255 the byte wraps, as miekg/dns's byte arithmetic does.
                    out.push((v % 256) as u8);
                    i += 4;
                }
                [c, ..] => {
                    out.push(*c);
                    i += 2;
                }
                [] => return None,
            }
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Vec<Record>, ZoneFileError> {
        let mut r = Reader::new(Name::from_ascii("example.org.").unwrap(), None);
        r.text(text, "db.t", None)?;
        Ok(r.records)
    }

    fn texts(text: &str) -> Vec<String> {
        read(text).unwrap().iter().map(|r| r.to_string()).collect()
    }

    #[test]
    fn ttls_owners_parentheses_and_comments() {
        let got = texts(
            "@ IN SOA ns1 admin ( 1 ; serial\n 2h 3 4 5 )\n\
             a IN A 1.1.1.1\nb 77 IN A 1.1.1.2\nc IN A 1.1.1.3\n$TTL 99\n\
             \tIN AAAA ::1\ne 11 A 1.1.1.5\nf A 1.1.1.6 ; comment\n\
             g TXT \"a b\" c \"d\\\"e\" \"\\065x\"\nh IN 5 MX 10 mail\n",
        );
        assert_eq!(
            got,
            [
                "example.org.\t0\tIN\tSOA\tns1.example.org. admin.example.org. 1 7200 3 4 5",
                "a.example.org.\t0\tIN\tA\t1.1.1.1",
                "b.example.org.\t77\tIN\tA\t1.1.1.2",
                "c.example.org.\t77\tIN\tA\t1.1.1.3",
                "c.example.org.\t99\tIN\tAAAA\t::1",
                "e.example.org.\t11\tIN\tA\t1.1.1.5",
                "f.example.org.\t99\tIN\tA\t1.1.1.6",
                "g.example.org.\t99\tIN\tTXT\t\"a b\" \"c\" \"d\\\"e\" \"Ax\"",
                "h.example.org.\t5\tIN\tMX\t10 mail.example.org.",
            ]
        );
    }

    /// RFC 3597 data is Go's `hex.DecodeString`: two digits a byte, and
    /// nothing else (Rust's `from_str_radix` alone would take `+f`).
    #[test]
    fn unknown_type_data_is_hex_as_go_reads_it() {
        assert_eq!(
            texts("a TYPE65280 \\# 2 0aFF\n"),
            ["a.example.org.\t0\tIN\tTYPE65280\t\\# 2 0aff"]
        );
        for bad in [
            "a TYPE65280 \\# 1 +f\n",
            "a TYPE65280 \\# 1 f\n",
            "a TYPE65280 \\# 1 0g\n",
        ] {
            assert!(read(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn errors_name_the_line_and_column_as_miekg() {
        let e = |t: &str| {
            read(&format!("@ 3600 IN SOA ns1 admin 1 2 3 4 5\n{t}\n"))
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            e("foo IN BLAH 1.2.3.4"),
            "db.t: dns: not a TTL: \"BLAH\" at line: 2:12"
        );
        assert_eq!(
            e("foo 300 BLAH 1.2.3.4"),
            "db.t: dns: expecting RR type or class, not this...: \"BLAH\" at line: 2:13"
        );
        assert_eq!(
            e("foo IN 300 BLAH x"),
            "db.t: dns: unknown RR type: \"BLAH\" at line: 2:16"
        );
        assert_eq!(
            e("foo A 1.2.3.4 extra"),
            "db.t: dns: garbage after rdata: \"extra\" at line: 2:19"
        );
        assert_eq!(
            e("foo IN A 1.2.3"),
            "db.t: dns: bad A A: \"1.2.3\" at line: 2:14"
        );
        assert_eq!(
            e("foo MX x mail"),
            "db.t: dns: bad MX Pref: \"x\" at line: 2:9"
        );
        assert_eq!(
            e("foo SRV 1 2 x t"),
            "db.t: dns: bad SRV Port: \"x\" at line: 2:14"
        );
        assert_eq!(
            e("foo AAAA 1.2.3.4"),
            "db.t: dns: bad AAAA AAAA: \"1.2.3.4\" at line: 2:16"
        );
        assert_eq!(
            e("$TTL x"),
            "db.t: dns: expecting $TTL value, not this...: \"x\" at line: 2:6"
        );
    }

    #[test]
    fn ttl_forms() {
        assert_eq!(parse_ttl("1h30m"), Some(5400));
        assert_eq!(parse_ttl("1W"), Some(604_800));
        assert_eq!(parse_ttl("10"), Some(10));
        assert_eq!(parse_ttl("h"), None);
        assert_eq!(parse_ttl("10x"), None);
        assert_eq!(parse_ttl("IN"), None);
    }
}
