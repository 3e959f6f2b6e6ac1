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

/// Go's `strconv.IsPrint`, as far as it can be told without Unicode's
/// tables of assigned characters: control, format and private-use
/// characters, noncharacters and every space but U+0020 are not printable.
/// An unassigned code point counts as printable here, where Go escapes it.
fn printable(c: char) -> bool {
    if c.is_ascii() {
        return (' '..='~').contains(&c);
    }
    let u = c as u32;
    let format = matches!(
        u,
        0xad | 0x600..=0x605
            | 0x61c
            | 0x6dd
            | 0x70f
            | 0x890..=0x891
            | 0x8e2
            | 0x180e
            | 0x200b..=0x200f
            | 0x202a..=0x202e
            | 0x2060..=0x2064
            | 0x2066..=0x206f
            | 0xfeff
            | 0xfff9..=0xfffb
            | 0x110bd
            | 0x110cd
            | 0x13430..=0x1343f
            | 0x1bca0..=0x1bca3
            | 0x1d173..=0x1d17a
            | 0xe0001
            | 0xe0020..=0xe007f
    );
    let private = matches!(u, 0xe000..=0xf8ff | 0xf0000..=0x10ffff);
    let nonchar = matches!(u, 0xfdd0..=0xfdef) || u & 0xfffe == 0xfffe;
    !(c.is_control() || c.is_whitespace() || format || private || nonchar)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(r: Result<impl std::fmt::Debug, NumError>) -> String {
        match r {
            Ok(v) => panic!("accepted as {v:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn bools_as_go_spells_them() {
        for t in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_bool(t), Ok(true), "{t}");
        }
        for f in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_bool(f), Ok(false), "{f}");
        }
        for bad in ["", "yes", "tRUE", "2", " true"] {
            assert!(parse_bool(bad).is_err(), "{bad}");
        }
        assert_eq!(
            err(parse_bool("maybe")),
            r#"strconv.ParseBool: parsing "maybe": invalid syntax"#
        );
    }

    #[test]
    fn base_zero_prefixes_and_underscores() {
        let ok = |s: &str| parse_int(s, 0, 64);
        assert_eq!(ok("42"), Ok(42));
        assert_eq!(ok("-0x1e"), Ok(-30));
        assert_eq!(ok("+0X1E"), Ok(30));
        assert_eq!(ok("0o17"), Ok(15));
        assert_eq!(ok("017"), Ok(15));
        assert_eq!(ok("0b101"), Ok(5));
        assert_eq!(ok("0"), Ok(0));
        assert_eq!(ok("1_000"), Ok(1000));
        assert_eq!(ok("0x_ff"), Ok(255));
        assert_eq!(ok("0_17"), Ok(15));
        for bad in [
            "", "-", "+", "0x", "0b", "0b2", "08", "1__0", "_1", "1_", "0x_", "++1", "1e3",
        ] {
            assert_eq!(
                err(ok(bad)),
                format!("strconv.ParseInt: parsing {}: invalid syntax", quote(bad)),
                "{bad}"
            );
        }
        // Underscores only with base 0.
        assert!(parse_int("1_0", 10, 64).is_err());
        assert_eq!(parse_uint("0x10", 0, 64), Ok(16));
        assert_eq!(parse_uint("010", 0, 64), Ok(8));
        assert_eq!(parse_uint("7b", 16, 8), Ok(123));
    }

    #[test]
    fn ranges_and_bit_sizes() {
        assert_eq!(parse_int("9223372036854775807", 0, 64), Ok(i64::MAX));
        assert_eq!(parse_int("-9223372036854775808", 0, 64), Ok(i64::MIN));
        assert_eq!(parse_int("-128", 10, 8), Ok(-128));
        assert_eq!(parse_uint("18446744073709551615", 10, 64), Ok(u64::MAX));
        let int = |s, base, bits| err(parse_int(s, base, bits));
        let uint = |s, base, bits| err(parse_uint(s, base, bits));
        for (got, reason) in [
            (int("9223372036854775808", 10, 0), "value out of range"),
            (int("-129", 10, 8), "value out of range"),
            (int("-x", 37, 8), "invalid base 37"),
            (uint("18446744073709551616", 10, 64), "value out of range"),
            (uint("0x1ffff", 0, 16), "value out of range"),
            (uint("1ff", 16, 8), "value out of range"),
            // The overflow is found before a bad digit further on.
            (uint("1ffz", 16, 8), "value out of range"),
            (uint("zz", 16, 8), "invalid syntax"),
            (uint("+1", 10, 8), "invalid syntax"),
            (uint("1", 1, 8), "invalid base 1"),
            (uint("1", 10, 65), "invalid bit size 65"),
        ] {
            assert!(got.ends_with(&format!("\": {reason}")), "{got}");
        }
        assert_eq!(
            int("-129", 10, 8),
            r#"strconv.ParseInt: parsing "-129": value out of range"#
        );
        assert_eq!(
            uint("zz", 16, 8),
            r#"strconv.ParseUint: parsing "zz": invalid syntax"#
        );
    }

    #[test]
    fn quote_as_go() {
        assert_eq!(quote("plain"), r#""plain""#);
        assert_eq!(quote(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(quote("\t\n\r\u{7}\u{8}\u{b}\u{c}"), r#""\t\n\r\a\b\v\f""#);
        assert_eq!(quote("\0\u{1b}\u{7f}"), r#""\x00\x1b\x7f""#);
        assert_eq!(quote("héllo ☃"), "\"héllo ☃\"");
        assert_eq!(quote("\u{a0}\u{200b}\u{85}"), r#""\u00a0\u200b\u0085""#);
        assert_eq!(quote("\u{f0000}"), r#""\U000f0000""#);
    }
}
