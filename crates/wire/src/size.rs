//! The length a message would have with no name compressed: what
//! miekg/dns's `Msg.Len()` reports for a message it did not compress, and
//! so what CoreDNS logs as `{rsize}` and observes in
//! `coredns_dns_response_size_bytes`.
//!
//! [`MessageBuilder`](crate::MessageBuilder) counts what compression saved
//! as it writes, so for the messages it builds the figure costs nothing;
//! [`uncompressed_len`] walks a message that came from elsewhere (an
//! upstream, a cache entry) once.

use crate::header::{HEADER_LEN, Header};
use crate::name::walk_name;
use crate::read::u16_at;
use crate::types::Rtype;

/// Where the names are in the rdata of `rtype`, as miekg/dns decodes
/// them: the offset of the first name, and whether a second name follows
/// it directly. `None` for rdata without names (its length counts as is).
fn rdata_names(rtype: Rtype) -> Option<(usize, bool)> {
    Some(match rtype.0 {
        // NS MD MF CNAME MB MG MR PTR DNAME
        2 | 3 | 4 | 5 | 7 | 8 | 9 | 12 | 39 => (0, false),
        // SOA MINFO RP: two names (SOA's 20 fixed bytes follow).
        6 | 14 | 17 => (0, true),
        // MX AFSDB RT KX: preference then a name.
        15 | 18 | 21 | 36 => (2, false),
        // PX: preference then two names.
        26 => (2, true),
        // SRV: priority, weight, port, target.
        33 => (6, false),
        _ => return None,
    })
}

/// The length of `msg` with every compression pointer replaced by the
/// name it points to; `None` when the message does not parse. Bytes after
/// the last record are not counted.
pub fn uncompressed_len(msg: &[u8]) -> Option<usize> {
    let h = Header::parse(msg).ok()?;
    let mut off = HEADER_LEN;
    let mut total = HEADER_LEN;
    for _ in 0..h.qdcount {
        total += walk_name(msg, &mut off, |_| {}).ok()? + 4;
        off += 4;
        if off > msg.len() {
            return None;
        }
    }
    let records = u32::from(h.ancount) + u32::from(h.nscount) + u32::from(h.arcount);
    for _ in 0..records {
        total += walk_name(msg, &mut off, |_| {}).ok()? + 10;
        let rtype = Rtype(u16_at(msg, off).ok()?);
        let rdlen = usize::from(u16_at(msg, off + 8).ok()?);
        let start = off + 10;
        let end = start + rdlen;
        if end > msg.len() {
            return None;
        }
        total += match rdata_names(rtype) {
            None => rdlen,
            Some((fixed, two)) => {
                let mut p = start + fixed;
                let mut n = fixed + walk_name(msg, &mut p, |_| {}).ok()?;
                if two {
                    n += walk_name(msg, &mut p, |_| {}).ok()?;
                }
                if p > end {
                    return None;
                }
                // Whatever follows the names (SOA's counters) as is.
                n + (end - p)
            }
        };
        off = end;
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{MessageBuilder, RData, Section};
    use crate::header::Header;
    use crate::name::Name;
    use crate::types::Class;

    fn name(s: &str) -> Name {
        Name::from_ascii(s).expect("name")
    }

    /// A reply with repeated names, built compressed.
    fn built() -> (Vec<u8>, usize) {
        let mut buf = Vec::new();
        let mut saved = 0;
        let mut b = MessageBuilder::new(&mut buf, Header::default()).counting_savings(&mut saved);
        let owner = name("www.example.org.");
        let target = name("web.example.org.");
        b.push_question(&owner, Rtype::A, Class::IN).unwrap();
        b.push(
            Section::Answer,
            &owner,
            Class::IN,
            30,
            &RData::Cname(&target),
        )
        .unwrap();
        b.push(
            Section::Answer,
            &target,
            Class::IN,
            30,
            &RData::A([10, 0, 0, 1].into()),
        )
        .unwrap();
        b.push(
            Section::Authority,
            &name("example.org."),
            Class::IN,
            30,
            &RData::Soa {
                mname: &name("ns.example.org."),
                rname: &name("hostmaster.example.org."),
                serial: 1,
                refresh: 2,
                retry: 3,
                expire: 4,
                minimum: 5,
            },
        )
        .unwrap();
        b.push(
            Section::Additional,
            &target,
            Class::IN,
            30,
            &RData::Srv {
                priority: 1,
                weight: 2,
                port: 3,
                target: &owner,
            },
        )
        .unwrap();
        b.push_opt(1232, false, &[]).unwrap();
        b.finish();
        (buf, saved)
    }

    #[test]
    fn counts_every_name_whole() {
        let (buf, saved) = built();
        // Header, question (17 + 4), CNAME (17 + 10 + 17), A (17 + 10 + 4),
        // SOA (13 + 10 + 16 + 24 + 20), SRV (17 + 10 + 6 + 17), OPT (11).
        let want = 12 + 21 + 44 + 31 + 83 + 50 + 11;
        assert_eq!(uncompressed_len(&buf), Some(want));
        assert!(buf.len() < want, "the builder compressed");
        assert_eq!(buf.len() + saved, want, "the builder's count agrees");
    }

    #[test]
    fn refuses_what_does_not_parse() {
        let (buf, _) = built();
        assert_eq!(uncompressed_len(&buf[..buf.len() - 3]), None);
        assert_eq!(uncompressed_len(&buf[..5]), None);
        let mut bad = buf.clone();
        bad[12] = 0xC0;
        bad[13] = 0xff;
        assert_eq!(uncompressed_len(&bad), None);
    }
}
