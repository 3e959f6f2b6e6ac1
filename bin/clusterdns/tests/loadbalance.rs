//! *loadbalance* through the real binary, shuffling *hosts* answers.

mod common;

use std::collections::BTreeSet;

use common::{Server, lines};

#[test]
fn a_records_come_in_varying_orders() {
    let s = Server::start(
        "example.org:{PORT} {
    loadbalance round_robin
    hosts {
        10.0.0.1 example.org
        10.0.0.2 example.org
        10.0.0.3 example.org
        10.0.0.4 example.org
        ::1 example.org
        ::2 example.org
    }
}
",
    );
    let mut firsts = BTreeSet::new();
    let mut want: Option<Vec<String>> = None;
    for i in 0..40 {
        let out = if i % 2 == 0 {
            s.dig(&["+noall", "+answer", "example.org", "A"])
        } else {
            s.kdig(&["+tcp", "+noall", "+answer", "example.org", "A"])
        };
        let l = lines(&out);
        firsts.insert(l[0].clone());
        let mut sorted = l.clone();
        sorted.sort();
        match &want {
            Some(w) => assert_eq!(&sorted, w),
            None => want = Some(sorted),
        }
    }
    assert_eq!(want.unwrap().len(), 4);
    assert!(firsts.len() >= 3, "first records seen: {firsts:?}");
    let mut v6 = BTreeSet::new();
    for _ in 0..20 {
        v6.insert(lines(&s.dig(&["+noall", "+answer", "example.org", "AAAA"]))[0].clone());
    }
    assert_eq!(v6.len(), 2);
}

#[test]
fn weighted_is_refused_clearly() {
    let text = common::config_error(".:1053 {\n    loadbalance weighted w.txt\n}\n");
    assert!(text.contains("plugin/loadbalance"), "{text}");
    assert!(text.contains("not supported yet"), "{text}");
}
