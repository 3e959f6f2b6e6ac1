//! Whether an upstream's reply answers the query sent: besides its ID, a
//! reply must carry the query's question (name in any case, type and
//! class), or no question at all. One with another question is not the
//! reply (a forgery that guessed the ID and port, or a stray): it is
//! dropped and the wait for the real one goes on.

use clusterdns_wire::HEADER_LEN;

/// The question of a wire-form query: its name (uncompressed labels) and
/// the type and class after it, or `None` when it has no question there.
pub(crate) fn question(query: &[u8]) -> Option<&[u8]> {
    let mut i = HEADER_LEN;
    loop {
        let len = usize::from(*query.get(i)?);
        i += 1;
        if len == 0 {
            break;
        }
        // The first name of a message has nothing before it to point to.
        if len > 63 {
            return None;
        }
        i += len;
    }
    query.get(HEADER_LEN..i + 4)
}

/// Whether `reply` may be the reply to the query whose question is `q`
/// (see [`question`]): it has no question (an upstream's FORMERR or
/// NOTIMP may leave it out; forward answers those with FORMERR, as
/// CoreDNS does), or exactly `q`, the name compared without case.
pub(crate) fn answers(q: &[u8], reply: &[u8]) -> bool {
    let qdcount = reply.get(4..6).map(|b| u16::from_be_bytes([b[0], b[1]]));
    match qdcount {
        Some(0) => true,
        Some(1) => {
            let Some(got) = reply.get(HEADER_LEN..HEADER_LEN + q.len()) else {
                return false;
            };
            let (name, tc) = q.split_at(q.len() - 4);
            let (got_name, got_tc) = got.split_at(q.len() - 4);
            // Length octets (at most 63) are no letters: folding case
            // cannot make labels of other lengths look alike.
            tc == got_tc && name.eq_ignore_ascii_case(got_name)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(qd: u16, question: &[u8]) -> Vec<u8> {
        let mut m = vec![0x12, 0x34, 0x81, 0x80, 0, 0, 0, 0, 0, 0, 0, 0];
        m[4..6].copy_from_slice(&qd.to_be_bytes());
        m.extend_from_slice(question);
        m
    }

    const Q: &[u8] = b"\x03www\x07example\x00\x00\x01\x00\x01";

    #[test]
    fn question_bounds() {
        assert_eq!(question(&msg(1, Q)), Some(Q));
        assert_eq!(question(&msg(1, b"\x03www\x00\x00\x01")), None);
        assert_eq!(question(&msg(1, b"\xc0\x0c\x00\x01\x00\x01")), None);
        assert_eq!(question(&msg(0, b"")), None);
    }

    #[test]
    fn matches_question_or_none() {
        assert!(answers(Q, &msg(1, Q)));
        assert!(answers(
            Q,
            &msg(1, b"\x03WwW\x07exAMPLE\x00\x00\x01\x00\x01")
        ));
        assert!(answers(Q, &msg(0, b"")));
        // Another name, type (65 is 'A': not folded), class, count.
        assert!(!answers(
            Q,
            &msg(1, b"\x03wwx\x07example\x00\x00\x01\x00\x01")
        ));
        assert!(!answers(
            Q,
            &msg(1, b"\x03www\x07example\x00\x00\x41\x00\x01")
        ));
        assert!(!answers(
            Q,
            &msg(1, b"\x03www\x07example\x00\x00\x01\x00\x03")
        ));
        assert!(!answers(Q, &msg(2, Q)));
        assert!(!answers(Q, &msg(1, &Q[..5])));
        assert!(!answers(Q, &[0x12]));
    }
}
