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
