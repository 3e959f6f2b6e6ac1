//! The differential harness: the reference CoreDNS and clusterdns (or any two
//! servers) on the same Corefile, the same queries to both, and every
//! difference in the responses.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::dns::{Outcome, Query, Response, ResponseEdns, Rr, Transport, exchange, rcode_name};
use crate::process::{ScratchDir, ServerProcess, free_port};
use crate::rig::{Rig, workspace_root};

/// Environment variable naming the clusterdns binary to test.
pub const CLUSTERDNS_BIN_ENV: &str = "CLUSTERDNS_BIN";

/// How TTLs are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TtlMode {
    /// TTLs must be equal.
    Exact,
    /// TTLs may differ by at most this many seconds (caches counting down).
    Within(u32),
    /// TTLs are not compared.
    Ignore,
}

impl TtlMode {
    fn agrees(self, a: u32, b: u32) -> bool {
        match self {
            TtlMode::Exact => a == b,
            TtlMode::Within(d) => a.abs_diff(b) <= d,
            TtlMode::Ignore => true,
        }
    }
}

/// A message section.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Section {
    /// Answer.
    Answer,
    /// Authority.
    Authority,
    /// Additional (without OPT).
    Additional,
}

impl fmt::Display for Section {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Section::Answer => "answer",
            Section::Authority => "authority",
            Section::Additional => "additional",
        })
    }
}

/// One difference between the reference's and the candidate's response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Difference {
    /// Different kinds of outcome (a response vs a timeout, say), or two
    /// failures that differ.
    Outcome {
        /// The reference's outcome.
        reference: String,
        /// The candidate's outcome.
        candidate: String,
    },
    /// Different message ids.
    Id {
        /// The reference's id.
        reference: u16,
        /// The candidate's id.
        candidate: u16,
    },
    /// Different opcodes.
    Opcode {
        /// The reference's opcode.
        reference: u8,
        /// The candidate's opcode.
        candidate: u8,
    },
    /// Different rcodes (extended rcodes included).
    Rcode {
        /// The reference's rcode.
        reference: String,
        /// The candidate's rcode.
        candidate: String,
    },
    /// A header flag differs.
    Flag {
        /// `qr`, `aa`, `tc`, `rd`, `ra`, `z`, `ad` or `cd`.
        flag: &'static str,
        /// The reference's value.
        reference: bool,
        /// The candidate's value.
        candidate: bool,
    },
    /// The question sections differ.
    Question {
        /// The reference's question section.
        reference: Vec<String>,
        /// The candidate's question section.
        candidate: Vec<String>,
    },
    /// The OPT records differ (presence, size, version, flags or options).
    Edns {
        /// The reference's OPT record.
        reference: Option<ResponseEdns>,
        /// The candidate's OPT record.
        candidate: Option<ResponseEdns>,
    },
    /// The same record in both, with different TTLs.
    Ttl {
        /// Where.
        section: Section,
        /// The record without TTL (`name class type rdata`).
        record: String,
        /// The reference's TTL.
        reference: u32,
        /// The candidate's TTL.
        candidate: u32,
    },
    /// A record only the reference sent.
    OnlyInReference {
        /// Where.
        section: Section,
        /// The record.
        record: Rr,
    },
    /// A record only the candidate sent.
    OnlyInCandidate {
        /// Where.
        section: Section,
        /// The record.
        record: Rr,
    },
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Difference::Outcome {
                reference,
                candidate,
            } => {
                write!(f, "outcome: reference {reference}, candidate {candidate}")
            }
            Difference::Id {
                reference,
                candidate,
            } => write!(f, "id: reference {reference}, candidate {candidate}"),
            Difference::Opcode {
                reference,
                candidate,
            } => {
                write!(f, "opcode: reference {reference}, candidate {candidate}")
            }
            Difference::Rcode {
                reference,
                candidate,
            } => {
                write!(f, "rcode: reference {reference}, candidate {candidate}")
            }
            Difference::Flag {
                flag,
                reference,
                candidate,
            } => write!(
                f,
                "flag {flag}: reference {reference}, candidate {candidate}"
            ),
            Difference::Question {
                reference,
                candidate,
            } => {
                write!(
                    f,
                    "question: reference {reference:?}, candidate {candidate:?}"
                )
            }
            Difference::Edns {
                reference,
                candidate,
            } => {
                write!(f, "edns: reference {reference:?}, candidate {candidate:?}")
            }
            Difference::Ttl {
                section,
                record,
                reference,
                candidate,
            } => write!(
                f,
                "{section} ttl of {record}: reference {reference}, candidate {candidate}"
            ),
            Difference::OnlyInReference { section, record } => {
                write!(f, "{section}: only in reference: {record}")
            }
            Difference::OnlyInCandidate { section, record } => {
                write!(f, "{section}: only in candidate: {record}")
            }
        }
    }
}

/// The result of sending one query to both servers.
#[derive(Debug, Clone)]
pub struct Comparison {
    /// The query, as text.
    pub query: String,
    /// What the reference sent back.
    pub reference: Outcome,
    /// What the candidate sent back.
    pub candidate: Outcome,
    /// Every difference (empty when they agree).
    pub differences: Vec<Difference>,
}

impl Comparison {
    /// Whether the two responses agree.
    pub fn agree(&self) -> bool {
        self.differences.is_empty()
    }

    /// Panics with the full report unless the responses agree.
    #[track_caller]
    pub fn assert_agree(&self) {
        assert!(self.agree(), "responses differ\n{self}");
    }
}

impl fmt::Display for Comparison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "query: {}", self.query)?;
        if self.differences.is_empty() {
            writeln!(f, "  agree: {}", self.reference.summary())?;
        } else {
            for d in &self.differences {
                writeln!(f, "  - {d}")?;
            }
        }
        for (who, o) in [
            ("reference", &self.reference),
            ("candidate", &self.candidate),
        ] {
            match o {
                Outcome::Response(r) => {
                    writeln!(f, "  {who}:")?;
                    for line in r.to_string().lines() {
                        writeln!(f, "    {line}")?;
                    }
                }
                other => writeln!(f, "  {who}: {}", other.summary())?,
            }
        }
        Ok(())
    }
}

/// Compares two outcomes.
pub fn compare(reference: &Outcome, candidate: &Outcome, ttl: TtlMode) -> Vec<Difference> {
    let (r, c) = match (reference, candidate) {
        (Outcome::Response(r), Outcome::Response(c)) => (r, c),
        (Outcome::Timeout, Outcome::Timeout) | (Outcome::Io(_), Outcome::Io(_)) => {
            return Vec::new();
        }
        (Outcome::Malformed { bytes: a, .. }, Outcome::Malformed { bytes: b, .. }) if a == b => {
            return Vec::new();
        }
        _ => {
            return vec![Difference::Outcome {
                reference: reference.summary(),
                candidate: candidate.summary(),
            }];
        }
    };
    let mut out = Vec::new();
    if r.id != c.id {
        out.push(Difference::Id {
            reference: r.id,
            candidate: c.id,
        });
    }
    if r.opcode != c.opcode {
        out.push(Difference::Opcode {
            reference: r.opcode,
            candidate: c.opcode,
        });
    }
    if r.rcode != c.rcode {
        out.push(Difference::Rcode {
            reference: rcode_name(r.rcode),
            candidate: rcode_name(c.rcode),
        });
    }
    for ((flag, a), (_, b)) in r.flags.all().into_iter().zip(c.flags.all()) {
        if a != b {
            out.push(Difference::Flag {
                flag,
                reference: a,
                candidate: b,
            });
        }
    }
    if r.question != c.question {
        out.push(Difference::Question {
            reference: r.question.clone(),
            candidate: c.question.clone(),
        });
    }
    if r.edns != c.edns {
        out.push(Difference::Edns {
            reference: r.edns.clone(),
            candidate: c.edns.clone(),
        });
    }
    for (section, a, b) in [
        (Section::Answer, &r.answer, &c.answer),
        (Section::Authority, &r.authority, &c.authority),
        (Section::Additional, &r.additional, &c.additional),
    ] {
        if section == Section::Additional && truncation_follows_order(r, c) {
            continue;
        }
        compare_section(section, a, b, ttl, &mut out);
    }
    out
}

/// Whether both replies were truncated with the same answers in another
/// order: truncation keeps the additional records up to the first that
/// does not fit, in the answers' order, so which survive follows that
/// order. CoreDNS's order of a headless Service's records is Go's map
/// iteration over its EndpointSlices, new at every query; ours is fixed.
/// The additional sections of two such replies are not compared (the
/// answers, flags and sizes' effect, TC, still are).
fn truncation_follows_order(r: &Response, c: &Response) -> bool {
    let keys = |rrs: &[Rr]| {
        rrs.iter()
            .map(|rr| normalized(rr).key())
            .collect::<Vec<_>>()
    };
    let (ka, kb) = (keys(&r.answer), keys(&c.answer));
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    r.flags.tc && c.flags.tc && ka != kb && sorted(ka) == sorted(kb)
}

/// The record with the parts that are never compared blanked: the SOA serial.
fn normalized(rr: &Rr) -> Rr {
    let mut rr = rr.clone();
    if rr.rtype == "SOA" {
        let mut fields: Vec<&str> = rr.rdata.split_whitespace().collect();
        if fields.len() == 7 {
            fields[2] = "<serial>";
            rr.rdata = fields.join(" ");
        }
    }
    rr
}

/// Compares two sections as multisets of records; records equal but for
/// their TTL are reported as TTL differences.
fn compare_section(section: Section, a: &[Rr], b: &[Rr], ttl: TtlMode, out: &mut Vec<Difference>) {
    let group = |rrs: &[Rr]| {
        let mut m: BTreeMap<String, Vec<Rr>> = BTreeMap::new();
        for rr in rrs {
            let n = normalized(rr);
            m.entry(n.key()).or_default().push(n);
        }
        for v in m.values_mut() {
            v.sort_by_key(|rr| rr.ttl);
        }
        m
    };
    let (ga, gb) = (group(a), group(b));
    let empty = Vec::new();
    let keys: std::collections::BTreeSet<&String> = ga.keys().chain(gb.keys()).collect();
    for key in keys {
        let ra = ga.get(key).unwrap_or(&empty);
        let rb = gb.get(key).unwrap_or(&empty);
        for (x, y) in ra.iter().zip(rb) {
            if !ttl.agrees(x.ttl, y.ttl) {
                out.push(Difference::Ttl {
                    section,
                    record: key.clone(),
                    reference: x.ttl,
                    candidate: y.ttl,
                });
            }
        }
        for x in ra.iter().skip(rb.len()) {
            out.push(Difference::OnlyInReference {
                section,
                record: x.clone(),
            });
        }
        for y in rb.iter().skip(ra.len()) {
            out.push(Difference::OnlyInCandidate {
                section,
                record: y.clone(),
            });
        }
    }
}

/// A server to start: a program, its arguments and a Corefile template.
///
/// In the template and the arguments, `@PORT@` is the server's DNS port,
/// `@KUBECONFIG@` the rig's kubeconfig, `@DIR@` a scratch directory of this
/// server, `@COREFILE@` the rendered Corefile's path, `@NAME@` the server's
/// name, and every other `@PORT_<X>@` (e.g. `@PORT_READY@`) another free port.
/// When the template uses `@PORT_READY@` (as in `ready 127.0.0.1:@PORT_READY@`)
/// the server only counts as started once `GET /ready` answers 200 there.
#[derive(Debug, Clone)]
pub struct ServerSpec {
    /// A name for reports and logs.
    pub name: String,
    /// The binary.
    pub program: PathBuf,
    /// Arguments (templates).
    pub args: Vec<String>,
    /// The Corefile (template).
    pub corefile: String,
    /// Extra `@KEY@` substitutions.
    pub vars: Vec<(String, String)>,
}

impl ServerSpec {
    /// The reference CoreDNS of the rig, run as `coredns -conf <Corefile>`.
    pub fn coredns(rig: &Rig, corefile_template: &str) -> ServerSpec {
        ServerSpec {
            name: "coredns".into(),
            program: rig.coredns(),
            args: vec!["-conf".into(), "@COREFILE@".into()],
            corefile: corefile_template.into(),
            vars: Vec::new(),
        }
    }

    /// A CoreDNS binary at `program` (see [`crate::reference_coredns`]),
    /// run as `coredns -conf <Corefile>`, without a rig.
    pub fn coredns_at(program: &Path, corefile_template: &str) -> ServerSpec {
        ServerSpec {
            name: "coredns".into(),
            program: program.to_path_buf(),
            args: vec!["-conf".into(), "@COREFILE@".into()],
            corefile: corefile_template.into(),
            vars: Vec::new(),
        }
    }

    /// clusterdns from [`clusterdns_bin`], run as `clusterdns -conf <Corefile>`.
    pub fn clusterdns(corefile_template: &str) -> io::Result<ServerSpec> {
        Ok(ServerSpec::clusterdns_at(
            &clusterdns_bin()?,
            corefile_template,
        ))
    }

    /// clusterdns from the given path (e.g. `env!("CARGO_BIN_EXE_clusterdns")`
    /// in the clusterdns package's own integration tests).
    pub fn clusterdns_at(program: &Path, corefile_template: &str) -> ServerSpec {
        ServerSpec {
            name: "clusterdns".into(),
            program: program.to_path_buf(),
            args: vec!["-conf".into(), "@COREFILE@".into()],
            corefile: corefile_template.into(),
            vars: Vec::new(),
        }
    }

    /// Renames the server (for reports).
    pub fn named(mut self, name: &str) -> ServerSpec {
        self.name = name.into();
        self
    }

    /// Adds a `@KEY@` substitution.
    pub fn var(mut self, key: &str, value: &str) -> ServerSpec {
        self.vars.push((key.into(), value.into()));
        self
    }
}

/// The clusterdns binary to test: `$CLUSTERDNS_BIN`, else the newer of
/// `target/release/clusterdns` and `target/debug/clusterdns` (under
/// `$CARGO_TARGET_DIR` if set).
pub fn clusterdns_bin() -> io::Result<PathBuf> {
    if let Some(p) = std::env::var_os(CLUSTERDNS_BIN_ENV).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{CLUSTERDNS_BIN_ENV}={} does not exist", p.display()),
            ))
        };
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    ["release", "debug"]
        .iter()
        .map(|profile| target.join(profile).join("clusterdns"))
        .filter_map(|p| {
            let t = p.metadata().and_then(|m| m.modified()).ok()?;
            Some((t, p))
        })
        .max()
        .map(|(_, p)| p)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "no clusterdns binary in {}/{{release,debug}}: `cargo build -p clusterdns` or set {CLUSTERDNS_BIN_ENV}",
                    target.display()
                ),
            )
        })
}

/// Replaces every `@KEY@` of `vars` in `template`.
pub fn render(template: &str, vars: &[(String, String)]) -> String {
    let mut s = template.to_string();
    for (k, v) in vars {
        s = s.replace(&format!("@{k}@"), v);
    }
    s
}

/// `@PORT_<X>@` names used in `text`.
fn extra_port_names(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("@PORT_") {
        let tail = &rest[i + 1..];
        match tail.find('@') {
            Some(j)
                if tail[..j]
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_') =>
            {
                let name = tail[..j].to_string();
                if !names.contains(&name) {
                    names.push(name);
                }
                rest = &tail[j + 1..];
            }
            _ => rest = tail,
        }
    }
    names
}

/// A started server.
#[derive(Debug)]
pub struct RunningServer {
    /// Its name.
    pub name: String,
    /// Where it serves DNS.
    pub addr: SocketAddr,
    /// The rendered Corefile.
    pub corefile: String,
    /// Every port given to it, by template name (`PORT`, `PORT_READY`…).
    pub ports: HashMap<String, u16>,
    process: ServerProcess,
    dir: ScratchDir,
}

impl RunningServer {
    /// Starts one server (no rig: `@KUBECONFIG@` stays as it is) and waits
    /// until it listens (and, with `@PORT_READY@`, is ready).
    pub fn start(spec: &ServerSpec) -> io::Result<RunningServer> {
        let mut s = RunningServer::spawn(spec, None)?;
        s.wait_ready(Duration::from_secs(30))?;
        Ok(s)
    }

    fn spawn(spec: &ServerSpec, kubeconfig: Option<&Path>) -> io::Result<RunningServer> {
        let dir = ScratchDir::new(&spec.name)?;
        let port = free_port()?;
        let mut ports = HashMap::from([("PORT".to_string(), port)]);
        let all_text = format!("{}\n{}", spec.corefile, spec.args.join("\n"));
        for name in extra_port_names(&all_text) {
            ports.insert(name, free_port()?);
        }
        let corefile_path = dir.path().join("Corefile");
        let mut vars: Vec<(String, String)> = spec.vars.clone();
        vars.extend(ports.iter().map(|(k, v)| (k.clone(), v.to_string())));
        vars.push(("DIR".into(), dir.path().display().to_string()));
        vars.push(("COREFILE".into(), corefile_path.display().to_string()));
        vars.push(("NAME".into(), spec.name.clone()));
        if let Some(k) = kubeconfig {
            vars.push(("KUBECONFIG".into(), k.display().to_string()));
        }
        let corefile = render(&spec.corefile, &vars);
        std::fs::write(&corefile_path, &corefile)?;
        let args: Vec<String> = spec.args.iter().map(|a| render(a, &vars)).collect();
        let process =
            ServerProcess::spawn(&spec.name, &spec.program, &args, &dir.path().join("log"))?;
        Ok(RunningServer {
            name: spec.name.clone(),
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            corefile,
            ports,
            process,
            dir,
        })
    }

    fn wait_ready(&mut self, timeout: Duration) -> io::Result<()> {
        let start = Instant::now();
        self.process.wait_listening(self.addr, timeout)?;
        // CoreDNS binds its TCP listener before its UDP one: a UDP query
        // right after the TCP connect can meet no socket (refused). Wait
        // for the UDP socket too, a while at most: a server with no UDP
        // listener on the port (TLS alone) starts as before.
        let until = Instant::now() + Duration::from_secs(2);
        while !udp_bound(self.addr.port()) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(&ready) = self.ports.get("PORT_READY") {
            let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, ready));
            loop {
                if http_get_status(addr, "/ready") == Some(200) {
                    break;
                }
                if let Some(status) = self.process.exited() {
                    return Err(io::Error::other(format!(
                        "{} exited ({status}):\n{}",
                        self.name,
                        self.log()
                    )));
                }
                if start.elapsed() > timeout {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "{} not ready on {addr} after {timeout:?}:\n{}",
                            self.name,
                            self.log()
                        ),
                    ));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    }

    /// The end of the server's log.
    pub fn log(&self) -> String {
        self.process.log_tail(8000)
    }

    /// The whole log (stdout and stderr) so far.
    pub fn log_all(&self) -> String {
        std::fs::read_to_string(self.process.log_path()).unwrap_or_default()
    }

    /// The port given for `@NAME@` (`PORT`, `PORT_READY`…).
    pub fn port(&self, name: &str) -> Option<u16> {
        self.ports.get(name).copied()
    }

    /// The text of `GET /metrics` on 127.0.0.1 at the port of `@name@`
    /// (a `prometheus 127.0.0.1:@PORT_METRICS@` line); empty if none.
    pub fn scrape(&self, name: &str) -> String {
        self.get_metrics(name)
            .map(|r| String::from_utf8_lossy(&r.body).into_owned())
            .unwrap_or_default()
    }

    /// Like [`RunningServer::scrape`] of `PORT_METRICS`, for tests: panics
    /// unless the server has that port and it answers 200.
    pub fn metrics(&self) -> String {
        let r = self.get_metrics("PORT_METRICS").expect("a metrics port");
        assert_eq!(r.status, 200, "{}", self.name);
        String::from_utf8_lossy(&r.body).into_owned()
    }

    /// `GET /metrics` on 127.0.0.1 at the port of `@name@`, if it has one.
    fn get_metrics(&self, name: &str) -> Option<crate::HttpResponse> {
        let addr = SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, self.port(name)?));
        Some(crate::http_request(addr, "GET", "/metrics", &[]))
    }

    /// Sends `signal` (e.g. `"TERM"`, `"INT"`, `"USR1"`) to the program.
    pub fn signal(&self, signal: &str) -> io::Result<()> {
        let pid = self
            .pid()
            .ok_or_else(|| io::Error::other(format!("{} is not running", self.name)))?;
        let st = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()?;
        if st.success() {
            Ok(())
        } else {
            Err(io::Error::other(format!("kill -{signal} {pid}: {st}")))
        }
    }

    /// Waits up to `timeout` for the program to exit; its exit status.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = self.process.exited() {
                return Some(st);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The server program's pid (see [`ServerProcess::program_pid`]).
    pub fn pid(&self) -> Option<u32> {
        self.process.program_pid()
    }

    /// The server's scratch directory (Corefile, log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Sends one query and returns what came back.
    pub fn query(&self, query: &Query, timeout: Duration) -> Outcome {
        match query.to_wire() {
            Ok(msg) => exchange(self.addr, &msg, query.transport, timeout),
            Err(e) => panic!("cannot build query {query}: {e}"),
        }
    }
}

fn http_get_status(addr: SocketAddr, path: &str) -> Option<u16> {
    let status = crate::ops::http_get(addr, path).status;
    (status != 0).then_some(status)
}

/// The reference and the candidate server, running on the same Corefile.
/// Both are stopped on drop (also when the test panics).
#[derive(Debug)]
pub struct Differential {
    /// The reference (CoreDNS).
    pub reference: RunningServer,
    /// The candidate (clusterdns).
    pub candidate: RunningServer,
    ttl: TtlMode,
    timeout: Duration,
    _rig: Option<Rig>,
}

impl Differential {
    /// Starts the rig's CoreDNS and clusterdns ([`clusterdns_bin`]) on the
    /// same Corefile template (see [`ServerSpec`] for the substitutions).
    pub fn new(rig: &Rig, corefile_template: &str) -> io::Result<Differential> {
        Differential::between(
            Some(rig),
            ServerSpec::coredns(rig, corefile_template),
            ServerSpec::clusterdns(corefile_template)?,
        )
    }

    /// Starts any two servers; `rig` (if any) provides `@KUBECONFIG@`.
    pub fn between(
        rig: Option<&Rig>,
        reference: ServerSpec,
        candidate: ServerSpec,
    ) -> io::Result<Differential> {
        let kubeconfig = rig.map(Rig::kubeconfig);
        let mut r = RunningServer::spawn(&reference, kubeconfig.as_deref())?;
        let mut c = RunningServer::spawn(&candidate, kubeconfig.as_deref())?;
        let timeout = Duration::from_secs(30);
        r.wait_ready(timeout)?;
        c.wait_ready(timeout)?;
        Ok(Differential {
            reference: r,
            candidate: c,
            ttl: TtlMode::Exact,
            timeout: Duration::from_secs(2),
            _rig: rig.cloned(),
        })
    }

    /// Sets how TTLs are compared (default: exactly).
    pub fn with_ttl(mut self, ttl: TtlMode) -> Differential {
        self.ttl = ttl;
        self
    }

    /// Sets the per-query timeout (default 2 s).
    pub fn with_timeout(mut self, timeout: Duration) -> Differential {
        self.timeout = timeout;
        self
    }

    /// The TTL mode in force.
    pub fn ttl_mode(&self) -> TtlMode {
        self.ttl
    }

    /// Sends `query` to both servers (reference first) and compares.
    pub fn query(&self, query: &Query) -> Comparison {
        self.query_with(query, self.ttl)
    }

    /// Like [`Differential::query`] with another TTL mode.
    pub fn query_with(&self, query: &Query, ttl: TtlMode) -> Comparison {
        let reference = self.reference.query(query, self.timeout);
        let candidate = self.candidate.query(query, self.timeout);
        let differences = compare(&reference, &candidate, ttl);
        Comparison {
            query: query.to_string(),
            reference,
            candidate,
            differences,
        }
    }

    /// Sends the query over UDP and over TCP; one comparison each.
    pub fn query_udp_and_tcp(&self, query: &Query) -> Vec<Comparison> {
        [Transport::Udp, Transport::Tcp]
            .into_iter()
            .map(|t| self.query(&query.clone().transport(t)))
            .collect()
    }

    /// Repeats the query until both agree or `settle` has passed, and returns
    /// the last comparison: for state that the servers learn through watches.
    pub fn query_settled(&self, query: &Query, settle: Duration) -> Comparison {
        self.query_settled_with(query, self.ttl, settle)
    }

    /// [`Differential::query_settled`] with another TTL mode.
    pub fn query_settled_with(&self, query: &Query, ttl: TtlMode, settle: Duration) -> Comparison {
        let deadline = Instant::now() + settle;
        loop {
            let c = self.query_with(query, ttl);
            if c.agree() || Instant::now() >= deadline {
                return c;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Sends raw bytes (malformed queries, say) to both and compares.
    pub fn query_raw(&self, msg: &[u8], transport: Transport) -> Comparison {
        let reference = exchange(self.reference.addr, msg, transport, self.timeout);
        let candidate = exchange(self.candidate.addr, msg, transport, self.timeout);
        let differences = compare(&reference, &candidate, self.ttl);
        Comparison {
            query: format!("{} raw bytes ({transport})", msg.len()),
            reference,
            candidate,
            differences,
        }
    }
}

/// Whether a UDP socket of this network namespace is bound to `port` (any
/// address), from the kernel's socket tables: nothing is sent, so no
/// server counts a probe.
fn udp_bound(port: u16) -> bool {
    let suffix = format!(":{port:04X}");
    ["/proc/net/udp", "/proc/net/udp6"].iter().any(|table| {
        std::fs::read_to_string(table).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                l.split_whitespace()
                    .nth(1)
                    .is_some_and(|a| a.ends_with(&suffix))
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bound_udp_socket_is_seen_in_the_kernels_table() {
        let sock = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let port = sock.local_addr().expect("addr").port();
        assert!(udp_bound(port));
    }

    #[test]
    fn extra_ports_are_found() {
        let t = "ready 127.0.0.1:@PORT_READY@\nhealth :@PORT_HEALTH@ @PORT@ @PORT_READY@ @NOPE";
        assert_eq!(extra_port_names(t), vec!["PORT_READY", "PORT_HEALTH"]);
    }

    fn rr(text: &str) -> Rr {
        let f: Vec<&str> = text.splitn(5, ' ').collect();
        Rr {
            name: f[0].into(),
            ttl: f[1].parse().unwrap(),
            class: f[2].into(),
            rtype: f[3].into(),
            rdata: f[4].into(),
        }
    }

    fn response(answer: &[&str], authority: &[&str]) -> Outcome {
        Outcome::Response(crate::dns::Response {
            id: 1,
            opcode: 0,
            flags: crate::dns::Flags {
                qr: true,
                aa: true,
                rd: true,
                ..Default::default()
            },
            rcode: 0,
            question: vec!["a. IN A".into()],
            answer: answer.iter().map(|t| rr(t)).collect(),
            authority: authority.iter().map(|t| rr(t)).collect(),
            additional: Vec::new(),
            edns: None,
            size: 100,
        })
    }

    #[test]
    fn order_and_soa_serial_do_not_count() {
        let a = response(
            &["a. 5 IN A 10.0.0.1", "a. 5 IN A 10.0.0.2"],
            &["a. 5 IN SOA ns.a. h.a. 111 7200 1800 86400 5"],
        );
        let b = response(
            &["a. 5 IN A 10.0.0.2", "a. 5 IN A 10.0.0.1"],
            &["a. 5 IN SOA ns.a. h.a. 222 7200 1800 86400 5"],
        );
        assert_eq!(compare(&a, &b, TtlMode::Exact), Vec::new());
    }

    #[test]
    fn ttl_records_flags_and_outcomes_are_reported() {
        let a = response(&["a. 5 IN A 10.0.0.1", "a. 5 IN A 10.0.0.2"], &[]);
        let b = response(&["a. 30 IN A 10.0.0.1", "a. 5 IN A 10.0.0.3"], &[]);
        let d = compare(&a, &b, TtlMode::Exact);
        assert_eq!(d.len(), 3, "{d:?}");
        assert!(d.contains(&Difference::Ttl {
            section: Section::Answer,
            record: "a. IN A 10.0.0.1".into(),
            reference: 5,
            candidate: 30,
        }));
        assert!(d.contains(&Difference::OnlyInReference {
            section: Section::Answer,
            record: rr("a. 5 IN A 10.0.0.2"),
        }));
        assert!(d.contains(&Difference::OnlyInCandidate {
            section: Section::Answer,
            record: rr("a. 5 IN A 10.0.0.3"),
        }));
        assert_eq!(compare(&a, &b, TtlMode::Within(25)).len(), 2);

        let Outcome::Response(mut r) = a.clone() else {
            unreachable!()
        };
        r.flags.aa = false;
        r.rcode = 3;
        let d = compare(&a, &Outcome::Response(r), TtlMode::Exact);
        assert!(d.contains(&Difference::Rcode {
            reference: "NOERROR".into(),
            candidate: "NXDOMAIN".into(),
        }));
        assert!(d.contains(&Difference::Flag {
            flag: "aa",
            reference: true,
            candidate: false,
        }));
        assert!(matches!(
            compare(&a, &Outcome::Timeout, TtlMode::Exact)[..],
            [Difference::Outcome { .. }]
        ));
        assert!(compare(&Outcome::Timeout, &Outcome::Timeout, TtlMode::Exact).is_empty());
    }

    /// Truncated replies with the same SRV answers: the additional records
    /// that survive follow the answers' order, so they are compared only
    /// when the order is the same.
    #[test]
    fn a_truncated_reply_keeps_the_additionals_of_its_own_order() {
        let srv = ["h. 5 IN SRV 0 50 80 a.h.", "h. 5 IN SRV 0 50 80 b.h."];
        let reply = |answer: [&str; 2], additional: &[&str], tc: bool| {
            let Outcome::Response(mut r) = response(&answer, &[]) else {
                unreachable!()
            };
            r.flags.tc = tc;
            r.additional = additional.iter().map(|t| rr(t)).collect();
            Outcome::Response(r)
        };
        let a_first = reply(srv, &["a.h. 5 IN A 10.0.0.1"], true);
        let b_first = reply([srv[1], srv[0]], &["b.h. 5 IN A 10.0.0.2"], true);
        assert_eq!(compare(&a_first, &b_first, TtlMode::Exact), Vec::new());
        // The same order, or no truncation: the additional section counts.
        let a_first_other = reply(srv, &["b.h. 5 IN A 10.0.0.2"], true);
        assert_eq!(compare(&a_first, &a_first_other, TtlMode::Exact).len(), 2);
        let whole = reply([srv[1], srv[0]], &["b.h. 5 IN A 10.0.0.2"], false);
        let d = compare(
            &reply(srv, &["a.h. 5 IN A 10.0.0.1"], false),
            &whole,
            TtlMode::Exact,
        );
        assert_eq!(d.len(), 2, "{d:?}");
        // Other answers: everything counts.
        let other = reply(
            ["h. 5 IN SRV 0 50 80 a.h.", "h. 5 IN SRV 0 50 81 b.h."],
            &["b.h. 5 IN A 10.0.0.2"],
            true,
        );
        assert_eq!(compare(&a_first, &other, TtlMode::Exact).len(), 4);
    }

    #[test]
    fn render_replaces_all() {
        let vars = vec![
            ("PORT".to_string(), "53".to_string()),
            ("NS".to_string(), "x".to_string()),
        ];
        assert_eq!(render(".:@PORT@ @NS@ @PORT@", &vars), ".:53 x 53");
    }
}
