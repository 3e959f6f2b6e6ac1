//! A private rig: etcd and kube-apiserver of a test's own (the shared rig's
//! binaries, a scratch directory, free ports), for tests that stop the
//! apiserver or compact etcd without disturbing tests on the shared rig.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use clusterdns_contract::duration::parse_go;

use crate::process::free_port;
use crate::rig::{REQUIRE_RIG_ENV, Rig, rig_dir, rig_required, workspace_root};

/// A rig of the test's own, taken down (`scripts/rig down`) and deleted on
/// drop. [`PrivateRig::rig`] is an exclusive [`Rig`] on it, so
/// [`Rig::apiserver_stop`], [`Rig::apiserver_start`] and [`Rig::etcd_compact`]
/// work without waiting for other tests.
#[derive(Debug)]
pub struct PrivateRig {
    rig: Option<Rig>,
    dir: PathBuf,
}

impl PrivateRig {
    /// Starts a private rig with the shared rig's binaries (`.rig/bin`).
    /// `env` adds `scripts/rig up` settings (e.g. `("RIG_KCM", "0")` to run
    /// without the controller-manager). Returns `None` (with a `SKIPPED:` line
    /// on stderr) when the binaries are missing, unless
    /// `CLUSTERDNS_REQUIRE_RIG=1`; panics when `up` fails.
    pub fn start(env: &[(&str, &str)]) -> Option<PrivateRig> {
        PrivateRig::start_checked(env, &[], "scripts/rig build")
    }

    /// Like [`PrivateRig::start`], with kube-scheduler, KWOK and `nodes` fake
    /// Ready nodes (`rig-node-0` …, see docs/rig.md): Pods of Deployments are
    /// scheduled, reach Running with Pod IPs and fill EndpointSlices. Skips
    /// (or fails, with `CLUSTERDNS_REQUIRE_RIG=1`) when `scripts/rig build
    /// --nodes` has not been run.
    pub fn start_with_nodes(nodes: u32, env: &[(&str, &str)]) -> Option<PrivateRig> {
        let nodes = nodes.to_string();
        let mut env = env.to_vec();
        env.push(("RIG_NODES", &nodes));
        PrivateRig::start_checked(
            &env,
            &["kube-scheduler", "kwok", "kwok-stages.yaml"],
            "scripts/rig build --nodes",
        )
    }

    fn start_checked(env: &[(&str, &str)], extra: &[&str], build: &str) -> Option<PrivateRig> {
        let shared_bin = rig_dir().join("bin");
        let missing: Vec<&str> = ["etcd", "kube-apiserver", "kubectl", "coredns"]
            .iter()
            .chain(extra)
            .copied()
            .filter(|b| !shared_bin.join(b).exists())
            .collect();
        if !missing.is_empty() {
            let msg = format!(
                "no rig binaries ({}) in {}: run `{build}`",
                missing.join(", "),
                shared_bin.display()
            );
            if rig_required() {
                panic!("{msg} ({REQUIRE_RIG_ENV}=1 makes this a failure)");
            }
            eprintln!("SKIPPED: {msg}");
            return None;
        }
        // A second try, on other ports, covers a port taken between the
        // pick and the bind by a process outside the test's control.
        let first = match PrivateRig::up(&shared_bin, env) {
            Ok(rig) => return Some(rig),
            Err(e) => e,
        };
        eprintln!("private rig: first start failed, trying other ports: {first}");
        match PrivateRig::up(&shared_bin, env) {
            Ok(rig) => Some(rig),
            Err(e) => panic!("starting a private rig (twice): {first}\n---\n{e}"),
        }
    }

    fn up(shared_bin: &Path, env: &[(&str, &str)]) -> io::Result<PrivateRig> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir()
            .join("clusterdns-test-support")
            .join(format!("private-rig-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        std::os::unix::fs::symlink(shared_bin, dir.join("bin"))?;
        // From here on, drop takes down whatever `up` managed to start.
        let mut private = PrivateRig { rig: None, dir };
        // Below the ephemeral range, so that no outgoing connection (the
        // other private rig's apiserver talking to its etcd, say) takes one
        // between the pick and the bind.
        let ports = [
            free_port()?,
            free_port()?,
            free_port()?,
            free_port()?,
            free_port()?,
            free_port()?,
        ]
        .map(|p| p.to_string());
        let mut cmd = Command::new(workspace_root().join("scripts/rig"));
        cmd.arg("up")
            .env("RIG_DIR", &private.dir)
            .env("RIG_ETCD_PORT", &ports[0])
            .env("RIG_ETCD_PEER_PORT", &ports[1])
            .env("RIG_APISERVER_PORT", &ports[2])
            .env("RIG_KCM_PORT", &ports[3])
            .env("RIG_SCHEDULER_PORT", &ports[4])
            .env("RIG_KWOK_PORT", &ports[5])
            .stdin(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output()?;
        if !out.status.success() {
            let log = private.dir.join("run/logs/kube-apiserver.log");
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(8).collect();
            return Err(io::Error::other(format!(
                "scripts/rig up in {} failed ({}): {}\nkube-apiserver.log ends:\n{}",
                private.dir.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )));
        }
        private.rig = Some(Rig::private_at(&private.dir)?);
        Ok(private)
    }

    /// The exclusive [`Rig`] handle on this private rig.
    pub fn rig(&self) -> &Rig {
        match &self.rig {
            Some(rig) => rig,
            None => unreachable!("a PrivateRig is only handed out once up"),
        }
    }

    /// The private rig's directory (its `kubeconfig`, `run/logs/`…).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for PrivateRig {
    fn drop(&mut self) {
        self.rig = None;
        let _ = Command::new(workspace_root().join("scripts/rig"))
            .arg("down")
            .env("RIG_DIR", &self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if std::env::var_os("CLUSTERDNS_KEEP_TEST_DIRS").is_none_or(|v| v != "1") {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// One request in kube-apiserver's request log (klog `httplog` lines, written when a request
/// ends; the apiserver logs them at `--v=3`, i.e. a rig started with `RIG_APISERVER_V=3`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiRequest {
    /// `GET`, `LIST`, `WATCH`, `POST`…
    pub verb: String,
    /// Path and query.
    pub uri: String,
    /// The client's `User-Agent`.
    pub user_agent: String,
    /// When the request arrived: the log line's time of day minus the latency (klog lines
    /// carry no date: compare requests of one run only).
    pub received: Duration,
    /// How long the request took (for a watch: how long the stream lasted).
    pub latency: Duration,
}

impl ApiRequest {
    /// Parses one klog line; `None` unless it is an `"HTTP"` request line.
    pub fn parse(line: &str) -> Option<ApiRequest> {
        if !line.contains("] \"HTTP\" ") {
            return None;
        }
        // `I1129 22:38:20.527991 …`
        let clock = line.get(6..21)?;
        let (h, rest) = clock.split_once(':')?;
        let (m, s) = rest.split_once(':')?;
        let secs = h.parse::<u64>().ok()? * 3600 + m.parse::<u64>().ok()? * 60;
        let end = Duration::from_secs(secs) + Duration::try_from_secs_f64(s.parse().ok()?).ok()?;
        let field = |name: &str| -> Option<String> {
            let start = line.find(&format!(" {name}=\""))? + name.len() + 3;
            let len = line.get(start..)?.find('"')?;
            Some(line.get(start..start + len)?.to_string())
        };
        let latency = parse_go(&field("latency")?).ok()?;
        Some(ApiRequest {
            verb: field("verb")?,
            uri: field("URI")?,
            user_agent: field("userAgent").unwrap_or_default(),
            received: end.checked_sub(latency)?,
            latency,
        })
    }
}

impl PrivateRig {
    /// Every request kube-apiserver has logged so far (see [`ApiRequest`]; needs a rig
    /// started with `RIG_APISERVER_V=3` or more), in log order.
    pub fn apiserver_requests(&self) -> Vec<ApiRequest> {
        let log = self.dir.join("run/logs/kube-apiserver.log");
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .filter_map(ApiRequest::parse)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_httplog_lines() {
        let line = r#"I1129 22:38:24.892926    8750 httplog.go:134] "HTTP" verb="WATCH" URI="/api/v1/namespaces?sendInitialEvents=true&watch=true" latency="2.963269822s" userAgent="kubectl/v1.35.4 (linux/amd64) kubernetes/$Format" audit-ID="f7" srcIP="127.0.0.1:36056" resp=200"#;
        let r = ApiRequest::parse(line).unwrap();
        assert_eq!(r.verb, "WATCH");
        assert_eq!(
            r.uri,
            "/api/v1/namespaces?sendInitialEvents=true&watch=true"
        );
        assert!(r.user_agent.starts_with("kubectl/"));
        assert_eq!(r.latency, Duration::from_nanos(2_963_269_822));
        let end = Duration::from_secs(22 * 3600 + 38 * 60 + 24) + Duration::from_micros(892_926);
        assert_eq!(r.received + r.latency, end);
        assert_eq!(
            ApiRequest::parse("I1129 22:38:24.892926 1 x.go:1] other"),
            None
        );
    }
}
