//! The live source: kube-rs watchers feeding the [`Index`] from one task.
//!
//! One watcher per kind (and per namespace with the `namespaces` option) is merged into one
//! stream polled by a single task that owns the index. The task applies an event, then every
//! event already waiting (up to [`WatchConfig::max_batch`]), then publishes once: under a
//! burst, one snapshot per batch; when idle, one per event, so an API write is visible as
//! soon as its watch event is decoded.
//!
//! Each watcher lists with a streaming list (`sendInitialEvents`) when
//! [`WatchConfig::streaming_lists`] is set, falling back to paginated LIST + WATCH for good
//! if the API server rejects it; relists after `410 Gone` and reconnects with [`Reconnect`]'s
//! backoff (0.8 s doubling to at most 4 s). While the API server is unreachable nothing is published, so the last
//! good snapshot keeps being served.

use std::sync::Arc;

use futures::stream::{self, BoxStream};
use futures::{FutureExt as _, StreamExt as _};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use kube::api::Api;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher;
use tokio::task::JoinHandle;

use crate::hooks::{IndexHooks, Kind};
use crate::index::{Index, IndexedObject, Scope};
use crate::snapshot::Snapshots;

/// What to watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchConfig {
    /// Restrict Services, EndpointSlices and Pods to these namespaces (one watcher each);
    /// empty for all namespaces.
    pub namespaces: Vec<String>,
    /// Label selector for Services, EndpointSlices and Pods (`labels`).
    pub labels: Option<String>,
    /// Label selector for Namespaces (`namespace_labels`).
    pub namespace_labels: Option<String>,
    /// Watch Namespaces (CoreDNS always does: a query for a namespace that does not exist is
    /// NXDOMAIN).
    pub watch_namespaces: bool,
    /// Watch EndpointSlices (`false` for `noendpoints`).
    pub endpoints: bool,
    /// Watch Pods (`pods verified`).
    pub pods: bool,
    /// Watch Nodes, for their zone label (`zone_aware`).
    pub nodes: bool,
    /// Initial lists as watch streams (`sendInitialEvents`), falling back to LIST.
    pub streaming_lists: bool,
    /// Most events applied before a publish.
    pub max_batch: usize,
}

impl Default for WatchConfig {
    fn default() -> Self {
        WatchConfig {
            namespaces: Vec::new(),
            labels: None,
            namespace_labels: None,
            watch_namespaces: true,
            endpoints: true,
            pods: false,
            nodes: false,
            streaming_lists: true,
            max_batch: 1024,
        }
    }
}

/// One decoded watch event (or error), tagged with its watcher.
enum Update {
    Service(Scope, Box<watcher::Event<core::Service>>),
    Slice(Scope, Box<watcher::Event<discovery::EndpointSlice>>),
    Pod(Scope, Box<watcher::Event<core::Pod>>),
    Namespace(Scope, Box<watcher::Event<core::Namespace>>),
    Node(Scope, Box<watcher::Event<core::Node>>),
    Error(Kind, watcher::Error),
}

/// Errors meaning "this API server does not do streaming lists": switch to LIST + WATCH.
fn streaming_unsupported(err: &watcher::Error) -> bool {
    let code = match err {
        watcher::Error::WatchStartFailed(kube::Error::Api(status)) => status.code,
        watcher::Error::WatchError(status) => status.code,
        _ => return false,
    };
    matches!(code, 400 | 405 | 422)
}

/// A failed watch in one line: for a request the API server refused (RBAC's 403, say), its
/// message and status, without the dump of the whole `Status` that kube-rs's `Display` adds.
fn describe(err: &watcher::Error) -> String {
    let status = match err {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status))
        | watcher::Error::WatchError(status) => status,
        other => return other.to_string(),
    };
    format!("{} ({} {})", status.message, status.code, status.reason)
}

fn watcher_config(base: &watcher::Config, streaming: bool) -> watcher::Config {
    if streaming {
        base.clone().streaming_lists()
    } else {
        base.clone()
    }
}

struct FallbackState<K: IndexedObject> {
    api: Api<K>,
    base: watcher::Config,
    streaming: bool,
    listed: bool,
    inner: BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>,
}

fn kind_stream<K>(
    api: Api<K>,
    base: watcher::Config,
    streaming: bool,
    scope: Scope,
    wrap: fn(Scope, Box<watcher::Event<K>>) -> Update,
) -> BoxStream<'static, Update>
where
    K: IndexedObject
        + kube::Resource<DynamicType = ()>
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let start = |api: &Api<K>, base: &watcher::Config, streaming: bool| {
        watcher(api.clone(), watcher_config(base, streaming))
            .backoff(Reconnect::default())
            .boxed()
    };
    let inner = start(&api, &base, streaming);
    let state = FallbackState {
        api,
        base,
        streaming,
        listed: false,
        inner,
    };
    stream::unfold(state, move |mut st| {
        let scope = scope.clone();
        async move {
        let item = st.inner.next().await?;
        let update = match item {
            Ok(mut event) => {
                if matches!(event, watcher::Event::InitDone) {
                    st.listed = true;
                }
                if let watcher::Event::Apply(obj) | watcher::Event::InitApply(obj) | watcher::Event::Delete(obj) =
                    &mut event
                {
                    strip(obj);
                }
                wrap(scope.clone(), Box::new(event))
            }
            Err(err) => {
                if st.streaming && !st.listed && streaming_unsupported(&err) {
                    tracing::info!(kind = %K::KIND, error = %err, "streaming lists unsupported, falling back to LIST + WATCH");
                    st.streaming = false;
                    st.inner = start(&st.api, &st.base, false);
                }
                Update::Error(K::KIND, err)
            }
        };
        Some((update, st))
        }
    })
    .boxed()
}

/// The delays between failed lists or watches: 0.8 s, doubling up to 4 s, each shortened by up
/// to a quarter at random, back to 0.8 s once a request succeeds. kube-rs's default (client-go's
/// reflector's, up to 30 s) leaves the index up to 30 s behind once an API server returns from an
/// outage longer than a minute; the torture suite asks for changes to be served within 5 s of its
/// return (issue 18). A failed attempt while it is down is a refused connection or a quick
/// error, one per kind every 4 s: no load for an API server. The jitter spreads replicas that
/// lost the API server at the same moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reconnect {
    next: std::time::Duration,
}

impl Reconnect {
    /// The first delay.
    pub const MIN: std::time::Duration = std::time::Duration::from_millis(800);
    /// The longest delay.
    pub const MAX: std::time::Duration = std::time::Duration::from_secs(4);
}

impl Default for Reconnect {
    fn default() -> Self {
        Reconnect {
            next: Reconnect::MIN,
        }
    }
}

impl Iterator for Reconnect {
    type Item = std::time::Duration;

    fn next(&mut self) -> Option<std::time::Duration> {
        use std::hash::{BuildHasher as _, Hasher as _};
        let delay = self.next;
        self.next = (delay * 2).min(Reconnect::MAX);
        // A fresh `RandomState` is randomly keyed: random enough to spread reconnects, without
        // a random number crate for one number per failed request.
        let unit = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish() as f64
            / u64::MAX as f64;
        Some(delay.mul_f64(1.0 - 0.25 * unit))
    }
}

impl kube::runtime::utils::Backoff for Reconnect {
    fn reset(&mut self) {
        *self = Reconnect::default();
    }
}

/// Drops what is never read, before the object waits anywhere.
fn strip<K: IndexedObject>(obj: &mut K) {
    obj.strip();
}

/// A running watch: the task that owns the index. Dropping it stops the task.
#[derive(Debug)]
pub struct Watch {
    snapshots: Snapshots,
    task: JoinHandle<()>,
}

impl Watch {
    /// Starts watching with a fresh index reporting to `hooks`.
    pub fn spawn(client: kube::Client, config: &WatchConfig, hooks: Arc<dyn IndexHooks>) -> Watch {
        Watch::spawn_with(client, config, Index::with_hooks(hooks))
    }

    /// Starts watching into `index` (it keeps whatever it holds until the first lists end).
    pub fn spawn_with(client: kube::Client, config: &WatchConfig, mut index: Index) -> Watch {
        let streams = streams(&client, config, &mut index);
        let snapshots = index.snapshots();
        let max_batch = config.max_batch.max(1);
        let task = tokio::spawn(run(index, streams, max_batch));
        Watch { snapshots, task }
    }

    /// The snapshot handle.
    pub fn snapshots(&self) -> Snapshots {
        self.snapshots.clone()
    }

    /// Stops the watch task.
    pub fn abort(&self) {
        self.task.abort();
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn streams(
    client: &kube::Client,
    config: &WatchConfig,
    index: &mut Index,
) -> Vec<BoxStream<'static, Update>> {
    let mut base = watcher::Config::default();
    if let Some(labels) = &config.labels {
        base = base.labels(labels);
    }
    let scopes: Vec<Scope> = if config.namespaces.is_empty() {
        vec![Scope::All]
    } else {
        config
            .namespaces
            .iter()
            .map(|ns| Scope::namespace(ns))
            .collect()
    };
    fn api<K>(client: &kube::Client, scope: &Scope) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        match scope {
            Scope::All => Api::all(client.clone()),
            Scope::Namespace(ns) => Api::namespaced(client.clone(), ns),
        }
    }
    let streaming = config.streaming_lists;
    let mut out = Vec::new();
    for scope in &scopes {
        index.expect_sync(Kind::Service, scope.clone());
        out.push(kind_stream(
            api::<core::Service>(client, scope),
            base.clone(),
            streaming,
            scope.clone(),
            Update::Service,
        ));
        if config.endpoints {
            index.expect_sync(Kind::EndpointSlice, scope.clone());
            out.push(kind_stream(
                api::<discovery::EndpointSlice>(client, scope),
                base.clone(),
                streaming,
                scope.clone(),
                Update::Slice,
            ));
        }
        if config.pods {
            index.expect_sync(Kind::Pod, scope.clone());
            let pods = base
                .clone()
                .fields("status.phase!=Succeeded,status.phase!=Failed,status.phase!=Unknown");
            out.push(kind_stream(
                api::<core::Pod>(client, scope),
                pods,
                streaming,
                scope.clone(),
                Update::Pod,
            ));
        }
    }
    index.set_namespaces_watched(config.watch_namespaces);
    if config.watch_namespaces {
        index.expect_sync(Kind::Namespace, Scope::All);
        let mut ns = watcher::Config::default();
        if let Some(labels) = &config.namespace_labels {
            ns = ns.labels(labels);
        }
        out.push(kind_stream(
            Api::<core::Namespace>::all(client.clone()),
            ns,
            streaming,
            Scope::All,
            Update::Namespace,
        ));
    }
    if config.nodes {
        index.expect_sync(Kind::Node, Scope::All);
        out.push(kind_stream(
            Api::<core::Node>::all(client.clone()),
            watcher::Config::default(),
            streaming,
            Scope::All,
            Update::Node,
        ));
    }
    out
}

fn apply(index: &mut Index, update: Update) {
    match update {
        Update::Service(scope, ev) => index.handle_event(&scope, *ev),
        Update::Slice(scope, ev) => index.handle_event(&scope, *ev),
        Update::Pod(scope, ev) => index.handle_event(&scope, *ev),
        Update::Namespace(scope, ev) => index.handle_event(&scope, *ev),
        Update::Node(scope, ev) => index.handle_event(&scope, *ev),
        Update::Error(kind, err) => {
            let error = describe(&err);
            tracing::warn!(%kind, %error, "kubernetes watch failed; retrying, serving last known state");
            index.note_watch_error(kind, &error);
        }
    }
}

async fn run(mut index: Index, streams: Vec<BoxStream<'static, Update>>, max_batch: usize) {
    let mut all = stream::select_all(streams);
    while let Some(update) = all.next().await {
        apply(&mut index, update);
        let mut n = 1;
        while n < max_batch {
            match all.next().now_or_never() {
                Some(Some(update)) => {
                    apply(&mut index, update);
                    n += 1;
                }
                _ => break,
            }
        }
        index.publish();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kube::runtime::utils::Backoff as _;

    use super::Reconnect;

    #[test]
    fn reconnect_delays_double_to_four_seconds_with_jitter_and_reset() {
        let mut b = Reconnect::default();
        let first: Vec<Duration> = b.by_ref().take(12).collect();
        let nominal = [800, 1600, 3200, 4000, 4000, 4000];
        for (d, ms) in first.iter().zip(nominal) {
            let ms = Duration::from_millis(ms);
            assert!(*d <= ms && *d >= ms.mul_f64(0.75), "{d:?} for {ms:?}");
        }
        assert!(first.iter().all(|d| *d <= Reconnect::MAX));
        // Jittered: twelve delays, not all alike at the cap.
        assert!(first[3..].windows(2).any(|w| w[0] != w[1]), "{first:?}");
        b.reset();
        assert!(b.next().is_some_and(|d| d <= Reconnect::MIN));
    }
}
