//! Owned resource records, with zone-file text in and out.
//!
//! [`Record`] is the convenient, allocating form: for tests (answer tables
//! written as `"svc.ns.svc.cluster.local. 5 IN A 10.0.0.1"`), configuration
//! and slow paths. `Display` matches miekg/dns `RR.String()` (tab
//! separated header, RFC 3597 `\# len hex` for types without a decoder),
//! and `FromStr` reads that text back.

use core::fmt;
use core::ops::Range;
use core::str::FromStr;
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::build::RData;
use crate::error::ParseError;
use crate::name::Name;
use crate::read::{u16_at, u32_at};
use crate::types::{Class, Rtype};

/// Default TTL when the text form leaves it out (as miekg/dns `NewRR`).
pub const DEFAULT_TTL: u32 = 3600;

/// An owned resource record.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Record {
    /// Owner name.
    pub name: Name,
    /// Class, normally IN.
    pub class: Class,
    /// Time to live in seconds.
    pub ttl: u32,
    /// Type and rdata.
    pub data: RecordData,
}

/// Decoded rdata of the types this crate knows; others stay raw.
// SOA holds two fixed-size names; boxing them would cost an allocation
// per SOA for no gain on this slow path.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RecordData {
    /// IPv4 address.
    A(Ipv4Addr),
    /// IPv6 address.
    Aaaa(Ipv6Addr),
    /// Canonical name.
    Cname(Name),
    /// Name server.
    Ns(Name),
    /// Pointer.
    Ptr(Name),
    /// Mail exchange.
    Mx {
        /// Lower is preferred.
        preference: u16,
        /// The mail server.
        exchange: Name,
    },
    /// Service location.
    Srv {
        /// Lower is tried first.
        priority: u16,
        /// Relative weight.
        weight: u16,
        /// Port.
        port: u16,
        /// Target host.
        target: Name,
    },
    /// Text: one or more character-strings (each at most 255 bytes).
    Txt(Vec<Vec<u8>>),
    /// Start of authority.
    Soa {
        /// Primary name server.
        mname: Name,
        /// Responsible mailbox.
        rname: Name,
        /// Serial.
        serial: u32,
        /// Refresh.
        refresh: u32,
        /// Retry.
        retry: u32,
        /// Expire.
        expire: u32,
        /// Negative TTL.
        minimum: u32,
    },
    /// Host information.
    Hinfo {
        /// CPU.
        cpu: Vec<u8>,
        /// Operating system.
        os: Vec<u8>,
    },
    /// Any other type (OPT included), rdata as on the wire.
    Other {
        /// The record type.
        rtype: Rtype,
        /// The rdata bytes.
        data: Vec<u8>,
    },
}

impl RecordData {
    /// The record type.
    pub fn rtype(&self) -> Rtype {
        match self {
            RecordData::A(_) => Rtype::A,
            RecordData::Aaaa(_) => Rtype::AAAA,
            RecordData::Cname(_) => Rtype::CNAME,
            RecordData::Ns(_) => Rtype::NS,
            RecordData::Ptr(_) => Rtype::PTR,
            RecordData::Mx { .. } => Rtype::MX,
            RecordData::Srv { .. } => Rtype::SRV,
            RecordData::Txt(_) => Rtype::TXT,
            RecordData::Soa { .. } => Rtype::SOA,
            RecordData::Hinfo { .. } => Rtype::HINFO,
            RecordData::Other { rtype, .. } => *rtype,
        }
    }

    /// Borrowed form for [`MessageBuilder::push`](crate::MessageBuilder::push).
    pub fn as_rdata(&self) -> RData<'_> {
        match self {
            RecordData::A(ip) => RData::A(*ip),
            RecordData::Aaaa(ip) => RData::Aaaa(*ip),
            RecordData::Cname(n) => RData::Cname(n),
            RecordData::Ns(n) => RData::Ns(n),
            RecordData::Ptr(n) => RData::Ptr(n),
            RecordData::Mx {
                preference,
                exchange,
            } => RData::Mx {
                preference: *preference,
                exchange,
            },
            RecordData::Srv {
                priority,
                weight,
                port,
                target,
            } => RData::Srv {
                priority: *priority,
                weight: *weight,
                port: *port,
                target,
            },
            RecordData::Txt(strings) => RData::TxtOwned(strings),
            RecordData::Soa {
                mname,
                rname,
                serial,
                refresh,
                retry,
                expire,
                minimum,
            } => RData::Soa {
                mname,
                rname,
                serial: *serial,
                refresh: *refresh,
                retry: *retry,
                expire: *expire,
                minimum: *minimum,
            },
            RecordData::Hinfo { cpu, os } => RData::Hinfo { cpu, os },
            RecordData::Other { rtype, data } => RData::Raw {
                rtype: *rtype,
                data,
            },
        }
    }
}

impl Record {
    /// A class IN record.
    pub fn new(name: Name, ttl: u32, data: RecordData) -> Record {
        Record {
            name,
            class: Class::IN,
            ttl,
            data,
        }
    }

    /// The record type.
    pub fn rtype(&self) -> Rtype {
        self.data.rtype()
    }

    /// Borrowed rdata for the builder.
    pub fn as_rdata(&self) -> RData<'_> {
        self.data.as_rdata()
    }
}

//--- Decoding from the wire

/// Reads one character-string at `*off`, not past `end`.
fn char_string<'m>(buf: &'m [u8], off: &mut usize, end: usize) -> Result<&'m [u8], ParseError> {
    let len = usize::from(*buf.get(*off).ok_or(ParseError)?);
    let s = buf.get(*off + 1..*off + 1 + len).ok_or(ParseError)?;
    *off += 1 + len;
    if *off > end {
        return Err(ParseError);
    }
    Ok(s)
}

/// Decodes the rdata at `range` of `buf` (a whole message, so compressed
/// names resolve).
pub(crate) fn decode_rdata(
    buf: &[u8],
    rtype: Rtype,
    range: Range<usize>,
) -> Result<RecordData, ParseError> {
    let data = buf.get(range.clone()).ok_or(ParseError)?;
    let end = range.end;
    let mut off = range.start;
    let name = |off: &mut usize| {
        let n = Name::from_wire(buf, off)?;
        if *off > end {
            return Err(ParseError);
        }
        Ok(n)
    };
    let rd = match rtype {
        Rtype::A => {
            off = end;
            RecordData::A(Ipv4Addr::from(
                <[u8; 4]>::try_from(data).map_err(|_| ParseError)?,
            ))
        }
        Rtype::AAAA => {
            off = end;
            RecordData::Aaaa(Ipv6Addr::from(
                <[u8; 16]>::try_from(data).map_err(|_| ParseError)?,
            ))
        }
        Rtype::CNAME => RecordData::Cname(name(&mut off)?),
        Rtype::NS => RecordData::Ns(name(&mut off)?),
        Rtype::PTR => RecordData::Ptr(name(&mut off)?),
        Rtype::MX => {
            let preference = u16_at(buf, off)?;
            off += 2;
            RecordData::Mx {
                preference,
                exchange: name(&mut off)?,
            }
        }
        Rtype::SRV => {
            let priority = u16_at(buf, off)?;
            let weight = u16_at(buf, off + 2)?;
            let port = u16_at(buf, off + 4)?;
            off += 6;
            RecordData::Srv {
                priority,
                weight,
                port,
                target: name(&mut off)?,
            }
        }
        Rtype::TXT => {
            let mut strings = Vec::new();
            while off < end {
                strings.push(char_string(buf, &mut off, end)?.to_vec());
            }
            RecordData::Txt(strings)
        }
        Rtype::SOA => {
            let mname = name(&mut off)?;
            let rname = name(&mut off)?;
            let mut v = [0u32; 5];
            for (i, slot) in v.iter_mut().enumerate() {
                *slot = u32_at(buf, off + 4 * i)?;
            }
            off += 20;
            let [serial, refresh, retry, expire, minimum] = v;
            RecordData::Soa {
                mname,
                rname,
                serial,
                refresh,
                retry,
                expire,
                minimum,
            }
        }
        Rtype::HINFO => {
            let cpu = char_string(buf, &mut off, end)?.to_vec();
            let os = char_string(buf, &mut off, end)?.to_vec();
            RecordData::Hinfo { cpu, os }
        }
        _ => {
            off = end;
            RecordData::Other {
                rtype,
                data: data.to_vec(),
            }
        }
    };
    if off != end {
        return Err(ParseError);
    }
    Ok(rd)
}

//--- Presentation format

/// Writes a character-string quoted, escaping like miekg/dns.
fn fmt_quoted(f: &mut impl fmt::Write, s: &[u8]) -> fmt::Result {
    f.write_char('"')?;
    for &b in s {
        match b {
            b'"' | b'\\' => {
                f.write_char('\\')?;
                f.write_char(char::from(b))?;
            }
            0x20..=0x7E => f.write_char(char::from(b))?,
            _ => write!(f, "\\{b:03}")?,
        }
    }
    f.write_char('"')
}

fn fmt_strings<'s>(
    f: &mut impl fmt::Write,
    strings: impl IntoIterator<Item = &'s [u8]>,
) -> fmt::Result {
    for (i, s) in strings.into_iter().enumerate() {
        if i > 0 {
            f.write_char(' ')?;
        }
        fmt_quoted(f, s)?;
    }
    Ok(())
}

impl fmt::Display for RData<'_> {
    /// The rdata part of the zone-file form, as miekg/dns prints it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RData::A(ip) => write!(f, "{ip}"),
            RData::Aaaa(ip) => write!(f, "{ip}"),
            RData::Cname(n) | RData::Ns(n) | RData::Ptr(n) => write!(f, "{n}"),
            RData::Mx {
                preference,
                exchange,
            } => write!(f, "{preference} {exchange}"),
            RData::Srv {
                priority,
                weight,
                port,
                target,
            } => write!(f, "{priority} {weight} {port} {target}"),
            RData::Txt(strings) => fmt_strings(f, strings.iter().copied()),
            RData::TxtOwned(strings) => fmt_strings(f, strings.iter().map(Vec::as_slice)),
            RData::Soa {
                mname,
                rname,
                serial,
                refresh,
                retry,
                expire,
                minimum,
            } => write!(
                f,
                "{mname} {rname} {serial} {refresh} {retry} {expire} {minimum}"
            ),
            RData::Hinfo { cpu, os } => fmt_strings(f, [cpu, os]),
            // CAA in its own form (flags, tag, quoted value), as miekg/dns
            // prints it; every other type unknown here in RFC 3597's.
            RData::Raw {
                rtype: Rtype::CAA,
                data: [flags, len, rest @ ..],
            } if *len > 0
                && rest.len() >= usize::from(*len)
                && rest[..usize::from(*len)]
                    .iter()
                    .all(u8::is_ascii_alphanumeric) =>
            {
                let (tag, value) = rest.split_at(usize::from(*len));
                write!(f, "{flags} {} ", String::from_utf8_lossy(tag))?;
                fmt_quoted(f, value)
            }
            RData::Raw { data, .. } => {
                write!(f, "\\# {} ", data.len())?;
                data.iter().try_for_each(|b| write!(f, "{b:02x}"))
            }
        }
    }
}

impl fmt::Display for RecordData {
    /// The rdata part of the zone-file form.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_rdata().fmt(f)
    }
}

impl fmt::Display for Record {
    /// `name.\tTTL\tCLASS\tTYPE\tRDATA`, as miekg/dns `RR.String()`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}\t{}\t{}\t{}\t{}",
            self.name,
            self.ttl,
            self.class,
            self.rtype(),
            self.data
        )
    }
}

/// Why record text could not be parsed: miekg/dns's `ParseError`, as
/// [`crate::zonefile`] words it.
pub type RecordParseError = crate::zonefile::ZoneFileError;

impl FromStr for Record {
    type Err = RecordParseError;

    /// Parses one record's text as miekg/dns's `dns.NewRR` does
    /// ([`crate::zonefile::parse_rr`]): `owner [ttl] [class] type rdata...`
    /// (TTL and class in either order; defaults 3600 and IN), names
    /// relative to the root, `;` comments, parentheses, and RFC 3597's
    /// `\# len hex` form for any type.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        crate::zonefile::parse_rr(s)
    }
}
