//! The control loop: nodes from a watch, the parameters from the ConfigMap (created from
//! `--default-params` when missing), the targets' replicas through the scale subresource,
//! once at start and then every `--poll-period-seconds`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clusterdns_observe::listen;
use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Node, ReplicationController};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use tokio::sync::Notify;

use crate::error::PollError;
use crate::flags::{Flags, Target};
use crate::health::{self, LastPoll};
use crate::lease::Elector;
use crate::log::{error, info};
use crate::nodes::{self, NodeInfo, NodeTable};
use crate::params::{ClusterStatus, Params};

/// Why the autoscaler stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// No API client (kubeconfig or in-cluster configuration).
    #[error("{0}")]
    Client(#[from] clusterdns_kubeclient::Error),
    /// `--health-address` is no `host:port` (Go's text, which names it).
    #[error("{0}")]
    Address(String),
    /// The health listener could not be bound.
    #[error("listen tcp {addr}: {source}")]
    Listen {
        /// The address.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// `--max-sync-failures` consecutive polls failed.
    #[error(
        "Maximum number of api server polling attempts ({0}) have been reached. Exiting application."
    )]
    MaxSyncFailures(i64),
}

/// The watched nodes: the table and whether the first list has been seen.
#[derive(Default)]
struct Nodes {
    table: NodeTable,
    /// Filled during a relist, swapped in at its end.
    relist: Option<NodeTable>,
    synced: bool,
}

/// The parameters in use and the ConfigMap version they came from.
struct Controller {
    params: Params,
    version: String,
}

/// The loop's state between polls.
struct Loop {
    client: kube::Client,
    namespace: String,
    configmap: String,
    defaults: Option<BTreeMap<String, String>>,
    targets: Vec<Target>,
    /// The last good parameters; kept when the ConfigMap's become bad.
    controller: Option<Controller>,
    /// The ConfigMap version whose parameters were rejected, and why.
    rejected: Option<(String, String)>,
}

/// Runs until `--max-sync-failures` is reached (never, by default).
pub async fn run(flags: Flags, targets: Vec<Target>) -> Result<(), RunError> {
    let source = match &flags.kubeconfig {
        Some(path) => clusterdns_kubeclient::ClientSource::Kubeconfig {
            path: path.into(),
            context: None,
        },
        None => clusterdns_kubeclient::ClientSource::InCluster,
    };
    let client = source.client().await?;

    // `:8080` on both families, as upstream's Go listener.
    let addr = listen::addr(&flags.health_address).map_err(RunError::Address)?;
    let listener = listen::tcp(addr)
        .and_then(tokio::net::TcpListener::from_std)
        .map_err(|source| RunError::Listen {
            addr: flags.health_address.clone(),
            source,
        })?;
    let last = LastPoll::default();
    tokio::spawn(health::serve(listener, last.clone()));

    let nodes = Arc::new(Mutex::new(Nodes::default()));
    let synced = Arc::new(Notify::new());
    tokio::spawn(watch_nodes(
        client.clone(),
        flags.nodelabels.clone(),
        nodes.clone(),
        synced.clone(),
    ));
    // As upstream's WaitForCacheSync: no poll counts nodes before the first list.
    while !nodes.lock().is_ok_and(|n| n.synced) {
        let _ = tokio::time::timeout(Duration::from_millis(200), synced.notified()).await;
    }

    let period = Duration::from_secs(flags.poll_period_seconds.unsigned_abs());
    let mut elector = Elector::new(
        client.clone(),
        &flags.namespace,
        &flags.configmap,
        (period * 3).max(Duration::from_secs(5)),
    );
    let mut state = Loop {
        client,
        namespace: flags.namespace.clone(),
        configmap: flags.configmap.clone(),
        defaults: flags.default_params.clone(),
        targets,
        controller: None,
        rejected: None,
    };
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failures = 0i64;
    loop {
        ticker.tick().await;
        if !elector.lead().await {
            // Another replica holds the lease and scales; waiting is healthy.
            failures = 0;
            last.set(None);
            continue;
        }
        let status = match nodes.lock() {
            Ok(n) => nodes::status(n.table.values()),
            Err(_) => ClusterStatus::default(),
        };
        info!(
            4,
            "Total nodes {:5}, schedulable nodes: {:5}",
            status.total_nodes,
            status.schedulable_nodes
        );
        info!(
            4,
            "Total cores {:5}, schedulable cores: {:5}",
            status.total_cores,
            status.schedulable_cores
        );
        match state.poll(&status).await {
            Ok(()) => {
                failures = 0;
                last.set(None);
            }
            Err(e) => {
                failures += 1;
                last.set(Some(e.to_string()));
                if flags.max_sync_failures > 0 && failures == flags.max_sync_failures {
                    return Err(RunError::MaxSyncFailures(flags.max_sync_failures));
                }
            }
        }
    }
}

/// Keeps `nodes` current from a list+watch of the Nodes matching `labels`.
async fn watch_nodes(
    client: kube::Client,
    labels: String,
    nodes: Arc<Mutex<Nodes>>,
    synced: Arc<Notify>,
) {
    let api: Api<Node> = Api::all(client);
    let mut config = watcher::Config::default();
    if !labels.is_empty() {
        config = config.labels(&labels);
    }
    let mut stream = watcher(api, config).default_backoff().boxed();
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(e) => e,
            Err(e) => {
                // The last table stays in use while the watch retries.
                error!("Error watching nodes: {e}");
                continue;
            }
        };
        let Ok(mut n) = nodes.lock() else { return };
        let name = |node: &Node| node.metadata.name.clone().unwrap_or_default();
        match event {
            watcher::Event::Apply(node) => {
                n.table.insert(name(&node), NodeInfo::of(&node));
            }
            watcher::Event::Delete(node) => {
                n.table.remove(&name(&node));
            }
            watcher::Event::Init => n.relist = Some(NodeTable::new()),
            watcher::Event::InitApply(node) => {
                n.relist
                    .get_or_insert_with(NodeTable::new)
                    .insert(name(&node), NodeInfo::of(&node));
            }
            watcher::Event::InitDone => {
                n.table = n.relist.take().unwrap_or_default();
                n.synced = true;
                synced.notify_waiters();
            }
        }
    }
}

fn api_error(what: impl Into<String>) -> impl FnOnce(kube::Error) -> PollError {
    let what = what.into();
    move |source| PollError::Api { what, source }
}

impl Loop {
    /// One poll; every failure is logged here as upstream logs it.
    async fn poll(&mut self, status: &ClusterStatus) -> Result<(), PollError> {
        let result = self.poll_inner(status).await;
        if let Err(e) = &result {
            match e {
                PollError::Params(_) => error!("Error ensuring controller: {e}"),
                PollError::Api { what, .. } if what.starts_with("configmap") => {
                    error!("Error syncing configMap with apiserver: {e}")
                }
                _ => error!("Update failure: {e}"),
            }
        }
        result
    }

    async fn poll_inner(&mut self, status: &ClusterStatus) -> Result<(), PollError> {
        let cm = self.sync_config().await?;
        let version = cm.metadata.resource_version.clone().unwrap_or_default();
        if let Some((v, e)) = &self.rejected
            && *v == version
        {
            return Err(PollError::Other(e.clone()));
        }
        if self
            .controller
            .as_ref()
            .is_none_or(|c| c.version != version)
        {
            let old = self
                .controller
                .as_ref()
                .map(|c| c.version.clone())
                .unwrap_or_default();
            info!(
                0,
                "ConfigMap version change (old: {old} new: {version}) - rebuilding params"
            );
            let data = cm.data.unwrap_or_default();
            match Params::from_data(data.iter().map(|(k, v)| (k.as_str(), v.as_str()))) {
                Ok(params) => {
                    if self
                        .controller
                        .as_ref()
                        .is_none_or(|c| c.params.mode() != params.mode())
                    {
                        info!(1, "Set control mode to {}", params.mode());
                    }
                    self.rejected = None;
                    self.controller = Some(Controller { params, version });
                }
                Err(e) => {
                    // The last good parameters stay; nothing is scaled with these.
                    self.rejected = Some((version, e.to_string()));
                    return Err(e.into());
                }
            }
        }
        let Some(controller) = &self.controller else {
            return Err(PollError::Other("no parameters".into()));
        };
        let expected = controller.params.replicas(status);
        info!(4, "Expected replica count: {expected:3}");
        for target in &self.targets {
            self.scale(target, &controller.params, status).await?;
        }
        Ok(())
    }

    /// The ConfigMap; on any GET error with `--default-params`, created from them (an
    /// existing one is never overwritten).
    async fn sync_config(&self) -> Result<ConfigMap, PollError> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.namespace);
        let err = match api.get(&self.configmap).await {
            Ok(cm) => return Ok(cm),
            Err(e) => e,
        };
        let Some(defaults) = &self.defaults else {
            return Err(api_error(format!("configmap {}", self.configmap))(err));
        };
        info!(
            0,
            "ConfigMap not found: {err}, will create one with default params"
        );
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(self.configmap.clone()),
                namespace: Some(self.namespace.clone()),
                ..ObjectMeta::default()
            },
            data: Some(defaults.clone()),
            ..ConfigMap::default()
        };
        let created = api
            .create(&PostParams::default(), &cm)
            .await
            .map_err(api_error(format!("configmap {} create", self.configmap)))?;
        info!(
            0,
            "Created ConfigMap {} in namespace {}", self.configmap, self.namespace
        );
        Ok(created)
    }

    /// Sets one target's replicas through its scale subresource, when they differ.
    async fn scale(
        &self,
        target: &Target,
        params: &Params,
        status: &ClusterStatus,
    ) -> Result<(), PollError> {
        let c = self.client.clone();
        let ns = &self.namespace;
        let what = format!("{target} scale");
        let (scale, api): (_, ScaleApi) = match target.kind.as_str() {
            "deployment" => {
                let api = Api::<Deployment>::namespaced(c, ns);
                (api.get_scale(&target.name).await, ScaleApi::Deployment(api))
            }
            "replicaset" => {
                let api = Api::<ReplicaSet>::namespaced(c, ns);
                (api.get_scale(&target.name).await, ScaleApi::ReplicaSet(api))
            }
            _ => {
                let api = Api::<ReplicationController>::namespaced(c, ns);
                (api.get_scale(&target.name).await, ScaleApi::Rc(api))
            }
        };
        let mut scale = scale.map_err(api_error(what.clone()))?;
        let current = scale.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
        let want = params.decide(status, current);
        if want == current {
            return Ok(());
        }
        info!(
            0,
            "Cluster status: SchedulableNodes[{}], TotalNodes[{}], SchedulableCores[{}], TotalCores[{}]",
            status.schedulable_nodes,
            status.total_nodes,
            status.schedulable_cores,
            status.total_cores
        );
        info!(
            0,
            "Replicas are not as expected : updating {target} from {current} to {want}"
        );
        scale.spec.get_or_insert_default().replicas = Some(want);
        let pp = PostParams::default();
        let done = match &api {
            ScaleApi::Deployment(a) => a.replace_scale(&target.name, &pp, &scale).await,
            ScaleApi::ReplicaSet(a) => a.replace_scale(&target.name, &pp, &scale).await,
            ScaleApi::Rc(a) => a.replace_scale(&target.name, &pp, &scale).await,
        };
        done.map(|_| ()).map_err(api_error(what))
    }
}

/// The API of a target's kind (the scale calls are generic over it).
enum ScaleApi {
    Deployment(Api<Deployment>),
    ReplicaSet(Api<ReplicaSet>),
    Rc(Api<ReplicationController>),
}
