//! Cutting a response down to the client's size, like CoreDNS's
//! `ScrubWriter` (miekg/dns `Msg.Truncate`).
//!
//! Works on the finished wire message in place. Records are kept as a
//! prefix in message order (answer, authority, additional): since
//! compression pointers only point backwards, any prefix stays valid.
//! The OPT record is kept (moved to the end if it was past the cut),
//! because the client must still see the EDNS parameters and extended
//! rcode.
//!
//! A message that has to be cut is first validated with
//! [`Message::parse`], so `truncate` accepts exactly what `Message::parse`
//! accepts and its output always parses. In particular an OPT record
//! (the first one of the additional section) with an owner other than the
//! root (RFC 6891 §6.1.2) or an option list that does not fill its rdata
//! exactly is an error, not something to cut around. miekg/dns, under
//! CoreDNS, would not get as far either for the bad option list: its
//! `Msg.Unpack` fails with "overflow unpacking opt", so the forward plugin
//! never has a message to scrub. miekg does not check the OPT owner; here
//! it is rejected like everywhere else in this crate ([`Message::parse`],
//! [`Query::parse`](crate::Query::parse)): keeping such a record would
//! hand the client a message this crate itself calls malformed.

use crate::edns::MAX_UDP_PLAIN;
use crate::error::ParseError;
use crate::header::{Header, set_counts, set_tc};
use crate::message::Message;
use crate::read::{RecordHead, read_record};

/// Walks the records of `msg`, calling `f(section index, record)`.
fn for_each_record(
    msg: &[u8],
    header: &Header,
    records_start: usize,
    mut f: impl FnMut(usize, &RecordHead),
) -> Result<(), ParseError> {
    let mut off = records_start;
    for (idx, count) in [header.ancount, header.nscount, header.arcount]
        .into_iter()
        .enumerate()
    {
        for _ in 0..count {
            let rec = read_record(msg, &mut off)?;
            f(idx, &rec);
        }
    }
    Ok(())
}

/// If `msg` is longer than `max` (taken as at least 512, per RFC 6891),
/// keeps the header, the question and as many whole records as fit, in
/// order, plus the OPT record if there was one; sets TC if any record was
/// dropped (an existing TC stays) and fixes the counts. Returns whether it
/// changed anything (bytes after the last record are dropped too).
/// Allocates nothing; when the message already fits it does not even
/// parse it.
///
/// # Errors
///
/// [`ParseError`], with `msg` untouched, if `msg` is too long and
/// [`Message::parse`] rejects it (see the [module docs](self) for the OPT
/// record).
pub fn truncate(msg: &mut Vec<u8>, max: usize) -> Result<bool, ParseError> {
    let max = max.max(usize::from(MAX_UDP_PLAIN));
    if msg.len() <= max {
        return Ok(false);
    }
    // First pass: validate exactly as the output will be validated, and
    // find the OPT record.
    let (header, records_start, opt) = {
        let m = Message::parse(msg)?;
        (m.header(), m.question_range().end, m.opt_record())
    };
    let opt_len = opt.as_ref().map_or(0, |r| r.len());

    // Second pass: the longest prefix of non-OPT records that fits next to
    // the OPT record.
    let mut kept = [0u16; 3];
    let mut cut = records_start;
    let mut full = records_start + opt_len > max;
    let mut opt_in_prefix = false;
    for_each_record(msg, &header, records_start, |idx, rec| {
        if full {
            return;
        }
        let is_opt = opt.as_ref().is_some_and(|r| r.start == rec.name_start);
        let opt_before = if opt_in_prefix || is_opt { opt_len } else { 0 };
        if rec.end() - opt_before + opt_len > max {
            full = true;
            return;
        }
        kept[idx] += 1;
        cut = rec.end();
        opt_in_prefix |= is_opt;
    })?;

    let [an, ns, mut ar] = kept;
    let dropped = an < header.ancount
        || ns < header.nscount
        || ar + u16::from(opt.is_some() && !opt_in_prefix) < header.arcount;
    match opt {
        Some(r) if !opt_in_prefix => {
            msg.copy_within(r, cut);
            msg.truncate(cut + opt_len);
            ar += 1;
        }
        _ => msg.truncate(cut),
    }
    set_counts(msg, header.qdcount, an, ns, ar);
    if dropped {
        set_tc(msg, true);
    }
    Ok(true)
}
