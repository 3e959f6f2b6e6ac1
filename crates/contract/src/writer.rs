//! The buffer a reply is written into.

use std::any::Any;
use std::sync::Arc;
use std::time::Instant;

use clusterdns_wire::{Header, Message, MessageBuilder, Opcode, Query, Rcode};

use crate::Request;

/// What the writer knows about the OPT record of the message it holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OptAt {
    /// The message has none (built with [`ResponseWriter::reply`]).
    #[default]
    Absent,
    /// The offset of its OPT record's TTL field.
    TtlAt(usize),
    /// Not known: the message came from elsewhere and must be searched.
    Unknown,
}

/// What a store (the cache) tells about a reply it copied from an entry:
/// the reply holds until the entry expires and is the same bytes for the
/// same query until then, but for its TTLs, which count down from
/// `ttl_s` by the whole seconds since `stored`. A plugin that runs the
/// chain several times for one query (autopath's walk) may keep the reply
/// it made of such steps until the earliest of them expires.
#[derive(Clone)]
pub struct Stored {
    /// When the entry was stored, on the query arrival's clock
    /// ([`Request::received`](crate::Request::received)).
    pub stored: Instant,
    /// The TTL it was stored with, in seconds: at `t` every record's TTL
    /// is `ttl_s` less the whole seconds from `stored` to `t`, and the
    /// entry answers while that is above 0.
    pub ttl_s: u32,
    /// Whether it is a denial (NXDOMAIN, NODATA): the store counts hits
    /// of each kind apart.
    pub denial: bool,
    /// Counts a hit as the store would have counted this one, for a
    /// reply served again without asking the store.
    pub counter: Arc<dyn StoreHits>,
}

impl std::fmt::Debug for Stored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stored")
            .field("stored", &self.stored)
            .field("ttl_s", &self.ttl_s)
            .field("denial", &self.denial)
            .finish_non_exhaustive()
    }
}

impl Stored {
    /// The TTL the store would give at `t` (0 or less: expired).
    pub fn ttl_at(&self, t: Instant) -> i64 {
        let elapsed = t.saturating_duration_since(self.stored).as_secs();
        i64::from(self.ttl_s) - i64::try_from(elapsed).unwrap_or(i64::MAX)
    }

    /// The first instant the entry no longer answers.
    pub fn expires(&self) -> Instant {
        self.stored + std::time::Duration::from_secs(u64::from(self.ttl_s))
    }
}

/// A store's hit counters, for [`Stored::counter`].
pub trait StoreHits: Send + Sync {
    /// Counts one hit (a denial or not) under the `server` label.
    fn count_hit(&self, server: &str, denial: bool);
}

/// Where a plugin writes its reply.
///
/// One writer per worker is reused for every query: after the first few
/// queries its buffer has its full capacity and writing a reply allocates
/// nothing.
#[derive(Debug, Default)]
pub struct ResponseWriter {
    buf: Vec<u8>,
    /// Where the message's OPT record is, when known: replies built with
    /// [`ResponseWriter::reply`] have none and a message set from a
    /// parse says where its is, which spares the server a search for it.
    opt: OptAt,
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
    /// What the plugin that deferred the query learned on the synchronous
    /// pass, for its [`Plugin::query_async`](crate::Plugin::query_async).
    note: Option<Box<dyn Any + Send>>,
    /// Further messages of a reply made of several (a zone transfer over
    /// TCP), sent after this one in order; dropped by anything but a
    /// stream transport. Empty, and without a heap buffer, otherwise.
    more: Vec<Vec<u8>>,
    /// The answer depends on who asked (a per-client policy decided it),
    /// so a cache keyed on the question must not keep it.
    per_client: bool,
    /// The message is a store's copy of an entry ([`Stored`]); forgotten
    /// by every write to the buffer.
    stored: Option<Stored>,
}

impl ResponseWriter {
    /// A writer with room for the largest DNS message.
    pub fn new() -> Self {
        Self {
            buf: Vec::with_capacity(65535),
            ..Self::default()
        }
    }

    /// Starts a reply to `req`: header (ID, opcode, RD, CD copied, QR set)
    /// and the question exactly as the client sent it (its case kept).
    /// RD is copied as the plugins before left it (*header*'s query
    /// rules), as CoreDNS's `SetReply` copies it from the edited message.
    /// Anything written before is discarded.
    pub fn reply<'w>(&'w mut self, req: &Request<'_>) -> MessageBuilder<'w> {
        let h = req.query.header();
        let flags = req.edits.flags(h.flags);
        self.reply_flags(req, flags)
    }

    /// A reply to `req` whose RD comes from `flags`.
    fn reply_flags<'w>(&'w mut self, req: &Request<'_>, flags: u16) -> MessageBuilder<'w> {
        let h = req.query.header();
        let mut b = self.reply_query(req.query);
        if h.opcode() == Opcode::QUERY && flags != h.flags {
            b.set_rd(flags & clusterdns_wire::FLAG_RD != 0);
        }
        b
    }

    /// Like [`ResponseWriter::reply`], from the bare query (for replies
    /// the server writes before any chain runs).
    pub fn reply_query<'w>(&'w mut self, query: &Query<'_>) -> MessageBuilder<'w> {
        self.opt = OptAt::Absent;
        self.built = true;
        self.by_server = false;
        self.more.clear();
        self.stored = None;
        MessageBuilder::reply_to(query, &mut self.buf).counting_savings(&mut self.saved_slot)
    }

    /// Replaces the content with a complete message (for example from a
    /// cache or an upstream).
    pub fn set_message(&mut self, msg: &[u8]) {
        self.opt = OptAt::Unknown;
        self.stored = None;
        self.built = false;
        self.by_server = false;
        self.saved = None;
        self.more.clear();
        self.buf.clear();
        self.buf.extend_from_slice(msg);
    }

    /// Like [`ResponseWriter::set_message`], from a message already
    /// parsed: the parse found its OPT record, so the server need not
    /// look for it again.
    pub fn set_parsed(&mut self, msg: &Message<'_>) {
        self.set_message(msg.as_bytes());
        if let Some(at) = msg.opt_ttl_offset() {
            self.opt = OptAt::TtlAt(at);
        } else {
            self.opt = OptAt::Absent;
        }
    }

    /// Writes a reply carrying only `rcode` and the question, as CoreDNS's
    /// server does when a plugin returns an error, or an error rcode
    /// (SERVFAIL, REFUSED, FORMERR, NOTIMP), without writing. Such a reply
    /// never passed the writers the plugins wrapped, so it is
    /// [`ResponseWriter::written_by_server`]: CoreDNS's metrics count it
    /// with an empty `plugin` label and a size of 0.
    /// RD is the query's as the server sees it ([`crate::Edits::detach`]).
    pub fn write_error(&mut self, req: &Request<'_>, rcode: Rcode) {
        let flags = req.edits.server_flags(req.query.header().flags);
        let mut b = self.reply_flags(req, flags);
        b.set_rcode(rcode);
        b.finish();
        self.by_server = true;
    }

    /// Whether the message is an error reply the server wrote in a
    /// plugin's stead ([`ResponseWriter::write_error`]).
    pub fn written_by_server(&self) -> bool {
        self.by_server
    }

    /// Marks the reply as one that depends on the client, not only on the
    /// question (*kubernetes* `isolate`): a cache must not keep it, or it
    /// would give one client's answer to another.
    pub fn set_per_client(&mut self) {
        self.per_client = true;
    }

    /// Whether [`ResponseWriter::set_per_client`] was called since the
    /// last [`ResponseWriter::clear`].
    pub fn is_per_client(&self) -> bool {
        self.per_client
    }

    /// Marks the message just written as a store's copy of an entry
    /// (the cache's hit); any later write to the buffer forgets it.
    pub fn set_stored(&mut self, stored: Stored) {
        self.stored = Some(stored);
    }

    /// Takes what [`ResponseWriter::set_stored`] said of the message, if
    /// nothing wrote to it since.
    pub fn take_stored(&mut self) -> Option<Stored> {
        self.stored.take()
    }

    /// The message written so far.
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// The message, for in-place edits (TTL rewrite, record shuffling,
    /// truncation). Callers must leave a well-formed message behind, and
    /// one without an OPT record if it had none. A known OPT position is
    /// forgotten (the edit may move it); see [`ResponseWriter::fields_mut`].
    pub fn buffer_mut(&mut self) -> &mut Vec<u8> {
        self.stored = None;
        if let OptAt::TtlAt(_) = self.opt {
            self.opt = OptAt::Unknown;
        }
        &mut self.buf
    }

    /// The message's bytes, for edits of fixed-size fields (ID, flags,
    /// TTLs, the question's case) that move no record: a known OPT
    /// position stays known.
    pub fn fields_mut(&mut self) -> &mut [u8] {
        self.stored = None;
        &mut self.buf
    }

    /// Records that the message built with [`ResponseWriter::reply`]
    /// carries an OPT record its plugin pushed (an extended error), so the
    /// server normalises that one instead of adding the query's.
    pub fn opt_added(&mut self) {
        self.opt = OptAt::Unknown;
    }

    /// Records that the message has no OPT record any more, after an edit
    /// through [`ResponseWriter::buffer_mut`] removed the one it had (a
    /// cache storing a reply strips it): the server need not look for one.
    pub fn opt_removed(&mut self) {
        self.opt = OptAt::Absent;
    }

    /// The buffer, for writing a whole message by hand (for example a
    /// cached one). Like [`ResponseWriter::set_message`], it marks the
    /// message as possibly carrying an OPT record.
    pub fn raw_buffer(&mut self) -> &mut Vec<u8> {
        self.opt = OptAt::Unknown;
        self.stored = None;
        self.built = false;
        self.by_server = false;
        self.saved = None;
        self.more.clear();
        &mut self.buf
    }

    /// The buffer, for writing back a message known to have no OPT
    /// record: a reply built earlier with [`ResponseWriter::reply`] and
    /// kept (a plugin's own memo of its answers), or a cache entry, which
    /// is stored without one.
    pub fn replay_buffer(&mut self) -> &mut Vec<u8> {
        self.opt = OptAt::Absent;
        self.stored = None;
        self.built = false;
        self.by_server = false;
        self.saved = None;
        self.more.clear();
        &mut self.buf
    }

    /// Whether the message may carry an OPT record (it was not built with
    /// [`ResponseWriter::reply`]).
    pub fn may_have_opt(&self) -> bool {
        self.opt != OptAt::Absent
    }

    /// What is known about the message's OPT record.
    pub fn opt(&self) -> OptAt {
        self.opt
    }

    /// Keeps `note` for this plugin's [`Plugin::query_async`](crate::Plugin::query_async)
    /// and returns [`Flow::Async`](crate::Flow::Async): what the
    /// synchronous pass learned (an answer plan, a chain of names) is not
    /// worked out again. The server carries the note to the asynchronous
    /// pass with the query.
    pub fn defer_with(&mut self, note: Box<dyn Any + Send>) -> crate::Flow {
        self.note = Some(note);
        crate::Flow::Async
    }

    /// The note the deferring plugin left with [`ResponseWriter::defer_with`],
    /// if it is a `T`.
    pub fn take_note<T: Any>(&mut self) -> Option<Box<T>> {
        self.note.take()?.downcast().ok()
    }

    /// Moves the deferred query's note to the writer of its asynchronous
    /// pass (for servers; plugins use [`ResponseWriter::take_note`]).
    pub fn carry_note_to(&mut self, other: &mut ResponseWriter) {
        other.note = self.note.take();
    }

    /// Drops a note no asynchronous pass took (for servers, before the
    /// writer serves another query).
    pub fn forget_note(&mut self) {
        self.note = None;
    }

    /// The rcode of the written reply (the header's four bits; extended
    /// rcodes are only set by the server itself).
    pub fn rcode(&self) -> Rcode {
        // Nothing written (a dropped query) reads as CoreDNS's recorders
        // read it: NOERROR, their zero value.
        if self.buf.is_empty() {
            return Rcode::NOERROR;
        }
        match Header::parse(&self.buf) {
            Ok(h) => Rcode(u16::from(h.rcode_low())),
            Err(_) => Rcode::SERVFAIL,
        }
    }

    /// Adds a message to send after this one, on a stream transport only
    /// (the next messages of a zone transfer). Writing a new reply
    /// discards them.
    pub fn push_more(&mut self, msg: Vec<u8>) {
        self.more.push(msg);
    }

    /// Takes the messages to send after this one (for servers).
    pub fn take_more(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.more)
    }

    /// Empties the buffer, keeping its capacity.
    pub fn clear(&mut self) {
        self.more.clear();
        self.stored = None;
        self.opt = OptAt::Absent;
        self.built = false;
        self.by_server = false;
        self.per_client = false;
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
