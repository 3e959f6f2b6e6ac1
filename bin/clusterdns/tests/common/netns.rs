//! Network namespaces for lab tests (shared/reference/nodelocal-netns-lab.md):
//! namespaces deleted on drop, veth links between them, commands and
//! threads run inside one. Every packet stays in namespaces the test made.

use std::process::Command;

/// Runs `args` and returns (success, stdout then stderr).
pub fn run(args: &[&str]) -> (bool, String) {
    let out = match Command::new(args[0]).args(&args[1..]).output() {
        Ok(out) => out,
        Err(e) => return (false, format!("{}: {e}", args[0])),
    };
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// Runs `cmd` with `sh -c`; panics with its output when it fails.
pub fn must(cmd: &str) {
    let (ok, out) = run(&["sh", "-c", cmd]);
    assert!(ok, "{cmd}: {out}");
}

/// A network namespace, deleted (with its interfaces) on drop, with the
/// host ends of its links to the host ([`Netns::link_host`]) and its
/// `/etc/netns/NAME` files ([`Netns::write_etc`]).
#[derive(Debug)]
pub struct Netns {
    pub name: String,
    host_links: Vec<String>,
}

impl Netns {
    /// `ip netns add NAME` with `lo` up; `None` (after saying why, or a
    /// failure with `CLUSTERDNS_REQUIRE_RIG=1`) where namespaces cannot be
    /// made (not root).
    pub fn new(name: &str) -> Option<Netns> {
        if !clusterdns_test_support::netns_add(name) {
            return None;
        }
        let ns = Netns {
            name: name.into(),
            host_links: Vec::new(),
        };
        ns.sh("ip link set lo up");
        Some(ns)
    }

    /// Two namespaces, `{a}N` and `{b}N` with N from this process's id
    /// (two runs at once do not meet); `None` as for [`Netns::new`].
    pub fn pair(a: &str, b: &str) -> Option<(Netns, Netns)> {
        let tag = std::process::id() % 10_000;
        Some((
            Netns::new(&format!("{a}{tag}"))?,
            Netns::new(&format!("{b}{tag}"))?,
        ))
    }

    /// Runs `cmd` (`sh -c`) inside; panics when it fails.
    pub fn sh(&self, cmd: &str) {
        must(&format!("ip netns exec {} sh -c '{cmd}'", self.name));
    }

    /// Runs `cmd` (`sh -c`) inside: (success, output).
    pub fn try_sh(&self, cmd: &str) -> (bool, String) {
        run(&["ip", "netns", "exec", &self.name, "sh", "-c", cmd])
    }

    /// The words to put before a program to run it inside.
    pub fn exec(&self) -> [&str; 4] {
        ["ip", "netns", "exec", &self.name]
    }

    /// `program` to run inside (`ip netns exec NAME program`), stdin from
    /// /dev/null.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name])
            .arg(program)
            .stdin(std::process::Stdio::null());
        c
    }

    /// `argv` run inside to its end: its output.
    pub fn output(&self, argv: &[&str]) -> std::process::Output {
        self.command(argv[0])
            .args(&argv[1..])
            .output()
            .expect("ip netns exec")
    }

    /// Links `self` (`dev`, `addr/prefix`) to `peer` (`peer_dev`,
    /// `peer_addr/prefix`) with a veth pair, both ends up.
    pub fn link(&self, dev: &str, addr: &str, peer: &Netns, peer_dev: &str, peer_addr: &str) {
        let (a, b) = (&self.name, &peer.name);
        must(&format!(
            "ip -n {a} link add {dev} type veth peer name {peer_dev} netns {b} && \
             ip -n {a} addr add {addr} dev {dev} && ip -n {a} link set {dev} up && \
             ip -n {b} addr add {peer_addr} dev {peer_dev} && ip -n {b} link set {peer_dev} up"
        ));
    }

    /// Links the host (`host_dev`, `host_addr/prefix`) to `self` (`dev`,
    /// `addr/prefix`) with a veth pair, both ends up, as a Pod's link to
    /// its node; the host end is deleted on drop. A host end of that name
    /// left by a killed run goes first.
    pub fn link_host(&mut self, host_dev: &str, host_addr: &str, dev: &str, addr: &str) {
        let _ = run(&["ip", "link", "del", host_dev]);
        let n = &self.name;
        must(&format!(
            "ip link add {host_dev} type veth peer name {dev} netns {n} && \
             ip addr add {host_addr} dev {host_dev} && ip link set {host_dev} up && \
             ip -n {n} addr add {addr} dev {dev} && ip -n {n} link set {dev} up"
        ));
        self.host_links.push(host_dev.into());
    }

    /// kube-proxy's iptables mode, one rule: `ipt` (`iptables`,
    /// `ip6tables-legacy`...) DNATs `proto` packets to `dest` (`ADDR/BITS`)
    /// port `dport` arriving through `chain` (`PREROUTING`, `OUTPUT`) of the
    /// nat table to `to` (`ADDR:PORT`, `[ADDR6]:PORT`).
    pub fn dnat(&self, ipt: &str, chain: &str, proto: &str, dest: &str, dport: u16, to: &str) {
        self.sh(&format!(
            "{ipt} -t nat -A {chain} -d {dest} -p {proto} --dport {dport} -j DNAT --to-destination {to}"
        ));
    }

    /// The namespace's `/etc/netns/NAME`: what `ip netns exec` binds over
    /// `/etc` for the programs run inside.
    pub fn etc(&self) -> std::path::PathBuf {
        std::path::Path::new("/etc/netns").join(&self.name)
    }

    /// Writes `files` (name, text) into [`Netns::etc`]; removed on drop.
    pub fn write_etc(&self, files: &[(&str, &str)]) {
        let etc = self.etc();
        std::fs::create_dir_all(&etc).expect("/etc/netns/NAME");
        for (file, text) in files {
            std::fs::write(etc.join(file), text).expect("write /etc/netns/NAME file");
        }
    }

    /// [`Netns::write_etc`] of a Pod of Kubernetes namespace `namespace`:
    /// `resolv.conf` (`nameserver`, the Pod's search path, `options`),
    /// `hosts` (localhost only) and `nsswitch.conf` (files, then dns).
    pub fn write_pod_etc(&self, nameserver: &str, namespace: &str, options: &str) {
        let resolv = format!(
            "nameserver {nameserver}\nsearch {namespace}.svc.cluster.local svc.cluster.local cluster.local\noptions {options}\n"
        );
        self.write_etc(&[
            ("resolv.conf", &resolv),
            ("hosts", "127.0.0.1 localhost\n"),
            ("nsswitch.conf", "hosts: files dns\n"),
        ]);
    }

    /// Runs `f` on a thread of its own moved into this namespace.
    pub fn within<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let ns = std::fs::File::open(format!("/run/netns/{}", self.name)).expect("open netns");
        std::thread::spawn(move || {
            use std::os::fd::AsRawFd;
            #[allow(unsafe_code)]
            // SAFETY: setns with an open namespace file moves only this thread.
            let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns");
            f()
        })
        .join()
        .expect("thread in the namespace")
    }

    /// The status of `GET path` on `addr` from inside (HTTP/1.0), 0 when
    /// the connection fails.
    pub fn http_status(&self, addr: std::net::SocketAddr, path: &str) -> u16 {
        let path = path.to_string();
        self.within(move || clusterdns_test_support::http_get(addr, &path).status)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.etc());
        // Only when no other test's namespace still has files there.
        let _ = std::fs::remove_dir("/etc/netns");
        for dev in &self.host_links {
            let _ = run(&["ip", "link", "del", dev]);
        }
        let _ = run(&["ip", "netns", "del", &self.name]);
    }
}

/// A Pod: a network namespace linked to the host by a veth pair, the host
/// end 10.252.S.1/30 its nameserver, its own end 10.252.S.2/30 its Pod IP;
/// `/etc/netns/NAME` holds a Pod's `resolv.conf` (the Pod's namespace's
/// search path, ndots:5), so programs run through [`PodNetns::run`] read it.
/// Removed (files, link, namespace) on drop.
#[derive(Debug)]
pub struct PodNetns {
    pub netns: Netns,
    s: u8,
}

impl PodNetns {
    /// A Pod of Kubernetes namespace `namespace`, named after `tag` and this
    /// process; `s` picks its /30. `None` where namespaces cannot be made.
    pub fn create(tag: &str, namespace: &str, s: u8) -> Option<PodNetns> {
        let id = std::process::id() % 100_000;
        let mut netns = Netns::new(&format!("{tag}g-{id}"))?;
        netns.link_host(
            &format!("{tag}h{id}"),
            &format!("10.252.{s}.1/30"),
            &format!("{tag}n{id}"),
            &format!("10.252.{s}.2/30"),
        );
        let pod = PodNetns { netns, s };
        pod.netns
            .write_pod_etc(&pod.nameserver().to_string(), namespace, "ndots:5");
        Some(pod)
    }

    /// The Pod's address (its end of the link).
    pub fn pod_ip(&self) -> std::net::Ipv4Addr {
        std::net::Ipv4Addr::new(10, 252, self.s, 2)
    }

    /// Its nameserver (the host end of the link).
    pub fn nameserver(&self) -> std::net::Ipv4Addr {
        std::net::Ipv4Addr::new(10, 252, self.s, 1)
    }

    /// `getent ahostsv4 NAME` in the namespace: exit status and output.
    pub fn getent(&self, name: &str) -> String {
        self.run(&["getent", "ahostsv4", name])
    }

    /// A program in the namespace: exit status and stdout.
    pub fn run(&self, argv: &[&str]) -> String {
        let out = self.netns.output(argv);
        format!(
            "{} {}",
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout)
        )
    }
}

/// `tests/clients/getaddrinfo.c` linked statically against musl
/// (`musl-gcc`, from musl-tools), in `dir`; `None` without musl-gcc.
pub fn musl_client(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/getaddrinfo.c");
    let out = dir.join("getaddrinfo-musl");
    let built = Command::new("musl-gcc")
        .args(["-static", "-O2", "-o"])
        .arg(&out)
        .arg(&src)
        .status();
    match built {
        Ok(st) if st.success() => Some(out),
        Ok(st) => panic!("musl-gcc failed: {st}"),
        Err(_) => None,
    }
}

/// Starts `program` (named `label`) on `corefile`, which binds the Pod's
/// nameserver on port 53 with `log` on; waits until `names[0]` resolves in
/// the Pod (the server has synced); then looks each name up with glibc
/// (`getent ahostsv4`) and, given `musl`, the musl client. One line per
/// lookup: client, name, exit status, output and how many queries the
/// server logged for it. The server is stopped before returning.
pub fn pod_lookups(
    pod: &PodNetns,
    dir: &std::path::Path,
    label: &str,
    program: &std::path::Path,
    corefile: &str,
    names: &[String],
    musl: Option<&str>,
) -> Vec<String> {
    use std::time::{Duration, Instant};
    let path = dir.join(format!("{label}.Corefile"));
    std::fs::write(&path, corefile).expect("Corefile");
    let log = dir.join(format!("{label}.log"));
    let args = vec!["-conf".to_string(), path.display().to_string()];
    let mut server =
        clusterdns_test_support::ServerProcess::spawn(label, program, &args, &log).expect("start");
    server
        .wait_listening(
            std::net::SocketAddr::from((pod.nameserver(), 53)),
            Duration::from_secs(30),
        )
        .expect("listening");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !pod.getent(&names[0]).starts_with("0 ") {
        assert!(Instant::now() < deadline, "{label}: not synced");
        std::thread::sleep(Duration::from_millis(200));
    }
    let marker = format!("[INFO] {}:", pod.pod_ip());
    // The queries the client sent for `name`: log lines from the Pod for
    // `name.` or `name.SEARCH.`. CoreDNS also logs, from the client's
    // address, the lookup of an ExternalName's target that its kubernetes
    // plugin sends through the server itself; that never came from the
    // client, and its name is the target's.
    let logged = |name: &str| {
        // The log line of the last query is written after its reply.
        std::thread::sleep(Duration::from_millis(300));
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let asked = format!("{}.", name.to_ascii_lowercase());
        text.lines()
            .filter(|l| l.contains(&marker))
            .filter(|l| {
                // `... - ID "TYPE CLASS NAME proto size do bufsize" ...`
                l.split('"')
                    .nth(1)
                    .and_then(|q| q.split_whitespace().nth(2))
                    .is_some_and(|q| q.to_ascii_lowercase().starts_with(&asked))
            })
            .count()
    };
    let mut results = Vec::new();
    for name in names {
        let before = logged(name);
        let out = pod.getent(name);
        results.push(format!(
            "glibc {name}: {out} queries={}",
            logged(name) - before
        ));
        if let Some(musl) = musl {
            let before = logged(name);
            let out = pod.run(&[musl, name]);
            results.push(format!(
                "musl {name}: {out} queries={}",
                logged(name) - before
            ));
        }
    }
    drop(server);
    results
}
