//! Listen addresses of the admin plugins (`health`, `ready`,
//! `prometheus`): Go's `host:port` syntax with its error messages, as
//! every job's admin listeners read it (`clusterdns_observe::listen`).

use std::net::SocketAddr;

use clusterdns_corefile::{ConfigError, Directive};

/// Checks an admin address as CoreDNS's setup does and resolves it
/// (`clusterdns_observe::listen::addr`).
pub use clusterdns_observe::listen::addr as listen_addr;

/// The single directive of a once-per-block admin plugin (`ready`,
/// `prometheus`) and its optional `ADDRESS` argument, resolved
/// (`default` when absent).
pub fn once_with_addr<'d>(
    dirs: &[&'d Directive],
    default: &str,
) -> Result<(&'d Directive, SocketAddr), ConfigError> {
    let d = super::once(dirs)?;
    let text = super::optional_arg(d)?.unwrap_or(default);
    let addr = listen_addr(text).map_err(|e| d.err(e))?;
    Ok((d, addr))
}
