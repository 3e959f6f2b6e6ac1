//! Go's `time.ParseDuration` and `Duration.String`, so Corefile durations
//! (`30s`, `1m30s`, `500ms`) are read and printed exactly as CoreDNS does.

use std::time::Duration;

/// Why a duration did not parse; the text is Go's error message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DurationError(pub String);

fn invalid(s: &str) -> DurationError {
    DurationError(format!("time: invalid duration {s:?}"))
}

/// Parses a Go duration: a sequence of decimal numbers with a unit
/// (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`), like `1h2m3.5s`; `0` alone is
/// allowed. Negative durations are rejected (no Corefile setting takes
/// one).
pub fn parse_go(s: &str) -> Result<Duration, DurationError> {
    let mut rest = s;
    if let Some(r) = rest.strip_prefix('+') {
        rest = r;
    } else if let Some(r) = rest.strip_prefix('-') {
        if !r.is_empty() && r.chars().all(|c| c == '0') {
            return Ok(Duration::ZERO);
        }
        return Err(DurationError(format!("time: negative duration {s:?}")));
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(invalid(s));
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let int_part = &rest[..int_len];
        rest = &rest[int_len..];
        let mut frac_part = "";
        if let Some(r) = rest.strip_prefix('.') {
            let n = r.bytes().take_while(u8::is_ascii_digit).count();
            frac_part = &r[..n];
            rest = &r[n..];
        }
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(invalid(s));
        }
        let unit_len = rest
            .char_indices()
            .find(|(_, c)| *c == '.' || c.is_ascii_digit())
            .map_or(rest.len(), |(i, _)| i);
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        if unit.is_empty() {
            return Err(DurationError(format!(
                "time: missing unit in duration {s:?}"
            )));
        }
        let scale: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => {
                return Err(DurationError(format!(
                    "time: unknown unit {unit:?} in duration {s:?}"
                )));
            }
        };
        let int: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().map_err(|_| invalid(s))?
        };
        let mut v = int.checked_mul(scale).ok_or_else(|| invalid(s))?;
        let mut f_scale = scale;
        for d in frac_part.bytes() {
            f_scale /= 10;
            if f_scale == 0 {
                break;
            }
            v += u128::from(d - b'0') * f_scale;
        }
        total = total.checked_add(v).ok_or_else(|| invalid(s))?;
        // Go's Duration is an int64 of nanoseconds.
        if total > i64::MAX as u128 {
            return Err(invalid(s));
        }
    }
    let secs = (total / 1_000_000_000) as u64;
    let nanos = (total % 1_000_000_000) as u32;
    Ok(Duration::new(secs, nanos))
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

    #[test]
    fn parses_like_go() {
        let ok = [
            ("0", Duration::ZERO),
            ("30s", Duration::from_secs(30)),
            ("1m30s", Duration::from_secs(90)),
            ("1.5s", Duration::from_millis(1500)),
            ("500ms", Duration::from_millis(500)),
            ("2h", Duration::from_secs(7200)),
            ("10us", Duration::from_micros(10)),
            ("10µs", Duration::from_micros(10)),
            (".5s", Duration::from_millis(500)),
            ("+3s", Duration::from_secs(3)),
        ];
        for (s, want) in ok {
            assert_eq!(parse_go(s), Ok(want), "{s}");
        }
        let bad = [
            ("", "time: invalid duration \"\""),
            ("abc", "time: invalid duration \"abc\""),
            ("5", "time: missing unit in duration \"5\""),
            ("5d", "time: unknown unit \"d\" in duration \"5d\""),
            ("-5s", "time: negative duration \"-5s\""),
            ("99999999999h", "time: invalid duration \"99999999999h\""),
        ];
        for (s, want) in bad {
            assert_eq!(parse_go(s).unwrap_err().0, want, "{s}");
        }
    }

    #[test]
    fn formats_like_go() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_secs(5), "5s"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(120), "2m0s"),
            (Duration::from_secs(3600), "1h0m0s"),
            (Duration::from_millis(100), "100ms"),
            (Duration::from_micros(1500), "1.5ms"),
            (Duration::from_nanos(42), "42ns"),
            (Duration::from_micros(7), "7µs"),
        ];
        for (d, want) in cases {
            assert_eq!(format_go(d), want);
        }
    }
}
