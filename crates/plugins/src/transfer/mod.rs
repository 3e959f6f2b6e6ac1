#![doc = include_str!("README.md")]

use std::net::IpAddr;
use std::sync::Arc;

use clusterdns_contract::transfer::TransferError;
use clusterdns_contract::{
    ChainTail, Flow, Plugin, PluginDef, PluginError, Proto, Request, ResponseWriter, SetupCtx,
};
use clusterdns_corefile::{ConfigError, Directive};
use clusterdns_wire::{Message, MessageBuilder, Name, Rcode, Record, RecordData, Rtype, Section};

/// Registration of *transfer*.
pub const DEF: PluginDef = PluginDef {
    name: "transfer",
    setup,
};

/// The largest DNS message over TCP.
const MAX_TCP_MESSAGE: usize = 65535;

/// Who may transfer.
#[derive(Debug, Clone, PartialEq, Eq)]
enum To {
    /// `*`: anyone.
    Any,
    /// One address (its port, used for notifies in CoreDNS, plays no part).
    Ip(IpAddr),
}

/// One `transfer` block: its zones and who may transfer them.
#[derive(Debug)]
struct Xfr {
    zones: Vec<Name>,
    to: Vec<To>,
}

impl Xfr {
    fn allowed(&self, ip: IpAddr) -> bool {
        self.to.iter().any(|t| match t {
            To::Any => true,
            To::Ip(a) => *a == ip,
        })
    }
}

/// The *transfer* handler.
#[derive(Debug)]
pub struct Transfer {
    xfrs: Vec<Xfr>,
    /// The plugins behind this one, asked in order for the zone.
    tail: ChainTail,
}

impl Transfer {
    /// The block whose zone is the longest match of `name` (the first of
    /// equals, as CoreDNS's `longestMatch`).
    fn longest_match(&self, name: &Name) -> Option<&Xfr> {
        let mut best: Option<(&Xfr, usize)> = None;
        for x in &self.xfrs {
            let Some(len) = x
                .zones
                .iter()
                .filter(|z| name.ends_with(z))
                .map(|z| z.len())
                .max()
            else {
                continue;
            };
            if best.is_none_or(|(_, b)| len > b) {
                best = Some((x, len));
            }
        }
        best.map(|(x, _)| x)
    }
}

/// The serial of an IXFR query's one authority SOA, or `None` when the
/// query does not carry exactly one SOA there.
fn ixfr_serial(raw: &[u8]) -> Option<u32> {
    let msg = Message::parse(raw).ok()?;
    let mut auth = msg.section(Section::Authority);
    let first = auth.next()?;
    if auth.next().is_some() || first.rtype != Rtype::SOA {
        return None;
    }
    match first.to_owned_record(&msg).ok()?.data {
        RecordData::Soa { serial, .. } => Some(serial),
        _ => None,
    }
}

impl Plugin for Transfer {
    fn name(&self) -> &'static str {
        "transfer"
    }

    fn query(&self, req: &Request<'_>, w: &mut ResponseWriter) -> Flow {
        let qtype = req.qtype();
        if qtype != Rtype::AXFR && qtype != Rtype::IXFR {
            return Flow::Next;
        }
        if req.proto != Proto::Tcp {
            w.write_error(req, Rcode::REFUSED);
            return Flow::Answered;
        }
        let qname = req.qname_lower();
        let Some(x) = self.longest_match(qname) else {
            return Flow::Next;
        };
        if !x.allowed(req.client.ip()) {
            let mut b = w.reply(req);
            b.set_rcode(Rcode::REFUSED);
            b.finish();
            return Flow::Answered;
        }
        let mut serial = 0;
        if qtype == Rtype::IXFR {
            match ixfr_serial(req.query.raw()) {
                Some(s) => serial = s,
                None => {
                    w.write_error(req, Rcode::SERVFAIL);
                    return Flow::Answered;
                }
            }
        }
        let Some(chain) = self.tail.get() else {
            return Flow::Next;
        };
        let mut out = Out::new(req, w);
        let mut sent = false;
        for p in chain.plugins() {
            let Some(t) = p.transferer() else { continue };
            match t.transfer(qname, serial, &mut |r| out.take(r)) {
                Err(TransferError::NotAuthoritative) => continue,
                Err(TransferError::Failed(msg)) => {
                    return Flow::Fail(PluginError::ServerFailure {
                        plugin: "transfer",
                        msg,
                    });
                }
                Ok(()) => {
                    sent = true;
                    break;
                }
            }
        }
        if !sent {
            return Flow::Next;
        }
        let (count, soa_serial) = out.finish();
        if count == 1 && soa_serial.is_some() {
            clusterdns_contract::info!(
                "transfer",
                "Outgoing noop, incremental transfer for up to date zone {:?} to {} for {} SOA serial",
                req.qname().to_string(),
                req.client.ip(),
                soa_serial.unwrap_or(0)
            );
        } else {
            clusterdns_contract::info!(
                "transfer",
                "Outgoing transfer of {} records of zone {:?} to {} for {} SOA serial",
                count,
                req.qname().to_string(),
                req.client.ip(),
                soa_serial.unwrap_or(0)
            );
        }
        Flow::Answered
    }
}

/// Records held before they are written: CoreDNS's batch limit, in bytes
/// of uncompressed records; compressed, a batch always fits a message.
const BATCH_BYTES: usize = 63_000;

/// Turns the records a [`Transferer`](clusterdns_contract::transfer::Transferer)
/// hands out into the transfer's messages as they come: the first in the
/// writer, the others after it. At most one batch is held.
struct Out<'a, 'r> {
    req: &'a Request<'r>,
    w: &'a mut ResponseWriter,
    batch: Vec<Record>,
    batch_len: usize,
    /// Messages written so far.
    messages: usize,
    count: usize,
    soa_serial: Option<u32>,
}

impl<'a, 'r> Out<'a, 'r> {
    fn new(req: &'a Request<'r>, w: &'a mut ResponseWriter) -> Self {
        Out {
            req,
            w,
            batch: Vec::new(),
            batch_len: 0,
            messages: 0,
            count: 0,
            soa_serial: None,
        }
    }

    fn take(&mut self, r: &Record) {
        if self.count == 0
            && let RecordData::Soa { serial, .. } = r.data
        {
            self.soa_serial = Some(serial);
        }
        self.count += 1;
        let len = wire_len(r);
        if !self.batch.is_empty() && self.batch_len + len > BATCH_BYTES {
            self.flush();
        }
        self.batch.push(r.clone());
        self.batch_len += len;
    }

    /// Writes the batch as messages (one, unless its records compress badly).
    fn flush(&mut self) {
        let batch = std::mem::take(&mut self.batch);
        let mut rest = &batch[..];
        while !rest.is_empty() {
            let n = if self.messages == 0 {
                let mut b = self.w.reply(self.req);
                b.set_aa(true);
                let n = fill(&mut b, rest);
                b.finish();
                n
            } else {
                let mut buf = Vec::with_capacity(MAX_TCP_MESSAGE);
                let mut b = MessageBuilder::reply_to(self.req.query, &mut buf);
                b.set_aa(true);
                let n = fill(&mut b, rest);
                // Each message mirrors the query's OPT, as the server does
                // for the first.
                if let Some(e) = self.req.query.edns() {
                    let _ = b.push_opt(e.udp_size, e.do_bit, &[]);
                }
                b.finish();
                if n > 0 {
                    self.w.push_more(buf);
                }
                n
            };
            self.messages += 1;
            if n == 0 {
                // A record larger than a message: nothing more can go.
                break;
            }
            rest = &rest[n..];
        }
        self.batch = batch;
        self.batch.clear();
        self.batch_len = 0;
    }

    /// Writes what is left; how many records were handed over and the
    /// first one's SOA serial. The SOA alone (an up-to-date IXFR) is a
    /// plain reply, not authoritative, as CoreDNS sends it.
    fn finish(mut self) -> (usize, Option<u32>) {
        if self.count == 1 && self.soa_serial.is_some() {
            let mut b = self.w.reply(self.req);
            if let Some(r) = self.batch.first() {
                let _ = b.push_record(Section::Answer, r);
            }
            b.finish();
        } else if !self.batch.is_empty() {
            self.flush();
        }
        (self.count, self.soa_serial)
    }
}

/// A record's length on the wire, names uncompressed (miekg/dns's `Len`).
fn wire_len(r: &Record) -> usize {
    let rdata = match &r.data {
        RecordData::A(_) => 4,
        RecordData::Aaaa(_) => 16,
        RecordData::Cname(n) | RecordData::Ns(n) | RecordData::Ptr(n) => n.len(),
        RecordData::Mx { exchange, .. } => 2 + exchange.len(),
        RecordData::Srv { target, .. } => 6 + target.len(),
        RecordData::Txt(s) => s.iter().map(|x| 1 + x.len()).sum(),
        RecordData::Soa { mname, rname, .. } => mname.len() + rname.len() + 20,
        RecordData::Hinfo { cpu, os } => 2 + cpu.len() + os.len(),
        RecordData::Other { data, .. } => data.len(),
    };
    r.name.len() + 10 + rdata
}

/// Pushes records into `b` until one does not fit (room is kept for an
/// OPT record); how many went in.
fn fill(b: &mut MessageBuilder<'_>, records: &[Record]) -> usize {
    b.set_limit(MAX_TCP_MESSAGE - 64);
    let mut n = 0;
    for r in records {
        if b.push_record(Section::Answer, r).is_err() {
            break;
        }
        n += 1;
    }
    b.set_limit(MAX_TCP_MESSAGE);
    n
}

/// An address of `to`, as CoreDNS's `parse.HostPort(host, "53")` accepts
/// it: an address, or `host:port` / `[host]:port` whose host is one (the
/// port is not checked).
fn host_port(s: &str) -> Result<IpAddr, String> {
    let host = split_host_port(s).map_or(s, |(h, _)| h);
    let no_zone = host.split('%').next().unwrap_or(host);
    no_zone
        .parse::<IpAddr>()
        .map_err(|_| format!("must specify an IP address: `{host}'"))
}

/// Go's `net.SplitHostPort`, for the forms it accepts.
fn split_host_port(s: &str) -> Option<(&str, &str)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        return Some((h, after.strip_prefix(':')?));
    }
    let (h, p) = s.rsplit_once(':')?;
    (!h.contains(':')).then_some((h, p))
}

fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    let block_zones = ctx.zones();
    let mut xfrs = Vec::new();
    for d in dirs {
        let args: Vec<&str> = d.arg_texts().collect();
        let zones = clusterdns_contract::parse::origins_or_block(&args, &block_zones);
        let mut to = Vec::new();
        let mut source: Option<IpAddr> = None;
        for p in &d.block {
            let args: Vec<&str> = p.arg_texts().collect();
            match p.name.text.as_str() {
                "to" => {
                    if args.is_empty() {
                        return Err(p.arg_err());
                    }
                    for a in args {
                        if a == "*" {
                            to.push(To::Any);
                            continue;
                        }
                        to.push(To::Ip(host_port(a).map_err(|m| p.err(m))?));
                    }
                }
                "source" => {
                    let [a] = args.as_slice() else {
                        return Err(p.arg_err());
                    };
                    if source.is_some() {
                        return Err(p.err("source already specified"));
                    }
                    source = Some(
                        a.parse()
                            .map_err(|_| p.err(format!("invalid source address {a:?}")))?,
                    );
                }
                other => return Err(p.err(format!("unknown property {other:?}"))),
            }
        }
        if to.is_empty() {
            return Err(d.err("'to' is required"));
        }
        xfrs.push(Xfr { zones, to });
    }
    let tail = ChainTail::default();
    ctx.add_plugin(Arc::new(Transfer {
        xfrs,
        tail: tail.clone(),
    }));
    ctx.bind_tail(&tail);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn to_addresses_as_coredns_reads_them() {
        assert_eq!(host_port("10.0.0.1"), Ok("10.0.0.1".parse().unwrap()));
        assert_eq!(host_port("10.0.0.1:5300"), Ok("10.0.0.1".parse().unwrap()));
        assert_eq!(host_port("[::1]:53"), Ok("::1".parse().unwrap()));
        assert_eq!(host_port("::1"), Ok("::1".parse().unwrap()));
        assert_eq!(host_port("10.0.0.1:x"), Ok("10.0.0.1".parse().unwrap()));
        assert_eq!(
            host_port("[::1]"),
            Err("must specify an IP address: `[::1]'".into())
        );
        assert_eq!(
            host_port("example.com"),
            Err("must specify an IP address: `example.com'".into())
        );
        assert_eq!(
            host_port("example.com:53"),
            Err("must specify an IP address: `example.com'".into())
        );
    }
}
