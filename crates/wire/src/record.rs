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
use crate::error::{NameError, ParseError};
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

/// Why record text could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordParseError {
    /// A name in the text is invalid.
    #[error("bad name: {0}")]
    Name(#[from] NameError),
    /// Anything else; the message says what.
    #[error("bad record text: {0}")]
    Syntax(&'static str),
}

fn syntax(msg: &'static str) -> RecordParseError {
    RecordParseError::Syntax(msg)
}

/// A whitespace-separated token; quoted tokens keep their escapes.
struct Token<'s> {
    text: &'s str,
    quoted: bool,
}

fn tokenize(s: &str) -> Result<Vec<Token<'_>>, RecordParseError> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            c if c.is_ascii_whitespace() || c == b'(' || c == b')' => i += 1,
            b';' => break,
            b'"' => {
                let start = i + 1;
                i = start;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                let text = s.get(start..i).ok_or(syntax("unterminated quote"))?;
                if i >= b.len() {
                    return Err(syntax("unterminated quote"));
                }
                out.push(Token { text, quoted: true });
                i += 1;
            }
            _ => {
                let start = i;
                // Parentheses group a record over lines; they end a word.
                while i < b.len()
                    && !b[i].is_ascii_whitespace()
                    && !matches!(b[i], b';' | b'(' | b')')
                {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                let i2 = i.min(b.len());
                let text = s.get(start..i2).ok_or(syntax("bad escape"))?;
                out.push(Token {
                    text,
                    quoted: false,
                });
                i = i2;
            }
        }
    }
    Ok(out)
}

/// Decodes `\X` and `\DDD` escapes of a character-string.
fn unescape_string(s: &str) -> Result<Vec<u8>, RecordParseError> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        match b.get(i + 1..i + 4) {
            Some(d) if d.iter().all(u8::is_ascii_digit) => {
                let v = d
                    .iter()
                    .fold(0u16, |acc, &c| acc * 10 + u16::from(c - b'0'));
                out.push(u8::try_from(v).map_err(|_| syntax("bad \\DDD escape"))?);
                i += 4;
            }
            _ => {
                out.push(*b.get(i + 1).ok_or(syntax("dangling backslash"))?);
                i += 2;
            }
        }
    }
    if out.len() > 255 {
        return Err(syntax("character-string longer than 255 bytes"));
    }
    Ok(out)
}

fn parse_num<T: FromStr>(t: Option<&Token<'_>>) -> Result<T, RecordParseError> {
    t.and_then(|t| t.text.parse().ok())
        .ok_or(syntax("expected a number"))
}

fn parse_name(t: Option<&Token<'_>>) -> Result<Name, RecordParseError> {
    Ok(Name::from_ascii(t.ok_or(syntax("expected a name"))?.text)?)
}

fn parse_generic(rtype: Rtype, rest: &[Token<'_>]) -> Result<RecordData, RecordParseError> {
    let len: usize = parse_num(rest.get(1))?;
    let hex: String = rest.iter().skip(2).map(|t| t.text).collect();
    if hex.len() != 2 * len || !hex.is_ascii() {
        return Err(syntax("\\# length does not match the data"));
    }
    let data = (0..len)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16))
        .collect::<Result<Vec<u8>, _>>()
        .map_err(|_| syntax("bad hex in \\# data"))?;
    // Known types are decoded so that both forms compare equal.
    let mut wire = Vec::with_capacity(12 + data.len());
    wire.extend_from_slice(&[0; 12]);
    wire.extend_from_slice(&data);
    decode_rdata(&wire, rtype, 12..wire.len()).map_err(|_| syntax("bad rdata in \\# form"))
}

fn parse_rdata(rtype: Rtype, rest: &[Token<'_>]) -> Result<RecordData, RecordParseError> {
    if rest.first().is_some_and(|t| t.text == "\\#" && !t.quoted) {
        return parse_generic(rtype, rest);
    }
    let mut it = rest.iter();
    let data = match rtype {
        Rtype::A => RecordData::A(parse_num(it.next())?),
        Rtype::AAAA => RecordData::Aaaa(parse_num(it.next())?),
        Rtype::CNAME => RecordData::Cname(parse_name(it.next())?),
        Rtype::NS => RecordData::Ns(parse_name(it.next())?),
        Rtype::PTR => RecordData::Ptr(parse_name(it.next())?),
        Rtype::MX => RecordData::Mx {
            preference: parse_num(it.next())?,
            exchange: parse_name(it.next())?,
        },
        Rtype::SRV => RecordData::Srv {
            priority: parse_num(it.next())?,
            weight: parse_num(it.next())?,
            port: parse_num(it.next())?,
            target: parse_name(it.next())?,
        },
        Rtype::SOA => RecordData::Soa {
            mname: parse_name(it.next())?,
            rname: parse_name(it.next())?,
            serial: parse_num(it.next())?,
            refresh: parse_num(it.next())?,
            retry: parse_num(it.next())?,
            expire: parse_num(it.next())?,
            minimum: parse_num(it.next())?,
        },
        Rtype::TXT => {
            // Zero strings is invalid per RFC 1035 but occurs on the wire;
            // accept it so every decoded record's text parses back.
            let strings = it
                .by_ref()
                .map(|t| unescape_string(t.text))
                .collect::<Result<Vec<_>, _>>()?;
            RecordData::Txt(strings)
        }
        Rtype::HINFO => RecordData::Hinfo {
            cpu: unescape_string(it.next().ok_or(syntax("missing HINFO cpu"))?.text)?,
            os: unescape_string(it.next().ok_or(syntax("missing HINFO os"))?.text)?,
        },
        _ => return Err(syntax("type needs the \\# generic form")),
    };
    if it.next().is_some() {
        return Err(syntax("trailing data"));
    }
    Ok(data)
}

impl FromStr for Record {
    type Err = RecordParseError;

    /// Parses `owner [ttl] [class] type rdata...` (TTL and class in either
    /// order; defaults 3600 and IN). Names are absolute with or without
    /// the final dot. `;` starts a comment, parentheses are ignored, and
    /// any type accepts the RFC 3597 `\# len hex` form.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let tokens = tokenize(s)?;
        let mut it = tokens.iter();
        let name = parse_name(it.next())?;
        let mut ttl = None;
        let mut class = None;
        let rtype = loop {
            let t = it.next().ok_or(syntax("missing type"))?;
            if ttl.is_none() && t.text.bytes().all(|c| c.is_ascii_digit()) {
                ttl = Some(t.text.parse().map_err(|_| syntax("TTL out of range"))?);
            } else if let (None, Ok(c)) = (class, t.text.parse::<Class>()) {
                class = Some(c);
            } else {
                break t
                    .text
                    .parse::<Rtype>()
                    .map_err(|_| syntax("unknown type"))?;
            }
        };
        let rest = it.as_slice();
        Ok(Record {
            name,
            class: class.unwrap_or(Class::IN),
            ttl: ttl.unwrap_or(DEFAULT_TTL),
            data: parse_rdata(rtype, rest)?,
        })
    }
}
