//! Go's `encoding/hex`: `DecodeString`, with its error texts (rewrite's
//! EDNS0 `0x…` data shows them in a Corefile error; a zone file's hex
//! RDATA is read by the same rules).

/// Why `hex.DecodeString` refused its input, worded as Go's errors print.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HexError {
    /// A byte that is not a hex digit (`hex.InvalidByteError`, `%#U`).
    #[error("encoding/hex: invalid byte: {}", go_sharp_u(*.0))]
    InvalidByte(u8),
    /// An odd number of digits (`hex.ErrLength`).
    #[error("encoding/hex: odd length hex string")]
    OddLength,
}

/// Go's `%#U` of a byte taken as a rune: `U+0067 'g'`, without the quoted
/// character when Go's `strconv.IsPrint` says it is not printable (the
/// C0 and C1 controls, DEL and the soft hyphen among Latin-1's).
fn go_sharp_u(b: u8) -> String {
    let c = char::from(b);
    if c.is_control() || b == 0xAD {
        format!("U+{b:04X}")
    } else {
        format!("U+{b:04X} '{c}'")
    }
}

/// `hex.DecodeString(s)`: pairs of hex digits (either case) to bytes. As
/// Go does, the pairs before an invalid byte are checked first, and an odd
/// length is reported only when the last digit is valid.
pub fn decode_string(s: &str) -> Result<Vec<u8>, HexError> {
    let b = s.as_bytes();
    let val = |c: u8| {
        char::from(c)
            .to_digit(16)
            .and_then(|v| u8::try_from(v).ok())
    };
    let mut out = Vec::with_capacity(b.len() / 2);
    for pair in b.chunks(2) {
        match *pair {
            [hi, lo] => {
                let hi = val(hi).ok_or(HexError::InvalidByte(hi))?;
                let lo = val(lo).ok_or(HexError::InvalidByte(lo))?;
                out.push(hi << 4 | lo);
            }
            [last] => {
                return Err(if val(last).is_none() {
                    HexError::InvalidByte(last)
                } else {
                    HexError::OddLength
                });
            }
            _ => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each input's result or error text as Go 1.26's `hex.DecodeString`
    /// gave them (a Go program run on this table, 2026-12-07).
    #[test]
    fn decodes_and_refuses_as_go() {
        let ok = |s: &str, want: &[u8]| assert_eq!(decode_string(s).as_deref(), Ok(want), "{s}");
        let err = |s: &str, want: &str| {
            assert_eq!(
                decode_string(s).map_err(|e| e.to_string()),
                Err(want.to_string()),
                "{s}"
            );
        };
        ok("", b"");
        ok("6162", b"ab");
        ok("DEADbeef", &[0xde, 0xad, 0xbe, 0xef]);
        err("6g", "encoding/hex: invalid byte: U+0067 'g'");
        err("616", "encoding/hex: odd length hex string");
        err("61g", "encoding/hex: invalid byte: U+0067 'g'");
        err("+f", "encoding/hex: invalid byte: U+002B '+'");
        err("0 ", "encoding/hex: invalid byte: U+0020 ' '");
        err("\u{1}0", "encoding/hex: invalid byte: U+0001");
        err("zz1", "encoding/hex: invalid byte: U+007A 'z'");
        // Bytes, not characters: é is 0xC3 0xA9.
        err("é0", "encoding/hex: invalid byte: U+00C3 'Ã'");
    }
}
