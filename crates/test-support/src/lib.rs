//! Test helpers: the test rig, the differential harness, DNS query helpers.
//!
//! - [`Rig`]: the real Kubernetes rig started by `scripts/rig up` (etcd,
//!   kube-apiserver, kube-controller-manager) and the reference CoreDNS in
//!   `.rig/bin/`. [`Rig::get`] returns `None` (the test skips) when no rig
//!   runs, unless `CLUSTERDNS_REQUIRE_RIG=1`.
//! - [`Differential`]: the reference CoreDNS and clusterdns on the same
//!   Corefile; [`Differential::query`] sends one query to both and lists
//!   every [`Difference`].
//! - [`Table`]: objects + Corefile + [`Case`]s, each agreeing or marked as an
//!   intended difference.
//! - [`RealNode`]: the rig's real node (`scripts/rig up --node`): its
//!   address, image import, container pids; [`node_or_skip!`] skips a test
//!   without it, unless `CLUSTERDNS_REQUIRE_NODE=1`.
//!
//! ```no_run
//! use clusterdns_test_support::{Case, Query, Table, rig_or_skip};
//!
//! let rig = rig_or_skip!();
//! let report = Table::new(".:@PORT@ {\n  bind 127.0.0.1\n  kubernetes cluster.local {\n    kubeconfig @KUBECONFIG@\n  }\n}\n")
//!     .objects("apiVersion: v1\nkind: Namespace\nmetadata: {name: demo}\n")
//!     .case(Case::new("api service", Query::new("kubernetes.default.svc.cluster.local", "A")))
//!     .run(&rig)
//!     .unwrap();
//! report.assert_ok();
//! ```

mod diff;
mod dns;
mod node;
mod ops;
mod private_rig;
mod process;
mod rig;
mod table;
mod wire_adapter;

pub use diff::{
    CLUSTERDNS_BIN_ENV, Comparison, Difference, Differential, RunningServer, Section, ServerSpec,
    TtlMode, clusterdns_bin, compare, render,
};
pub use dns::{
    Flags, Outcome, Query, QueryEdns, Response, ResponseEdns, Rr, Transport, exchange,
    exchange_from, exchange_tcp, exchange_udp, exchange_udp_from, rcode_name,
};
pub use node::{NODE_NAME, REQUIRE_NODE_ENV, RealNode, node_required};
pub use ops::{
    HttpResponse, LogLine, RunOutput, SeriesKey, assert_block_setup_errors_agree,
    assert_setup_errors_agree, block_setup_errors_differ, compare_log_lines, compare_metrics,
    error_line, http_exchange, http_get, http_request, log_lines, metric_samples, process_lines,
    reference_coredns, refusal_line, run, run_corefile, setup_errors_differ, without_location,
};
pub use private_rig::{ApiRequest, PrivateRig};
pub use process::{ScratchDir, ServerProcess, free_port};
pub use rig::{
    REQUIRE_RIG_ENV, RIG_DIR_ENV, Rig, TestNamespace, eventually, netns_add, rig_dir, rig_required,
    skip, workspace_root,
};
pub use table::{Case, CaseResult, Report, Table};
