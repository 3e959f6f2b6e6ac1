//! A view over a whole message, any kind, all sections.
//!
//! [`Message::parse`] validates the entire message once (header, every
//! question and record, names and bounds); iteration afterwards cannot
//! fail. Records come out as [`RecordView`]s that point into the buffer,
//! so a cache can, e.g., rewrite TTLs in place via
//! [`RecordView::ttl_offset`]. Only [`RecordView::to_owned_record`]
//! allocates.

use core::ops::Range;

use crate::build::Section;
use crate::edns::Edns;
use crate::error::ParseError;
use crate::header::{HEADER_LEN, Header};
use crate::name::Name;
use crate::read::{read_record, skip_name, skip_question, u16_at};
use crate::record::{Record, decode_rdata};
use crate::types::{Class, Rcode, Rtype};

/// A validated DNS message borrowing its buffer.
#[derive(Debug, Clone)]
pub struct Message<'a> {
    buf: &'a [u8],
    header: Header,
    records_start: usize,
    end: usize,
    /// The OPT record: its byte range (owner to end of rdata) and decoding.
    opt: Option<(Range<usize>, Edns)>,
}

impl<'a> Message<'a> {
    /// Validates `buf` as a DNS message. Bytes after the last record are
    /// ignored. The first OPT record of the additional section, which must
    /// have the root as owner, is decoded.
    pub fn parse(buf: &'a [u8]) -> Result<Message<'a>, ParseError> {
        let header = Header::parse(buf)?;
        let mut off = HEADER_LEN;
        for _ in 0..header.qdcount {
            skip_question(buf, &mut off)?;
        }
        let records_start = off;
        for _ in 0..u32::from(header.ancount) + u32::from(header.nscount) {
            read_record(buf, &mut off)?;
        }
        let mut opt = None;
        for _ in 0..header.arcount {
            let rec = read_record(buf, &mut off)?;
            if rec.rtype == Rtype::OPT && opt.is_none() {
                if buf.get(rec.name_start) != Some(&0) {
                    return Err(ParseError);
                }
                opt = Some((rec.name_start..rec.end(), Edns::from_head(buf, &rec)?));
            }
        }
        Ok(Message {
            buf,
            header,
            records_start,
            end: off,
            opt,
        })
    }

    /// The message bytes.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.buf
    }

    /// Length of the message proper (without trailing bytes).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.end
    }

    /// The header.
    pub fn header(&self) -> Header {
        self.header
    }

    /// The first question, if any.
    pub fn question(&self) -> Option<(Name, Rtype, Class)> {
        if self.header.qdcount == 0 {
            return None;
        }
        let mut off = HEADER_LEN;
        let name = Name::from_wire(self.buf, &mut off).ok()?;
        let qtype = u16_at(self.buf, off).ok()?;
        let qclass = u16_at(self.buf, off + 2).ok()?;
        Some((name, Rtype(qtype), Class(qclass)))
    }

    /// The first question's type and class, if any, without decoding its
    /// name (cheaper than [`Message::question`] where only they matter).
    pub fn question_type(&self) -> Option<(Rtype, Class)> {
        if self.header.qdcount == 0 {
            return None;
        }
        let mut off = HEADER_LEN;
        skip_name(self.buf, &mut off).ok()?;
        let qtype = u16_at(self.buf, off).ok()?;
        let qclass = u16_at(self.buf, off + 2).ok()?;
        Some((Rtype(qtype), Class(qclass)))
    }

    /// Byte range of the question section.
    pub fn question_range(&self) -> Range<usize> {
        HEADER_LEN..self.records_start
    }

    /// All records of all sections, in order (OPT included).
    pub fn records(&self) -> Records<'a> {
        Records {
            buf: self.buf,
            off: self.records_start,
            left: [
                self.header.ancount,
                self.header.nscount,
                self.header.arcount,
            ],
        }
    }

    /// All records of all sections, in order (OPT included), without
    /// their owner names: cheaper than [`Message::records`] (which
    /// decodes each owner) where only types, TTLs and positions matter.
    pub fn heads(&self) -> Heads<'a> {
        Heads(self.records())
    }

    /// The records of one section.
    pub fn section(&self, section: Section) -> impl Iterator<Item = RecordView<'a>> + use<'a> {
        self.records().filter(move |r| r.section == section)
    }

    /// The OPT record, if any.
    pub fn opt(&self) -> Option<Edns> {
        self.opt.as_ref().map(|(_, e)| e.clone())
    }

    /// Offset of the OPT record's TTL field (extended rcode, version,
    /// flags), if there is one: after its root owner, type and class.
    pub fn opt_ttl_offset(&self) -> Option<usize> {
        self.opt.as_ref().map(|(r, _)| r.start + 5)
    }

    /// Byte range of the whole OPT record (owner to end of rdata), if any.
    pub(crate) fn opt_record(&self) -> Option<Range<usize>> {
        self.opt.as_ref().map(|(r, _)| r.clone())
    }

    /// The full 12-bit rcode: header bits plus the OPT's extended bits.
    pub fn rcode(&self) -> Rcode {
        let high = self.opt.as_ref().map_or(0, |(_, e)| e.ext_rcode);
        Rcode::from_parts(self.header.rcode_low(), high)
    }
}

/// Iterator over the records of a [`Message`].
#[derive(Debug, Clone)]
pub struct Records<'a> {
    buf: &'a [u8],
    off: usize,
    /// Records left in answer, authority, additional.
    left: [u16; 3],
}

impl<'a> Iterator for Records<'a> {
    type Item = RecordView<'a>;

    fn next(&mut self) -> Option<RecordView<'a>> {
        let idx = self.left.iter().position(|&n| n > 0)?;
        self.left[idx] -= 1;
        let section = [Section::Answer, Section::Authority, Section::Additional][idx];
        let head = read_record(self.buf, &mut self.off).ok()?;
        let mut name_off = head.name_start;
        let name = Name::from_wire(self.buf, &mut name_off).ok()?;
        Some(RecordView {
            section,
            name,
            rtype: head.rtype,
            class: head.class,
            ttl: head.ttl,
            ttl_offset: head.ttl_offset,
            rdata: head.rdata,
            _buf: core::marker::PhantomData,
        })
    }
}

/// Iterator over the records of a [`Message`] without their owner names
/// ([`Message::heads`]).
#[derive(Debug, Clone)]
pub struct Heads<'a>(Records<'a>);

impl Iterator for Heads<'_> {
    type Item = RecordAt;

    fn next(&mut self) -> Option<RecordAt> {
        let r = &mut self.0;
        let idx = r.left.iter().position(|&n| n > 0)?;
        r.left[idx] -= 1;
        let section = [Section::Answer, Section::Authority, Section::Additional][idx];
        let head = read_record(r.buf, &mut r.off).ok()?;
        Some(RecordAt {
            section,
            name_at: head.name_start,
            rtype: head.rtype,
            class: head.class,
            ttl: head.ttl,
            ttl_offset: head.ttl_offset,
            rdata: head.rdata,
        })
    }
}

/// One record located in a message, its owner name not decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordAt {
    /// The section it is in.
    pub section: Section,
    /// Offset of its owner name (possibly compressed) in the buffer.
    pub name_at: usize,
    /// Record type.
    pub rtype: Rtype,
    /// Class (for OPT: the UDP payload size).
    pub class: Class,
    /// TTL (for OPT: extended rcode, version, flags).
    pub ttl: u32,
    /// Offset of the 4-byte TTL field in the buffer.
    pub ttl_offset: usize,
    /// The rdata as a range of the buffer.
    pub rdata: Range<usize>,
}

impl RecordAt {
    /// Whether its owner is `name` (ASCII case ignored), compared in
    /// place in `msg`, the message it was found in.
    pub fn owner_is(&self, msg: &Message<'_>, name: &Name) -> bool {
        crate::name::wire_name_eq(msg.as_bytes(), self.name_at, name.as_wire(), true)
    }
}

/// One record located in a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordView<'a> {
    /// The section it is in.
    pub section: Section,
    /// Owner name (decompressed).
    pub name: Name,
    /// Record type.
    pub rtype: Rtype,
    /// Class (for OPT: the UDP payload size).
    pub class: Class,
    /// TTL (for OPT: extended rcode, version, flags).
    pub ttl: u32,
    /// Offset of the 4-byte TTL field in the buffer.
    pub ttl_offset: usize,
    /// The rdata as a range of the buffer.
    pub rdata: Range<usize>,
    _buf: core::marker::PhantomData<&'a [u8]>,
}

impl RecordView<'_> {
    /// The rdata bytes (names in them may be compressed).
    pub fn rdata_bytes<'m>(&self, msg: &Message<'m>) -> &'m [u8] {
        msg.buf.get(self.rdata.clone()).unwrap_or(&[])
    }

    /// An owned copy, with names in the rdata decompressed. Fails if the
    /// rdata of a type this crate knows does not decode.
    pub fn to_owned_record(&self, msg: &Message<'_>) -> Result<Record, ParseError> {
        Ok(Record {
            name: self.name,
            class: self.class,
            ttl: self.ttl,
            data: decode_rdata(msg.buf, self.rtype, self.rdata.clone())?,
        })
    }
}
