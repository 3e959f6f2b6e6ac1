//! The contract between *transfer* and the plugins whose zones it sends
//! out (CoreDNS's `transfer.Transferer`): *file* and *kubernetes*
//! implement [`Transferer`] and hand it out through
//! [`Plugin::transferer`](crate::Plugin::transferer); *transfer* asks the
//! plugins behind it in chain order, and never knows their internals.

use clusterdns_wire::{Name, Record};

/// Why a plugin gives no transfer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransferError {
    /// Not this plugin's zone: the next one is asked.
    #[error("not authoritative for zone")]
    NotAuthoritative,
    /// The zone is this plugin's but cannot be sent (SERVFAIL).
    #[error("{0}")]
    Failed(String),
}

/// A plugin that can send a zone out.
pub trait Transferer: Send + Sync {
    /// Hands the records of `zone` (lowercase) for a transfer to `out`,
    /// one by one in the order they are sent (so that no copy of a large
    /// zone is held). With `serial` 0 (AXFR), or a serial other than the
    /// zone's (an IXFR from an older copy, answered in full): the SOA
    /// first, every record of the zone (apex NS and glue included), the
    /// SOA again last. With the zone's own serial (an up-to-date IXFR):
    /// the SOA alone. `NotAuthoritative` when `zone` is not a zone of this
    /// plugin (a name below one is not either). An error is returned
    /// before any record is handed out, never after.
    fn transfer(
        &self,
        zone: &Name,
        serial: u32,
        out: &mut dyn FnMut(&Record),
    ) -> Result<(), TransferError>;
}
