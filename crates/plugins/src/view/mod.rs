#![doc = include_str!("README.md")]

mod expr;

use std::sync::Arc;

use clusterdns_contract::{
    BlockFilter, Flow, Plugin, PluginDef, Request, ResponseWriter, SetupCtx,
};
use clusterdns_corefile::{ConfigError, Directive};

pub use expr::{CompileError, Program};

/// Registration of *view*.
pub const DEF: PluginDef = PluginDef {
    name: "view",
    setup,
};

/// A block's view: its name and the expressions that must all be true.
#[derive(Debug)]
pub struct View {
    name: String,
    programs: Vec<Program>,
}

impl View {
    /// The view's name (the `view` label of the block's metrics).
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl BlockFilter for View {
    fn matches(&self, req: &Request<'_>) -> bool {
        self.programs.iter().all(|p| p.is_true(req))
    }
}

fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    let d = clusterdns_contract::parse::once(dirs)?;
    let view = Arc::new(parse(d)?);
    ctx.filter = Some(view);
    ctx.add_plugin(Arc::new(Pass));
    Ok(())
}

fn parse(d: &Directive) -> Result<View, ConfigError> {
    let name = clusterdns_contract::parse::one_arg(d)?.to_owned();
    let mut programs = Vec::new();
    for line in &d.block {
        match line.name.text.as_str() {
            "expr" => {
                // CoreDNS joins the line's words with single spaces.
                let src = line.arg_texts().collect::<Vec<_>>().join(" ");
                let p = Program::compile(&src).map_err(|e| line.err(e.0))?;
                programs.push(p);
            }
            other => return Err(line.err(format!("unknown property '{other}'"))),
        }
    }
    Ok(View { name, programs })
}

/// *view*'s place in the chain: it only passes queries on (the server
/// asked its filter before choosing the block).
#[derive(Debug)]
struct Pass;

impl Plugin for Pass {
    fn name(&self) -> &'static str {
        "view"
    }

    fn query(&self, _req: &Request<'_>, _w: &mut ResponseWriter) -> Flow {
        Flow::Next
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{setup, setup_err};

    #[test]
    fn setup_sets_the_filter_and_checks_arguments() {
        assert!(setup(DEF, ". {\n view v {\n  expr type() == 'A'\n }\n}").is_ok());
        for (c, want) in [
            (
                ". {\n view {\n  expr true\n }\n}",
                "Wrong argument count or unexpected line ending after 'view'",
            ),
            (
                ". {\n view a b\n}",
                "Wrong argument count or unexpected line ending after 'b'",
            ),
            (
                ". {\n view v {\n  foo true\n }\n}",
                "unknown property 'foo'",
            ),
            (". {\n view v\n view w\n}", clusterdns_contract::parse::ONCE),
            (
                ". {\n view v {\n  expr foo()\n }\n}",
                "unknown name foo (1:1)\n | foo()\n | ^",
            ),
            (". {\n view v {\n  expr\n }\n}", "unexpected token EOF"),
        ] {
            assert_eq!(setup_err(DEF, c), want, "{c}");
        }
    }
}
