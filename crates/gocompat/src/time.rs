//! Go's `time.ParseDuration` and `Duration.String`, so Corefile durations
//! (`30s`, `1m30s`, `500ms`) are read and printed exactly as CoreDNS does.

use std::time::Duration;

/// Why a duration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not a Go duration; the text is Go's `time.ParseDuration` error, word for word
    /// (`time: invalid duration "x"`, `time: missing unit in duration "5"`,
    /// `time: unknown unit "d" in duration "5d"`).
    #[error("{0}")]
    Syntax(String),
    /// A Go duration below zero where the setting takes none. Go parses these; the text is
    /// ours (no `time:` prefix, as Go has no such error), for the settings where CoreDNS
    /// has no text of its own.
    #[error("negative duration {}", quote(.0))]
    Negative(String),
}

/// A Go `time.Duration` as parsed: a sign and a magnitude (Go's is an `int64` of
/// nanoseconds, so the magnitude is at most 2^63 ns when negative, 2^63 - 1 ns otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signed {
    /// Below zero (never for a zero magnitude: `-0s` is zero, as in Go).
    pub negative: bool,
    /// How long.
    pub magnitude: Duration,
}

impl Signed {
    /// Nanoseconds, as Go's `%d` prints a `Duration`.
    pub fn nanos(self) -> i128 {
        let n = self.magnitude.as_nanos() as i128;
        if self.negative { -n } else { n }
    }
}

impl From<Duration> for Signed {
    fn from(magnitude: Duration) -> Self {
        Signed {
            negative: false,
            magnitude,
        }
    }
}

impl std::fmt::Display for Signed {
    /// As Go's `Duration.String`: `-1.5s`, `1m0s`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sign = if self.negative { "-" } else { "" };
        write!(f, "{sign}{}", format_go(self.magnitude))
    }
}

/// Go's `time.quote`: printable ASCII as is with `"` and `\` escaped, every byte of
/// anything else as `\xNN`.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if c.is_ascii() && c >= ' ' {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        } else {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("\\x{b:02x}"));
            }
        }
    }
    out.push('"');
    out
}

/// 2^63: the largest magnitude of a Go `Duration` (negative).
const LIMIT: u64 = 1 << 63;

/// Go's `leadingInt`: the digits at the start of `s`, or `None` on overflow.
fn leading_int(s: &str) -> Option<(u64, &str)> {
    let n = s.bytes().take_while(u8::is_ascii_digit).count();
    let mut x: u64 = 0;
    for d in s[..n].bytes() {
        if x > LIMIT / 10 {
            return None;
        }
        x = x * 10 + u64::from(d - b'0');
        if x > LIMIT {
            return None;
        }
    }
    Some((x, &s[n..]))
}

/// Go's `leadingFraction`: the digits at the start of `s` as a fraction `x / scale`;
/// digits past what a `u64` holds are read and dropped.
fn leading_fraction(s: &str) -> (u64, f64, &str) {
    let n = s.bytes().take_while(u8::is_ascii_digit).count();
    let (mut x, mut scale, mut overflow) = (0u64, 1f64, false);
    for d in s[..n].bytes() {
        if overflow {
            continue;
        }
        if x > (LIMIT - 1) / 10 {
            overflow = true;
            continue;
        }
        let y = x * 10 + u64::from(d - b'0');
        if y > LIMIT {
            overflow = true;
            continue;
        }
        x = y;
        scale *= 10.0;
    }
    (x, scale, &s[n..])
}

/// Parses a Go duration exactly as Go's `time.ParseDuration` does, sign included: a
/// sequence of decimal numbers with a unit (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`), like
/// `1h2m3.5s` or `-1.5h`; `0` alone is allowed. The errors are Go's texts.
pub fn parse_go_signed(s: &str) -> Result<Signed, DurationError> {
    let invalid = || DurationError::Syntax(format!("time: invalid duration {}", quote(s)));
    let mut rest = s;
    let mut negative = false;
    if let Some(c @ (b'-' | b'+')) = rest.bytes().next() {
        negative = c == b'-';
        rest = &rest[1..];
    }
    if rest == "0" {
        return Ok(Signed {
            negative: false,
            magnitude: Duration::ZERO,
        });
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let c = rest.as_bytes()[0];
        if !(c == b'.' || c.is_ascii_digit()) {
            return Err(invalid());
        }
        let before = rest.len();
        let (mut v, r) = leading_int(rest).ok_or_else(invalid)?;
        rest = r;
        let pre = before != rest.len();
        let (mut f, mut scale, mut post) = (0, 1.0, false);
        if let Some(r) = rest.strip_prefix('.') {
            let before = r.len();
            (f, scale, rest) = leading_fraction(r);
            post = before != rest.len();
        }
        if !pre && !post {
            return Err(invalid());
        }
        let unit_len = rest
            .bytes()
            .position(|c| c == b'.' || c.is_ascii_digit())
            .unwrap_or(rest.len());
        if unit_len == 0 {
            return Err(DurationError::Syntax(format!(
                "time: missing unit in duration {}",
                quote(s)
            )));
        }
        let unit_text = &rest[..unit_len];
        rest = &rest[unit_len..];
        let unit: u64 = match unit_text {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => {
                return Err(DurationError::Syntax(format!(
                    "time: unknown unit {} in duration {}",
                    quote(unit_text),
                    quote(s)
                )));
            }
        };
        if v > LIMIT / unit {
            return Err(invalid());
        }
        v *= unit;
        if f > 0 {
            // As Go: a float64 is exact enough to the nanosecond for fractions of an hour.
            v += (f as f64 * (unit as f64 / scale)) as u64;
            if v > LIMIT {
                return Err(invalid());
            }
        }
        total += v;
        if total > LIMIT {
            return Err(invalid());
        }
    }
    if !negative && total > LIMIT - 1 {
        return Err(invalid());
    }
    Ok(Signed {
        negative: negative && total > 0,
        magnitude: Duration::from_nanos(total),
    })
}

/// Parses a Go duration that may not be negative (every Corefile setting but a few):
/// Go's syntax and errors ([`parse_go_signed`]); a duration below zero is
/// [`DurationError::Negative`]. `-0` and `-0s` are zero, as in Go.
pub fn parse_go(s: &str) -> Result<Duration, DurationError> {
    let d = parse_go_signed(s)?;
    if d.negative {
        return Err(DurationError::Negative(s.to_owned()));
    }
    Ok(d.magnitude)
}

/// Formats like Go's `Duration.String`: `0s`, `1.5ms`, `2s`, `1m30s`,
/// `1h0m0s`.
pub fn format_go(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".to_string();
    }
    if ns < 1_000_000_000 {
        let (unit, scale) = if ns < 1_000 {
            ("ns", 1)
        } else if ns < 1_000_000 {
            ("µs", 1_000)
        } else {
            ("ms", 1_000_000)
        };
        return format!("{}{unit}", frac(ns, scale));
    }
    let total_secs = ns / 1_000_000_000;
    let sub = ns % 1_000_000_000;
    let h = total_secs / 3600;
    let m = (total_secs / 60) % 60;
    let s = total_secs % 60;
    let secs = frac(u128::from(s as u64) * 1_000_000_000 + sub, 1_000_000_000);
    if h > 0 {
        format!("{h}h{m}m{secs}s")
    } else if m > 0 {
        format!("{m}m{secs}s")
    } else {
        format!("{secs}s")
    }
}

/// `v / scale` as a decimal without trailing zeros.
fn frac(v: u128, scale: u128) -> String {
    let int = v / scale;
    let mut rem = v % scale;
    if rem == 0 {
        return int.to_string();
    }
    let mut digits = String::new();
    let mut s = scale;
    while rem > 0 && s > 1 {
        s /= 10;
        digits.push(char::from(b'0' + (rem / s) as u8));
        rem %= s;
    }
    format!("{int}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Go's own results for `parse_go_signed` and `format_go` are
    // `tests/go_outputs.rs`'s; this is the refusal that is ours.
    #[test]
    fn a_negative_duration_is_refused_where_none_is_taken() {
        assert_eq!(parse_go("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_go("-0"), Ok(Duration::ZERO));
        assert_eq!(
            parse_go("-5s").map_err(|e| e.to_string()),
            Err("negative duration \"-5s\"".to_owned())
        );
    }
}
