//! The fixed 12-byte message header (RFC 1035 §4.1.1).
//!
//! ```text
//!  0  1  2  3  4  5  6  7  8  9 10 11 12 13 14 15
//! +--+--+--+--+--+--+--+--+--+--+--+--+--+--+--+--+
//! |                      ID                       |
//! |QR|   Opcode  |AA|TC|RD|RA| Z|AD|CD|   RCODE   |
//! |                    QDCOUNT                    |
//! |                    ANCOUNT                    |
//! |                    NSCOUNT                    |
//! |                    ARCOUNT                    |
//! +--+--+--+--+--+--+--+--+--+--+--+--+--+--+--+--+
//! ```
//!
//! Besides the [`Header`] value type there are in-place patchers
//! ([`set_id`], [`set_tc`], ...) for answers held as bytes, e.g. in a cache.

use crate::error::ParseError;
use crate::types::Opcode;

/// Length of the DNS header in bytes.
pub const HEADER_LEN: usize = 12;

/// QR: this message is a response.
pub const FLAG_QR: u16 = 0x8000;
/// AA: authoritative answer.
pub const FLAG_AA: u16 = 0x0400;
/// TC: truncated.
pub const FLAG_TC: u16 = 0x0200;
/// RD: recursion desired.
pub const FLAG_RD: u16 = 0x0100;
/// RA: recursion available.
pub const FLAG_RA: u16 = 0x0080;
/// Z: reserved, must be zero.
pub const FLAG_Z: u16 = 0x0040;
/// AD: authentic data (RFC 4035).
pub const FLAG_AD: u16 = 0x0020;
/// CD: checking disabled (RFC 4035).
pub const FLAG_CD: u16 = 0x0010;
/// Mask of the opcode bits in the flags word.
pub const OPCODE_MASK: u16 = 0x7800;
/// Mask of the (low 4 bits of the) rcode in the flags word.
pub const RCODE_MASK: u16 = 0x000F;

/// A decoded message header. The flags word is kept raw; use the accessors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Header {
    /// Message ID, copied from query to response.
    pub id: u16,
    /// QR, opcode, AA, TC, RD, RA, Z, AD, CD and the low 4 rcode bits.
    pub flags: u16,
    /// Number of questions.
    pub qdcount: u16,
    /// Number of answer records.
    pub ancount: u16,
    /// Number of authority records.
    pub nscount: u16,
    /// Number of additional records (including OPT).
    pub arcount: u16,
}

impl Header {
    /// Reads the header from the first 12 bytes of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Header, ParseError> {
        let h = buf.get(..HEADER_LEN).ok_or(ParseError)?;
        let w = |i: usize| u16::from_be_bytes([h[i], h[i + 1]]);
        Ok(Header {
            id: w(0),
            flags: w(2),
            qdcount: w(4),
            ancount: w(6),
            nscount: w(8),
            arcount: w(10),
        })
    }

    /// The header in wire form.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        for (i, v) in [
            self.id,
            self.flags,
            self.qdcount,
            self.ancount,
            self.nscount,
            self.arcount,
        ]
        .into_iter()
        .enumerate()
        {
            out[2 * i..2 * i + 2].copy_from_slice(&v.to_be_bytes());
        }
        out
    }

    /// Writes the header into the first 12 bytes of `out`. Does nothing
    /// if `out` is shorter than that.
    pub fn write(&self, out: &mut [u8]) {
        if let Some(dst) = out.get_mut(..HEADER_LEN) {
            dst.copy_from_slice(&self.to_bytes());
        }
    }

    /// QR: the message is a response.
    pub fn qr(&self) -> bool {
        self.flags & FLAG_QR != 0
    }
    /// AA: authoritative answer.
    pub fn aa(&self) -> bool {
        self.flags & FLAG_AA != 0
    }
    /// TC: the message was truncated.
    pub fn tc(&self) -> bool {
        self.flags & FLAG_TC != 0
    }
    /// RD: recursion desired.
    pub fn rd(&self) -> bool {
        self.flags & FLAG_RD != 0
    }
    /// RA: recursion available.
    pub fn ra(&self) -> bool {
        self.flags & FLAG_RA != 0
    }
    /// Z: the reserved bit.
    pub fn z(&self) -> bool {
        self.flags & FLAG_Z != 0
    }
    /// AD: authentic data.
    pub fn ad(&self) -> bool {
        self.flags & FLAG_AD != 0
    }
    /// CD: checking disabled.
    pub fn cd(&self) -> bool {
        self.flags & FLAG_CD != 0
    }
    /// The 4-bit opcode.
    pub fn opcode(&self) -> Opcode {
        Opcode(((self.flags & OPCODE_MASK) >> 11) as u8)
    }
    /// The low 4 bits of the rcode (the rest lives in the OPT record).
    pub fn rcode_low(&self) -> u8 {
        (self.flags & RCODE_MASK) as u8
    }

    /// Sets or clears the flag bits in `mask`.
    pub fn set_flag(&mut self, mask: u16, on: bool) {
        if on {
            self.flags |= mask;
        } else {
            self.flags &= !mask;
        }
    }
    /// Replaces the opcode.
    pub fn set_opcode(&mut self, op: Opcode) {
        self.flags = (self.flags & !OPCODE_MASK) | ((u16::from(op.0) << 11) & OPCODE_MASK);
    }
    /// Replaces the low 4 rcode bits.
    pub fn set_rcode_low(&mut self, rc: u8) {
        self.flags = (self.flags & !RCODE_MASK) | (u16::from(rc) & RCODE_MASK);
    }
}

/// What a server should do with a received message, judged from its header
/// alone. Mirrors miekg/dns `DefaultMsgAcceptFunc`, which CoreDNS uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Accept {
    /// Handle it.
    Accept,
    /// Answer FORMERR.
    Reject,
    /// Answer NOTIMP (opcode other than QUERY or NOTIFY).
    RejectNotImplemented,
    /// Drop silently (a response).
    Ignore,
}

impl Header {
    /// The miekg/dns default acceptance check: responses are ignored,
    /// opcodes other than QUERY/NOTIFY get NOTIMP, and qdcount != 1,
    /// ancount > 1, nscount > 1 or arcount > 2 get FORMERR.
    pub fn accept(&self) -> Accept {
        if self.qr() {
            return Accept::Ignore;
        }
        let op = self.opcode();
        if op != Opcode::QUERY && op != Opcode::NOTIFY {
            return Accept::RejectNotImplemented;
        }
        if self.qdcount != 1 || self.ancount > 1 || self.nscount > 1 || self.arcount > 2 {
            return Accept::Reject;
        }
        Accept::Accept
    }
}

fn patch_flags(msg: &mut [u8], f: impl FnOnce(&mut Header)) {
    if let Ok(mut h) = Header::parse(msg) {
        f(&mut h);
        if let Some(dst) = msg.get_mut(2..4) {
            dst.copy_from_slice(&h.flags.to_be_bytes());
        }
    }
}

/// Overwrites the message ID in place. No-op on a too-short buffer.
pub fn set_id(msg: &mut [u8], id: u16) {
    if let Some(dst) = msg.get_mut(0..2) {
        dst.copy_from_slice(&id.to_be_bytes());
    }
}

/// Sets or clears TC in place. No-op on a too-short buffer.
pub fn set_tc(msg: &mut [u8], on: bool) {
    patch_flags(msg, |h| h.set_flag(FLAG_TC, on));
}

/// Sets or clears AA in place. No-op on a too-short buffer.
pub fn set_aa(msg: &mut [u8], on: bool) {
    patch_flags(msg, |h| h.set_flag(FLAG_AA, on));
}

/// Sets or clears RA in place. No-op on a too-short buffer.
pub fn set_ra(msg: &mut [u8], on: bool) {
    patch_flags(msg, |h| h.set_flag(FLAG_RA, on));
}

/// Sets or clears AD in place. No-op on a too-short buffer.
pub fn set_ad(msg: &mut [u8], on: bool) {
    patch_flags(msg, |h| h.set_flag(FLAG_AD, on));
}

/// Sets or clears RD in place. No-op on a too-short buffer.
pub fn set_rd(msg: &mut [u8], on: bool) {
    patch_flags(msg, |h| h.set_flag(FLAG_RD, on));
}

/// Sets the flag bits of `set` and clears those of `clear` in place
/// (`set` wins where both name a bit). No-op on a too-short buffer.
pub fn set_flags(msg: &mut [u8], set: u16, clear: u16) {
    patch_flags(msg, |h| h.flags = (h.flags & !clear) | set);
}

/// Replaces the low 4 rcode bits in place. No-op on a too-short buffer.
pub fn set_rcode_low(msg: &mut [u8], rc: u8) {
    patch_flags(msg, |h| h.set_rcode_low(rc));
}

/// Overwrites the four section counts in place. No-op on a too-short buffer.
pub fn set_counts(msg: &mut [u8], qd: u16, an: u16, ns: u16, ar: u16) {
    if let Some(dst) = msg.get_mut(4..HEADER_LEN) {
        for (i, v) in [qd, an, ns, ar].into_iter().enumerate() {
            dst[2 * i..2 * i + 2].copy_from_slice(&v.to_be_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RAW: [u8; 12] = [0x12, 0x34, 0x81, 0xB3, 0, 1, 0, 2, 0, 3, 0, 4];

    #[test]
    fn parse_and_write_round_trip() {
        let h = Header::parse(&RAW).unwrap();
        assert_eq!(h.id, 0x1234);
        assert_eq!((h.qdcount, h.ancount, h.nscount, h.arcount), (1, 2, 3, 4));
        assert!(h.qr() && h.rd() && h.ra() && h.ad() && h.cd());
        assert!(!h.aa() && !h.tc() && !h.z());
        assert_eq!(h.opcode(), Opcode::QUERY);
        assert_eq!(h.rcode_low(), 3);
        let mut out = [0u8; 14];
        h.write(&mut out);
        assert_eq!(&out[..12], &RAW);
        assert_eq!(h.to_bytes(), RAW);
        let mut short = [0u8; 5];
        h.write(&mut short);
        assert_eq!(short, [0u8; 5]);
    }

    #[test]
    fn parse_too_short() {
        assert_eq!(Header::parse(&RAW[..11]), Err(ParseError));
        assert_eq!(Header::parse(&[]), Err(ParseError));
    }

    #[test]
    fn setters() {
        let mut h = Header::default();
        h.set_opcode(Opcode::UPDATE);
        assert_eq!(h.opcode(), Opcode::UPDATE);
        h.set_opcode(Opcode(0x1F));
        assert_eq!(h.opcode(), Opcode(0xF));
        h.set_rcode_low(0x13);
        assert_eq!(h.rcode_low(), 3);
        h.set_flag(FLAG_AA | FLAG_TC, true);
        assert!(h.aa() && h.tc());
        h.set_flag(FLAG_TC, false);
        assert!(h.aa() && !h.tc());
    }

    #[test]
    fn in_place_patchers() {
        let mut m = RAW;
        set_id(&mut m, 0xBEEF);
        set_tc(&mut m, true);
        set_aa(&mut m, true);
        set_ra(&mut m, false);
        set_ad(&mut m, false);
        set_rcode_low(&mut m, 5);
        set_counts(&mut m, 1, 0, 0, 1);
        let h = Header::parse(&m).unwrap();
        assert_eq!(h.id, 0xBEEF);
        assert!(h.tc() && h.aa() && !h.ra() && !h.ad() && h.qr() && h.cd());
        assert_eq!(h.rcode_low(), 5);
        assert_eq!((h.qdcount, h.ancount, h.nscount, h.arcount), (1, 0, 0, 1));
        let mut short = [1u8; 3];
        set_id(&mut short, 0);
        set_tc(&mut short, true);
        set_counts(&mut short, 1, 1, 1, 1);
        assert_eq!(short, [0, 0, 1]);
    }

    #[test]
    fn accept_rules() {
        let q = |flags: u16, qd, an, ns, ar| Header {
            id: 1,
            flags,
            qdcount: qd,
            ancount: an,
            nscount: ns,
            arcount: ar,
        };
        assert_eq!(q(0, 1, 0, 0, 1).accept(), Accept::Accept);
        assert_eq!(q(FLAG_QR, 1, 0, 0, 0).accept(), Accept::Ignore);
        assert_eq!(
            q(5 << 11, 1, 0, 0, 0).accept(),
            Accept::RejectNotImplemented
        );
        assert_eq!(q(4 << 11, 1, 1, 0, 0).accept(), Accept::Accept);
        assert_eq!(q(0, 0, 0, 0, 0).accept(), Accept::Reject);
        assert_eq!(q(0, 2, 0, 0, 0).accept(), Accept::Reject);
        assert_eq!(q(0, 1, 2, 0, 0).accept(), Accept::Reject);
        assert_eq!(q(0, 1, 0, 2, 0).accept(), Accept::Reject);
        assert_eq!(q(0, 1, 0, 0, 3).accept(), Accept::Reject);
    }
}
