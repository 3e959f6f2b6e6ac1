#![doc = include_str!("README.md")]

use std::sync::Arc;

use clusterdns_contract::{Flow, Outcome, Plugin, PluginDef, Request, ResponseWriter, SetupCtx};
use clusterdns_corefile::{ConfigError, Directive};
use clusterdns_wire::{FLAG_AA, FLAG_RA, FLAG_RD};

/// Registration of *header*.
pub const DEF: PluginDef = PluginDef {
    name: "header",
    setup,
};

/// Flag bits to set and to clear, the rules of one selector folded in
/// order (a later rule on a flag undoes an earlier one).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Masks {
    set: u16,
    clear: u16,
}

impl Masks {
    fn add(&mut self, bit: u16, on: bool) {
        if on {
            self.set |= bit;
            self.clear &= !bit;
        } else {
            self.clear |= bit;
            self.set &= !bit;
        }
    }

    fn is_empty(self) -> bool {
        self == Masks::default()
    }
}

fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    // As CoreDNS: the first `header` with any rule counts.
    for d in dirs {
        let (query, response) = parse(d)?;
        if !query.is_empty() || !response.is_empty() {
            ctx.add_plugin(Arc::new(Header { query, response }));
            return Ok(());
        }
    }
    let last = dirs.last().copied();
    match last {
        Some(d) => Err(d.arg_err()),
        None => clusterdns_contract::parse::once(dirs).map(|_| ()),
    }
}

/// The query and response rules of one `header` block.
fn parse(d: &Directive) -> Result<(Masks, Masks), ConfigError> {
    let mut query = Masks::default();
    let mut response = Masks::default();
    for line in &d.block {
        let selector = line.name.text.to_lowercase();
        let masks = match selector.as_str() {
            "query" => &mut query,
            "response" => &mut response,
            _ => {
                return Err(line.err(format!(
                    "setting up rule: invalid selector={selector} should be query or response"
                )));
            }
        };
        let rule_err = |msg: String| line.err(format!("setting up rule: {msg}"));
        let mut args = line.arg_texts();
        let Some(action) = args.next() else {
            return Err(rule_err("no flag action provided".into()));
        };
        let flags: Vec<&str> = args.collect();
        if flags.is_empty() {
            return Err(rule_err(
                "invalid length for flags, at least one should be provided".into(),
            ));
        }
        let on = match action.to_lowercase().as_str() {
            "set" => true,
            "clear" => false,
            other => {
                return Err(rule_err(format!(
                    "unknown flag action={other}, should be set or clear"
                )));
            }
        };
        for f in flags {
            let bit = match f.to_lowercase().as_str() {
                "aa" => FLAG_AA,
                "ra" => FLAG_RA,
                "rd" => FLAG_RD,
                other => return Err(rule_err(format!("unknown/unsupported flag={other}"))),
            };
            masks.add(bit, on);
        }
    }
    Ok((query, response))
}

/// The *header* handler.
#[derive(Debug)]
pub struct Header {
    query: Masks,
    response: Masks,
}

impl Header {
    fn edit_query(&self, req: &Request<'_>) {
        if !self.query.is_empty() {
            req.edits.set_flags(self.query.set, self.query.clear);
        }
    }
}

impl Plugin for Header {
    fn name(&self) -> &'static str {
        "header"
    }

    fn query(&self, req: &Request<'_>, _w: &mut ResponseWriter) -> Flow {
        self.edit_query(req);
        Flow::Next
    }

    fn edit(&self, req: &Request<'_>) {
        self.edit_query(req);
    }

    fn response(&self, _req: &Request<'_>, w: &mut ResponseWriter, outcome: &Outcome) {
        // The server's own error replies bypass CoreDNS's header writer.
        if self.response.is_empty() || outcome.error.is_some() || w.written_by_server() {
            return;
        }
        clusterdns_wire::set_flags(w.buffer_mut(), self.response.set, self.response.clear);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{setup, setup_err};

    fn masks(c: &str) -> (Masks, Masks) {
        let f = clusterdns_corefile::parse_str(
            c,
            "Corefile".as_ref(),
            &std::collections::HashMap::new(),
        )
        .unwrap();
        parse(&f.blocks[0].directives[0]).unwrap()
    }

    #[test]
    fn rules_fold_in_order() {
        let (q, r) = masks(
            ". {\n header {\n  response set ra aa\n  response clear rd aa\n  QUERY SET RD\n }\n}",
        );
        assert_eq!(
            r,
            Masks {
                set: FLAG_RA,
                clear: FLAG_RD | FLAG_AA
            }
        );
        assert_eq!(
            q,
            Masks {
                set: FLAG_RD,
                clear: 0
            }
        );
    }

    #[test]
    fn setup_table() {
        assert_eq!(
            setup(DEF, ". {\n header {\n  response set ra\n }\n}")
                .unwrap()
                .plugins
                .len(),
            1
        );
        for (c, want) in [
            (
                ". {\n header\n}",
                "Wrong argument count or unexpected line ending after 'header'",
            ),
            (
                ". {\n header {\n  foo set ra\n }\n}",
                "setting up rule: invalid selector=foo should be query or response",
            ),
            (
                ". {\n header {\n  query\n }\n}",
                "setting up rule: no flag action provided",
            ),
            (
                ". {\n header {\n  query set\n }\n}",
                "setting up rule: invalid length for flags, at least one should be provided",
            ),
            (
                ". {\n header {\n  query flip rd\n }\n}",
                "setting up rule: unknown flag action=flip, should be set or clear",
            ),
            (
                ". {\n header {\n  query set cd\n }\n}",
                "setting up rule: unknown/unsupported flag=cd",
            ),
        ] {
            let e = setup_err(DEF, c);
            assert!(e.contains(want), "{c}: {e}");
        }
    }
}
