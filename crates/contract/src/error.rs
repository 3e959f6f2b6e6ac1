//! Errors a plugin returns from the query path, and the single mapping from
//! an error to the rcode the client sees.

use clusterdns_wire::Rcode;

/// An error raised while answering a query.
///
/// Like CoreDNS, an error means "nothing was written": the server writes a
/// reply with [`PluginError::rcode`] and the `errors` plugin logs it.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The last plugin passed the query on (CoreDNS `NextOrFailure`).
    #[error("plugin/{plugin}: no next plugin found")]
    NoNext {
        /// The plugin that asked for the next one.
        plugin: &'static str,
    },
    /// A plugin cannot answer now (for example not synced yet).
    #[error("plugin/{plugin}: {msg}")]
    ServerFailure {
        /// The failing plugin.
        plugin: &'static str,
        /// What went wrong.
        msg: String,
    },
    /// Every upstream failed or timed out. Shown as the bare network
    /// error, as CoreDNS's *errors* plugin prints forward's errors
    /// (`read udp 127.0.0.1:40000->10.0.0.10:53: i/o timeout`).
    #[error("{source}")]
    Upstream {
        /// The failing plugin.
        plugin: &'static str,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The query is refused by policy.
    #[error("plugin/{plugin}: refused")]
    Refused {
        /// The refusing plugin.
        plugin: &'static str,
    },
    /// A plugin returned `Async` from the asynchronous path, or does not
    /// implement it.
    #[error("plugin/{plugin}: asynchronous path not implemented")]
    NotAsync {
        /// The plugin at fault.
        plugin: &'static str,
    },
}

impl PluginError {
    /// The one mapping from an error to the rcode written to the client.
    pub fn rcode(&self) -> Rcode {
        match self {
            PluginError::Refused { .. } => Rcode::REFUSED,
            PluginError::NoNext { .. }
            | PluginError::ServerFailure { .. }
            | PluginError::Upstream { .. }
            | PluginError::NotAsync { .. } => Rcode::SERVFAIL,
        }
    }

    /// The plugin the error came from.
    pub fn plugin(&self) -> &'static str {
        match self {
            PluginError::NoNext { plugin }
            | PluginError::ServerFailure { plugin, .. }
            | PluginError::Upstream { plugin, .. }
            | PluginError::Refused { plugin }
            | PluginError::NotAsync { plugin } => plugin,
        }
    }
}
