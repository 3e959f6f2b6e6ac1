//! DNS queries for tests: what to send, how to send it (UDP or TCP), and the
//! response as plain, comparable data.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

/// How a query travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// One UDP datagram each way.
    Udp,
    /// A fresh TCP connection, 2-byte length prefix.
    Tcp,
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Transport::Udp => "udp",
            Transport::Tcp => "tcp",
        })
    }
}

/// EDNS(0) settings of a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryEdns {
    /// Advertised UDP payload size.
    pub udp_size: u16,
    /// The DO bit.
    pub dnssec_ok: bool,
}

/// One query, built with [`Query::new`] and the builder methods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// Query name, as typed (`web.ns.svc.cluster.local`, trailing dot optional).
    pub name: String,
    /// Query type mnemonic (`A`, `AAAA`, `SRV`, `PTR`, `TYPE65`…).
    pub qtype: String,
    /// Query class mnemonic (`IN`, `CH`…).
    pub qclass: String,
    /// Message id (both servers get the same).
    pub id: u16,
    /// Recursion desired.
    pub rd: bool,
    /// Checking disabled.
    pub cd: bool,
    /// Authentic data (as a request flag).
    pub ad: bool,
    /// EDNS(0), if any.
    pub edns: Option<QueryEdns>,
    /// Transport.
    pub transport: Transport,
}

impl Query {
    /// A UDP query with RD set and no EDNS, like `dig +noedns`.
    pub fn new(name: &str, qtype: &str) -> Query {
        Query {
            name: name.to_string(),
            qtype: qtype.to_ascii_uppercase(),
            qclass: "IN".to_string(),
            id: 0x2b1d,
            rd: true,
            cd: false,
            ad: false,
            edns: None,
            transport: Transport::Udp,
        }
    }

    /// Sends it over TCP.
    pub fn tcp(mut self) -> Query {
        self.transport = Transport::Tcp;
        self
    }

    /// Sends it over `transport`.
    pub fn transport(mut self, transport: Transport) -> Query {
        self.transport = transport;
        self
    }

    /// Adds EDNS(0) with this UDP payload size.
    pub fn edns(mut self, udp_size: u16) -> Query {
        let dnssec_ok = self.edns.is_some_and(|e| e.dnssec_ok);
        self.edns = Some(QueryEdns {
            udp_size,
            dnssec_ok,
        });
        self
    }

    /// Adds EDNS(0) (1232 bytes unless set) with the DO bit.
    pub fn dnssec_ok(mut self) -> Query {
        let udp_size = self.edns.map_or(1232, |e| e.udp_size);
        self.edns = Some(QueryEdns {
            udp_size,
            dnssec_ok: true,
        });
        self
    }

    /// Sets or clears RD.
    pub fn rd(mut self, on: bool) -> Query {
        self.rd = on;
        self
    }

    /// Sets or clears CD.
    pub fn cd(mut self, on: bool) -> Query {
        self.cd = on;
        self
    }

    /// Sets the class mnemonic.
    pub fn class(mut self, qclass: &str) -> Query {
        self.qclass = qclass.to_ascii_uppercase();
        self
    }

    /// Sets the message id.
    pub fn id(mut self, id: u16) -> Query {
        self.id = id;
        self
    }

    /// The query in wire format.
    pub fn to_wire(&self) -> Result<Vec<u8>, String> {
        crate::wire_adapter::build_query(self)
    }
}

impl fmt::Display for Query {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} ({}",
            self.name, self.qclass, self.qtype, self.transport
        )?;
        if let Some(e) = self.edns {
            write!(f, ", edns {}", e.udp_size)?;
            if e.dnssec_ok {
                f.write_str(" +do")?;
            }
        }
        if !self.rd {
            f.write_str(", +nord")?;
        }
        if self.cd {
            f.write_str(", +cd")?;
        }
        f.write_str(")")
    }
}

/// Header flags of a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[allow(clippy::struct_excessive_bools)]
pub struct Flags {
    /// Response.
    pub qr: bool,
    /// Authoritative answer.
    pub aa: bool,
    /// Truncated.
    pub tc: bool,
    /// Recursion desired.
    pub rd: bool,
    /// Recursion available.
    pub ra: bool,
    /// The reserved Z bit.
    pub z: bool,
    /// Authentic data.
    pub ad: bool,
    /// Checking disabled.
    pub cd: bool,
}

impl Flags {
    /// `(name, value)` for every flag, in header order.
    pub fn all(&self) -> [(&'static str, bool); 8] {
        [
            ("qr", self.qr),
            ("aa", self.aa),
            ("tc", self.tc),
            ("rd", self.rd),
            ("ra", self.ra),
            ("z", self.z),
            ("ad", self.ad),
            ("cd", self.cd),
        ]
    }
}

impl fmt::Display for Flags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let on: Vec<&str> = self
            .all()
            .iter()
            .filter(|(_, v)| *v)
            .map(|(n, _)| *n)
            .collect();
        f.write_str(&on.join(" "))
    }
}

/// One resource record, as comparable text fields.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Rr {
    /// Owner name, as sent (case preserved), with trailing dot.
    pub name: String,
    /// Type mnemonic.
    pub rtype: String,
    /// Class mnemonic.
    pub class: String,
    /// TTL in seconds.
    pub ttl: u32,
    /// RDATA in presentation format.
    pub rdata: String,
}

impl Rr {
    /// The record without its TTL (`name class type rdata`), the identity used
    /// to match records across responses.
    pub fn key(&self) -> String {
        format!("{} {} {} {}", self.name, self.class, self.rtype, self.rdata)
    }
}

impl fmt::Display for Rr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} {} {}",
            self.name, self.ttl, self.class, self.rtype, self.rdata
        )
    }
}

/// The OPT pseudo-record of a response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseEdns {
    /// Advertised UDP payload size.
    pub udp_size: u16,
    /// EDNS version.
    pub version: u8,
    /// The DO bit.
    pub dnssec_ok: bool,
    /// The other 15 flag bits.
    pub z: u16,
    /// Options as `(code, data)`, in message order.
    pub options: Vec<(u16, Vec<u8>)>,
}

/// A parsed response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Message id.
    pub id: u16,
    /// Opcode.
    pub opcode: u8,
    /// Header flags.
    pub flags: Flags,
    /// Full rcode (the header's 4 bits plus the OPT record's upper 8 bits).
    pub rcode: u16,
    /// Question section entries, `name class type`.
    pub question: Vec<String>,
    /// Answer section.
    pub answer: Vec<Rr>,
    /// Authority section.
    pub authority: Vec<Rr>,
    /// Additional section, without the OPT record.
    pub additional: Vec<Rr>,
    /// The OPT record, if any.
    pub edns: Option<ResponseEdns>,
    /// Size of the message in bytes.
    pub size: usize,
}

impl Response {
    /// Parses a response message.
    pub fn parse(msg: &[u8]) -> Result<Response, String> {
        crate::wire_adapter::parse_response(msg)
    }

    /// The rcode's name (`NOERROR`, `NXDOMAIN`…).
    pub fn rcode_name(&self) -> String {
        rcode_name(self.rcode)
    }
}

impl fmt::Display for Response {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            ";; opcode {} rcode {} id {} flags: {}; {} bytes",
            self.opcode,
            self.rcode_name(),
            self.id,
            self.flags,
            self.size
        )?;
        if let Some(e) = &self.edns {
            writeln!(
                f,
                ";; EDNS version {} udp {} do {} options {:?}",
                e.version, e.udp_size, e.dnssec_ok, e.options
            )?;
        }
        for q in &self.question {
            writeln!(f, ";{q}")?;
        }
        for (title, rrs) in [
            ("ANSWER", &self.answer),
            ("AUTHORITY", &self.authority),
            ("ADDITIONAL", &self.additional),
        ] {
            if !rrs.is_empty() {
                writeln!(f, ";; {title}")?;
                for rr in rrs {
                    writeln!(f, "{rr}")?;
                }
            }
        }
        Ok(())
    }
}

/// The name of an rcode.
pub fn rcode_name(rcode: u16) -> String {
    match rcode {
        0 => "NOERROR".into(),
        1 => "FORMERR".into(),
        2 => "SERVFAIL".into(),
        3 => "NXDOMAIN".into(),
        4 => "NOTIMP".into(),
        5 => "REFUSED".into(),
        6 => "YXDOMAIN".into(),
        7 => "YXRRSET".into(),
        8 => "NXRRSET".into(),
        9 => "NOTAUTH".into(),
        10 => "NOTZONE".into(),
        16 => "BADVERS".into(),
        23 => "BADCOOKIE".into(),
        n => format!("RCODE{n}"),
    }
}

/// What came back for one query from one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A response that parsed.
    Response(Response),
    /// No response within the timeout.
    Timeout,
    /// Bytes came back but did not parse.
    Malformed {
        /// Why it did not parse.
        error: String,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// A socket error (connection refused, reset…).
    Io(String),
}

impl Outcome {
    /// The response, if there is one.
    pub fn response(&self) -> Option<&Response> {
        match self {
            Outcome::Response(r) => Some(r),
            _ => None,
        }
    }

    /// A one-line summary.
    pub fn summary(&self) -> String {
        match self {
            Outcome::Response(r) => format!(
                "{} [{}] {}/{}/{}",
                r.rcode_name(),
                r.flags,
                r.answer.len(),
                r.authority.len(),
                r.additional.len()
            ),
            Outcome::Timeout => "timeout".into(),
            Outcome::Malformed { error, bytes } => {
                format!("malformed ({error}, {} bytes)", bytes.len())
            }
            Outcome::Io(e) => format!("i/o error: {e}"),
        }
    }
}

/// Sends `msg` to `server` and waits up to `timeout` for one response. For UDP,
/// datagrams whose id differs from the query's are skipped.
pub fn exchange(
    server: SocketAddr,
    msg: &[u8],
    transport: Transport,
    timeout: Duration,
) -> Outcome {
    let raw = match transport {
        Transport::Udp => exchange_udp(server, msg, timeout),
        Transport::Tcp => exchange_tcp(server, msg, timeout),
    };
    outcome_of(raw, transport)
}

/// [`exchange`] over UDP from a socket bound to `source` (another
/// 127.0.0.0/8 address, for plugins that decide by the client's address).
pub fn exchange_from(server: SocketAddr, source: IpAddr, msg: &[u8], timeout: Duration) -> Outcome {
    outcome_of(
        exchange_udp_from(server, source, msg, timeout),
        Transport::Udp,
    )
}

fn outcome_of(raw: io::Result<Vec<u8>>, transport: Transport) -> Outcome {
    match raw {
        Ok(bytes) => match Response::parse(&bytes) {
            Ok(r) => Outcome::Response(r),
            Err(error) => Outcome::Malformed { error, bytes },
        },
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            Outcome::Timeout
        }
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof && transport == Transport::Tcp => {
            Outcome::Io("connection closed without a response".into())
        }
        Err(e) => Outcome::Io(e.to_string()),
    }
}

/// Sends `msg` over UDP and returns the first datagram with a matching id.
pub fn exchange_udp(server: SocketAddr, msg: &[u8], timeout: Duration) -> io::Result<Vec<u8>> {
    // From the loopback address of the server's family (IPv6 clients
    // for dns64's tests).
    let source = if server.is_ipv6() {
        IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)
    } else {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    };
    exchange_udp_from(server, source, msg, timeout)
}

/// [`exchange_udp`] from a socket bound to `source`.
pub fn exchange_udp_from(
    server: SocketAddr,
    source: IpAddr,
    msg: &[u8],
    timeout: Duration,
) -> io::Result<Vec<u8>> {
    let sock = UdpSocket::bind((source, 0))?;
    sock.connect(server)?;
    sock.set_read_timeout(Some(timeout))?;
    sock.send(msg)?;
    let mut buf = vec![0u8; 65535];
    loop {
        let n = sock.recv(&mut buf)?;
        if msg.len() < 2 || n < 2 || buf[..2] == msg[..2] {
            buf.truncate(n);
            return Ok(buf);
        }
    }
}

/// Sends `msg` over a new TCP connection and returns one length-prefixed response.
pub fn exchange_tcp(server: SocketAddr, msg: &[u8], timeout: Duration) -> io::Result<Vec<u8>> {
    let mut s = TcpStream::connect_timeout(&server, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    let len = u16::try_from(msg.len()).map_err(|_| io::Error::other("message too long for TCP"))?;
    let mut framed = Vec::with_capacity(msg.len() + 2);
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(msg);
    s.write_all(&framed)?;
    let mut lenbuf = [0u8; 2];
    s.read_exact(&mut lenbuf)?;
    let mut buf = vec![0u8; usize::from(u16::from_be_bytes(lenbuf))];
    s.read_exact(&mut buf)?;
    Ok(buf)
}
