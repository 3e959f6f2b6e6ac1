//! Log formats: parsed once at setup into nodes, rendered per query into
//! a caller's buffer without allocating (CoreDNS `pkg/replacer`).

use std::io::Write as _;
use std::net::IpAddr;

use clusterdns_contract::Request;
use clusterdns_wire::{HEADER_LEN, Header, Rcode};

/// CoreDNS's common (and default) log format.
pub const COMMON_LOG_FORMAT: &str = r#"{remote}:{port} - {>id} "{type} {class} {name} {proto} {size} {>do} {>bufsize}" {rcode} {>rflags} {rsize} {duration}"#;

/// The combined format: common plus the opcode.
pub const COMBINED_LOG_FORMAT: &str = r#"{remote}:{port} - {>id} "{type} {class} {name} {proto} {size} {>do} {>bufsize}" {rcode} {>rflags} {rsize} {duration} "{>opcode}""#;

/// Printed for a value that is not known.
const EMPTY: &[u8] = b"-";

/// A placeholder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Label {
    Type,
    Name,
    Class,
    Proto,
    Size,
    Remote,
    Port,
    Local,
    Id,
    Opcode,
    Do,
    Bufsize,
    Rcode,
    Rsize,
    Duration,
    Rflags,
}

impl Label {
    fn from_placeholder(s: &str) -> Option<Label> {
        Some(match s {
            "{type}" => Label::Type,
            "{name}" => Label::Name,
            "{class}" => Label::Class,
            "{proto}" => Label::Proto,
            "{size}" => Label::Size,
            "{remote}" => Label::Remote,
            "{port}" => Label::Port,
            "{local}" => Label::Local,
            "{>id}" => Label::Id,
            "{>opcode}" => Label::Opcode,
            "{>do}" => Label::Do,
            "{>bufsize}" => Label::Bufsize,
            "{rcode}" => Label::Rcode,
            "{rsize}" => Label::Rsize,
            "{duration}" => Label::Duration,
            "{>rflags}" => Label::Rflags,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Literal(String),
    Label(Label),
    /// `{/name}`: metadata; there is no *metadata* plugin, so it prints `-`.
    Metadata,
}

/// A parsed log format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Format {
    nodes: Vec<Node>,
}

impl Format {
    /// Parses `s` exactly as CoreDNS does: find each `}`, back up to the
    /// nearest `{`; known placeholders become values, `{/x}` metadata,
    /// anything else stays literal text.
    pub fn parse(s: &str) -> Format {
        let mut nodes = Vec::new();
        let mut s = s;
        while let Some(j) = s.find('}') {
            let Some(i) = s[..j].rfind('{') else {
                nodes.push(Node::Literal(s[..=j].to_string()));
                s = &s[j + 1..];
                continue;
            };
            let val = &s[i..=j];
            let node = if let Some(l) = Label::from_placeholder(val) {
                Node::Label(l)
            } else if val.starts_with("{/") {
                Node::Metadata
            } else {
                Node::Literal(s[..=j].to_string())
            };
            if i != 0 && !matches!(node, Node::Literal(_)) {
                nodes.push(Node::Literal(s[..i].to_string()));
            }
            nodes.push(node);
            s = &s[j + 1..];
        }
        if !s.is_empty() {
            nodes.push(Node::Literal(s.to_string()));
        }
        // Merge adjacent literals (fewer writes per line).
        let mut merged: Vec<Node> = Vec::with_capacity(nodes.len());
        for n in nodes {
            match (merged.last_mut(), n) {
                (Some(Node::Literal(a)), Node::Literal(b)) => a.push_str(&b),
                (_, n) => merged.push(n),
            }
        }
        Format { nodes: merged }
    }

    /// Appends the line for `req` and its `reply` to `out`; `rsize` is
    /// the reply's uncompressed length (`{rsize}`, as CoreDNS measures a
    /// reply before miekg/dns compresses it).
    pub fn render(&self, req: &Request<'_>, reply: &[u8], rsize: usize, out: &mut Vec<u8>) {
        for n in &self.nodes {
            match n {
                Node::Literal(s) => out.extend_from_slice(s.as_bytes()),
                Node::Metadata => out.extend_from_slice(EMPTY),
                Node::Label(l) => value(*l, req, reply, rsize, out),
            }
        }
    }
}

fn addr(ip: IpAddr, out: &mut Vec<u8>) {
    let _ = match ip {
        IpAddr::V4(v4) => write!(out, "{v4}"),
        IpAddr::V6(v6) => write!(out, "[{v6}]"),
    };
}

fn value(l: Label, req: &Request<'_>, reply: &[u8], rsize: usize, out: &mut Vec<u8>) {
    let q = req.query;
    let _ = match l {
        Label::Type => write!(out, "{}", req.qtype()),
        Label::Name => write!(out, "{}", req.qname_lower()),
        Label::Class => write!(out, "{}", req.qclass()),
        Label::Proto => write!(out, "{}", req.proto.as_str()),
        Label::Size => write!(out, "{}", q.raw().len()),
        Label::Remote => {
            addr(req.client.ip(), out);
            Ok(())
        }
        Label::Port => write!(out, "{}", req.client.port()),
        Label::Local => {
            addr(req.local.ip(), out);
            Ok(())
        }
        Label::Id => write!(out, "{}", q.id()),
        Label::Opcode => write!(out, "{}", q.header().opcode().0),
        Label::Do => write!(out, "{}", req.do_bit()),
        Label::Bufsize => write!(out, "{}", req.size()),
        Label::Rcode => match Header::parse(reply) {
            Ok(h) => write!(out, "{}", Rcode(u16::from(h.rcode_low()))),
            Err(_) => out.write_all(EMPTY),
        },
        Label::Rsize => write!(out, "{rsize}"),
        Label::Duration => write!(out, "{}s", req.received.elapsed().as_secs_f64()),
        Label::Rflags => {
            if reply.len() < HEADER_LEN {
                out.write_all(EMPTY)
            } else {
                match Header::parse(reply) {
                    Ok(h) => {
                        flags(&h, out);
                        Ok(())
                    }
                    Err(_) => out.write_all(EMPTY),
                }
            }
        }
    };
}

/// `qr,aa,tc,rd,ra,z,ad,cd`, the set ones, comma-separated.
fn flags(h: &Header, out: &mut Vec<u8>) {
    let all = [
        (h.qr(), "qr"),
        (h.aa(), "aa"),
        (h.tc(), "tc"),
        (h.rd(), "rd"),
        (h.ra(), "ra"),
        (h.z(), "z"),
        (h.ad(), "ad"),
        (h.cd(), "cd"),
    ];
    let mut first = true;
    for (on, name) in all {
        if on {
            if !first {
                out.push(b',');
            }
            out.extend_from_slice(name.as_bytes());
            first = false;
        }
    }
}
