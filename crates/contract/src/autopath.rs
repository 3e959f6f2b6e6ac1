//! The contract between *autopath* and a plugin that knows its clients'
//! search paths (CoreDNS's `autopath.AutoPather`), so neither imports the
//! other: the plugin answers [`Plugin::auto_pather`](crate::Plugin::auto_pather)
//! with itself, and *autopath* finds it by name in the chain behind it.

use clusterdns_wire::Name;

use crate::Request;

/// A plugin that can tell the search path of the client of a query
/// (*kubernetes*: the namespace of the Pod at the client's address).
pub trait AutoPather: Send + Sync {
    /// Fills `out` (empty on entry) with the search domains of the client
    /// of `req`, in the client's order, ending with the root name (the
    /// name as asked, CoreDNS's `""` sentinel). Leaving `out` empty means
    /// no search walk for this query. `out` is the caller's reused
    /// buffer: this allocates nothing once it has grown.
    fn auto_path(&self, req: &Request<'_>, out: &mut Vec<Name>);
}
