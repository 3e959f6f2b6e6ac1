//! The request a plugin sees: the parsed query plus where it came from.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::time::Duration;
use std::time::Instant;

use clusterdns_wire::{Class, Name, Query, Rtype};

/// The transport a query arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Proto {
    /// Datagram.
    Udp,
    /// Stream.
    Tcp,
}

impl Proto {
    /// `udp` or `tcp`, as CoreDNS writes it in logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Proto::Udp => "udp",
            Proto::Tcp => "tcp",
        }
    }
}

/// The address family of the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// IPv4 (CoreDNS label `1`).
    V4,
    /// IPv6 (CoreDNS label `2`).
    V6,
}

impl Family {
    /// The metric label CoreDNS uses: `1` for IPv4, `2` for IPv6.
    pub fn label(self) -> &'static str {
        match self {
            Family::V4 => "1",
            Family::V6 => "2",
        }
    }
}

/// One query on its way through a chain.
///
/// Borrowed from the receive buffer; building a `Request` allocates
/// nothing.
#[derive(Debug)]
pub struct Request<'a> {
    /// The parsed query.
    pub query: &'a Query<'a>,
    /// The client's address (IPv4-mapped IPv6 addresses are unmapped).
    pub client: SocketAddr,
    /// The local address the query arrived on (may be unspecified when
    /// the socket is bound to a wildcard).
    pub local: SocketAddr,
    /// UDP or TCP.
    pub proto: Proto,
    /// The server block's zone that matched (lowercase).
    pub zone: &'a Name,
    /// The listener's label, as in CoreDNS metrics: `dns://:53`.
    pub server: &'a str,
    /// When the query was received.
    pub received: Instant,
    /// What the plugins before changed in the query.
    pub edits: Edits,
}

/// The changes plugins make to a query on its way down the chain, for the
/// plugins behind them, the upstream and the server's scrub to see:
/// CoreDNS's plugins edit the `*dns.Msg` in place (*bufsize* its EDNS0
/// payload size). The query bytes stay as received; atomics keep a
/// [`Request`] shareable across the asynchronous path without a lock
/// (one query is handled by one task at a time, so relaxed order does).
#[derive(Debug, Default)]
pub struct Edits {
    /// The EDNS0 payload size, or 0 when unchanged.
    udp_size: AtomicU16,
    /// Header flag bits set (*header*'s query rules).
    flags_set: AtomicU16,
    /// Header flag bits cleared.
    flags_clear: AtomicU16,
    /// The same three as the server sees them (see [`Edits::detach`]).
    server: [AtomicU16; 3],
    /// A plugin handed the plugins behind it a copy of the query.
    detached: AtomicBool,
    /// How long after its arrival the query may still be worked on, in
    /// nanoseconds (*cancel*'s context deadline), or 0 for no limit.
    timeout_ns: AtomicU64,
}

impl Edits {
    /// A copy, for a query a plugin makes up from this one and sends
    /// down the chain behind it (*autopath*'s search walk): the plugins
    /// there see the changes made so far, and theirs stay on the copy.
    pub fn fork(&self) -> Edits {
        let copy = |a: &AtomicU16| AtomicU16::new(a.load(Ordering::Relaxed));
        Edits {
            udp_size: copy(&self.udp_size),
            flags_set: copy(&self.flags_set),
            flags_clear: copy(&self.flags_clear),
            server: [
                copy(&self.server[0]),
                copy(&self.server[1]),
                copy(&self.server[2]),
            ],
            detached: AtomicBool::new(self.detached.load(Ordering::Relaxed)),
            timeout_ns: AtomicU64::new(self.timeout_ns.load(Ordering::Relaxed)),
        }
    }

    /// Sets the query's EDNS0 payload size (only meaningful when the
    /// query has an OPT record).
    pub fn set_udp_size(&self, size: u16) {
        self.udp_size.store(size, Ordering::Relaxed);
        self.share();
    }

    /// Limits the work on the query to `timeout` after its arrival, as a
    /// context deadline in CoreDNS (*cancel*); a shorter limit set before
    /// stays.
    pub fn set_timeout(&self, timeout: Duration) {
        let ns = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX).max(1);
        let old = self.timeout_ns.load(Ordering::Relaxed);
        if old == 0 || ns < old {
            self.timeout_ns.store(ns, Ordering::Relaxed);
        }
    }

    /// The limit set with [`Edits::set_timeout`].
    pub fn timeout(&self) -> Option<Duration> {
        match self.timeout_ns.load(Ordering::Relaxed) {
            0 => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }

    /// Marks that the plugins from here on work on a copy of the query,
    /// as behind CoreDNS's *cache* (which copies the message it passes
    /// on): their changes are no longer seen by the server's scrub and
    /// error replies, which keep reading the query as it was then.
    pub fn detach(&self) {
        self.detached.store(true, Ordering::Relaxed);
    }

    /// Copies the changes to the server's view, until detached.
    fn share(&self) {
        if self.detached.load(Ordering::Relaxed) {
            return;
        }
        for (dst, src) in
            self.server
                .iter()
                .zip([&self.udp_size, &self.flags_set, &self.flags_clear])
        {
            dst.store(src.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }

    /// The EDNS0 payload size as the server sees it (for its scrub).
    pub fn server_udp_size(&self) -> Option<u16> {
        match self.server[0].load(Ordering::Relaxed) {
            0 => None,
            n => Some(n),
        }
    }

    /// `flags` as the server sees them (for its error replies).
    pub fn server_flags(&self, flags: u16) -> u16 {
        let s = self.server[1].load(Ordering::Relaxed);
        let c = self.server[2].load(Ordering::Relaxed);
        (flags & !c) | s
    }

    /// The EDNS0 payload size a plugin set, if any.
    pub fn udp_size(&self) -> Option<u16> {
        match self.udp_size.load(Ordering::Relaxed) {
            0 => None,
            n => Some(n),
        }
    }

    /// Sets the header flag bits of `set` and clears those of `clear`,
    /// after the changes made before.
    pub fn set_flags(&self, set: u16, clear: u16) {
        let (s, c) = self.flag_masks();
        self.flags_set.store((s & !clear) | set, Ordering::Relaxed);
        self.flags_clear
            .store((c & !set) | clear, Ordering::Relaxed);
        self.share();
    }

    /// The flag bits set and cleared so far.
    fn flag_masks(&self) -> (u16, u16) {
        (
            self.flags_set.load(Ordering::Relaxed),
            self.flags_clear.load(Ordering::Relaxed),
        )
    }

    /// `flags` (a query's header flags) with the changes made.
    pub fn flags(&self, flags: u16) -> u16 {
        let (s, c) = self.flag_masks();
        (flags & !c) | s
    }

    /// A copy, for a plugin that hands the plugins behind it a query of
    /// its own (*rewrite*): they start from the changes made so far.
    pub fn copied(&self) -> Edits {
        let load = |a: &AtomicU16| AtomicU16::new(a.load(Ordering::Relaxed));
        Edits {
            udp_size: load(&self.udp_size),
            flags_set: load(&self.flags_set),
            flags_clear: load(&self.flags_clear),
            server: [
                load(&self.server[0]),
                load(&self.server[1]),
                load(&self.server[2]),
            ],
            detached: AtomicBool::new(self.detached.load(Ordering::Relaxed)),
            timeout_ns: AtomicU64::new(self.timeout_ns.load(Ordering::Relaxed)),
        }
    }

    /// Whether no plugin changed anything.
    pub fn is_empty(&self) -> bool {
        self.udp_size().is_none() && self.flag_masks() == (0, 0)
    }

    /// The query's bytes with the changes made, copied into `buf` (for
    /// a plugin that sends the query on, such as *forward*).
    pub fn apply<'b>(&self, query: &Query<'_>, buf: &'b mut Vec<u8>) -> &'b [u8] {
        buf.clear();
        buf.extend_from_slice(query.raw());
        let (set, clear) = self.flag_masks();
        clusterdns_wire::set_flags(buf, set, clear);
        if let (Some(size), Some(e)) = (self.udp_size(), query.edns()) {
            // The OPT's CLASS (payload size) sits before TTL and RDLENGTH.
            let at = e.options.start.wrapping_sub(8);
            if let Some(dst) = buf.get_mut(at..at + 2) {
                dst.copy_from_slice(&size.to_be_bytes());
            }
        }
        buf
    }
}

impl<'a> Request<'a> {
    /// A request for `query` from the same client, listener and zone, at
    /// the same time, with `edits` (a query a plugin makes up and sends
    /// down the chain behind it).
    pub fn for_query<'b>(&'b self, query: &'b Query<'b>, edits: Edits) -> Request<'b> {
        Request {
            query,
            client: self.client,
            local: self.local,
            proto: self.proto,
            zone: self.zone,
            server: self.server,
            received: self.received,
            edits,
        }
    }

    /// The query name as the client sent it.
    pub fn qname(&self) -> &Name {
        self.query.qname()
    }

    /// The query name in lowercase.
    pub fn qname_lower(&self) -> &Name {
        self.query.qname_lower()
    }

    /// The query type.
    pub fn qtype(&self) -> Rtype {
        self.query.qtype()
    }

    /// The query class.
    pub fn qclass(&self) -> Class {
        self.query.qclass()
    }

    /// The client's address family.
    pub fn family(&self) -> Family {
        if self.client.is_ipv4() {
            Family::V4
        } else {
            Family::V6
        }
    }

    /// The largest reply the client accepts: the EDNS0 payload size (at
    /// least 512) over UDP, 65535 over TCP (CoreDNS `Request.Size`).
    pub fn size(&self) -> usize {
        match self.proto {
            Proto::Udp => usize::from(self.udp_size()).max(512),
            Proto::Tcp => 65535,
        }
    }

    /// The largest UDP reply the client accepts, as the plugins before
    /// left the EDNS0 payload size (at least 512; 512 without EDNS).
    pub fn udp_size(&self) -> u16 {
        match (self.query.edns(), self.edits.udp_size()) {
            (Some(_), Some(n)) => n,
            _ => self.query.udp_size(),
        }
    }

    /// The query's RD bit as the plugins before left it.
    pub fn rd(&self) -> bool {
        self.edits.flags(self.query.header().flags) & clusterdns_wire::FLAG_RD != 0
    }

    /// When work on the query must stop (*cancel*), if ever.
    pub fn deadline(&self) -> Option<Instant> {
        self.edits
            .timeout()
            .and_then(|t| self.received.checked_add(t))
    }

    /// Whether the DO bit was set.
    pub fn do_bit(&self) -> bool {
        self.query.do_bit()
    }
}
