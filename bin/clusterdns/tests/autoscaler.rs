//! `clusterdns autoscaler` on a private rig with fake nodes (KWOK): Nodes with chosen
//! allocatable CPU are created, cordoned, made NotReady and deleted, and the targets'
//! replicas (a Deployment, a ReplicaSet, a ReplicationController, through their scale
//! subresources) follow cluster-proportional-autoscaler's formulas; the ConfigMap is created
//! from `--default-params`, switched from linear to ladder, broken and fixed; an existing
//! ConfigMap wins over new defaults. Skips without `scripts/rig build --nodes` unless
//! `CLUSTERDNS_REQUIRE_RIG=1`.

mod common;
mod ops;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clusterdns_test_support::{PrivateRig, Rig};

const CM: &str = "dns-autoscaler";
const TARGETS: [&str; 3] = [
    "deployment/dns",
    "replicaset/rs",
    "replicationcontroller/rc",
];

/// A running autoscaler; killed on drop.
struct Autoscaler {
    child: Child,
    log: PathBuf,
    health: u16,
}

impl Autoscaler {
    fn start(rig: &Rig, dir: &Path, ns: &str, defaults: &str) -> Autoscaler {
        Autoscaler::start_with(rig, dir, ns, defaults, &[])
    }

    fn start_with(rig: &Rig, dir: &Path, ns: &str, defaults: &str, extra: &[&str]) -> Autoscaler {
        let mut args = vec![
            "autoscaler".to_owned(),
            format!("--kubeconfig={}", rig.kubeconfig().display()),
            format!("--namespace={ns}"),
            format!("--configmap={CM}"),
            "--target=Deployment/dns,ReplicaSet/rs,replicationcontroller/rc".to_owned(),
            format!("--default-params={defaults}"),
            "--poll-period-seconds=1".to_owned(),
            "--logtostderr=true".to_owned(),
            "--v=2".to_owned(),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        Autoscaler::spawn(dir, &args)
    }

    /// `clusterdns autoscaler ARGS --health-address=127.0.0.1:FREE`, logging to a file in
    /// `dir`.
    fn spawn(dir: &Path, args: &[String]) -> Autoscaler {
        Autoscaler::spawn_on(dir, args, "127.0.0.1")
    }

    /// As [`Autoscaler::spawn`], with `--health-address=HOST:FREE`.
    fn spawn_on(dir: &Path, args: &[String], host: &str) -> Autoscaler {
        let health = common::free_port();
        let log = dir.join(format!("autoscaler-{health}.log"));
        let file = std::fs::File::create(&log).expect("log file");
        let child = Command::new(common::binary())
            .args(args)
            .arg(format!("--health-address={host}:{health}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("start the autoscaler");
        Autoscaler { child, log, health }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `GET path` on the health listener: status code and body.
    fn get(&self, path: &str) -> Option<(u16, String)> {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.health));
        let r = clusterdns_test_support::http_get(addr, path);
        (r.status != 0).then(|| (r.status, r.text()))
    }

    /// Waits until `/last-poll` answers `code` with a body containing `text`; returns the body.
    fn wait_last_poll(&self, code: u16, text: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let got = self.get("/last-poll");
            if let Some((c, body)) = &got
                && *c == code
                && body.contains(text)
            {
                return body.clone();
            }
            assert!(
                Instant::now() < deadline,
                "/last-poll never answered {code} with {text:?}: last {got:?}\nlog:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Autoscaler {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn kc(rig: &Rig, args: &[&str]) -> String {
    rig.kubectl(args)
        .unwrap_or_else(|e| panic!("kubectl {args:?}: {e}"))
}

fn replicas(rig: &Rig, ns: &str) -> Vec<i64> {
    TARGETS
        .iter()
        .map(|t| {
            let out = kc(
                rig,
                &["-n", ns, "get", t, "-o", "jsonpath={.spec.replicas}"],
            );
            out.trim().parse().unwrap_or(-1)
        })
        .collect()
}

/// Waits until every target has `want` replicas.
fn wait_replicas(rig: &Rig, ns: &str, a: &Autoscaler, step: &str, want: i64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = replicas(rig, ns);
        if got.iter().all(|&r| r == want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{step}: replicas {got:?}, want {want}\nlog:\n{}",
            a.log()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Waits three poll periods and checks that every target still has `want` replicas.
fn stays(rig: &Rig, ns: &str, a: &Autoscaler, step: &str, want: i64) {
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        replicas(rig, ns),
        vec![want; 3],
        "{step}: changed\nlog:\n{}",
        a.log()
    );
}

/// A Node with `cpu` allocatable. `fake`: KWOK makes it Ready; otherwise it carries the
/// given `ready` condition and nothing keeps it up to date.
fn node(name: &str, cpu: &str, fake: bool, ready: &str) -> String {
    let annotation = if fake {
        "  annotations: {kwok.x-k8s.io/node: fake}\n"
    } else {
        ""
    };
    let conditions = if fake {
        String::new()
    } else {
        format!(
            "  conditions:\n  - {{type: Ready, status: \"{ready}\", reason: Test, lastHeartbeatTime: \"2026-01-01T00:00:00Z\", lastTransitionTime: \"2026-01-01T00:00:00Z\"}}\n"
        )
    };
    format!(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels: {{autoscaler-test: \"yes\"}}\n{annotation}status:\n  capacity: {{cpu: \"{cpu}\", memory: 1Gi, pods: \"110\"}}\n  allocatable: {{cpu: \"{cpu}\", memory: 1Gi, pods: \"110\"}}\n{conditions}"
    )
}

/// The three targets, each at `replicas`, with Pods of their own labels.
fn targets(ns: &str, replicas: u32) -> String {
    let pod = |app: &str| {
        format!(
            "    metadata: {{labels: {{app: {app}}}}}\n    spec: {{containers: [{{name: c, image: example.invalid/none}}]}}\n"
        )
    };
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: dns, namespace: {ns}}}\nspec:\n  replicas: {replicas}\n  selector: {{matchLabels: {{app: dns}}}}\n  template:\n{}---\napiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {{name: rs, namespace: {ns}}}\nspec:\n  replicas: {replicas}\n  selector: {{matchLabels: {{app: rs}}}}\n  template:\n{}---\napiVersion: v1\nkind: ReplicationController\nmetadata: {{name: rc, namespace: {ns}}}\nspec:\n  replicas: {replicas}\n  selector: {{app: rc}}\n  template:\n{}",
        pod("dns"),
        pod("rs"),
        pod("rc")
    )
}

/// Makes `mode` the ConfigMap's one data key, with `json` as its parameters.
fn set_params(rig: &Rig, ns: &str, mode: &str, json: &str) {
    set_params_of(rig, ns, CM, mode, json);
}

/// [`set_params`] of the ConfigMap `cm`, as an operator tunes it (`kubectl patch`).
fn set_params_of(rig: &Rig, ns: &str, cm: &str, mode: &str, json: &str) {
    // A merge patch: `null` removes the other mode's key.
    let other = if mode == "linear" { "ladder" } else { "linear" };
    let body = serde_json::json!({ "data": { mode: json, other: serde_json::Value::Null } });
    kc(
        rig,
        &[
            "-n",
            ns,
            "patch",
            "configmap",
            cm,
            "--type=merge",
            "-p",
            &body.to_string(),
        ],
    );
}

#[test]
fn replicas_follow_the_nodes_and_the_parameters() {
    // One fake node of 4 CPUs (rig-node-0); the apiserver logs every request.
    let Some(private) =
        PrivateRig::start_with_nodes(1, &[("RIG_NODE_CPU", "4"), ("RIG_APISERVER_V", "3")])
    else {
        return;
    };
    let rig = private.rig();
    let ns = rig.namespace("autoscaler").expect("namespace");
    let ns = ns.name().to_owned();
    rig.apply_yaml(&targets(&ns, 5)).expect("targets");

    let defaults =
        r#"{"linear":{"coresPerReplica":5,"nodesPerReplica":3,"preventSinglePointFailure":true}}"#;
    let a = Autoscaler::start(rig, private.dir(), &ns, defaults);

    // 1 node, 4 cores: max(ceil(4/5), ceil(1/3)) = 1 (a scale-down from 5), with the
    // ConfigMap created from the defaults as Go writes them.
    wait_replicas(rig, &ns, &a, "1 node", 1);
    let data = kc(
        rig,
        &["-n", &ns, "get", "configmap", CM, "-o", "jsonpath={.data}"],
    );
    assert_eq!(
        data,
        r#"{"linear":"{\"coresPerReplica\":5,\"nodesPerReplica\":3,\"preventSinglePointFailure\":true}"}"#
    );
    let log = a.log();
    for t in TARGETS {
        assert!(
            log.contains(&format!(
                "] Replicas are not as expected : updating {t} from 5 to 1"
            )),
            "{log}"
        );
    }
    assert!(log.contains("] Cluster status: SchedulableNodes[1], TotalNodes[1], SchedulableCores[4], TotalCores[4]"), "{log}");
    assert!(
        log.contains(&format!("] Created ConfigMap {CM} in namespace {ns}")),
        "{log}"
    );
    assert_eq!(a.get("/healthz"), Some((200, String::new())));
    assert_eq!(a.get("/last-poll"), Some((200, String::new())));

    // + n1 (500m): 2 nodes, ceil(4.5) = 5 cores: cores 1, nodes 1, single point of failure → 2.
    rig.apply_yaml(&node("as-n1", "500m", true, ""))
        .expect("n1");
    wait_replicas(rig, &ns, &a, "2 nodes (SPOF)", 2);

    // + n2 (3500m), n3 (7): 4 nodes, 15 cores (the sum rounded up once; rounding each
    // node would give 16 → 4): max(ceil(15/5), ceil(4/3)) = 3.
    rig.apply_yaml(&format!(
        "{}---\n{}",
        node("as-n2", "3500m", true, ""),
        node("as-n3", "7", true, "")
    ))
    .expect("n2, n3");
    wait_replicas(rig, &ns, &a, "4 nodes, 15 cores", 3);

    // Cordon n3: 3 schedulable nodes, 8 cores: max(2, SPOF 2) = 2.
    kc(rig, &["cordon", "as-n3"]);
    wait_replicas(rig, &ns, &a, "n3 cordoned", 2);

    // + n4, NotReady, 40 CPUs: not schedulable, nothing changes.
    rig.apply_yaml(&node("as-n4", "40", false, "False"))
        .expect("n4");
    stays(rig, &ns, &a, "n4 NotReady", 2);

    // includeUnschedulableNodes, on the fly: 5 nodes, 55 cores: max(11, 2) = 11.
    set_params(
        rig,
        &ns,
        "linear",
        r#"{"coresPerReplica":5,"nodesPerReplica":3,"preventSinglePointFailure":true,"includeUnschedulableNodes":true}"#,
    );
    wait_replicas(rig, &ns, &a, "includeUnschedulableNodes", 11);

    // Ladder, counting the unschedulable nodes: 5 nodes → step [4,1] gives 1, but a
    // scale-down stops at what the 3 schedulable nodes give (step [0,4]): 4.
    set_params(
        rig,
        &ns,
        "ladder",
        r#"{"nodesToReplicas":[[0,4],[4,1]],"includeUnschedulableNodes":true}"#,
    );
    wait_replicas(rig, &ns, &a, "ladder, scale-down floor", 4);
    let data = kc(
        rig,
        &["-n", &ns, "get", "configmap", CM, "-o", "jsonpath={.data}"],
    );
    assert!(!data.contains("linear"), "{data}");

    // Ladder may give 0: 3 schedulable nodes < 6.
    set_params(rig, &ns, "ladder", r#"{"nodesToReplicas":[[0,0],[6,1]]}"#);
    wait_replicas(rig, &ns, &a, "ladder 0", 0);

    // Broken parameters: the poll fails naming the key, nothing is scaled (a target set by
    // hand stays as it is), the last good parameters are kept.
    set_params(rig, &ns, "ladder", r#"{"nodesToReplicas":[[1,-2]]}"#);
    let body = a.wait_last_poll(500, "nodesToReplicas");
    assert!(
        body.starts_with("Encountered error at last poll cycle: ")
            && body.contains("invalid negative values in entry [1 -2] in nodesToReplicas"),
        "{body}"
    );
    for t in TARGETS {
        kc(rig, &["-n", &ns, "scale", t, "--replicas=3"]);
    }
    stays(rig, &ns, &a, "broken parameters", 3);
    assert!(
        a.log().contains("Error ensuring controller: Error syncing configMap with controller: error parsing ladder params: invalid negative values in entry [1 -2] in nodesToReplicas"),
        "{}",
        a.log()
    );
    // A second data key is an error too.
    let two = serde_json::json!({"data": {"linear": r#"{"nodesPerReplica":1}"#}}).to_string();
    kc(
        rig,
        &[
            "-n",
            &ns,
            "patch",
            "configmap",
            CM,
            "--type=merge",
            "-p",
            &two,
        ],
    );
    let body = a.wait_last_poll(500, "expected only one entry");
    assert!(body.contains("expected only one entry"), "{body}");
    stays(rig, &ns, &a, "two keys", 3);

    // Fixed, back to linear: 8 schedulable cores (4 + 0.5 + 3.5) → 8.
    set_params(rig, &ns, "linear", r#"{"coresPerReplica":1}"#);
    wait_replicas(rig, &ns, &a, "fixed: linear 1 core per replica", 8);
    a.wait_last_poll(200, "");

    // Delete n2: ceil(4.5) = 5.
    kc(rig, &["delete", "node", "as-n2"]);
    wait_replicas(rig, &ns, &a, "n2 deleted", 5);

    // Uncordon n3: 4 + 0.5 + 7 = 11.5 → 12.
    kc(rig, &["uncordon", "as-n3"]);
    wait_replicas(rig, &ns, &a, "n3 uncordoned", 12);
    drop(a);

    // A new autoscaler with other defaults: the existing ConfigMap wins.
    let b = Autoscaler::start(
        rig,
        private.dir(),
        &ns,
        r#"{"linear":{"nodesPerReplica":1,"min":20}}"#,
    );
    b.wait_last_poll(200, "");
    stays(rig, &ns, &b, "existing ConfigMap wins", 12);
    let data = kc(
        rig,
        &[
            "-n",
            &ns,
            "get",
            "configmap",
            CM,
            "-o",
            "jsonpath={.data.linear}",
        ],
    );
    assert_eq!(data, r#"{"coresPerReplica":1}"#);
    assert!(!b.log().contains("Created ConfigMap"), "{}", b.log());

    // The nodes came from a watch: one LIST per autoscaler process over the whole run,
    // not one per poll (the autoscaler's requests are those without a User-Agent: every
    // other client of the rig sends one).
    let node_lists: Vec<_> = private
        .apiserver_requests()
        .into_iter()
        .filter(|r| {
            r.verb == "LIST" && r.uri.starts_with("/api/v1/nodes") && r.user_agent.is_empty()
        })
        .collect();
    let all: Vec<_> = private
        .apiserver_requests()
        .into_iter()
        .filter(|r| r.uri.starts_with("/api/v1/nodes"))
        .map(|r| format!("{} {} {}", r.verb, r.uri, r.user_agent))
        .collect();
    assert_eq!(node_lists.len(), 2, "{node_lists:#?}\n{all:#?}");

    for n in ["as-n1", "as-n3", "as-n4"] {
        let _ = rig.kubectl(&["delete", "node", n, "--wait=false"]);
    }
}

fn kustomization() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/autoscaler")
}

/// `deploy/autoscaler` as kustomize renders it.
fn manifests(rig: &Rig) -> String {
    kc(
        rig,
        &["kustomize", kustomization().to_str().expect("utf-8 path")],
    )
}

/// The Deployment's `--default-params` (CoreDNS's), as the autoscaler writes them into the
/// ConfigMap it creates.
const DEPLOYED_LINEAR: &str = r#"{"coresPerReplica":256,"includeUnschedulableNodes":true,"nodesPerReplica":16,"preventSinglePointFailure":true}"#;

/// `deploy/autoscaler`'s ConfigMap, as JSON, or `None` while there is none.
fn deployed_configmap(rig: &Rig) -> Option<serde_json::Value> {
    let out = rig
        .kubectl(&[
            "-n",
            "kube-system",
            "get",
            "configmap",
            "kube-dns-autoscaler",
            "-o",
            "json",
        ])
        .ok()?;
    Some(serde_json::from_str(&out).expect("json"))
}

/// The manifests' objects are applied; the binary runs with the manifest's arguments and
/// the ServiceAccount's token, nothing else: it creates its ConfigMap (the manifests ship
/// none) from `--default-params` and scales `coredns` by it; tuned to `ladder`, the
/// ConfigMap is left exactly as it is by `kubectl apply -k deploy/autoscaler`, twice, and
/// the autoscaler goes on scaling by the ladder; deleted, it is created again from the
/// defaults; the ServiceAccount may do nothing beyond what the autoscaler needs.
#[test]
fn runs_with_exactly_the_deployed_rbac() {
    // Two fake nodes of 4 CPUs.
    let Some(private) = PrivateRig::start_with_nodes(2, &[("RIG_NODE_CPU", "4")]) else {
        return;
    };
    let rig = private.rig();
    let shipped = manifests(rig);
    assert!(!shipped.contains("kind: ConfigMap"), "{shipped}");
    rig.apply_yaml(&shipped).expect("deploy/autoscaler");
    rig.apply_yaml(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: coredns, namespace: kube-system}\nspec:\n  replicas: 5\n  selector: {matchLabels: {k8s-app: kube-dns}}\n  template:\n    metadata: {labels: {k8s-app: kube-dns}}\n    spec: {containers: [{name: c, image: example.invalid/none}]}\n",
    )
    .expect("coredns");

    // A kubeconfig of the ServiceAccount's token alone.
    let sa = "system:serviceaccount:kube-system:kube-dns-autoscaler";
    let token = kc(
        rig,
        &[
            "-n",
            "kube-system",
            "create",
            "token",
            "kube-dns-autoscaler",
        ],
    );
    let kubeconfig = private.dir().join("autoscaler.kubeconfig");
    std::fs::copy(rig.kubeconfig(), &kubeconfig).expect("copy kubeconfig");
    let as_sa = |args: &[&str]| -> (bool, String) {
        let out = Command::new(rig.bin("kubectl"))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args(args)
            .output()
            .expect("kubectl");
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    let tok = format!("--token={}", token.trim());
    assert!(as_sa(&["config", "set-credentials", "sa", &tok]).0);
    assert!(as_sa(&["config", "set-context", "--current", "--user=sa"]).0);
    let (_, who) = as_sa(&[
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
    ]);
    assert_eq!(who.trim(), sa);

    // Exactly the rules: what the autoscaler does is allowed, the next thing is not.
    for (verb, what, allowed) in [
        ("list", "nodes", true),
        ("watch", "nodes", true),
        ("get", "nodes", false),
        ("get", "configmaps", true),
        ("create", "configmaps", true),
        ("update", "configmaps", false),
        ("delete", "configmaps", false),
        ("list", "configmaps", false),
        ("get", "deployments.apps/scale", true),
        ("update", "deployments.apps/scale", true),
        ("patch", "deployments.apps/scale", false),
        ("get", "replicasets.apps/scale", true),
        ("update", "replicationcontrollers/scale", true),
        ("update", "deployments.apps", false),
        ("get", "deployments.apps", false),
        ("list", "pods", false),
        ("get", "secrets", false),
        ("get", "leases.coordination.k8s.io", true),
        ("create", "leases.coordination.k8s.io", true),
        ("update", "leases.coordination.k8s.io", true),
        ("delete", "leases.coordination.k8s.io", false),
    ] {
        let (resource, sub) = what.split_once('/').unwrap_or((what, ""));
        let sub = format!("--subresource={sub}");
        let mut args = vec!["auth", "can-i", verb, resource, "-n", "kube-system"];
        if sub != "--subresource=" {
            args.push(&sub);
        }
        let (_, out) = as_sa(&args);
        let want = if allowed { "yes" } else { "no" };
        assert_eq!(
            out.lines().next().unwrap_or(""),
            want,
            "{verb} {what}: {out}"
        );
    }

    // The Deployment's own arguments, with the token's kubeconfig.
    let dep: serde_json::Value = serde_json::from_str(&kc(
        rig,
        &[
            "-n",
            "kube-system",
            "get",
            "deployment",
            "kube-dns-autoscaler",
            "-o",
            "json",
        ],
    ))
    .expect("json");
    let mut args: Vec<String> = dep["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("string").to_owned())
        .collect();
    assert_eq!(args[0], "autoscaler");
    let defaults = format!(r#"--default-params={{"linear":{DEPLOYED_LINEAR}}}"#);
    assert!(args.contains(&defaults), "{args:?}");
    assert!(
        deployed_configmap(rig).is_none(),
        "none before the autoscaler"
    );
    args.push(format!("--kubeconfig={}", kubeconfig.display()));
    args.push("--poll-period-seconds=1".to_owned());
    let a = Autoscaler::spawn(private.dir(), &args);

    // Its ConfigMap, created from --default-params at the first poll; 2 nodes, 8 cores
    // with CoreDNS's parameters: max(ceil(8/256), SPOF 2) = 2.
    let coredns = || {
        kc(
            rig,
            &[
                "-n",
                "kube-system",
                "get",
                "deployment",
                "coredns",
                "-o",
                "jsonpath={.spec.replicas}",
            ],
        )
    };
    let wait_coredns = |want: &str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while coredns() != want {
            assert!(
                Instant::now() < deadline,
                "coredns at {}, want {want}\n{}",
                coredns(),
                a.log()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    };
    wait_coredns("2");
    assert!(
        a.log().contains("updating deployment/coredns from 5 to 2"),
        "{}",
        a.log()
    );
    let created = "Created ConfigMap kube-dns-autoscaler in namespace kube-system";
    assert_eq!(a.log().matches(created).count(), 1, "{}", a.log());
    let cm = deployed_configmap(rig).expect("created by the autoscaler");
    assert_eq!(cm["data"], serde_json::json!({ "linear": DEPLOYED_LINEAR }));

    // Tuned by the operator to a ladder: 2 nodes → 3.
    let ladder = r#"{"nodesToReplicas":[[1,1],[2,3],[3,5]]}"#;
    set_params_of(rig, "kube-system", "kube-dns-autoscaler", "ladder", ladder);
    wait_coredns("3");
    let tuned = deployed_configmap(rig).expect("the ConfigMap");
    assert_eq!(tuned["data"], serde_json::json!({ "ladder": ladder }));

    // Applied again, twice, as an upgrade does: the ConfigMap is no object of the
    // kustomization, so not a byte of it changes (same resourceVersion, no `linear`
    // put back beside the ladder, which the autoscaler would refuse).
    let dir = kustomization();
    for _ in 0..2 {
        let out = kc(rig, &["apply", "-k", dir.to_str().expect("utf-8 path")]);
        assert!(
            out.contains("deployment.apps/kube-dns-autoscaler") && !out.contains("configmap"),
            "{out}"
        );
    }
    let after = deployed_configmap(rig).expect("the ConfigMap");
    assert_eq!(after["data"], tuned["data"]);
    assert_eq!(
        after["metadata"]["resourceVersion"], tuned["metadata"]["resourceVersion"],
        "{after}"
    );

    // And the autoscaler still scales by the ladder: a third node → 5 (CoreDNS's linear
    // parameters would give 2).
    rig.apply_yaml(&node("as-third", "4", true, ""))
        .expect("a third node");
    wait_coredns("5");
    a.wait_last_poll(200, "");
    assert!(
        a.log().contains("updating deployment/coredns from 3 to 5"),
        "{}",
        a.log()
    );

    // Deleted, the ConfigMap is created again from --default-params: 3 nodes, 12 cores → 2.
    kc(
        rig,
        &[
            "-n",
            "kube-system",
            "delete",
            "configmap",
            "kube-dns-autoscaler",
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while a.log().matches(created).count() < 2 {
        assert!(Instant::now() < deadline, "not recreated\n{}", a.log());
        std::thread::sleep(Duration::from_millis(250));
    }
    let cm = deployed_configmap(rig).expect("created again");
    assert_eq!(cm["data"], serde_json::json!({ "linear": DEPLOYED_LINEAR }));
    wait_coredns("2");
    a.wait_last_poll(200, "");
    let log = a.log();
    assert!(!log.to_lowercase().contains("forbidden"), "{log}");
}

/// Two autoscalers that disagree (the second sees no node through its `--nodelabels`): only
/// the Lease's holder scales; when it stops, the other takes over.
#[test]
fn two_replicas_do_not_fight() {
    let Some(private) = PrivateRig::start_with_nodes(3, &[("RIG_NODE_CPU", "4")]) else {
        return;
    };
    let rig = private.rig();
    let ns = rig.namespace("autoscaler-lease").expect("namespace");
    let ns = ns.name().to_owned();
    rig.apply_yaml(&targets(&ns, 2)).expect("targets");
    let defaults = r#"{"linear":{"nodesPerReplica":1}}"#;

    // A sees 3 nodes: 3 replicas.
    let a = Autoscaler::start(rig, private.dir(), &ns, defaults);
    wait_replicas(rig, &ns, &a, "A alone", 3);
    assert!(
        a.log().contains(&format!("Holding lease {ns}/{CM}")),
        "{}",
        a.log()
    );

    // B sees none (1 replica by the same parameters), but A holds the lease.
    let b = Autoscaler::start_with(
        rig,
        private.dir(),
        &ns,
        defaults,
        &["--nodelabels=no-such=node"],
    );
    b.wait_last_poll(200, "");
    stays(rig, &ns, &b, "A and B", 3);
    stays(rig, &ns, &b, "A and B, later", 3);
    assert!(
        !b.log().contains("Replicas are not as expected"),
        "{}",
        b.log()
    );
    assert!(!b.log().contains("Holding lease"), "{}", b.log());

    // A stops: once its lease has not been renewed for its duration (5 s), B scales.
    drop(a);
    wait_replicas(rig, &ns, &b, "B after A", 1);
    assert!(
        b.log().contains(&format!("Holding lease {ns}/{CM}")),
        "{}",
        b.log()
    );
    let holder = kc(
        rig,
        &[
            "-n",
            &ns,
            "get",
            "lease",
            CM,
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ],
    );
    assert!(holder.ends_with(&format!("_{}", b.child.id())), "{holder}");
}

/// Upstream's `:8080` listens on both families (Go's wildcard), so the kubelet of an IPv6
/// cluster can probe it. The listener is bound before the first list of nodes: no cluster
/// is needed, the kubeconfig names an API server port where nothing listens.
#[test]
fn a_health_address_without_host_answers_on_both_families() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = common::unreachable_kubeconfig(dir.path());
    let args = [
        "autoscaler".to_owned(),
        format!("--kubeconfig={}", kubeconfig.display()),
        "--namespace=ns".to_owned(),
        format!("--configmap={CM}"),
        "--target=deployment/dns".to_owned(),
        "--logtostderr=true".to_owned(),
    ];
    let a = Autoscaler::spawn_on(dir.path(), &args, "");
    let ok = (200, String::new());
    assert_eq!(
        ops::get_both(a.health, "/healthz"),
        [ok.clone(), ok],
        "{}",
        a.log()
    );
}

/// The real binary's command line, without a cluster: pflag's errors (exit 2), upstream's
/// validation lines (exit 1), `--version` under upstream's name.
#[test]
fn command_line_as_upstream() {
    let run = |program: &Path, args: &[&str]| {
        let out = Command::new(program).args(args).output().expect("run");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let bin = common::binary();
    let (code, _, err) = run(bin, &["autoscaler", "--foo"]);
    assert_eq!(code, Some(2));
    assert!(err.starts_with("unknown flag: --foo\nUsage of "), "{err}");
    assert!(err.contains("      --target string "), "{err}");
    let (code, _, err) = run(bin, &["autoscaler", "--poll-period-seconds", "x"]);
    assert_eq!(code, Some(2));
    assert!(err.starts_with(r#"invalid argument "x" for "--poll-period-seconds" flag: strconv.ParseInt: parsing "x": invalid syntax"#), "{err}");

    let (code, _, err) = run(
        bin,
        &["autoscaler", "--target=statefulset/web", "--namespace=ns"],
    );
    assert_eq!(code, Some(1));
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 3, "{err}");
    assert!(lines[0].starts_with('E') && lines[0].ends_with("] Target format error. Please use 'deployment/*,replicationcontroller/*,replicaset/*' (not case sensitive, comma delimiter supported)."), "{err}");
    assert!(
        lines[1].ends_with("] --configmap parameter cannot be empty"),
        "{err}"
    );
    assert!(
        lines[2].ends_with("] failed to validate all input parameters"),
        "{err}"
    );

    // Under upstream's name, the binary is the autoscaler.
    let dir = tempfile::tempdir().expect("tempdir");
    let cpa = dir.path().join("cluster-proportional-autoscaler");
    std::os::unix::fs::symlink(bin, &cpa).expect("symlink");
    let (code, out, _) = run(&cpa, &["--version"]);
    assert_eq!(code, Some(0));
    assert!(out.starts_with("clusterdns-"), "{out}");
    let (code, _, err) = run(&cpa, &["-conf", "x"]);
    assert_eq!(code, Some(2));
    assert!(
        err.starts_with("unknown shorthand flag: 'c' in -conf"),
        "{err}"
    );
}
