//! The container image `scripts/image` builds (an OCI archive), checked as a
//! container runtime would see it:
//!
//! - the archive's index names one manifest; its config runs `/clusterdns` as
//!   the entrypoint, with no command, as user 65532 (not root);
//! - one layer, holding exactly `/clusterdns` (static: no interpreter, no
//!   shared libraries; with the `cap_net_bind_service` file capability) and
//!   the CA bundle: no shell, no other program;
//! - the binary taken out of that layer, run as uid 65532 in a network
//!   namespace of this test, binds port 53 (the file capability at work) and
//!   answers a query there.
//!
//! The archive is `$CLUSTERDNS_IMAGE` (scripts/test builds it and sets it).
//! Without it the test is skipped with a message, unless
//! `CLUSTERDNS_REQUIRE_IMAGE=1`; it is also skipped when network namespaces
//! cannot be made (not root).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const UID: u32 = 65532;

fn skip(why: &str) {
    if std::env::var("CLUSTERDNS_REQUIRE_IMAGE").is_ok_and(|v| v == "1") {
        panic!("{why} (CLUSTERDNS_REQUIRE_IMAGE=1 makes this a failure)");
    }
    eprintln!("SKIPPED: {why}");
}

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn blob(dir: &Path, digest: &str) -> PathBuf {
    let hex = digest
        .strip_prefix("sha256:")
        .unwrap_or_else(|| panic!("digest {digest}"));
    dir.join("blobs/sha256").join(hex)
}

fn json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A network namespace of this test's own, deleted on drop.
struct Netns(String);

impl Netns {
    fn create() -> Option<Netns> {
        let name = format!("cdns-image-{}", std::process::id());
        let out = Command::new("ip")
            .args(["netns", "add", &name])
            .stdin(Stdio::null())
            .output();
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => {
                eprintln!(
                    "SKIPPED: `ip netns add` failed (root needed): {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                return None;
            }
            Err(e) => {
                eprintln!("SKIPPED: cannot run `ip`: {e}");
                return None;
            }
        }
        let ns = Netns(name);
        run(Command::new("ip").args(["-n", &ns.0, "link", "set", "lo", "up"]));
        Some(ns)
    }

    fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.0, program]);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.0])
            .stdin(Stdio::null())
            .status();
    }
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn image_config_layer_and_binary() {
    let Some(archive) = std::env::var_os("CLUSTERDNS_IMAGE").map(PathBuf::from) else {
        return skip("CLUSTERDNS_IMAGE is not set (build the image with scripts/image)");
    };
    assert!(archive.is_file(), "{} is not a file", archive.display());
    let dir = tempfile::tempdir().expect("tempdir");
    let oci = dir.path().join("oci");
    std::fs::create_dir(&oci).expect("mkdir");
    run(Command::new("tar")
        .arg("-C")
        .arg(&oci)
        .arg("-xf")
        .arg(&archive));

    // index -> manifest -> config and layers.
    assert_eq!(json(&oci.join("oci-layout"))["imageLayoutVersion"], "1.0.0");
    let index = json(&oci.join("index.json"));
    let manifests = index["manifests"].as_array().expect("manifests");
    assert_eq!(manifests.len(), 1, "{index}");
    assert_eq!(
        manifests[0]["annotations"]["org.opencontainers.image.ref.name"]
            .as_str()
            .map(|r| r.starts_with("localhost/clusterdns:")),
        Some(true),
        "{index}"
    );
    let manifest = json(&blob(
        &oci,
        manifests[0]["digest"].as_str().expect("digest"),
    ));
    let config = json(&blob(
        &oci,
        manifest["config"]["digest"].as_str().expect("config"),
    ));
    assert_eq!(config["os"], "linux");
    assert_eq!(config["architecture"], "amd64");
    let c = &config["config"];
    assert_eq!(c["Entrypoint"], serde_json::json!(["/clusterdns"]), "{c}");
    assert!(
        c.get("Cmd")
            .is_none_or(|v| v.is_null() || v == &serde_json::json!([])),
        "no command: {c}"
    );
    assert_eq!(c["User"], format!("{UID}:{UID}"), "non-root");
    assert!(c.get("Shell").is_none(), "{c}");
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 1, "one layer: {manifest}");

    // The layer's files: exactly the binary and the CA bundle.
    let layer = blob(&oci, layers[0]["digest"].as_str().expect("layer digest"));
    let listing = run(Command::new("tar").arg("-tvf").arg(&layer));
    let mut files: Vec<&str> = listing
        .lines()
        .filter(|l| !l.starts_with('d'))
        .filter_map(|l| l.split_whitespace().last())
        .map(|f| f.trim_start_matches("./"))
        .collect();
    files.sort_unstable();
    assert_eq!(
        files,
        ["clusterdns", "etc/ssl/certs/ca-certificates.crt"],
        "{listing}"
    );
    for l in listing.lines() {
        assert!(!l.starts_with('l') && !l.starts_with('h'), "a link: {l}");
    }
    let rootfs = dir.path().join("rootfs");
    std::fs::create_dir(&rootfs).expect("mkdir");
    run(Command::new("tar")
        .args(["--xattrs", "--xattrs-include=security.capability", "-C"])
        .arg(&rootfs)
        .arg("-xf")
        .arg(&layer));
    let bin = rootfs.join("clusterdns");
    let headers = run(Command::new("readelf").arg("-lhd").arg(&bin));
    assert!(
        !headers.contains("program interpreter"),
        "static: {headers}"
    );
    assert!(!headers.contains("(NEEDED)"), "static: {headers}");
    let caps = run(Command::new("getcap").arg(&bin));
    assert!(caps.contains("cap_net_bind_service=ep"), "{caps:?}");

    // Run it as the image would: uid 65532, port 53, in a namespace of ours.
    let Some(ns) = Netns::create() else {
        if std::env::var("CLUSTERDNS_REQUIRE_IMAGE").is_ok_and(|v| v == "1") {
            panic!("cannot create a network namespace (CLUSTERDNS_REQUIRE_IMAGE=1)");
        }
        return;
    };
    // uid 65532 must reach the binary and the Corefile.
    for p in [dir.path(), rootfs.as_path()] {
        run(Command::new("chmod").arg("0755").arg(p));
    }
    let corefile = dir.path().join("Corefile");
    std::fs::write(
        &corefile,
        ".:53 {\n    bind 127.0.0.1\n    hosts {\n        192.0.2.53 image.test\n    }\n}\n",
    )
    .expect("write Corefile");
    run(Command::new("chmod").arg("0644").arg(&corefile));
    let log = dir.path().join("server.log");
    let log_file = std::fs::File::create(&log).expect("log");
    let server = ns
        .command("setpriv")
        .args([
            &format!("--reuid={UID}"),
            &format!("--regid={UID}"),
            "--clear-groups",
            "--inh-caps=-all",
            "--",
        ])
        .arg(&bin)
        .arg("-conf")
        .arg(&corefile)
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().expect("log"))
        .stderr(log_file)
        .spawn()
        .expect("start the image's binary");
    let mut server = Killed(server);
    let deadline = Instant::now() + Duration::from_secs(20);
    let answer = loop {
        let out = ns
            .command("dig")
            .args([
                "@127.0.0.1",
                "-p",
                "53",
                "+tries=1",
                "+time=1",
                "+short",
                "image.test",
                "A",
            ])
            .stdin(Stdio::null())
            .output()
            .expect("dig");
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if out.status.success() && !text.is_empty() {
            break text;
        }
        if let Ok(Some(status)) = server.0.try_wait() {
            panic!(
                "the binary exited ({status}):\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        assert!(
            Instant::now() < deadline,
            "no answer on 127.0.0.1:53 in the namespace:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(answer, "192.0.2.53");
    // It really is the unprivileged user that bound port 53.
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.0.id()))
        .expect("/proc/PID/status");
    let uid_line = status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .expect("Uid line");
    assert!(
        uid_line
            .split_whitespace()
            .skip(1)
            .all(|u| u == UID.to_string()),
        "{uid_line}"
    );
}
