//! Go's `strconv`: `ParseBool`, `ParseInt`, `ParseUint` and `Quote`, with
//! the texts of `strconv.NumError`, which upstream programs print as they
//! are (pflag's `invalid argument …`, text/template's `parseInt`, CoreDNS's
//! *rewrite* settings).

/// Why a number or boolean was refused: Go's `*strconv.NumError`, whose
/// text is `strconv.<Func>: parsing "<input>": <reason>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("strconv.{func}: parsing {}: {reason}", quote(.input))]
pub struct NumError {
    /// The Go function that refused it: `ParseBool`, `ParseInt`, `ParseUint`.
    pub func: &'static str,
    /// The text as given.
    pub input: String,
    /// What was wrong with it.
    pub reason: Reason,
}

/// The reason part of a [`NumError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Reason {
    /// `strconv.ErrSyntax`.
    #[error("invalid syntax")]
    Syntax,
    /// `strconv.ErrRange`: well formed, but not held by the bit size.
    #[error("value out of range")]
    Range,
    /// A base other than 0 or 2 to 36.
    #[error("invalid base {0}")]
    Base(i64),
    /// A bit size other than 0 to 64.
    #[error("invalid bit size {0}")]
    BitSize(i64),
}

impl NumError {
    fn new(func: &'static str, input: &str, reason: Reason) -> NumError {
        NumError {
            func,
            input: input.to_owned(),
            reason,
        }
    }
}

/// Go's `strconv.ParseBool`: `1`, `t`, `T`, `TRUE`, `true`, `True` and
/// their six false spellings; nothing else.
pub fn parse_bool(s: &str) -> Result<bool, NumError> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(NumError::new("ParseBool", s, Reason::Syntax)),
    }
}

/// Go's `strconv.ParseUint(s, base, bits)`. Base 0 reads the prefix
/// (`0x`, `0o`, `0b`, a leading `0` for octal, else decimal) and allows
/// `_` between digits; bit size 0 means 64, as Go's `int` here. No sign.
pub fn parse_uint(s: &str, base: i64, bits: i64) -> Result<u64, NumError> {
    uint("ParseUint", s, base, bits)
}

/// Go's `strconv.ParseInt(s, base, bits)`: an optional `+` or `-`, then
/// what [`parse_uint`] reads.
pub fn parse_int(s: &str, base: i64, bits: i64) -> Result<i64, NumError> {
    const FUNC: &str = "ParseInt";
    let (negative, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if s.is_empty() {
        return Err(NumError::new(FUNC, s, Reason::Syntax));
    }
    let magnitude = match uint(FUNC, body, base, bits) {
        Ok(n) => n,
        Err(e) if e.reason == Reason::Range => u64::MAX,
        Err(e) => return Err(NumError::new(FUNC, s, e.reason)),
    };
    let bits = if bits == 0 { 64 } else { bits };
    let cutoff = 1u64 << (bits - 1);
    if (!negative && magnitude >= cutoff) || (negative && magnitude > cutoff) {
        return Err(NumError::new(FUNC, s, Reason::Range));
    }
    // In range: the magnitude is at most 2^63, which negates into an i64.
    let n = i128::from(magnitude);
    let n = if negative { -n } else { n };
    i64::try_from(n).map_err(|_| NumError::new(FUNC, s, Reason::Range))
}

/// Go's `ParseUint` body, its errors named for `func`.
fn uint(func: &'static str, s: &str, base: i64, bits: i64) -> Result<u64, NumError> {
    let fail = |reason| Err(NumError::new(func, s, reason));
    if s.is_empty() {
        return fail(Reason::Syntax);
    }
    let base0 = base == 0;
    let (base, digits) = match base {
        2..=36 => (base as u64, s),
        0 => {
            let b = s.as_bytes();
            match (b[0], b.get(1).map(u8::to_ascii_lowercase)) {
                (b'0', Some(p)) if s.len() >= 3 && matches!(p, b'b' | b'o' | b'x') => {
                    let base = match p {
                        b'b' => 2,
                        b'o' => 8,
                        _ => 16,
                    };
                    (base, &s[2..])
                }
                (b'0', _) => (8, &s[1..]),
                _ => (10, s),
            }
        }
        _ => return fail(Reason::Base(base)),
    };
    let bits = match bits {
        0 => 64,
        1..=64 => bits as u32,
        _ => return fail(Reason::BitSize(bits)),
    };
    let max = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let mut underscores = false;
    let mut n: u64 = 0;
    for c in digits.bytes() {
        let d = match c {
            b'_' if base0 => {
                underscores = true;
                continue;
            }
            b'0'..=b'9' => c - b'0',
            b'a'..=b'z' | b'A'..=b'Z' => c.to_ascii_lowercase() - b'a' + 10,
            _ => return fail(Reason::Syntax),
        };
        if u64::from(d) >= base {
            return fail(Reason::Syntax);
        }
        // Go reports the overflow at the digit that causes it, before
        // looking at the underscores.
        n = match n
            .checked_mul(base)
            .and_then(|n| n.checked_add(u64::from(d)))
        {
            Some(n) if n <= max => n,
            _ => return fail(Reason::Range),
        };
    }
    if underscores && !underscore_ok(s) {
        return fail(Reason::Syntax);
    }
    Ok(n)
}

/// Go's `underscoreOK`: each `_` stands between digits, or between a base
/// prefix and a digit.
fn underscore_ok(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s).as_bytes();
    // What came last: the start, a digit (or base prefix), `_`, or other.
    #[derive(PartialEq)]
    enum Saw {
        Start,
        Digit,
        Underscore,
        Other,
    }
    let mut saw = Saw::Start;
    let mut hex = false;
    let mut i = 0;
    if s.len() >= 2 && s[0] == b'0' && matches!(s[1].to_ascii_lowercase(), b'b' | b'o' | b'x') {
        i = 2;
        saw = Saw::Digit;
        hex = s[1].eq_ignore_ascii_case(&b'x');
    }
    for &c in &s[i..] {
        if c.is_ascii_digit() || (hex && c.is_ascii_hexdigit()) {
            saw = Saw::Digit;
        } else if c == b'_' {
            if saw != Saw::Digit {
                return false;
            }
            saw = Saw::Underscore;
        } else {
            if saw == Saw::Underscore {
                return false;
            }
            saw = Saw::Other;
        }
    }
    saw != Saw::Underscore
}

/// Go's `strconv.Quote` (and `%q` of a string): double-quoted, with `"`
/// and `\` escaped, printable characters as they are, the rest as `\n`,
/// `\t` and the like, `\xNN` below a space, `\uNNNN` or `\UNNNNNNNN` above.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if printable(c) => out.push(c),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if c < ' ' || c == '\u{7f}' => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push('"');
    out
}

/// Go's `strconv.IsPrint`: from Go's own answers for every rune
/// (`isprint.rs`, written by the rig's Go oracle), so a character Unicode
/// has not assigned is escaped as Go escapes it.
fn printable(c: char) -> bool {
    let u = c as u32;
    crate::isprint::PRINTABLE
        .binary_search_by(|&(lo, hi)| {
            if hi < u {
                std::cmp::Ordering::Less
            } else if lo > u {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}
