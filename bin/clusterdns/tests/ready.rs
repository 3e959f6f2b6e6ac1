//! The *ready* plugin through the real binary.

mod common;
mod ops;

use std::time::{Duration, Instant};

use common::{Server, free_port};

#[test]
fn ready_listener_closes_when_lameduck_starts() {
    let rp = free_port();
    let hp = free_port();
    let mut s = Server::start(&format!(
        ".:{{PORT}} {{\n    ready 127.0.0.1:{rp}\n    health 127.0.0.1:{hp} {{\n        lameduck 2s\n    }}\n    whoami\n}}\n"
    ));
    assert_eq!(ops::get_ok(rp, "/ready"), (200, "OK".to_string()));
    s.terminate();
    // As CoreDNS: the ready listener is gone (status 0: refused) while
    // health answers through the lameduck period.
    let t0 = Instant::now();
    let mut refused = false;
    while t0.elapsed() < Duration::from_millis(1500) {
        if ops::get(rp, "/ready").0 == 0 {
            refused = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(refused, "/ready still answers during lameduck");
    assert_eq!(ops::get(hp, "/health").0, 200);
}

#[test]
fn two_blocks_share_one_ready_address() {
    let rp = free_port();
    let s = Server::start(&format!(
        "a.test:{{PORT}} {{\n    ready 127.0.0.1:{rp}\n    whoami\n}}\nb.test:{{PORT}} {{\n    ready 127.0.0.1:{rp}\n    whoami\n}}\n"
    ));
    assert_eq!(ops::get_ok(rp, "/ready"), (200, "OK".to_string()));
    drop(s);
}

/// `0.0.0.0` is a wildcard to Go too: both families, as CoreDNS.
#[test]
fn a_wildcard_address_answers_on_both_families() {
    let rp = free_port();
    let s = Server::start(&format!(
        ".:{{PORT}} {{\n    ready 0.0.0.0:{rp}\n    whoami\n}}\n"
    ));
    let ok = (200, "OK".to_string());
    assert_eq!(ops::get_both(rp, "/ready"), [ok.clone(), ok]);
    drop(s);
}
