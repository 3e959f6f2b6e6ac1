//! Least privilege (issue 18): the binary serves port 53 as a non-root user
//! holding only `CAP_NET_BIND_SERVICE`, on a read-only root with one
//! writable directory for its pidfile, as the image's Deployment runs it.
//! Without the capability it refuses to start with the bind error.
//!
//! Needs root (to drop to uid 65532 and make a private mount namespace)
//! and `setpriv`/`unshare` (util-linux); skipped otherwise.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Off the machine's own resolver addresses (127.0.0.53, 127.0.0.1).
const ADDR: &str = "127.0.0.77";
/// The image's user.
const UID: &str = "65532";

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| s.lines().any(|l| l.starts_with("Uid:\t0\t")))
        .unwrap_or(false)
}

fn usable() -> bool {
    if !is_root() {
        eprintln!("skipped: needs root");
        return false;
    }
    for tool in ["setpriv", "unshare"] {
        if Command::new(tool).arg("--version").output().is_err() {
            eprintln!("skipped: {tool} missing");
            return false;
        }
    }
    true
}

/// A directory the unprivileged user can read, holding a copy of the
/// binary (the build's own is under root's home) and the Corefile.
fn stage(corefile: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let bin = dir.path().join("clusterdns");
    std::fs::copy(common::binary(), &bin).expect("copy the binary");
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::write(dir.path().join("Corefile"), corefile).expect("write Corefile");
    std::fs::create_dir(dir.path().join("run")).expect("mkdir run");
    dir
}

/// Starts the staged binary in a private mount namespace where every
/// mount but the kernel's (`/proc`, `/sys`, `/dev`) is read-only and
/// `run/` is a small tmpfs, as uid/gid 65532 with no capability but
/// those in `caps` (e.g. `+net_bind_service`, or empty for none).
fn start(dir: &Path, caps: &str) -> Child {
    let d = dir.display();
    let (inh, ambient) = if caps.is_empty() {
        ("-all".to_string(), String::new())
    } else {
        (format!("-all,{caps}"), format!("--ambient-caps {caps}"))
    };
    let script = format!(
        r#"set -e
for m in $(awk '{{print $2}}' /proc/self/mounts | sort -u); do
    case "$m" in /proc*|/sys*|/dev*) continue ;; esac
    mount -o remount,bind,ro "$m" 2>/dev/null || mount --bind -o ro "$m" "$m" 2>/dev/null || true
done
mount --bind {d} {d}
mount -o remount,bind,ro {d}
mount -t tmpfs -o size=1m,mode=0777 tmpfs {d}/run
exec setpriv --reuid {UID} --regid {UID} --clear-groups \
    --inh-caps {inh} {ambient} --bounding-set {inh} \
    {d}/clusterdns -conf {d}/Corefile -pidfile {d}/run/clusterdns.pid"#
    );
    Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run unshare")
}

/// Kills the server when a test ends, passed or not.
struct Running(Option<Child>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn dig_whoami(addr: &str) -> String {
    let out = Command::new("dig")
        .args([
            &format!("@{addr}"),
            "-p",
            "53",
            "+tries=1",
            "+time=1",
            "who.example",
            "A",
        ])
        .output()
        .expect("run dig");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A `/proc/PID/status` field, e.g. `CapEff`.
fn status_field(pid: u32, key: &str) -> String {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .unwrap_or("")
        .trim()
        .to_string()
}

fn corefile(addr: &str) -> String {
    format!(".:53 {{\n    bind {addr}\n    prometheus {addr}:9153\n    whoami\n}}\n")
}

#[test]
fn serves_port_53_as_non_root_with_only_net_bind_service_on_a_read_only_root() {
    if !usable() {
        return;
    }
    let dir = stage(&corefile(ADDR));
    let mut running = Running(Some(start(dir.path(), "+net_bind_service")));
    let child = running.0.as_mut().expect("started");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut out = String::new();
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            let o = running
                .0
                .take()
                .expect("started")
                .wait_with_output()
                .expect("output");
            panic!(
                "exited {status}: {}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        out = dig_whoami(ADDR);
        if common::status(&out) == "NOERROR" {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(common::status(&out), "NOERROR", "{out}");
    assert!(
        // whoami's address is the client's (dig's).
        out.contains("who.example.\t\t0\tIN\tA\t127.0.0.1"),
        "{out}"
    );

    // `unshare` and `sh` exec, so the child's pid is the server's.
    let pid = child.id();
    assert_eq!(
        status_field(pid, "Uid"),
        format!("{UID}\t{UID}\t{UID}\t{UID}")
    );
    // Bit 10 is CAP_NET_BIND_SERVICE; nothing else is effective,
    // permitted or bounded.
    for key in ["CapEff", "CapPrm", "CapBnd"] {
        assert_eq!(status_field(pid, key), "0000000000000400", "{key}");
    }
    // The pidfile is the one file it writes, in the one writable place
    // (seen through the server's own mount namespace; written once every
    // listener is bound, so just after the first answer).
    let path = format!(
        "/proc/{pid}/root{}/run/clusterdns.pid",
        dir.path().display()
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    let pidfile = loop {
        match std::fs::read_to_string(&path) {
            Ok(p) if !p.is_empty() => break p,
            _ if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            other => panic!("pidfile {path}: {other:?}"),
        }
    };
    assert_eq!(pidfile.trim(), pid.to_string());
    // Outside the namespace the directory is as it was: nothing written.
    let outside: Vec<_> = std::fs::read_dir(dir.path().join("run"))
        .expect("read run/")
        .collect();
    assert!(outside.is_empty(), "{outside:?}");
    // The metrics listener (an unprivileged port) serves too.
    let metrics = Command::new("curl")
        .args([
            "-sf",
            "--max-time",
            "3",
            &format!("http://{ADDR}:9153/metrics"),
        ])
        .output()
        .expect("run curl");
    let metrics = String::from_utf8_lossy(&metrics.stdout);
    assert!(metrics.contains("coredns_dns_requests_total"), "{metrics}");

    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let o = running
        .0
        .take()
        .expect("started")
        .wait_with_output()
        .expect("output");
    assert!(o.status.success(), "exit on SIGTERM: {:?}", o.status);
}

#[test]
fn without_the_capability_it_refuses_to_start_with_the_bind_error() {
    if !usable() {
        return;
    }
    // Another address than the other test's, which may be serving.
    let addr = "127.0.0.78";
    let dir = stage(&corefile(addr));
    let mut running = Running(Some(start(dir.path(), "")));
    let o = running
        .0
        .take()
        .expect("started")
        .wait_with_output()
        .expect("output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        !o.status.success(),
        "started without CAP_NET_BIND_SERVICE: {text}"
    );
    assert!(text.to_lowercase().contains("permission denied"), "{text}");
    assert!(text.contains(&format!("{addr}:53")), "{text}");
}
