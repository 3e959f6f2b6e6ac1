//! The chain of plugins of one server block and the typed flow between them.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use clusterdns_wire::Rcode;

use crate::{PluginError, Request, ResponseWriter};

/// A boxed, sendable future, for the asynchronous path.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a plugin decided about a query.
#[derive(Debug)]
pub enum Flow {
    /// A complete reply is in the writer.
    Answered,
    /// Pass the query to the next plugin.
    Next,
    /// The plugin needs the asynchronous path ([`Plugin::query_async`]).
    Async,
    /// Nothing was written; the server replies with `e.rcode()`.
    Fail(PluginError),
}

/// The synchronous pass met a plugin that needs I/O: run
/// [`Chain::run_async_from`] (or [`Chain::run_async`]) instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deferred {
    /// Position in the chain of the plugin that returned `Async`.
    pub at: usize,
}

/// How a query ended, shown to the plugins' response hooks.
#[derive(Debug)]
pub struct Outcome {
    /// The rcode written to the client.
    pub rcode: Rcode,
    /// The plugin that answered or failed (empty when the chain ran out).
    pub plugin: &'static str,
    /// The error, when a plugin failed.
    pub error: Option<PluginError>,
}

/// A plugin's query handler. See the crate documentation for the flow.
pub trait Plugin: Send + Sync + 'static {
    /// The plugin's name as written in the Corefile.
    fn name(&self) -> &'static str;

    /// The synchronous handler, run on the receiving thread.
    ///
    /// It must not have side effects unless it returns `Answered` or
    /// `Fail`: when a later plugin returns `Async`, the query continues on
    /// the asynchronous path from that plugin, whose `query_async` is then
    /// called without a second `query` (a plugin that is asked again on a
    /// walk started over, such as a cache in front of a refresh, must
    /// cope). What `query` learned before deferring can be handed to
    /// `query_async` with [`ResponseWriter::defer_with`].
    fn query(&self, req: &Request<'_>, w: &mut ResponseWriter) -> Flow;

    /// The asynchronous handler, awaited when `query` returned `Async`.
    fn query_async<'a>(
        &'a self,
        req: &'a Request<'a>,
        w: &'a mut ResponseWriter,
    ) -> BoxFuture<'a, Flow> {
        let _ = (req, w);
        let plugin = self.name();
        Box::pin(async move { Flow::Fail(PluginError::NotAsync { plugin }) })
    }

    /// Makes again the changes to the query ([`Request::edits`]) that
    /// this plugin's `query` made before it returned `Next`: the
    /// asynchronous path does not ask the plugins before the deferring one
    /// again, yet the plugins behind them must see the query as changed.
    fn edit(&self, req: &Request<'_>) {
        let _ = req;
    }

    /// Sees (and may edit) the reply of a query this plugin passed on,
    /// after the plugins behind it are done. Called in reverse chain
    /// order.
    fn response(&self, req: &Request<'_>, w: &mut ResponseWriter, outcome: &Outcome) {
        let _ = (req, w, outcome);
    }

    /// This plugin as a source of clients' search paths, for *autopath*
    /// (`autopath @NAME` finds the plugin by name); `None` for most.
    fn auto_pather(&self) -> Option<&dyn crate::AutoPather> {
        None
    }

    /// This plugin as a source of external-zone answers, for
    /// *k8s_external*; `None` for most.
    fn externaler(&self) -> Option<&dyn crate::Externaler> {
        None
    }

    /// The plugin's zone transfers, if it can send its zones out (for
    /// *transfer*; see [`crate::transfer`]).
    fn transferer(&self) -> Option<&dyn crate::transfer::Transferer> {
        None
    }

    /// Why this plugin treats `req` as it does, in sentences for an
    /// operator: the rule or the objects behind its answer, and for a
    /// name error whether the name is missing or only the type
    /// (`clusterdns explain`). Empty when there is nothing to add to the
    /// outcome. Never called while serving, so it may allocate.
    fn explain(&self, req: &Request<'_>) -> Vec<String> {
        let _ = req;
        Vec::new()
    }
}

/// For a plugin's [`Plugin::query_async`]: the note of type `T` its
/// synchronous pass left ([`ResponseWriter::defer_with`]), or, when it is
/// asked without that pass (a walk started over), the pass run now:
/// `Err(flow)` when it decided without deferring (or deferred without a
/// note, which is then `Answered`).
pub fn note_or_query<T: std::any::Any>(
    plugin: &dyn Plugin,
    req: &Request<'_>,
    w: &mut ResponseWriter,
) -> Result<Box<T>, Flow> {
    if let Some(note) = w.take_note::<T>() {
        return Ok(note);
    }
    match plugin.query(req, w) {
        Flow::Async => w.take_note::<T>().ok_or(Flow::Answered),
        flow => Err(flow),
    }
}

/// The ordered plugins of one server block.
#[derive(Clone, Default)]
pub struct Chain {
    plugins: Arc<[Arc<dyn Plugin>]>,
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.plugins.iter().map(|p| p.name()))
            .finish()
    }
}

impl Chain {
    /// A chain of `plugins`, already in `plugin.cfg` order.
    pub fn new(plugins: Vec<Arc<dyn Plugin>>) -> Self {
        Self {
            plugins: plugins.into(),
        }
    }

    /// The plugins, in order.
    pub fn plugins(&self) -> &[Arc<dyn Plugin>] {
        &self.plugins
    }

    /// Whether any plugin is named `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.plugins.iter().any(|p| p.name() == name)
    }

    /// Runs the query on the receiving thread. Returns `Err(Deferred)`
    /// when a plugin needs the asynchronous path; nothing has been
    /// written or counted then.
    pub fn run_sync(&self, req: &Request<'_>, w: &mut ResponseWriter) -> Result<Outcome, Deferred> {
        for (i, p) in self.plugins.iter().enumerate() {
            match p.query(req, w) {
                Flow::Next => continue,
                Flow::Async => return Err(Deferred { at: i }),
                flow => return Ok(self.finish(i, p.name(), flow, req, w)),
            }
        }
        Ok(self.ran_out(req, w))
    }

    /// Runs the query with I/O allowed.
    pub async fn run_async(&self, req: &Request<'_>, w: &mut ResponseWriter) -> Outcome {
        self.walk_async(0, false, req, w).await
    }

    /// Runs the query with I/O allowed, from the plugin that deferred it
    /// in [`Chain::run_sync`]. The plugins before it passed the query on
    /// without side effects, so they are not asked again (their response
    /// hooks run as usual); the deferring plugin is not asked
    /// [`Plugin::query`] again either: its [`Plugin::query_async`] runs at
    /// once, with the note it may have left in the writer
    /// ([`ResponseWriter::defer_with`]). A position past the end (from
    /// another chain) starts over.
    pub async fn run_async_from(
        &self,
        from: Deferred,
        req: &Request<'_>,
        w: &mut ResponseWriter,
    ) -> Outcome {
        if from.at < self.plugins.len() {
            self.walk_async(from.at, true, req, w).await
        } else {
            self.walk_async(0, false, req, w).await
        }
    }

    /// The asynchronous walk from `start`; `deferred`: the plugin there
    /// already returned `Async` for this query.
    async fn walk_async(
        &self,
        start: usize,
        deferred: bool,
        req: &Request<'_>,
        w: &mut ResponseWriter,
    ) -> Outcome {
        for p in &self.plugins[..start] {
            p.edit(req);
        }
        for (i, p) in self.plugins.iter().enumerate().skip(start) {
            let mut flow = if deferred && i == start {
                Flow::Async
            } else {
                p.query(req, w)
            };
            if let Flow::Async = flow {
                flow = p.query_async(req, w).await;
                if let Flow::Async = flow {
                    flow = Flow::Fail(PluginError::NotAsync { plugin: p.name() });
                }
            }
            match flow {
                Flow::Next => continue,
                flow => return self.finish(i, p.name(), flow, req, w),
            }
        }
        self.ran_out(req, w)
    }

    fn ran_out(&self, req: &Request<'_>, w: &mut ResponseWriter) -> Outcome {
        let plugin = self.plugins.last().map_or("", |p| p.name());
        let n = self.plugins.len();
        self.finish(
            n,
            plugin,
            Flow::Fail(PluginError::NoNext { plugin }),
            req,
            w,
        )
    }

    /// Writes the error reply if needed, then runs the response hooks of
    /// the plugins before position `at`, last first.
    fn finish(
        &self,
        at: usize,
        plugin: &'static str,
        flow: Flow,
        req: &Request<'_>,
        w: &mut ResponseWriter,
    ) -> Outcome {
        let outcome = match flow {
            Flow::Fail(e) => {
                let rcode = e.rcode();
                w.write_error(req, rcode);
                Outcome {
                    rcode,
                    plugin,
                    error: Some(e),
                }
            }
            _ => Outcome {
                rcode: w.rcode(),
                plugin,
                error: None,
            },
        };
        for p in self.plugins[..at.min(self.plugins.len())].iter().rev() {
            p.response(req, w, &outcome);
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use clusterdns_wire::{Name, Query, Rtype};

    use super::*;
    use crate::testing;

    /// A plugin that returns a fixed flow and records the hooks it sees.
    struct Fixed {
        name: &'static str,
        flow: fn() -> Flow,
        seen: Arc<Mutex<Vec<String>>>,
    }

    impl Plugin for Fixed {
        fn name(&self) -> &'static str {
            self.name
        }
        fn query(&self, req: &Request<'_>, w: &mut ResponseWriter) -> Flow {
            let f = (self.flow)();
            if let Flow::Answered = f {
                w.reply(req).finish();
            }
            f
        }
        fn query_async<'a>(
            &'a self,
            req: &'a Request<'a>,
            w: &'a mut ResponseWriter,
        ) -> BoxFuture<'a, Flow> {
            Box::pin(async move {
                w.write_error(req, Rcode::NXDOMAIN);
                Flow::Answered
            })
        }
        fn response(&self, _req: &Request<'_>, _w: &mut ResponseWriter, o: &Outcome) {
            self.seen
                .lock()
                .unwrap()
                .push(format!("{}:{}:{}", self.name, o.plugin, o.rcode));
        }
    }

    type Seen = Arc<Mutex<Vec<String>>>;

    type Step = (&'static str, fn() -> Flow);

    fn chain(flows: &[Step]) -> (Chain, Seen) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let plugins = flows
            .iter()
            .map(|(name, flow)| {
                Arc::new(Fixed {
                    name,
                    flow: *flow,
                    seen: seen.clone(),
                }) as Arc<dyn Plugin>
            })
            .collect();
        (Chain::new(plugins), seen)
    }

    fn block_on<F: Future>(f: F) -> F::Output {
        // The futures under test never wait, so one poll finishes them.
        let mut f = Box::pin(f);
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => panic!("test future pending"),
        }
    }

    #[test]
    fn answered_stops_and_hooks_run_in_reverse() {
        let (c, seen) = chain(&[
            ("a", || Flow::Next),
            ("b", || Flow::Next),
            ("c", || Flow::Answered),
            ("d", || Flow::Answered),
        ]);
        let pkt = testing::query("example.org.", Rtype::A);
        let q = Query::parse(&pkt).unwrap();
        let zone = Name::root();
        let req = testing::request(&q, &zone);
        let mut w = ResponseWriter::new();
        let o = c.run_sync(&req, &mut w).unwrap();
        assert_eq!(o.plugin, "c");
        assert_eq!(o.rcode, Rcode::NOERROR);
        assert_eq!(*seen.lock().unwrap(), vec!["b:c:NOERROR", "a:c:NOERROR"]);
    }

    #[test]
    fn running_out_is_servfail_no_next_plugin() {
        let (c, seen) = chain(&[("a", || Flow::Next), ("b", || Flow::Next)]);
        let pkt = testing::query("example.org.", Rtype::A);
        let q = Query::parse(&pkt).unwrap();
        let zone = Name::root();
        let req = testing::request(&q, &zone);
        let mut w = ResponseWriter::new();
        let o = c.run_sync(&req, &mut w).unwrap();
        assert_eq!(o.rcode, Rcode::SERVFAIL);
        assert_eq!(
            o.error.unwrap().to_string(),
            "plugin/b: no next plugin found"
        );
        assert_eq!(testing::reply(w.bytes()).rcode, Rcode::SERVFAIL);
        assert_eq!(seen.lock().unwrap().len(), 2);
    }

    #[test]
    fn async_defers_without_side_effects_then_runs_async() {
        let (c, seen) = chain(&[("a", || Flow::Next), ("b", || Flow::Async)]);
        let pkt = testing::query("example.org.", Rtype::A);
        let q = Query::parse(&pkt).unwrap();
        let zone = Name::root();
        let req = testing::request(&q, &zone);
        let mut w = ResponseWriter::new();
        assert_eq!(c.run_sync(&req, &mut w).unwrap_err(), Deferred { at: 1 });
        assert!(seen.lock().unwrap().is_empty());
        let o = block_on(c.run_async(&req, &mut w));
        assert_eq!(o.plugin, "b");
        assert_eq!(o.rcode, Rcode::NXDOMAIN);
        assert_eq!(*seen.lock().unwrap(), vec!["a:b:NXDOMAIN"]);
    }

    /// A plugin that counts its synchronous calls and always passes on.
    struct Counting(Arc<std::sync::atomic::AtomicUsize>);

    impl Plugin for Counting {
        fn name(&self) -> &'static str {
            "counting"
        }
        fn query(&self, _req: &Request<'_>, _w: &mut ResponseWriter) -> Flow {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Flow::Next
        }
    }

    #[test]
    fn resuming_skips_the_plugins_before_but_runs_their_hooks() {
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let c = Chain::new(vec![
            Arc::new(Counting(calls.clone())) as Arc<dyn Plugin>,
            Arc::new(Fixed {
                name: "a",
                flow: || Flow::Next,
                seen: seen.clone(),
            }),
            Arc::new(Fixed {
                name: "b",
                flow: || Flow::Async,
                seen: seen.clone(),
            }),
        ]);
        let pkt = testing::query("example.org.", Rtype::A);
        let q = Query::parse(&pkt).unwrap();
        let zone = Name::root();
        let req = testing::request(&q, &zone);
        let mut w = ResponseWriter::new();
        let d = c.run_sync(&req, &mut w).unwrap_err();
        assert_eq!(d, Deferred { at: 2 });
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 1);
        let o = block_on(c.run_async_from(d, &req, &mut w));
        assert_eq!(o.plugin, "b");
        assert_eq!(o.rcode, Rcode::NXDOMAIN);
        // Not asked again, yet the hooks of the plugins before ran.
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 1);
        assert_eq!(*seen.lock().unwrap(), vec!["a:b:NXDOMAIN"]);
        // A position from elsewhere starts over.
        seen.lock().unwrap().clear();
        let o = block_on(c.run_async_from(Deferred { at: 7 }, &req, &mut w));
        assert_eq!(o.plugin, "b");
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 2);
        assert_eq!(*seen.lock().unwrap(), vec!["a:b:NXDOMAIN"]);
    }

    /// Defers with a note of how often it was asked; its asynchronous pass
    /// answers NXDOMAIN only with that note.
    struct Noting(Arc<std::sync::atomic::AtomicUsize>);

    impl Plugin for Noting {
        fn name(&self) -> &'static str {
            "noting"
        }
        fn query(&self, _req: &Request<'_>, w: &mut ResponseWriter) -> Flow {
            let n = self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            w.defer_with(Box::new(n))
        }
        fn query_async<'a>(
            &'a self,
            req: &'a Request<'a>,
            w: &'a mut ResponseWriter,
        ) -> BoxFuture<'a, Flow> {
            Box::pin(async move {
                let rcode = match w.take_note::<usize>() {
                    Some(_) => Rcode::NXDOMAIN,
                    None => Rcode::SERVFAIL,
                };
                w.write_error(req, rcode);
                Flow::Answered
            })
        }
    }

    #[test]
    fn the_deferring_plugin_is_not_asked_twice_and_its_note_carries() {
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let c = Chain::new(vec![Arc::new(Noting(calls.clone())) as Arc<dyn Plugin>]);
        let pkt = testing::query("example.org.", Rtype::A);
        let q = Query::parse(&pkt).unwrap();
        let zone = Name::root();
        let req = testing::request(&q, &zone);
        let mut first = ResponseWriter::new();
        let d = c.run_sync(&req, &mut first).unwrap_err();
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 1);
        // The server moves the note to the writer of the asynchronous pass.
        let mut second = ResponseWriter::new();
        first.carry_note_to(&mut second);
        let o = block_on(c.run_async_from(d, &req, &mut second));
        assert_eq!(o.rcode, Rcode::NXDOMAIN);
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 1);
        // Without the note (not carried), the plugin sees none.
        let o = block_on(c.run_async_from(d, &req, &mut ResponseWriter::new()));
        assert_eq!(o.rcode, Rcode::SERVFAIL);
        // A walk started over asks it again, and the note comes along.
        let o = block_on(c.run_async(&req, &mut ResponseWriter::new()));
        assert_eq!(o.rcode, Rcode::NXDOMAIN);
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 2);
    }

    #[test]
    fn fail_writes_the_mapped_rcode() {
        let (c, _) = chain(&[("a", || Flow::Fail(PluginError::Refused { plugin: "a" }))]);
        let pkt = testing::query("example.org.", Rtype::A);
        let q = Query::parse(&pkt).unwrap();
        let zone = Name::root();
        let req = testing::request(&q, &zone);
        let mut w = ResponseWriter::new();
        let o = c.run_sync(&req, &mut w).unwrap();
        assert_eq!(o.rcode, Rcode::REFUSED);
        let r = testing::reply(w.bytes());
        assert_eq!(r.rcode, Rcode::REFUSED);
        assert!(r.header.qr());
    }
}
