//! Every function of this crate against Go's own results.
//!
//! `go_outputs.tsv` holds, per line, a Go function (or `Flags`: a command
//! line parsed by Go's `flag` or spf13/pflag), its arguments and what
//! Go returned: written by `gocompat-oracle` (`scripts/rig.d/gocompat`, a Go
//! program the rig builds with the rig's Go), never by hand, so the texts
//! compared are Go's and not remembered ones. The first test compares this
//! crate with the table; the second runs the oracle again on the table's
//! inputs and wants the table back (and `src/isprint.rs`, Go's
//! `strconv.IsPrint` for every rune, as `-isprint` writes it), so a table
//! edited by hand, or a Go release that changed a text, fails here.

use std::path::PathBuf;

use clusterdns_gocompat::filepath as gocompat_filepath;
use clusterdns_gocompat::flag::{self, Flag, Kind, Normalize};
use clusterdns_gocompat::{cidr, hex, strconv, time};
use serde_json::Value;

const TABLE: &str = include_str!("go_outputs.tsv");

/// One line of the table: (line number, function, arguments, Go's result).
fn rows() -> Vec<(usize, &'static str, Value, Value)> {
    TABLE
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        .map(|(i, l)| {
            let f: Vec<&str> = l.splitn(3, '\t').collect();
            assert_eq!(
                f.len(),
                3,
                "go_outputs.tsv:{}: want FUNC ARGS RESULT",
                i + 1
            );
            let json = |s: &str| -> Value {
                serde_json::from_str(s)
                    .unwrap_or_else(|e| panic!("go_outputs.tsv:{}: {e}: {s}", i + 1))
            };
            (i + 1, f[0], json(f[1]), json(f[2]))
        })
        .collect()
}

/// This crate's answer in the oracle's terms: `{"v": …}` or `{"err": …}`.
fn ours(func: &str, args: &Value) -> Value {
    let s = args["s"].as_str().unwrap_or("");
    let base = args["base"].as_i64().unwrap_or(0);
    let bits = args["bits"].as_i64().unwrap_or(0);
    let result = |r: Result<Value, String>| match r {
        Ok(v) => serde_json::json!({ "v": v }),
        Err(e) => serde_json::json!({ "err": e }),
    };
    match func {
        "ParseBool" => result(
            strconv::parse_bool(s)
                .map(Value::from)
                .map_err(|e| e.to_string()),
        ),
        "ParseInt" => result(
            strconv::parse_int(s, base, bits)
                .map(Value::from)
                .map_err(|e| e.to_string()),
        ),
        "ParseUint" => result(
            strconv::parse_uint(s, base, bits)
                .map(Value::from)
                .map_err(|e| e.to_string()),
        ),
        "Quote" => result(Ok(strconv::quote(s).into())),
        "ParseDuration" => result(
            time::parse_go_signed(s)
                .map(|d| Value::from(i64::try_from(d.nanos()).unwrap_or(i64::MAX)))
                .map_err(|e| e.to_string()),
        ),
        "DurationString" => {
            let ns = args["ns"].as_i64().unwrap_or(0);
            let d = time::Signed {
                negative: ns < 0,
                magnitude: std::time::Duration::from_nanos(ns.unsigned_abs()),
            };
            result(Ok(d.to_string().into()))
        }
        // Go's error is always `invalid CIDR address: <s>`; the address
        // prints as Go's `net.IP.String` does, an IPv4-mapped one as IPv4.
        "ParseCIDR" => result(
            cidr::parse(s)
                .map(|(ip, len)| {
                    serde_json::json!({
                        "ip": ip.to_canonical().to_string(),
                        "network": cidr::network(ip, len).to_canonical().to_string(),
                        "prefix": len,
                    })
                })
                .ok_or_else(|| format!("invalid CIDR address: {s}")),
        ),
        "HexDecodeString" => result(
            hex::decode_string(s)
                .map(|b| {
                    b.iter()
                        .map(|x| format!("{x:02x}"))
                        .collect::<String>()
                        .into()
                })
                .map_err(|e| e.to_string()),
        ),
        "Flags" => flags(args),
        "FilepathClean" => result(Ok(gocompat_filepath::clean(s).into())),
        "FilepathJoin" => {
            let t = args["t"].as_str().unwrap_or("");
            result(Ok(gocompat_filepath::join(&[s, t]).into()))
        }
        "OsStat" => result(
            std::fs::metadata(s)
                .map(|_| "ok".into())
                .map_err(|e| clusterdns_gocompat::os::stat_error(s, &e)),
        ),
        "NewRR" => result(
            s.parse::<clusterdns_wire::Record>()
                .map(|r| r.to_string().into())
                .map_err(|e| e.to_string()),
        ),
        "RegexpCompile" => result(regex::Regex::new(s).map(|_| "ok".into()).map_err(|e| {
            format!(
                "error parsing regexp: {}",
                clusterdns_gocompat::regexp::describe(s, &e)
            )
        })),
        other => panic!("go_outputs.tsv: no function {other} here"),
    }
}

/// A text for the life of the test (a `Flag` holds `&'static str`s).
fn leak(v: &Value) -> &'static str {
    Box::leak(v.as_str().unwrap_or("").to_owned().into_boxed_str())
}

/// A command line parsed by Go's `flag` or pflag, in the oracle's terms:
/// every flag's value as Go's `Value.String` prints it, the flags given
/// (sorted, as `Visit` walks them), the other arguments and the usage.
fn flags(args: &Value) -> Value {
    let specs = args["flags"].as_array().cloned().unwrap_or_default();
    let table: Vec<Flag> = specs
        .iter()
        .map(|f| {
            let kind = match f["kind"].as_str().unwrap_or("") {
                "bool" => Kind::Bool,
                "int" => Kind::Int,
                "string" => Kind::Str,
                "duration" => Kind::Duration,
                _ => Kind::Other(leak(&f["kind"])),
            };
            let flag = Flag::new(
                leak(&f["name"]),
                kind,
                leak(&f["default"]),
                leak(&f["help"]),
            );
            match f["short"].as_str().and_then(|s| s.chars().next()) {
                Some(c) => flag.short(c),
                None => flag,
            }
        })
        .collect();
    let table: &'static [Flag] = Box::leak(table.into_boxed_slice());
    let argv: Vec<String> = args["args"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().unwrap_or("").to_owned())
                .collect()
        })
        .unwrap_or_default();
    let pflag = args["dialect"] == "pflag";
    let (parsed, usage) = if pflag {
        let normalize = if args["wordsep"] == true {
            Normalize::WordSep
        } else {
            Normalize::None
        };
        (
            flag::parse_pflag(table, &argv, normalize),
            flag::pflag_defaults(table),
        )
    } else {
        (flag::parse(table, &argv), flag::defaults(table))
    };
    let p = match parsed {
        Err(flag::Error::Help) => {
            return serde_json::json!({ "v": { "help": true, "usage": usage } });
        }
        Err(e) => return serde_json::json!({ "err": e.to_string() }),
        Ok(p) => p,
    };
    let mut values = serde_json::Map::new();
    let mut set = Vec::new();
    for f in table {
        let v = match f.kind {
            Kind::Bool => p.bool(f.name).to_string(),
            Kind::Int => p.int(f.name).to_string(),
            Kind::Duration => time::parse_go_signed(p.get(f.name))
                .map_or_else(|e| e.to_string(), |d| d.to_string()),
            Kind::Str | Kind::Other(_) => p.get(f.name).to_owned(),
        };
        values.insert(f.name.to_owned(), v.into());
        if p.is_set(f.name) {
            set.push(f.name);
        }
    }
    set.sort_unstable();
    let mut v = serde_json::json!({ "values": values, "usage": usage });
    if !set.is_empty() {
        v["set"] = serde_json::json!(set);
    }
    if !p.rest().is_empty() {
        v["rest"] = serde_json::json!(p.rest());
    }
    serde_json::json!({ "v": v })
}

/// Where ours decides or words otherwise than Go, as the README's
/// "Differences from CoreDNS" says: (function, the input's `s`). Each must
/// still differ: a row that starts to agree is taken off this list.
const KNOWN_DIFFERENCES: &[(&str, &str)] = &[
    // The `regex` crate (RE2's syntax, as Go's, but not Go's parser).
    // Go refuses, the crate accepts: nested repetition, counts over 1000,
    // an unknown POSIX class.
    ("RegexpCompile", "a**"),
    ("RegexpCompile", "a{2}{3}"),
    ("RegexpCompile", "a++"),
    ("RegexpCompile", "a{1001}"),
    ("RegexpCompile", "a{1,1001}"),
    ("RegexpCompile", "[[:nope:]]"),
    // Go accepts, the crate refuses: a `{` that starts no count is a
    // literal in Go; `\Q…\E` quoting.
    ("RegexpCompile", "x{,3}"),
    ("RegexpCompile", r"\Q*\E"),
    // Both refuse, in other words: the crate's description is kept.
    ("RegexpCompile", r"\1"),
    ("RegexpCompile", r"\8"),
    ("RegexpCompile", r"\q"),
    ("RegexpCompile", r"\C"),
    ("RegexpCompile", r"\"),
    ("RegexpCompile", "(?=a)"),
    ("RegexpCompile", "(?#c)"),
    ("RegexpCompile", "(?P<>a)"),
    ("RegexpCompile", r"\p{Nope}"),
    ("RegexpCompile", "a{2,1}"),
    ("RegexpCompile", "[z-a]"),
    // Record text: a type miekg/dns knows and wire does not (MR) prints in
    // RFC 3597's form; RFC 3597 rdata that is not hex, or too short for
    // its type, and an unterminated quote are refused in our words or at
    // another column.
    ("NewRR", r"x. 1 IN TYPE9 \# 2 0001"),
    ("NewRR", r"x. 5 IN TYPE9 \# 1 zz"),
    ("NewRR", r"x. 5 IN A \# 3 010203"),
    ("NewRR", "x. 5 IN TXT \"open"),
];

#[test]
fn every_function_answers_as_go_did() {
    let rows = rows();
    assert!(rows.len() > 200, "the table lost its lines: {}", rows.len());
    let mut wrong = Vec::new();
    for (line, func, args, go) in &rows {
        let got = ours(func, args);
        // Go returns a value beside some errors (ParseInt's range error
        // gives the nearest bound); the error is what callers print.
        let go_cmp = if go.get("err").is_some() {
            serde_json::json!({ "err": go["err"] })
        } else {
            go.clone()
        };
        let known = KNOWN_DIFFERENCES.contains(&(*func, args["s"].as_str().unwrap_or("")));
        if known && got == go_cmp {
            wrong.push(format!(
                "go_outputs.tsv:{line}: {args} agrees with Go now: take it off KNOWN_DIFFERENCES"
            ));
        } else if !known && got != go_cmp {
            wrong.push(format!(
                "go_outputs.tsv:{line}: {func}({args}): Go {go}, ours {got}"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} differ from Go:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// The oracle: `$CLUSTERDNS_GO_ORACLE`, else the rig's build of it.
fn oracle() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CLUSTERDNS_GO_ORACLE") {
        return Some(p.into());
    }
    let rig = std::env::var_os("RIG_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.rig"),
        PathBuf::from,
    );
    let p = rig.join("bin/gocompat-oracle");
    p.exists().then_some(p)
}

#[test]
fn the_table_is_what_go_answers_today() {
    let Some(oracle) = oracle() else {
        assert!(
            std::env::var("CLUSTERDNS_REQUIRE_RIG").as_deref() != Ok("1"),
            "no gocompat-oracle: run scripts/rig build"
        );
        eprintln!("skipped: no .rig/bin/gocompat-oracle (scripts/rig build builds it)");
        return;
    };
    let inputs: String = TABLE
        .lines()
        .map(|l| {
            let mut f = l.splitn(3, '\t');
            match (f.next(), f.next()) {
                (Some(func), Some(args)) => format!("{func}\t{args}\n"),
                (Some(text), None) => format!("{text}\n"),
                _ => "\n".to_owned(),
            }
        })
        .collect();
    let isprint = std::process::Command::new(&oracle)
        .arg("-isprint")
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", oracle.display()));
    assert!(
        isprint.status.success() && isprint.stdout == include_bytes!("../src/isprint.rs"),
        "src/isprint.rs is not what `{} -isprint` writes: write it again",
        oracle.display()
    );
    let mut child = std::process::Command::new(&oracle)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", oracle.display()));
    let mut stdin = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || {
        use std::io::Write as _;
        stdin
            .write_all(inputs.as_bytes())
            .expect("write to the oracle");
    });
    let out = child.wait_with_output().expect("oracle output");
    writer.join().expect("writer");
    assert!(out.status.success(), "{} failed", oracle.display());
    let fresh = String::from_utf8(out.stdout).expect("UTF-8 from the oracle");
    if fresh != TABLE {
        let first = fresh
            .lines()
            .zip(TABLE.lines())
            .position(|(a, b)| a != b)
            .map_or(String::from("(line count)"), |i| {
                format!(
                    "line {}: Go now: {}",
                    i + 1,
                    fresh.lines().nth(i).unwrap_or("")
                )
            });
        panic!(
            "go_outputs.tsv is not what {} answers ({first}); regenerate it as its header says",
            oracle.display()
        );
    }
}
