#![doc = include_str!("README.md")]

use std::sync::Arc;
use std::time::Duration;

use clusterdns_contract::duration::parse_go_signed;
use clusterdns_contract::{Flow, Plugin, PluginDef, Request, ResponseWriter, SetupCtx};
use clusterdns_corefile::{ConfigError, Directive};

/// Registration of *cancel*.
pub const DEF: PluginDef = PluginDef {
    name: "cancel",
    setup,
};

/// The limit when none is given: just past *forward*'s own five seconds.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(5001);

fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    // As CoreDNS: every line is read, the last one counts.
    let mut timeout = DEFAULT_TIMEOUT;
    for d in dirs {
        timeout = parse(d)?;
    }
    ctx.add_plugin(Arc::new(Cancel { timeout }));
    Ok(())
}

fn parse(d: &Directive) -> Result<Duration, ConfigError> {
    let Some(arg) = clusterdns_contract::parse::optional_arg(d)? else {
        return Ok(DEFAULT_TIMEOUT);
    };
    match parse_go_signed(arg) {
        Err(_) => Err(d.err(format!("invalid duration: {arg:?}"))),
        Ok(s) if s.negative || s.magnitude.is_zero() => {
            Err(d.err(format!("invalid negative duration: {arg:?}")))
        }
        Ok(s) => Ok(s.magnitude),
    }
}

/// The *cancel* handler.
#[derive(Debug)]
pub struct Cancel {
    timeout: Duration,
}

impl Plugin for Cancel {
    fn name(&self) -> &'static str {
        "cancel"
    }

    fn query(&self, req: &Request<'_>, _w: &mut ResponseWriter) -> Flow {
        req.edits.set_timeout(self.timeout);
        Flow::Next
    }

    fn edit(&self, req: &Request<'_>) {
        req.edits.set_timeout(self.timeout);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{setup, setup_err};

    #[test]
    fn setup_table() {
        for c in [
            ". {\n cancel\n}",
            ". {\n cancel 1s\n}",
            ". {\n cancel 2s\n cancel 100ms\n}",
        ] {
            setup(DEF, c).unwrap_or_else(|e| panic!("{c}: {e}"));
        }
        for (c, want) in [
            (". {\n cancel x\n}", "invalid duration: \"x\""),
            (". {\n cancel -1s\n}", "invalid negative duration: \"-1s\""),
            (". {\n cancel 0s\n}", "invalid negative duration: \"0s\""),
            (". {\n cancel 1s 2s\n}", "Wrong argument count"),
        ] {
            let e = setup_err(DEF, c);
            assert!(e.contains(want), "{c}: {e}");
        }
    }
}
