//! *any*: not implemented yet. Using it in a Corefile is a configuration
//! error, so no Corefile silently loses a plugin.

use clusterdns_corefile::{ConfigError, Directive};
use clusterdns_plugin::{PluginDef, SetupCtx};

/// Registration of *any*.
pub const DEF: PluginDef = PluginDef { name: "any", setup };

fn setup(_ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    Err(dirs[0].err("plugin not implemented yet"))
}
