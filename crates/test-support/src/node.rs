//! The rig's real node (`scripts/rig up --node`, docs/rig.md): a kubelet,
//! kube-proxy and containerd running `rig-node` on a bridge of the rig's.

use std::io;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::rig::{Rig, check, workspace_root};

/// Set to `1` to turn a rig without its real node into a test failure
/// instead of a skip (the plain rig, which CI runs, skips these tests).
pub const REQUIRE_NODE_ENV: &str = "CLUSTERDNS_REQUIRE_NODE";

/// The node's name, as `scripts/rig up --node` registers it.
pub const NODE_NAME: &str = "rig-node";

/// Whether a missing node must fail the test (`CLUSTERDNS_REQUIRE_NODE=1`).
pub fn node_required() -> bool {
    std::env::var(REQUIRE_NODE_ENV).is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

/// Skips the current test (returns from it) unless the rig runs with its
/// real node; fails it when `CLUSTERDNS_REQUIRE_NODE=1` (or, through
/// [`Rig::get_exclusive`], when `CLUSTERDNS_REQUIRE_RIG=1` and no rig runs).
/// The rig is held exclusively: the node's tests own kube-system.
///
/// ```ignore
/// let (rig, node) = clusterdns_test_support::node_or_skip!();
/// ```
#[macro_export]
macro_rules! node_or_skip {
    () => {{
        let Some(rig) = $crate::Rig::get_exclusive() else {
            return;
        };
        match $crate::RealNode::get(&rig) {
            Some(node) => (rig, node),
            None => return,
        }
    }};
}

/// The running real node.
#[derive(Debug, Clone)]
pub struct RealNode {
    rig_dir: PathBuf,
    ip: Ipv4Addr,
}

impl RealNode {
    /// The rig's real node, or `None` (with a `SKIPPED:` line on stderr) when
    /// the rig runs without it or the node is not Ready; panics instead
    /// under `CLUSTERDNS_REQUIRE_NODE=1`.
    pub fn get(rig: &Rig) -> Option<RealNode> {
        match RealNode::probe(rig) {
            Ok(node) => Some(node),
            Err(why) => {
                let msg = format!(
                    "no real node in the rig at {}: {why}. Start it with `scripts/rig build --node && scripts/rig up --node` (root).",
                    rig.dir().display()
                );
                if node_required() {
                    panic!("{msg} ({REQUIRE_NODE_ENV}=1 makes this a failure)");
                }
                eprintln!("SKIPPED: {msg}");
                None
            }
        }
    }

    fn probe(rig: &Rig) -> Result<RealNode, String> {
        let env_path = rig.dir().join("run/rig.env");
        let env = std::fs::read_to_string(&env_path)
            .map_err(|e| format!("reading {}: {e}", env_path.display()))?;
        if setting(&env, "NODE") != Some("1") {
            return Err("the rig was started without --node".into());
        }
        let ip = setting(&env, "NODE_IP")
            .ok_or_else(|| format!("no NODE_IP in {}", env_path.display()))?;
        let ip: Ipv4Addr = ip
            .parse()
            .map_err(|e| format!("NODE_IP {ip:?} in {}: {e}", env_path.display()))?;
        let ready = rig
            .kubectl(&[
                "get",
                "node",
                NODE_NAME,
                "-o",
                r#"jsonpath={.status.conditions[?(@.type=="Ready")].status}"#,
            ])
            .map_err(|e| e.to_string())?;
        if ready.trim() != "True" {
            return Err(format!(
                "node {NODE_NAME} is not Ready ({:?})",
                ready.trim()
            ));
        }
        Ok(RealNode {
            rig_dir: rig.dir().to_path_buf(),
            ip,
        })
    }

    /// The node's address (InternalIP), on the rig's bridge: where the API
    /// server and the kubelet listen, and where a test's upstream DNS may
    /// listen for the Pods (the node's resolv.conf names it).
    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }

    /// Loads OCI archives into the node's containerd (`scripts/rig import`);
    /// the image references imported, as a Pod's `image` names them.
    pub fn import(&self, archives: &[&Path]) -> io::Result<Vec<String>> {
        let out = Command::new(workspace_root().join("scripts/rig"))
            .arg("import")
            .args(archives)
            .env("RIG_DIR", &self.rig_dir)
            .stdin(Stdio::null())
            .output()?;
        Ok(check("scripts/rig", &["import"], &out)?
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect())
    }

    /// An OCI archive the rig built for the node (`rig-busybox`, `rig-pause`).
    pub fn rig_image(&self, name: &str) -> PathBuf {
        self.rig_dir.join("bin").join(format!("{name}.oci.tar"))
    }

    /// The host pid of a running container (`containerd://ID` as in a Pod's
    /// `containerStatuses[].containerID`, or the bare ID), from the node's
    /// containerd.
    pub fn container_pid(&self, container_id: &str) -> io::Result<u32> {
        let id = container_id
            .strip_prefix("containerd://")
            .unwrap_or(container_id);
        let sock = self.rig_dir.join("run/node/containerd/containerd.sock");
        let out = Command::new("ctr")
            .arg("--address")
            .arg(&sock)
            .args(["--namespace", "k8s.io", "tasks", "ls"])
            .stdin(Stdio::null())
            .output()?;
        // Columns: TASK PID STATUS.
        check("ctr", &["tasks", "ls"], &out)?
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                Some((f.next()?, f.next()?))
            })
            .find(|(task, _)| *task == id)
            .and_then(|(_, pid)| pid.parse().ok())
            .ok_or_else(|| {
                io::Error::other(format!("no running task {id} in the node's containerd"))
            })
    }
}

/// `NAME=value` of a `rig.env` (written with `printf %q`: the values the rig
/// saves need no unquoting).
fn setting<'a>(env: &'a str, name: &str) -> Option<&'a str> {
    env.lines()
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim())
}

#[cfg(test)]
mod tests {
    use super::setting;

    #[test]
    fn reads_saved_settings() {
        let env = "NODES=0\nNODE=1\nNODE_IP=10.250.0.1\nSERVICE_CIDR=10.96.0.0/12\n";
        assert_eq!(setting(env, "NODE"), Some("1"));
        assert_eq!(setting(env, "NODE_IP"), Some("10.250.0.1"));
        assert_eq!(setting(env, "NODES"), Some("0"));
        assert_eq!(setting(env, "KCM"), None);
    }
}
