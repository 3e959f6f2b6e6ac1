//! Client configuration sources (no cluster needed).

use std::path::PathBuf;

use clusterdns_kubeclient::{ClientSource, TlsFiles};

#[test]
fn kubeconfig_wins_over_endpoint_and_neither_means_in_cluster() {
    let kc = Some((PathBuf::from("/k/config"), Some("ctx".to_owned())));
    assert_eq!(
        ClientSource::from_options(Some("https://x:6443".into()), None, kc),
        ClientSource::Kubeconfig {
            path: "/k/config".into(),
            context: Some("ctx".into())
        }
    );
    assert_eq!(
        ClientSource::from_options(Some("https://x:6443".into()), None, None),
        ClientSource::Endpoint {
            url: "https://x:6443".into(),
            tls: None
        }
    );
    assert_eq!(
        ClientSource::from_options(None, None, None),
        ClientSource::InCluster
    );
}

#[tokio::test]
async fn endpoint_without_tls() {
    let source = ClientSource::Endpoint {
        url: "http://127.0.0.1:8080".into(),
        tls: None,
    };
    let config = source.config().await.unwrap();
    assert_eq!(config.cluster_url.to_string(), "http://127.0.0.1:8080/");
}

#[tokio::test]
async fn endpoint_with_missing_tls_files_is_an_error() {
    let source = ClientSource::Endpoint {
        url: "https://127.0.0.1:6443".into(),
        tls: Some(TlsFiles {
            cert: "/nonexistent/client.crt".into(),
            key: "/nonexistent/client.key".into(),
            ca: "/nonexistent/ca.crt".into(),
        }),
    };
    let err = source.config().await.unwrap_err().to_string();
    assert!(err.contains("endpoint https://127.0.0.1:6443"), "{err}");
}

#[tokio::test]
async fn missing_kubeconfig_names_the_file() {
    let source = ClientSource::Kubeconfig {
        path: "/nonexistent/kubeconfig".into(),
        context: None,
    };
    let err = source.config().await.unwrap_err().to_string();
    assert!(err.contains("/nonexistent/kubeconfig"), "{err}");
}

#[tokio::test]
async fn kubeconfig_with_unknown_context_is_an_error() {
    let dir = std::env::temp_dir().join(format!("clusterdns-k8s-kc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'http://127.0.0.1:8080'}\n\
         users:\n- name: u\n  user: {}\ncontexts:\n- name: good\n  context: {cluster: c, user: u}\ncurrent-context: good\n",
    )
    .unwrap();
    let good = ClientSource::Kubeconfig {
        path: path.clone(),
        context: None,
    };
    assert_eq!(
        good.config().await.unwrap().cluster_url.to_string(),
        "http://127.0.0.1:8080/"
    );
    let bad = ClientSource::Kubeconfig {
        path,
        context: Some("nope".into()),
    };
    assert!(bad.config().await.is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn in_cluster_outside_a_pod_is_an_error() {
    if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let err = rt.block_on(ClientSource::InCluster.config()).unwrap_err();
    assert!(err.to_string().contains("in-cluster"), "{err}");
}
