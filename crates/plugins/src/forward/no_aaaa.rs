//! `no_aaaa`: AAAA queries this `forward` would send upstream are answered
//! NODATA at once (an IPv4-only cluster has no use for IPv6 addresses, and
//! half of all lookups are AAAA). The reply carries a SOA synthesized for
//! FROM so that clients and caches keep it as a negative answer (RFC 2308).

use clusterdns_contract::{Request, ResponseWriter};
use clusterdns_wire::{Name, Section};

/// The SOA's TTL and its MINIMUM: how long the NODATA is kept.
pub(crate) const TTL: u32 = 30;

/// The SOA of the synthesized NODATA, its names built once at setup.
#[derive(Debug)]
pub(crate) struct NoAaaa {
    owner: Name,
    mname: Name,
    rname: Name,
}

impl NoAaaa {
    /// The SOA for FROM `zone`: `ns.dns.<zone>` and `hostmaster.<zone>`,
    /// as *kubernetes* names its own; `None` when those names are too long.
    pub(crate) fn new(zone: &Name) -> Option<NoAaaa> {
        let under = |prefix: &str| {
            let text = zone.to_string();
            let text = if text == "." { String::new() } else { text };
            Name::from_ascii(&format!("{prefix}.{text}")).ok()
        };
        Some(NoAaaa {
            owner: zone.to_lowercase(),
            mname: under("ns.dns")?,
            rname: under("hostmaster")?,
        })
    }

    /// Writes the NODATA for `req`: NOERROR, AA (as a *template* answer
    /// has it), RA (it stands in for the upstream's recursive answer), no
    /// answer, the SOA in authority.
    pub(crate) fn write(&self, req: &Request<'_>, w: &mut ResponseWriter) {
        let mut b = w.reply(req);
        b.set_aa(true);
        b.set_ra(true);
        let values = [1, 7200, 1800, 86400, TTL];
        let _ = b.push_soa_wire(
            Section::Authority,
            self.owner.as_wire(),
            TTL,
            self.mname.as_wire(),
            self.rname.as_wire(),
            values,
        );
        b.finish();
    }
}
