//! cluster-proportional-autoscaler's command line, parsed as spf13/pflag parses it
//! (`--name=value`, `--name value`, booleans without a value, `-v` as glog's shorthand,
//! `_` and `-` alike in names as component-base normalises them), with its validation.

use std::collections::BTreeMap;

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

/// How a flag takes its value.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Bool,
    Int,
    Str,
    Params,
}

/// Every flag: name, kind, pflag's type name, help. glog's are accepted and, but for `v`,
/// have no effect: logs always go to stderr.
const FLAGS: &[(&str, Kind, &str, &str)] = &[
    (
        "alsologtostderr",
        Kind::Bool,
        "",
        "log to standard error as well as files",
    ),
    (
        "configmap",
        Kind::Str,
        "string",
        "ConfigMap containing our scaling parameters.",
    ),
    (
        "default-params",
        Kind::Params,
        "configMapData",
        "Default parameters(JSON format) for auto-scaling. Will create/re-create a ConfigMap with this default params if ConfigMap is not present.",
    ),
    (
        "health-address",
        Kind::Str,
        "string",
        "Address of the /healthz and /last-poll listener (clusterdns only) (default \":8080\")",
    ),
    (
        "kubeconfig",
        Kind::Str,
        "string",
        "Kubeconfig file to use instead of the in-cluster service account (clusterdns only).",
    ),
    (
        "log-backtrace-at",
        Kind::Str,
        "traceLocation",
        "when logging hits line file:N, emit a stack trace (default :0)",
    ),
    (
        "log-dir",
        Kind::Str,
        "string",
        "If non-empty, write log files in this directory",
    ),
    (
        "log-link",
        Kind::Str,
        "string",
        "If non-empty, add symbolic links in this directory to the log files",
    ),
    (
        "logbuflevel",
        Kind::Int,
        "int",
        "Buffer log messages logged at this level or lower (-1 means don't buffer; 0 means buffer INFO only; ...). Has limited applicability on non-prod platforms.",
    ),
    (
        "logtostderr",
        Kind::Bool,
        "",
        "log to standard error instead of files",
    ),
    (
        "max-sync-failures",
        Kind::Int,
        "int",
        "Number of consecutive polling failures before exiting. Default value of 0 will allow for unlimited retries.",
    ),
    (
        "namespace",
        Kind::Str,
        "string",
        "Namespace for all operations, fallback to the namespace of this autoscaler(through MY_POD_NAMESPACE env) if not specified.",
    ),
    (
        "nodelabels",
        Kind::Str,
        "string",
        "NodeLabels for filtering search of nodes and its cpus by LabelSelectors. Input format is a comma separated list of keyN=valueN LabelSelectors. Usage example: --nodelabels=label1=value1,label2=value2.",
    ),
    (
        "poll-period-seconds",
        Kind::Int,
        "int",
        "The time, in seconds, to check cluster status and perform autoscale. (default 10)",
    ),
    (
        "stderrthreshold",
        Kind::Str,
        "severity",
        "logs at or above this threshold go to stderr (default 2)",
    ),
    (
        "target",
        Kind::Str,
        "string",
        "Target to scale. In format: 'deployment/*,replicationcontroller/*,replicaset/*' (not case sensitive, comma delimiter supported).",
    ),
    ("v", Kind::Int, "Level", "log level for V logs"),
    ("version", Kind::Bool, "", "Print the version and exit."),
    (
        "vmodule",
        Kind::Str,
        "moduleSpec",
        "comma-separated list of pattern=N settings for file-filtered logging",
    ),
];

/// pflag's usage text for `program`.
pub fn usage(program: &str) -> String {
    let mut lines = Vec::new();
    for (name, _, ty, help) in FLAGS {
        let short = if *name == "v" { "  -v, " } else { "      " };
        lines.push((format!("{short}--{name} {ty}").trim_end().to_owned(), *help));
    }
    let width = lines.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
    let mut out = format!("Usage of {program}:\n");
    for (l, help) in lines {
        out.push_str(&format!("{l:width$}   {help}\n"));
    }
    out
}

/// Go's `strconv.ParseInt(s, 0, 64)`: a sign, then decimal, `0x`, `0o`, `0b` or leading-0
/// octal, `_` between digits.
fn go_int(s: &str) -> Result<i64, String> {
    let syntax = || format!("strconv.ParseInt: parsing {s:?}: invalid syntax");
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let (radix, digits) =
        if let Some(d) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
            (16, d)
        } else if let Some(d) = body.strip_prefix("0o").or_else(|| body.strip_prefix("0O")) {
            (8, d)
        } else if let Some(d) = body.strip_prefix("0b").or_else(|| body.strip_prefix("0B")) {
            (2, d)
        } else if body.len() > 1 && body.starts_with('0') {
            (8, &body[1..])
        } else {
            (10, body)
        };
    if digits.is_empty()
        || digits.starts_with('_')
        || digits.ends_with('_')
        || digits.contains("__")
    {
        return Err(syntax());
    }
    let clean: String = digits.chars().filter(|&c| c != '_').collect();
    if !clean.chars().all(|c| c.is_digit(radix)) {
        return Err(syntax());
    }
    let v = i128::from_str_radix(&clean, radix).map_err(|_| syntax())?;
    let v = if neg { -v } else { v };
    i64::try_from(v).map_err(|_| format!("strconv.ParseInt: parsing {s:?}: value out of range"))
}

/// Go's `strconv.ParseBool`.
fn go_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!("strconv.ParseBool: parsing {s:?}: invalid syntax")),
    }
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
    let mut f = Flags {
        namespace: namespace_env.unwrap_or_default(),
        poll_period_seconds: 10,
        health_address: ":8080".into(),
        ..Flags::default()
    };
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if a == "--" {
            break;
        }
        let (name, inline, shown) = if let Some(body) = a.strip_prefix("--") {
            if body.is_empty() || body.starts_with('-') || body.starts_with('=') {
                return Err(format!("bad flag syntax: {a}"));
            }
            let (n, v) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v.to_owned())),
                None => (body, None),
            };
            (n.replace('_', "-"), v, format!("--{n}"))
        } else if let Some(body) = a.strip_prefix('-').filter(|b| !b.is_empty()) {
            // Shorthands: only glog's `-v`.
            let c = body.chars().next().unwrap_or('-');
            if c != 'v' {
                return Err(format!("unknown shorthand flag: '{c}' in {a}"));
            }
            let rest = &body[1..];
            let v = rest.strip_prefix('=').unwrap_or(rest);
            (
                "v".to_owned(),
                (!v.is_empty()).then(|| v.to_owned()),
                "-v".to_owned(),
            )
        } else {
            // pflag keeps going past positional arguments; the autoscaler ignores them.
            continue;
        };
        if name == "help" || name == "h" {
            f.help = true;
            continue;
        }
        let Some((flag, kind, _, _)) = FLAGS.iter().find(|(n, ..)| *n == name) else {
            return Err(format!("unknown flag: {shown}"));
        };
        let value = match (kind, inline) {
            (_, Some(v)) => v,
            (Kind::Bool, None) => "true".to_owned(),
            (_, None) => {
                let Some(v) = args.get(i) else {
                    return Err(format!("flag needs an argument: {shown}"));
                };
                i += 1;
                v.clone()
            }
        };
        let bad = |e: String| format!("invalid argument {value:?} for \"{shown}\" flag: {e}");
        match *kind {
            Kind::Bool => {
                let b = go_bool(&value).map_err(bad)?;
                if *flag == "version" {
                    f.version = b;
                }
            }
            Kind::Int => {
                let n = go_int(&value).map_err(bad)?;
                match *flag {
                    "poll-period-seconds" => f.poll_period_seconds = n,
                    "max-sync-failures" => f.max_sync_failures = n,
                    "v" => f.verbosity = n,
                    _ => {}
                }
            }
            Kind::Params => f.default_params = Some(default_params(&value).map_err(bad)?),
            Kind::Str => match *flag {
                "target" => f.target = value,
                "configmap" => f.configmap = value,
                "namespace" => f.namespace = value,
                "nodelabels" => f.nodelabels = value,
                "kubeconfig" => f.kubeconfig = Some(value),
                "health-address" => f.health_address = value,
                _ => {}
            },
        }
    }
    f.target = f.target.to_lowercase();
    Ok(f)
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
