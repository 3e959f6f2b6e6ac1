#![doc = include_str!("README.md")]

use std::sync::Arc;

use clusterdns_contract::{Flow, Plugin, PluginDef, Request, ResponseWriter, SetupCtx};
use clusterdns_corefile::{ConfigError, Directive};
use clusterdns_wire::{Class, Name, RData, Rtype, Section};

/// Registration of *chaos*.
pub const DEF: PluginDef = PluginDef {
    name: "chaos",
    setup,
};

/// The default version string: `clusterdns-<crate version>`.
pub fn default_version() -> String {
    format!("clusterdns-{}", env!("CARGO_PKG_VERSION"))
}

/// The default author list.
pub const DEFAULT_AUTHORS: &[&str] = &["clusterdns"];

fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    let d = clusterdns_contract::parse::once(dirs)?;
    if let Some(p) = d.block.first() {
        return Err(p.err(format!("unknown property '{}'", p.name.text)));
    }
    let args: Vec<&str> = d.arg_texts().collect();
    let (version, authors) = match args.as_slice() {
        [] => (
            default_version(),
            DEFAULT_AUTHORS.iter().map(|a| a.to_string()).collect(),
        ),
        [v] => (
            v.to_string(),
            DEFAULT_AUTHORS.iter().map(|a| a.to_string()).collect(),
        ),
        [v, rest @ ..] => {
            let mut list: Vec<String> = rest.iter().map(|a| trim(a).to_string()).collect();
            list.sort();
            list.dedup();
            (v.to_string(), list)
        }
    };
    ctx.add_plugin(Arc::new(Chaos::new(
        &version,
        &authors,
        &crate::pkg::hostname(),
    )));
    Ok(())
}

/// Cuts `s` to at most 255 bytes (a TXT character-string), at a char
/// boundary.
fn trim(s: &str) -> &str {
    if s.len() < 256 {
        return s;
    }
    let mut end = 255;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Which special name a query asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Version,
    Authors,
    Hostname,
}

/// The *chaos* handler: the strings are fixed at setup.
#[derive(Debug)]
pub struct Chaos {
    version: Vec<u8>,
    authors: Vec<Vec<u8>>,
    hostname: Vec<u8>,
    names: [(Name, Kind); 5],
}

impl Chaos {
    /// A handler answering with these strings (each cut to 255 bytes).
    pub fn new(version: &str, authors: &[String], hostname: &str) -> Self {
        let n = |s: &str| Name::from_ascii(s).unwrap_or_else(|_| Name::root());
        Self {
            version: trim(version).as_bytes().to_vec(),
            authors: authors
                .iter()
                .map(|a| trim(a).as_bytes().to_vec())
                .collect(),
            hostname: trim(hostname).as_bytes().to_vec(),
            names: [
                (n("version.bind."), Kind::Version),
                (n("version.server."), Kind::Version),
                (n("authors.bind."), Kind::Authors),
                (n("hostname.bind."), Kind::Hostname),
                (n("id.server."), Kind::Hostname),
            ],
        }
    }
}

impl Plugin for Chaos {
    fn name(&self) -> &'static str {
        "chaos"
    }

    fn query(&self, req: &Request<'_>, w: &mut ResponseWriter) -> Flow {
        if req.qclass() != Class::CH || req.qtype() != Rtype::TXT {
            return Flow::Next;
        }
        let lower = req.qname_lower();
        let Some(kind) = self.names.iter().find(|(n, _)| n == lower).map(|(_, k)| *k) else {
            return Flow::Next;
        };
        let owner = req.qname();
        let mut b = w.reply(req);
        match kind {
            Kind::Version | Kind::Hostname => {
                let s: &[u8] = if kind == Kind::Version {
                    &self.version
                } else {
                    &self.hostname
                };
                let strings = [s];
                let _ = b.push(Section::Answer, owner, Class::CH, 0, &RData::Txt(&strings));
            }
            Kind::Authors => {
                let n = self.authors.len();
                let start = if n > 1 { fastrand::usize(..n) } else { 0 };
                for i in 0..n {
                    let strings = [self.authors[(start + i) % n].as_slice()];
                    if b.push(Section::Answer, owner, Class::CH, 0, &RData::Txt(&strings))
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
        b.finish();
        Flow::Answered
    }
}

#[cfg(test)]
mod tests {
    use clusterdns_contract::testing;
    use clusterdns_wire::{Class, Header, MessageBuilder, Name, Rcode, Rtype};

    use super::{DEF, default_version};
    use crate::testutil::{run, setup, setup_err};

    fn ch_query(name: &str, qtype: Rtype) -> Vec<u8> {
        let mut buf = Vec::new();
        let mut b = MessageBuilder::new(
            &mut buf,
            Header {
                id: 7,
                flags: 0x0100,
                ..Header::default()
            },
        );
        b.push_question(&Name::from_ascii(name).unwrap(), qtype, Class::CH)
            .unwrap();
        b.finish();
        buf
    }

    #[test]
    fn setup_table() {
        let ok = [
            ". {\n chaos\n}",
            ". {\n chaos v1\n}",
            ". {\n chaos v1 a b\n}",
            "version.bind {\n chaos\n}",
        ];
        for c in ok {
            let r = setup(DEF, c).unwrap_or_else(|e| panic!("{c}: {e}"));
            assert_eq!(r.plugins.len(), 1, "{c}");
        }
        let bad = [
            (". {\n chaos {\n  foo\n }\n}", "unknown property 'foo'"),
            (". {\n chaos\n chaos\n}", "only be used once"),
        ];
        for (c, want) in bad {
            let e = setup_err(DEF, c);
            assert!(e.contains(want), "{c}: {e}");
        }
    }

    #[test]
    fn version_names_keep_case_and_have_ttl_0_class_ch() {
        let r = setup(DEF, ". {\n chaos CoreDNS-001 info@coredns.io\n}").unwrap();
        for name in ["version.bind.", "VERSION.server."] {
            let reply = run(&r.plugins, &ch_query(name, Rtype::TXT));
            assert_eq!(reply.rcode, Rcode::NOERROR);
            assert!(!reply.header.aa());
            assert_eq!(
                reply.answer,
                vec![format!("{name}\t0\tCH\tTXT\t\"CoreDNS-001\"")]
            );
        }
    }

    #[test]
    fn default_version_and_authors() {
        let r = setup(DEF, ". {\n chaos\n}").unwrap();
        let reply = run(&r.plugins, &ch_query("version.bind.", Rtype::TXT));
        assert_eq!(
            reply.answer,
            vec![format!(
                "version.bind.\t0\tCH\tTXT\t\"{}\"",
                default_version()
            )]
        );
        let reply = run(&r.plugins, &ch_query("authors.bind.", Rtype::TXT));
        assert_eq!(
            reply.answer,
            vec!["authors.bind.\t0\tCH\tTXT\t\"clusterdns\"".to_string()]
        );
    }

    #[test]
    fn authors_are_sorted_deduplicated_and_rotated() {
        let r = setup(DEF, ". {\n chaos v c a b a\n}").unwrap();
        let mut firsts = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let reply = run(&r.plugins, &ch_query("authors.bind.", Rtype::TXT));
            assert_eq!(reply.answer.len(), 3);
            let names: Vec<&str> = reply
                .answer
                .iter()
                .map(|l| l.rsplit('\t').next().unwrap())
                .collect();
            // A rotation of the sorted list.
            let pos = ["\"a\"", "\"b\"", "\"c\""]
                .iter()
                .position(|x| *x == names[0])
                .unwrap();
            for (i, n) in names.iter().enumerate() {
                assert_eq!(*n, ["\"a\"", "\"b\"", "\"c\""][(pos + i) % 3]);
            }
            firsts.insert(names[0].to_string());
        }
        assert_eq!(firsts.len(), 3, "every author comes first sometimes");
    }

    #[test]
    fn hostname_matches_the_os() {
        let r = setup(DEF, ". {\n chaos\n}").unwrap();
        let want = crate::pkg::hostname();
        for name in ["hostname.bind.", "id.server."] {
            let reply = run(&r.plugins, &ch_query(name, Rtype::TXT));
            assert_eq!(
                reply.answer,
                vec![format!("{name}\t0\tCH\tTXT\t\"{want}\"")]
            );
        }
    }

    #[test]
    fn others_pass_on() {
        let r = setup(DEF, ". {\n chaos\n}").unwrap();
        let cases = [
            ch_query("version.bind.", Rtype::A),
            ch_query("foo.bind.", Rtype::TXT),
            testing::query("version.bind.", Rtype::TXT),
        ];
        for q in cases {
            assert_eq!(run(&r.plugins, &q).rcode, Rcode::SERVFAIL);
        }
    }

    #[test]
    fn long_strings_are_cut() {
        let long = "x".repeat(300);
        let r = setup(DEF, &format!(". {{\n chaos {long}\n}}")).unwrap();
        let reply = run(&r.plugins, &ch_query("version.bind.", Rtype::TXT));
        assert_eq!(reply.answer.len(), 1);
        assert!(reply.answer[0].ends_with(&format!("\"{}\"", "x".repeat(255))));
    }
}
