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
    /// Bytes name compression saved in the message, when known: set by
    /// the builder of [`ResponseWriter::reply`] or by the plugin that
    /// wrote the message ([`ResponseWriter::set_compression_saved`]).
    saved: Option<usize>,
    /// Where the builder reports its savings.
    saved_slot: usize,
    /// The message was built by [`ResponseWriter::reply`], so
    /// `saved_slot` holds its savings.
    built: bool,
    /// The message is an error reply of [`ResponseWriter::write_error`].
    by_server: bool,
}

impl ResponseWriter {
    /// A writer with room for the largest DNS message.
    pub fn new() -> Self {
        Self {
            buf: Vec::with_capacity(65535),
            foreign: false,
            saved: None,
            saved_slot: 0,
            built: false,
            by_server: false,
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
        self.built = true;
        self.by_server = false;
        MessageBuilder::reply_to(query, &mut self.buf).counting_savings(&mut self.saved_slot)
    }

    /// Replaces the content with a complete message (for example from a
    /// cache or an upstream).
    pub fn set_message(&mut self, msg: &[u8]) {
        self.foreign = true;
        self.built = false;
        self.by_server = false;
        self.saved = None;
        self.buf.clear();
        self.buf.extend_from_slice(msg);
    }

    /// Writes a reply carrying only `rcode` and the question, as CoreDNS's
    /// server does when a plugin returns an error, or an error rcode
    /// (SERVFAIL, REFUSED, FORMERR, NOTIMP), without writing. Such a reply
    /// never passed the writers the plugins wrapped, so it is
    /// [`ResponseWriter::written_by_server`]: CoreDNS's metrics count it
    /// with an empty `plugin` label and a size of 0.
    pub fn write_error(&mut self, req: &Request<'_>, rcode: Rcode) {
        let mut b = self.reply(req);
        b.set_rcode(rcode);
        b.finish();
        self.by_server = true;
    }

    /// Whether the message is an error reply the server wrote in a
    /// plugin's stead ([`ResponseWriter::write_error`]).
    pub fn written_by_server(&self) -> bool {
        self.by_server
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
        self.built = false;
        self.by_server = false;
        self.saved = None;
        &mut self.buf
    }

    /// The buffer, for writing back a reply that was built earlier with
    /// [`ResponseWriter::reply`] (so without an OPT record) and kept, for
    /// example by a plugin's own memo of its answers.
    pub fn replay_buffer(&mut self) -> &mut Vec<u8> {
        self.foreign = false;
        self.built = false;
        self.by_server = false;
        self.saved = None;
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
        self.built = false;
        self.by_server = false;
        self.saved = Some(0);
        self.buf.clear();
    }

    /// Bytes name compression saved in the message, when the writer
    /// knows it without walking the message: for a reply built with
    /// [`ResponseWriter::reply`], or one whose writer said so. A plugin
    /// that keeps replies (a memo, a cache) stores it beside them.
    pub fn compression_saved(&self) -> Option<usize> {
        if self.built {
            Some(self.saved_slot)
        } else {
            self.saved
        }
    }

    /// Tells the writer what compression saved in the message just
    /// written with [`ResponseWriter::raw_buffer`],
    /// [`ResponseWriter::set_message`] or
    /// [`ResponseWriter::replay_buffer`] (kept from
    /// [`ResponseWriter::compression_saved`] when it was first built), so
    /// [`ResponseWriter::uncompressed_len`] need not walk it. In-place
    /// edits that move whole records keep it.
    pub fn set_compression_saved(&mut self, saved: usize) {
        self.built = false;
        self.saved = Some(saved);
    }

    /// The message's length with no name compressed: what CoreDNS
    /// reports as the response size (`{rsize}`, the size histogram),
    /// since miekg/dns measures a reply before it compresses it. Known
    /// for built replies; walked once otherwise.
    pub fn uncompressed_len(&self) -> usize {
        match self.compression_saved() {
            Some(saved) => self.buf.len() + saved,
            None => clusterdns_wire::uncompressed_len(&self.buf).unwrap_or(self.buf.len()),
        }
    }
}
