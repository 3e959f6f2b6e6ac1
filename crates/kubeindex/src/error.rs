//! Errors of this crate: the YAML source, and the API client's set-up (from
//! `clusterdns-kubeclient`). Watch errors are not
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
    /// The API client could not be set up.
    #[error(transparent)]
    Client(#[from] clusterdns_kubeclient::Error),
}
