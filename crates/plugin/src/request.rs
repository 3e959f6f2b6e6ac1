//! The request a plugin sees: the parsed query plus where it came from.

use std::net::SocketAddr;
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
            Proto::Udp => usize::from(self.query.udp_size()).max(512),
            Proto::Tcp => 65535,
        }
    }

    /// Whether the DO bit was set.
    pub fn do_bit(&self) -> bool {
        self.query.do_bit()
    }
}
