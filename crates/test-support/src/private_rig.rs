//! A private rig: etcd and kube-apiserver of a test's own (the shared rig's
//! binaries, a scratch directory, free ports), for tests that stop the
//! apiserver or compact etcd without disturbing tests on the shared rig.

use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

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
        let shared_bin = rig_dir().join("bin");
        let missing: Vec<&str> = ["etcd", "kube-apiserver", "kubectl", "coredns"]
            .into_iter()
            .filter(|b| !shared_bin.join(b).exists())
            .collect();
        if !missing.is_empty() {
            let msg = format!(
                "no rig binaries ({}) in {}: run `scripts/rig build`",
                missing.join(", "),
                shared_bin.display()
            );
            if rig_required() {
                panic!("{msg} ({REQUIRE_RIG_ENV}=1 makes this a failure)");
            }
            eprintln!("SKIPPED: {msg}");
            return None;
        }
        match PrivateRig::up(&shared_bin, env) {
            Ok(rig) => Some(rig),
            Err(e) => panic!("starting a private rig: {e}"),
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
        // Four free TCP ports, held together so that they differ.
        let listeners = (0..4)
            .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
            .collect::<io::Result<Vec<_>>>()?;
        let ports = listeners
            .iter()
            .map(|l| l.local_addr().map(|a| a.port().to_string()))
            .collect::<io::Result<Vec<_>>>()?;
        drop(listeners);
        let mut cmd = Command::new(workspace_root().join("scripts/rig"));
        cmd.arg("up")
            .env("RIG_DIR", &private.dir)
            .env("RIG_ETCD_PORT", &ports[0])
            .env("RIG_ETCD_PEER_PORT", &ports[1])
            .env("RIG_APISERVER_PORT", &ports[2])
            .env("RIG_KCM_PORT", &ports[3])
            .stdin(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output()?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "scripts/rig up in {} failed ({}): {}",
                private.dir.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
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
