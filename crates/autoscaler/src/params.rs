//! The scaling parameters and their arithmetic, with no I/O: the ConfigMap's one data key
//! (`linear` or `ladder`) parsed as cluster-proportional-autoscaler parses it (Go's
//! `encoding/json` into its structs, then its validation), and the replica count for a
//! [`ClusterStatus`].

use serde_json::Value;

use crate::error::ParamsError;

/// What the node watch counted (after the `--nodelabels` filter).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClusterStatus {
    /// Every node.
    pub total_nodes: i32,
    /// Nodes that are not cordoned and whose `Ready` condition is `True`.
    pub schedulable_nodes: i32,
    /// `ceil(Σ allocatable.cpu)` over every node.
    pub total_cores: i32,
    /// `ceil(Σ allocatable.cpu)` over the schedulable nodes.
    pub schedulable_cores: i32,
}

/// Linear mode's parameters, after validation (`min` 0 already made 1).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Linear {
    /// `coresPerReplica`; 0 when omitted.
    pub cores_per_replica: f64,
    /// `nodesPerReplica`; 0 when omitted.
    pub nodes_per_replica: f64,
    /// `min` (≥ 1).
    pub min: i64,
    /// `max`; 0 means unbounded.
    pub max: i64,
    /// `preventSinglePointFailure`.
    pub prevent_single_point_failure: bool,
    /// `includeUnschedulableNodes`.
    pub include_unschedulable_nodes: bool,
}

/// Ladder mode's parameters: `[threshold, replicas]` steps, sorted by threshold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ladder {
    /// `coresToReplicas`.
    pub cores_to_replicas: Vec<[i64; 2]>,
    /// `nodesToReplicas`.
    pub nodes_to_replicas: Vec<[i64; 2]>,
    /// `includeUnschedulableNodes`.
    pub include_unschedulable_nodes: bool,
}

/// The parameters of one mode.
#[derive(Clone, Debug, PartialEq)]
pub enum Params {
    /// The ConfigMap key `linear`.
    Linear(Linear),
    /// The ConfigMap key `ladder`.
    Ladder(Ladder),
}

impl Params {
    /// The mode's name, which is also its ConfigMap key.
    pub fn mode(&self) -> &'static str {
        match self {
            Params::Linear(_) => "linear",
            Params::Ladder(_) => "ladder",
        }
    }

    /// The parameters from a ConfigMap's data: exactly one key, `linear` or `ladder`, whose
    /// value is the JSON text of that mode's parameters.
    pub fn from_data<'a>(
        data: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Params, ParamsError> {
        let entries: Vec<(&str, &str)> = data.into_iter().collect();
        let [(mode, text)] = entries.as_slice() else {
            let keys = entries.iter().map(|(k, _)| *k).collect::<Vec<_>>();
            return Err(ParamsError::Entries(keys.join(", ")));
        };
        match *mode {
            "linear" => Linear::parse(text).map(Params::Linear),
            "ladder" => Ladder::parse(text).map(Params::Ladder),
            other => return Err(ParamsError::Mode(other.to_owned())),
        }
        .map_err(|e| ParamsError::InMode {
            mode: if *mode == "linear" {
                "linear"
            } else {
                "ladder"
            },
            source: Box::new(e),
        })
    }

    /// The replica count for `status`, as upstream computes it.
    pub fn replicas(&self, status: &ClusterStatus) -> i32 {
        match self {
            Params::Linear(p) => p.replicas(status),
            Params::Ladder(p) => p.replicas(status),
        }
    }

    /// The replica count counting only the schedulable nodes, whatever
    /// `includeUnschedulableNodes` says: the floor of a scale-down.
    pub fn replicas_schedulable(&self, status: &ClusterStatus) -> i32 {
        match self {
            Params::Linear(p) => Linear {
                include_unschedulable_nodes: false,
                ..p.clone()
            }
            .replicas(status),
            Params::Ladder(p) => p.replicas_for(status.schedulable_nodes, status.schedulable_cores),
        }
    }

    /// The replica count to set when the target has `current`: [`Params::replicas`], except
    /// that a scale-down never goes below what the parameters give for the schedulable
    /// nodes alone (they differ only with `includeUnschedulableNodes` and a ladder whose
    /// steps go down), and that floor never turns a scale-down into a scale-up.
    pub fn decide(&self, status: &ClusterStatus, current: i32) -> i32 {
        let expected = self.replicas(status);
        if expected >= current {
            return expected;
        }
        expected.max(self.replicas_schedulable(status)).min(current)
    }
}

/// Go's `int(x)` of a float that is already whole, held in the target's `int32`.
fn to_replicas(x: f64) -> i32 {
    // Upstream's int32(int(x)) wraps past 2^31; replicas that large are clamped instead.
    x.clamp(f64::from(i32::MIN), f64::from(i32::MAX)) as i32
}

/// Go's `int32(n)` of a count or step value: clamped rather than wrapped.
fn clamp_i32(n: i64) -> i32 {
    n.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
}

impl Linear {
    /// Parses and validates linear mode's JSON.
    pub fn parse(text: &str) -> Result<Linear, ParamsError> {
        let mut p = Linear::default();
        let fields = GoObject::parse(text, "linearParams")?;
        for (key, value) in fields.0 {
            match key.to_ascii_lowercase().as_str() {
                "coresperreplica" => set_float(&mut p.cores_per_replica, value, "coresPerReplica")?,
                "nodesperreplica" => set_float(&mut p.nodes_per_replica, value, "nodesPerReplica")?,
                "min" => set_int(&mut p.min, value, "linearParams", "min")?,
                "max" => set_int(&mut p.max, value, "linearParams", "max")?,
                "preventsinglepointfailure" => set_bool(
                    &mut p.prevent_single_point_failure,
                    value,
                    "linearParams.preventSinglePointFailure",
                )?,
                "includeunschedulablenodes" => set_bool(
                    &mut p.include_unschedulable_nodes,
                    value,
                    "linearParams.includeUnschedulableNodes",
                )?,
                // Go's decoder ignores keys that match no field.
                _ => {}
            }
        }
        if p.min < 0 {
            return Err(ParamsError::Invalid(format!(
                "invalid negative value for min: {}",
                p.min
            )));
        }
        if p.min == 0 {
            p.min = 1;
        }
        if p.max != 0 && p.max < p.min {
            return Err(ParamsError::Invalid(format!(
                "max replicas count {} should be greater than / equal to min replicas count {}",
                p.max, p.min
            )));
        }
        if p.cores_per_replica == 0.0 && p.nodes_per_replica == 0.0 {
            return Err(ParamsError::Invalid(
                "should at least provide either coresPerReplica or nodesPerReplica (Greater than 0)"
                    .into(),
            ));
        }
        if p.cores_per_replica < 0.0 {
            return Err(ParamsError::Invalid(format!(
                "invalid negative value for coresPerReplica: {}",
                go_float(p.cores_per_replica)
            )));
        }
        if p.nodes_per_replica < 0.0 {
            return Err(ParamsError::Invalid(format!(
                "invalid negative value for nodesPerReplica: {}",
                go_float(p.nodes_per_replica)
            )));
        }
        Ok(p)
    }

    /// `f(r, per)`: 1 for an omitted per-value (no clamp), else `ceil(r/per)` clamped to
    /// `[min, max]` (`max` 0: no upper bound).
    fn per_param(&self, resources: i32, per: f64) -> f64 {
        if per == 0.0 {
            return 1.0;
        }
        let mut r = (f64::from(resources) / per).ceil();
        if self.max != 0 {
            r = r.min(self.max as f64);
        }
        r.max(self.min as f64)
    }

    /// The replica count for `status`.
    pub fn replicas(&self, status: &ClusterStatus) -> i32 {
        let (nodes, cores) = if self.include_unschedulable_nodes {
            (status.total_nodes, status.total_cores)
        } else {
            (status.schedulable_nodes, status.schedulable_cores)
        };
        let from_cores = self.per_param(cores, self.cores_per_replica);
        let mut from_nodes = self.per_param(nodes, self.nodes_per_replica);
        // The bump comes after the clamp: `max: 1` with two nodes still gives 2.
        if self.prevent_single_point_failure && nodes > 1 && from_nodes < 2.0 {
            from_nodes = 2.0;
        }
        to_replicas(from_cores.max(from_nodes))
    }
}

impl Ladder {
    /// Parses and validates ladder mode's JSON; the steps come out sorted by threshold.
    pub fn parse(text: &str) -> Result<Ladder, ParamsError> {
        let mut p = Ladder::default();
        let fields = GoObject::parse(text, "ladderParams")?;
        for (key, value) in fields.0 {
            match key.to_ascii_lowercase().as_str() {
                "corestoreplicas" => p.cores_to_replicas = steps(value, "coresToReplicas")?,
                "nodestoreplicas" => p.nodes_to_replicas = steps(value, "nodesToReplicas")?,
                "includeunschedulablenodes" => set_bool(
                    &mut p.include_unschedulable_nodes,
                    value,
                    "ladderParams.includeUnschedulableNodes",
                )?,
                _ => {}
            }
        }
        for (list, key) in [
            (&p.cores_to_replicas, "coresToReplicas"),
            (&p.nodes_to_replicas, "nodesToReplicas"),
        ] {
            if let Some(e) = list.iter().find(|e| e[0] < 0 || e[1] < 0) {
                return Err(ParamsError::Invalid(format!(
                    "invalid negative values in entry [{} {}] in {key}",
                    e[0], e[1]
                )));
            }
        }
        // Stable, so equal thresholds keep their order (Go's sort.Sort does not promise one).
        p.cores_to_replicas.sort_by_key(|e| e[0]);
        p.nodes_to_replicas.sort_by_key(|e| e[0]);
        Ok(p)
    }

    /// The step of the largest threshold ≤ `value`; the first step's replicas below the first
    /// threshold; 0 for no steps.
    fn lookup(value: i32, steps: &[[i64; 2]]) -> i64 {
        if steps.is_empty() {
            return 0;
        }
        let pos = steps.partition_point(|e| i64::from(value) >= e[0]);
        steps[pos.saturating_sub(1)][1]
    }

    fn replicas_for(&self, nodes: i32, cores: i32) -> i32 {
        let from_cores = Self::lookup(cores, &self.cores_to_replicas);
        let from_nodes = Self::lookup(nodes, &self.nodes_to_replicas);
        clamp_i32(from_cores.max(from_nodes))
    }

    /// The replica count for `status` (0 is a valid answer).
    pub fn replicas(&self, status: &ClusterStatus) -> i32 {
        if self.include_unschedulable_nodes {
            self.replicas_for(status.total_nodes, status.total_cores)
        } else {
            self.replicas_for(status.schedulable_nodes, status.schedulable_cores)
        }
    }
}

/// A JSON object's members as Go's decoder sees them for a struct: `null` is an empty
/// struct, any other non-object is a type error.
struct GoObject(Vec<(String, Value)>);

impl GoObject {
    fn parse(text: &str, go_type: &str) -> Result<GoObject, ParamsError> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| ParamsError::Json(e.to_string()))?;
        match value {
            Value::Object(map) => Ok(GoObject(map.into_iter().collect())),
            Value::Null => Ok(GoObject(Vec::new())),
            other => Err(ParamsError::Type {
                found: json_kind(&other),
                field: go_type.to_owned(),
                want: format!("{}controller.{go_type}", go_type.trim_end_matches("Params")),
            }),
        }
    }
}

/// Go's name for a JSON value's kind in its `UnmarshalTypeError`.
fn json_kind(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(_) => "bool".into(),
        Value::Number(n) => format!("number {n}"),
        Value::String(_) => "string".into(),
        Value::Array(_) => "array".into(),
        Value::Object(_) => "object".into(),
    }
}

fn type_error(v: &Value, field: &str, want: &str) -> ParamsError {
    ParamsError::Type {
        found: json_kind(v),
        field: field.to_owned(),
        want: want.to_owned(),
    }
}

/// Go prints a float64 with `%v`: no fraction for whole numbers.
fn go_float(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e21 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

fn set_float(slot: &mut f64, v: Value, key: &str) -> Result<(), ParamsError> {
    match &v {
        Value::Null => Ok(()),
        Value::Number(n) => match n.as_f64() {
            Some(x) => {
                *slot = x;
                Ok(())
            }
            None => Err(type_error(&v, &format!("linearParams.{key}"), "float64")),
        },
        _ => Err(type_error(&v, &format!("linearParams.{key}"), "float64")),
    }
}

/// An `int` field: Go takes only integer literals (no fraction, no exponent).
fn int_of(v: &Value, field: &str) -> Result<Option<i64>, ParamsError> {
    match v {
        Value::Null => Ok(None),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Ok(Some(i)),
            None => Err(type_error(v, field, "int")),
        },
        _ => Err(type_error(v, field, "int")),
    }
}

fn set_int(slot: &mut i64, v: Value, go_type: &str, key: &str) -> Result<(), ParamsError> {
    if let Some(i) = int_of(&v, &format!("{go_type}.{key}"))? {
        *slot = i;
    }
    Ok(())
}

fn set_bool(slot: &mut bool, v: Value, field: &str) -> Result<(), ParamsError> {
    match v {
        Value::Null => Ok(()),
        Value::Bool(b) => {
            *slot = b;
            Ok(())
        }
        other => Err(type_error(&other, field, "bool")),
    }
}

/// A list of `[threshold, replicas]` decoded into Go's `[2]int`: a shorter entry is filled
/// with zeros, a longer one loses its extra elements, `null` is `[0 0]`.
fn steps(v: Value, key: &str) -> Result<Vec<[i64; 2]>, ParamsError> {
    let field = format!("ladderParams.{key}");
    let items = match v {
        Value::Null => return Ok(Vec::new()),
        Value::Array(items) => items,
        other => return Err(type_error(&other, &field, "[][2]int")),
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let mut entry = [0i64; 2];
        match item {
            Value::Null => {}
            Value::Array(xs) => {
                for (slot, x) in entry.iter_mut().zip(xs.iter()) {
                    if let Some(i) = int_of(x, &field)? {
                        *slot = i;
                    }
                }
                // Go still type-checks the elements it discards.
                for x in xs.iter().skip(2) {
                    int_of(x, &field)?;
                }
            }
            other => return Err(type_error(&other, &field, "[2]int")),
        }
        out.push(entry);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(sn: i32, tn: i32, sc: i32, tc: i32) -> ClusterStatus {
        ClusterStatus {
            total_nodes: tn,
            schedulable_nodes: sn,
            total_cores: tc,
            schedulable_cores: sc,
        }
    }

    /// Nodes all schedulable, `cores` in all.
    fn all(nodes: i32, cores: i32) -> ClusterStatus {
        status(nodes, nodes, cores, cores)
    }

    /// Each case's parameters under `mode` give its replicas for its cluster.
    fn check(mode: &str, cases: &[(&str, ClusterStatus, i32)]) {
        for (json, st, want) in cases {
            let p = Params::from_data([(mode, *json)]).unwrap_or_else(|e| panic!("{json}: {e}"));
            assert_eq!(p.replicas(st), *want, "{json} with {st:?}");
        }
    }

    const COREDNS: &str =
        r#"{"coresPerReplica":256,"nodesPerReplica":16,"preventSinglePointFailure":true}"#;

    /// (parameters JSON, cluster, expected replicas): §3.4's formula, edge cases and worked
    /// examples.
    #[test]
    fn linear_table() {
        let cases: &[(&str, ClusterStatus, i32)] = &[
            // CoreDNS's defaults, the reference's worked examples.
            (COREDNS, all(1, 4), 1),
            (COREDNS, all(3, 12), 2),
            (COREDNS, all(100, 800), 7),
            (COREDNS, all(0, 0), 1),
            (COREDNS, all(17, 68), 2),
            (COREDNS, all(33, 132), 3),
            (COREDNS, all(16, 2048), 8),
            // Only cores; nodes omitted gives 1 (no clamp), cores gives ceil.
            (r#"{"coresPerReplica":2}"#, all(3, 5), 3),
            (r#"{"coresPerReplica":2}"#, all(3, 0), 1),
            // Fractional per-values.
            (r#"{"coresPerReplica":0.5}"#, all(1, 3), 6),
            (r#"{"nodesPerReplica":1.5}"#, all(4, 0), 3),
            // min / max clamp.
            (r#"{"nodesPerReplica":1,"min":3}"#, all(1, 1), 3),
            (r#"{"nodesPerReplica":1,"max":2}"#, all(10, 10), 2),
            (r#"{"nodesPerReplica":1,"max":0}"#, all(10, 10), 10),
            (r#"{"nodesPerReplica":1,"min":0}"#, all(0, 0), 1),
            // An omitted per-value gives 1 without the clamp: min 5 does not lift it, but the
            // other per-value is clamped.
            (r#"{"coresPerReplica":100,"min":5}"#, all(1, 1), 5),
            (r#"{"nodesPerReplica":100,"min":5,"max":5}"#, all(1, 1), 5),
            // The SPOF bump comes after the clamp: max 1 with 2 nodes gives 2.
            (
                r#"{"nodesPerReplica":16,"max":1,"preventSinglePointFailure":true}"#,
                all(2, 2),
                2,
            ),
            (
                r#"{"coresPerReplica":16,"max":1,"preventSinglePointFailure":true}"#,
                all(2, 2),
                2,
            ),
            (
                r#"{"nodesPerReplica":16,"preventSinglePointFailure":true}"#,
                all(1, 2),
                1,
            ),
            (
                r#"{"nodesPerReplica":16,"preventSinglePointFailure":false}"#,
                all(3, 2),
                1,
            ),
            // Unschedulable nodes: counted only with includeUnschedulableNodes.
            (r#"{"nodesPerReplica":1}"#, status(2, 5, 8, 20), 2),
            (
                r#"{"nodesPerReplica":1,"includeUnschedulableNodes":true}"#,
                status(2, 5, 8, 20),
                5,
            ),
            (
                r#"{"coresPerReplica":4,"includeUnschedulableNodes":true}"#,
                status(2, 5, 8, 20),
                5,
            ),
            (r#"{"coresPerReplica":4}"#, status(2, 5, 8, 20), 2),
            // SPOF looks at the nodes counted: 1 schedulable of 3 gives 1.
            (COREDNS, status(1, 3, 4, 12), 1),
            // Go's decoder: field names match case-insensitively, unknown keys are ignored.
            (r#"{"CoresPerReplica":2,"foo":1}"#, all(1, 4), 2),
            (r#"{"nodesPerReplica":1,"min":null}"#, all(0, 0), 1),
        ];
        check("linear", cases);
    }

    /// (parameters JSON, cluster, expected replicas): §3.5's lookup.
    #[test]
    fn ladder_table() {
        let readme = r#"{"coresToReplicas":[[1,1],[64,3],[512,5],[1024,7],[2048,10],[4096,15]],
                         "nodesToReplicas":[[1,1],[2,2]]}"#;
        let cases: &[(&str, ClusterStatus, i32)] = &[
            // The README's example: 100 nodes, 400 cores gives max(3, 2).
            (readme, all(100, 400), 3),
            (readme, all(1, 1), 1),
            (readme, all(2, 63), 2),
            (readme, all(2, 64), 3),
            (readme, all(5000, 5000), 15),
            // Below the first threshold: the first step's replicas.
            (r#"{"nodesToReplicas":[[3,2],[6,4]]}"#, all(1, 0), 2),
            (r#"{"nodesToReplicas":[[3,2],[6,4]]}"#, all(3, 0), 2),
            (r#"{"nodesToReplicas":[[3,2],[6,4]]}"#, all(5, 0), 2),
            (r#"{"nodesToReplicas":[[3,2],[6,4]]}"#, all(6, 0), 4),
            // Sorted on load.
            (r#"{"nodesToReplicas":[[6,4],[0,1],[3,2]]}"#, all(4, 0), 2),
            // 0 replicas is allowed.
            (r#"{"nodesToReplicas":[[0,0],[6,1]]}"#, all(5, 0), 0),
            (r#"{"nodesToReplicas":[[0,0],[6,1]]}"#, all(6, 0), 1),
            // No steps at all: 0.
            (r#"{}"#, all(6, 24), 0),
            (r#"{"coresToReplicas":[]}"#, all(6, 24), 0),
            // Unschedulable nodes only with includeUnschedulableNodes.
            (
                r#"{"nodesToReplicas":[[1,1],[4,4]]}"#,
                status(2, 5, 0, 0),
                1,
            ),
            (
                r#"{"nodesToReplicas":[[1,1],[4,4]],"includeUnschedulableNodes":true}"#,
                status(2, 5, 0, 0),
                4,
            ),
            // Go's [2]int: a short entry is zero-filled, a long one truncated.
            (r#"{"nodesToReplicas":[[5]]}"#, all(9, 0), 0),
            (r#"{"nodesToReplicas":[[0,2,9]]}"#, all(9, 0), 2),
        ];
        check("ladder", cases);
    }

    /// Bad parameters: an error that names the key (or the data's keys).
    #[test]
    fn errors_name_the_key() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (
                &[("linear", r#"{"min":-1,"nodesPerReplica":1}"#)],
                "invalid negative value for min: -1",
            ),
            (
                &[("linear", r#"{"min":3,"max":2,"nodesPerReplica":1}"#)],
                "max replicas count 2 should be greater than / equal to min replicas count 3",
            ),
            (
                &[("linear", r#"{"min":2}"#)],
                "either coresPerReplica or nodesPerReplica",
            ),
            (
                &[("linear", r#"{"coresPerReplica":-1}"#)],
                "invalid negative value for coresPerReplica: -1",
            ),
            (
                &[("linear", r#"{"nodesPerReplica":-0.5}"#)],
                "invalid negative value for nodesPerReplica: -0.5",
            ),
            (
                &[("linear", r#"{"nodesPerReplica":"16"}"#)],
                "string into Go struct field linearParams.nodesPerReplica of type float64",
            ),
            (
                &[("linear", r#"{"nodesPerReplica":1,"min":1.5}"#)],
                "number 1.5 into Go struct field linearParams.min of type int",
            ),
            (
                &[(
                    "linear",
                    r#"{"nodesPerReplica":1,"preventSinglePointFailure":"yes"}"#,
                )],
                "linearParams.preventSinglePointFailure of type bool",
            ),
            (
                &[("linear", r#"{"nodesPerReplica":1"#)],
                "error parsing linear params: could not parse parameters",
            ),
            (&[("linear", "")], "could not parse parameters"),
            (
                &[("linear", "[1]")],
                "array into Go value of type linearcontroller.linearParams",
            ),
            (
                &[("ladder", r#"{"coresToReplicas":[[-1,2]]}"#)],
                "invalid negative values in entry [-1 2] in coresToReplicas",
            ),
            (
                &[("ladder", r#"{"nodesToReplicas":[[1,-2]]}"#)],
                "invalid negative values in entry [1 -2] in nodesToReplicas",
            ),
            (
                &[("ladder", r#"{"nodesToReplicas":[[1,"2"]]}"#)],
                "ladderParams.nodesToReplicas of type int",
            ),
            (
                &[("ladder", r#"{"nodesToReplicas":{"1":2}}"#)],
                "object into Go struct field ladderParams.nodesToReplicas",
            ),
            (
                &[(
                    "ladder",
                    r#"{"includeUnschedulableNodes":1,"nodesToReplicas":[]}"#,
                )],
                "ladderParams.includeUnschedulableNodes of type bool",
            ),
            (
                &[("linear", "{}"), ("ladder", "{}")],
                "expected only one entry, got: linear, ladder",
            ),
            (&[], "expected only one entry, got: "),
            (
                &[("exponential", "{}")],
                "not a supported control mode: exponential",
            ),
        ];
        for (data, want) in cases {
            let err = Params::from_data(data.iter().copied())
                .expect_err(want)
                .to_string();
            assert!(err.contains(want), "{data:?}: {err:?} lacks {want:?}");
        }
    }

    /// Beyond upstream: a scale-down stops at the schedulable nodes' count, and that floor
    /// never makes a scale-up of a scale-down.
    #[test]
    fn scale_down_floor() {
        // A ladder that goes down with more nodes, counting the cordoned ones: 2 schedulable
        // of 8 gives 1 from the total, 3 from the schedulable nodes.
        let p = Params::from_data([(
            "ladder",
            r#"{"nodesToReplicas":[[0,3],[4,1]],"includeUnschedulableNodes":true}"#,
        )])
        .expect("valid");
        let st = status(2, 8, 0, 0);
        assert_eq!(p.replicas(&st), 1);
        assert_eq!(
            p.decide(&st, 5),
            3,
            "scale-down stops at the schedulable count"
        );
        assert_eq!(p.decide(&st, 2), 2, "no scale-up from the floor");
        assert_eq!(p.decide(&st, 0), 1, "a scale-up is upstream's");
        // Linear is monotonic: the floor never binds.
        let l = Params::from_data([(
            "linear",
            r#"{"nodesPerReplica":1,"includeUnschedulableNodes":true}"#,
        )])
        .expect("valid");
        assert_eq!(l.decide(&status(2, 8, 0, 0), 10), 8);
        assert_eq!(l.decide(&status(2, 8, 0, 0), 3), 8);
    }
}
