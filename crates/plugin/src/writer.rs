//! The buffer a reply is written into.

use clusterdns_wire::{Header, MessageBuilder, Query, Rcode};

use crate::Request;

/// Where a plugin writes its reply.
///
/// One writer per worker is reused for every query: after the first few
/// queries its buffer has its full capacity and writing a reply allocates
/// nothing.
#[derive(Debug, Default)]
pub struct ResponseWriter {
    buf: Vec<u8>,
    /// The message came from elsewhere (an upstream, the cache) and may
    /// carry an OPT record; replies built with [`ResponseWriter::reply`]
    /// have none, which spares the server a search for it.
    foreign: bool,
}

impl ResponseWriter {
    /// A writer with room for the largest DNS message.
    pub fn new() -> Self {
        Self {
            buf: Vec::with_capacity(65535),
            foreign: false,
        }
    }

    /// Starts a reply to `req`: header (ID, opcode, RD, CD copied, QR set)
    /// and the question exactly as the client sent it (its case kept).
    /// Anything written before is discarded.
    pub fn reply<'w>(&'w mut self, req: &Request<'_>) -> MessageBuilder<'w> {
        self.reply_query(req.query)
    }

    /// Like [`ResponseWriter::reply`], from the bare query (for replies
    /// the server writes before any chain runs).
    pub fn reply_query<'w>(&'w mut self, query: &Query<'_>) -> MessageBuilder<'w> {
        self.foreign = false;
        MessageBuilder::reply_to(query, &mut self.buf)
    }

    /// Replaces the content with a complete message (for example from a
    /// cache or an upstream).
    pub fn set_message(&mut self, msg: &[u8]) {
        self.foreign = true;
        self.buf.clear();
        self.buf.extend_from_slice(msg);
    }

    /// Writes a reply carrying only `rcode` and the question, as CoreDNS's
    /// server does when a plugin returns an error without writing.
    pub fn write_error(&mut self, req: &Request<'_>, rcode: Rcode) {
        let mut b = self.reply(req);
        b.set_rcode(rcode);
        b.finish();
    }

    /// The message written so far.
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// The message, for in-place edits (TTL rewrite, record shuffling,
    /// truncation). Callers must leave a well-formed message behind.
    pub fn buffer_mut(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// The buffer, for writing a whole message by hand (for example a
    /// cached one). Like [`ResponseWriter::set_message`], it marks the
    /// message as possibly carrying an OPT record.
    pub fn raw_buffer(&mut self) -> &mut Vec<u8> {
        self.foreign = true;
        &mut self.buf
    }

    /// The buffer, for writing back a reply that was built earlier with
    /// [`ResponseWriter::reply`] (so without an OPT record) and kept, for
    /// example by a plugin's own memo of its answers.
    pub fn replay_buffer(&mut self) -> &mut Vec<u8> {
        self.foreign = false;
        &mut self.buf
    }

    /// Whether the message may carry an OPT record (it was not built with
    /// [`ResponseWriter::reply`]).
    pub fn may_have_opt(&self) -> bool {
        self.foreign
    }

    /// The rcode of the written reply (the header's four bits; extended
    /// rcodes are only set by the server itself).
    pub fn rcode(&self) -> Rcode {
        match Header::parse(&self.buf) {
            Ok(h) => Rcode(u16::from(h.rcode_low())),
            Err(_) => Rcode::SERVFAIL,
        }
    }

    /// Empties the buffer, keeping its capacity.
    pub fn clear(&mut self) {
        self.foreign = false;
        self.buf.clear();
    }
}
