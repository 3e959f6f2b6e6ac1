//! `coredns_nodecache_setup_errors_total{errortype}`, as upstream names and
//! pre-initialises it.

use std::sync::Arc;

use clusterdns_observe::metrics::{Counter, Family, Registry};

/// Every label upstream pre-initialises to 0.
pub const ERROR_TYPES: &[&str] = &[
    "configmap",
    "interface_add",
    "interface_check",
    "iptables",
    "iptables_lock",
];

/// The agent's counters.
#[derive(Clone)]
pub struct SetupMetrics {
    errors: Arc<Family<Counter>>,
    fallback: Arc<Family<Counter>>,
}

impl std::fmt::Debug for SetupMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SetupMetrics").finish_non_exhaustive()
    }
}

impl SetupMetrics {
    /// Registers the counters in `reg` (every label at 0).
    pub fn new(reg: &Registry) -> Self {
        let errors = reg.get_or_register("coredns_nodecache_setup_errors_total", || {
            Family::<Counter>::new(
                "coredns_nodecache_setup_errors_total",
                "The number of errors during periodic network setup for node-cache",
                &["errortype"],
            )
        });
        // Upstream shows every label at 0 from the start; ours are hidden
        // until touched, so touch them.
        for t in ERROR_TYPES {
            errors.with(&[t]).add(0);
        }
        let fallback = reg.get_or_register("coredns_nodecache_interface_fallback_total", || {
            Family::<Counter>::new(
                "coredns_nodecache_interface_fallback_total",
                "Times the interface was created as an empty bridge because the kernel has no dummy link type",
                &[],
            )
        });
        fallback.with(&[]).add(0);
        SetupMetrics { errors, fallback }
    }

    /// Counts one error of type `errortype` (one of [`ERROR_TYPES`]).
    pub fn error(&self, errortype: &str) {
        self.errors.with(&[errortype]).inc();
    }

    /// The count for `errortype`.
    pub fn errors(&self, errortype: &str) -> u64 {
        self.errors.with(&[errortype]).get()
    }

    /// Counts one bridge fallback.
    pub fn fallback(&self) {
        self.fallback.with(&[]).inc();
    }

    /// The bridge fallbacks so far.
    pub fn fallbacks(&self) -> u64 {
        self.fallback.with(&[]).get()
    }
}
