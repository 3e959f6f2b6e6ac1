#![doc = include_str!("README.md")]

use std::sync::Arc;

use clusterdns_contract::{Flow, Plugin, PluginDef, Request, ResponseWriter, SetupCtx};
use clusterdns_corefile::{ConfigError, Directive};

/// Registration of *metadata*.
pub const DEF: PluginDef = PluginDef {
    name: "metadata",
    setup,
};

fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    // CoreDNS reads one directive, then fails on whatever token comes
    // next: the first line of a block, or a second `metadata`.
    let Some(d) = dirs.first() else {
        return clusterdns_contract::parse::once(dirs).map(|_| ());
    };
    if let Some(first) = d.block.first() {
        return Err(first.name.err(format!(
            "Wrong argument count or unexpected line ending after '{}'",
            first.name.text
        )));
    }
    if let Some(second) = dirs.get(1) {
        return Err(second.name.err(format!(
            "Wrong argument count or unexpected line ending after '{}'",
            second.name.text
        )));
    }
    ctx.add_plugin(Arc::new(Metadata));
    Ok(())
}

/// The *metadata* handler: with no providers, it passes every query on.
#[derive(Debug)]
pub struct Metadata;

impl Plugin for Metadata {
    fn name(&self) -> &'static str {
        "metadata"
    }

    fn query(&self, _req: &Request<'_>, _w: &mut ResponseWriter) -> Flow {
        Flow::Next
    }
}

#[cfg(test)]
mod tests {
    use super::DEF;
    use crate::testutil::{setup, setup_err};

    #[test]
    fn setup_table() {
        for c in [
            ". {\n metadata\n}",
            ". {\n metadata example.com cluster.local\n}",
        ] {
            let r = setup(DEF, c).unwrap_or_else(|e| panic!("{c}: {e}"));
            assert_eq!(r.plugins.len(), 1, "{c}");
        }
        for (c, want) in [
            (". {\n metadata {\n  foo\n }\n}", "after 'foo'"),
            (". {\n metadata\n metadata\n}", "after 'metadata'"),
        ] {
            let e = setup_err(DEF, c);
            assert!(e.contains(want), "{c}: {e}");
        }
    }
}
