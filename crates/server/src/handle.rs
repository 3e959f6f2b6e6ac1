//! What happens to one packet, for UDP and TCP alike: parse, the checks
//! CoreDNS's server (and miekg/dns before it) makes, zone selection, the
//! chain, then the reply's scrub (EDNS0 OPT mirrored, truncation to the
//! client's size).

use std::any::Any;
use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use clusterdns_contract::{Chain, Deferred, OptAt, Proto, Request, ResponseWriter};
use clusterdns_wire::{
    Class, Detached, HEADER_LEN, Header, Message, Opcode, Query, QueryError, Rcode, Rtype, truncate,
};

use crate::mux::Mux;

/// What to do with a packet after the synchronous pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handled {
    /// The writer holds the reply.
    Reply,
    /// Send nothing (not a query, or unreadable).
    Drop,
    /// Needs the asynchronous path, from the plugin that deferred it; the
    /// parsed query stays in the caller's slot.
    Defer(Resume),
}

/// Where the asynchronous pass picks a deferred query up: what the
/// synchronous pass chose, so that nothing is checked or routed twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Resume {
    /// The zone's position in the mux ([`Mux::zone_at`]).
    zone: usize,
    /// The plugin that deferred.
    at: Deferred,
}

/// Everything about a packet except its bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Meta {
    pub client: SocketAddr,
    pub local: SocketAddr,
    pub proto: Proto,
    pub received: Instant,
}

/// EDNS options CoreDNS copies from the query's OPT into the reply
/// (`request.SupportedOptions`): LLQ, UL, NSID, DAU, DHU, N3U, SUBNET,
/// EXPIRE, COOKIE, TCP-KEEPALIVE, PADDING.
const SUPPORTED_OPTIONS: &[u16] = &[1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12];

/// Outcome of the checks made before the chain runs. The query view
/// (about 580 bytes: two names) lives in the caller's slot and is only
/// referred to: moving it through return values cost a copy per step.
enum Checked<'s, 'q> {
    Done(Handled),
    Chain(&'s Query<'q>),
    /// A class other than IN on a listener without chaos/forward:
    /// REFUSED (checked before the EDNS version, as CoreDNS).
    Refuse(&'s Query<'q>),
}

/// Parses and checks a packet into `slot`; writes the reply for anything
/// that never reaches a chain.
fn check<'s, 'q>(
    mux: &Mux,
    packet: &'q [u8],
    w: &mut ResponseWriter,
    slot: &'s mut Option<Query<'q>>,
) -> Checked<'s, 'q> {
    // What miekg/dns's default accept function decides from the header
    // alone, before the rest is read: responses dropped, opcodes other
    // than QUERY and NOTIFY NOTIMP, and more records than a query, a
    // NOTIFY or an IXFR request carries FORMERR.
    if let Ok(h) = Header::parse(packet)
        && !h.qr()
    {
        let op = h.opcode();
        if op != Opcode::QUERY && op != Opcode::NOTIFY {
            header_only_reply(packet, Rcode::NOTIMP, w);
            return Checked::Done(Handled::Reply);
        }
        if h.ancount > 1 || h.nscount > 1 || h.arcount > 2 {
            header_only_reply(packet, Rcode::FORMERR, w);
            return Checked::Done(Handled::Reply);
        }
    }
    match Query::parse(packet) {
        Ok(q) => {
            let q = &*slot.insert(q);
            if q.qclass() != Class::IN && !mux.class_chaos() {
                return Checked::Refuse(q);
            }
            if let Some(e) = q.edns()
                && e.version != 0
            {
                // CoreDNS's edns.Version: an OPT of its own, payload size
                // 0 and no DO, written past the scrub that would mirror the
                // query's.
                let mut b = w.reply_query(q);
                b.set_rcode(Rcode::BADVERS);
                let _ = b.push_opt(0, false, &[]);
                b.finish();
                return Checked::Done(Handled::Reply);
            }
            Checked::Chain(q)
        }
        Err(QueryError::TooShort) | Err(QueryError::NotAQuery) => Checked::Done(Handled::Drop),
        Err(QueryError::NoQuestion) | Err(QueryError::Malformed) => {
            header_only_reply(packet, Rcode::FORMERR, w);
            Checked::Done(Handled::Reply)
        }
        Err(QueryError::MalformedRecords { question_end }) => {
            header_only_reply(packet, Rcode::FORMERR, w);
            // The question it could read goes back with the FORMERR.
            if let Some(question) = packet.get(HEADER_LEN..usize::from(question_end))
                && !w.bytes().is_empty()
            {
                let buf = w.buffer_mut();
                buf[5] = 1;
                buf.extend_from_slice(question);
            }
            Checked::Done(Handled::Reply)
        }
    }
}

/// A reply with only a header: the query's ID and opcode, QR set and
/// `rcode` (miekg/dns `SetRcodeFormatError`).
fn header_only_reply(packet: &[u8], rcode: Rcode, w: &mut ResponseWriter) {
    let Ok(h) = Header::parse(packet) else {
        w.clear();
        return;
    };
    let reply = Header {
        id: h.id,
        // QR, the query's opcode, RD, AD and CD copied (miekg/dns answers
        // a rejected message with its own header), low rcode bits.
        flags: 0x8000 | (h.flags & 0x7930) | (rcode.0 & 0x000f),
        qdcount: 0,
        ancount: 0,
        nscount: 0,
        arcount: 0,
    };
    let buf = w.buffer_mut();
    buf.clear();
    buf.resize(HEADER_LEN, 0);
    reply.write(buf);
}

/// Picks the zone and chain, or writes REFUSED.
fn route<'m>(
    mux: &'m Mux,
    q: &Query<'_>,
    meta: Meta,
    w: &mut ResponseWriter,
) -> Option<(usize, &'m clusterdns_wire::Name, &'m Chain)> {
    // A block's view sees the query as its chain would (no allocation).
    let passes = |zone: &clusterdns_wire::Name, f: &dyn clusterdns_contract::BlockFilter| {
        f.matches(&request(mux, q, zone, meta))
    };
    let Some(picked) = mux.select_at(q.qname_lower(), passes) else {
        refuse(q, w);
        return None;
    };
    Some(picked)
}

fn refuse(q: &Query<'_>, w: &mut ResponseWriter) {
    let mut b = w.reply_query(q);
    b.set_rcode(Rcode::REFUSED);
    b.finish();
}

/// What the checks and the zone mux decided about a packet.
enum Prepared<'p, 'q, 'm> {
    /// Answered (or dropped) without a chain; the writer is ready.
    Done(Handled),
    /// Run this zone's chain (at this position in the mux) on this query
    /// (which lives in the caller's slot).
    Run(&'q Query<'p>, usize, &'m clusterdns_wire::Name, &'m Chain),
}

/// The part of the synchronous pass before the chain: checks, zone
/// selection and the replies written without a chain (FORMERR, NOTIMP,
/// BADVERS, REFUSED).
fn prepare<'p, 'q, 'm>(
    mux: &'m Mux,
    packet: &'p [u8],
    meta: Meta,
    w: &mut ResponseWriter,
    slot: &'q mut Option<Query<'p>>,
) -> Prepared<'p, 'q, 'm> {
    let q = match check(mux, packet, w, slot) {
        Checked::Done(Handled::Reply) => return Prepared::Done(finish_plain(packet, meta, w)),
        Checked::Done(h) => return Prepared::Done(h),
        Checked::Refuse(q) => {
            refuse(q, w);
            scrub(q, meta.proto, None, w);
            return Prepared::Done(Handled::Reply);
        }
        Checked::Chain(q) => q,
    };
    match route(mux, q, meta, w) {
        Some((at, zone, chain)) => Prepared::Run(q, at, zone, chain),
        None => {
            scrub(q, meta.proto, None, w);
            Prepared::Done(Handled::Reply)
        }
    }
}

/// The request a chain sees.
fn request<'a>(
    mux: &'a Mux,
    q: &'a Query<'a>,
    zone: &'a clusterdns_wire::Name,
    meta: Meta,
) -> Request<'a> {
    Request {
        query: q,
        client: meta.client,
        local: meta.local,
        proto: meta.proto,
        zone,
        server: &mux.label,
        received: meta.received,
        edits: Default::default(),
    }
}

/// The synchronous pass over one packet, parsed into `slot`. On `Reply`
/// the writer holds the scrubbed reply; on `Defer` the slot holds the
/// query and the writer the deferring plugin's note, both for
/// [`serve_async`] (or a [`Parked`] query).
pub(crate) fn serve_sync<'p>(
    mux: &Mux,
    packet: &'p [u8],
    meta: Meta,
    w: &mut ResponseWriter,
    slot: &mut Option<Query<'p>>,
) -> Handled {
    w.forget_note();
    let (q, zone_at, zone, chain) = match prepare(mux, packet, meta, w, slot) {
        Prepared::Done(h) => return h,
        Prepared::Run(q, at, zone, chain) => (q, at, zone, chain),
    };
    let req = request(mux, q, zone, meta);
    let ran = std::panic::catch_unwind(AssertUnwindSafe(|| chain.run_sync(&req, &mut *w)));
    match ran {
        Ok(Ok(_)) => {}
        Ok(Err(at)) => return Handled::Defer(Resume { zone: zone_at, at }),
        Err(panic) => recovered(mux, &req, w, panic),
    }
    finish_chain(q, meta, &req, w)
}

/// After the chain: scrub the reply, or send nothing when a plugin
/// answered without writing (*acl*'s drop: CoreDNS writes nothing then).
fn finish_chain(q: &Query<'_>, meta: Meta, req: &Request<'_>, w: &mut ResponseWriter) -> Handled {
    if w.bytes().is_empty() {
        return Handled::Drop;
    }
    scrub(q, meta.proto, req.edits.server_udp_size(), w);
    Handled::Reply
}

/// A plugin panicked: answer SERVFAIL, count it, log it, keep serving
/// (CoreDNS's server recovers the same way).
fn recovered(mux: &Mux, req: &Request<'_>, w: &mut ResponseWriter, panic: Box<dyn Any + Send>) {
    mux.panics.inc();
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    clusterdns_contract::error!(
        "",
        "Recovered from panic in server: \"{}\" {what}",
        mux.label
    );
    w.write_error(req, Rcode::SERVFAIL);
}

/// Polls a future, turning a panic into an `Err` (the asynchronous
/// counterpart of `catch_unwind`).
struct CatchUnwind<F>(Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Box<dyn Any + Send>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let fut = self.0.as_mut();
        match std::panic::catch_unwind(AssertUnwindSafe(|| fut.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}

/// What [`explain`] learned of a query that reached a chain.
pub(crate) struct ExplainedRun {
    pub zone: clusterdns_wire::Name,
    pub chain: Chain,
    pub plugin: &'static str,
    pub error: Option<String>,
    pub notes: Vec<(&'static str, String)>,
}

/// The whole path of one packet with I/O allowed, as [`serve_sync`] and
/// [`serve_async`] take it, for `clusterdns explain`; `None` when the
/// packet never reached a chain (the writer holds what was answered).
pub(crate) async fn explain(
    mux: &Mux,
    packet: &[u8],
    meta: Meta,
    w: &mut ResponseWriter,
) -> Option<ExplainedRun> {
    let mut slot = None;
    let (q, zone, chain) = match prepare(mux, packet, meta, w, &mut slot) {
        Prepared::Done(_) => return None,
        Prepared::Run(q, _, zone, chain) => (q, zone, chain),
    };
    let req = request(mux, q, zone, meta);
    let outcome = chain.run_async(&req, &mut *w).await;
    let upto = chain
        .plugins()
        .iter()
        .position(|p| p.name() == outcome.plugin)
        .map_or(chain.plugins().len(), |i| i + 1);
    let notes = chain.plugins()[..upto]
        .iter()
        .flat_map(|p| p.explain(&req).into_iter().map(|n| (p.name(), n)))
        .collect();
    finish_chain(q, meta, &req, w);
    Some(ExplainedRun {
        zone: *zone,
        chain: chain.clone(),
        plugin: outcome.plugin,
        error: outcome.error.map(|e| e.to_string()),
        notes,
    })
}

/// The asynchronous pass over a query [`serve_sync`] deferred with `from`
/// over the same `mux`: it resumes the chain at the plugin that deferred,
/// with the query that pass parsed and the zone it chose. The writer must
/// hold the deferring plugin's note (the same writer, or one it was
/// carried to).
pub(crate) async fn serve_async(
    mux: &Mux,
    q: &Query<'_>,
    meta: Meta,
    from: Resume,
    w: &mut ResponseWriter,
) -> Handled {
    let Some((zone, chain)) = mux.zone_at(from.zone) else {
        // Not a position of this mux: the caller must keep the table
        // that deferred the query. Refused rather than misrouted.
        refuse(q, w);
        scrub(q, meta.proto, None, w);
        return Handled::Reply;
    };
    let req = request(mux, q, zone, meta);
    let ran = CatchUnwind(Box::pin(chain.run_async_from(from.at, &req, &mut *w))).await;
    if let Err(panic) = ran {
        recovered(mux, &req, w, panic);
    }
    finish_chain(q, meta, &req, w)
}

/// A deferred query that leaves the buffer it was received in: a copy of
/// its bytes, what the synchronous pass learned (the parsed query, the
/// zone, the plugin) and the writer of its asynchronous pass, which holds
/// the deferring plugin's note. Boxed, so that the future carrying it
/// stays small: a future is moved when it is queued and when it starts,
/// and copying the parsed query (two names) with it cost more than
/// parsing again.
pub(crate) struct Parked(Box<ParkedQuery>);

struct ParkedQuery {
    packet: Vec<u8>,
    query: Detached,
    resume: Resume,
    w: ResponseWriter,
}

impl Parked {
    /// Parks `q` (parsed from `packet`), deferred at `resume`; takes the
    /// note from `w`, the writer of the synchronous pass.
    pub(crate) fn new(
        packet: &[u8],
        q: &Query<'_>,
        resume: Resume,
        w: &mut ResponseWriter,
    ) -> Self {
        let mut parked = Box::new(ParkedQuery {
            packet: packet.to_vec(),
            query: q.detach(),
            resume,
            w: ResponseWriter::default(),
        });
        w.carry_note_to(&mut parked.w);
        Self(parked)
    }

    /// The asynchronous pass over `mux`, the table that deferred the
    /// query; the writer holding the reply, if there is one to send.
    pub(crate) async fn serve(self, mux: &Mux, meta: Meta) -> Option<ResponseWriter> {
        let mut parked = self.0;
        let p = &mut *parked;
        let q = p.query.attach(&p.packet)?;
        let handled = serve_async(mux, &q, meta, p.resume, &mut p.w).await;
        (handled == Handled::Reply).then(|| std::mem::take(&mut p.w))
    }
}

/// Replies written before a chain ran (FORMERR, NOTIMP, BADVERS) need no
/// scrub beyond what was built.
fn finish_plain(_packet: &[u8], _meta: Meta, w: &mut ResponseWriter) -> Handled {
    if w.bytes().is_empty() {
        Handled::Drop
    } else {
        Handled::Reply
    }
}

/// CoreDNS's ScrubWriter: mirror the query's EDNS0 (`SizeAndDo`), then
/// truncate to what the client accepts (`Scrub`).
/// `udp_size` is the payload size a plugin set in the query (*bufsize*):
/// CoreDNS's scrub reads the query after the plugins changed it, so the
/// reply advertises and is cut to that size.
pub(crate) fn scrub(q: &Query<'_>, proto: Proto, udp_size: Option<u16>, w: &mut ResponseWriter) {
    let size = q.edns().map(|e| udp_size.unwrap_or(e.udp_size));
    if let (Some(e), Some(size)) = (q.edns(), size) {
        let opt = w.opt();
        mirror_opt(q, e, size, opt, w.buffer_mut());
    }
    let max = match proto {
        // The size the OPT now says (a plugin may have lowered it), else
        // 512 without EDNS.
        Proto::Udp => usize::from(size.unwrap_or(q.udp_size())).max(512),
        Proto::Tcp => 65535,
    };
    let buf = w.buffer_mut();
    if buf.len() > max && truncate(buf, max).is_err() {
        // A reply too large to send that cannot be cut at a record
        // boundary (malformed, e.g. from an upstream) becomes SERVFAIL, as
        // CoreDNS fails such a message before it could be written.
        let mut b = w.reply_query(q);
        b.set_rcode(Rcode::SERVFAIL);
        b.finish();
        if let (Some(e), Some(size)) = (q.edns(), size) {
            mirror_opt(q, e, size, OptAt::Absent, w.buffer_mut());
        }
    }
}

/// Where the TTL field of the reply's OPT record is, if it has one.
fn opt_ttl_offset(buf: &[u8], arcount: u16) -> Option<usize> {
    if arcount == 0 {
        return None;
    }
    let msg = Message::parse(buf).ok()?;
    msg.records()
        .find(|r| r.rtype == Rtype::OPT)
        .map(|r| r.ttl_offset)
}

/// Gives the reply the query's OPT (size, DO, supported options) or
/// normalises the OPT it already has, as `request.SizeAndDo` does.
fn mirror_opt(
    q: &Query<'_>,
    e: &clusterdns_wire::Edns,
    udp_size: u16,
    opt: OptAt,
    buf: &mut Vec<u8>,
) {
    let Ok(h) = Header::parse(buf) else { return };
    let existing = match opt {
        OptAt::Absent => None,
        // Where the writer's message was parsed, it is known.
        OptAt::TtlAt(at) if at >= 2 && at + 4 <= buf.len() => Some(at),
        OptAt::TtlAt(_) | OptAt::Unknown => opt_ttl_offset(buf, h.arcount),
    };
    if let Some(ttl_off) = existing {
        // CLASS = the query's payload size; TTL &= 0xff00 clears the
        // extended rcode and version; DO set when the query had it.
        let class_off = ttl_off - 2;
        buf[class_off..class_off + 2].copy_from_slice(&udp_size.to_be_bytes());
        let ttl = u32::from_be_bytes([
            buf[ttl_off],
            buf[ttl_off + 1],
            buf[ttl_off + 2],
            buf[ttl_off + 3],
        ]);
        let mut ttl = ttl & 0xff00;
        if e.do_bit {
            ttl |= 0x8000;
        }
        buf[ttl_off..ttl_off + 4].copy_from_slice(&ttl.to_be_bytes());
        return;
    }
    // Append the query's OPT: root owner, TYPE 41, CLASS = payload size,
    // TTL = DO bit only, then the supported options.
    let raw = q.raw();
    let opts = raw.get(e.options.clone()).unwrap_or(&[]);
    let start = buf.len();
    buf.push(0);
    buf.extend_from_slice(&41u16.to_be_bytes());
    buf.extend_from_slice(&udp_size.to_be_bytes());
    let ttl: u32 = if e.do_bit { 0x8000 } else { 0 };
    buf.extend_from_slice(&ttl.to_be_bytes());
    let len_at = buf.len();
    buf.extend_from_slice(&[0, 0]);
    let mut i = 0;
    while i + 4 <= opts.len() {
        let code = u16::from_be_bytes([opts[i], opts[i + 1]]);
        let len = usize::from(u16::from_be_bytes([opts[i + 2], opts[i + 3]]));
        let end = i + 4 + len;
        if end > opts.len() {
            break;
        }
        if SUPPORTED_OPTIONS.contains(&code) {
            buf.extend_from_slice(&opts[i..end]);
        }
        i = end;
    }
    let rdlen = buf.len() - len_at - 2;
    let Ok(rdlen) = u16::try_from(rdlen) else {
        buf.truncate(start);
        return;
    };
    buf[len_at..len_at + 2].copy_from_slice(&rdlen.to_be_bytes());
    let ar = h.arcount.saturating_add(1);
    buf[10..12].copy_from_slice(&ar.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use clusterdns_contract::{Flow, Plugin, Request, ResponseWriter, testing};
    use clusterdns_wire::{Name, Rcode, Rtype};

    use super::*;

    struct Panicker;

    impl Plugin for Panicker {
        fn name(&self) -> &'static str {
            "panicker"
        }
        fn query(&self, req: &Request<'_>, _w: &mut ResponseWriter) -> Flow {
            if req.qname_lower().to_string().starts_with("boom") {
                panic!("boom");
            }
            Flow::Async
        }
        fn query_async<'a>(
            &'a self,
            _req: &'a Request<'a>,
            _w: &'a mut ResponseWriter,
        ) -> clusterdns_contract::BoxFuture<'a, Flow> {
            Box::pin(async { panic!("async boom") })
        }
    }

    fn meta() -> Meta {
        Meta {
            client: SocketAddr::from(([127, 0, 0, 1], 5353)),
            local: SocketAddr::from(([127, 0, 0, 1], 53)),
            proto: Proto::Udp,
            received: Instant::now(),
        }
    }

    /// Writes a 600-byte reply whose answer count promises records that
    /// are not there.
    struct Garbage;

    impl Plugin for Garbage {
        fn name(&self) -> &'static str {
            "garbage"
        }
        fn query(&self, req: &Request<'_>, w: &mut ResponseWriter) -> Flow {
            let b = w.reply(req);
            b.finish();
            let buf = w.raw_buffer();
            buf[7] = 9; // ANCOUNT = 9
            buf.resize(600, 0xff);
            Flow::Answered
        }
    }

    #[test]
    fn an_oversized_malformed_reply_becomes_servfail() {
        let mut mux = Mux::new("dns://:53".into());
        mux.add(Name::root(), Chain::new(vec![Arc::new(Garbage)]));
        let mut w = ResponseWriter::new();
        let pkt = testing::query("x.example.", Rtype::A);
        assert_eq!(
            serve_sync(&mux, &pkt, meta(), &mut w, &mut None),
            Handled::Reply
        );
        let r = testing::reply(w.bytes());
        assert_eq!(r.rcode, Rcode::SERVFAIL);
        assert!(w.bytes().len() <= 512);
    }

    #[test]
    fn a_panicking_plugin_gets_servfail_and_is_counted() {
        let mut mux = Mux::new("dns://:53".into());
        mux.add(Name::root(), Chain::new(vec![Arc::new(Panicker)]));
        let mut w = ResponseWriter::new();
        for round in 1..=2u64 {
            let pkt = testing::query("boom.example.", Rtype::A);
            assert_eq!(
                serve_sync(&mux, &pkt, meta(), &mut w, &mut None),
                Handled::Reply
            );
            assert_eq!(testing::reply(w.bytes()).rcode, Rcode::SERVFAIL);
            assert_eq!(mux.panics.get(), round);
        }
        // The asynchronous path recovers too.
        let pkt = testing::query("calm.example.", Rtype::A);
        let mut slot = None;
        let Handled::Defer(from) = serve_sync(&mux, &pkt, meta(), &mut w, &mut slot) else {
            panic!("not deferred");
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let parked = Parked::new(&pkt, slot.as_ref().unwrap(), from, &mut w);
        let w = rt.block_on(parked.serve(&mux, meta())).expect("a reply");
        assert_eq!(testing::reply(w.bytes()).rcode, Rcode::SERVFAIL);
        assert_eq!(mux.panics.get(), 3);
    }
}
