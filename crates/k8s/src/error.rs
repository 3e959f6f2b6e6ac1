//! Errors of this crate: client configuration and the YAML source. Watch errors are not
//! here: watchers retry forever with backoff and only report through
//! [`IndexHooks::watch_error`](crate::IndexHooks::watch_error) and logs.

use std::path::PathBuf;

/// An error setting up a source of cluster objects.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The YAML source is not valid YAML.
    #[error("parsing Kubernetes objects YAML: {0}")]
    Yaml(#[from] serde_norway::Error),
    /// The kubeconfig file (or the configuration built from `endpoint`/`tls`) is unusable.
    #[error("kubeconfig {what}: {source}")]
    Kubeconfig {
        /// The file, or `endpoint URL`.
        what: String,
        /// Why.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// Neither `endpoint` nor `kubeconfig` was given and this is not a pod with a service
    /// account.
    #[error("in-cluster configuration: {0}")]
    InCluster(#[from] kube::config::InClusterError),
    /// The HTTP client could not be built from the configuration.
    #[error("creating the Kubernetes API client: {0}")]
    Client(#[from] kube::Error),
}
