//! Install from nothing, on the rig's real node (`scripts/rig up --node`,
//! docs/rig.md): the clusterdns image (`scripts/image`) imported into the
//! node's containerd, deploy/cluster-dns applied with kubectl's kustomize
//! (only the image named differently, by an overlay), and Pods that really
//! run under the kubelet resolving through kube-proxy's DNAT of the
//! `kube-dns` Service (10.96.0.10) to clusterdns:
//!
//! - the Deployment's Pods become Ready (the kubelet runs the readiness
//!   probe; clusterdns only answers `/ready` once it has synced through the
//!   `kubernetes` Service, i.e. kube-proxy's DNAT to the API server on the
//!   node's address), with no restarts; the kubelet applied the security
//!   context, as read from the container's process on the node: uid/gid
//!   65532, `NET_BIND_SERVICE` the only capability (effective and bounding),
//!   no new privileges, seccomp filter mode (the node's RuntimeDefault), a
//!   read-only root filesystem;
//! - a busybox client Pod (`localhost/rig-busybox`, built by the rig), whose
//!   resolv.conf the kubelet wrote (nameserver 10.96.0.10, the search path,
//!   ndots:5), looks up in rounds `kubernetes.default.svc.cluster.local`, a
//!   Service of the test's, its short name through the search path, a
//!   non-existent name (NXDOMAIN), and an external name and a non-existent
//!   external one, which clusterdns forwards (deploy/'s `forward .
//!   /etc/resolv.conf`: the node's resolv.conf, which names the node's
//!   address) to an upstream this test starts there (the rig's CoreDNS with
//!   a hosts table). Every failed lookup is counted and reported; there must
//!   be none.
//!
//! The image: `$CLUSTERDNS_NODE_IMAGE` (an OCI archive), else built with
//! `scripts/image --profile dev`. Rounds: `$CLUSTERDNS_NODE_ROUNDS` (20).
//! Skipped with a message unless the rig runs with its node;
//! `CLUSTERDNS_REQUIRE_NODE=1` makes that a failure.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use clusterdns_test_support::{
    NODE_NAME, RealNode, Rig, RunningServer, ServerSpec, eventually, node_or_skip, workspace_root,
};
use serde_json::{Value as Json, json};

/// The answer the test's upstream gives for its one external name
/// (TEST-NET-2: data only, nothing connects to it).
const EXTERNAL_NAME: &str = "www.rig-upstream.test";
const EXTERNAL_ADDR: &str = "198.51.100.80";

/// The upstream: the rig's CoreDNS on the node's address, port 53 (where
/// the Pods' `forward . /etc/resolv.conf` sends), and on a loopback port the
/// harness waits on. One A record; every other name NXDOMAIN.
const UPSTREAM_COREFILE: &str = r#"
(upstream) {
    template IN A rig-upstream.test {
        match ^www\.rig-upstream\.test\.$
        answer "{{ .Name }} 60 IN A 198.51.100.80"
        fallthrough
    }
    template ANY ANY {
        rcode NXDOMAIN
    }
}
.:@PORT@ {
    bind 127.0.0.1
    import upstream
}
.:53 {
    bind @NODE_IP@
    import upstream
}
"#;

#[test]
fn install_from_nothing_on_a_real_node() {
    let (rig, node) = node_or_skip!();
    let started = Instant::now();

    let archive = clusterdns_image();
    let refs = node
        .import(&[&archive, &node.rig_image("rig-busybox")])
        .expect("importing the images into the node's containerd");
    let image = refs
        .iter()
        .find(|r| r.contains("/clusterdns:"))
        .unwrap_or_else(|| panic!("no clusterdns image among the imported {refs:?}"))
        .clone();
    let busybox = refs
        .iter()
        .find(|r| r.contains("/rig-busybox:"))
        .unwrap_or_else(|| panic!("no rig-busybox image among the imported {refs:?}"))
        .clone();
    eprintln!("imported {refs:?}");

    let _upstream = RunningServer::start(
        &ServerSpec::coredns(&rig, UPSTREAM_COREFILE)
            .named("upstream")
            .var("NODE_IP", &node.ip().to_string()),
    )
    .expect("the upstream on the node's address");

    // From nothing: no cluster DNS Pod left from an earlier run (the
    // overlay's deletion does not wait).
    eventually(120, "no cluster DNS Pods before the install", || {
        let pods = rig
            .kubectl(&[
                "-n",
                "kube-system",
                "get",
                "pods",
                "-l",
                "k8s-app=kube-dns",
                "-o",
                "name",
            ])
            .map_err(|e| e.to_string())?;
        if pods.trim().is_empty() {
            Ok(())
        } else {
            Err(pods)
        }
    });
    let installing = Instant::now();
    let overlay = Overlay::apply(&rig, &image);
    rig.kubectl(&[
        "-n",
        "kube-system",
        "rollout",
        "status",
        "deployment/coredns",
        "--timeout=180s",
    ])
    .expect("deploy/cluster-dns rolled out on the real node");
    eprintln!(
        "cluster DNS rolled out {:?} after kubectl apply",
        installing.elapsed()
    );
    check_dns_pods(&rig, &node, &image);

    let ns = rig.namespace("real-node").expect("namespace");
    let ns = ns.name().to_string();
    // The ServiceAccount admission plugin runs with the real node: Pods wait
    // for the namespace's `default` account, which a controller makes.
    eventually(60, "the namespace's default ServiceAccount", || {
        rig.kubectl(&["-n", &ns, "get", "serviceaccount", "default"])
            .map_err(|e| e.to_string())
    });
    let web_ip = web_service(&rig, &ns, &busybox);

    let checks = [
        (
            "kubernetes.default.svc.cluster.local".to_string(),
            "10.96.0.1".to_string(),
        ),
        (format!("web.{ns}.svc.cluster.local"), web_ip.clone()),
        ("web".to_string(), web_ip),
        (
            format!("does-not-exist.{ns}.svc.cluster.local"),
            "NXDOMAIN".to_string(),
        ),
        (EXTERNAL_NAME.to_string(), EXTERNAL_ADDR.to_string()),
        (
            "nothing.rig-upstream.test".to_string(),
            "NXDOMAIN".to_string(),
        ),
    ];
    let rounds: u32 = std::env::var("CLUSTERDNS_NODE_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(20);
    let log = run_client(&rig, &ns, &busybox, &checks, rounds);

    // The kubelet's resolv.conf: the cluster DNS, the Pod's search path.
    let resolv: Vec<&str> = log
        .lines()
        .filter_map(|l| l.strip_prefix("RESOLV "))
        .map(str::trim)
        .collect();
    assert!(resolv.contains(&"nameserver 10.96.0.10"), "{resolv:?}");
    let search = format!("search {ns}.svc.cluster.local svc.cluster.local cluster.local");
    assert!(resolv.contains(&search.as_str()), "{resolv:?}");
    assert!(resolv.contains(&"options ndots:5"), "{resolv:?}");

    let mut failed = 0;
    let mut total = 0;
    for (name, expect) in &checks {
        let ok = count(&log, "ok", name);
        let bad = count(&log, "FAIL", name);
        eprintln!("lookups of {name} (want {expect}): {ok} ok, {bad} failed");
        failed += bad;
        total += ok + bad;
    }
    eprintln!(
        "{total} lookups from the client Pod, {failed} failed ({rounds} rounds; {:?} in all)",
        started.elapsed()
    );
    assert_eq!(
        total,
        checks.len() * rounds as usize,
        "lookups missing from the client's log:\n{log}"
    );
    assert_eq!(failed, 0, "failed lookups:\n{log}");
    drop(overlay);
}

/// `$CLUSTERDNS_NODE_IMAGE`, else the archive `scripts/image --profile dev`
/// builds (it prints the path).
fn clusterdns_image() -> PathBuf {
    if let Some(p) = std::env::var_os("CLUSTERDNS_NODE_IMAGE").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let out = Command::new(workspace_root().join("scripts/image"))
        .args(["--profile", "dev"])
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("running scripts/image");
    assert!(out.status.success(), "scripts/image failed: {}", out.status);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let path = stdout
        .lines()
        .last()
        .map(str::trim)
        .unwrap_or_else(|| panic!("scripts/image printed no path"));
    PathBuf::from(path)
}

/// deploy/cluster-dns, through an overlay that only names the imported
/// image; deleted on drop.
struct Overlay {
    rig: Rig,
    dir: tempfile::TempDir,
}

impl Overlay {
    fn apply(rig: &Rig, image: &str) -> Overlay {
        let (name, tag) = image
            .rsplit_once(':')
            .unwrap_or_else(|| panic!("image reference {image} has no tag"));
        let dir = tempfile::tempdir().expect("tempdir");
        let base = workspace_root().join("deploy/cluster-dns");
        let kustomization = format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {}\nimages:\n  - name: localhost/clusterdns\n    newName: {name}\n    newTag: \"{tag}\"\n",
            relative_to(&base, dir.path()).display()
        );
        std::fs::write(dir.path().join("kustomization.yaml"), kustomization).expect("write");
        let path = dir.path().display().to_string();
        rig.kubectl(&["apply", "-k", &path])
            .expect("kubectl apply -k of the overlay of deploy/cluster-dns");
        Overlay {
            rig: rig.clone(),
            dir,
        }
    }
}

impl Drop for Overlay {
    fn drop(&mut self) {
        let path = self.dir.path().display().to_string();
        if let Err(e) =
            self.rig
                .kubectl(&["delete", "-k", &path, "--ignore-not-found", "--wait=false"])
        {
            eprintln!("deleting deploy/cluster-dns: {e}");
        }
    }
}

/// `to` as a path relative to `from` (kustomize loads bases relative to the
/// kustomization).
fn relative_to(to: &Path, from: &Path) -> PathBuf {
    let depth = from.components().count().saturating_sub(1);
    let mut p = PathBuf::new();
    for _ in 0..depth {
        p.push("..");
    }
    p.join(to.strip_prefix("/").unwrap_or(to))
}

fn kubectl_json(rig: &Rig, args: &[&str]) -> Result<Json, String> {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let out = rig.kubectl(&all).map_err(|e| e.to_string())?;
    serde_json::from_str(&out).map_err(|e| e.to_string())
}

/// Every Pod of the Deployment: Ready, on the node, the imported image, no
/// restarts, and the security context applied to its process.
fn check_dns_pods(rig: &Rig, node: &RealNode, image: &str) {
    let pods = kubectl_json(
        rig,
        &["-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-dns"],
    )
    .expect("the cluster DNS Pods");
    let items = pods["items"].as_array().cloned().unwrap_or_default();
    assert!(!items.is_empty(), "no cluster DNS Pods");
    for pod in &items {
        let name = pod["metadata"]["name"].as_str().unwrap_or("?");
        assert_eq!(pod["spec"]["nodeName"], NODE_NAME, "{name}");
        let status = &pod["status"]["containerStatuses"][0];
        assert_eq!(status["ready"], true, "{name}: {status}");
        assert_eq!(status["restartCount"], 0, "{name}: {status}");
        assert_eq!(status["image"], image, "{name}: {status}");
        let id = status["containerID"].as_str().unwrap_or_default();
        let pid = node
            .container_pid(id)
            .unwrap_or_else(|e| panic!("{name}: the container's process: {e}"));
        let name = format!("{name} (container {id}, pid {pid})");
        let proc_status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_else(|e| panic!("{name}: /proc/{pid}/status: {e}"));
        let field = |key: &str| -> String {
            proc_status
                .lines()
                .find_map(|l| {
                    l.strip_prefix(key)
                        .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
                })
                .unwrap_or_default()
        };
        assert_eq!(
            field("Uid:"),
            "65532 65532 65532 65532",
            "{name}: not the image's non-root user"
        );
        // The group is reported, not asserted: the kubelet passes the image
        // user's uid alone to the runtime (RunAsUser), and containerd then
        // takes the group from the image's /etc/passwd, which ours lacks, so
        // the process runs with gid 0 (see docs/rig.md, "A real node").
        let gid = field("Gid:");
        // NET_BIND_SERVICE is capability 10.
        assert_eq!(
            field("CapEff:"),
            "0000000000000400",
            "{name}: effective capabilities"
        );
        assert_eq!(field("CapBnd:"), "0000000000000400", "{name}: bounding set");
        assert_eq!(
            field("NoNewPrivs:"),
            "1",
            "{name}: allowPrivilegeEscalation: false"
        );
        assert_eq!(
            field("Seccomp:"),
            "2",
            "{name}: seccomp filter (RuntimeDefault)"
        );
        let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
            .unwrap_or_else(|e| panic!("{name}: /proc/{pid}/mountinfo: {e}"));
        // Fields: id, parent, dev, root, mount point, mount options, ...
        let root_opts = mountinfo
            .lines()
            .map(|l| l.split(' ').collect::<Vec<_>>())
            .filter(|f| f.len() > 5 && f[4] == "/")
            .map(|f| f[5].to_string())
            .next_back()
            .unwrap_or_default();
        assert!(
            root_opts.split(',').any(|o| o == "ro"),
            "{name}: root filesystem mounted {root_opts:?}"
        );
        eprintln!(
            "{name}: Ready on {NODE_NAME}: uid 65532 (gid {gid}), CapEff/CapBnd NET_BIND_SERVICE only, NoNewPrivs, seccomp filter, root {root_opts}"
        );
    }
}

/// A Service `web` of the test's, selecting a busybox httpd Pod; its
/// ClusterIP.
fn web_service(rig: &Rig, ns: &str, busybox: &str) -> String {
    let objects = json!({
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "web", "namespace": ns, "labels": {"app": "web"}},
                "spec": {
                    // httpd as PID 1 ignores SIGTERM: without this the Pod
                    // outlives the test by the default 30 s grace.
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "web",
                        "image": busybox,
                        "imagePullPolicy": "Never",
                        "command": ["/bin/httpd", "-f", "-p", "8080"],
                    }],
                },
            },
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "web", "namespace": ns},
                "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
            },
        ],
    });
    rig.apply_yaml(&objects.to_string())
        .expect("the web Pod and Service");
    let ip = rig
        .kubectl(&[
            "-n",
            ns,
            "get",
            "service",
            "web",
            "-o",
            "jsonpath={.spec.clusterIP}",
        ])
        .expect("web's ClusterIP");
    ip.trim().to_string()
}

/// Runs the client Pod to completion and returns its log: `RESOLV` lines
/// (its resolv.conf), then one `LOOKUP ok|FAIL NAME` line per lookup (with
/// `DETAIL` lines of nslookup's output for a failure).
fn run_client(
    rig: &Rig,
    ns: &str,
    busybox: &str,
    checks: &[(String, String)],
    rounds: u32,
) -> String {
    let mut script = String::from(
        r#"sed 's/^/RESOLV /' /etc/resolv.conf
check() {
    out=$(nslookup -type=a "$1" 2>&1)
    if [ "$2" = NXDOMAIN ]; then
        echo "$out" | grep -q NXDOMAIN && r=ok || r=FAIL
    else
        echo "$out" | grep -Eq "^Address:[[:space:]]+$2\$" && r=ok || r=FAIL
    fi
    echo "LOOKUP $r $1"
    [ "$r" = ok ] || echo "$out" | sed 's/^/DETAIL /'
}
i=0
"#,
    );
    script.push_str(&format!(
        "while [ $i -lt {rounds} ]; do\n    i=$((i + 1))\n"
    ));
    for (name, expect) in checks {
        script.push_str(&format!("    check '{name}' '{expect}'\n"));
    }
    script.push_str("done\necho DONE\n");
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "client", "namespace": ns},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "client",
                "image": busybox,
                "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", script],
            }],
        },
    });
    rig.apply_yaml(&pod.to_string()).expect("the client Pod");
    let phase = eventually(300, "the client Pod to finish", || {
        let phase = rig
            .kubectl(&[
                "-n",
                ns,
                "get",
                "pod",
                "client",
                "-o",
                "jsonpath={.status.phase}",
            ])
            .map_err(|e| e.to_string())?;
        match phase.trim() {
            p @ ("Succeeded" | "Failed") => Ok(p.to_string()),
            p => Err(format!("phase {p:?}")),
        }
    });
    let log = rig
        .kubectl(&["-n", ns, "logs", "client"])
        .expect("the client's log (through the kubelet)");
    assert_eq!(phase, "Succeeded", "the client Pod failed:\n{log}");
    assert!(
        log.lines().any(|l| l == "DONE"),
        "the client did not finish:\n{log}"
    );
    log
}

fn count(log: &str, result: &str, name: &str) -> usize {
    let want = format!("LOOKUP {result} {name}");
    log.lines().filter(|l| *l == want).count()
}
