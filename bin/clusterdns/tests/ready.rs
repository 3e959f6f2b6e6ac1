//! The *ready* plugin through the real binary.

mod common;
mod ops;

use std::time::{Duration, Instant};

use common::{Server, free_port};

#[test]
fn ready_ok_then_shutting_down_during_lameduck() {
    let rp = free_port();
    let hp = free_port();
    let mut s = Server::start(&format!(
        ".:{{PORT}} {{\n    ready 127.0.0.1:{rp}\n    health 127.0.0.1:{hp} {{\n        lameduck 2s\n    }}\n    whoami\n}}\n"
    ));
    assert_eq!(ops::get_ok(rp, "/ready"), (200, "OK".to_string()));
    s.terminate();
    let t0 = Instant::now();
    let mut seen = None;
    while t0.elapsed() < Duration::from_millis(1500) {
        let r = ops::get(rp, "/ready");
        if r.0 == 503 {
            seen = Some(r);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(seen, Some((503, "Shutting down".to_string())));
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
