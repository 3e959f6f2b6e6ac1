//! Bounds-checked readers shared by the parsers. Crate-private.

use core::ops::Range;

use crate::error::ParseError;
use crate::name::walk_name;
use crate::types::{Class, Rtype};

pub(crate) fn u16_at(buf: &[u8], off: usize) -> Result<u16, ParseError> {
    match buf.get(off..off + 2) {
        Some(&[a, b]) => Ok(u16::from_be_bytes([a, b])),
        _ => Err(ParseError),
    }
}

pub(crate) fn u32_at(buf: &[u8], off: usize) -> Result<u32, ParseError> {
    match buf.get(off..off + 4) {
        Some(&[a, b, c, d]) => Ok(u32::from_be_bytes([a, b, c, d])),
        _ => Err(ParseError),
    }
}

/// Validates and skips the name at `*off`.
pub(crate) fn skip_name(buf: &[u8], off: &mut usize) -> Result<(), ParseError> {
    walk_name(buf, off, |_| {}).map(|_| ())
}

/// The fixed part of a resource record, located in a message.
#[derive(Debug, Clone)]
pub(crate) struct RecordHead {
    /// Offset of the owner name.
    pub name_start: usize,
    pub rtype: Rtype,
    pub class: Class,
    pub ttl: u32,
    pub ttl_offset: usize,
    pub rdata: Range<usize>,
}

impl RecordHead {
    /// Where the record ends (offset just past its rdata).
    pub fn end(&self) -> usize {
        self.rdata.end
    }
}

/// Reads and validates the record at `*off` (owner name and bounds, not
/// the rdata contents), moving `*off` past it.
pub(crate) fn read_record(buf: &[u8], off: &mut usize) -> Result<RecordHead, ParseError> {
    let name_start = *off;
    skip_name(buf, off)?;
    let p = *off;
    let rtype = Rtype(u16_at(buf, p)?);
    let class = Class(u16_at(buf, p + 2)?);
    let ttl = u32_at(buf, p + 4)?;
    let rdlen = usize::from(u16_at(buf, p + 8)?);
    let start = p + 10;
    let end = start + rdlen;
    if end > buf.len() {
        return Err(ParseError);
    }
    *off = end;
    Ok(RecordHead {
        name_start,
        rtype,
        class,
        ttl,
        ttl_offset: p + 4,
        rdata: start..end,
    })
}

/// Reads a question at `*off`, returning the type and class.
pub(crate) fn skip_question(buf: &[u8], off: &mut usize) -> Result<(Rtype, Class), ParseError> {
    skip_name(buf, off)?;
    let qtype = Rtype(u16_at(buf, *off)?);
    let qclass = Class(u16_at(buf, *off + 2)?);
    *off += 4;
    Ok((qtype, qclass))
}
