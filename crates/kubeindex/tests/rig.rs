//! Against the real kube-apiserver of the test rig (`scripts/rig up`).
//!
//! Skipped, with a message, when the rig's kubeconfig is missing, unless
//! `CLUSTERDNS_REQUIRE_RIG=1`. `RIG_DIR` selects another rig (default `<repo>/.rig`).
//! The outage test stops an apiserver and compacts etcd, so it starts a private rig of its
//! own (same binaries, a temporary directory, free ports) and takes it down afterwards:
//! other tests using the shared rig at the same time are not disturbed.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clusterdns_kubeindex::k8s_openapi::api::core::v1 as core;
use clusterdns_kubeindex::k8s_openapi::api::discovery::v1 as discovery;
use clusterdns_kubeindex::{
    ClientSource, Counters, EventKind, Kind, Snapshot, Snapshots, Watch, WatchConfig,
};
use common::*;
use kube::api::{Api, DeleteParams, PostParams};

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rig_dir() -> PathBuf {
    std::env::var_os("RIG_DIR").map_or_else(|| repo_root().join(".rig"), PathBuf::from)
}

/// The rig's kubeconfig, or `None` (after saying why) when the test should be skipped.
fn kubeconfig() -> Option<PathBuf> {
    let path = rig_dir().join("kubeconfig");
    if path.exists() {
        return Some(path);
    }
    if std::env::var("CLUSTERDNS_REQUIRE_RIG").as_deref() == Ok("1") {
        panic!(
            "CLUSTERDNS_REQUIRE_RIG=1 but {} is missing: run scripts/rig up",
            path.display()
        );
    }
    println!("skipped: {} is missing (scripts/rig up)", path.display());
    None
}

/// A rig of this test's own, sharing the shared rig's binaries.
struct PrivateRig {
    dir: PathBuf,
    ports: [u16; 4],
}

impl PrivateRig {
    fn up() -> PrivateRig {
        let dir = std::env::temp_dir().join(unique("clusterdns-k8s-rig"));
        std::fs::create_dir_all(&dir).expect("rig dir");
        std::os::unix::fs::symlink(rig_dir().join("bin"), dir.join("bin"))
            .expect("link rig binaries");
        // Free ports: bind to port 0 and let go (a race with other processes is unlikely).
        let listeners: Vec<_> = (0..4)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("free port"))
            .collect();
        let ports: Vec<u16> = listeners
            .iter()
            .map(|l| l.local_addr().expect("port").port())
            .collect();
        drop(listeners);
        let rig = PrivateRig {
            dir,
            ports: [ports[0], ports[1], ports[2], ports[3]],
        };
        rig.run("up");
        rig
    }

    fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    fn run(&self, cmd: &str) {
        let status = std::process::Command::new(repo_root().join("scripts/rig"))
            .arg(cmd)
            .env("RIG_DIR", &self.dir)
            .env("RIG_ETCD_PORT", self.ports[0].to_string())
            .env("RIG_ETCD_PEER_PORT", self.ports[1].to_string())
            .env("RIG_APISERVER_PORT", self.ports[2].to_string())
            .env("RIG_KCM_PORT", self.ports[3].to_string())
            .status()
            .expect("running scripts/rig");
        assert!(status.success(), "scripts/rig {cmd} failed");
    }
}

impl Drop for PrivateRig {
    fn drop(&mut self) {
        let _ = std::process::Command::new(repo_root().join("scripts/rig"))
            .arg("down")
            .env("RIG_DIR", &self.dir)
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn eventually(
    snapshots: &Snapshots,
    what: &str,
    timeout: Duration,
    pred: impl Fn(&Snapshot) -> bool,
) -> Duration {
    let start = Instant::now();
    loop {
        if pred(&snapshots.load()) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    format!("{prefix}-{}-{nanos}", std::process::id())
}

/// A Service the endpointslice controller leaves alone (no selector); the API server
/// allocates its ClusterIP.
fn selectorless(ns: &str, name: &str) -> core::Service {
    let mut s = svc(ns, name, &[], &[("http", "TCP", 80)]);
    let spec = s.spec.as_mut().expect("built with a spec");
    spec.selector = None;
    spec.cluster_ip = None;
    spec.cluster_ips = None;
    s
}

struct Cluster {
    client: kube::Client,
    ns: String,
}

impl Cluster {
    async fn new(kubeconfig: PathBuf) -> Cluster {
        let source = ClientSource::Kubeconfig {
            path: kubeconfig,
            context: None,
        };
        let client = source
            .client()
            .await
            .expect("client from the rig's kubeconfig");
        let ns = unique("k8s-it");
        Api::<core::Namespace>::all(client.clone())
            .create(
                &PostParams::default(),
                &common::ns(&ns, &[("clusterdns-test", "k8s")]),
            )
            .await
            .expect("create namespace");
        Cluster { client, ns }
    }
    fn services(&self) -> Api<core::Service> {
        Api::namespaced(self.client.clone(), &self.ns)
    }
    /// Creates the [`selectorless`] Service `name` in the namespace.
    async fn create_selectorless(&self, name: &str) {
        self.services()
            .create(&PostParams::default(), &selectorless(&self.ns, name))
            .await
            .expect("create the Service");
    }
    fn slices(&self) -> Api<discovery::EndpointSlice> {
        Api::namespaced(self.client.clone(), &self.ns)
    }
    async fn cleanup(&self) {
        let _ = Api::<core::Namespace>::all(self.client.clone())
            .delete(&self.ns, &DeleteParams::default())
            .await;
    }
    /// A namespace of its own and a synced watch restricted to it.
    async fn start(kubeconfig: PathBuf) -> (Cluster, Arc<Counters>, Watch) {
        let c = Cluster::new(kubeconfig).await;
        let counters = Arc::new(Counters::default());
        let watch = c.watch(counters.clone());
        let synced = watch.snapshots().wait_synced(Duration::from_secs(30)).await;
        assert!(synced, "synced within 30 s");
        (c, counters, watch)
    }

    fn watch(&self, counters: Arc<Counters>) -> Watch {
        let config = WatchConfig {
            namespaces: vec![self.ns.clone()],
            ..WatchConfig::default()
        };
        Watch::spawn(self.client.clone(), &config, counters)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_creates_updates_and_deletes() {
    let Some(kubeconfig) = kubeconfig() else {
        return;
    };
    let (c, counters, watch) = Cluster::start(kubeconfig).await;
    let snapshots = watch.snapshots();
    let ns = c.ns.clone();
    assert!(snapshots.load().namespace(&ns).is_some());

    let created = c
        .services()
        .create(&PostParams::default(), &selectorless(&ns, "web"))
        .await
        .unwrap();
    let ip = created.spec.unwrap().cluster_ip.unwrap();
    let t = eventually(&snapshots, "service web", Duration::from_secs(10), |s| {
        s.service(&ns, "web")
            .is_some_and(|svc| svc.cluster_ips().iter().any(|a| a.to_string() == ip))
    })
    .await;
    println!("service create -> snapshot: {t:?}");

    // Two slices, one IPv4 and one IPv6, with a not-ready and a terminating endpoint.
    let v4 = slice(
        &ns,
        "web-v4",
        "web",
        &[
            Ep {
                hostname: Some("web-0"),
                ..ep("10.200.0.1")
            },
            Ep {
                ready: Some(false),
                ..ep("10.200.0.2")
            },
            Ep {
                ready: Some(false),
                serving: Some(true),
                terminating: Some(true),
                ..ep("10.200.0.3")
            },
        ],
        &[("http", "TCP", 8080)],
    );
    let v6 = slice(
        &ns,
        "web-v6",
        "web",
        &[ep("fd00:200::1")],
        &[("http", "TCP", 8080)],
    );
    c.slices()
        .create(&PostParams::default(), &v4)
        .await
        .unwrap();
    c.slices()
        .create(&PostParams::default(), &v6)
        .await
        .unwrap();
    let t = eventually(&snapshots, "two slices", Duration::from_secs(10), |s| {
        s.endpoints(&ns, "web")
            .is_some_and(|e| e.slices().len() == 2)
    })
    .await;
    println!("slice create -> snapshot: {t:?}");
    {
        let snap = snapshots.load();
        let eps = snap.endpoints(&ns, "web").unwrap();
        let ready: Vec<String> = eps.ready().map(|(_, e)| e.ip().to_string()).collect();
        assert_eq!(ready, ["10.200.0.1", "fd00:200::1"]);
        let term = eps
            .iter()
            .find(|(_, e)| e.ip().to_string() == "10.200.0.3")
            .unwrap()
            .1;
        assert!(term.conditions().terminating() && term.conditions().serving());
        assert_eq!(snap.reverse(common::ip("10.200.0.1")).count(), 1);
        assert_eq!(snap.reverse(common::ip("10.200.0.2")).count(), 0);
    }

    // Update: web-0 goes not-ready.
    let mut v4b = c.slices().get("web-v4").await.unwrap();
    v4b.endpoints[0].conditions.as_mut().unwrap().ready = Some(false);
    c.slices()
        .replace("web-v4", &PostParams::default(), &v4b)
        .await
        .unwrap();
    eventually(
        &snapshots,
        "web-0 not ready",
        Duration::from_secs(10),
        |s| s.reverse(common::ip("10.200.0.1")).count() == 0,
    )
    .await;

    // Deletes.
    c.slices()
        .delete("web-v6", &DeleteParams::default())
        .await
        .unwrap();
    c.services()
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        &snapshots,
        "service and v6 slice gone",
        Duration::from_secs(10),
        |s| {
            s.service(&ns, "web").is_none()
                && s.endpoints(&ns, "web")
                    .is_some_and(|e| e.slices().len() == 1)
        },
    )
    .await;
    assert!(counters.events(Kind::Service, EventKind::Delete) >= 1);
    c.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survives_apiserver_outage_and_compaction() {
    if kubeconfig().is_none() {
        return;
    }
    let rig = PrivateRig::up();
    let (c, counters, watch) = Cluster::start(rig.kubeconfig()).await;
    let snapshots = watch.snapshots();
    let ns = c.ns.clone();
    c.create_selectorless("before").await;
    c.create_selectorless("doomed").await;
    eventually(
        &snapshots,
        "services before the outage",
        Duration::from_secs(10),
        |s| s.service(&ns, "before").is_some() && s.service(&ns, "doomed").is_some(),
    )
    .await;
    let generation = snapshots.load().generation();

    // Outage: the last snapshot keeps being served.
    rig.run("apiserver-stop");
    tokio::time::sleep(Duration::from_secs(3)).await;
    {
        let snap = snapshots.load();
        assert!(
            snap.service(&ns, "before").is_some(),
            "served during the outage"
        );
        assert!(snap.synced());
    }
    // Compaction while the apiserver is down: resumed watches get 410 Gone and relist.
    rig.run("etcd-compact");
    rig.run("apiserver-start");
    let inits = counters.events(Kind::Service, EventKind::Init);

    // Changes after the restart appear.
    c.services()
        .delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    c.create_selectorless("after").await;
    let t = eventually(
        &snapshots,
        "changes after the restart",
        Duration::from_secs(90),
        |s| {
            s.service(&ns, "after").is_some()
                && s.service(&ns, "doomed").is_none()
                && s.service(&ns, "before").is_some()
        },
    )
    .await;
    println!(
        "converged {t:?} after restart; service relists: {} before restart, {} now; watch errors: {}; generation {} -> {}",
        inits,
        counters.events(Kind::Service, EventKind::Init),
        counters.watch_errors(Kind::Service),
        generation,
        snapshots.load().generation()
    );
    assert!(
        counters.watch_errors(Kind::Service) >= 1,
        "the outage was noticed"
    );
    c.cleanup().await;
}
