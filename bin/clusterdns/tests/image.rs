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
//! And the node-cache variant (`scripts/image --node-cache`): node-local-dns's
//! entrypoint and user, `nft` and both iptables backends in the layer and no
//! shell, and the agent run from that layer making and removing its
//! interception, in both modes, with those tools.
//!
//! Beside each archive, its SBOM lists what the image holds (the crates
//! `cargo tree` says the binary links, the Debian package of every other
//! file), and building the image again from the same commit and binary gives
//! the same digest.
//!
//! The archives are `$CLUSTERDNS_IMAGE` and `$CLUSTERDNS_NODE_CACHE_IMAGE`
//! (scripts/test builds them and sets them). Without one its test is
//! skipped with a message, unless
//! `CLUSTERDNS_REQUIRE_IMAGE=1`; it is also skipped when network namespaces
//! cannot be made (not root).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;
use common::netns::Netns;
use common::run_ok;

const UID: u32 = 65532;

fn skip(why: &str) {
    if std::env::var("CLUSTERDNS_REQUIRE_IMAGE").is_ok_and(|v| v == "1") {
        panic!("{why} (CLUSTERDNS_REQUIRE_IMAGE=1 makes this a failure)");
    }
    eprintln!("SKIPPED: {why}");
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
fn netns(tag: &str) -> Option<Netns> {
    Netns::new(&format!("cdns-image{tag}-{}", std::process::id()))
}

/// `dig +short image.test A` at `server`:53 from `ns`: the answer, if any.
fn dig_image_test(ns: &Netns, server: &str) -> Option<String> {
    let out = ns
        .command("dig")
        .args([
            &format!("@{server}"),
            "-p",
            "53",
            "+tries=1",
            "+time=1",
            "+short",
        ])
        .args(["image.test", "A"])
        .output()
        .expect("dig");
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}

/// Unpacks the OCI archive into `dir/oci` and follows index -> manifest:
/// one manifest, named `name_prefix…`, for linux/amd64, with one layer.
/// Returns the image config and the layer's blob.
fn unpack(archive: &Path, dir: &Path, name_prefix: &str) -> (Value, PathBuf) {
    let oci = dir.join("oci");
    std::fs::create_dir(&oci).expect("mkdir");
    run_ok(
        Command::new("tar")
            .arg("-C")
            .arg(&oci)
            .arg("-xf")
            .arg(archive),
    );
    assert_eq!(json(&oci.join("oci-layout"))["imageLayoutVersion"], "1.0.0");
    let index = json(&oci.join("index.json"));
    let manifests = index["manifests"].as_array().expect("manifests");
    assert_eq!(manifests.len(), 1, "{index}");
    assert_eq!(
        manifests[0]["annotations"]["org.opencontainers.image.ref.name"]
            .as_str()
            .map(|r| r.starts_with(name_prefix)),
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
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 1, "one layer: {manifest}");
    let layer = blob(&oci, layers[0]["digest"].as_str().expect("layer digest"));
    (config, layer)
}

/// The layer's files (`only` these, if any named) under `dir/rootfs`,
/// with their file capabilities.
fn extract(dir: &Path, layer: &Path, only: &[&str]) -> PathBuf {
    let rootfs = dir.join("rootfs");
    std::fs::create_dir(&rootfs).expect("mkdir");
    run_ok(
        Command::new("tar")
            .args(["--xattrs", "--xattrs-include=security.capability", "-C"])
            .arg(&rootfs)
            .arg("-xf")
            .arg(layer)
            .args(only),
    );
    rootfs
}

struct Killed(Child);

impl Killed {
    /// Starts `cmd` (`what`, for the failure), its stdout and stderr to
    /// the file `log`.
    fn spawn(cmd: &mut Command, log: &Path, what: &str) -> Killed {
        let log_file = std::fs::File::create(log).expect("log");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log"))
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| panic!("start {what}: {e}"));
        Killed(child)
    }
}

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
    let (config, layer) = unpack(&archive, dir.path(), "localhost/clusterdns:");
    let c = &config["config"];
    assert_eq!(c["Entrypoint"], serde_json::json!(["/clusterdns"]), "{c}");
    assert!(
        c.get("Cmd")
            .is_none_or(|v| v.is_null() || v == &serde_json::json!([])),
        "no command: {c}"
    );
    assert_eq!(c["User"], format!("{UID}:{UID}"), "non-root");
    assert!(c.get("Shell").is_none(), "{c}");

    // The layer's files: exactly the binary and the CA bundle.
    let listing = run_ok(Command::new("tar").arg("-tvf").arg(&layer));
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
    let rootfs = extract(dir.path(), &layer, &[]);
    let bin = rootfs.join("clusterdns");
    let headers = run_ok(Command::new("readelf").arg("-lhd").arg(&bin));
    assert!(
        !headers.contains("program interpreter"),
        "static: {headers}"
    );
    assert!(!headers.contains("(NEEDED)"), "static: {headers}");
    let caps = run_ok(Command::new("getcap").arg(&bin));
    assert!(caps.contains("cap_net_bind_service=ep"), "{caps:?}");

    // Run it as the image would: uid 65532, port 53, in a namespace of ours.
    let Some(ns) = netns("") else {
        if std::env::var("CLUSTERDNS_REQUIRE_IMAGE").is_ok_and(|v| v == "1") {
            panic!("cannot create a network namespace (CLUSTERDNS_REQUIRE_IMAGE=1)");
        }
        return;
    };
    // uid 65532 must reach the binary and the Corefile.
    for p in [dir.path(), rootfs.as_path()] {
        run_ok(Command::new("chmod").arg("0755").arg(p));
    }
    let corefile = dir.path().join("Corefile");
    std::fs::write(
        &corefile,
        ".:53 {\n    bind 127.0.0.1\n    hosts {\n        192.0.2.53 image.test\n    }\n}\n",
    )
    .expect("write Corefile");
    run_ok(Command::new("chmod").arg("0644").arg(&corefile));
    let log = dir.path().join("server.log");
    let mut server = ns.command("setpriv");
    server
        .args([
            &format!("--reuid={UID}"),
            &format!("--regid={UID}"),
            "--clear-groups",
            "--inh-caps=-all",
            "--",
        ])
        .arg(&bin)
        .arg("-conf")
        .arg(&corefile);
    let mut server = Killed::spawn(&mut server, &log, "the image's binary");
    let deadline = Instant::now() + Duration::from_secs(20);
    let answer = loop {
        if let Some(text) = dig_image_test(&ns, "127.0.0.1") {
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

/// The node-cache variant (`scripts/image --node-cache`,
/// `$CLUSTERDNS_NODE_CACHE_IMAGE`): its config is node-local-dns's image's
/// (`/clusterdns node-cache` as root, PATH set), its layer holds the binary,
/// `nft` and both iptables backends with their libraries, and no shell; and
/// the agent run from that layer (chroot, in a network namespace of this
/// test, `/proc` mounted as a runtime would) makes its interception with the
/// image's own tools in both modes, answers on the local address, and takes
/// the interception down again on SIGTERM.
#[test]
fn node_cache_image_makes_its_rules_with_its_own_tools() {
    let Some(archive) = std::env::var_os("CLUSTERDNS_NODE_CACHE_IMAGE").map(PathBuf::from) else {
        return skip(
            "CLUSTERDNS_NODE_CACHE_IMAGE is not set (build it with scripts/image --node-cache)",
        );
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let (config, layer) = unpack(&archive, dir.path(), "localhost/clusterdns-node-cache:");
    let c = &config["config"];
    assert_eq!(
        c["Entrypoint"],
        serde_json::json!(["/clusterdns", "node-cache"]),
        "{c}"
    );
    assert_eq!(c["User"], "0:0", "root, as node-local-dns's image: {c}");
    assert!(
        c["Env"].as_array().is_some_and(|e| e
            .iter()
            .any(|v| v.as_str().is_some_and(|v| v.starts_with("PATH=/usr/sbin")))),
        "{c}"
    );
    let listing = run_ok(Command::new("tar").arg("-tf").arg(&layer));
    let files: Vec<&str> = listing
        .lines()
        .map(|f| f.trim_start_matches("./"))
        .collect();
    for want in [
        "clusterdns",
        "usr/sbin/nft",
        "usr/sbin/xtables-nft-multi",
        "usr/sbin/xtables-legacy-multi",
        "usr/sbin/iptables-nft",
        "usr/sbin/ip6tables-legacy-save",
        "lib64/ld-linux-x86-64.so.2",
        "usr/lib/x86_64-linux-gnu/xtables/libxt_comment.so",
        "tmp/",
    ] {
        assert!(files.contains(&want), "{want} missing:\n{listing}");
    }
    for f in &files {
        let base = f.trim_end_matches('/').rsplit('/').next().unwrap_or("");
        assert!(
            !matches!(base, "sh" | "bash" | "dash" | "ash" | "busybox"),
            "a shell: {f}"
        );
    }
    let rootfs = extract(dir.path(), &layer, &[]);
    // What a container runtime adds: the /proc mount point, and the
    // DaemonSet's ConfigMap (here a template that answers by itself).
    std::fs::create_dir(rootfs.join("proc")).expect("mkdir proc");
    std::fs::create_dir_all(rootfs.join("etc/coredns")).expect("mkdir");
    std::fs::write(
        rootfs.join("etc/coredns/Corefile.base"),
        ".:53 {\n    bind 169.254.20.10\n    hosts {\n        192.0.2.53 image.test\n    }\n    health 169.254.20.10:8080\n}\n",
    )
    .expect("write the template");

    let Some(ns) = netns("-nc") else {
        if std::env::var("CLUSTERDNS_REQUIRE_IMAGE").is_ok_and(|v| v == "1") {
            panic!("cannot create a network namespace (CLUSTERDNS_REQUIRE_IMAGE=1)");
        }
        return;
    };
    let ours = "NodeLocal DNS Cache: skip conntrack";
    // The interception as the host's own tools see it in the namespace.
    let installed = |mode: &str| -> bool {
        match mode {
            "crashsafe" => ns
                .command("nft")
                .args(["list", "table", "ip", "clusterdns_nodecache"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success()),
            _ => ["iptables-nft-save", "iptables-legacy-save"]
                .iter()
                .any(|save| {
                    ns.command(save)
                        .stdin(Stdio::null())
                        .output()
                        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(ours))
                }),
        }
    };
    for mode in ["crashsafe", "iptables"] {
        let log = dir.path().join(format!("{mode}.log"));
        let script = format!(
            "mount -t proc proc {root}/proc && exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
             chroot {root} /clusterdns node-cache -localip 169.254.20.10 -conf /etc/Corefile \
             -interception {mode}",
            root = rootfs.display()
        );
        // A mount namespace of its own, for the image's /proc.
        let private = ["--mount", "--propagation", "private", "sh", "-c", &script];
        let mut unshare = ns.command("unshare");
        unshare.args(private);
        let mut agent = Killed::spawn(&mut unshare, &log, "the agent");
        let text = || std::fs::read_to_string(&log).unwrap_or_default();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let answer = dig_image_test(&ns, "169.254.20.10");
            if answer.as_deref() == Some("192.0.2.53") && installed(mode) {
                break;
            }
            if let Ok(Some(status)) = agent.0.try_wait() {
                panic!("{mode}: the agent exited ({status}):\n{}", text());
            }
            assert!(
                Instant::now() < deadline,
                "{mode}: no answer on 169.254.20.10 with the interception in place \
                 (dig: {answer:?}, interception: {}):\n{}",
                installed(mode),
                text()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        // SIGTERM: the agent takes the interception down with the image's tools.
        run_ok(Command::new("kill").args(["-TERM", &agent.0.id().to_string()]));
        let deadline = Instant::now() + Duration::from_secs(20);
        while agent.0.try_wait().ok().flatten().is_none() {
            assert!(
                Instant::now() < deadline,
                "{mode}: still running:\n{}",
                text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(!installed(mode), "{mode}: left after SIGTERM:\n{}", text());
    }
}

/// The digest of the one manifest an OCI archive's index names.
fn manifest_digest(archive: &Path) -> String {
    let index = run_ok(
        Command::new("tar")
            .arg("-xOf")
            .arg(archive)
            .arg("index.json"),
    );
    let index: Value = serde_json::from_str(&index).expect("index.json");
    index["manifests"][0]["digest"]
        .as_str()
        .unwrap_or_else(|| panic!("no manifest digest: {index}"))
        .to_string()
}

/// The SBOM `scripts/image` writes beside an archive: NAME.oci.tar's is
/// NAME.cdx.json.
fn sbom_of(archive: &Path) -> PathBuf {
    let name = archive.to_str().expect("utf-8 path");
    PathBuf::from(format!(
        "{}.cdx.json",
        name.strip_suffix(".oci.tar").unwrap_or(name)
    ))
}

/// What `cargo tree` says the binary links, as `name@version`: the
/// `clusterdns` package's normal dependencies for the image's target, the
/// package included.
fn linked_crates() -> std::collections::BTreeSet<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let tree = run_ok(Command::new("cargo").current_dir(&root).args([
        "tree",
        "--locked",
        "-p",
        "clusterdns",
        "-e",
        "normal",
        "--target",
        "x86_64-unknown-linux-gnu",
        "--prefix",
        "none",
    ]));
    tree.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let name = w.next()?;
            let version = w.next()?.strip_prefix('v')?;
            Some(format!("{name}@{version}"))
        })
        .collect()
}

/// `sbom` against CycloneDX 1.5's JSON schema, by CycloneDX's own Python
/// library (`$CLUSTERDNS_CYCLONEDX_PYTHON`, installed by
/// scripts/install-deps; without it this check is skipped with a message).
fn validate_cyclonedx(sbom: &Path) {
    let Some(python) = std::env::var_os("CLUSTERDNS_CYCLONEDX_PYTHON") else {
        return skip(
            "CLUSTERDNS_CYCLONEDX_PYTHON is not set: the SBOM is not checked against CycloneDX's schema",
        );
    };
    let out = run_ok(
        Command::new(python)
            .arg("-c")
            .arg(
                "import sys\n\
         from cyclonedx.schema import SchemaVersion\n\
         from cyclonedx.validation.json import JsonStrictValidator\n\
         e = JsonStrictValidator(SchemaVersion.V1_5).validate_str(open(sys.argv[1]).read())\n\
         print('valid' if e is None else str(e).splitlines()[0])\n",
            )
            .arg(sbom),
    );
    assert_eq!(out.trim(), "valid", "{}: not CycloneDX 1.5", sbom.display());
}

/// Each image's SBOM (CycloneDX, beside its archive) names the image by
/// its manifest digest and lists what it holds: exactly the crates
/// `cargo tree` says the binary links, each from crates.io with its licence
/// and Cargo.lock's SHA-256, and every other file of the layer under the
/// Debian package whose version dpkg reports.
#[test]
fn the_sboms_list_what_the_images_hold() {
    let linked = linked_crates();
    assert!(linked.len() > 50, "{linked:?}");
    for (var, prefix) in [
        ("CLUSTERDNS_IMAGE", "localhost/clusterdns:"),
        (
            "CLUSTERDNS_NODE_CACHE_IMAGE",
            "localhost/clusterdns-node-cache:",
        ),
    ] {
        let Some(archive) = std::env::var_os(var).map(PathBuf::from) else {
            skip(&format!(
                "{var} is not set (build the image with scripts/image)"
            ));
            continue;
        };
        let bom = json(&sbom_of(&archive));
        validate_cyclonedx(&sbom_of(&archive));
        assert_eq!(bom["bomFormat"], "CycloneDX");
        assert_eq!(bom["specVersion"], "1.5");
        let digest = manifest_digest(&archive);
        let subject = &bom["metadata"]["component"];
        assert_eq!(subject["type"], "container");
        assert_eq!(
            Some(digest.trim_start_matches("sha256:")),
            subject["hashes"][0]["content"].as_str(),
            "{var}: the SBOM names another image"
        );
        let components = bom["components"].as_array().expect("components");
        let crates: std::collections::BTreeSet<String> = components
            .iter()
            .filter(|c| {
                c["bom-ref"]
                    .as_str()
                    .is_some_and(|r| r.starts_with("crate:"))
            })
            .map(|c| {
                format!(
                    "{}@{}",
                    c["name"].as_str().unwrap_or(""),
                    c["version"].as_str().unwrap_or("")
                )
            })
            .collect();
        assert_eq!(
            crates, linked,
            "{var}: crates in the SBOM and in `cargo tree`"
        );
        for c in components {
            let purl = c["purl"].as_str().unwrap_or("");
            if purl.starts_with("pkg:cargo/") {
                assert!(c["licenses"][0]["expression"].is_string(), "{c}");
                let sha = c["hashes"][0]["content"].as_str().unwrap_or("");
                assert!(
                    sha.len() == 64 && sha.chars().all(|x| x.is_ascii_hexdigit()),
                    "{c}"
                );
            }
        }

        // The layer's other files, each under its package.
        let dir = tempfile::tempdir().expect("tempdir");
        let (_config, layer) = unpack(&archive, dir.path(), prefix);
        let listing = run_ok(Command::new("tar").arg("-tvf").arg(&layer));
        let files: std::collections::BTreeSet<String> = listing
            .lines()
            .filter(|l| l.starts_with('-'))
            .filter_map(|l| l.split_whitespace().last())
            .map(|f| format!("/{}", f.trim_start_matches("./")))
            .filter(|f| f != "/clusterdns")
            .collect();
        let mut covered = std::collections::BTreeSet::new();
        for c in components.iter().filter(|c| {
            c["purl"]
                .as_str()
                .is_some_and(|p| p.starts_with("pkg:deb/debian/"))
        }) {
            let name = c["name"].as_str().expect("name");
            let installed =
                run_ok(Command::new("dpkg-query").args(["-W", "-f", "${Version}", name]));
            assert_eq!(c["version"].as_str(), Some(installed.as_str()), "{c}");
            for p in c["properties"].as_array().expect("properties") {
                assert_eq!(p["name"], "clusterdns:file", "{p}");
                covered.insert(p["value"].as_str().expect("file").to_string());
            }
        }
        assert_eq!(covered, files, "{var}: files in the SBOM and in the layer");
    }
}

/// The image build is reproducible: the binary of `$CLUSTERDNS_IMAGE`, put
/// into an image again by `scripts/image` from the same commit, gives the
/// same manifest digest and the same SBOM, byte for byte.
#[test]
fn two_builds_of_one_commit_give_one_digest() {
    let Some(archive) = std::env::var_os("CLUSTERDNS_IMAGE").map(PathBuf::from) else {
        return skip("CLUSTERDNS_IMAGE is not set (build the image with scripts/image)");
    };
    let root = std::fs::read_to_string("/proc/self/status")
        .is_ok_and(|s| s.lines().any(|l| l.starts_with("Uid:\t0\t")));
    if !root {
        return skip("scripts/image needs root (buildah's store, a file capability)");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (_config, layer) = unpack(&archive, dir.path(), "localhost/clusterdns:");
    let rootfs = extract(dir.path(), &layer, &["clusterdns"]);
    let again = dir.path().join("again.oci.tar");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    run_ok(
        Command::new(root.join("scripts/image"))
            .args(["--profile", "dev", "--binary"])
            .arg(rootfs.join("clusterdns"))
            .arg("--out")
            .arg(&again),
    );
    assert_eq!(
        manifest_digest(&again),
        manifest_digest(&archive),
        "a second build of this commit gave another image (or {} was built from another commit: build it again)",
        archive.display()
    );
    let sbom = |a: &Path| std::fs::read(sbom_of(a)).expect("SBOM");
    assert!(sbom(&again) == sbom(&archive), "the SBOMs differ");
}
