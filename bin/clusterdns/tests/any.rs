//! *any* through the real binary.

mod common;

use common::{Server, lines, status};

#[test]
fn any_queries_get_hinfo_others_go_on() {
    let s = Server::start("example.org:{PORT} {\n    any\n    whoami\n}\n");
    let out = s.dig(&["+noall", "+answer", "ExAmple.org", "ANY"]);
    assert_eq!(
        lines(&out),
        ["ExAmple.org. 8482 IN HINFO \"ANY obsoleted\" \"See RFC 8482\""]
    );
    let out = s.kdig(&["+tcp", "example.org", "ANY"]);
    assert!(out.contains("HINFO"), "{out}");
    assert!(out.contains("NOERROR"), "{out}");
    let out = s.dig(&["example.org", "ANY"]);
    assert!(out.contains("flags: qr rd;"), "no AA, as CoreDNS: {out}");
    let out = s.dig(&["example.org", "A"]);
    assert_eq!(status(&out), "NOERROR");
    assert!(out.contains("_udp.example.org."), "whoami answered: {out}");
}
