//! Errors building an API client: its configuration and the HTTP client.

/// An error setting up a Kubernetes API client.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
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
