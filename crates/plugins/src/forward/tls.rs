//! DNS over TLS client settings (CoreDNS `pkg/tls.NewTLSConfigFromArgs`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};

/// Builds the connector from the `tls` arguments: none (system CAs),
/// `CA`, `CERT KEY` (client certificate, system CAs) or `CERT KEY CA`.
pub(crate) fn connector(args: &[PathBuf]) -> Result<TlsConnector, String> {
    let (client, ca): (Option<(&Path, &Path)>, Option<&Path>) = match args {
        [] => (None, None),
        [ca] => (None, Some(ca)),
        [cert, key] => (Some((cert, key)), None),
        [cert, key, ca] => (Some((cert, key)), Some(ca)),
        _ => return Err("tls: at most 3 arguments".into()),
    };
    let mut roots = RootCertStore::empty();
    match ca {
        Some(ca) => {
            for c in CertificateDer::pem_file_iter(ca)
                .map_err(|e| format!("tls: reading {}: {e}", ca.display()))?
            {
                let c = c.map_err(|e| format!("tls: reading {}: {e}", ca.display()))?;
                roots
                    .add(c)
                    .map_err(|e| format!("tls: CA {}: {e}", ca.display()))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
        }
    }
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("tls: {e}"))?
        .with_root_certificates(roots);
    let config = match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let certs = CertificateDer::pem_file_iter(cert)
                .map_err(|e| format!("tls: reading {}: {e}", cert.display()))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("tls: reading {}: {e}", cert.display()))?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| format!("tls: reading {}: {e}", key.display()))?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| format!("tls: client certificate: {e}"))?
        }
    };
    Ok(TlsConnector::from(Arc::new(config)))
}
