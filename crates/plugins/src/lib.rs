//! The plugins of clusterdns, one module each. A module's documentation is
//! its README (Name, Description, Syntax, Examples, Metrics, Ready), in the
//! format of CoreDNS's plugin READMEs.
//!
//! [`registry`] lists them in chain order; a test checks it against the
//! repository's `plugin.cfg`, the one place that order is declared.

pub mod acl;
pub mod any;
pub mod autopath;
pub mod bind;
pub mod bufsize;
pub mod cache;
pub mod cancel;
pub mod chaos;
pub mod debug;
pub mod dns64;
pub mod erratic;
pub mod errors;
pub mod file;
pub mod forward;
pub mod header;
pub mod health;
pub mod hosts;
pub mod k8s_external;
pub mod kubernetes;
pub mod loadbalance;
pub mod local;
pub mod log;
pub mod loop_;
pub mod metadata;
pub mod minimal;
pub mod nsid;
pub mod prometheus;
pub mod ready;
pub mod reload;
pub mod rewrite;
pub mod root;
pub mod template;
pub mod timeouts;
pub mod transfer;
pub mod view;
pub mod whoami;

/// What several plugins share (CoreDNS's `plugin/pkg`): plugins import
/// these, never one another (bin/clusterdns/tests/architecture.rs).
pub(crate) mod pkg;
/// The plugins' shared unit-test harness (setup on a Corefile snippet, a
/// query through the handlers it added); never in the product.
#[cfg(test)]
pub(crate) mod testutil;

use clusterdns_contract::PluginDef;

/// Every compiled-in plugin, in `plugin.cfg` order.
pub fn registry() -> Vec<PluginDef> {
    vec![
        root::DEF,
        metadata::DEF,
        cancel::DEF,
        timeouts::DEF,
        reload::DEF,
        nsid::DEF,
        bufsize::DEF,
        bind::DEF,
        debug::DEF,
        ready::DEF,
        health::DEF,
        prometheus::DEF,
        errors::DEF,
        log::DEF,
        local::DEF,
        dns64::DEF,
        any::DEF,
        chaos::DEF,
        loadbalance::DEF,
        rewrite::DEF,
        autopath::DEF,
        acl::DEF,
        cache::DEF,
        header::DEF,
        minimal::DEF,
        template::DEF,
        transfer::DEF,
        hosts::DEF,
        k8s_external::DEF,
        kubernetes::DEF,
        file::DEF,
        loop_::DEF,
        forward::DEF,
        erratic::DEF,
        whoami::DEF,
        view::DEF,
    ]
}

#[cfg(test)]
mod tests {
    #[test]
    fn registry_matches_plugin_cfg() {
        let cfg = include_str!("../../../plugin.cfg");
        let want = clusterdns_contract::setup::parse_plugin_cfg(cfg);
        let have: Vec<&str> = super::registry().iter().map(|p| p.name).collect();
        assert_eq!(
            have, want,
            "crates/plugins registry() and plugin.cfg disagree"
        );
    }
}
