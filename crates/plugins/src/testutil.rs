//! Test helpers shared by the plugin modules' unit tests: read a Corefile
//! snippet's directives, run a plugin's setup on it, and run a query
//! through the handlers it added. No sockets. (Query packets and reply
//! decoding come from `clusterdns_contract::testing`.)

use std::path::Path;
use std::sync::Arc;

use clusterdns_contract::metrics::Registry;
use clusterdns_contract::testing::{self, Reply};
use clusterdns_contract::{
    Chain, Plugin, PluginDef, Proto, Request, ResponseWriter, SetupCtx, Shared,
};
use clusterdns_corefile::{ConfigError, Directive, ProcessEnv, parse_key, parse_str};
use clusterdns_wire::{Name, Query};

/// What a setup left behind.
pub(crate) struct SetupResult {
    /// The handlers it added.
    pub plugins: Vec<Arc<dyn Plugin>>,
    /// The shared state (hooks, metrics).
    pub shared: Shared,
    /// The block's *root* directory, as `root` left it in the context.
    pub root: Option<String>,
}

/// Parses `corefile` (one block) and runs `def`'s setup on the directives
/// named like it. `config_dir` anchors relative paths.
pub(crate) fn setup_in(
    def: PluginDef,
    corefile: &str,
    config_dir: &Path,
) -> Result<SetupResult, ConfigError> {
    setup_all_in(&[def], corefile, config_dir)
}

/// [`setup_in`] for several plugins that meet in one context (*root*
/// before *file*): each setup that has directives runs, in the order of
/// `defs`, as the registry's order runs them in the server.
pub(crate) fn setup_all_in(
    defs: &[PluginDef],
    corefile: &str,
    config_dir: &Path,
) -> Result<SetupResult, ConfigError> {
    let cf = parse_str(corefile, Path::new("Corefile"), &ProcessEnv)?;
    let block = &cf.blocks[0];
    let keys = block
        .keys
        .iter()
        .map(parse_key)
        .collect::<Result<Vec<_>, _>>()?;
    let mut shared = Shared::new(Arc::new(Registry::new()));
    let (plugins, root) = {
        let mut ctx = SetupCtx::new(block, &keys, config_dir, &mut shared);
        for def in defs {
            let dirs: Vec<_> = block.directives_named(def.name).collect();
            // A single plugin's tests run its setup even without lines.
            if !dirs.is_empty() || defs.len() == 1 {
                (def.setup)(&mut ctx, &dirs)?;
            }
        }
        let root = ctx.root.take();
        (ctx.take_plugins(), root)
    };
    Ok(SetupResult {
        plugins,
        shared,
        root,
    })
}

/// Parses a Corefile and returns its first block's directives called
/// `name` (cloned), for tests of a plugin's parser alone.
pub(crate) fn directives(corefile: &str, name: &str) -> Vec<Directive> {
    let cf = parse_str(corefile, Path::new("Corefile"), &ProcessEnv).expect("test Corefile parses");
    cf.blocks[0].directives_named(name).cloned().collect()
}

/// [`setup_in`] with the current directory.
pub(crate) fn setup(def: PluginDef, corefile: &str) -> Result<SetupResult, ConfigError> {
    setup_in(def, corefile, Path::new("."))
}

/// The error message of a failing setup (panics if it succeeds).
pub(crate) fn setup_err(def: PluginDef, corefile: &str) -> String {
    match setup(def, corefile) {
        Ok(_) => panic!("setup of {corefile:?} succeeded"),
        Err(e) => e.msg,
    }
}

/// Runs the raw query `pkt` through `plugins` (as a chain) over `proto`;
/// returns the reply bytes.
pub(crate) fn run_raw(plugins: &[Arc<dyn Plugin>], pkt: &[u8], proto: Proto) -> Vec<u8> {
    let q = Query::parse(pkt).expect("test query parses");
    let zone = Name::root();
    let mut req: Request<'_> = testing::request(&q, &zone);
    req.proto = proto;
    let chain = Chain::new(plugins.to_vec());
    let mut w = ResponseWriter::new();
    let _ = chain
        .run_sync(&req, &mut w)
        .expect("no async plugin in tests");
    w.bytes().to_vec()
}

/// Like [`run_raw`], but a query a plugin defers goes on, as in the
/// server, on the asynchronous path ([`Chain::run_async_from`]), on a
/// current-thread runtime with timers.
pub(crate) fn run_raw_async(plugins: &[Arc<dyn Plugin>], pkt: &[u8], proto: Proto) -> Vec<u8> {
    let q = Query::parse(pkt).expect("test query parses");
    let zone = Name::root();
    let mut req: Request<'_> = testing::request(&q, &zone);
    req.proto = proto;
    let chain = Chain::new(plugins.to_vec());
    let mut w = ResponseWriter::new();
    if let Err(deferred) = chain.run_sync(&req, &mut w) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("test runtime");
        rt.block_on(chain.run_async_from(deferred, &req, &mut w));
    }
    w.bytes().to_vec()
}

/// Runs `pkt` over UDP and decodes the reply.
pub(crate) fn run(plugins: &[Arc<dyn Plugin>], pkt: &[u8]) -> Reply {
    testing::reply(&run_raw(plugins, pkt, Proto::Udp))
}
