//! cluster-proportional-autoscaler's command line, parsed as spf13/pflag parses it
//! (`--name=value`, `--name value`, booleans without a value, `-v` as glog's shorthand,
//! `_` and `-` alike in names as component-base normalises them), with its validation.

use std::collections::BTreeMap;

use clusterdns_gocompat::flag::{self, Flag, Kind, Normalize};
use clusterdns_gocompat::strconv;
use serde_json::Value;

/// The parsed command line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Flags {
    /// `--target`, lower-cased.
    pub target: String,
    /// `--configmap`.
    pub configmap: String,
    /// `--namespace` (default `$MY_POD_NAMESPACE`).
    pub namespace: String,
    /// `--poll-period-seconds` (default 10).
    pub poll_period_seconds: i64,
    /// `--default-params`: each top-level key's value re-encoded as JSON text.
    pub default_params: Option<BTreeMap<String, String>>,
    /// `--nodelabels`: the node watch's label selector.
    pub nodelabels: String,
    /// `--max-sync-failures` (0: never give up).
    pub max_sync_failures: i64,
    /// `--version`.
    pub version: bool,
    /// `--help`.
    pub help: bool,
    /// glog's `--v`.
    pub verbosity: i64,
    /// Ours: `--kubeconfig` (upstream is in-cluster only).
    pub kubeconfig: Option<String>,
    /// Ours: `--health-address` (upstream always `:8080`).
    pub health_address: String,
}

/// Every flag, as upstream registers them with pflag; glog's come through Go's flag set and
/// are accepted, but for `v` without effect: logs always go to stderr.
const FLAGS: &[Flag] = &[
    Flag::bool(
        "alsologtostderr",
        "false",
        "log to standard error as well as files",
    ),
    Flag::string(
        "configmap",
        "",
        "ConfigMap containing our scaling parameters.",
    ),
    Flag::new(
        "default-params",
        Kind::Other("configMapData"),
        "",
        "Default parameters(JSON format) for auto-scaling. Will create/re-create a ConfigMap with this default params if ConfigMap is not present.",
    )
    .checked(|s| default_params(s).map(drop)),
    Flag::string(
        "health-address",
        ":8080",
        "Address of the /healthz and /last-poll listener (clusterdns only)",
    ),
    Flag::string(
        "kubeconfig",
        "",
        "Kubeconfig file to use instead of the in-cluster service account (clusterdns only).",
    ),
    Flag::new(
        "log-backtrace-at",
        Kind::Other("traceLocation"),
        ":0",
        "when logging hits line file:N, emit a stack trace",
    ),
    Flag::string(
        "log-dir",
        "",
        "If non-empty, write log files in this directory",
    ),
    Flag::string(
        "log-link",
        "",
        "If non-empty, add symbolic links in this directory to the log files",
    ),
    Flag::int(
        "logbuflevel",
        "0",
        "Buffer log messages logged at this level or lower (-1 means don't buffer; 0 means buffer INFO only; ...). Has limited applicability on non-prod platforms.",
    ),
    Flag::bool(
        "logtostderr",
        "false",
        "log to standard error instead of files",
    ),
    Flag::int(
        "max-sync-failures",
        "0",
        "Number of consecutive polling failures before exiting. Default value of 0 will allow for unlimited retries.",
    ),
    Flag::string(
        "namespace",
        "",
        "Namespace for all operations, fallback to the namespace of this autoscaler(through MY_POD_NAMESPACE env) if not specified.",
    ),
    Flag::string(
        "nodelabels",
        "",
        "NodeLabels for filtering search of nodes and its cpus by LabelSelectors. Input format is a comma separated list of keyN=valueN LabelSelectors. Usage example: --nodelabels=label1=value1,label2=value2.",
    ),
    Flag::int(
        "poll-period-seconds",
        "10",
        "The time, in seconds, to check cluster status and perform autoscale.",
    ),
    Flag::new(
        "stderrthreshold",
        Kind::Other("severity"),
        "2",
        "logs at or above this threshold go to stderr",
    ),
    Flag::string(
        "target",
        "",
        "Target to scale. In format: 'deployment/*,replicationcontroller/*,replicaset/*' (not case sensitive, comma delimiter supported).",
    ),
    // pflag gives a Go flag of one letter that letter as its shorthand.
    Flag::new("v", Kind::Other("Level"), "0", "log level for V logs")
        .short('v')
        .checked(level),
    Flag::bool("version", "false", "Print the version and exit."),
    Flag::new(
        "vmodule",
        Kind::Other("moduleSpec"),
        "",
        "comma-separated list of pattern=N settings for file-filtered logging",
    ),
];

/// glog's `Level` (`v`), which we read as pflag reads an integer.
fn level(s: &str) -> Result<(), String> {
    strconv::parse_int(s, 0, 64)
        .map(drop)
        .map_err(|e| e.to_string())
}

/// pflag's usage text for `program`.
pub fn usage(program: &str) -> String {
    flag::pflag_usage(program, FLAGS)
}

/// A JSON value as Go's `json.Marshal` writes what `json.Unmarshal` read into an
/// `interface{}`: keys sorted, numbers as float64 (`256`, not `256.0`).
fn go_json(v: &Value) -> String {
    match v {
        Value::Number(n) => match n.as_f64() {
            Some(x) if x.fract() == 0.0 && x.abs() < 1e21 => format!("{}", x as i64),
            _ => n.to_string(),
        },
        Value::Array(xs) => format!("[{}]", xs.iter().map(go_json).collect::<Vec<_>>().join(",")),
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let body: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", Value::String(k.clone()), go_json(&m[k])))
                .collect();
            format!("{{{}}}", body.join(","))
        }
        other => other.to_string(),
    }
}

/// `--default-params`: a JSON object whose members become the ConfigMap's data.
fn default_params(raw: &str) -> Result<BTreeMap<String, String>, String> {
    let v: Value = serde_json::from_str(raw).map_err(|e| e.to_string())?;
    match v {
        Value::Object(m) => Ok(m.iter().map(|(k, v)| (k.clone(), go_json(v))).collect()),
        Value::Null => Ok(BTreeMap::new()),
        other => Err(format!(
            "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
            match other {
                Value::Bool(_) => "bool",
                Value::Number(_) => "number",
                Value::String(_) => "string",
                _ => "array",
            }
        )),
    }
}

/// Parses the arguments (without the program name). `namespace` is `$MY_POD_NAMESPACE`.
/// The error is pflag's first line (`unknown flag: --x`, `invalid argument …`).
pub fn parse(args: &[String], namespace_env: Option<String>) -> Result<Flags, String> {
    let help = Flags {
        help: true,
        ..Flags::default()
    };
    let v = match flag::parse_pflag(FLAGS, args, Normalize::WordSep) {
        Ok(v) => v,
        Err(e) => return e.message().map_or(Ok(help), Err),
    };
    let text = |name: &str| v.get(name).to_owned();
    let namespace = if v.is_set("namespace") {
        text("namespace")
    } else {
        namespace_env.unwrap_or_default()
    };
    // Checked when set, so it reads again.
    let default_params = v
        .is_set("default-params")
        .then(|| default_params(v.get("default-params")))
        .transpose()?;
    Ok(Flags {
        target: v.get("target").to_lowercase(),
        configmap: text("configmap"),
        namespace,
        poll_period_seconds: v.int("poll-period-seconds"),
        default_params,
        nodelabels: text("nodelabels"),
        max_sync_failures: v.int("max-sync-failures"),
        version: v.bool("version"),
        help: false,
        verbosity: v.int("v"),
        kubeconfig: v.is_set("kubeconfig").then(|| text("kubeconfig")),
        health_address: text("health-address"),
    })
}

/// A `--target` entry: kind and name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// `deployment`, `replicaset` or `replicationcontroller`.
    pub kind: String,
    /// The object's name.
    pub name: String,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.kind, self.name)
    }
}

impl Flags {
    /// Upstream's `ValidateFlags`: every problem as its own error line, then the targets.
    pub fn validate(&self) -> Result<Vec<Target>, Vec<String>> {
        let mut errors = Vec::new();
        let mut targets = Vec::new();
        if self.target.is_empty() {
            errors.push("--target parameter cannot be empty".to_owned());
        } else {
            for t in self.target.split(',').map(str::trim) {
                let ok = ["deployment/", "replicationcontroller/", "replicaset/"]
                    .iter()
                    .any(|p| t.starts_with(p));
                let parts: Vec<&str> = t.split('/').collect();
                if !ok {
                    errors.push("Target format error. Please use 'deployment/*,replicationcontroller/*,replicaset/*' (not case sensitive, comma delimiter supported).".to_owned());
                    break;
                }
                if parts.len() != 2 {
                    errors.push(format!("target format error: {}", self.target));
                    break;
                }
                targets.push(Target {
                    kind: parts[0].to_owned(),
                    name: parts[1].to_owned(),
                });
            }
        }
        if self.configmap.is_empty() {
            errors.push("--configmap parameter cannot be empty".to_owned());
        }
        if self.namespace.is_empty() {
            errors.push("--namespace parameter not set and failed to fallback".to_owned());
        }
        if self.poll_period_seconds < 1 {
            errors.push("--poll-period-seconds cannot be less than 1".to_owned());
        }
        if errors.is_empty() {
            Ok(targets)
        } else {
            Err(errors)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Flags, String> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        parse(&args, Some("kube-system".into()))
    }

    #[test]
    fn the_addon_command_line() {
        let f = p(&[
            "--namespace=kube-system",
            "--configmap=kube-dns-autoscaler",
            "--target=Deployment/coredns",
            r#"--default-params={"linear":{"coresPerReplica":256,"nodesPerReplica":16,"preventSinglePointFailure":true}}"#,
            "--logtostderr=true",
            "--v=2",
        ])
        .expect("valid");
        assert_eq!(f.target, "deployment/coredns");
        assert_eq!(f.verbosity, 2);
        assert_eq!(f.poll_period_seconds, 10);
        let d = f.default_params.as_ref().expect("set");
        assert_eq!(
            d["linear"],
            r#"{"coresPerReplica":256,"nodesPerReplica":16,"preventSinglePointFailure":true}"#
        );
        assert_eq!(
            f.validate().expect("valid"),
            vec![Target {
                kind: "deployment".into(),
                name: "coredns".into()
            }]
        );
    }

    #[test]
    fn forms_and_errors() {
        let f = p(&[
            "--target",
            "replicaset/a, replicationcontroller/b",
            "--configmap",
            "c",
            "-v",
            "4",
            "--poll_period_seconds=0x1e",
            "--version",
        ])
        .expect("valid");
        assert_eq!(
            (f.verbosity, f.poll_period_seconds, f.version),
            (4, 30, true)
        );
        assert_eq!(f.validate().expect("valid").len(), 2);
        assert_eq!(p(&["-v=3"]).expect("valid").verbosity, 3);
        assert_eq!(p(&["--foo"]), Err("unknown flag: --foo".into()));
        assert_eq!(p(&["-x"]), Err("unknown shorthand flag: 'x' in -x".into()));
        assert_eq!(
            p(&["--target"]),
            Err("flag needs an argument: --target".into())
        );
        assert_eq!(
            p(&["--poll-period-seconds=ten"]),
            Err(r#"invalid argument "ten" for "--poll-period-seconds" flag: strconv.ParseInt: parsing "ten": invalid syntax"#.into())
        );
        assert_eq!(
            p(&["--version=maybe"]),
            Err(r#"invalid argument "maybe" for "--version" flag: strconv.ParseBool: parsing "maybe": invalid syntax"#.into())
        );
        assert!(
            p(&["--default-params={"])
                .expect_err("bad")
                .starts_with(r#"invalid argument "{" for "--default-params" flag: "#)
        );
        assert!(
            p(&["--default-params=[1]"])
                .expect_err("bad")
                .ends_with("cannot unmarshal array into Go value of type map[string]interface {}")
        );
        assert_eq!(p(&["---x"]), Err("bad flag syntax: ---x".into()));
    }

    #[test]
    fn validation() {
        let f = parse(
            &[
                "--target=statefulset/x".to_owned(),
                "--poll-period-seconds=0".to_owned(),
            ],
            None,
        )
        .expect("parses");
        let errs = f.validate().expect_err("invalid");
        assert_eq!(
            errs,
            vec![
                "Target format error. Please use 'deployment/*,replicationcontroller/*,replicaset/*' (not case sensitive, comma delimiter supported).".to_owned(),
                "--configmap parameter cannot be empty".to_owned(),
                "--namespace parameter not set and failed to fallback".to_owned(),
                "--poll-period-seconds cannot be less than 1".to_owned(),
            ]
        );
        let f = p(&["--configmap=c"]).expect("parses");
        assert_eq!(
            f.validate().expect_err("no target")[0],
            "--target parameter cannot be empty"
        );
    }

    #[test]
    fn default_params_as_go_writes_them() {
        let d = default_params(
            r#"{"ladder":{"nodesToReplicas":[[1,1],[2.0,2]],"coresToReplicas":[[1,1]]}}"#,
        )
        .expect("valid");
        assert_eq!(
            d["ladder"],
            r#"{"coresToReplicas":[[1,1]],"nodesToReplicas":[[1,1],[2,2]]}"#
        );
    }
}
