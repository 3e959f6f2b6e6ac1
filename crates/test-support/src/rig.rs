//! The running test rig (`scripts/rig up`): kubeconfig, kubectl, reference
//! CoreDNS, and the outage switches.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Set to `1` to turn a missing rig into a test failure instead of a skip.
pub const REQUIRE_RIG_ENV: &str = "CLUSTERDNS_REQUIRE_RIG";
/// Overrides the rig directory (default: `<workspace>/.rig`).
pub const RIG_DIR_ENV: &str = "CLUSTERDNS_RIG_DIR";

/// Whether a missing rig must fail the test (`CLUSTERDNS_REQUIRE_RIG=1`).
pub fn rig_required() -> bool {
    std::env::var(REQUIRE_RIG_ENV).is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

/// Says why a test skips (`SKIPPED: why` on stderr); panics instead when
/// [`rig_required`], so that a missing prerequisite cannot pass for a pass.
pub fn skip(why: &str) {
    if rig_required() {
        panic!("{why} ({REQUIRE_RIG_ENV}=1 makes this a failure)");
    }
    eprintln!("SKIPPED: {why}");
}

/// `ip netns add NAME`; `false` after [`skip`] when namespaces cannot be made
/// here (not root, no `ip`).
pub fn netns_add(name: &str) -> bool {
    let out = Command::new("ip")
        .args(["netns", "add", name])
        .stdin(Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => true,
        Ok(o) => {
            skip(&format!(
                "`ip netns add` failed (root needed): {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ));
            false
        }
        Err(e) => {
            skip(&format!("cannot run `ip`: {e}"));
            false
        }
    }
}

/// Polls `check` every 250 ms until it returns `Ok`, for at most `secs`;
/// panics with `what` and the last `Err` after that.
pub fn eventually<T>(secs: u64, what: &str, mut check: impl FnMut() -> Result<T, String>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        match check() {
            Ok(v) => return v,
            Err(why) if std::time::Instant::now() >= deadline => {
                panic!("timed out after {secs}s waiting for {what}: {why}")
            }
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(250)),
        }
    }
}

/// The workspace root (this crate lives in `<root>/crates/test-support`).
pub fn workspace_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.ancestors().nth(2).unwrap_or(here).to_path_buf()
}

/// The rig directory: `$CLUSTERDNS_RIG_DIR`, else `<workspace>/.rig`.
pub fn rig_dir() -> PathBuf {
    match std::env::var_os(RIG_DIR_ENV) {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => workspace_root().join(".rig"),
    }
}

/// A handle on the running rig. Holds a lock on the rig for its lifetime:
/// shared for [`Rig::get`], exclusive for [`Rig::get_exclusive`] (tests that
/// stop the apiserver or compact etcd), so that outage tests never run while
/// other tests use the rig, in this process or any other.
#[derive(Debug, Clone)]
pub struct Rig {
    inner: Arc<RigInner>,
}

#[derive(Debug)]
struct RigInner {
    dir: PathBuf,
    script: PathBuf,
    exclusive: bool,
    _lock: File,
}

/// Skips the current test (returns from it) when no rig is running; fails it
/// when `CLUSTERDNS_REQUIRE_RIG=1`.
///
/// ```ignore
/// let rig = clusterdns_test_support::rig_or_skip!();
/// ```
#[macro_export]
macro_rules! rig_or_skip {
    () => {
        match $crate::Rig::get() {
            Some(rig) => rig,
            None => return,
        }
    };
    (exclusive) => {
        match $crate::Rig::get_exclusive() {
            Some(rig) => rig,
            None => return,
        }
    };
}

impl Rig {
    /// The running rig, or `None` (with a message on stderr) when
    /// `.rig/kubeconfig` is absent or the apiserver does not answer.
    /// Panics instead of returning `None` when `CLUSTERDNS_REQUIRE_RIG=1`.
    pub fn get() -> Option<Rig> {
        Rig::open(false)
    }

    /// Like [`Rig::get`], but waits for and holds the rig exclusively: for
    /// tests that stop the apiserver or compact etcd.
    pub fn get_exclusive() -> Option<Rig> {
        Rig::open(true)
    }

    fn open(exclusive: bool) -> Option<Rig> {
        let dir = rig_dir();
        match probe(&dir) {
            Ok(()) => {}
            Err(why) => {
                let msg = format!(
                    "no test rig at {}: {why}. Start it with `scripts/rig build && scripts/rig up`.",
                    dir.display()
                );
                if rig_required() {
                    panic!("{msg} ({REQUIRE_RIG_ENV}=1 makes this a failure)");
                }
                eprintln!("SKIPPED: {msg}");
                return None;
            }
        }
        let lock = match lock_rig(&dir, exclusive) {
            Ok(f) => f,
            Err(e) => panic!("locking the rig at {}: {e}", dir.display()),
        };
        Some(Rig {
            inner: Arc::new(RigInner {
                script: workspace_root().join("scripts/rig"),
                dir,
                exclusive,
                _lock: lock,
            }),
        })
    }

    /// An exclusive handle on the rig in `dir` (a private rig started by
    /// [`crate::PrivateRig`]), without probing the shared rig.
    pub(crate) fn private_at(dir: &Path) -> io::Result<Rig> {
        let lock = lock_rig(dir, true)?;
        Ok(Rig {
            inner: Arc::new(RigInner {
                script: workspace_root().join("scripts/rig"),
                dir: dir.to_path_buf(),
                exclusive: true,
                _lock: lock,
            }),
        })
    }

    /// The rig directory (`.rig`).
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The admin kubeconfig (`.rig/kubeconfig`).
    pub fn kubeconfig(&self) -> PathBuf {
        self.inner.dir.join("kubeconfig")
    }

    /// A binary in `.rig/bin/` (coredns, kubectl, kube-apiserver, etcd).
    pub fn bin(&self, name: &str) -> PathBuf {
        self.inner.dir.join("bin").join(name)
    }

    /// The reference CoreDNS binary.
    pub fn coredns(&self) -> PathBuf {
        self.bin("coredns")
    }

    /// Runs kubectl against the rig with `stdin` as its standard input and
    /// returns its stdout, or an error carrying its stderr.
    pub fn kubectl_with_input(&self, args: &[&str], stdin: &str) -> io::Result<String> {
        let mut child = Command::new(self.bin("kubectl"))
            .arg("--kubeconfig")
            .arg(self.kubeconfig())
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        if let Some(mut input) = child.stdin.take() {
            input.write_all(stdin.as_bytes())?;
        }
        let out = child.wait_with_output()?;
        check("kubectl", args, &out)
    }

    /// Runs kubectl against the rig and returns its stdout.
    pub fn kubectl(&self, args: &[&str]) -> io::Result<String> {
        self.kubectl_with_input(args, "")
    }

    /// `kubectl apply -f -` of a (multi-document) YAML string.
    pub fn apply_yaml(&self, yaml: &str) -> io::Result<()> {
        self.kubectl_with_input(&["apply", "-f", "-"], yaml)
            .map(drop)
    }

    /// Sets the Pod's `status.podIP` (and `podIPs`) through the status
    /// subresource: the rig runs no kubelet, so a test gives its Pods
    /// loopback addresses its client sockets can bind to.
    pub fn set_pod_ip(&self, ns: &str, name: &str, ip: std::net::IpAddr) -> io::Result<()> {
        let patch = format!(r#"{{"status":{{"podIP":"{ip}","podIPs":[{{"ip":"{ip}"}}]}}}}"#);
        self.kubectl(&[
            "-n",
            ns,
            "patch",
            "pod",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch,
        ])
        .map(drop)
    }

    /// `kubectl delete -f -` of a YAML string (missing objects are fine; does
    /// not wait for finalizers).
    pub fn delete_yaml(&self, yaml: &str) -> io::Result<()> {
        self.kubectl_with_input(
            &["delete", "--ignore-not-found", "--wait=false", "-f", "-"],
            yaml,
        )
        .map(drop)
    }

    /// Creates a namespace with a unique name starting with `prefix`; it is
    /// deleted when the returned guard drops.
    pub fn namespace(&self, prefix: &str) -> io::Result<TestNamespace> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("{prefix}-{}-{n}", std::process::id());
        self.kubectl(&["create", "namespace", &name])?;
        Ok(TestNamespace {
            rig: self.clone(),
            name,
        })
    }

    fn script(&self, args: &[&str]) -> io::Result<String> {
        assert!(
            self.inner.exclusive,
            "`scripts/rig {}` disturbs other tests: use Rig::get_exclusive()",
            args.join(" ")
        );
        let out = Command::new(&self.inner.script)
            .args(args)
            .env("RIG_DIR", &self.inner.dir)
            .stdin(Stdio::null())
            .output()?;
        check("scripts/rig", args, &out)
    }

    /// Stops the kube-apiserver (etcd keeps running). Needs an exclusive rig.
    pub fn apiserver_stop(&self) -> io::Result<()> {
        self.script(&["apiserver-stop"]).map(drop)
    }

    /// Starts the kube-apiserver again and waits until it is ready.
    pub fn apiserver_start(&self) -> io::Result<()> {
        self.script(&["apiserver-start"]).map(drop)
    }

    /// Compacts etcd to its current revision and returns that revision.
    /// Watches resumed from an older resourceVersion then get 410 Gone (see
    /// docs/rig.md for when exactly).
    pub fn etcd_compact(&self) -> io::Result<u64> {
        let out = self.script(&["etcd-compact"])?;
        out.trim()
            .parse()
            .map_err(|e| io::Error::other(format!("etcd-compact printed {out:?}: {e}")))
    }
}

/// A namespace deleted (without waiting) on drop.
#[derive(Debug)]
pub struct TestNamespace {
    rig: Rig,
    name: String,
}

impl TestNamespace {
    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        if let Err(e) = self
            .rig
            .kubectl(&["delete", "namespace", &self.name, "--wait=false"])
        {
            eprintln!("deleting namespace {}: {e}", self.name);
        }
    }
}

pub(crate) fn check(what: &str, args: &[&str], out: &Output) -> io::Result<String> {
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(io::Error::other(format!(
            "{what} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Checks once per process that the rig answers (`kubectl get --raw /readyz`).
fn probe(dir: &Path) -> Result<(), String> {
    static PROBED: OnceLock<Result<(), String>> = OnceLock::new();
    PROBED
        .get_or_init(|| {
            let kubeconfig = dir.join("kubeconfig");
            if !kubeconfig.is_file() {
                return Err(format!("{} does not exist", kubeconfig.display()));
            }
            let kubectl = dir.join("bin/kubectl");
            let out = Command::new(&kubectl)
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(["get", "--raw", "/readyz", "--request-timeout=10s"])
                .stdin(Stdio::null())
                .output()
                .map_err(|e| format!("running {}: {e}", kubectl.display()))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "the apiserver does not answer: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
        })
        .clone()
}

fn lock_rig(dir: &Path, exclusive: bool) -> io::Result<File> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("tests.lock"))?;
    if exclusive {
        file.lock()?;
    } else {
        file.lock_shared()?;
    }
    Ok(file)
}
