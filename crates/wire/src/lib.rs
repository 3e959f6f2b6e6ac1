//! DNS wire format for clusterdns: zero-copy query views, a response
//! builder writing into reused buffers, and owned records for tests,
//! caches and zone data.
//!
//! # The DNS message
//!
//! Every DNS message (RFC 1035 §4.1) is a 12-byte [header](header) followed
//! by four sections:
//!
//! ```text
//! +---------------------+
//! |        Header       |  id, flags (QR opcode AA TC RD RA Z AD CD rcode), 4 counts
//! +---------------------+
//! |       Question      |  qname, qtype, qclass (exactly one in practice)
//! +---------------------+
//! |        Answer       |  resource records answering the question
//! +---------------------+
//! |      Authority      |  SOA (negative answers) or NS (referrals)
//! +---------------------+
//! |      Additional     |  glue, and the EDNS OPT pseudo-record
//! +---------------------+
//! ```
//!
//! A resource record is `owner name, type: u16, class: u16, ttl: u32,
//! rdlength: u16, rdata`. Names are sequences of length-prefixed labels
//! ending in the empty root label, and inside a message may end in a
//! two-byte *compression pointer* to an earlier name ([`name`]). The
//! OPT record ([`edns`]) extends the header: UDP payload size, 8 more
//! rcode bits, the DO flag and options.
//!
//! # The pieces
//!
//! - [`Query`]: hot-path view over a received query. Parses the header,
//!   the question and the OPT record without allocating.
//! - [`MessageBuilder`]: writes a response (or any message) into a
//!   caller-owned `Vec<u8>` that is reused between queries, with name
//!   compression and a size limit ([`TruncationError`]).
//! - [`Message`]: full view over any message, iterating all records as
//!   [`RecordView`]s (offsets into the buffer, e.g. for in-place TTL
//!   rewriting in a cache).
//! - [`Record`]: owned record with zone-file `Display`/`FromStr` like
//!   miekg/dns, for tests and configuration.
//! - [`truncate()`]: cut an oversized response down to the client's UDP
//!   size, like CoreDNS's `ScrubWriter`.
//!
//! # Example: answering a query
//!
//! ```
//! use std::net::Ipv4Addr;
//! use clusterdns_wire::edns::OPT_FIXED_LEN;
//! use clusterdns_wire::prelude::*;
//! # let packet = {
//! #     let mut b = Vec::new();
//! #     let mut m = MessageBuilder::new(&mut b, Header { id: 1, flags: 0x0100, ..Header::default() });
//! #     let n = Name::from_ascii("web.default.svc.cluster.local").unwrap();
//! #     m.push_question(&n, Rtype::A, Class::IN).unwrap();
//! #     m.push_opt(1232, false, &[]).unwrap();
//! #     m.finish();
//! #     b
//! # };
//! let mut out = Vec::with_capacity(4096); // one per worker, reused
//!
//! let query = Query::parse(&packet)?;
//! let zone = Name::from_ascii("cluster.local.")?;
//! assert!(query.qname_lower().ends_with(&zone));
//!
//! let mut reply = MessageBuilder::reply_to(&query, &mut out);
//! reply.set_aa(true);
//! // Keep room for the OPT record while adding records.
//! let size = usize::from(query.udp_size());
//! let opt_room = if query.edns().is_some() { OPT_FIXED_LEN } else { 0 };
//! reply.set_limit(size - opt_room);
//! let a = RData::A(Ipv4Addr::new(10, 96, 0, 10));
//! if reply.push(Section::Answer, query.qname(), Class::IN, 5, &a).is_err() {
//!     reply.set_tc(true);
//! }
//! reply.set_limit(size);
//! if query.edns().is_some() {
//!     reply.push_opt(1232, query.do_bit(), &[])?;
//! }
//! let len = reply.finish();
//! assert_eq!(out.len(), len);
//!
//! let msg = Message::parse(&out)?;
//! let answer = msg.records().next().unwrap().to_owned_record(&msg)?;
//! assert_eq!(answer.to_string(), "web.default.svc.cluster.local.\t5\tIN\tA\t10.96.0.10");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Nothing in this crate panics on malformed input: every read is
//! bounds-checked and every failure is a [`ParseError`] or [`QueryError`].
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod build;
pub mod edns;
pub mod error;
pub mod header;
pub mod message;
pub mod name;
pub mod query;
mod read;
pub mod record;
pub mod size;
pub mod splice;
pub mod truncate;
pub mod types;
pub mod zonefile;

pub use build::{MessageBuilder, RData, Section};
pub use edns::{DEFAULT_EDNS_SIZE, Edns, EdnsOptions, MAX_MESSAGE_LEN, MAX_UDP_PLAIN};
pub use error::{NameError, ParseError, QueryError, TruncationError};
pub use header::{
    FLAG_AA, FLAG_RA, FLAG_RD, HEADER_LEN, Header, set_aa, set_flags, set_id, set_ra,
    set_rcode_low, set_rd, set_tc,
};
pub use message::{Heads, Message, RecordAt, RecordView, Records};
pub use name::{Name, parse_reverse, reverse_name};
pub use query::{Detached, Query};
pub use record::{Record, RecordData, RecordParseError};
pub use size::uncompressed_len;
pub use splice::relocate_records;
pub use truncate::truncate;
pub use types::{Class, Opcode, Rcode, Rtype};

/// Everything a plugin or the server typically needs, for a glob import.
pub mod prelude {
    pub use crate::{
        Class, Edns, Header, Message, MessageBuilder, Name, Opcode, ParseError, Query, QueryError,
        RData, Rcode, Record, RecordData, RecordView, Rtype, Section, TruncationError, truncate,
    };
}
