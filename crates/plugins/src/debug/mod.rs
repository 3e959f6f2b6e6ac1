#![doc = include_str!("README.md")]

use clusterdns_contract::{PluginDef, SetupCtx};
use clusterdns_corefile::{ConfigError, Directive};

/// Registration of *debug*.
pub const DEF: PluginDef = PluginDef {
    name: "debug",
    setup,
};

fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    // CoreDNS reads every `debug` line and takes no argument on any.
    for d in dirs {
        clusterdns_contract::parse::no_args_or_block(d)?;
    }
    ctx.shared.debug = true;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{setup, setup_err};

    #[test]
    fn turns_debug_logging_on_and_takes_no_arguments() {
        let r = setup(DEF, ". {\n debug\n}").unwrap();
        assert!(r.shared.debug);
        assert!(r.plugins.is_empty());
        assert_eq!(
            setup_err(DEF, ". {\n debug on\n}"),
            "Wrong argument count or unexpected line ending after 'on'"
        );
    }
}
