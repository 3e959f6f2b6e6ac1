//! Building messages into a caller-owned, reused buffer.
//!
//! [`MessageBuilder`] appends to a `Vec<u8>` that the caller keeps between
//! queries: the vector is cleared, never shrunk, so after warm-up building
//! a response allocates nothing. Names are compressed (RFC 1035 §4.1.4)
//! against a fixed-size table of earlier name positions, keyed by a cheap
//! digest of each name suffix and verified byte-for-byte, so compression is exact
//! (case-sensitive) and also allocation-free.
//!
//! Every `push_*` either writes a whole record or leaves the message as it
//! was and returns [`TruncationError`] (size limit reached); the caller
//! then typically sets TC and calls [`MessageBuilder::finish`].

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::edns::{EDNS_DO, MAX_MESSAGE_LEN};
use crate::error::TruncationError;
use crate::header::{self, FLAG_CD, FLAG_QR, FLAG_RD, Header, OPCODE_MASK, set_counts};
use crate::name::{Name, is_uncompressed, wire_name_eq};
use crate::query::Query;
use crate::record::Record;
use crate::types::{Class, Rcode, Rtype};

/// A message section holding resource records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Section {
    /// Answers to the question.
    Answer,
    /// Authority records (SOA for negative answers, NS referrals).
    Authority,
    /// Additional records (glue, OPT).
    Additional,
}

impl Section {
    /// Index in the header counts (answer = 1, after the question count).
    const fn count_index(self) -> usize {
        match self {
            Section::Answer => 1,
            Section::Authority => 2,
            Section::Additional => 3,
        }
    }
}

/// Record data to write, borrowing its parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RData<'a> {
    /// IPv4 address.
    A(Ipv4Addr),
    /// IPv6 address.
    Aaaa(Ipv6Addr),
    /// Canonical name (compressed).
    Cname(&'a Name),
    /// Name server (compressed).
    Ns(&'a Name),
    /// Pointer (compressed).
    Ptr(&'a Name),
    /// Mail exchange (exchange compressed).
    Mx {
        /// Lower is preferred.
        preference: u16,
        /// The mail server.
        exchange: &'a Name,
    },
    /// Service location (RFC 2782; target not compressed, as miekg/dns).
    Srv {
        /// Lower is tried first.
        priority: u16,
        /// Relative weight among equal priorities.
        weight: u16,
        /// Port.
        port: u16,
        /// Host providing the service.
        target: &'a Name,
    },
    /// Text strings. Strings longer than 255 bytes are split into
    /// 255-byte character-strings.
    Txt(&'a [&'a [u8]]),
    /// Start of authority (both names compressed).
    Soa {
        /// Primary name server.
        mname: &'a Name,
        /// Responsible mailbox.
        rname: &'a Name,
        /// Zone serial.
        serial: u32,
        /// Refresh interval.
        refresh: u32,
        /// Retry interval.
        retry: u32,
        /// Expiry.
        expire: u32,
        /// Negative-caching TTL.
        minimum: u32,
    },
    /// Text strings owned by a [`Record`](crate::Record); written like
    /// [`RData::Txt`].
    TxtOwned(&'a [Vec<u8>]),
    /// Host information; each string is cut at 255 bytes.
    Hinfo {
        /// CPU.
        cpu: &'a [u8],
        /// Operating system.
        os: &'a [u8],
    },
    /// Any type, rdata already in wire form (written as is).
    Raw {
        /// The record type.
        rtype: Rtype,
        /// The rdata bytes.
        data: &'a [u8],
    },
}

impl RData<'_> {
    /// The record type this rdata belongs to.
    pub fn rtype(&self) -> Rtype {
        match self {
            RData::A(_) => Rtype::A,
            RData::Aaaa(_) => Rtype::AAAA,
            RData::Cname(_) => Rtype::CNAME,
            RData::Ns(_) => Rtype::NS,
            RData::Ptr(_) => Rtype::PTR,
            RData::Mx { .. } => Rtype::MX,
            RData::Srv { .. } => Rtype::SRV,
            RData::Txt(_) | RData::TxtOwned(_) => Rtype::TXT,
            RData::Soa { .. } => Rtype::SOA,
            RData::Hinfo { .. } => Rtype::HINFO,
            RData::Raw { rtype, .. } => *rtype,
        }
    }
}

/// Number of name positions remembered for compression.
const COMPRESS_SLOTS: usize = 128;
/// Largest offset a compression pointer can hold.
const MAX_POINTER: usize = 0x3FFF;

/// Name suffix positions already in the message: the offset of every
/// label written out in full (not as a pointer), in the order written.
///
/// Only offsets are kept (256 bytes, cheap to set up per message): a
/// candidate is recognised by its first label's length and first byte,
/// read from the message itself, and verified byte for byte, so the first
/// true match in insertion order is found as with any other filter.
struct Compressor {
    offsets: [u16; COMPRESS_SLOTS],
    len: usize,
}

impl Compressor {
    fn new() -> Self {
        Compressor {
            offsets: [0; COMPRESS_SLOTS],
            len: 0,
        }
    }

    fn insert(&mut self, offset: usize) {
        if let Some(slot) = self.offsets.get_mut(self.len)
            && offset <= MAX_POINTER
        {
            *slot = offset as u16;
            self.len += 1;
        }
    }

    /// Offset of an earlier copy of `suffix` (uncompressed wire form, not
    /// the root: at least a length byte and a first byte).
    fn find(&self, buf: &[u8], suffix: &[u8]) -> Option<usize> {
        let head = suffix.get(..2)?;
        self.offsets
            .get(..self.len)?
            .iter()
            .map(|&off| usize::from(off))
            .find(|&off| {
                buf.get(off..off + 2) == Some(head) && wire_name_eq(buf, off, suffix, false)
            })
    }
}

/// Where a push started: message length, compression entries, savings.
type Mark = (usize, usize, usize);

/// Writes a DNS message into a reused buffer.
pub struct MessageBuilder<'b> {
    buf: &'b mut Vec<u8>,
    limit: usize,
    /// qd, an, ns, ar.
    counts: [u16; 4],
    /// 0 = question, then 1 + section index.
    stage: usize,
    ext_rcode: u8,
    opt_ttl_at: Option<usize>,
    comp: Compressor,
    /// Bytes compression saved so far: the message's uncompressed length
    /// is its length plus this (see [`crate::size`]).
    saved: usize,
    /// Where [`finish`](Self::finish) reports `saved`, if anywhere.
    saved_out: Option<&'b mut usize>,
}

impl<'b> MessageBuilder<'b> {
    /// Starts a response to `query` in `buf`: same ID, QR set, opcode, RD
    /// and CD copied for a standard query (only then, as miekg/dns's
    /// `SetReply`: a NOTIFY's reply has neither), and the question copied
    /// exactly (original case).
    pub fn reply_to(query: &Query<'_>, buf: &'b mut Vec<u8>) -> Self {
        let q = query.header();
        let copied = if q.flags & OPCODE_MASK == 0 {
            FLAG_RD | FLAG_CD
        } else {
            0
        };
        let header = Header {
            id: q.id,
            flags: FLAG_QR | (q.flags & (OPCODE_MASK | copied)),
            ..Header::default()
        };
        let mut b = MessageBuilder::new(buf, header);
        // What `push_question` does on an empty message, without its
        // checks: a name is at most 255 bytes, so the question always fits
        // the default limit, and with nothing to compress against the name
        // is written whole (the parser rejected compression pointers in it,
        // so these are the question bytes exactly), its label positions
        // remembered.
        b.write_wire_name(query.qname().as_wire(), false);
        b.put_u16(query.qtype().0);
        b.put_u16(query.qclass().0);
        b.counts[0] = 1;
        b
    }

    /// Starts an arbitrary message with `header` (its counts are ignored;
    /// the builder keeps its own). Clears `buf`.
    pub fn new(buf: &'b mut Vec<u8>, header: Header) -> Self {
        buf.clear();
        let header = Header {
            qdcount: 0,
            ancount: 0,
            nscount: 0,
            arcount: 0,
            ..header
        };
        buf.extend_from_slice(&header.to_bytes());
        MessageBuilder {
            buf,
            limit: MAX_MESSAGE_LEN,
            counts: [0; 4],
            stage: 0,
            ext_rcode: 0,
            opt_ttl_at: None,
            comp: Compressor::new(),
            saved: 0,
            saved_out: None,
        }
    }

    /// Reports, at [`finish`](Self::finish), into `out` how many bytes name
    /// compression saved (0 until then): so a writer knows the message's
    /// uncompressed length without walking it.
    pub fn counting_savings(mut self, out: &'b mut usize) -> Self {
        *out = 0;
        self.saved_out = Some(out);
        self
    }

    /// The length the message would have without name compression.
    pub fn uncompressed_len(&self) -> usize {
        self.buf.len() + self.saved
    }

    /// Sets the size limit (default 65535). Pushes that would exceed it fail.
    /// It does not remove what is already written.
    pub fn set_limit(&mut self, max: usize) {
        self.limit = max.min(MAX_MESSAGE_LEN);
    }

    /// The current size limit.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Current message length.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// The bytes written so far (counts are only written by `finish`).
    pub fn as_bytes(&self) -> &[u8] {
        self.buf
    }

    /// Records pushed so far per section: question, answer, authority,
    /// additional.
    pub fn counts(&self) -> [u16; 4] {
        self.counts
    }

    /// Sets the rcode: the low 4 bits go in the header, the high 8 into
    /// the OPT record (now if already pushed, else when pushed).
    pub fn set_rcode(&mut self, rc: Rcode) {
        header::set_rcode_low(self.buf, rc.low());
        self.ext_rcode = rc.high();
        if let Some(b) = self.opt_ttl_at.and_then(|at| self.buf.get_mut(at)) {
            *b = self.ext_rcode;
        }
    }

    /// Sets or clears AA.
    pub fn set_aa(&mut self, on: bool) {
        header::set_aa(self.buf, on);
    }

    /// Sets or clears RA.
    pub fn set_ra(&mut self, on: bool) {
        header::set_ra(self.buf, on);
    }

    /// Sets or clears RD.
    pub fn set_rd(&mut self, on: bool) {
        header::set_rd(self.buf, on);
    }

    /// Sets or clears TC.
    pub fn set_tc(&mut self, on: bool) {
        header::set_tc(self.buf, on);
    }

    /// Sets or clears AD.
    pub fn set_ad(&mut self, on: bool) {
        header::set_ad(self.buf, on);
    }

    /// Adds a question. Only before any record.
    pub fn push_question(
        &mut self,
        name: &Name,
        qtype: Rtype,
        qclass: Class,
    ) -> Result<(), TruncationError> {
        if self.stage != 0 {
            debug_assert!(false, "question pushed after records");
            return Err(TruncationError);
        }
        let mark = self.mark();
        self.write_name(name, true);
        self.put_u16(qtype.0);
        self.put_u16(qclass.0);
        self.commit(mark, 0)
    }

    /// Adds a record. Sections must come in order: answer, authority,
    /// additional (a step back is a bug: debug assertion, error in release).
    pub fn push(
        &mut self,
        section: Section,
        owner: &Name,
        class: Class,
        ttl: u32,
        rdata: &RData<'_>,
    ) -> Result<(), TruncationError> {
        self.enter(section)?;
        let mark = self.mark();
        self.write_name(owner, true);
        self.put_u16(rdata.rtype().0);
        self.put_u16(class.0);
        self.put_u32(ttl);
        let rdlen_at = self.buf.len();
        self.put_u16(0);
        self.write_rdata(rdata);
        self.patch_rdlen(rdlen_at, mark)?;
        self.commit(mark, section.count_index())
    }

    /// Adds an SOA record of class IN with names given in uncompressed wire
    /// form (`owner`, then the rdata's `mname` and `rname`, each a
    /// sequence of labels ending in the root label) and `values` = serial,
    /// refresh, retry, expire, minimum. The bytes written are the same as
    /// [`push`](Self::push) with [`RData::Soa`] of the same names, without
    /// building [`Name`]s (for names assembled from slices of the query).
    /// A malformed name fails like a full message: [`TruncationError`],
    /// nothing written.
    pub fn push_soa_wire(
        &mut self,
        section: Section,
        owner: &[u8],
        ttl: u32,
        mname: &[u8],
        rname: &[u8],
        values: [u32; 5],
    ) -> Result<(), TruncationError> {
        if ![owner, mname, rname].into_iter().all(is_uncompressed) {
            return Err(TruncationError);
        }
        self.enter(section)?;
        let mark = self.mark();
        self.write_wire_name(owner, true);
        self.put_u16(Rtype::SOA.0);
        self.put_u16(Class::IN.0);
        self.put_u32(ttl);
        let rdlen_at = self.buf.len();
        self.put_u16(0);
        self.write_wire_name(mname, true);
        self.write_wire_name(rname, true);
        for v in values {
            self.put_u32(v);
        }
        self.patch_rdlen(rdlen_at, mark)?;
        self.commit(mark, section.count_index())
    }

    /// Adds an owned record (see [`push`](Self::push)).
    pub fn push_record(
        &mut self,
        section: Section,
        record: &Record,
    ) -> Result<(), TruncationError> {
        self.push(
            section,
            &record.name,
            record.class,
            record.ttl,
            &record.as_rdata(),
        )
    }

    /// Adds the OPT record (to the additional section) with the extended
    /// rcode bits from [`set_rcode`](Self::set_rcode), EDNS version 0, and
    /// `options` (already encoded) as rdata.
    pub fn push_opt(
        &mut self,
        udp_size: u16,
        do_bit: bool,
        options: &[u8],
    ) -> Result<(), TruncationError> {
        debug_assert!(self.opt_ttl_at.is_none(), "second OPT record");
        self.enter(Section::Additional)?;
        let mark = self.mark();
        self.buf.push(0);
        self.put_u16(Rtype::OPT.0);
        self.put_u16(udp_size);
        let ttl_at = self.buf.len();
        let flags = if do_bit { EDNS_DO } else { 0 };
        self.put_u32((u32::from(self.ext_rcode) << 24) | u32::from(flags));
        let rdlen_at = self.buf.len();
        self.put_u16(0);
        self.buf.extend_from_slice(options);
        self.patch_rdlen(rdlen_at, mark)?;
        self.commit(mark, Section::Additional.count_index())?;
        self.opt_ttl_at = Some(ttl_at);
        Ok(())
    }

    /// Writes the counts and returns the message length; the buffer then
    /// holds exactly the message.
    pub fn finish(self) -> usize {
        let [qd, an, ns, ar] = self.counts;
        set_counts(self.buf, qd, an, ns, ar);
        if let Some(out) = self.saved_out {
            *out = self.saved;
        }
        self.buf.len()
    }

    fn enter(&mut self, section: Section) -> Result<(), TruncationError> {
        let stage = section.count_index();
        if stage < self.stage {
            debug_assert!(false, "records pushed out of section order");
            return Err(TruncationError);
        }
        self.stage = stage;
        Ok(())
    }

    fn mark(&self) -> Mark {
        (self.buf.len(), self.comp.len, self.saved)
    }

    fn rollback(&mut self, (len, comp_len, saved): Mark) {
        self.buf.truncate(len);
        self.comp.len = comp_len;
        self.saved = saved;
    }

    fn commit(&mut self, mark: Mark, idx: usize) -> Result<(), TruncationError> {
        match self.counts[idx].checked_add(1) {
            Some(n) if self.buf.len() <= self.limit => {
                self.counts[idx] = n;
                Ok(())
            }
            _ => {
                self.rollback(mark);
                Err(TruncationError)
            }
        }
    }

    fn patch_rdlen(&mut self, at: usize, mark: Mark) -> Result<(), TruncationError> {
        match u16::try_from(self.buf.len() - at - 2) {
            Ok(len) => {
                self.buf[at..at + 2].copy_from_slice(&len.to_be_bytes());
                Ok(())
            }
            Err(_) => {
                self.rollback(mark);
                Err(TruncationError)
            }
        }
    }

    fn put_u16(&mut self, v: u16) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    fn put_u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    /// A TXT string: split into 255-byte character-strings if longer.
    fn put_txt_string(&mut self, s: &[u8]) {
        if s.is_empty() {
            self.buf.push(0);
        }
        s.chunks(255).for_each(|chunk| self.put_char_string(chunk));
    }

    fn put_char_string(&mut self, s: &[u8]) {
        let s = s.get(..255).unwrap_or(s);
        self.buf.push(s.len() as u8);
        self.buf.extend_from_slice(s);
    }

    /// Writes `name`, ending in a pointer to an earlier copy of its longest
    /// possible suffix when `compress` is set. Its new label positions are
    /// remembered either way.
    fn write_name(&mut self, name: &Name, compress: bool) {
        self.write_wire_name(name.as_wire(), compress);
    }

    /// [`write_name`](Self::write_name) from uncompressed wire bytes
    /// (checked by the caller; malformed bytes are written as they are
    /// but never read out of bounds).
    fn write_wire_name(&mut self, wire: &[u8], compress: bool) {
        let mut matched = None;
        if compress && self.comp.len > 0 {
            let mut p = 0;
            while let Some(&len) = wire.get(p)
                && len != 0
            {
                if let Some(off) = self.comp.find(self.buf, &wire[p..]) {
                    matched = Some((p, off));
                    break;
                }
                p += 1 + usize::from(len);
            }
        }
        let plain_end = matched.map_or(wire.len().saturating_sub(1), |(p, _)| p);
        let base = self.buf.len();
        let mut p = 0;
        while let Some(&len) = wire.get(p)
            && p < plain_end
        {
            self.comp.insert(base + p);
            p += 1 + usize::from(len);
        }
        match matched {
            Some((_, off)) => {
                self.buf.extend_from_slice(&wire[..plain_end]);
                self.put_u16(0xC000 | off as u16);
                // The suffix the pointer stands for, less the pointer.
                self.saved += wire.len().saturating_sub(plain_end + 2);
            }
            None => self.buf.extend_from_slice(wire),
        }
    }

    fn write_rdata(&mut self, rdata: &RData<'_>) {
        match *rdata {
            RData::A(ip) => self.buf.extend_from_slice(&ip.octets()),
            RData::Aaaa(ip) => self.buf.extend_from_slice(&ip.octets()),
            RData::Cname(n) | RData::Ns(n) | RData::Ptr(n) => self.write_name(n, true),
            RData::Mx {
                preference,
                exchange,
            } => {
                self.put_u16(preference);
                self.write_name(exchange, true);
            }
            RData::Srv {
                priority,
                weight,
                port,
                target,
            } => {
                self.put_u16(priority);
                self.put_u16(weight);
                self.put_u16(port);
                self.write_name(target, false);
            }
            RData::Txt(strings) => strings.iter().for_each(|s| self.put_txt_string(s)),
            RData::TxtOwned(strings) => strings.iter().for_each(|s| self.put_txt_string(s)),
            RData::Soa {
                mname,
                rname,
                serial,
                refresh,
                retry,
                expire,
                minimum,
            } => {
                self.write_name(mname, true);
                self.write_name(rname, true);
                for v in [serial, refresh, retry, expire, minimum] {
                    self.put_u32(v);
                }
            }
            RData::Hinfo { cpu, os } => {
                self.put_char_string(cpu);
                self.put_char_string(os);
            }
            RData::Raw { data, .. } => self.buf.extend_from_slice(data),
        }
    }
}
