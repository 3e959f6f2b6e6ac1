#![doc = include_str!("README.md")]

use std::sync::Arc;

use clusterdns_contract::{Flow, Outcome, Plugin, PluginDef, Request, ResponseWriter, SetupCtx};
use clusterdns_corefile::{ConfigError, Directive};
use clusterdns_wire::{Header, Message, Rtype};

/// Registration of *nsid*.
pub const DEF: PluginDef = PluginDef {
    name: "nsid",
    setup,
};

/// The EDNS0 option code of NSID (RFC 5001).
const NSID: u16 = 3;

fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    let d = clusterdns_contract::parse::once(dirs)?;
    let data = if d.args.is_empty() {
        crate::pkg::hostname()
    } else {
        d.arg_texts().collect::<Vec<_>>().join(" ")
    };
    // An option's data is at most 65535 bytes; a longer text could not be
    // sent (CoreDNS would fail to pack every such reply).
    if data.len() > usize::from(u16::MAX) - 4 {
        return Err(d.err("nsid data too long"));
    }
    ctx.add_plugin(Arc::new(Nsid {
        data: data.into_bytes(),
    }));
    Ok(())
}

/// The *nsid* handler.
#[derive(Debug)]
pub struct Nsid {
    data: Vec<u8>,
}

impl Plugin for Nsid {
    fn name(&self) -> &'static str {
        "nsid"
    }

    fn query(&self, _req: &Request<'_>, _w: &mut ResponseWriter) -> Flow {
        Flow::Next
    }

    fn response(&self, req: &Request<'_>, w: &mut ResponseWriter, outcome: &Outcome) {
        // The server's own error replies bypass CoreDNS's nsid writer.
        if outcome.error.is_some() || w.written_by_server() {
            return;
        }
        let Some(e) = req.query.edns() else { return };
        if !req.query.edns_options().any(|(code, _)| code == NSID) {
            return;
        }
        let opt = if w.may_have_opt() {
            opt_rdata(w.bytes())
        } else {
            None
        };
        match opt {
            Some((rdlen_at, rdata)) => {
                // The writer already counts it as possibly carrying an OPT.
                set_nsid(w.buffer_mut(), rdlen_at, rdata, &self.data);
            }
            None => {
                // An OPT of our own (size from the query, DO set as
                // CoreDNS's SetEdns0(size, true)); the scrub must now look
                // for it, so the message is marked as possibly carrying one.
                let buf = w.raw_buffer();
                append_opt(buf, e.udp_size, &self.data);
            }
        }
    }
}

/// Where the reply's OPT record keeps its RDLENGTH, and the range of its
/// rdata.
fn opt_rdata(msg: &[u8]) -> Option<(usize, std::ops::Range<usize>)> {
    let m = Message::parse(msg).ok()?;
    let r = m.records().find(|r| r.rtype == Rtype::OPT)?;
    Some((r.rdata.start.checked_sub(2)?, r.rdata))
}

/// Gives every NSID option in the OPT rdata at `rdata` the data `data`,
/// or adds one when there is none; then fixes RDLENGTH at `rdlen_at`.
fn set_nsid(buf: &mut Vec<u8>, rdlen_at: usize, rdata: std::ops::Range<usize>, data: &[u8]) {
    let mut at = rdata.start;
    let mut end = rdata.end;
    let mut found = false;
    while at + 4 <= end {
        let code = u16::from_be_bytes([buf[at], buf[at + 1]]);
        let len = usize::from(u16::from_be_bytes([buf[at + 2], buf[at + 3]]));
        if at + 4 + len > end {
            return;
        }
        if code == NSID {
            found = true;
            buf.splice(at + 4..at + 4 + len, data.iter().copied());
            buf[at + 2..at + 4].copy_from_slice(&data_len(data).to_be_bytes());
            end = end + data.len() - len;
            at += 4 + data.len();
        } else {
            at += 4 + len;
        }
    }
    if !found {
        let mut head = [0u8; 4];
        head[..2].copy_from_slice(&NSID.to_be_bytes());
        head[2..].copy_from_slice(&data_len(data).to_be_bytes());
        buf.splice(end..end, head.iter().chain(data).copied());
        end += 4 + data.len();
    }
    let rdlen = u16::try_from(end - rdata.start).unwrap_or(u16::MAX);
    buf[rdlen_at..rdlen_at + 2].copy_from_slice(&rdlen.to_be_bytes());
}

fn data_len(data: &[u8]) -> u16 {
    // Setup refuses data that does not fit.
    u16::try_from(data.len()).unwrap_or(u16::MAX)
}

/// Appends an OPT record holding only the NSID option and counts it.
fn append_opt(buf: &mut Vec<u8>, udp_size: u16, data: &[u8]) {
    let Ok(mut h) = Header::parse(buf) else {
        return;
    };
    buf.push(0);
    buf.extend_from_slice(&41u16.to_be_bytes());
    buf.extend_from_slice(&udp_size.to_be_bytes());
    buf.extend_from_slice(&0x8000u32.to_be_bytes());
    buf.extend_from_slice(&(data_len(data) + 4).to_be_bytes());
    buf.extend_from_slice(&NSID.to_be_bytes());
    buf.extend_from_slice(&data_len(data).to_be_bytes());
    buf.extend_from_slice(data);
    h.arcount += 1;
    h.write(buf);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{setup, setup_err};

    #[test]
    fn setup_table() {
        for c in [
            ". {\n nsid\n}",
            ". {\n nsid Use The Force\n}",
            ". {\n nsid \"a b\"\n}",
        ] {
            let r = setup(DEF, c).unwrap_or_else(|e| panic!("{c}: {e}"));
            assert_eq!(r.plugins.len(), 1, "{c}");
        }
        let e = setup_err(DEF, ". {\n nsid a\n nsid b\n}");
        assert!(e.contains("only be used once"), "{e}");
    }

    /// An OPT rdata with `opts`, in a buffer with a byte before and after.
    fn opt_buf(opts: &[(u16, &[u8])]) -> (Vec<u8>, std::ops::Range<usize>) {
        let mut b = vec![0xaa, 0, 0];
        for (code, data) in opts {
            b.extend_from_slice(&code.to_be_bytes());
            b.extend_from_slice(&(data.len() as u16).to_be_bytes());
            b.extend_from_slice(data);
        }
        let end = b.len();
        b.push(0xbb);
        (b, 3..end)
    }

    #[test]
    fn nsid_is_replaced_or_added_and_rdlength_fixed() {
        let (mut b, r) = opt_buf(&[(10, b"cookie12"), (3, b"old-id")]);
        set_nsid(&mut b, 1, r, b"new");
        let (want, _) = opt_buf(&[(10, b"cookie12"), (3, b"new")]);
        assert_eq!(b[3..], want[3..]);
        assert_eq!(u16::from_be_bytes([b[1], b[2]]), 12 + 7);
        let (mut b, r) = opt_buf(&[(10, b"cookie12")]);
        set_nsid(&mut b, 1, r, b"id");
        let (want, _) = opt_buf(&[(10, b"cookie12"), (3, b"id")]);
        assert_eq!(b[3..], want[3..]);
        assert_eq!(u16::from_be_bytes([b[1], b[2]]), 12 + 6);
    }
}
