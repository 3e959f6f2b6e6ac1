//! EDNS(0), the OPT pseudo-record (RFC 6891).
//!
//! The OPT record sits in the additional section with owner `.`. Its
//! CLASS field carries the sender's UDP payload size and its TTL field is
//! split into the extended rcode (high 8 bits of the 12-bit rcode), the
//! EDNS version and flags (DO = DNSSEC OK is the top bit). Its rdata is a
//! list of options, each `code: u16, length: u16, data`.

use core::ops::Range;

use crate::error::ParseError;
use crate::read::{RecordHead, u16_at};

/// The DO (DNSSEC OK) bit within the 16 EDNS flag bits.
pub const EDNS_DO: u16 = 0x8000;
/// The EDNS version this crate speaks.
pub const EDNS_VERSION: u8 = 0;
/// Smallest UDP payload every DNS implementation must accept.
pub const MAX_UDP_PLAIN: u16 = 512;
/// The UDP payload size CoreDNS (and we) advertise by default.
pub const DEFAULT_EDNS_SIZE: u16 = 1232;
/// Largest message size (TCP, or the theoretical UDP maximum).
pub const MAX_MESSAGE_LEN: usize = 65535;
/// Wire length of an OPT record with no options.
pub const OPT_FIXED_LEN: usize = 11;

/// EDNS option code: client subnet (RFC 7871).
pub const OPTION_ECS: u16 = 8;
/// EDNS option code: cookie (RFC 7873).
pub const OPTION_COOKIE: u16 = 10;
/// EDNS option code: TCP keepalive (RFC 7828).
pub const OPTION_TCP_KEEPALIVE: u16 = 11;
/// EDNS option code: padding (RFC 7830).
pub const OPTION_PADDING: u16 = 12;
/// EDNS option code: NSID (RFC 5001).
pub const OPTION_NSID: u16 = 3;

/// The decoded OPT record of a message.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Edns {
    /// The sender's UDP payload size, as sent (not clamped).
    pub udp_size: u16,
    /// High 8 bits of the 12-bit rcode.
    pub ext_rcode: u8,
    /// EDNS version; anything but 0 deserves BADVERS.
    pub version: u8,
    /// DNSSEC OK.
    pub do_bit: bool,
    /// The OPT rdata (the options) as a range of the message buffer.
    pub options: Range<usize>,
}

impl Edns {
    /// Decodes an OPT record found in `buf`; checks the option list is
    /// well-formed. The caller checks owner and type.
    pub(crate) fn from_head(buf: &[u8], head: &RecordHead) -> Result<Edns, ParseError> {
        let data = buf.get(head.rdata.clone()).ok_or(ParseError)?;
        let mut opts = EdnsOptions { rest: data };
        for _ in opts.by_ref() {}
        if !opts.rest.is_empty() {
            return Err(ParseError);
        }
        Ok(Edns {
            udp_size: head.class.0,
            ext_rcode: (head.ttl >> 24) as u8,
            version: (head.ttl >> 16) as u8,
            do_bit: head.ttl as u16 & EDNS_DO != 0,
            options: head.rdata.clone(),
        })
    }

    /// The options, as `(code, data)` pairs. `msg` is the buffer this was
    /// parsed from.
    pub fn options<'m>(&self, msg: &'m [u8]) -> EdnsOptions<'m> {
        EdnsOptions {
            rest: msg.get(self.options.clone()).unwrap_or(&[]),
        }
    }

    /// The first option with `code`, if any.
    pub fn option<'m>(&self, msg: &'m [u8], code: u16) -> Option<&'m [u8]> {
        self.options(msg).find(|(c, _)| *c == code).map(|(_, d)| d)
    }

    /// The UDP payload size a reply may use: the advertised size, but at
    /// least 512 (RFC 6891 §6.2.5).
    pub fn clamped_udp_size(&self) -> u16 {
        self.udp_size.max(MAX_UDP_PLAIN)
    }
}

/// Iterator over EDNS options as `(code, data)`. Stops at the first
/// malformed option.
#[derive(Debug, Clone, Default)]
pub struct EdnsOptions<'m> {
    rest: &'m [u8],
}

impl<'m> Iterator for EdnsOptions<'m> {
    type Item = (u16, &'m [u8]);

    fn next(&mut self) -> Option<(u16, &'m [u8])> {
        let code = u16_at(self.rest, 0).ok()?;
        let len = usize::from(u16_at(self.rest, 2).ok()?);
        let data = self.rest.get(4..4 + len)?;
        self.rest = &self.rest[4 + len..];
        Some((code, data))
    }
}
