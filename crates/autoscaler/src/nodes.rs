//! Counting nodes and cores, as upstream's node lister does: a node counts as schedulable
//! when it is not cordoned and its `Ready` condition is `True`; cores are
//! `ceil(Σ allocatable.cpu)`, the sum taken exactly before rounding up.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Node;

use crate::params::ClusterStatus;

/// What is kept of a Node (upstream trims the same way: name, `unschedulable`,
/// allocatable, conditions).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeInfo {
    /// Allocatable CPU in nano-cores (rounded up to a nano-core, as Kubernetes does).
    pub cpu_nanos: i128,
    /// Not cordoned and Ready.
    pub schedulable: bool,
}

impl NodeInfo {
    /// The parts of `node` the counts need.
    pub fn of(node: &Node) -> NodeInfo {
        let unschedulable = node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
        let status = node.status.as_ref();
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let cpu_nanos = status
            .and_then(|s| s.allocatable.as_ref())
            .and_then(|a| a.get("cpu"))
            .and_then(|q| nanos(&q.0))
            .unwrap_or(0);
        NodeInfo {
            cpu_nanos,
            schedulable: !unschedulable && ready,
        }
    }
}

/// The counts over `nodes`.
pub fn status<'a>(nodes: impl IntoIterator<Item = &'a NodeInfo>) -> ClusterStatus {
    let (mut total, mut sched, mut tc, mut sc) = (0i64, 0i64, 0i128, 0i128);
    for n in nodes {
        total += 1;
        tc += n.cpu_nanos;
        if n.schedulable {
            sched += 1;
            sc += n.cpu_nanos;
        }
    }
    let cores = |nanos: i128| -> i32 {
        let c = nanos.div_euclid(NANO) + i128::from(nanos.rem_euclid(NANO) != 0);
        c.clamp(0, i128::from(i32::MAX)) as i32
    };
    ClusterStatus {
        total_nodes: total.min(i64::from(i32::MAX)) as i32,
        schedulable_nodes: sched.min(i64::from(i32::MAX)) as i32,
        total_cores: cores(tc),
        schedulable_cores: cores(sc),
    }
}

/// The node table the watch keeps, keyed by name.
pub type NodeTable = HashMap<String, NodeInfo>;

const NANO: i128 = 1_000_000_000;

/// A Kubernetes quantity (`4`, `3500m`, `1.5`, `2k`, `1Ki`, `5e2`) in nano-units, rounded
/// up; `None` when it is not a quantity.
pub fn nanos(q: &str) -> Option<i128> {
    let q = q.trim();
    let (neg, q) = match q.as_bytes().first() {
        Some(b'-') => (true, &q[1..]),
        Some(b'+') => (false, &q[1..]),
        _ => (false, q),
    };
    let end = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(end);
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if int.is_empty() && frac.is_empty() || frac.contains('.') || int.len() + frac.len() > 30 {
        return None;
    }
    // digits as an integer, scaled by 10^-frac.len()
    let digits: i128 = format!("{int}{frac}").parse().ok()?;
    let (mul, exp10): (i128, i32) = match suffix {
        "" => (1, 0),
        "n" => (1, -9),
        "u" => (1, -6),
        "m" => (1, -3),
        "k" => (1, 3),
        "M" => (1, 6),
        "G" => (1, 9),
        "T" => (1, 12),
        "P" => (1, 15),
        "E" => (1, 18),
        "Ki" => (1 << 10, 0),
        "Mi" => (1 << 20, 0),
        "Gi" => (1 << 30, 0),
        "Ti" => (1 << 40, 0),
        "Pi" => (1 << 50, 0),
        "Ei" => (1 << 60, 0),
        s if s.starts_with(['e', 'E']) => (1, s[1..].parse().ok()?),
        _ => return None,
    };
    // value = digits * mul * 10^(exp10 - frac.len()) units = that * 10^9 nanos
    let shift = exp10 + 9 - i32::try_from(frac.len()).ok()?;
    let base = digits.checked_mul(mul)?;
    let v = if shift >= 0 {
        base.checked_mul(10i128.checked_pow(shift.unsigned_abs())?)?
    } else {
        let d = 10i128
            .checked_pow(shift.unsigned_abs())
            .unwrap_or(i128::MAX);
        base / d + i128::from(base % d != 0)
    };
    Some(if neg { -v } else { v })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        for (q, want) in [
            ("4", 4 * NANO),
            ("3500m", 3_500_000_000),
            ("1.5", 1_500_000_000),
            ("250m", 250_000_000),
            ("2k", 2000 * NANO),
            ("1Ki", 1024 * NANO),
            ("5e2", 500 * NANO),
            ("1n", 1),
            ("0.1n", 1),
            ("0", 0),
        ] {
            assert_eq!(nanos(q), Some(want), "{q}");
        }
        for bad in ["", "x", "1.2.3", "4 cores", "1Zi"] {
            assert_eq!(nanos(bad), None, "{bad}");
        }
    }

    /// The sum is rounded up once: 3 × 500m is 2 cores, not 3.
    #[test]
    fn cores_round_up_the_sum() {
        let n = |m: i128, schedulable| NodeInfo {
            cpu_nanos: m * 1_000_000,
            schedulable,
        };
        let s = status(&[n(500, true), n(500, true), n(500, false)]);
        assert_eq!(
            s,
            ClusterStatus {
                total_nodes: 3,
                schedulable_nodes: 2,
                total_cores: 2,
                schedulable_cores: 1
            }
        );
    }
}
