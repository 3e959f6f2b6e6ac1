//! Copying a message's records into another message without decoding
//! them: every compression pointer is moved to where the name it points
//! at lies in the new message.
//!
//! A plugin that changes the front of a finished reply (a new question,
//! one record put before the answer) would otherwise parse every record
//! and encode it again; the records' bytes stay as they are here and only
//! the two bytes of each pointer change, so every rdata length stays too.
//!
//! Pointers are found where this crate's own decoder
//! ([`Record`](crate::Record)) reads names: owner names, and the rdata of
//! CNAME, NS, PTR, MX, SRV and SOA. The rdata of any other type is copied
//! as it is, as the decoder keeps it raw.

use crate::error::ParseError;
use crate::header::HEADER_LEN;
use crate::read::{read_record, skip_name};
use crate::types::Rtype;

/// The highest offset a compression pointer can hold (14 bits).
const MAX_POINTER: usize = 0x3FFF;

/// Appends to `out` the `count` records of `msg` starting at offset
/// `from` (one after the other, as in a message's sections), each pointer
/// to offset `p` of `msg` replaced by one to `map(p)` in `out`. Returns
/// the offset in `msg` just past the last record copied.
///
/// `map` must keep pointers valid in `out`: a name at `map(p)` there that
/// reads as the one at `p` in `msg`, lying wholly before the pointer
/// (pointers point backwards: the rule [`Message::parse`] checks). For a
/// block of records moved by a fixed distance, pointers into the block
/// move by that distance.
///
/// # Errors
///
/// [`ParseError`] when a record does not parse (a name that does not
/// read, an rdata name running past its rdata), when `map` gives `None`
/// for a pointer, or when a moved pointer would not fit in 14 bits; `out`
/// then holds part of the copy.
///
/// [`Message::parse`]: crate::Message::parse
pub fn relocate_records(
    msg: &[u8],
    from: usize,
    count: usize,
    out: &mut Vec<u8>,
    map: impl Fn(usize) -> Option<usize>,
) -> Result<usize, ParseError> {
    let mut off = from;
    for _ in 0..count {
        let rec = read_record(msg, &mut off)?;
        let fixed = rec.rdata.start - 10;
        copy_name(msg, rec.name_start, out, &map)?;
        out.extend_from_slice(&msg[fixed..rec.rdata.start]);
        let rdata = &rec.rdata;
        // Where the names in the rdata start (relative to it), and the
        // fixed-size tail after them.
        let names: &[usize] = match rec.rtype {
            Rtype::CNAME | Rtype::NS | Rtype::PTR => &[0],
            Rtype::MX => &[2],
            Rtype::SRV => &[6],
            // mname, then rname right after it.
            Rtype::SOA => &[0, usize::MAX],
            _ => &[],
        };
        let mut at = rdata.start;
        for &n in names {
            if n != usize::MAX {
                let start = rdata.start + n;
                out.extend_from_slice(msg.get(at..start).ok_or(ParseError)?);
                at = start;
            }
            let mut end = at;
            skip_name(&msg[..rdata.end], &mut end)?;
            copy_name(msg, at, out, &map)?;
            at = end;
        }
        out.extend_from_slice(msg.get(at..rdata.end).ok_or(ParseError)?);
    }
    Ok(off)
}

/// Copies the name at `at` in `msg` (already validated) up to and
/// including its root label or first pointer, moving the pointer.
fn copy_name(
    msg: &[u8],
    mut at: usize,
    out: &mut Vec<u8>,
    map: &impl Fn(usize) -> Option<usize>,
) -> Result<(), ParseError> {
    loop {
        let len = usize::from(*msg.get(at).ok_or(ParseError)?);
        if len & 0xC0 == 0xC0 {
            let low = usize::from(*msg.get(at + 1).ok_or(ParseError)?);
            let target = map(((len & 0x3F) << 8) | low).ok_or(ParseError)?;
            if !(HEADER_LEN..=MAX_POINTER).contains(&target) {
                return Err(ParseError);
            }
            // In range: the casts keep every bit.
            out.extend_from_slice(&[0xC0 | (target >> 8) as u8, target as u8]);
            return Ok(());
        }
        out.extend_from_slice(msg.get(at..at + 1 + len).ok_or(ParseError)?);
        if len == 0 {
            return Ok(());
        }
        at += 1 + len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Class, Message, MessageBuilder, Name, RData, Section};

    fn name(s: &str) -> Name {
        Name::from_ascii(s).unwrap()
    }

    /// A reply with pointers in owner names and in every rdata kind the
    /// decoder reads names in, moved behind a longer question.
    #[test]
    fn moved_records_read_the_same() {
        let q = name("web.example.com.");
        let (target, mx) = (name("alias.example.com."), name("mx.web.example.com."));
        let (srv, zone) = (name("srv.alias.example.com."), name("example.com."));
        let (ns, mbox) = (name("ns.example.com."), name("hostmaster.web.example.com."));
        let soa = RData::Soa {
            mname: &ns,
            rname: &mbox,
            serial: 1,
            refresh: 2,
            retry: 3,
            expire: 4,
            minimum: 5,
        };
        let records = [
            (Section::Answer, &q, RData::Cname(&target)),
            (Section::Answer, &target, RData::A([10, 0, 0, 1].into())),
            (
                Section::Answer,
                &target,
                RData::Mx {
                    preference: 5,
                    exchange: &mx,
                },
            ),
            (
                Section::Answer,
                &target,
                RData::Srv {
                    priority: 1,
                    weight: 2,
                    port: 53,
                    target: &srv,
                },
            ),
            (Section::Authority, &zone, soa),
        ];
        let mut old = Vec::new();
        let mut b = MessageBuilder::new(&mut old, Default::default());
        b.push_question(&q, Rtype::A, Class::IN).unwrap();
        for (section, owner, rdata) in &records {
            b.push(*section, owner, Class::IN, 30, rdata).unwrap();
        }
        b.push_opt(1232, false, &[]).unwrap();
        b.finish();
        let m = Message::parse(&old).unwrap();
        let want: Vec<_> = m
            .records()
            .map(|r| (r.section, r.to_owned_record(&m).unwrap()))
            .collect();
        let qend = m.question_range().end;

        // The layout autopath writes: a longer question, then a CNAME to
        // the old question's name (written whole, so pointers into the
        // old question go there), then the old records.
        let long = name("web.example.com.ns.svc.cluster.local.");
        let mut out = old[..HEADER_LEN].to_vec();
        out[7] += 1;
        out.extend_from_slice(long.as_wire());
        out.extend_from_slice(&old[qend - 4..qend]);
        out.extend_from_slice(&[0xC0, 12, 0, 5, 0, 1, 0, 0, 0, 30, 0, q.len() as u8]);
        let copy_at = out.len();
        out.extend_from_slice(&old[HEADER_LEN..qend - 4]);
        let start = out.len();
        let end = relocate_records(&old, qend, want.len(), &mut out, |p| {
            if p >= qend {
                Some(p - qend + start)
            } else if p < qend - 4 {
                Some(p - HEADER_LEN + copy_at)
            } else {
                None
            }
        })
        .unwrap();
        assert_eq!(end, old.len());
        assert_eq!(out.len(), old.len() + start - qend);
        let m = Message::parse(&out).unwrap();
        assert_eq!(m.question().unwrap().0, long);
        let got: Vec<_> = m
            .records()
            .map(|r| (r.section, r.to_owned_record(&m).unwrap()))
            .collect();
        assert_eq!(
            got[0].1.to_string(),
            "web.example.com.ns.svc.cluster.local.\t30\tIN\tCNAME\tweb.example.com."
        );
        assert_eq!(got[1..], want[..]);
    }

    #[test]
    fn refused_pointers_and_bad_rdata_are_errors() {
        let q = name("a.example.");
        let mut old = Vec::new();
        let mut b = MessageBuilder::new(&mut old, Default::default());
        b.push_question(&q, Rtype::A, Class::IN).unwrap();
        b.push(Section::Answer, &q, Class::IN, 1, &RData::Cname(&q))
            .unwrap();
        b.finish();
        let qend = Message::parse(&old).unwrap().question_range().end;
        let mut out = Vec::new();
        assert_eq!(
            relocate_records(&old, qend, 1, &mut out, |_| None),
            Err(ParseError)
        );
        out.clear();
        assert_eq!(
            relocate_records(&old, qend, 1, &mut out, |p| Some(p + MAX_POINTER)),
            Err(ParseError)
        );
        // An rdata length cut short of the CNAME target it holds.
        let mut short = old.clone();
        let rdlen_at = short.len() - 4;
        short[rdlen_at + 1] = 1;
        short.truncate(rdlen_at + 3);
        out.clear();
        assert_eq!(
            relocate_records(&short, qend, 1, &mut out, Some),
            Err(ParseError)
        );
    }
}
