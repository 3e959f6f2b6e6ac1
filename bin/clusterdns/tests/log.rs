//! The *log* plugin through the real binary, its lines compared field by
//! field with CoreDNS's (a captured line, and the reference binary when
//! `scripts/rig build` has built it).

mod common;
mod ops;

use common::Server;

/// A line printed by CoreDNS 1.14.7 (`whoami` + `log`, `dig +bufsize=1232`).
const COREDNS_LINE: &str = r#"[INFO] 127.0.0.1:39837 - 38234 "A IN a.example.org. udp 54 false 1232" NOERROR qr,aa,rd 97 0.003201805s"#;

/// The fields of a default-format line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fields {
    remote: String,
    port: String,
    id: String,
    question: Vec<String>,
    rcode: String,
    rflags: String,
    rsize: String,
    duration: String,
}

fn fields(line: &str) -> Fields {
    let rest = line
        .strip_prefix("[INFO] ")
        .unwrap_or_else(|| panic!("no [INFO]: {line}"));
    let parts: Vec<&str> = rest.split('"').collect();
    assert_eq!(parts.len(), 3, "{line}");
    let pre: Vec<&str> = parts[0].split(' ').collect();
    assert_eq!(pre.len(), 4, "{line}");
    assert_eq!(pre[1], "-");
    assert_eq!(pre[3], "");
    let (remote, port) = pre[0].rsplit_once(':').expect("remote:port");
    let post: Vec<&str> = parts[2].split(' ').collect();
    assert_eq!(post.len(), 5, "{line}");
    assert_eq!(post[0], "");
    Fields {
        remote: remote.to_string(),
        port: port.to_string(),
        id: pre[2].to_string(),
        question: parts[1].split(' ').map(str::to_string).collect(),
        rcode: post[1].to_string(),
        rflags: post[2].to_string(),
        rsize: post[3].to_string(),
        duration: post[4].to_string(),
    }
}

/// Go's strconv.FormatFloat(secs, 'f', -1, 64) + "s".
fn is_go_seconds(s: &str) -> bool {
    let Some(n) = s.strip_suffix('s') else {
        return false;
    };
    let (i, f) = n.split_once('.').unwrap_or((n, "0"));
    !i.is_empty()
        && i.bytes().all(|b| b.is_ascii_digit())
        && !f.is_empty()
        && f.bytes().all(|b| b.is_ascii_digit())
        && !f.ends_with('0') | (f == "0")
}

fn check_shape(f: &Fields) {
    assert!(f.port.parse::<u16>().is_ok(), "{f:?}");
    assert!(f.id.parse::<u16>().is_ok(), "{f:?}");
    assert_eq!(f.question.len(), 7, "{f:?}");
    assert!(f.question[4].parse::<u16>().is_ok(), "{f:?}");
    assert!(f.question[6].parse::<u32>().is_ok(), "{f:?}");
    assert!(f.rsize.parse::<u32>().is_ok(), "{f:?}");
    assert!(is_go_seconds(&f.duration), "{f:?}");
}

fn info_lines(out: &str) -> Vec<String> {
    out.lines()
        .filter(|l| l.starts_with("[INFO] ") && l.contains('"'))
        .map(str::to_string)
        .collect()
}

/// The id dig printed.
fn dig_id(out: &str) -> String {
    out.split("id: ")
        .nth(1)
        .and_then(|s| s.lines().next())
        .unwrap_or("")
        .to_string()
}

const COREFILE: &str =
    "example.org:{PORT} {\n    whoami\n    log\n}\nbad.test:{PORT} {\n    log\n}\n";

/// The queries both servers get, in order.
const QUERIES: &[&[&str]] = &[
    &["+bufsize=1232", "+nocookie", "a.example.org", "A"],
    &["+tcp", "+nocookie", "A.Example.ORG", "AAAA"],
    &["+noedns", "+norec", "a.example.org", "A"],
    &["+dnssec", "+nocookie", "+bufsize=4096", "x.bad.test", "MX"],
    &["+nocookie", "a.example.org", "TYPE65280"],
];

#[test]
fn default_format_fields() {
    check_shape(&fields(COREDNS_LINE));
    let s = Server::start(COREFILE);
    let mut ids = Vec::new();
    for q in QUERIES {
        ids.push(dig_id(&s.dig(q)));
    }
    let port = s.port;
    let (out, _) = s.stop();
    let lines = info_lines(&out);
    assert_eq!(lines.len(), QUERIES.len(), "{out}");
    let f: Vec<Fields> = lines.iter().map(|l| fields(l)).collect();
    for (x, id) in f.iter().zip(&ids) {
        check_shape(x);
        assert_eq!(x.remote, "127.0.0.1");
        assert_eq!(&x.id, id);
        assert_ne!(x.port, port.to_string());
    }
    assert_eq!(
        f[0].question.join(" "),
        "A IN a.example.org. udp 42 false 1232"
    );
    assert_eq!(
        (f[0].rcode.as_str(), f[0].rflags.as_str()),
        ("NOERROR", "qr,aa,rd")
    );
    assert_eq!(
        f[1].question.join(" "),
        "AAAA IN a.example.org. tcp 42 false 65535"
    );
    assert_eq!(
        f[2].question.join(" "),
        "A IN a.example.org. udp 31 false 512"
    );
    assert_eq!(f[2].rflags, "qr,aa");
    assert_eq!(
        f[3].question.join(" "),
        "MX IN x.bad.test. udp 39 true 4096"
    );
    assert_eq!(
        (
            f[3].rcode.as_str(),
            f[3].rflags.as_str(),
            f[3].rsize.as_str()
        ),
        ("SERVFAIL", "qr,rd", "28")
    );
    assert_eq!(f[4].question[0], "TYPE65280");
}

#[test]
fn same_fields_as_reference_coredns() {
    let Some(bin) = ops::coredns() else {
        eprintln!(
            "reference CoreDNS not built (scripts/rig build); compared with the captured line only"
        );
        return;
    };
    let port = common::free_port();
    let cd = ops::CoreDns::start(&bin, &COREFILE.replace("{PORT}", &port.to_string()), port);
    for q in QUERIES {
        common::dig(port, q);
    }
    let theirs: Vec<Fields> = info_lines(&cd.stop()).iter().map(|l| fields(l)).collect();
    let s = Server::start(COREFILE);
    for q in QUERIES {
        s.dig(q);
    }
    let (out, _) = s.stop();
    let ours: Vec<Fields> = info_lines(&out).iter().map(|l| fields(l)).collect();
    assert_eq!(theirs.len(), QUERIES.len());
    assert_eq!(ours.len(), QUERIES.len());
    for (o, t) in ours.iter().zip(&theirs) {
        check_shape(o);
        check_shape(t);
        assert_eq!(o.remote, t.remote);
        assert_eq!(o.question, t.question);
        assert_eq!(o.rcode, t.rcode);
        assert_eq!(o.rflags, t.rflags);
        // Both the uncompressed size of the reply.
        assert_eq!(o.rsize, t.rsize, "{o:?} vs {t:?}");
    }
}

#[test]
fn custom_format_names_and_classes() {
    let s = Server::start(
        "example.org:{PORT} {\n    whoami\n    log sub.example.org \"{proto} Request: {name} {type} {>id} {combined}\"\n    log . {\n        class denial error\n    }\n}\n",
    );
    let id = dig_id(&s.dig(&["+tcp", "x.sub.example.org", "TXT"]));
    // Answered by whoami (success): the "." rule only logs denial/error.
    s.dig(&["a.example.org", "A"]);
    let (out, _) = s.stop();
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("[INFO] ")).collect();
    let logged: Vec<&&str> = lines.iter().filter(|l| l.contains("Request:")).collect();
    assert_eq!(logged.len(), 1, "{out}");
    let l = logged[0];
    assert!(
        l.starts_with(&format!(
            "[INFO] tcp Request: x.sub.example.org. TXT {id} 127.0.0.1:"
        )),
        "{l}"
    );
    assert!(l.ends_with("s \"0\""), "combined ends with the opcode: {l}");
    assert!(
        !out.contains("a.example.org."),
        "success not logged by the class rule: {out}"
    );
}

#[test]
fn kdig_query_is_logged() {
    let s = Server::start("example.org:{PORT} {\n    whoami\n    log\n}\n");
    let r = s.kdig(&["+tcp", "a.example.org", "A"]);
    assert!(r.contains("NOERROR"), "{r}");
    let (out, _) = s.stop();
    let f = fields(&info_lines(&out)[0]);
    assert_eq!(f.question[0..4].join(" "), "A IN a.example.org. tcp");
}
