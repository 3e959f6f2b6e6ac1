//! `deploy/`: the cluster-DNS manifests (kustomize, `deploy/cluster-dns`) and
//! the Helm chart (`deploy/helm/clusterdns`), checked by the real API server:
//!
//! - every manifest, the kustomization and the chart's output pass
//!   `kubectl apply --dry-run=server` (schema, defaulting, admission, RBAC
//!   validation of the role and binding);
//! - the chart with its default values renders exactly the kustomize objects,
//!   so the two cannot drift apart, and its values (replicas, Corefile,
//!   resources, image, names, Service IP) land where they should;
//! - applied for real on a private rig with fake nodes (kube-scheduler and
//!   KWOK, docs/rig.md): the Deployment's Pods are scheduled onto distinct
//!   nodes (the anti-affinity), reach Running with Pod IPs, and the `kube-dns`
//!   Service (10.96.0.10) gets an EndpointSlice listing exactly those IPs on
//!   53/UDP, 53/TCP and 9153/TCP. First kubeadm's own CoreDNS addon (the
//!   rig's kubeadm installs it), then the README's in-place replacement
//!   (`kubectl set image`) and its rollback (`rollout undo`), then `kubectl
//!   apply -k` over them, then `helm install` into another namespace with
//!   other names;
//! - kubeadm's CoreDNS objects (`kubeadm init phase addon coredns
//!   --print-manifest`) are deploy/cluster-dns's, Corefile included, but for
//!   the differences deploy/README.md lists, so a new kubeadm's changes are
//!   noticed;
//! - `kubeadm upgrade` on a cluster whose DNS runs the clusterdns image:
//!   kubeadm's own CoreDNS preflight checks (`kubeadm-coredns-check`) and its
//!   `addon/coredns` phase, on the rig's API server, for each way the README's
//!   "Replace CoreDNS in place" weighs (the image tag, `--skip-phases`,
//!   `dns.disabled`).
//!
//! The fake nodes run no containers: these tests prove the objects, not the
//! image (tests/image.rs does that). Each test starts a private rig (the shared
//! rig's binaries, its own ports and directory), so kube-system's objects here
//! never meet other tests'. Needs `scripts/rig build --nodes --helm` (kubeadm
//! and kubeadm-coredns-check come with the plain `scripts/rig build`); skipped
//! with a message otherwise, unless `CLUSTERDNS_REQUIRE_RIG=1`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Deserialize;

use clusterdns_test_support::{PrivateRig, Rig, eventually, rig_dir, skip, workspace_root};

// The node-cache lab (three network namespaces), for the rendered
// node-local-dns objects.
#[allow(clippy::unwrap_used)]
#[path = "common/nodecache.rs"]
mod lab;
use serde_json::Value as Json;
use serde_norway::Value as Yaml;

const NODES: u32 = 3;

fn kustomization() -> PathBuf {
    workspace_root().join("deploy/cluster-dns")
}

fn chart() -> PathBuf {
    workspace_root().join("deploy/helm/clusterdns")
}

/// The rig's binary `name` (which `build`, a `scripts/rig build` command,
/// puts there), or `None` after [`skip`].
fn rig_bin(name: &str, build: &str) -> Option<PathBuf> {
    let bin = rig_dir().join("bin").join(name);
    if bin.exists() {
        Some(bin)
    } else {
        skip(&format!("no {}: run `{build}`", bin.display()));
        None
    }
}

/// The rig's helm (`scripts/rig build --helm`), or `None` after [`skip`].
fn helm_bin() -> Option<PathBuf> {
    rig_bin("helm", "scripts/rig build --helm")
}

/// Whether the rig's kubectl is built; else [`skip`] says so.
fn kubectl_built() -> bool {
    let there = rig_dir().join("bin/kubectl").exists();
    if !there {
        skip("no kubectl in the rig: run `scripts/rig build`");
    }
    there
}

/// [`Helm`], for tests that render with both helm and the rig's kubectl;
/// `None` after [`skip`] if either is missing.
fn helm_and_kubectl() -> Option<Helm> {
    let helm = helm_bin()?;
    kubectl_built().then(|| Helm::new(helm))
}

/// Runs `program args...`, panics with its stderr unless it succeeds, returns stdout.
fn run(program: &Path, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", program.display()));
    assert!(
        out.status.success(),
        "{} {args:?} failed ({}):\n{}",
        program.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// helm with its config, cache and data in a scratch directory (nothing from
/// or into the home directory).
struct Helm {
    bin: PathBuf,
    home: tempfile::TempDir,
}

impl Helm {
    fn new(bin: PathBuf) -> Helm {
        Helm {
            bin,
            home: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn run(&self, args: &[&str]) -> String {
        self.try_run(args)
            .unwrap_or_else(|e| panic!("helm {args:?} failed:\n{e}"))
    }

    /// helm `args`: its stdout, or its stderr if it fails.
    fn try_run(&self, args: &[&str]) -> Result<String, String> {
        let h = self.home.path();
        let out = Command::new(&self.bin)
            .args(args)
            .stdin(Stdio::null())
            .env("HELM_CONFIG_HOME", h.join("config"))
            .env("HELM_CACHE_HOME", h.join("cache"))
            .env("HELM_DATA_HOME", h.join("data"))
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", self.bin.display()));
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// `helm template` of the chart with `args` (e.g. `--set k=v`).
    fn template(&self, namespace: &str, args: &[&str]) -> String {
        self.try_template(namespace, args)
            .unwrap_or_else(|e| panic!("helm template {args:?} failed:\n{e}"))
    }

    /// [`Helm::template`], or helm's complaint.
    fn try_template(&self, namespace: &str, args: &[&str]) -> Result<String, String> {
        let chart = chart();
        let chart = chart.to_str().expect("utf-8 path");
        let mut all = vec!["template", "clusterdns", chart, "--namespace", namespace];
        all.extend_from_slice(args);
        self.try_run(&all)
    }
}

/// The YAML documents of a stream, keyed by `Kind/namespace/name`.
fn objects(yaml: &str) -> BTreeMap<String, Yaml> {
    let mut out = BTreeMap::new();
    for doc in serde_norway::Deserializer::from_str(yaml) {
        let v = Yaml::deserialize(doc).expect("valid YAML");
        if v.is_null() {
            continue;
        }
        let s = |path: &[&str]| {
            let mut cur = &v;
            for p in path {
                cur = &cur[*p];
            }
            cur.as_str().unwrap_or("").to_string()
        };
        let key = format!(
            "{}/{}/{}",
            s(&["kind"]),
            s(&["metadata", "namespace"]),
            s(&["metadata", "name"])
        );
        assert!(out.insert(key.clone(), v).is_none(), "{key} twice");
    }
    out
}

fn kubectl_kustomize() -> String {
    kustomize(&kustomization())
}

/// `kubectl kustomize DIR`.
fn kustomize(dir: &Path) -> String {
    let kubectl = rig_dir().join("bin/kubectl");
    run(&kubectl, &["kustomize", dir.to_str().expect("utf-8 path")])
}

/// The same objects, field for field, from kustomize and from helm.
fn assert_same_objects(
    from_kustomize: &BTreeMap<String, Yaml>,
    from_helm: &BTreeMap<String, Yaml>,
) {
    for (key, k) in from_kustomize {
        let h = from_helm
            .get(key)
            .unwrap_or_else(|| panic!("helm does not render {key}"));
        assert_eq!(
            k,
            h,
            "{key} differs:\nkustomize:\n{}\nhelm:\n{}",
            serde_norway::to_string(k).unwrap_or_default(),
            serde_norway::to_string(h).unwrap_or_default()
        );
    }
    assert_eq!(
        from_helm.keys().collect::<Vec<_>>(),
        from_kustomize.keys().collect::<Vec<_>>(),
        "helm renders more"
    );
}

const OBJECTS: [&str; 6] = [
    "ClusterRole//system:coredns",
    "ClusterRoleBinding//system:coredns",
    "ConfigMap/kube-system/coredns",
    "Deployment/kube-system/coredns",
    "Service/kube-system/kube-dns",
    "ServiceAccount/kube-system/coredns",
];

#[test]
fn helm_defaults_render_exactly_the_kustomize_objects() {
    let Some(helm) = helm_and_kubectl() else {
        return;
    };
    let chart = chart();
    helm.run(&["lint", "--strict", chart.to_str().expect("utf-8 path")]);
    let from_kustomize = objects(&kubectl_kustomize());
    let from_helm = objects(&helm.template("kube-system", &[]));
    assert_eq!(
        from_kustomize
            .keys()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        OBJECTS
    );
    assert_same_objects(&from_kustomize, &from_helm);

    // The image kustomize writes is the one scripts/image tags.
    let dep = &from_kustomize["Deployment/kube-system/coredns"];
    let c = &dep["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["image"].as_str(), Some(IMAGE));
    // The Corefile is the seed's (kubeadm's default).
    let corefile = from_kustomize["ConfigMap/kube-system/coredns"]["data"]["Corefile"]
        .as_str()
        .expect("Corefile");
    assert!(
        corefile.contains("health {\n       lameduck 5s\n    }")
            && corefile.contains("kubernetes cluster.local in-addr.arpa ip6.arpa {")
            && corefile.contains("forward . /etc/resolv.conf"),
        "{corefile}"
    );
    // Least privilege: list/watch on what the kubernetes plugin reads, nothing else.
    let role = &from_kustomize["ClusterRole//system:coredns"];
    let rules = serde_json::to_value(&role["rules"]).expect("json");
    assert_eq!(
        rules,
        serde_json::json!([
            {"apiGroups": [""], "resources": ["services", "pods", "namespaces"], "verbs": ["list", "watch"]},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}
        ])
    );
    // Only NET_BIND_SERVICE, everything else dropped; `restricted`.
    let sc = serde_json::to_value(&c["securityContext"]).expect("json");
    assert_eq!(
        sc,
        serde_json::json!({
            "allowPrivilegeEscalation": false,
            "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
            "readOnlyRootFilesystem": true,
            "runAsNonRoot": true,
            "seccompProfile": {"type": "RuntimeDefault"}
        })
    );
}

/// `to` as a path relative to the directory `from` (both absolute).
fn relative(from: &Path, to: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for _ in from.components().skip(1) {
        out.push("..");
    }
    out.join(to.strip_prefix("/").unwrap_or(to))
}

/// The overlay example `DIR/kustomization.yaml` of deploy/README.md.
fn readme_example(dir: &str) -> String {
    let readme = std::fs::read_to_string(workspace_root().join("deploy/README.md"))
        .expect("deploy/README.md");
    let head = format!("```yaml\n# {dir}/kustomization.yaml\n");
    let start = readme
        .find(&head)
        .unwrap_or_else(|| panic!("the {dir} overlay example in deploy/README.md"))
        + "```yaml\n".len();
    let len = readme[start..].find("```").expect("end of the example");
    readme[start..start + len].to_string()
}

/// The overlay example of deploy/README.md, as written there, renders the
/// base with its image, replica count and Service address changed.
#[test]
fn the_readme_overlay_sets_image_replicas_and_address() {
    let kubectl = rig_dir().join("bin/kubectl");
    if !kubectl_built() {
        return;
    }
    let example = readme_example("my-dns");
    let dir = tempfile::tempdir().expect("tempdir");
    let overlay = dir.path().join("my-dns");
    std::fs::create_dir(&overlay).expect("mkdir");
    let base = relative(&overlay, &kustomization());
    let text = example.replace("../deploy/cluster-dns", base.to_str().expect("utf-8 path"));
    assert_ne!(text, example, "the example names ../deploy/cluster-dns");
    std::fs::write(overlay.join("kustomization.yaml"), text).expect("write");
    let out = objects(&run(
        &kubectl,
        &["kustomize", overlay.to_str().expect("utf-8")],
    ));
    let base = objects(&kubectl_kustomize());
    assert_eq!(
        out.keys().collect::<Vec<_>>(),
        base.keys().collect::<Vec<_>>()
    );
    let dep = &out["Deployment/kube-system/coredns"];
    assert_eq!(dep["spec"]["replicas"].as_u64(), Some(3));
    assert_eq!(
        dep["spec"]["template"]["spec"]["containers"][0]["image"].as_str(),
        Some("registry.example/clusterdns:0.1.0")
    );
    assert_eq!(
        out["Service/kube-system/kube-dns"]["spec"]["clusterIP"].as_str(),
        Some("10.100.0.10")
    );
    for key in [
        "ConfigMap/kube-system/coredns",
        "ClusterRole//system:coredns",
    ] {
        assert_eq!(out[key], base[key], "{key} is the base's");
    }
}

#[test]
fn helm_values_land_where_they_should() {
    let Some(helm) = helm_bin() else { return };
    let helm = Helm::new(helm);
    let dir = tempfile::tempdir().expect("tempdir");
    let corefile = ".:53 {\n    whoami\n}\n";
    let values = dir.path().join("values.yaml");
    std::fs::write(
        &values,
        "replicas: 5\n\
         image: {repository: registry.example/dns/clusterdns, tag: v9, pullPolicy: Always}\n\
         resources: {requests: {cpu: 50m}}\n\
         service: {clusterIP: 10.100.0.10}\n\
         names: {deployment: dns, serviceAccount: dns-sa, configMap: dns-conf, clusterRole: dns-reader, service: dns}\n",
    )
    .expect("write values");
    let corefile_file = dir.path().join("Corefile");
    std::fs::write(&corefile_file, corefile).expect("write Corefile");
    let set_file = format!("corefile={}", corefile_file.display());
    let out = objects(&helm.template(
        "dns",
        &[
            "-f",
            values.to_str().expect("utf-8"),
            "--set-file",
            &set_file,
        ],
    ));
    assert_eq!(
        out.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "ClusterRole//dns-reader",
            "ClusterRoleBinding//dns-reader",
            "ConfigMap/dns/dns-conf",
            "Deployment/dns/dns",
            "Service/dns/dns",
            "ServiceAccount/dns/dns-sa",
        ]
    );
    let dep = &out["Deployment/dns/dns"];
    assert_eq!(dep["spec"]["replicas"].as_u64(), Some(5));
    let pod = &dep["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"].as_str(), Some("dns-sa"));
    assert_eq!(
        pod["volumes"][0]["configMap"]["name"].as_str(),
        Some("dns-conf")
    );
    let c = &pod["containers"][0];
    assert_eq!(
        c["image"].as_str(),
        Some("registry.example/dns/clusterdns:v9")
    );
    assert_eq!(c["imagePullPolicy"].as_str(), Some("Always"));
    assert_eq!(
        serde_json::to_value(&c["resources"]).expect("json"),
        // Helm merges maps into the defaults: the memory request and limit stay.
        serde_json::json!({"limits": {"memory": "170Mi"}, "requests": {"cpu": "50m", "memory": "70Mi"}})
    );
    assert_eq!(
        out["ConfigMap/dns/dns-conf"]["data"]["Corefile"].as_str(),
        Some(corefile)
    );
    assert_eq!(
        out["Service/dns/dns"]["spec"]["clusterIP"].as_str(),
        Some("10.100.0.10")
    );
    let binding = &out["ClusterRoleBinding//dns-reader"];
    assert_eq!(binding["roleRef"]["name"].as_str(), Some("dns-reader"));
    assert_eq!(binding["subjects"][0]["name"].as_str(), Some("dns-sa"));
    assert_eq!(binding["subjects"][0]["namespace"].as_str(), Some("dns"));

    // `replicas: null` leaves the count to an autoscaler.
    let out = objects(&helm.template("dns", &["--set", "replicas=null"]));
    let dep = &out["Deployment/dns/coredns"];
    assert!(dep["spec"].get("replicas").is_none(), "{dep:?}");
}

/// `kubectl apply --dry-run=server` of each manifest in `dir` on its own,
/// then of the kustomization: `objects` of them, all accepted.
fn dry_run_dir(rig: &Rig, dir: &Path, objects: usize) {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "yaml")
                && p.file_name().is_some_and(|n| n != "kustomization.yaml")
        })
        // kustomize's values for its replacements, never applied
        // (deploy/node-local-dns/addresses.yaml).
        .filter(|p| {
            !std::fs::read_to_string(p)
                .unwrap_or_default()
                .contains("config.kubernetes.io/local-config")
        })
        .collect();
    files.sort();
    assert_eq!(files.len(), objects, "{files:?}");
    for f in &files {
        let out = rig
            .kubectl(&[
                "apply",
                "--dry-run=server",
                "-f",
                f.to_str().expect("utf-8"),
            ])
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert!(out.contains("(server dry run)"), "{}: {out}", f.display());
    }
    let out = rig
        .kubectl(&[
            "apply",
            "--dry-run=server",
            "-k",
            dir.to_str().expect("utf-8"),
        ])
        .expect("kustomization");
    assert_eq!(out.matches("(server dry run)").count(), objects, "{out}");
}

#[test]
fn every_manifest_passes_server_side_dry_run() {
    let Some(helm) = helm_bin() else { return };
    let Some(private) = PrivateRig::start(&[]) else {
        return;
    };
    let rig = private.rig();
    let helm = Helm::new(helm);
    let dir = kustomization();
    dry_run_dir(rig, &dir, OBJECTS.len());
    let rendered = helm.template("kube-system", &[]);
    let out = rig
        .kubectl_with_input(&["apply", "--dry-run=server", "-f", "-"], &rendered)
        .expect("helm template output");
    assert_eq!(
        out.matches("(server dry run)").count(),
        OBJECTS.len(),
        "{out}"
    );
    // Nothing was created.
    let err = rig.kubectl(&["-n", "kube-system", "get", "deployment", "coredns"]);
    assert!(err.is_err(), "dry run created the Deployment: {err:?}");
}

/// The Pods of the cluster DNS and of the autoscaler, as deploy/ and the
/// chart write them, pass the `restricted` Pod Security Standard: the API
/// server's PodSecurity admission creates them (server-side dry run) in a
/// namespace labelled to enforce it. node-local-dns's Pod is refused, for
/// exactly the exceptions SECURITY.md lists with their reasons; that it is
/// refused also shows the namespace enforces.
#[test]
fn cluster_dns_and_autoscaler_pods_pass_restricted_admission() {
    let Some(helm) = helm_and_kubectl() else {
        return;
    };
    let Some(private) = PrivateRig::start(&[]) else {
        return;
    };
    let rig = private.rig();
    let ns = "restricted";
    rig.apply_yaml(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n  labels:\n    \
         pod-security.kubernetes.io/enforce: restricted\n    \
         pod-security.kubernetes.io/enforce-version: latest\n"
    ))
    .expect("namespace");
    for sa in ["coredns", "kube-dns-autoscaler", "node-local-dns"] {
        rig.kubectl(&["-n", ns, "create", "serviceaccount", sa])
            .expect("service account");
    }
    // A Pod of `kind/name`'s template in `objects`, in the namespace.
    let pod = |objects: &BTreeMap<String, Json>, key: &str| -> String {
        let template = &objects.get(key).unwrap_or_else(|| panic!("{key}"))["spec"]["template"];
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "check", "namespace": ns},
            "spec": template["spec"],
        })
        .to_string()
    };
    let create =
        |pod: &str| rig.kubectl_with_input(&["create", "--dry-run=server", "-f", "-"], pod);
    let kustomized = json_objects(&kubectl_kustomize());
    let autoscaler = json_objects(&kustomize(&workspace_root().join("deploy/autoscaler")));
    let charted = json_objects(&helm.template(
        "kube-system",
        &[
            "--set",
            "nodeCache.enabled=true",
            "--set",
            "autoscaler.enabled=true",
        ],
    ));
    for (source, objects, key) in [
        (
            "deploy/cluster-dns",
            &kustomized,
            "Deployment/kube-system/coredns",
        ),
        (
            "deploy/autoscaler",
            &autoscaler,
            "Deployment/kube-system/kube-dns-autoscaler",
        ),
        ("the chart", &charted, "Deployment/kube-system/coredns"),
        (
            "the chart",
            &charted,
            "Deployment/kube-system/kube-dns-autoscaler",
        ),
    ] {
        let out = create(&pod(objects, key))
            .unwrap_or_else(|e| panic!("{source} {key}: refused by `restricted`: {e}"));
        assert!(out.contains("(server dry run)"), "{source} {key}: {out}");
    }
    // node-local-dns: refused, for its listed exceptions and nothing else.
    let node_local = json_objects(&kustomize(&node_local_dns()));
    let key = "DaemonSet/kube-system/node-local-dns";
    for (source, objects) in [
        ("deploy/node-local-dns", &node_local),
        ("the chart", &charted),
    ] {
        let err = create(&pod(objects, key)).expect_err("node-local-dns is privileged");
        let mut found = violations(&err.to_string());
        found.sort_unstable();
        let mut listed: Vec<String> = NODE_CACHE_EXCEPTIONS
            .iter()
            .map(|e| e.to_string())
            .collect();
        listed.sort_unstable();
        assert_eq!(found, listed, "{source}: {err}");
    }
}

/// The checks a Pod failed, as PodSecurity admission names them: its
/// refusal reads `violates PodSecurity "restricted:latest": check (detail),
/// check (detail), ...`; the names, without their details.
fn violations(err: &str) -> Vec<String> {
    let Some((_, reasons)) = err.split_once("violates PodSecurity \"restricted:latest\": ") else {
        panic!("not a PodSecurity refusal: {err}");
    };
    let reasons = reasons.lines().next().unwrap_or_default();
    let (mut out, mut name, mut depth) = (Vec::new(), String::new(), 0u32);
    for c in reasons.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => out.push(std::mem::take(&mut name).trim().to_string()),
            _ if depth == 0 => name.push(c),
            _ => {}
        }
    }
    out.push(name.trim().to_string());
    out.retain(|n| !n.is_empty());
    out
}

/// Why node-local-dns's Pod cannot be `restricted`, as PodSecurity
/// admission words it (SECURITY.md says why each is needed).
const NODE_CACHE_EXCEPTIONS: [&str; 7] = [
    "host namespaces",
    "probe or lifecycle host",
    "allowPrivilegeEscalation != false",
    "unrestricted capabilities",
    "restricted volume types",
    "runAsNonRoot != true",
    "seccompProfile",
];

fn get_json(rig: &Rig, args: &[&str]) -> Result<Json, String> {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    let out = rig.kubectl(&all).map_err(|e| e.to_string())?;
    serde_json::from_str(&out).map_err(|e| e.to_string())
}

/// Waits until the Deployment `name` in `ns` has `replicas` Pods Running with
/// IPs, on distinct fake nodes, and the Service `svc` an EndpointSlice with
/// exactly their IPv4 addresses, ready, on the three DNS ports.
fn assert_served_by_pods(rig: &Rig, ns: &str, name: &str, svc: &str, replicas: usize) {
    eventually(90, &format!("{ns}/{name} rolled out"), || {
        let d = get_json(rig, &["-n", ns, "deployment", name])?;
        let ready = d["status"]["readyReplicas"].as_u64().unwrap_or(0);
        if ready == replicas as u64 {
            Ok(())
        } else {
            Err(format!("readyReplicas {ready}: {}", d["status"]))
        }
    });
    let pods = get_json(rig, &["-n", ns, "pods", "-l", "k8s-app=kube-dns"]).expect("pods");
    let pods = pods["items"].as_array().expect("items").clone();
    assert_eq!(pods.len(), replicas, "{pods:#?}");
    let mut nodes = Vec::new();
    let mut ips = Vec::new();
    for p in &pods {
        let pname = p["metadata"]["name"].as_str().unwrap_or("?");
        assert_eq!(p["status"]["phase"], "Running", "{pname}: {}", p["status"]);
        let node = p["spec"]["nodeName"].as_str().unwrap_or("");
        assert!(node.starts_with("rig-node-"), "{pname} on {node:?}");
        nodes.push(node.to_string());
        let ip = p["status"]["podIP"].as_str().unwrap_or("");
        assert!(ip.starts_with("10.244."), "{pname}: podIP {ip:?}");
        ips.push(ip.to_string());
    }
    nodes.sort();
    nodes.dedup();
    assert_eq!(nodes.len(), replicas, "anti-affinity: one Pod per node");
    ips.sort();
    let slice = eventually(30, &format!("the EndpointSlice of {ns}/{svc}"), || {
        let list = get_json(
            rig,
            &[
                "-n",
                ns,
                "endpointslices",
                "-l",
                &format!("kubernetes.io/service-name={svc}"),
            ],
        )?;
        let items = list["items"].as_array().cloned().unwrap_or_default();
        let [slice] = items.as_slice() else {
            return Err(format!("{} slices", items.len()));
        };
        // Every endpoint, ready or not: the controller lags the Pods, so a
        // deleted Pod's endpoint (ready false, terminating) can linger
        // after the Pods list shows only the new ones.
        let eps = slice["endpoints"].as_array().cloned().unwrap_or_default();
        let mut have: Vec<String> = eps
            .iter()
            .filter_map(|e| e["addresses"][0].as_str().map(String::from))
            .collect();
        have.sort();
        let all_ready = eps.iter().all(|e| e["conditions"]["ready"] == true);
        if have == ips && all_ready {
            Ok(slice.clone())
        } else {
            Err(format!("endpoints {eps:?}, pods {ips:?}"))
        }
    });
    assert_eq!(slice["addressType"], "IPv4");
    assert_eq!(
        slice["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"],
        "endpointslice-controller.k8s.io",
        "filled in by the controller-manager"
    );
    let mut ports: Vec<String> = slice["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .map(|p| format!("{} {} {}", p["name"], p["protocol"], p["port"]))
        .collect();
    ports.sort();
    assert_eq!(
        ports,
        [
            r#""dns" "UDP" 53"#,
            r#""dns-tcp" "TCP" 53"#,
            r#""metrics" "TCP" 9153"#
        ]
    );
    for e in slice["endpoints"].as_array().expect("endpoints") {
        let node = e["nodeName"].as_str().unwrap_or("");
        assert!(nodes.iter().any(|n| n == node), "endpoint on {node:?}");
        assert_eq!(e["targetRef"]["kind"], "Pod");
    }
}

/// The image deploy/cluster-dns names (never pulled: the fake nodes run
/// nothing).
const IMAGE: &str = "localhost/clusterdns:0.1.0";

/// Waits until exactly `replicas` Pods with `k8s-app=kube-dns` exist in `ns`,
/// all with `image` (the old ReplicaSet's Pods gone).
fn wait_for_image(rig: &Rig, ns: &str, image: &str, replicas: usize) {
    eventually(90, &format!("{replicas} Pods of {image} in {ns}"), || {
        let pods = get_json(rig, &["-n", ns, "pods", "-l", "k8s-app=kube-dns"])?;
        let images: Vec<&str> = pods["items"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .map(|p| p["spec"]["containers"][0]["image"].as_str().unwrap_or(""))
                    .collect()
            })
            .unwrap_or_default();
        if images.len() == replicas && images.iter().all(|i| *i == image) {
            Ok(())
        } else {
            Err(format!("{images:?}"))
        }
    });
}

/// The rig's Kubernetes release, `v` and `K8S_VERSION` of
/// scripts/rig.d/versions.env: the version of its kubeadm, and the one the
/// upgrades below upgrade to.
fn k8s_version() -> String {
    let path = workspace_root().join("scripts/rig.d/versions.env");
    let env = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let version = env
        .lines()
        .find_map(|l| l.strip_prefix("K8S_VERSION="))
        .unwrap_or_else(|| panic!("no K8S_VERSION= in {}", path.display()));
    format!("v{}", version.trim())
}

/// kubeadm's configuration for the rig (v1beta4): the rig's Service ranges
/// (`RIG_SERVICE_CIDR`, docs/rig.md; kubeadm's DNS address is the tenth of
/// the first, 10.96.0.10, deploy/cluster-dns's), kubeadm's default image
/// repository and cluster domain, the rig's release. kubeadm wants an
/// advertise address that is not loopback: 198.51.100.10 (TEST-NET-2) is
/// data only, nothing connects to it. The CRI socket is given so that
/// kubeadm does not look for a container runtime on this machine.
fn kubeadm_config() -> String {
    format!(
        "apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: 198.51.100.10
nodeRegistration:
  criSocket: unix:///var/run/containerd/containerd.sock
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: {}
imageRepository: registry.k8s.io
networking:
  serviceSubnet: 10.96.0.0/16,fd00:10:96::/112
  dnsDomain: cluster.local
",
        k8s_version()
    )
}

/// The rig's kubeadm (built by `scripts/rig build` from the same
/// k8s.io/kubernetes module as its API server) and kubeadm-coredns-check
/// (scripts/rig.d/kubeadm/coredns-check: kubeadm's CoreDNS upgrade preflight
/// checks, which `kubeadm upgrade` itself runs only among checks of the host
/// that the rig cannot pass), with [`kubeadm_config`] in a scratch directory.
struct Kubeadm {
    bin: PathBuf,
    check: PathBuf,
    dir: tempfile::TempDir,
}

/// What `--ignore-preflight-errors` needs for a DNS image whose tag is not a
/// CoreDNS version: kubeadm's two CoreDNS checks, nothing more.
const COREDNS_CHECKS: &str = "CoreDNSUnsupportedPlugins,CoreDNSMigration";

impl Kubeadm {
    fn new() -> Option<Kubeadm> {
        let bin = rig_bin("kubeadm", "scripts/rig build")?;
        let check = rig_bin("kubeadm-coredns-check", "scripts/rig build")?;
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("kubeadm.yaml"), kubeadm_config()).expect("kubeadm.yaml");
        Some(Kubeadm { bin, check, dir })
    }

    fn config(&self) -> String {
        let config = self.dir.path().join("kubeadm.yaml");
        config.to_str().expect("utf-8 path").to_string()
    }

    /// `program args...`: its stdout and stderr together, `Ok` if it
    /// succeeded and `Err` if not.
    fn output(program: &Path, args: &[&str]) -> Result<String, String> {
        let out = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", program.display()));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if out.status.success() {
            Ok(text)
        } else {
            Err(text)
        }
    }

    /// `kubeadm args... --kubeconfig <the rig's>`.
    fn on(&self, rig: &Rig, args: &[&str]) -> Result<String, String> {
        let kubeconfig = rig.kubeconfig();
        let mut all = args.to_vec();
        all.extend_from_slice(&["--kubeconfig", kubeconfig.to_str().expect("utf-8 path")]);
        Kubeadm::output(&self.bin, &all)
    }

    /// kubeadm's CoreDNS objects, as `kubeadm init` would create them.
    fn print_manifest(&self) -> String {
        let config = self.config();
        let args = [
            "init",
            "phase",
            "addon",
            "coredns",
            "--print-manifest",
            "--config",
            &config,
        ];
        Kubeadm::output(&self.bin, &args).unwrap_or_else(|e| panic!("kubeadm {args:?}:\n{e}"))
    }

    /// What `kubeadm init` does for the cluster DNS, on the rig: kubeadm
    /// installs its CoreDNS addon and uploads its configuration (the
    /// kubeadm-config ConfigMap, which `kubeadm upgrade` reads, and
    /// kubelet-config).
    fn init_dns(&self, rig: &Rig) {
        let config = self.config();
        for phase in [["addon", "coredns"], ["upload-config", "all"]] {
            let args = ["init", "phase", phase[0], phase[1], "--config", &config];
            self.on(rig, &args)
                .unwrap_or_else(|e| panic!("kubeadm {args:?}:\n{e}"));
        }
    }

    /// kubeadm's CoreDNS upgrade preflight checks on the rig's objects, with
    /// `ignore` as `--ignore-preflight-errors`.
    fn coredns_check(&self, rig: &Rig, ignore: &str) -> Result<String, String> {
        let kubeconfig = rig.kubeconfig();
        let kubeconfig = kubeconfig.to_str().expect("utf-8 path");
        let args = [
            "-kubeconfig",
            kubeconfig,
            "-ignore-preflight-errors",
            ignore,
        ];
        Kubeadm::output(&self.check, &args)
    }
}

/// The image of the rig's `kube-system/coredns` Deployment.
fn dns_image(rig: &Rig) -> String {
    let d = get_json(rig, &["-n", "kube-system", "deployment", "coredns"]).expect("coredns");
    let image = &d["spec"]["template"]["spec"]["containers"][0]["image"];
    image.as_str().expect("image").to_string()
}

/// The README's in-place replacement, with `image`.
fn set_dns_image(rig: &Rig, image: &str) {
    let set = format!("coredns={image}");
    rig.kubectl(&[
        "-n",
        "kube-system",
        "set",
        "image",
        "deployment/coredns",
        &set,
    ])
    .unwrap_or_else(|e| panic!("set image {image}: {e}"));
}

/// kubeadm's objects, YAML as JSON values (kubectl's output of ours is
/// compared with them).
fn json_objects(yaml: &str) -> BTreeMap<String, Json> {
    objects(yaml)
        .into_iter()
        .map(|(k, v)| (k, serde_json::to_value(v).expect("YAML as JSON")))
        .collect()
}

/// deploy/cluster-dns is kubeadm's CoreDNS addon, as the rig's kubeadm
/// renders it, but for what deploy/README.md lists as deliberate: the
/// image, no `endpoints` in the ClusterRole, no `resourceVersion: "0"`
/// on the Service (kubeadm's template carries it for kubeadm's own update
/// of the Service during upgrades; applied, it means nothing), and the
/// container's `runAsNonRoot` and `seccompProfile` (the `restricted` Pod
/// Security Standard). Each of those must still differ in kubeadm's
/// objects, so that a kubeadm that changes one is noticed too. The
/// Corefile is compared first, as text.
#[test]
fn deploy_cluster_dns_is_kubeadms_coredns_addon() {
    let Some(kubeadm) = Kubeadm::new() else {
        return;
    };
    let mut theirs = json_objects(&kubeadm.print_manifest());
    let ours = json_objects(&kubectl_kustomize());
    assert_eq!(
        theirs.keys().collect::<Vec<_>>(),
        ours.keys().collect::<Vec<_>>()
    );

    let corefile = |o: &BTreeMap<String, Json>| {
        o["ConfigMap/kube-system/coredns"]["data"]["Corefile"]
            .as_str()
            .expect("Corefile")
            .to_string()
    };
    assert_eq!(
        corefile(&theirs),
        corefile(&ours),
        "kubeadm {}'s default Corefile is not deploy/cluster-dns/configmap.yaml's \
         (nor the chart's values.yaml corefile): carry the new one",
        k8s_version()
    );

    let key = "Deployment/kube-system/coredns";
    let image =
        &mut theirs.get_mut(key).expect(key)["spec"]["template"]["spec"]["containers"][0]["image"];
    let kubeadms = image.as_str().unwrap_or("").to_string();
    assert!(
        kubeadms.starts_with("registry.k8s.io/coredns/coredns:v"),
        "{kubeadms}"
    );
    *image = IMAGE.into();
    // The one difference in the Pod: what the `restricted` Pod Security
    // Standard asks for beyond kubeadm's security context (SECURITY.md;
    // `cluster_dns_and_autoscaler_pods_pass_restricted_admission`).
    let sc = &mut theirs.get_mut(key).expect(key)["spec"]["template"]["spec"]["containers"][0]["securityContext"];
    assert!(
        sc.get("runAsNonRoot").is_none() && sc.get("seccompProfile").is_none(),
        "kubeadm sets {sc}: take its values"
    );
    sc["runAsNonRoot"] = true.into();
    sc["seccompProfile"] = serde_json::json!({"type": "RuntimeDefault"});

    let key = "ClusterRole//system:coredns";
    let core = &mut theirs.get_mut(key).expect(key)["rules"][0];
    assert_eq!(core["apiGroups"], serde_json::json!([""]));
    let resources = core["resources"].as_array_mut().expect("resources");
    let before = resources.len();
    resources.retain(|r| r != "endpoints");
    assert_eq!(
        resources.len() + 1,
        before,
        "kubeadm grants `endpoints`: {resources:?}"
    );

    let key = "Service/kube-system/kube-dns";
    let meta = theirs.get_mut(key).expect(key)["metadata"]
        .as_object_mut()
        .expect("metadata");
    assert_eq!(meta.remove("resourceVersion"), Some("0".into()));

    for (key, theirs) in &theirs {
        assert_eq!(
            theirs,
            &ours[key],
            "{key}: kubeadm's differs from deploy/cluster-dns's:\nkubeadm:\n{}\nours:\n{}",
            serde_json::to_string_pretty(theirs).unwrap_or_default(),
            serde_json::to_string_pretty(&ours[key]).unwrap_or_default()
        );
    }
}

/// What a kubeadm control-plane node has in the API and the rig has not, as
/// `kubeadm upgrade apply` reads them: the Node of the machine it runs on
/// (kubeadm names it from the host name when no /etc/kubernetes/kubelet.conf
/// says otherwise), with the kubelet's hostname label (kubeadm waits for it
/// before it patches the Node) and kubeadm's CRI socket annotation, and the
/// kube-apiserver's mirror Pod on it (its image says that every
/// control-plane instance is upgraded, which the addon phases wait for; its
/// annotation is the advertise address). Data only: no fake nodes here, the
/// Pod runs nowhere.
fn control_plane_stand_ins(node: &str) -> String {
    format!(
        "apiVersion: v1
kind: Node
metadata:
  name: {node}
  labels:
    kubernetes.io/hostname: {node}
    node-role.kubernetes.io/control-plane: \"\"
  annotations:
    kubeadm.alpha.kubernetes.io/cri-socket: unix:///var/run/containerd/containerd.sock
---
apiVersion: v1
kind: Pod
metadata:
  name: kube-apiserver-{node}
  namespace: kube-system
  labels:
    component: kube-apiserver
    tier: control-plane
  annotations:
    kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint: 198.51.100.10:6443
spec:
  nodeName: {node}
  containers:
    - name: kube-apiserver
      image: registry.k8s.io/kube-apiserver:{}
",
        k8s_version()
    )
}

/// The top-level phases of `kubeadm upgrade apply`, as its `--help` lists
/// them (a hidden `kubeconfig` phase aside), and those of them that change
/// the machine kubeadm runs on (static Pod manifests, kubeconfig files, the
/// kubelet's configuration, its flags), which the tests never run. Only
/// `upload-config` (API objects) and `addon/coredns` run; kube-proxy's
/// DaemonSet is privileged, which the rig's API server refuses.
const UPGRADE_PHASES: [&str; 7] = [
    "preflight",
    "control-plane",
    "upload-config",
    "kubelet-config",
    "bootstrap-token",
    "addon",
    "post-upgrade",
];
const NOT_ON_THE_RIG: &str = "preflight,control-plane,kubeconfig,kubelet-config,bootstrap-token,addon/kube-proxy,post-upgrade";

/// The README's kubeadm upgrades, against kubeadm's own code on the rig's
/// API server: kubeadm installs its CoreDNS addon and uploads its
/// configuration (kubeadm-config) as `kubeadm init` does, the Deployment
/// gets the clusterdns image as the README says, and then
///
/// - kubeadm's CoreDNS preflight checks (those of `kubeadm upgrade plan`
///   and `apply`) pass with kubeadm's own image and fail with ours, whose
///   tag is no CoreDNS version, unless their two errors are ignored;
/// - forced past them, the upgrade fails in its `addon/coredns` phase (so
///   the phases after it, kube-proxy's and post-upgrade, never run), the
///   image left as it was;
/// - with a CoreDNS version for tag the checks pass, and the phase writes
///   kubeadm's Deployment back, CoreDNS's image and all;
/// - `--skip-phases=addon/coredns` leaves the Deployment alone;
/// - `dns.disabled: true` in the kubeadm-config ClusterConfiguration
///   (kubeadm v1beta4) makes the phase skip the addon, and the
///   configuration kubeadm uploads again during the upgrade keeps it.
#[test]
fn kubeadm_upgrade_keeps_clusterdns_only_past_its_coredns_phase() {
    let Some(kubeadm) = Kubeadm::new() else {
        return;
    };
    // `kubeadm upgrade` reads /etc/kubernetes (kubelet.conf names the node,
    // and has credentials for its cluster): never on a real node.
    if Path::new("/etc/kubernetes").exists() {
        return skip("/etc/kubernetes exists: this machine is a Kubernetes node");
    }
    let help = Kubeadm::output(&kubeadm.bin, &["upgrade", "apply", "--help"]).expect("help");
    let listed = help
        .split("```")
        .nth(1)
        .expect("--help lists the phases between ``` lines");
    let phases: Vec<&str> = listed
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with(' '))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        phases, UPGRADE_PHASES,
        "a new kubeadm's phases: which may run here?"
    );

    let Some(private) = PrivateRig::start(&[]) else {
        return;
    };
    let rig = private.rig();
    kubeadm.init_dns(rig);
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("host name");
    rig.apply_yaml(&control_plane_stand_ins(&hostname.trim().to_lowercase()))
        .expect("the control-plane node's objects");
    let version = k8s_version();
    let addon_phase = [
        "upgrade",
        "apply",
        "phase",
        "addon",
        "coredns",
        version.as_str(),
    ];
    let upgrade = |skip: &str| {
        let skip = format!("--skip-phases={skip}");
        kubeadm.on(rig, &["upgrade", "apply", &version, "--yes", &skip])
    };
    let coredns = dns_image(rig);
    let target = coredns.rsplit(':').next().expect("a tag");

    // kubeadm's own image: nothing to migrate.
    let out = kubeadm
        .coredns_check(rig, "")
        .expect("kubeadm's own image passes");
    assert!(out.contains(&format!("target CoreDNS {target}")), "{out}");

    // Ours: its tag is no CoreDNS version kubeadm can migrate a Corefile from.
    set_dns_image(rig, IMAGE);
    let err = kubeadm
        .coredns_check(rig, "")
        .expect_err("our tag fails the checks");
    let tag = IMAGE.rsplit(':').next().expect("a tag");
    for check in COREDNS_CHECKS.split(',') {
        let says = format!("[ERROR {check}]");
        assert!(
            err.contains(&says) && err.contains(&format!("start version '{tag}' not supported")),
            "{err}"
        );
    }
    let out = kubeadm
        .coredns_check(rig, COREDNS_CHECKS)
        .expect("both ignored, the checks pass");
    assert!(out.contains("[WARNING CoreDNSMigration]"), "{out}");
    let err = kubeadm
        .coredns_check(rig, "CoreDNSMigration")
        .expect_err("one is not enough");
    assert!(err.contains("[ERROR CoreDNSUnsupportedPlugins]"), "{err}");

    // Forced: the addon phase fails the upgrade, and writes nothing.
    let err = kubeadm
        .on(rig, &addon_phase)
        .expect_err("the addon phase fails");
    assert!(
        err.contains("error execution phase addon/coredns")
            && err.contains(&format!("start version '{tag}' not supported")),
        "{err}"
    );
    assert_eq!(dns_image(rig), IMAGE);

    // An older CoreDNS version for tag passes as far back as the migration
    // knows this Corefile's options (the README names these two).
    set_dns_image(rig, "localhost/clusterdns:v1.12.0");
    kubeadm.coredns_check(rig, "").expect("v1.12.0 passes");
    set_dns_image(rig, "localhost/clusterdns:v1.6.0");
    let err = kubeadm.coredns_check(rig, "").expect_err("v1.6.0 fails");
    assert!(
        err.contains("[ERROR CoreDNSUnsupportedPlugins]")
            && err.contains(r#"Option "max_concurrent" in plugin "forward" is unsupported"#),
        "{err}"
    );

    // Our image tagged as kubeadm's CoreDNS version passes the checks, and
    // the phase then writes kubeadm's Deployment back over it.
    set_dns_image(rig, &format!("localhost/clusterdns:{target}"));
    kubeadm
        .coredns_check(rig, "")
        .expect("a CoreDNS version for tag passes");
    kubeadm.on(rig, &addon_phase).expect("the addon phase");
    assert_eq!(
        dns_image(rig),
        coredns,
        "the phase put CoreDNS's image back"
    );

    // --skip-phases=addon/coredns (with upload-config, the one other phase
    // that runs here).
    set_dns_image(rig, IMAGE);
    let out = upgrade(&format!("{NOT_ON_THE_RIG},addon/coredns")).expect("upgrade apply");
    assert!(
        out.contains("[upgrade] SUCCESS!") && out.contains("[upload-config]"),
        "{out}"
    );
    assert_eq!(dns_image(rig), IMAGE);

    // dns.disabled: as `kubectl -n kube-system edit configmap kubeadm-config`
    // would set it (kubeadm writes `dns: {}` for the default).
    let cluster_configuration = || {
        let cm = get_json(rig, &["-n", "kube-system", "configmap", "kubeadm-config"])
            .expect("kubeadm-config");
        let config = &cm["data"]["ClusterConfiguration"];
        config.as_str().expect("ClusterConfiguration").to_string()
    };
    let config = cluster_configuration();
    let disabled = config.replace("\ndns: {}\n", "\ndns:\n  disabled: true\n");
    assert_ne!(
        disabled, config,
        "kubeadm-config has `dns: {{}}`:\n{config}"
    );
    let patch = serde_json::json!({"data": {"ClusterConfiguration": disabled}}).to_string();
    rig.kubectl(&[
        "-n",
        "kube-system",
        "patch",
        "configmap",
        "kubeadm-config",
        "--type=merge",
        "-p",
        &patch,
    ])
    .expect("patch kubeadm-config");
    let out = upgrade(NOT_ON_THE_RIG).expect("upgrade apply");
    assert!(
        out.contains("[upgrade/addon] Skipping the addon/coredns phase. The addon is disabled."),
        "{out}"
    );
    assert_eq!(dns_image(rig), IMAGE);
    let uploaded = cluster_configuration();
    assert!(
        uploaded.contains("\ndns:\n  disabled: true\n"),
        "{uploaded}"
    );
}

#[test]
fn applied_pods_run_on_fake_nodes_and_fill_the_endpointslice() {
    let Some(helm) = helm_bin() else { return };
    let Some(kubeadm) = Kubeadm::new() else {
        return;
    };
    let Some(private) = PrivateRig::start_with_nodes(NODES, &[]) else {
        return;
    };
    let rig = private.rig();
    let nodes = get_json(rig, &["nodes"]).expect("nodes");
    assert_eq!(
        nodes["items"].as_array().map(Vec::len),
        Some(NODES as usize)
    );

    // A kubeadm cluster's DNS: kubeadm installs its CoreDNS addon, as
    // `kubeadm init` does.
    kubeadm.init_dns(rig);
    let coredns = dns_image(rig);
    assert!(
        coredns.starts_with("registry.k8s.io/coredns/coredns:"),
        "{coredns}"
    );
    let svc = get_json(rig, &["-n", "kube-system", "service", "kube-dns"]).expect("kube-dns");
    assert_eq!(svc["spec"]["clusterIP"], "10.96.0.10");
    wait_for_image(rig, "kube-system", &coredns, 2);
    assert_served_by_pods(rig, "kube-system", "coredns", "kube-dns", 2);

    // The README's "Replace CoreDNS in place", and its rollback.
    let ks = ["-n", "kube-system"];
    let kc = |args: &[&str]| {
        let all: Vec<&str> = ks.iter().chain(args).copied().collect();
        rig.kubectl(&all)
            .unwrap_or_else(|e| panic!("kubectl {all:?}: {e}"))
    };
    set_dns_image(rig, IMAGE);
    kc(&["rollout", "status", "deployment/coredns", "--timeout=90s"]);
    wait_for_image(rig, "kube-system", IMAGE, 2);
    assert_served_by_pods(rig, "kube-system", "coredns", "kube-dns", 2);
    kc(&["rollout", "undo", "deployment/coredns"]);
    kc(&["rollout", "status", "deployment/coredns", "--timeout=90s"]);
    wait_for_image(rig, "kube-system", &coredns, 2);
    assert_served_by_pods(rig, "kube-system", "coredns", "kube-dns", 2);

    // kustomize over kubeadm's objects, as "Install on a cluster" applies it.
    let dir = kustomization();
    rig.kubectl(&["apply", "-k", dir.to_str().expect("utf-8")])
        .expect("kubectl apply -k deploy/cluster-dns");
    wait_for_image(rig, "kube-system", IMAGE, 2);
    assert_served_by_pods(rig, "kube-system", "coredns", "kube-dns", 2);

    // The chart, installed by helm itself, with other names beside it.
    let helm = Helm::new(helm);
    let kubeconfig = rig.kubeconfig();
    let chart = chart();
    helm.run(&[
        "install",
        "dns",
        chart.to_str().expect("utf-8"),
        "--kubeconfig",
        kubeconfig.to_str().expect("utf-8"),
        "--namespace",
        "dns-helm",
        "--create-namespace",
        "--set",
        "replicas=3",
        "--set",
        "service.clusterIP=10.96.0.53",
        "--set",
        "names.clusterRole=clusterdns-helm",
        "--wait",
        "--timeout",
        "90s",
    ]);
    let svc = get_json(rig, &["-n", "dns-helm", "service", "kube-dns"]).expect("kube-dns");
    assert_eq!(svc["spec"]["clusterIP"], "10.96.0.53");
    assert_served_by_pods(rig, "dns-helm", "coredns", "kube-dns", 3);
}

fn node_local_dns() -> PathBuf {
    workspace_root().join("deploy/node-local-dns")
}

const NODE_LOCAL_OBJECTS: [&str; 5] = [
    "ConfigMap/kube-system/node-local-dns",
    "DaemonSet/kube-system/node-local-dns",
    "Service/kube-system/kube-dns-upstream",
    "Service/kube-system/node-local-dns",
    "ServiceAccount/kube-system/node-local-dns",
];

/// deploy/node-local-dns is the upstream addon with its placeholders filled
/// in for kubeadm's addresses: the DaemonSet's container, args and volumes;
/// the template is upstream's with the domain filled in and no address: its
/// bind lines are upstream's placeholders, which node-cache fills in from
/// -localip, its health address the container's NODE_LOCAL_DNS_HEALTH.
#[test]
fn node_local_dns_is_the_upstream_addon_with_the_clusterdns_image() {
    if !kubectl_built() {
        return;
    }
    let objs = objects(&kustomize(&node_local_dns()));
    assert_eq!(
        objs.keys().map(String::as_str).collect::<Vec<_>>(),
        NODE_LOCAL_OBJECTS
    );
    let ds = &objs["DaemonSet/kube-system/node-local-dns"];
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"].as_bool(), Some(true));
    assert_eq!(pod["dnsPolicy"].as_str(), Some("Default"));
    assert_eq!(
        pod["priorityClassName"].as_str(),
        Some("system-node-critical")
    );
    let c = &pod["containers"][0];
    assert_eq!(
        c["image"].as_str(),
        Some("localhost/clusterdns-node-cache:0.1.0")
    );
    assert!(c.get("command").is_none(), "the image's entrypoint runs");
    assert_eq!(
        serde_json::to_value(&c["args"]).expect("json"),
        serde_json::json!([
            "-localip",
            "169.254.20.10,10.96.0.10",
            "-conf",
            "/etc/Corefile",
            "-upstreamsvc",
            "kube-dns-upstream",
            "-pidfile",
            "/tmp/node-cache.pid",
            "-ready-listen-address",
            ":9354"
        ])
    );
    assert_eq!(
        serde_json::to_value(&c["env"]).expect("json"),
        serde_json::json!([{"name": "NODE_LOCAL_DNS_HEALTH", "value": "169.254.20.10:8080"}])
    );
    assert_eq!(
        serde_json::to_value(&c["securityContext"]).expect("json"),
        serde_json::json!({"capabilities": {"add": ["NET_ADMIN"]}})
    );
    let probe = &c["livenessProbe"]["httpGet"];
    assert_eq!(probe["host"].as_str(), Some("169.254.20.10"));
    assert_eq!(probe["port"].as_u64(), Some(8080));
    // The new pod takes the old one's sockets over: a surge, never a gap,
    // and no host ports that would keep the surge pod off the node.
    assert_eq!(
        serde_json::to_value(&ds["spec"]["updateStrategy"]).expect("json"),
        serde_json::json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}})
    );
    assert!(c.get("ports").is_none());
    let ready = &c["readinessProbe"]["httpGet"];
    // Not 9353: upstream's node-cache holds it until it stops, so a pod
    // replacing it serves /ready here first (the node's address, as the
    // kubelet probes a hostNetwork pod).
    assert!(ready.get("host").is_none());
    assert_eq!(ready["path"].as_str(), Some("/ready"));
    assert_eq!(ready["port"].as_u64(), Some(9354));
    let mounts: Vec<&str> = c["volumeMounts"]
        .as_sequence()
        .expect("mounts")
        .iter()
        .filter_map(|m| m["mountPath"].as_str())
        .collect();
    assert_eq!(
        mounts,
        [
            "/run/xtables.lock",
            "/etc/coredns",
            "/etc/kube-dns",
            "/run/clusterdns"
        ]
    );

    let template = objs["ConfigMap/kube-system/node-local-dns"]["data"]["Corefile"]
        .as_str()
        .expect("Corefile");
    let mut placeholders: Vec<&str> = template
        .match_indices("__PILLAR__")
        .map(|(i, _)| {
            let rest = &template[i..];
            let end = rest
                .find(|c: char| !(c.is_ascii_uppercase() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect();
    placeholders.sort();
    placeholders.dedup();
    assert_eq!(
        placeholders,
        [
            "__PILLAR__CLUSTER__DNS__",
            "__PILLAR__DNS__SERVER__",
            "__PILLAR__LOCAL__DNS__",
            "__PILLAR__UPSTREAM__SERVERS__"
        ],
        "only those node-cache fills in are left:\n{template}"
    );
    for zone in [
        "cluster.local:53 {",
        "in-addr.arpa:53 {",
        "ip6.arpa:53 {",
        ".:53 {",
    ] {
        assert!(template.contains(zone), "{zone} in\n{template}");
    }
    assert_eq!(
        template
            .matches("bind __PILLAR__LOCAL__DNS__ __PILLAR__DNS__SERVER__\n")
            .count(),
        4
    );
    assert!(template.contains("health {$NODE_LOCAL_DNS_HEALTH}\n"));
    assert!(
        !template.contains("169.254") && !template.contains("10.96"),
        "{template}"
    );

    let upstream = &objs["Service/kube-system/kube-dns-upstream"];
    assert_eq!(
        upstream["spec"]["selector"]["k8s-app"].as_str(),
        Some("kube-dns")
    );
    assert!(upstream["spec"].get("clusterIP").is_none(), "allocated");
    let metrics = &objs["Service/kube-system/node-local-dns"];
    assert_eq!(metrics["spec"]["clusterIP"].as_str(), Some("None"));
    assert_eq!(metrics["spec"]["ports"][0]["port"].as_u64(), Some(9253));
}

const NODE_LOCAL_DS: &str = "DaemonSet/kube-system/node-local-dns";

/// The first address of a `-localip` value and where the template's health
/// listens with it, as deploy/README.md says to give it: port 8080, an IPv6
/// address in brackets.
fn health_of(localip: &str) -> (&str, String) {
    let first = localip.split(',').next().unwrap_or(localip);
    let health = if first.contains(':') {
        format!("[{first}]:8080")
    } else {
        format!("{first}:8080")
    };
    (first, health)
}

/// The overlay of deploy/README.md ("Other addresses for node-local-dns"),
/// as written there but for its values: `localip`, `upstreamsvc`, and
/// `health` from `localip`; rendered by kustomize.
fn addresses_overlay(localip: &str, upstreamsvc: &str) -> BTreeMap<String, Yaml> {
    let example = readme_example("node-cache-addresses");
    let dir = tempfile::tempdir().expect("tempdir");
    let overlay = dir.path().join("node-cache-addresses");
    std::fs::create_dir(&overlay).expect("mkdir");
    let deploy = workspace_root().join("deploy");
    let rel = |p: &str| format!("[{}]", relative(&overlay, &deploy.join(p)).display());
    let mut text = example.clone();
    for (from, to) in [
        ("[../deploy/node-local-dns]", rel("node-local-dns")),
        (
            "[../deploy/node-local-dns-addresses]",
            rel("node-local-dns-addresses"),
        ),
        (
            "localip=169.254.20.10,10.32.0.10",
            format!("localip={localip}"),
        ),
        (
            "health=169.254.20.10:8080",
            format!("health={}", health_of(localip).1),
        ),
        (
            "upstreamsvc=kube-dns-upstream",
            format!("upstreamsvc={upstreamsvc}"),
        ),
    ] {
        assert!(text.contains(from), "{from} in the example:\n{example}");
        text = text.replace(from, &to);
    }
    std::fs::write(overlay.join("kustomization.yaml"), text).expect("write");
    objects(&kustomize(&overlay))
}

/// deploy/node-local-dns with `localip` and `upstreamsvc` where they belong,
/// and nothing else changed: the DaemonSet's -localip and -upstreamsvc, the
/// first address as the liveness probe's host and, with port 8080, as
/// NODE_LOCAL_DNS_HEALTH (the template's health address), the upstream
/// Service's name.
fn node_local_dns_with(localip: &str, upstreamsvc: &str) -> BTreeMap<String, Yaml> {
    let mut want = objects(&kustomize(&node_local_dns()));
    let (first, health) = health_of(localip);
    let c = want
        .get_mut(NODE_LOCAL_DS)
        .and_then(|d| d["spec"]["template"]["spec"]["containers"].get_mut(0))
        .expect("the container");
    c["args"][1] = Yaml::from(localip);
    c["args"][5] = Yaml::from(upstreamsvc);
    c["env"][0]["value"] = Yaml::from(health);
    c["livenessProbe"]["httpGet"]["host"] = Yaml::from(first);
    let mut svc = want
        .remove("Service/kube-system/kube-dns-upstream")
        .expect("kube-dns-upstream");
    svc["metadata"]["name"] = Yaml::from(upstreamsvc);
    want.insert(format!("Service/kube-system/{upstreamsvc}"), svc);
    want
}

/// Other addresses without editing a string: the README's overlay with the
/// node-local-dns-addresses component (a non-default Service range as
/// written; IPv6, ULA link address and another upstream Service name; IPVS
/// mode, the link-local address alone) sets exactly the fields that hold
/// them and drops its values object; the chart, given the same through
/// nodeCache.localIP, service.clusterIP (or interceptServiceIP=false) and
/// nodeCache.upstreamService, renders the same objects; a localIP of
/// another family than the Service's is refused.
#[test]
fn node_local_dns_addresses_are_set_in_one_place() {
    let Some(helm) = helm_and_kubectl() else {
        return;
    };
    for (localip, upstreamsvc) in [
        ("169.254.20.10,10.32.0.10", "kube-dns-upstream"),
        ("fd00::10,fd00:32::10", "dns-upstream"),
        ("169.254.0.53", "kube-dns-upstream"),
    ] {
        let want = node_local_dns_with(localip, upstreamsvc);
        let got = addresses_overlay(localip, upstreamsvc);
        assert_eq!(got, want, "kustomize, {localip} {upstreamsvc}");
        assert!(
            !got.keys().any(|k| k.contains("node-local-dns-addresses")),
            "the values are not applied: {:?}",
            got.keys()
        );

        let (first, service) = match localip.split_once(',') {
            Some((first, service)) => (first, Some(service)),
            None => (localip, None),
        };
        let local = format!("nodeCache.localIP={first}");
        let upstream = format!("nodeCache.upstreamService={upstreamsvc}");
        let cluster_ip = service.map(|ip| format!("service.clusterIP={ip}"));
        let mut args = vec!["--set", "nodeCache.enabled=true", "--set", &local];
        args.extend(["--set", &upstream, "--set"]);
        args.push(
            cluster_ip
                .as_deref()
                .unwrap_or("nodeCache.interceptServiceIP=false"),
        );
        let from_helm: BTreeMap<String, Yaml> = objects(&helm.template("kube-system", &args))
            .into_iter()
            .filter(|(k, _)| !OBJECTS.contains(&k.as_str()))
            .collect();
        assert_same_objects(&want, &from_helm);
    }
    let err = helm
        .try_template(
            "kube-system",
            &[
                "--set",
                "nodeCache.enabled=true",
                "--set",
                "nodeCache.localIP=fd00::10",
            ],
        )
        .expect_err("an IPv6 localIP beside the IPv4 10.96.0.10");
    assert!(
        err.contains(
            "nodeCache.localIP fd00::10 and service.clusterIP 10.96.0.10 are not one address family"
        ),
        "{err}"
    );
}

/// The lab's addresses for the rendered objects: a Service range other than
/// kubeadm's, and IPv6 with the ULA fd00::10 as the cache's address.
const OTHER_V4: lab::Net = lab::Net {
    cluster: "10.32.0.10",
    upstream: "10.32.0.11",
    ..lab::V4
};
const OTHER_V6: lab::Net = lab::Net {
    cluster: "fd00:32::10",
    upstream: "fd00:32::11",
    local: "fd00::10",
    ..lab::V6
};

/// The README overlay's objects run as rendered: `clusterdns node-cache`
/// with the DaemonSet's arguments and environment (but for the node's
/// paths) and the ConfigMap's template, in the lab's namespaces with
/// kube-proxy's DNAT for the other Service range, IPv4 and IPv6: the
/// template parses, the cache listens and answers on the link-local and
/// the kube-dns address, forwards cluster names to the renamed upstream
/// Service's address, and serves health on `[address]:8080`.
#[test]
fn node_local_dns_runs_as_rendered_on_other_addresses() {
    if !kubectl_built() {
        return;
    }
    static NETS: [(&lab::Net, &str, &str, &str); 2] = [
        (
            &OTHER_V4,
            "d4",
            "169.254.20.10,10.32.0.10",
            "kube-dns-upstream",
        ),
        (&OTHER_V6, "d6", "fd00::10,fd00:32::10", "dns-upstream"),
    ];
    for &(net, tag, localip, upstreamsvc) in &NETS {
        let objs = addresses_overlay(localip, upstreamsvc);
        let template = objs["ConfigMap/kube-system/node-local-dns"]["data"]["Corefile"]
            .as_str()
            .expect("Corefile");
        let c = &objs[NODE_LOCAL_DS]["spec"]["template"]["spec"]["containers"][0];
        let args: Vec<&str> = c["args"]
            .as_sequence()
            .expect("args")
            .iter()
            .filter_map(Yaml::as_str)
            .collect();
        // The lab's files instead of the node's: -conf and -pidfile go,
        // every other argument stays as the DaemonSet gives it.
        let mut flags = Vec::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match *a {
                "-conf" | "-pidfile" => {
                    it.next();
                }
                _ => flags.push(*a),
            }
        }
        assert_eq!(
            flags,
            [
                "-localip",
                localip,
                "-upstreamsvc",
                upstreamsvc,
                "-ready-listen-address",
                ":9354"
            ],
            "{args:?}"
        );
        let mut env: Vec<(String, String)> = c["env"]
            .as_sequence()
            .expect("env")
            .iter()
            .map(|e| {
                let s = |k: &str| e[k].as_str().expect("name, value").to_string();
                (s("name"), s("value"))
            })
            .collect();
        // What the kubelet adds for the upstream Service.
        let host_var = format!(
            "{}_SERVICE_HOST",
            upstreamsvc.replace('-', "_").to_uppercase()
        );
        env.push((host_var, net.upstream.to_string()));
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();

        let Some(mut lab) = lab::Lab::build(tag, net, "iptables-nft") else {
            return;
        };
        lab.start_cluster_dns();
        let mut agent = lab.start_agent_with(template, &flags, &env, "agent.log");
        let (local, cluster) = localip.split_once(',').expect("two addresses");
        for ip in [local, cluster] {
            for tcp in [false, true] {
                lab.wait_answer(ip, lab::KUBERNETES, tcp, "10.96.0.1");
            }
        }
        // The agent's own sockets on both addresses (kube-proxy's DNAT would
        // answer for the Service's address without it).
        let v6 = net.host_bits == 128;
        let sockets = lab.node("ss -Hlnu");
        for ip in [local, cluster] {
            let want = if v6 {
                format!("[{ip}]:53 ")
            } else {
                format!("{ip}:53 ")
            };
            assert!(sockets.contains(&want), "{want} in\n{sockets}");
        }
        let rendered = std::fs::read_to_string(lab.path("Corefile")).expect("rendered");
        let bind = format!("bind {} \n", localip.replace(',', " "));
        assert_eq!(rendered.matches(&bind).count(), 4, "{rendered}");
        assert!(
            rendered.contains(&format!("forward . {} {{", net.upstream)),
            "{rendered}"
        );
        // Health on the link-local address alone (NODE_LOCAL_DNS_HEALTH).
        let (_, health) = health_of(localip);
        let ok = lab.node(&format!("curl -s 'http://{health}/health'"));
        assert_eq!(ok.trim(), "OK", "{}", lab.log());
        let tcp = lab.node("ss -Hlnt");
        assert!(tcp.contains(&format!(" {health} ")), "{tcp}");
        lab::signal(&agent, "TERM");
        let status = lab::wait_exit(&mut agent, std::time::Duration::from_secs(15));
        assert!(status.success(), "{status:?}\n{}", lab.log());
    }
}

/// With `nodeCache.enabled` and `autoscaler.enabled` the chart renders,
/// beside the cluster DNS, exactly what deploy/node-local-dns and
/// deploy/autoscaler hold; their values land where they should.
#[test]
fn helm_node_cache_and_autoscaler_render_exactly_the_kustomize_objects() {
    let Some(helm) = helm_and_kubectl() else {
        return;
    };
    let chart = chart();
    let on = [
        "--set",
        "nodeCache.enabled=true",
        "--set",
        "autoscaler.enabled=true",
    ];
    let mut lint = vec!["lint", "--strict", chart.to_str().expect("utf-8 path")];
    lint.extend_from_slice(&on);
    helm.run(&lint);
    let from_helm = objects(&helm.template("kube-system", &on));
    let mut from_kustomize = objects(&kubectl_kustomize());
    from_kustomize.extend(objects(&kustomize(&node_local_dns())));
    from_kustomize.extend(objects(&kustomize(
        &workspace_root().join("deploy/autoscaler"),
    )));
    // One object more: the chart still renders the autoscaler's ConfigMap
    // from autoscaler.params, which deploy/autoscaler leaves to the
    // autoscaler to create from the same --default-params (so a re-apply
    // keeps the operator's tuning); its data is what the autoscaler writes.
    let mut from_helm = from_helm;
    let cm = from_helm
        .remove("ConfigMap/kube-system/kube-dns-autoscaler")
        .expect("the chart's autoscaler ConfigMap");
    assert_eq!(
        serde_json::to_value(&cm["data"]).expect("json"),
        serde_json::json!({"linear": r#"{"coresPerReplica":256,"includeUnschedulableNodes":true,"nodesPerReplica":16,"preventSinglePointFailure":true}"#})
    );
    assert_same_objects(&from_kustomize, &from_helm);

    // IPVS layout, another domain and Service address, ladder parameters
    // (`linear: null` takes the default out), another namespace and
    // Deployment name.
    let dir = tempfile::tempdir().expect("tempdir");
    let ladder = dir.path().join("ladder.yaml");
    std::fs::write(
        &ladder,
        "autoscaler:\n  params:\n    linear: null\n    ladder: {nodesToReplicas: [[1, 1], [3, 2]]}\n",
    )
    .expect("write values");
    let out = objects(&helm.template(
        "dns",
        &[
            "--set",
            "nodeCache.enabled=true",
            "--set",
            "nodeCache.interceptServiceIP=false",
            "--set",
            "nodeCache.localIP=169.254.0.53",
            "--set",
            "nodeCache.domain=corp.internal",
            "--set",
            "nodeCache.maxUnavailable=1",
            "--set",
            "nodeCache.interception=iptables",
            "--set",
            "autoscaler.enabled=true",
            "-f",
            ladder.to_str().expect("utf-8"),
            "--set",
            "names.deployment=dns",
        ],
    ));
    let ds = &out["DaemonSet/dns/node-local-dns"];
    let c = &ds["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["args"][1].as_str(), Some("169.254.0.53"));
    assert_eq!(c["args"][9].as_str(), Some(":9354"));
    assert_eq!(c["args"][10].as_str(), Some("-interception"));
    assert_eq!(c["args"][11].as_str(), Some("iptables"));
    assert_eq!(
        c["livenessProbe"]["httpGet"]["host"].as_str(),
        Some("169.254.0.53")
    );
    assert_eq!(
        ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"].as_u64(),
        Some(1)
    );
    let template = out["ConfigMap/dns/node-local-dns"]["data"]["Corefile"]
        .as_str()
        .expect("Corefile");
    assert!(template.starts_with("corp.internal:53 {\n"), "{template}");
    assert_eq!(
        c["env"][0]["value"].as_str(),
        Some("169.254.0.53:8080"),
        "the health address"
    );
    assert!(!template.contains("10.96.0.10"), "{template}");
    let cm = &out["ConfigMap/dns/kube-dns-autoscaler"]["data"];
    assert_eq!(
        serde_json::to_value(cm).expect("json"),
        serde_json::json!({"ladder": r#"{"nodesToReplicas":[[1,1],[3,2]]}"#})
    );
    let args: Vec<&str> = out["Deployment/dns/kube-dns-autoscaler"]["spec"]["template"]["spec"]
        ["containers"][0]["args"]
        .as_sequence()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert!(args.contains(&"--namespace=dns"), "{args:?}");
    assert!(args.contains(&"--target=Deployment/dns"), "{args:?}");
    assert!(
        args.contains(&r#"--default-params={"ladder":{"nodesToReplicas":[[1,1],[3,2]]}}"#),
        "{args:?}"
    );
    let binding = &out["ClusterRoleBinding//system:kube-dns-autoscaler"];
    assert_eq!(binding["subjects"][0]["namespace"].as_str(), Some("dns"));
}

#[test]
fn node_local_dns_and_chart_options_pass_server_side_dry_run() {
    let Some(helm) = helm_bin() else { return };
    let Some(private) = PrivateRig::start(&[]) else {
        return;
    };
    let rig = private.rig();
    let dir = node_local_dns();
    dry_run_dir(rig, &dir, NODE_LOCAL_OBJECTS.len());
    let helm = Helm::new(helm);
    let rendered = helm.template(
        "kube-system",
        &[
            "--set",
            "nodeCache.enabled=true",
            "--set",
            "autoscaler.enabled=true",
        ],
    );
    let n = objects(&rendered).len();
    assert_eq!(n, OBJECTS.len() + NODE_LOCAL_OBJECTS.len() + 7);
    let out = rig
        .kubectl_with_input(&["apply", "--dry-run=server", "-f", "-"], &rendered)
        .expect("helm template output");
    assert_eq!(out.matches("(server dry run)").count(), n, "{out}");
    let err = rig.kubectl(&["-n", "kube-system", "get", "daemonset", "node-local-dns"]);
    assert!(err.is_err(), "dry run created the DaemonSet: {err:?}");
}

/// Applied for real beside the cluster DNS, on fake nodes: one cache Pod per
/// node, Running with the node's address (hostNetwork), one endpoint per
/// node offered to the metrics Service, kube-dns-upstream listing the
/// cluster DNS Pods.
#[test]
fn node_local_dns_runs_one_pod_per_fake_node() {
    if helm_bin().is_none() {
        return;
    }
    let Some(private) = PrivateRig::start_with_nodes(NODES, &[]) else {
        return;
    };
    let rig = private.rig();
    let cluster_dns = kustomization();
    rig.kubectl(&["apply", "-k", cluster_dns.to_str().expect("utf-8")])
        .expect("kubectl apply -k deploy/cluster-dns");
    let dir = node_local_dns();
    rig.kubectl(&["apply", "-k", dir.to_str().expect("utf-8")])
        .expect("kubectl apply -k deploy/node-local-dns");
    rig.kubectl(&[
        "-n",
        "kube-system",
        "rollout",
        "status",
        "daemonset/node-local-dns",
        "--timeout=90s",
    ])
    .expect("rollout status");
    let ds = get_json(rig, &["-n", "kube-system", "daemonset", "node-local-dns"])
        .expect("the DaemonSet");
    for field in [
        "desiredNumberScheduled",
        "numberReady",
        "updatedNumberScheduled",
    ] {
        assert_eq!(
            ds["status"][field].as_u64(),
            Some(u64::from(NODES)),
            "{field}: {}",
            ds["status"]
        );
    }
    let nodes = get_json(rig, &["nodes"]).expect("nodes");
    let node_ip = |name: &str| -> String {
        nodes["items"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|n| n["metadata"]["name"] == name)
            .and_then(|n| {
                n["status"]["addresses"]
                    .as_array()?
                    .iter()
                    .find(|a| a["type"] == "InternalIP")?["address"]
                    .as_str()
                    .map(String::from)
            })
            .unwrap_or_default()
    };
    let pods = get_json(
        rig,
        &["-n", "kube-system", "pods", "-l", "k8s-app=node-local-dns"],
    )
    .expect("pods");
    let pods = pods["items"].as_array().expect("items").clone();
    assert_eq!(pods.len(), NODES as usize);
    let mut on: Vec<String> = Vec::new();
    for p in &pods {
        let node = p["spec"]["nodeName"].as_str().unwrap_or("").to_string();
        assert!(node.starts_with("rig-node-"), "on {node:?}");
        assert_eq!(p["status"]["phase"], "Running", "{}", p["status"]);
        let ip = p["status"]["podIP"].as_str().unwrap_or("").to_string();
        assert_eq!(ip, node_ip(&node), "hostNetwork: the node's address");
        on.push(node);
    }
    on.sort();
    on.dedup();
    assert_eq!(on.len(), NODES as usize, "one per node");
    // The metrics Service: the endpointslice controller puts one endpoint
    // per cache Pod into its slice, and the API server refuses them, only
    // because the fake nodes' address is 127.0.0.1 (EndpointSlice
    // validation rejects loopback; docs/rig.md). On a real cluster the slice
    // lists the nodes' addresses.
    let last = NODES - 1;
    let refused = format!(
        "endpoints[{last}].addresses[0]: Invalid value: \"127.0.0.1\": may not be in the loopback range"
    );
    let beyond = format!("endpoints[{NODES}]");
    eventually(30, "the controller's attempt at the metrics slice", || {
        let events = get_json(
            rig,
            &[
                "-n",
                "kube-system",
                "events",
                "--field-selector",
                "involvedObject.kind=Service,involvedObject.name=node-local-dns",
            ],
        )?;
        let messages: Vec<String> = events["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["reason"] == "FailedToUpdateEndpointSlices")
            .filter_map(|e| e["message"].as_str().map(String::from))
            .collect();
        if messages
            .iter()
            .any(|m| m.contains(&refused) && !m.contains(&beyond))
        {
            Ok(())
        } else {
            Err(format!("{messages:#?}"))
        }
    });
    let upstream = get_json(rig, &["-n", "kube-system", "service", "kube-dns-upstream"])
        .expect("kube-dns-upstream");
    let cluster_ip = upstream["spec"]["clusterIP"].as_str().unwrap_or("");
    assert!(
        cluster_ip.starts_with("10.96.") && cluster_ip != "10.96.0.10",
        "{cluster_ip}"
    );
    // kube-dns-upstream is the cluster DNS's other address: same Pods.
    assert_served_by_pods(rig, "kube-system", "coredns", "kube-dns", 2);
    let dns_pods = get_json(
        rig,
        &["-n", "kube-system", "pods", "-l", "k8s-app=kube-dns"],
    )
    .expect("pods");
    let mut want: Vec<String> = dns_pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["status"]["podIP"].as_str().map(String::from))
        .collect();
    want.sort();
    eventually(30, "kube-dns-upstream's EndpointSlice", || {
        let list = get_json(
            rig,
            &[
                "-n",
                "kube-system",
                "endpointslices",
                "-l",
                "kubernetes.io/service-name=kube-dns-upstream",
            ],
        )?;
        let items = list["items"].as_array().cloned().unwrap_or_default();
        let [slice] = items.as_slice() else {
            return Err(format!("{} slices", items.len()));
        };
        let mut have: Vec<String> = slice["endpoints"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["conditions"]["ready"] == true)
            .filter_map(|e| e["addresses"][0].as_str().map(String::from))
            .collect();
        have.sort();
        let mut ports: Vec<String> = slice["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| format!("{} {}", p["protocol"], p["port"]))
            .collect();
        ports.sort();
        if have == want && ports == [r#""TCP" 53"#, r#""UDP" 53"#] {
            Ok(())
        } else {
            Err(format!("{have:?} {ports:?}, cluster DNS Pods {want:?}"))
        }
    });
}

/// The README's node-local-dns overlay, as written there, renders
/// deploy/node-local-dns with the pushed node-cache image and nothing else
/// changed.
#[test]
fn the_readme_node_cache_overlay_names_the_pushed_image() {
    if !kubectl_built() {
        return;
    }
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).expect("README.md");
    let open = "cat >my-node-cache/kustomization.yaml <<EOF\n";
    let start = readme.find(open).expect("the overlay in README.md") + open.len();
    let len = readme[start..].find("\nEOF\n").expect("end of the overlay") + 1;
    let example = &readme[start..start + len];
    let dir = tempfile::tempdir().expect("tempdir");
    let overlay = dir.path().join("my-node-cache");
    std::fs::create_dir(&overlay).expect("mkdir");
    let base = relative(&overlay, &node_local_dns());
    let text = example
        .replace(
            "../deploy/node-local-dns",
            base.to_str().expect("utf-8 path"),
        )
        .replace("REGISTRY", "registry.example");
    assert_ne!(text, example, "the example names ../deploy/node-local-dns");
    std::fs::write(overlay.join("kustomization.yaml"), text).expect("write");
    let out = objects(&kustomize(&overlay));
    let mut base = objects(&kustomize(&node_local_dns()));
    let ds = "DaemonSet/kube-system/node-local-dns";
    assert_eq!(
        out[ds]["spec"]["template"]["spec"]["containers"][0]["image"].as_str(),
        Some("registry.example/clusterdns-node-cache:0.1.0")
    );
    if let Some(c) = base
        .get_mut(ds)
        .and_then(|d| d["spec"]["template"]["spec"]["containers"].get_mut(0))
    {
        c["image"] = Yaml::from("registry.example/clusterdns-node-cache:0.1.0");
    }
    assert_eq!(out, base, "only the image changes");
}

/// Whether the cluster DNS's ServiceAccount may `verb` `resource`, as the
/// API server's authorizer decides (`kubectl auth can-i --as`).
fn dns_can(rig: &Rig, verb: &str, resource: &str) -> bool {
    let out = Command::new(rig_dir().join("bin/kubectl"))
        .arg("--kubeconfig")
        .arg(rig.kubeconfig())
        .args(["auth", "can-i", verb, resource])
        .arg("--as=system:serviceaccount:kube-system:coredns")
        .stdin(Stdio::null())
        .output()
        .expect("run kubectl");
    // `yes` exits 0, `no` 1.
    match (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).trim(),
    ) {
        (Some(0), "yes") => true,
        (Some(1), "no") => false,
        (code, said) => panic!(
            "kubectl auth can-i {verb} {resource}: {code:?} {said} {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// Bare `zone_aware` reads Nodes; the default ClusterRole leaves them out
/// (least privilege). The opt-in, as deploy/README.md gives it (the
/// `zone-aware-nodes` component in an overlay, or Helm's `rbac.nodes`),
/// adds exactly Nodes `list`, `watch` and changes nothing else; applied on
/// a private rig, the API server lets the ServiceAccount list and watch
/// Nodes with it (not `get`, not write), and not without it.
#[test]
fn nodes_for_zone_aware_are_an_opt_in_of_kustomize_and_helm() {
    let Some(helm) = helm_bin() else { return };
    if !kubectl_built() {
        return;
    }
    let helm = Helm::new(helm);
    let example = readme_example("zone-dns");
    let dir = tempfile::tempdir().expect("tempdir");
    let overlay = dir.path().join("zone-dns");
    std::fs::create_dir(&overlay).expect("mkdir");
    let deploy = workspace_root().join("deploy");
    let rel = |p: &str| relative(&overlay, &deploy.join(p)).display().to_string();
    let text = example
        .replace("../deploy/cluster-dns", &rel("cluster-dns"))
        .replace("../deploy/zone-aware-nodes", &rel("zone-aware-nodes"));
    std::fs::write(overlay.join("kustomization.yaml"), &text).expect("write");

    let base = objects(&kubectl_kustomize());
    let with = objects(&kustomize(&overlay));
    let role = "ClusterRole//system:coredns";
    let nodes =
        serde_json::json!({"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]});
    let rules = |o: &BTreeMap<String, Yaml>| serde_json::to_value(&o[role]["rules"]).expect("json");
    let mut want = rules(&base);
    want.as_array_mut().expect("rules").push(nodes.clone());
    assert_eq!(rules(&with), want);
    assert!(!rules(&base).to_string().contains("nodes"));
    for (key, obj) in &base {
        if key != role {
            assert_eq!(&with[key], obj, "{key} is the base's");
        }
    }
    assert_eq!(
        with.keys().collect::<Vec<_>>(),
        base.keys().collect::<Vec<_>>()
    );

    // Helm: the same objects as the overlay with rbac.nodes, as the base
    // without (helm_defaults_render_exactly_the_kustomize_objects).
    let from_helm = objects(&helm.template("kube-system", &["--set", "rbac.nodes=true"]));
    assert_same_objects(&with, &from_helm);

    let Some(private) = PrivateRig::start(&[]) else {
        return;
    };
    let rig = private.rig();
    rig.kubectl(&["apply", "-k", kustomization().to_str().expect("utf-8")])
        .expect("apply the base");
    assert!(
        dns_can(rig, "list", "services"),
        "the base grants its reads"
    );
    assert!(!dns_can(rig, "list", "nodes"), "the base grants no Nodes");
    rig.kubectl(&["apply", "-k", overlay.to_str().expect("utf-8")])
        .expect("apply the overlay");
    eventually(10, "the overlay to grant Nodes watch", || {
        dns_can(rig, "watch", "nodes")
            .then_some(())
            .ok_or("not yet".to_string())
    });
    assert!(dns_can(rig, "list", "nodes"));
    for (verb, resource) in [("get", "nodes"), ("update", "nodes"), ("list", "secrets")] {
        assert!(!dns_can(rig, verb, resource), "{verb} {resource} granted");
    }
    // Helm's role with the value off takes Nodes away again; on, grants them.
    let role_only = |args: &[&str]| {
        let out = objects(&helm.template("kube-system", args));
        serde_norway::to_string(&out[role]).expect("yaml")
    };
    rig.kubectl_with_input(&["apply", "-f", "-"], &role_only(&[]))
        .expect("apply helm's default role");
    eventually(10, "helm's default role to take Nodes away", || {
        (!dns_can(rig, "list", "nodes"))
            .then_some(())
            .ok_or("still granted".to_string())
    });
    rig.kubectl_with_input(
        &["apply", "-f", "-"],
        &role_only(&["--set", "rbac.nodes=true"]),
    )
    .expect("apply helm's role with rbac.nodes");
    eventually(10, "helm's rbac.nodes to grant Nodes list", || {
        dns_can(rig, "list", "nodes")
            .then_some(())
            .ok_or("not yet".to_string())
    });
}
