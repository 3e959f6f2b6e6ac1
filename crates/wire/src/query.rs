//! The hot-path view over a received query.
//!
//! [`Query::parse`] walks the packet once: header, the single question,
//! then every record (which must be well-formed) looking for the OPT
//! record. It copies only the question name (twice: as sent, and
//! lowercased for lookups); everything else is read from the borrowed
//! packet. No heap allocation.

use core::ops::Range;

use crate::edns::{Edns, EdnsOptions, MAX_UDP_PLAIN};
use crate::error::QueryError;
use crate::header::{HEADER_LEN, Header};
use crate::name::Name;
use crate::read::{read_record, u16_at};
use crate::types::{Class, Rtype};

/// A parsed query borrowing the packet it came from.
#[derive(Debug, Clone)]
pub struct Query<'a> {
    raw: &'a [u8],
    header: Header,
    qname: Name,
    qname_lower: Name,
    qtype: Rtype,
    qclass: Class,
    question_end: usize,
    edns: Option<Edns>,
}

impl<'a> Query<'a> {
    /// Parses a received packet as a query.
    ///
    /// Exactly one question is accepted (more is [`QueryError::Malformed`],
    /// as miekg/dns rejects it with FORMERR). Answer and authority records
    /// are skipped but must be well-formed. At most one OPT record, with
    /// owner `.`, may appear in the additional section.
    pub fn parse(packet: &'a [u8]) -> Result<Query<'a>, QueryError> {
        let header = Header::parse(packet).map_err(|_| QueryError::TooShort)?;
        if header.qr() {
            return Err(QueryError::NotAQuery);
        }
        match header.qdcount {
            0 => return Err(QueryError::NoQuestion),
            1 => {}
            _ => return Err(QueryError::Malformed),
        }
        let mut off = HEADER_LEN;
        // The names are written where they stay (no whole-`Name` copies).
        let mut q = Query {
            raw: packet,
            header,
            qname: Name::root(),
            qname_lower: Name::root(),
            qtype: Rtype(0),
            qclass: Class(0),
            question_end: 0,
            edns: None,
        };
        q.qname.read_wire(packet, &mut off)?;
        q.qtype = Rtype(u16_at(packet, off)?);
        q.qclass = Class(u16_at(packet, off + 2)?);
        off += 4;
        q.question_end = off;
        // Past the question a failure keeps the question for the FORMERR.
        let bad = QueryError::MalformedRecords {
            // At most a header and a 255-octet name.
            question_end: u16::try_from(off).unwrap_or(u16::MAX),
        };
        // A count that runs out exactly at the end of the packet is a lie
        // that ends the records, as miekg/dns reads it; one that stops
        // inside a record is not.
        for _ in 0..u32::from(header.ancount) + u32::from(header.nscount) {
            if off == packet.len() {
                break;
            }
            read_record(packet, &mut off).map_err(|_| bad)?;
        }
        for _ in 0..header.arcount {
            if off == packet.len() {
                break;
            }
            let rec = read_record(packet, &mut off).map_err(|_| bad)?;
            if rec.rtype != Rtype::OPT {
                continue;
            }
            // Two OPT records are FORMERR (RFC 6891 6.1.1), and so is an
            // OPT with another owner than the root.
            if q.edns.is_some() || packet.get(rec.name_start) != Some(&0) {
                return Err(bad);
            }
            q.edns = Some(Edns::from_head(packet, &rec).map_err(|_| bad)?);
        }
        let Query {
            qname, qname_lower, ..
        } = &mut q;
        qname_lower.set_lowercase_of(qname);
        Ok(q)
    }

    /// The parsed query without its bytes, to be attached again to a copy
    /// of them with [`Detached::attach`]: a query that moves to a buffer
    /// of its own (the asynchronous path of a server) is not parsed twice.
    pub fn detach(&self) -> Detached {
        Detached {
            len: self.raw.len(),
            header: self.header,
            qname: self.qname,
            qtype: self.qtype,
            qclass: self.qclass,
            question_end: self.question_end,
            edns: self.edns.clone(),
        }
    }

    /// This query with its question name replaced by `name`: the packet
    /// (header, type, class and what follows the question kept) is built
    /// into `buf`. When the query holds no records but an OPT (the usual
    /// query), the query over the new packet is derived from this one, not
    /// parsed again (a server-side search walk asks one such query per
    /// search domain); other records' names might point into the question,
    /// so such a packet is parsed.
    pub fn renamed<'b>(&self, name: &Name, buf: &'b mut Vec<u8>) -> Result<Query<'b>, QueryError> {
        let wire = name.as_wire();
        self.renamed_to(&wire[..wire.len() - 1], &Name::root(), buf)
    }

    /// [`Query::renamed`] to the name of the first `keep` bytes of this
    /// query's name (whole labels, the root label not among them)
    /// followed by `suffix`: a search walk's next name, written straight
    /// into the packet and the query (no name built first and copied).
    /// `keep` not at a label boundary of the name, and a name past 255
    /// bytes, are [`QueryError::Malformed`].
    pub fn renamed_suffix<'b>(
        &self,
        keep: usize,
        suffix: &Name,
        buf: &'b mut Vec<u8>,
    ) -> Result<Query<'b>, QueryError> {
        let wire = self.qname.as_wire();
        let mut at = 0;
        while at < keep {
            at += 1 + usize::from(*wire.get(at).ok_or(QueryError::Malformed)?);
        }
        if at != keep || keep >= wire.len() {
            return Err(QueryError::Malformed);
        }
        self.renamed_to(&wire[..keep], suffix, buf)
    }

    /// The query for the name of the labels `head` followed by `suffix`.
    fn renamed_to<'b>(
        &self,
        head: &[u8],
        suffix: &Name,
        buf: &'b mut Vec<u8>,
    ) -> Result<Query<'b>, QueryError> {
        let name_len = head.len() + suffix.len();
        if name_len > crate::name::MAX_NAME_LEN {
            return Err(QueryError::Malformed);
        }
        let old_name_end = self.question_end - 4;
        buf.clear();
        buf.extend_from_slice(&self.raw[..HEADER_LEN]);
        buf.extend_from_slice(head);
        buf.extend_from_slice(suffix.as_wire());
        buf.extend_from_slice(&self.raw[old_name_end..]);
        let h = self.header;
        let lone_opt = h.arcount == u16::from(self.edns.is_some());
        if h.ancount != 0 || h.nscount != 0 || !lone_opt {
            return Query::parse(buf);
        }
        let question_end = HEADER_LEN + name_len + 4;
        let edns = self.edns.clone().map(|mut e| {
            let at = |o: usize| o - self.question_end + question_end;
            e.options = at(e.options.start)..at(e.options.end);
            e
        });
        let mut q = Query {
            raw: buf.as_slice(),
            header: h,
            qname: Name::root(),
            qname_lower: Name::root(),
            qtype: self.qtype,
            qclass: self.qclass,
            question_end,
            edns,
        };
        let Query {
            qname, qname_lower, ..
        } = &mut q;
        qname
            .set_concat(head, suffix)
            .map_err(|_| QueryError::Malformed)?;
        qname_lower.set_lowercase_of(qname);
        Ok(q)
    }

    /// The whole packet.
    pub fn raw(&self) -> &'a [u8] {
        self.raw
    }

    /// The header as received.
    pub fn header(&self) -> Header {
        self.header
    }

    /// The message ID.
    pub fn id(&self) -> u16 {
        self.header.id
    }

    /// The question name as sent (original case, e.g. DNS 0x20).
    pub fn qname(&self) -> &Name {
        &self.qname
    }

    /// The question name lowercased, for lookups.
    pub fn qname_lower(&self) -> &Name {
        &self.qname_lower
    }

    /// The question type.
    pub fn qtype(&self) -> Rtype {
        self.qtype
    }

    /// The question class.
    pub fn qclass(&self) -> Class {
        self.qclass
    }

    /// The bytes of the question (name, type, class) within [`raw`](Self::raw).
    pub fn question_range(&self) -> Range<usize> {
        HEADER_LEN..self.question_end
    }

    /// The question bytes (name, type, class) as received.
    pub fn question_bytes(&self) -> &'a [u8] {
        self.raw.get(self.question_range()).unwrap_or(&[])
    }

    /// The OPT record, if the query has one.
    pub fn edns(&self) -> Option<&Edns> {
        self.edns.as_ref()
    }

    /// The EDNS options (empty without EDNS).
    pub fn edns_options(&self) -> EdnsOptions<'a> {
        self.edns
            .as_ref()
            .map_or_else(EdnsOptions::default, |e| e.options(self.raw))
    }

    /// DNSSEC OK; false without EDNS.
    pub fn do_bit(&self) -> bool {
        self.edns.as_ref().is_some_and(|e| e.do_bit)
    }

    /// The largest UDP reply the client accepts: the EDNS payload size
    /// (at least 512), or 512 without EDNS.
    pub fn udp_size(&self) -> u16 {
        self.edns
            .as_ref()
            .map_or(MAX_UDP_PLAIN, Edns::clamped_udp_size)
    }
}

/// A [`Query`] parsed from a packet it no longer borrows ([`Query::detach`]).
///
/// It keeps the name as sent but not its lowercase form, which
/// [`Detached::attach`] derives again: a detached query is moved with the
/// future that carries it, and a second name would be copied at each move.
#[derive(Debug, Clone)]
pub struct Detached {
    /// The length of the packet it was parsed from.
    len: usize,
    header: Header,
    qname: Name,
    qtype: Rtype,
    qclass: Class,
    question_end: usize,
    edns: Option<Edns>,
}

impl Detached {
    /// The query over `raw`, which must be a copy of the packet it was
    /// parsed from. `None` when `raw` is not as long as that packet; any
    /// other difference is not checked (the copy is the caller's).
    pub fn attach<'a>(&self, raw: &'a [u8]) -> Option<Query<'a>> {
        if raw.len() != self.len {
            return None;
        }
        let mut q = Query {
            raw,
            header: self.header,
            qname: self.qname,
            qname_lower: Name::root(),
            qtype: self.qtype,
            qclass: self.qclass,
            question_end: self.question_end,
            edns: self.edns.clone(),
        };
        let Query {
            qname, qname_lower, ..
        } = &mut q;
        qname_lower.set_lowercase_of(qname);
        Some(q)
    }
}
