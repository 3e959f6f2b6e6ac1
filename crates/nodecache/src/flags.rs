//! node-cache's command line, parsed as Go's `flag` package parses it
//! (one flag set holding node-cache's own flags and the CoreDNS flags
//! `coremain` registers), then validated as upstream's
//! `parseAndValidateFlags` does. Nothing here touches the node.

use std::net::IpAddr;
use std::time::Duration;

use clusterdns_gocompat::flag::{self, Flag, Kind};
use clusterdns_gocompat::time;

/// The validated command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flags {
    /// `-localip`: every listen address, in the order given.
    pub local_ips: Vec<IpAddr>,
    /// `-localip` as written (rendered space-separated into the Corefile).
    pub local_ip_str: String,
    /// `-setupinterface`.
    pub setup_interface: bool,
    /// `-interfacename`.
    pub interface_name: String,
    /// `-syncinterval`, already multiplied by a second as upstream does.
    pub sync_interval: Duration,
    /// `-metrics-listen-address`.
    pub metrics_listen_address: String,
    /// `-prometheus-listen-address` (node-local-dns's `__PROMETHEUS__ENDPOINT__`).
    pub prometheus_listen_address: String,
    /// `-setupiptables`.
    pub setup_iptables: bool,
    /// `-interception` (beyond upstream).
    pub interception: Interception,
    /// `-basecorefile`: the template.
    pub base_corefile: String,
    /// Where the rendered Corefile is written: always `-conf` (see the README).
    pub corefile: String,
    /// `-kubednscm`: the kube-dns ConfigMap directory, if any.
    pub kubedns_cm: String,
    /// `-upstreamsvc`.
    pub upstream_svc: String,
    /// `-health-port`, used only in the rules.
    pub health_port: u16,
    /// `-skipteardown`.
    pub skip_teardown: bool,
    /// `-reloadwithsignal`.
    pub reload_with_signal: bool,
    /// `-dns.port` / `-p`.
    pub dns_port: u16,
    /// `-pidfile`.
    pub pidfile: Option<String>,
    /// `-ready-query` (beyond upstream): the name `/ready` asks; `None`
    /// when `""`.
    pub ready_query: Option<String>,
    /// `-ready-listen-address` (beyond upstream): a second listener for
    /// `/ready`; `None` when `""`.
    pub ready_listen_address: Option<String>,
    /// `-handover-socket` (beyond upstream): where a new instance takes
    /// over the running one's sockets; `None` when `""`.
    pub handover_socket: Option<String>,
    /// `-quiet`.
    pub quiet: bool,
    /// `-plugins`.
    pub plugins: bool,
    /// `-version`.
    pub version: bool,
}

/// How queries are intercepted (`-interception`, beyond upstream).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interception {
    /// Crash-safe where the kernel supports it and nothing else listens on
    /// the wildcard address, else upstream's iptables rules.
    Auto,
    /// Upstream's iptables rules.
    Iptables,
    /// The crash-safe nftables table, or refuse to start.
    CrashSafe,
}

/// Why the command line was refused. The text is upstream's; the exit code
/// says how upstream exits on it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlagsError {
    /// Go's `flag` refused an argument: printed with the usage, exit 2.
    #[error("{0}")]
    Syntax(String),
    /// `-h` or `-help`: the usage, exit 0.
    #[error("help requested")]
    Help,
    /// `parseAndValidateFlags` refused a value: a `[FATAL]` line, exit 1.
    #[error("Error parsing flags - {0}, Exiting")]
    Invalid(String),
}

impl FlagsError {
    /// The process exit code upstream uses for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            FlagsError::Syntax(_) => 2,
            FlagsError::Help => 0,
            FlagsError::Invalid(_) => 1,
        }
    }
}

/// Every flag: node-cache's own, the CoreDNS flags `coremain` registers
/// in the same flag set, and ours (each help says so).
const FLAGS: &[Flag] = &[
    Flag::string(
        "basecorefile",
        "/etc/coredns/Corefile.base",
        "Path to the template Corefile for node-cache",
    ),
    // The help names the default that `-conf` itself has not.
    Flag::string("conf", "", "Corefile to load (default \"Corefile\")"),
    Flag::string(
        "corefile",
        "/etc/Corefile",
        "Path to the Corefile to be used by node-cache",
    ),
    Flag::string("dns.port", "53", "Default port"),
    Flag::string(
        "handover-socket",
        "/run/clusterdns/node-cache.sock",
        "unix socket where a new instance takes over the running one's listening sockets (beyond upstream; \"\" disables)",
    ),
    Flag::string("health-port", "8080", "port used by health plugin"),
    Flag::string(
        "interception",
        "auto",
        "how queries are intercepted (beyond upstream): auto (crashsafe where the kernel supports it), iptables (upstream's rules) or crashsafe",
    ),
    Flag::string(
        "interfacename",
        "nodelocaldns",
        "name of the interface to be created",
    ),
    Flag::string(
        "kubednscm",
        "",
        "Path where the kube-dns configmap will be mounted",
    ),
    Flag::string(
        "localip",
        "",
        "comma-separated string of ip addresses to bind dnscache to",
    ),
    Flag::string(
        "metrics-listen-address",
        "0.0.0.0:9353",
        "address to serve metrics on",
    ),
    Flag::string("p", "53", "Default port"),
    Flag::string("pidfile", "", "Path to write pid file"),
    Flag::bool("plugins", "false", "List installed plugins"),
    Flag::string(
        "prometheus-listen-address",
        ":9253",
        "address to serve Prometheus metrics on",
    ),
    Flag::bool("quiet", "false", "Quiet mode (no initialization output)"),
    Flag::string(
        "ready-listen-address",
        "",
        "address to serve GET /ready on as well, apart from -metrics-listen-address (beyond upstream; for a readiness probe upstream's node-cache cannot answer while it holds the metrics port during an update from it)",
    ),
    Flag::string(
        "ready-query",
        "kubernetes.default.svc.cluster.local.",
        "name that GET /ready on -metrics-listen-address asks the cache for (beyond upstream; \"\" disables /ready)",
    ),
    Flag::bool(
        "reloadwithsignal",
        "false",
        "use SIGUSR1 on self to reload CoreDNS",
    ),
    Flag::bool(
        "setupinterface",
        "true",
        "indicates whether network interface should be setup",
    ),
    Flag::bool(
        "setupiptables",
        "true",
        "indicates whether iptables rules should be setup",
    ),
    Flag::bool(
        "skipteardown",
        "false",
        "indicates whether iptables rules should be torn down on exit",
    ),
    Flag::new(
        "syncinterval",
        Kind::Duration,
        "60ns",
        "interval(in seconds) to check for iptables rules",
    )
    .checked(sync_interval),
    Flag::string(
        "upstreamsvc",
        "kube-dns",
        "Service name whose cluster IP is upstream for node-cache",
    ),
    Flag::bool("version", "false", "Show version"),
];

/// The usage text, as Go's `flag.PrintDefaults` lays it out after
/// upstream's two header lines.
pub fn usage(program: &str) -> String {
    format!(
        "Usage of {program}:\nRuns clusterdns as a nodelocal cache listening on the specified ip:port\n\n{}",
        flag::defaults(FLAGS)
    )
}

/// `-syncinterval`'s check: a Go duration, but not a negative one, on
/// which upstream would panic in `time.NewTicker`.
fn sync_interval(s: &str) -> Result<(), String> {
    go_duration(s)
        .map(drop)
        .ok_or_else(|| "parse error".to_owned())
}

/// Go's `time.ParseDuration`, without the negative values.
fn go_duration(s: &str) -> Option<Duration> {
    time::parse_go(s).ok()
}

/// The longest sync interval we honour: upstream multiplies the value by a
/// second, so `60s` means 60e9 s; tokio's timer cannot hold that, and it
/// means "never" either way.
const MAX_SYNC: Duration = Duration::from_secs(365 * 24 * 3600);

/// Parses and validates the arguments (without the program name).
pub fn parse(args: &[String]) -> Result<Flags, FlagsError> {
    let v = flag::parse(FLAGS, args).map_err(|e| match e {
        flag::Error::Help => FlagsError::Help,
        flag::Error::Syntax(s) => FlagsError::Syntax(s),
    })?;
    let rest = v.rest();
    if !rest.is_empty() {
        // CoreDNS refuses these in coremain.Run; we refuse them before
        // anything on the node changes.
        return Err(FlagsError::Invalid(format!(
            "extra command line arguments: [{}]",
            rest.join(" ")
        )));
    }
    let local_ip_str = v.get("localip").to_string();
    let mut local_ips = Vec::new();
    for s in local_ip_str.split(',') {
        let ip: IpAddr = s
            .parse()
            .map_err(|_| FlagsError::Invalid(format!("invalid localip specified - {s:?}")))?;
        local_ips.push(ip.to_canonical());
    }
    let v6 = local_ips[0].is_ipv6();
    if let Some(ip) = local_ips.iter().find(|ip| ip.is_ipv6() != v6) {
        return Err(FlagsError::Invalid(format!(
            "unexpected IP Family for localIP - \"{ip}\", want IPv6={v6}"
        )));
    }
    let port = |s: &str, what: &str| -> Result<u16, FlagsError> {
        s.parse::<u16>()
            .map_err(|_| FlagsError::Invalid(format!("invalid {what}specified - {s:?}")))
    };
    // `-p` and `-dns.port` share one variable in CoreDNS.
    let dns_port = port(v.get_shared(&["dns.port", "p"]), "port ")?;
    let health_port = port(v.get("health-port"), "healthcheck port ")?;
    let ns = go_duration(v.get("syncinterval")).map_or(60, |d| d.as_nanos());
    if ns == 0 {
        // Upstream panics in time.NewTicker on a non-positive interval.
        return Err(FlagsError::Invalid(format!(
            "invalid syncinterval specified - {:?}: it must be positive",
            v.get("syncinterval")
        )));
    }
    // Upstream multiplies the nanoseconds by a second.
    let sync_interval = u64::try_from(ns)
        .ok()
        .map(Duration::from_secs)
        .filter(|d| *d <= MAX_SYNC)
        .unwrap_or(MAX_SYNC);
    // `-conf` always wins over `-corefile` upstream, because the flag
    // exists whether or not it was given; without it upstream writes to ""
    // and fails. We refuse that instead of running without a Corefile.
    if !v.is_set("conf") || v.get("conf").is_empty() {
        return Err(FlagsError::Invalid(
            "no -conf given: node-cache writes the rendered Corefile to -conf's path (-corefile is always overridden by -conf)".into(),
        ));
    }
    let interception = match v.get("interception") {
        "auto" => Interception::Auto,
        "iptables" => Interception::Iptables,
        "crashsafe" => Interception::CrashSafe,
        other => {
            return Err(FlagsError::Invalid(format!(
                "invalid interception specified - {other:?} (auto, iptables or crashsafe)"
            )));
        }
    };
    let pidfile = Some(v.get("pidfile").to_string()).filter(|p| !p.is_empty());
    let ready_query = Some(v.get("ready-query").to_string()).filter(|p| !p.is_empty());
    if let Some(q) = &ready_query
        && clusterdns_wire::Name::from_ascii(q).is_err()
    {
        return Err(FlagsError::Invalid(format!(
            "invalid ready-query specified - {q:?}"
        )));
    }
    Ok(Flags {
        local_ips,
        local_ip_str,
        setup_interface: v.bool("setupinterface"),
        interface_name: v.get("interfacename").to_string(),
        sync_interval,
        metrics_listen_address: v.get("metrics-listen-address").to_string(),
        prometheus_listen_address: v.get("prometheus-listen-address").to_string(),
        setup_iptables: v.bool("setupiptables"),
        interception,
        base_corefile: v.get("basecorefile").to_string(),
        corefile: v.get("conf").to_string(),
        kubedns_cm: v.get("kubednscm").to_string(),
        upstream_svc: v.get("upstreamsvc").to_string(),
        health_port,
        skip_teardown: v.bool("skipteardown"),
        reload_with_signal: v.bool("reloadwithsignal"),
        dns_port,
        pidfile,
        ready_query,
        ready_listen_address: Some(v.get("ready-listen-address").to_string())
            .filter(|p| !p.is_empty()),
        handover_socket: Some(v.get("handover-socket").to_string()).filter(|p| !p.is_empty()),
        quiet: v.bool("quiet"),
        plugins: v.bool("plugins"),
        version: v.bool("version"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Flags, FlagsError> {
        parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    fn ok(args: &[&str]) -> Flags {
        match p(args) {
            Ok(f) => f,
            Err(e) => panic!("{args:?}: {e}"),
        }
    }

    const BASE: [&str; 4] = [
        "-localip",
        "169.254.20.10,10.96.0.10",
        "-conf",
        "/etc/Corefile",
    ];

    #[test]
    fn the_daemonset_args_and_the_defaults() {
        let f = ok(&[
            "-localip",
            "169.254.20.10,10.96.0.10",
            "-conf",
            "/etc/Corefile",
            "-upstreamsvc",
            "kube-dns-upstream",
            "-pidfile",
            "/tmp/node-cache.pid",
        ]);
        assert_eq!(f.local_ip_str, "169.254.20.10,10.96.0.10");
        assert_eq!(f.local_ips.len(), 2);
        assert_eq!(f.upstream_svc, "kube-dns-upstream");
        assert_eq!(f.pidfile.as_deref(), Some("/tmp/node-cache.pid"));
        assert!(f.setup_interface && f.setup_iptables && !f.skip_teardown);
        assert_eq!(f.interface_name, "nodelocaldns");
        assert_eq!(f.sync_interval, Duration::from_secs(60));
        assert_eq!(f.metrics_listen_address, "0.0.0.0:9353");
        assert_eq!(f.prometheus_listen_address, ":9253");
        assert_eq!(f.base_corefile, "/etc/coredns/Corefile.base");
        assert_eq!(f.corefile, "/etc/Corefile");
        assert_eq!((f.dns_port, f.health_port), (53, 8080));
        assert_eq!(f.interception, Interception::Auto);
    }

    #[test]
    fn go_flag_forms() {
        let mut a = BASE.to_vec();
        a.extend([
            "--setupiptables=false",
            "-skipteardown",
            "--dns.port",
            "1053",
            "-health-port=9090",
            "-setupinterface=0",
        ]);
        let f = ok(&a);
        assert!(!f.setup_iptables && f.skip_teardown && !f.setup_interface);
        assert_eq!((f.dns_port, f.health_port), (1053, 9090));
        let mut a = BASE.to_vec();
        a.extend(["-p", "5353"]);
        assert_eq!(ok(&a).dns_port, 5353);
        // A bool never takes the next argument: `false` ends the flags.
        let mut a = BASE.to_vec();
        a.extend(["-setupiptables", "false"]);
        assert_eq!(
            p(&a).unwrap_err(),
            FlagsError::Invalid("extra command line arguments: [false]".into())
        );
    }

    #[test]
    fn conf_overrides_corefile() {
        let f = ok(&["-localip", "10.0.0.1", "-corefile", "/a", "-conf", "/b"]);
        assert_eq!(f.corefile, "/b");
        let e = p(&["-localip", "10.0.0.1", "-corefile", "/a"]).unwrap_err();
        assert!(e.to_string().contains("no -conf given"), "{e}");
    }

    #[test]
    fn syncinterval_counts_seconds() {
        let with = |s: &str| {
            let mut a = BASE.to_vec();
            a.extend(["-syncinterval", s]);
            p(&a)
        };
        let secs = |s: &str| with(s).map(|f| f.sync_interval.as_secs());
        assert_eq!(secs("30ns"), Ok(30));
        assert_eq!(secs("1us"), Ok(1000));
        assert_eq!(secs("1.5us"), Ok(1500));
        // A unit mistake means "practically never", as upstream.
        assert_eq!(secs("60s"), Ok(MAX_SYNC.as_secs()));
        assert_eq!(
            with("30").unwrap_err(),
            FlagsError::Syntax("invalid value \"30\" for flag -syncinterval: parse error".into())
        );
        assert!(matches!(with("0"), Err(FlagsError::Invalid(_))));
        assert!(matches!(with("-5ns"), Err(FlagsError::Syntax(_))));
    }

    #[test]
    fn errors_are_upstreams() {
        let e = |a: &[&str]| p(a).unwrap_err();
        assert_eq!(
            e(&[
                "-localip",
                "169.254.20.10",
                "-conf",
                "/c",
                "-ready-query",
                "a..b"
            ]),
            FlagsError::Invalid("invalid ready-query specified - \"a..b\"".into())
        );
        assert_eq!(
            e(&["-bogus"]),
            FlagsError::Syntax("flag provided but not defined: -bogus".into())
        );
        assert_eq!(
            e(&["-localip"]),
            FlagsError::Syntax("flag needs an argument: -localip".into())
        );
        assert_eq!(
            e(&["-skipteardown=yes"]),
            FlagsError::Syntax(
                "invalid boolean value \"yes\" for -skipteardown: parse error".into()
            )
        );
        assert_eq!(
            e(&["---localip"]),
            FlagsError::Syntax("bad flag syntax: ---localip".into())
        );
        assert_eq!(e(&["-h"]), FlagsError::Help);
        assert_eq!(e(&["--help"]).exit_code(), 0);
        assert_eq!(
            e(&["-conf", "/c"]).to_string(),
            "Error parsing flags - invalid localip specified - \"\", Exiting"
        );
        assert_eq!(
            e(&["-localip", "10.0.0.1,", "-conf", "/c"]),
            FlagsError::Invalid("invalid localip specified - \"\"".into())
        );
        assert_eq!(
            e(&["-localip", "10.0.0.1,fd00::10", "-conf", "/c"]),
            FlagsError::Invalid(
                "unexpected IP Family for localIP - \"fd00::10\", want IPv6=false".into()
            )
        );
        assert_eq!(
            e(&["-localip", "10.0.0.1", "-conf", "/c", "-dns.port", "x"]),
            FlagsError::Invalid("invalid port specified - \"x\"".into())
        );
        assert_eq!(
            e(&["-localip", "10.0.0.1", "-conf", "/c", "-health-port", "80a"]),
            FlagsError::Invalid("invalid healthcheck port specified - \"80a\"".into())
        );
        assert_eq!(e(&["-bogus"]).exit_code(), 2);
        assert_eq!(e(&["-conf", "/c"]).exit_code(), 1);
    }

    #[test]
    fn usage_lists_every_flag() {
        let u = usage("node-cache");
        for Flag { name, .. } in FLAGS {
            assert!(u.contains(&format!("  -{name}")), "{name}");
        }
        assert!(u.contains("  -syncinterval duration\n    \tinterval(in seconds) to check for iptables rules (default 60ns)"));
    }
}
