//! *chaos* through the real binary.

mod common;

use common::{Server, lines, status};

#[test]
fn version_authors_hostname() {
    let s = Server::start(".:{PORT} {\n    chaos CoreDNS-001 b@x a@x\n}\n");
    let out = s.dig(&["+noall", "+answer", "CH", "TXT", "Version.Bind"]);
    assert_eq!(lines(&out), ["Version.Bind. 0 CH TXT \"CoreDNS-001\""]);
    let out = s.kdig(&[
        "+tcp",
        "+noall",
        "+answer",
        "-c",
        "CH",
        "-t",
        "TXT",
        "version.server",
    ]);
    assert_eq!(lines(&out), ["version.server. 0 CH TXT \"CoreDNS-001\""]);
    let out = s.dig(&["+noall", "+answer", "CH", "TXT", "authors.bind"]);
    let mut got = lines(&out);
    got.sort();
    assert_eq!(
        got,
        [
            "authors.bind. 0 CH TXT \"a@x\"",
            "authors.bind. 0 CH TXT \"b@x\""
        ]
    );
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    for name in ["hostname.bind", "id.server"] {
        let out = s.dig(&["+noall", "+answer", "CH", "TXT", name]);
        assert_eq!(
            lines(&out),
            [format!("{name}. 0 CH TXT \"{}\"", host.trim())]
        );
    }
    let out = s.dig(&["CH", "TXT", "version.bind"]);
    assert!(out.contains("flags: qr rd;"), "no AA, as CoreDNS: {out}");
    // Other CH names: chaos passes on, nothing after it: SERVFAIL.
    assert_eq!(status(&s.dig(&["CH", "TXT", "foo.bind"])), "SERVFAIL");
}

#[test]
fn default_version_is_ours() {
    let s = Server::start(".:{PORT} {\n    chaos\n}\n");
    let out = s.dig(&["+short", "CH", "TXT", "version.bind"]);
    assert_eq!(
        out.trim(),
        format!("\"clusterdns-{}\"", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn ch_class_is_refused_on_a_listener_without_chaos() {
    let s = Server::start(".:{PORT} {\n    whoami\n}\n");
    assert_eq!(status(&s.dig(&["CH", "TXT", "version.bind"])), "REFUSED");
    assert_eq!(
        status(&s.dig(&["+tcp", "CH", "TXT", "version.bind"])),
        "REFUSED"
    );
    // CoreDNS opens CH per listener: chaos in any block on the port lets
    // CH queries reach every block of that port.
    let s = Server::start("a.test:{PORT} {\n    chaos\n}\nb.test:{PORT} {\n    whoami\n}\n");
    // whoami answers a CH A query with CH-class records dig cannot decode
    // (CH A rdata is a Chaosnet address), as CoreDNS does: read the header.
    let q: &[u8] = &[
        0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, b'x', 1, b'b', 4, b't', b'e', b's', b't', 0,
        0, 1, 0, 3,
    ];
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_secs(2)))
        .unwrap();
    sock.send_to(q, ("127.0.0.1", s.port)).unwrap();
    let mut buf = [0u8; 512];
    let n = sock.recv(&mut buf).unwrap();
    assert!(n > 12);
    assert_eq!(buf[3] & 0x0f, 0, "NOERROR");
    assert_eq!(
        u16::from_be_bytes([buf[10], buf[11]]),
        2,
        "whoami's two records"
    );
}
