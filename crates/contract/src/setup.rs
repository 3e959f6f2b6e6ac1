//! Turning a server block's directives into plugins.
//!
//! Each plugin exports a [`PluginDef`]: its name and a [`SetupFn`] that
//! reads every directive of that name in a block and adds what it needs
//! to the [`SetupCtx`]: a query handler, HTTP routes, readiness checks,
//! start-up and shut-down hooks. The server calls the setup functions in
//! `plugin.cfg` order, so handlers land in the chain in that order.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use clusterdns_corefile::{ConfigError, Directive, ServerBlock, ServerKey};

use crate::Plugin;
use crate::metrics::Registry;

/// Reads all directives of one plugin in one server block.
pub type SetupFn = fn(&mut SetupCtx<'_>, &[&Directive]) -> Result<(), ConfigError>;

/// A compiled-in plugin.
#[derive(Debug, Clone, Copy)]
pub struct PluginDef {
    /// Its directive name.
    pub name: &'static str,
    /// Its setup function.
    pub setup: SetupFn,
}

/// An HTTP reply from an admin route.
#[derive(Debug, Clone)]
pub struct HttpReply {
    /// Status code.
    pub status: u16,
    /// `Content-Type` header.
    pub content_type: &'static str,
    /// Body.
    pub body: Vec<u8>,
    /// Sent as Go's promhttp streams a body: chunked, gzip-compressed
    /// when the client accepts it, and no length on `HEAD`.
    pub streamed: bool,
}

/// Produces the reply of an admin route.
pub type HttpHandler = Arc<dyn Fn() -> HttpReply + Send + Sync>;

/// A route served by the admin HTTP listeners (health, ready, metrics).
#[derive(Clone)]
pub struct HttpRoute {
    /// Listen address (`:8080` binds all addresses).
    pub addr: SocketAddr,
    /// Path, e.g. `/health`.
    pub path: String,
    /// The handler.
    pub handler: HttpHandler,
}

impl std::fmt::Debug for HttpRoute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.addr, self.path)
    }
}

/// A readiness check: `true` once the plugin can answer.
pub type ReadyCheck = Arc<dyn Fn() -> bool + Send + Sync>;

/// The readiness checks of one configuration.
#[derive(Clone, Default)]
pub struct ReadyList(pub Arc<parking_lot::Mutex<Vec<(&'static str, ReadyCheck)>>>);

impl ReadyList {
    /// Names of the plugins that are not ready yet, in registration order.
    pub fn not_ready(&self) -> Vec<&'static str> {
        self.0
            .lock()
            .iter()
            .filter(|(_, check)| !check())
            .map(|(name, _)| *name)
            .collect()
    }
}

impl std::fmt::Debug for ReadyList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.lock().iter().map(|(n, _)| n))
            .finish()
    }
}

/// A hook run when the configuration starts serving (in the runtime's
/// context, so it may spawn tasks) or stops.
pub type Hook = Box<dyn FnOnce() -> Result<(), String> + Send>;

/// The `reload` plugin's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReloadSettings {
    /// How often the Corefile is checked.
    pub interval: Duration,
    /// Random spread added to the interval.
    pub jitter: Duration,
}

/// Connection limits a block asks of its listeners' TCP side (the
/// *timeouts* plugin; CoreDNS's `Config.ReadTimeout`, `WriteTimeout`,
/// `IdleTimeout` and `MaxTCPQueries`). `None` keeps the server's value;
/// where several blocks share a listener, the last block that sets one
/// wins, as in CoreDNS's `NewServer`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnLimits {
    /// Time for the first query and for each message once begun.
    pub read: Option<Duration>,
    /// Time for each reply to be written.
    pub write: Option<Duration>,
    /// Time allowed between queries.
    pub idle: Option<Duration>,
    /// Queries served on one connection before it is closed; `Some(None)`
    /// is CoreDNS's `-1`, unlimited.
    pub max_queries: Option<Option<u32>>,
}

/// A server block's condition for taking a query, asked by the server
/// before the block's chain runs (CoreDNS's `dnsserver.Viewer`, which
/// *view* implements). Blocks with a filter may share a zone and port
/// with each other and with one block without; for each query the server
/// takes the first block, in Corefile order, whose filter passes (a block
/// without one always does), trying shorter zones when none of a zone's
/// blocks does.
pub trait BlockFilter: Send + Sync + 'static {
    /// Whether the block takes `req` (its `zone` is the block's zone).
    fn matches(&self, req: &crate::Request<'_>) -> bool;
}

/// State shared by all server blocks of one configuration.
pub struct Shared {
    /// The process's metrics; survives reloads.
    pub metrics: Arc<Registry>,
    /// HTTP routes to serve.
    pub routes: Vec<HttpRoute>,
    /// Readiness checks by plugin name, for `ready` (shared, so a route
    /// set up before the other plugins sees their checks).
    pub readiness: ReadyList,
    /// Run after every block is set up, before serving.
    pub on_startup: Vec<Hook>,
    /// Run when this configuration stops serving.
    pub on_shutdown: Vec<Hook>,
    /// Set by `reload`.
    pub reload: Option<ReloadSettings>,
    /// Set by `health ... { lameduck D }`.
    pub lameduck: Option<Duration>,
    /// Set by `debug` in any block: `[DEBUG]` lines are written while
    /// this configuration serves.
    pub debug: bool,
    /// Set by the server when the process starts shutting down (during
    /// the lameduck period), so `ready` can report it.
    pub shutting_down: Arc<std::sync::atomic::AtomicBool>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("routes", &self.routes)
            .field("reload", &self.reload)
            .field("lameduck", &self.lameduck)
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// Shared state using the process's metrics registry.
    pub fn new(metrics: Arc<Registry>) -> Self {
        Self {
            metrics,
            routes: Vec::new(),
            readiness: ReadyList::default(),
            on_startup: Vec::new(),
            on_shutdown: Vec::new(),
            reload: None,
            lameduck: None,
            debug: false,
            shutting_down: Arc::default(),
        }
    }
}

/// What a setup function sees and fills in for one server block.
pub struct SetupCtx<'a> {
    /// The block being set up.
    pub block: &'a ServerBlock,
    /// Its parsed keys (zones and ports).
    pub keys: &'a [ServerKey],
    /// Directory of the Corefile (relative paths in plugin arguments are
    /// resolved against it, like CoreDNS's `root`-less behaviour).
    pub config_dir: &'a Path,
    /// Process-wide state of this configuration.
    pub shared: &'a mut Shared,
    /// Addresses set by `bind` (names of interfaces already resolved by
    /// the plugin); empty means all addresses.
    pub bind: Vec<std::net::IpAddr>,
    /// The port of keys without one (`-dns.port`, default 53); with
    /// `bind`, it gives the listeners' `server` metric labels.
    pub dns_port: u16,
    /// Set by `timeouts`: the TCP limits of this block's listeners.
    pub conn_limits: ConnLimits,
    /// Set by `view`: the block takes only the queries this passes.
    pub filter: Option<Arc<dyn BlockFilter>>,
    /// Set by `root` (CoreDNS's `Config.Root`), as written: the directory
    /// `file` takes a relative zone file from ([`crate::parse::rooted`]).
    /// `root` is first in `plugin.cfg`, so it is set before any plugin
    /// that reads it runs its setup.
    pub root: Option<String>,
    plugins: Vec<Arc<dyn Plugin>>,
    tails: Vec<(usize, ChainTail)>,
    blocks: Vec<BlockChain>,
}

/// Every handler of a block, for the plugin that holds it to ask its own
/// server again; see [`SetupCtx::bind_chain`]. Empty before the chain is
/// built and after the configuration stopped serving.
#[derive(Clone, Default)]
pub struct BlockChain(Arc<parking_lot::RwLock<Option<crate::Chain>>>);

impl BlockChain {
    /// The block's chain, while it serves.
    pub fn get(&self) -> Option<crate::Chain> {
        self.0.read().clone()
    }
}

impl std::fmt::Debug for BlockChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("BlockChain").field(&*self.0.read()).finish()
    }
}

/// The plugins that follow one plugin in its block's chain, filled in
/// when the chain is built. A plugin that must re-run the rest of the
/// chain in the background (the cache's prefetch and serve_stale
/// refreshes) keeps one; see [`SetupCtx::bind_tail`].
#[derive(Clone, Default)]
pub struct ChainTail(Arc<std::sync::OnceLock<crate::Chain>>);

impl ChainTail {
    /// The plugins after the bound position, once the chain is built.
    pub fn get(&self) -> Option<&crate::Chain> {
        self.0.get()
    }
}

impl std::fmt::Debug for ChainTail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ChainTail").field(&self.0.get()).finish()
    }
}

impl std::fmt::Debug for SetupCtx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SetupCtx")
            .field("keys", &self.keys)
            .field("bind", &self.bind)
            .finish_non_exhaustive()
    }
}

impl<'a> SetupCtx<'a> {
    /// A context for one block.
    pub fn new(
        block: &'a ServerBlock,
        keys: &'a [ServerKey],
        config_dir: &'a Path,
        shared: &'a mut Shared,
    ) -> Self {
        Self {
            block,
            keys,
            config_dir,
            shared,
            bind: Vec::new(),
            dns_port: 53,
            conn_limits: ConnLimits::default(),
            filter: None,
            root: None,
            plugins: Vec::new(),
            tails: Vec::new(),
            blocks: Vec::new(),
        }
    }

    /// Fills `tail`, when the chain is built, with the handlers added
    /// after this call (call it right after adding your own handler).
    pub fn bind_tail(&mut self, tail: &ChainTail) {
        self.tails.push((self.plugins.len(), tail.clone()));
    }

    /// Fills `chain`, when the chain is built, with every handler of the
    /// block, this plugin's included: for a plugin that asks its own
    /// server again, as CoreDNS's `upstream.Lookup` re-enters the server
    /// (the inner query is counted, logged and cached like any other).
    /// The handler holding it is then in a cycle with the chain; the chain
    /// is dropped when the configuration stops serving, which breaks it.
    pub fn bind_chain(&mut self, chain: &BlockChain) {
        self.blocks.push(chain.clone());
        let c = chain.clone();
        self.shared.on_shutdown.push(Box::new(move || {
            *c.0.write() = None;
            Ok(())
        }));
    }

    /// Every zone of the block's keys (lowercase FQDN), without
    /// duplicates, in key order. Plugins use them as default zones.
    pub fn zones(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for z in self.keys.iter().flat_map(|k| k.zones.iter()) {
            if !out.contains(z) {
                out.push(z.clone());
            }
        }
        out
    }

    /// The `server` labels of this block's listeners, as the server
    /// names them in metrics (`dns://:53`, or `dns://IP:53` with `bind`),
    /// without duplicates. Call it after `bind` has run.
    pub fn server_labels(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for k in self.keys {
            let port = k.port.unwrap_or(self.dns_port);
            let labels: Vec<String> = if self.bind.is_empty() {
                vec![format!("dns://:{port}")]
            } else {
                self.bind
                    .iter()
                    .map(|ip| format!("dns://{}", SocketAddr::new(*ip, port)))
                    .collect()
            };
            for l in labels {
                if !out.contains(&l) {
                    out.push(l);
                }
            }
        }
        out
    }

    /// The name of the block's view (the argument of its `view`
    /// directive), or empty: CoreDNS's `Config.ViewName`, the `view` label
    /// of the metrics a block's plugins export. Read from the block, so
    /// plugins set up before *view* see it too.
    pub fn view_name(&self) -> &str {
        self.block
            .directives_named("view")
            .next()
            .and_then(|d| d.args.first())
            .map_or("", |a| a.text.as_str())
    }

    /// Adds a query handler; handlers run in the order they were added.
    pub fn add_plugin(&mut self, p: Arc<dyn Plugin>) {
        self.plugins.push(p);
    }

    /// Registers a readiness check for `ready`.
    pub fn add_ready(&mut self, name: &'static str, check: ReadyCheck) {
        self.shared.readiness.0.lock().push((name, check));
    }

    /// Takes the handlers added so far.
    pub fn take_plugins(&mut self) -> Vec<Arc<dyn Plugin>> {
        for b in self.blocks.drain(..) {
            *b.0.write() = Some(crate::Chain::new(self.plugins.clone()));
        }
        for (at, tail) in self.tails.drain(..) {
            let rest = self.plugins.get(at..).unwrap_or(&[]).to_vec();
            let _ = tail.0.set(crate::Chain::new(rest));
        }
        std::mem::take(&mut self.plugins)
    }
}

/// Reads `plugin.cfg` text: the names in order, comments and blanks
/// skipped. Used by tests that check a registry against the file.
pub fn parse_plugin_cfg(text: &str) -> Vec<&str> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split(':').next())
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::{Arc, Weak};

    use clusterdns_corefile::{ProcessEnv, parse_key, parse_str};

    use super::*;
    use crate::{Flow, Request, ResponseWriter};

    /// A handler that keeps its block's whole chain (as *template* does
    /// for its lookups; never read here).
    struct Holder(#[allow(dead_code)] BlockChain);

    impl Plugin for Holder {
        fn name(&self) -> &'static str {
            "holder"
        }
        fn query(&self, _req: &Request<'_>, _w: &mut ResponseWriter) -> Flow {
            Flow::Next
        }
    }

    #[test]
    fn a_block_chain_holds_every_handler_until_shutdown() {
        let cf = parse_str(". {\n}\n", Path::new("Corefile"), &ProcessEnv).expect("parses");
        let block = &cf.blocks[0];
        let keys: Vec<_> = block
            .keys
            .iter()
            .map(|k| parse_key(k).expect("key"))
            .collect();
        let mut shared = Shared::new(Arc::new(Registry::new()));
        let chain = BlockChain::default();
        let weak: Weak<Holder>;
        {
            let mut ctx = SetupCtx::new(block, &keys, Path::new("."), &mut shared);
            let first = Arc::new(Holder(BlockChain::default()));
            ctx.add_plugin(first);
            ctx.bind_chain(&chain);
            let holder = Arc::new(Holder(chain.clone()));
            weak = Arc::downgrade(&holder);
            ctx.add_plugin(holder);
            let plugins = ctx.take_plugins();
            assert_eq!(plugins.len(), 2);
        }
        assert_eq!(chain.get().map(|c| c.plugins().len()), Some(2));
        drop(chain);
        // The holder and the chain keep each other alive until the
        // configuration's shutdown hooks run.
        assert!(weak.upgrade().is_some());
        for hook in std::mem::take(&mut shared.on_shutdown) {
            hook().expect("hook");
        }
        assert!(weak.upgrade().is_none(), "the cycle was not broken");
    }
}
