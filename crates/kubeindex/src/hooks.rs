//! Counter hooks: how the index reports what it does, so a plugin can export
//! `coredns_kubernetes_*` metrics without this crate knowing about any metrics library.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The kinds of object the index follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `v1/Service`.
    Service,
    /// `discovery.k8s.io/v1/EndpointSlice`.
    EndpointSlice,
    /// `v1/Pod`.
    Pod,
    /// `v1/Namespace`.
    Namespace,
    /// `v1/Node` (only for `zone_aware`).
    Node,
}

/// How many kinds there are.
const KINDS: usize = Kind::ALL.len();

impl Kind {
    /// All kinds, in index order.
    pub const ALL: [Kind; 5] = [
        Kind::Service,
        Kind::EndpointSlice,
        Kind::Pod,
        Kind::Namespace,
        Kind::Node,
    ];

    /// Lower-case name, usable as a metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Service => "service",
            Kind::EndpointSlice => "endpointslice",
            Kind::Pod => "pod",
            Kind::Namespace => "namespace",
            Kind::Node => "node",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What happened to the index for one watch event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// An object was added or updated (including relist items).
    Apply,
    /// An object was deleted.
    Delete,
    /// A (re)list started.
    Init,
    /// A (re)list finished; objects it did not contain were removed.
    InitDone,
}

/// Why an object, or part of one, was not indexed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SkipReason {
    /// The object has no `metadata.name` or `metadata.namespace`.
    MissingName,
    /// A service or namespace name longer than a DNS label (63 bytes).
    NameTooLong,
    /// An address that does not parse as an IP (the address is skipped, not the object).
    InvalidIp,
    /// A port outside 1..=65535 or with an unknown protocol (the port is skipped).
    InvalidPort,
    /// An endpoint `hostname` that is not a DNS label (the hostname is dropped).
    InvalidHostname,
    /// An EndpointSlice without the `kubernetes.io/service-name` label: it can never
    /// match a service.
    NoServiceLabel,
    /// A terminated or deleting pod, or one without an IP: not indexed.
    PodWithoutIp,
    /// A document of the YAML source that is not a Kubernetes object this index knows, or
    /// that failed to decode.
    Undecodable,
}

impl SkipReason {
    /// All reasons.
    pub const ALL: [SkipReason; 8] = [
        SkipReason::MissingName,
        SkipReason::NameTooLong,
        SkipReason::InvalidIp,
        SkipReason::InvalidPort,
        SkipReason::InvalidHostname,
        SkipReason::NoServiceLabel,
        SkipReason::PodWithoutIp,
        SkipReason::Undecodable,
    ];

    /// Lower-case name, usable as a metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::MissingName => "missing_name",
            SkipReason::NameTooLong => "name_too_long",
            SkipReason::InvalidIp => "invalid_ip",
            SkipReason::InvalidPort => "invalid_port",
            SkipReason::InvalidHostname => "invalid_hostname",
            SkipReason::NoServiceLabel => "no_service_label",
            SkipReason::PodWithoutIp => "pod_without_ip",
            SkipReason::Undecodable => "undecodable",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `service_kind` label of `coredns_kubernetes_dns_programming_duration_seconds`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProgrammingKind {
    /// A service with a cluster IP.
    ClusterIp,
    /// A headless service with a selector.
    HeadlessWithSelector,
}

impl ProgrammingKind {
    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ProgrammingKind::ClusterIp => "cluster_ip",
            ProgrammingKind::HeadlessWithSelector => "headless_with_selector",
        }
    }
}

/// Callbacks from the index and the watchers. All methods default to doing nothing; they are
/// called from the single index task, so they should only bump counters.
pub trait IndexHooks: Send + Sync + 'static {
    /// A watch event of `kind` was applied.
    fn event(&self, kind: Kind, event: EventKind) {
        let _ = (kind, event);
    }
    /// Something of `kind` was skipped.
    fn skipped(&self, kind: Kind, reason: SkipReason) {
        let _ = (kind, reason);
    }
    /// The watcher of `kind` failed (it retries with backoff; the last snapshot stays served).
    /// `error` says why: for a request the API server refused, its own message and status
    /// (a 403 names the user, the verb and the resource), else the client's error.
    fn watch_error(&self, kind: Kind, error: &str) {
        let _ = (kind, error);
    }
    /// A snapshot was published.
    fn published(&self, generation: u64) {
        let _ = generation;
    }
    /// Time from an EndpointSlice's `endpoints.kubernetes.io/last-change-trigger-time` to the
    /// publish of the snapshot that contains it.
    fn dns_programming(&self, kind: ProgrammingKind, latency: Duration) {
        let _ = (kind, latency);
    }
}

/// Hooks that do nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoHooks;

impl IndexHooks for NoHooks {}

/// Hooks that count into atomics; handy in tests and as a base for metrics.
#[derive(Debug, Default)]
pub struct Counters {
    events: [[AtomicU64; 4]; KINDS],
    skipped: [[AtomicU64; 8]; KINDS],
    watch_errors: [AtomicU64; KINDS],
    published: AtomicU64,
    programming: AtomicU64,
}

impl Counters {
    /// Events of `kind` and `event` so far.
    pub fn events(&self, kind: Kind, event: EventKind) -> u64 {
        self.events[kind as usize][event as usize].load(Ordering::Relaxed)
    }
    /// Skips of `kind` for `reason` so far.
    pub fn skipped(&self, kind: Kind, reason: SkipReason) -> u64 {
        self.skipped[kind as usize][reason.index()].load(Ordering::Relaxed)
    }
    /// Skips for `reason`, all kinds.
    pub fn skipped_total(&self, reason: SkipReason) -> u64 {
        Kind::ALL.iter().map(|k| self.skipped(*k, reason)).sum()
    }
    /// Watch errors of `kind`.
    pub fn watch_errors(&self, kind: Kind) -> u64 {
        self.watch_errors[kind as usize].load(Ordering::Relaxed)
    }
    /// Snapshots published.
    pub fn published(&self) -> u64 {
        self.published.load(Ordering::Relaxed)
    }
    /// Programming-duration observations.
    pub fn programming_observations(&self) -> u64 {
        self.programming.load(Ordering::Relaxed)
    }
}

impl IndexHooks for Counters {
    fn event(&self, kind: Kind, event: EventKind) {
        self.events[kind as usize][event as usize].fetch_add(1, Ordering::Relaxed);
    }
    fn skipped(&self, kind: Kind, reason: SkipReason) {
        self.skipped[kind as usize][reason.index()].fetch_add(1, Ordering::Relaxed);
    }
    fn watch_error(&self, kind: Kind, _error: &str) {
        self.watch_errors[kind as usize].fetch_add(1, Ordering::Relaxed);
    }
    fn published(&self, _generation: u64) {
        self.published.fetch_add(1, Ordering::Relaxed);
    }
    fn dns_programming(&self, _kind: ProgrammingKind, _latency: Duration) {
        self.programming.fetch_add(1, Ordering::Relaxed);
    }
}

impl<T: IndexHooks> IndexHooks for std::sync::Arc<T> {
    fn event(&self, kind: Kind, event: EventKind) {
        (**self).event(kind, event);
    }
    fn skipped(&self, kind: Kind, reason: SkipReason) {
        (**self).skipped(kind, reason);
    }
    fn watch_error(&self, kind: Kind, error: &str) {
        (**self).watch_error(kind, error);
    }
    fn published(&self, generation: u64) {
        (**self).published(generation);
    }
    fn dns_programming(&self, kind: ProgrammingKind, latency: Duration) {
        (**self).dns_programming(kind, latency);
    }
}
