use std::net::Ipv4Addr;

use clusterdns_wire::edns::OPT_FIXED_LEN;
use clusterdns_wire::{
    Class, Message, MessageBuilder, ParseError, Query, RData, Rtype, Section, truncate,
};

use crate::{Rng, name, query_packet};

/// A reply with `n` A answers and `extra` glue records, with or without OPT.
fn big_reply(n: u8, extra: u8, edns: bool) -> Vec<u8> {
    let p = query_packet(
        "headless.ns.svc.cluster.local",
        Rtype::A,
        edns.then_some((512, false)),
    );
    let q = Query::parse(&p).unwrap();
    let mut buf = Vec::new();
    let mut b = MessageBuilder::reply_to(&q, &mut buf);
    for i in 0..n {
        b.push(
            Section::Answer,
            q.qname(),
            Class::IN,
            5,
            &RData::A(Ipv4Addr::new(10, 0, 0, i)),
        )
        .unwrap();
    }
    for i in 0..extra {
        let glue = name(&format!("host-{i}.example.org"));
        b.push(
            Section::Additional,
            &glue,
            Class::IN,
            5,
            &RData::A(Ipv4Addr::new(10, 1, 0, i)),
        )
        .unwrap();
    }
    if edns {
        b.push_opt(512, false, &[]).unwrap();
    }
    b.finish();
    buf
}

#[test]
fn fits_means_untouched() {
    let mut m = big_reply(3, 0, true);
    let before = m.clone();
    assert_eq!(truncate(&mut m, 512), Ok(false));
    assert_eq!(m, before);
    // Not parsed at all when it fits: even garbage is fine.
    let mut junk = vec![0xFF; 20];
    assert_eq!(truncate(&mut junk, 512), Ok(false));
}

#[test]
fn keeps_opt_and_sets_tc() {
    let mut m = big_reply(60, 0, true);
    assert!(m.len() > 512);
    assert_eq!(truncate(&mut m, 512), Ok(true));
    assert!(m.len() <= 512);
    let msg = Message::parse(&m).unwrap();
    let h = msg.header();
    assert!(h.tc());
    assert_eq!(h.arcount, 1);
    assert!(h.ancount > 0 && h.ancount < 60);
    assert_eq!(msg.opt().unwrap().udp_size, 512);
    assert_eq!(msg.records().count(), usize::from(h.ancount) + 1);
    // Every remaining answer is intact.
    for r in msg.section(Section::Answer) {
        r.to_owned_record(&msg).unwrap();
    }
}

#[test]
fn opt_moves_before_dropped_additionals() {
    // OPT is pushed last, after glue; when the glue is cut the OPT must be
    // moved up to the cut.
    let mut m = big_reply(20, 20, true);
    let max = 600;
    assert!(m.len() > max);
    assert_eq!(truncate(&mut m, max), Ok(true));
    assert!(m.len() <= max);
    let msg = Message::parse(&m).unwrap();
    assert!(msg.header().tc());
    assert_eq!(msg.header().ancount, 20);
    let extra: Vec<_> = msg.section(Section::Additional).collect();
    assert!(extra.len() >= 2 && extra.len() < 21);
    assert_eq!(extra.last().unwrap().rtype, Rtype::OPT);
    assert_eq!(extra.iter().filter(|r| r.rtype == Rtype::OPT).count(), 1);
}

#[test]
fn without_opt_and_min_size() {
    let mut m = big_reply(60, 0, false);
    // Sizes below 512 are treated as 512.
    assert_eq!(truncate(&mut m, 100), Ok(true));
    assert!(m.len() <= 512 && m.len() > 400);
    let msg = Message::parse(&m).unwrap();
    assert!(msg.header().tc());
    assert_eq!(msg.header().arcount, 0);
    assert!(msg.opt().is_none());
}

#[test]
fn existing_tc_is_kept_and_bad_input_fails() {
    let mut m = big_reply(60, 0, true);
    clusterdns_wire::set_tc(&mut m, true);
    truncate(&mut m, 512).unwrap();
    assert!(Message::parse(&m).unwrap().header().tc());
    let mut m = big_reply(60, 0, true);
    m[7] = 200; // ancount larger than present
    assert!(truncate(&mut m, 512).is_err());
    let mut m = vec![0u8; 600];
    m[5] = 1; // a question that is all zeros: root, type 0, class 0
    assert_eq!(truncate(&mut m, 512), Ok(true));
    assert_eq!(m.len(), 17);
    assert!(!Message::parse(&m).unwrap().header().tc());
}

#[test]
fn does_not_allocate_when_cutting() {
    let mut m = big_reply(100, 0, true);
    let cap = m.capacity();
    let ptr = m.as_ptr();
    truncate(&mut m, 1232).unwrap();
    assert_eq!(m.capacity(), cap);
    assert_eq!(m.as_ptr(), ptr);
}

/// The fuzzer's crash inputs (`fuzz/artifacts/wire_parse/crash-*`): an
/// oversized message whose only record is an OPT with a non-root owner and
/// an option list running past its rdata. `truncate` used to drop the
/// trailing bytes and return `Ok(true)` for a message `Message::parse`
/// rejects.
#[test]
fn fuzz_crashes_bad_opt_is_rejected() {
    let inputs: [&[u8]; 2] = [
        include_bytes!("../../../../fuzz/regressions/wire_parse/truncate-crash-2da8a1f0"),
        include_bytes!("../../../../fuzz/regressions/wire_parse/truncate-crash-50e37366"),
    ];
    for input in inputs {
        rejected_and_left_untouched(input);
    }
}

/// A fuzzer crash input: malformed, so `truncate` refuses to cut it, and
/// leaves it as it was when it fits (and so keeps the fuzz target's
/// invariant).
fn rejected_and_left_untouched(input: &[u8]) {
    assert!(Message::parse(input).is_err());
    for max in [512, 1232] {
        let mut v = input.to_vec();
        let expected = if input.len() > max {
            Err(ParseError)
        } else {
            Ok(false)
        };
        assert_eq!(truncate(&mut v, max), expected, "max {max}");
        assert_eq!(v, input, "left untouched");
    }
}

/// Offset of the (last) OPT record `big_reply` pushed.
fn opt_start(m: &[u8]) -> usize {
    m.len() - OPT_FIXED_LEN
}

#[test]
fn opt_with_non_root_owner_is_rejected() {
    for (n, extra, max) in [(60, 0, 512), (20, 20, 600)] {
        let mut m = big_reply(n, extra, true);
        // Owner: a pointer to the qname instead of the root.
        let at = opt_start(&m);
        m.splice(at..at + 1, [0xC0, 12]);
        assert!(Message::parse(&m).is_err());
        let before = m.clone();
        assert_eq!(truncate(&mut m, max), Err(ParseError));
        assert_eq!(m, before);
    }
}

#[test]
fn opt_with_malformed_options_is_rejected() {
    for (n, extra, max) in [(60, 0, 512), (20, 20, 600)] {
        let mut m = big_reply(n, extra, true);
        // rdlength 3: an option header cut short.
        let at = opt_start(&m);
        m[at + 9..at + 11].copy_from_slice(&3u16.to_be_bytes());
        m.extend_from_slice(&[0, 8, 0]);
        assert!(Message::parse(&m).is_err());
        let before = m.clone();
        assert_eq!(truncate(&mut m, max), Err(ParseError));
        assert_eq!(m, before);
        // The same option list, well-formed, is fine.
        let mut m = before;
        m[at + 9..at + 11].copy_from_slice(&4u16.to_be_bytes());
        m.push(0);
        assert!(Message::parse(&m).is_ok());
        assert_eq!(truncate(&mut m, max), Ok(true));
        let msg = Message::parse(&m).unwrap();
        assert_eq!(msg.opt().unwrap().option(&m, 8), Some(&[][..]));
    }
}

/// Only the first OPT of the additional section is the message's OPT (as
/// in `Message::parse`); a later one is an ordinary record to `truncate`.
#[test]
fn second_opt_is_an_ordinary_record() {
    let mut m = big_reply(20, 20, true);
    // Another OPT, with a non-root owner and bad options, after the first.
    let mut hdr = clusterdns_wire::Header::parse(&m).unwrap();
    m.extend_from_slice(&[0xC0, 12, 0, 41, 2, 0, 0, 0, 0, 0, 0, 1, 0xFF]);
    hdr.arcount += 1;
    m[10..12].copy_from_slice(&hdr.arcount.to_be_bytes());
    assert!(Message::parse(&m).is_ok());
    assert_eq!(truncate(&mut m, 600), Ok(true));
    let msg = Message::parse(&m).unwrap();
    assert!(msg.header().tc());
    let extra: Vec<_> = msg.section(Section::Additional).collect();
    assert_eq!(extra.last().unwrap().rtype, Rtype::OPT);
    assert_eq!(extra.iter().filter(|r| r.rtype == Rtype::OPT).count(), 1);
}

/// The third crash the fuzzer found (CI run on `1e2affd`): nine questions,
/// the last of them a pointer back onto a label that runs over the pointer
/// itself and on past the cut. The old rule (a pointer lands before the
/// run that holds it) let that through, so the message parsed, but its
/// questions read bytes that `truncate` then cut away. A name may now only
/// read bytes before the pointer it followed, so the input is malformed.
#[test]
fn fuzz_crash_87a7e714_question_reading_past_the_cut() {
    rejected_and_left_untouched(include_bytes!(
        "../../../../fuzz/regressions/wire_parse/truncate-crash-87a7e714"
    ));
}

/// Every input in `fuzz/regressions/wire_parse` (a crash the fuzzer once
/// found, committed as the fuzz step's regression set) keeps the
/// invariant here too, so it holds on a machine without nightly Rust.
#[test]
fn every_fuzz_regression_input_truncates_to_a_valid_message() {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fuzz/regressions/wire_parse"
    );
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let input = std::fs::read(entry.unwrap().path()).unwrap();
        for max in [512, 1232] {
            let mut out = input.clone();
            if truncate(&mut out, max) == Ok(true) {
                assert!(Message::parse(&out).is_ok());
            }
        }
        seen += 1;
    }
    assert!(seen >= 3, "the crashes found so far are all there");
}

/// Appends a name: a few labels of random length, ended by the root or by
/// a pointer back to the start of an earlier label (`labels`) or to any
/// earlier byte: a hostile upstream chooses freely. Label bytes are small
/// values, so a pointer that lands mid-label still often reads as labels,
/// some of them running over the pointer and beyond.
fn push_random_name(rng: &mut Rng, m: &mut Vec<u8>, labels: &mut Vec<usize>) {
    let start = labels.len();
    for _ in 0..rng.below(4) {
        let len = 1 + rng.below(12);
        labels.push(m.len());
        m.push(len as u8);
        m.extend((0..len).map(|_| rng.below(16) as u8));
    }
    // Only earlier names' labels: one of this name would be a loop.
    let earlier = &labels[..start];
    let target = match rng.below(4) {
        0 => None,
        1 if m.len() > 12 => Some(12 + rng.below(m.len() - 12)),
        _ if !earlier.is_empty() => Some(earlier[rng.below(earlier.len())]),
        _ => None,
    };
    match target {
        Some(t) => m.extend_from_slice(&(0xC000 | t as u16).to_be_bytes()),
        None => m.push(0),
    }
}

/// A message of random questions and records whose names point back at
/// random places, with an OPT record or none.
fn random_message(rng: &mut Rng) -> Vec<u8> {
    let qd = 1 + rng.below(3) as u16;
    let counts = [
        rng.below(40) as u16,
        rng.below(6) as u16,
        rng.below(6) as u16,
    ];
    let edns = rng.below(2) == 0;
    let mut m = vec![0u8; 12];
    m[2] = 0x81;
    let mut labels = Vec::new();
    for _ in 0..qd {
        push_random_name(rng, &mut m, &mut labels);
        m.extend_from_slice(&[0, 1, 0, 1]);
    }
    for _ in 0..counts.iter().sum::<u16>() {
        push_random_name(rng, &mut m, &mut labels);
        if rng.below(2) == 0 {
            // CNAME: the rdata is a name too.
            m.extend_from_slice(&[0, 5, 0, 1, 0, 0, 0, 30, 0, 0]);
            let at = m.len();
            push_random_name(rng, &mut m, &mut labels);
            let rdlen = (m.len() - at) as u16;
            m[at - 2..at].copy_from_slice(&rdlen.to_be_bytes());
        } else {
            let len = rng.below(24);
            m.extend_from_slice(&[0, 99, 0, 1, 0, 0, 0, 30, 0, len as u8]);
            m.extend((0..len).map(|_| rng.below(16) as u8));
        }
    }
    let arcount = counts[2] + u16::from(edns);
    if edns {
        m.extend_from_slice(&[0, 0, 41, 4, 0xD0, 0, 0, 0, 0, 0, 0]);
    }
    let header = [qd, counts[0], counts[1], arcount];
    for (i, n) in header.into_iter().enumerate() {
        m[4 + 2 * i..6 + 2 * i].copy_from_slice(&n.to_be_bytes());
    }
    m
}

/// The invariant behind every truncated reply, on messages the fuzzer
/// would take a long time to stumble on: whenever `truncate` cuts, the
/// result parses, keeps the question section byte for byte and the OPT
/// record, and is within the limit (unless the header, question and OPT
/// alone exceed it, in which case nothing else is left).
#[test]
fn a_truncated_message_parses_keeps_its_question_and_fits() {
    let mut rng = Rng(0x7A0C_A7E5_0000_0012);
    let (mut valid, mut cut) = (0, 0);
    for _ in 0..40_000 {
        let input = random_message(&mut rng);
        let Ok(before) = Message::parse(&input) else {
            continue;
        };
        valid += 1;
        let questions = before.question_range();
        // The OPT record's fields (its option list moves with the record).
        let fields = |m: &Message<'_>| {
            m.opt().map(|e| {
                (
                    e.udp_size,
                    e.ext_rcode,
                    e.version,
                    e.do_bit,
                    e.options.len(),
                )
            })
        };
        let opt = fields(&before);
        for limit in [0, 512, 600, 1232] {
            let mut out = input.clone();
            if truncate(&mut out, limit) != Ok(true) {
                continue;
            }
            cut += 1;
            let after = Message::parse(&out)
                .unwrap_or_else(|_| panic!("output must parse: {input:02x?} at {limit}"));
            assert_eq!(after.question_range(), questions);
            assert_eq!(out[questions.clone()], input[questions.clone()]);
            assert_eq!(after.header().qdcount, before.header().qdcount);
            assert_eq!(fields(&after), opt);
            let h = after.header();
            let only_fixed_part =
                h.ancount + h.nscount == 0 && h.arcount == u16::from(opt.is_some());
            assert!(
                out.len() <= limit.max(512) || only_fixed_part,
                "{} bytes for a limit of {limit}",
                out.len()
            );
        }
    }
    // The generator must reach the interesting part: enough messages that
    // parse and are long enough to be cut.
    assert!(valid > 2_000 && cut > 1_000, "valid {valid}, cut {cut}");
}
