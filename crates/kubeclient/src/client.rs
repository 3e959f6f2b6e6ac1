//! Where the API client's configuration comes from (in-cluster service account, a
//! kubeconfig file, or an explicit endpoint with TLS files), and the client built from it
//! with the client-side limits and request observer of [`ratelimit`](crate::ratelimit).

use std::path::PathBuf;
use std::sync::Arc;

use kube::config::{
    AuthInfo, Cluster, Context, KubeConfigOptions, Kubeconfig, NamedAuthInfo, NamedCluster,
    NamedContext,
};

use crate::error::Error;
use crate::ratelimit::{ClientLimits, LimitLayer, Observer, RequestObserver, url_host};

/// Client certificate, key and CA files for an explicit `endpoint` (`tls CERT KEY CACERT`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// Client certificate (PEM).
    pub cert: PathBuf,
    /// Client key (PEM).
    pub key: PathBuf,
    /// CA bundle that signed the API server's certificate (PEM).
    pub ca: PathBuf,
}

/// Where the API client configuration comes from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ClientSource {
    /// The pod's service account (`KUBERNETES_SERVICE_HOST`, token and CA files).
    #[default]
    InCluster,
    /// A kubeconfig file, optionally with a context other than its current one.
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// The context; `None` for `current-context`.
        context: Option<String>,
    },
    /// An explicit API server URL, with optional client TLS.
    Endpoint {
        /// `https://host:port` (or `http://` for a plain-text test server).
        url: String,
        /// Client certificate, key and CA.
        tls: Option<TlsFiles>,
    },
}

impl ClientSource {
    /// CoreDNS's precedence: `kubeconfig` wins over `endpoint`; neither means in-cluster.
    pub fn from_options(
        endpoint: Option<String>,
        tls: Option<TlsFiles>,
        kubeconfig: Option<(PathBuf, Option<String>)>,
    ) -> ClientSource {
        match (kubeconfig, endpoint) {
            (Some((path, context)), _) => ClientSource::Kubeconfig { path, context },
            (None, Some(url)) => ClientSource::Endpoint { url, tls },
            (None, None) => ClientSource::InCluster,
        }
    }

    /// The kube-rs configuration.
    pub async fn config(&self) -> Result<kube::Config, Error> {
        match self {
            ClientSource::InCluster => Ok(kube::Config::incluster()?),
            ClientSource::Kubeconfig { path, context } => {
                let what = path.display().to_string();
                let kc = Kubeconfig::read_from(path).map_err(|source| Error::Kubeconfig {
                    what: what.clone(),
                    source,
                })?;
                let options = KubeConfigOptions {
                    context: context.clone(),
                    ..KubeConfigOptions::default()
                };
                kube::Config::from_custom_kubeconfig(kc, &options)
                    .await
                    .map_err(|source| Error::Kubeconfig { what, source })
            }
            ClientSource::Endpoint { url, tls } => {
                // An in-memory kubeconfig, so that kube-rs reads and validates the PEM files
                // exactly as it does for a kubeconfig on disk.
                let mut cluster = Cluster {
                    server: Some(url.clone()),
                    ..Cluster::default()
                };
                let mut user = AuthInfo::default();
                if let Some(tls) = tls {
                    cluster.certificate_authority = Some(tls.ca.display().to_string());
                    user.client_certificate = Some(tls.cert.display().to_string());
                    user.client_key = Some(tls.key.display().to_string());
                }
                let name = "clusterdns".to_owned();
                let kc = Kubeconfig {
                    clusters: vec![NamedCluster {
                        name: name.clone(),
                        cluster: Some(cluster),
                        ..NamedCluster::default()
                    }],
                    auth_infos: vec![NamedAuthInfo {
                        name: name.clone(),
                        auth_info: Some(user),
                        ..NamedAuthInfo::default()
                    }],
                    contexts: vec![NamedContext {
                        name: name.clone(),
                        context: Some(Context {
                            cluster: name.clone(),
                            user: Some(name.clone()),
                            ..Context::default()
                        }),
                        ..NamedContext::default()
                    }],
                    current_context: Some(name),
                    ..Kubeconfig::default()
                };
                kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                    .await
                    .map_err(|source| Error::Kubeconfig {
                        what: format!("endpoint {url}"),
                        source,
                    })
            }
        }
    }

    /// A client for this source, without client-side limits.
    pub async fn client(&self) -> Result<kube::Client, Error> {
        self.client_with(&ClientLimits::NONE).await
    }

    /// A client for this source whose requests obey `limits` (see [`ClientLimits`]).
    pub async fn client_with(&self, limits: &ClientLimits) -> Result<kube::Client, Error> {
        self.client_observed(limits, None).await
    }

    /// A client for this source whose requests obey `limits` and, if given, are reported to
    /// `observer` (see [`RequestObserver`]) with the API server's `host[:port]` as the host.
    pub async fn client_observed(
        &self,
        limits: &ClientLimits,
        observer: Option<Arc<dyn RequestObserver>>,
    ) -> Result<kube::Client, Error> {
        let config = self.config().await?;
        if limits.is_none() && observer.is_none() {
            return Ok(kube::Client::try_from(config)?);
        }
        let mut layer = LimitLayer::new(limits);
        if let Some(sink) = observer {
            layer = layer.observed(Observer::new(sink, url_host(&config.cluster_url)));
        }
        Ok(kube::client::ClientBuilder::try_from(config)?
            .with_layer(&layer)
            .build())
    }
}
