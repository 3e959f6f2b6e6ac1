//! The request a plugin sees: the parsed query plus where it came from.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, Ordering};
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
}

impl Edits {
    /// Sets the query's EDNS0 payload size (only meaningful when the
    /// query has an OPT record).
    pub fn set_udp_size(&self, size: u16) {
        self.udp_size.store(size, Ordering::Relaxed);
    }

    /// The EDNS0 payload size a plugin set, if any.
    pub fn udp_size(&self) -> Option<u16> {
        match self.udp_size.load(Ordering::Relaxed) {
            0 => None,
            n => Some(n),
        }
    }

    /// Whether no plugin changed anything.
    pub fn is_empty(&self) -> bool {
        self.udp_size().is_none()
    }

    /// The query's bytes with the changes made, copied into `buf` (for
    /// a plugin that sends the query on, such as *forward*).
    pub fn apply<'b>(&self, query: &Query<'_>, buf: &'b mut Vec<u8>) -> &'b [u8] {
        buf.clear();
        buf.extend_from_slice(query.raw());
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

    /// Whether the DO bit was set.
    pub fn do_bit(&self) -> bool {
        self.query.do_bit()
    }
}
