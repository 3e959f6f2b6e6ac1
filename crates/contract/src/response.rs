//! What kind of reply a message is, as CoreDNS's `plugin/pkg/response`
//! sorts them (`Typify`, `Classify`): the cache picks its TTLs by it,
//! *minimal* which replies it trims.

use clusterdns_wire::{Message, Rtype, Section};

/// CoreDNS's `response.Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A positive answer (or NOERROR with nothing else to say).
    NoError,
    /// NXDOMAIN.
    NameError,
    /// NOERROR without answers, with a SOA in the authority section.
    NoData,
    /// NOERROR with NS records (and no SOA) in the authority section.
    Delegation,
    /// SERVFAIL or NOTIMP.
    ServerError,
    /// A zone transfer or a NOTIFY.
    Meta,
    /// A dynamic update.
    Update,
    /// Anything else.
    OtherError,
}

/// CoreDNS's `response.Class`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// NOERROR and delegations.
    Success,
    /// NXDOMAIN and NODATA.
    Denial,
    /// Everything else.
    Error,
}

impl Kind {
    /// CoreDNS's `Typify` of `m`, without its check for expired DNSSEC
    /// signatures (which makes a DO reply with one `OtherError`).
    pub fn of(m: &Message<'_>) -> Kind {
        let h = m.header();
        match h.opcode().0 {
            5 => return Kind::Update,
            4 => return Kind::Meta,
            _ => {}
        }
        if let Some((qtype, _)) = m.question_type()
            && (qtype == Rtype::AXFR || qtype == Rtype::IXFR)
        {
            return Kind::Meta;
        }
        let rcode = h.rcode_low();
        if h.ancount > 0 && rcode == 0 {
            return Kind::NoError;
        }
        if h.ancount > 0 && rcode == 3 {
            return Kind::OtherError;
        }
        let mut soa = false;
        let mut ns = 0;
        for r in m.heads().filter(|r| r.section == Section::Authority) {
            if r.rtype == Rtype::SOA {
                soa = true;
            } else if r.rtype == Rtype::NS {
                ns += 1;
            }
        }
        match rcode {
            0 if soa => Kind::NoData,
            3 => Kind::NameError,
            2 | 4 => Kind::ServerError,
            0 if ns > 0 => Kind::Delegation,
            0 => Kind::NoError,
            _ => Kind::OtherError,
        }
    }

    /// CoreDNS's `Classify`.
    pub fn class(self) -> Class {
        match self {
            Kind::NoError | Kind::Delegation => Class::Success,
            Kind::NameError | Kind::NoData => Class::Denial,
            _ => Class::Error,
        }
    }

    /// The name CoreDNS prints for it (`Type.String`).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::NoError => "NOERROR",
            Kind::NameError => "NXDOMAIN",
            Kind::NoData => "NODATA",
            Kind::Delegation => "DELEGATION",
            Kind::ServerError => "SERVERERROR",
            Kind::Meta => "META",
            Kind::Update => "UPDATE",
            Kind::OtherError => "OTHERERROR",
        }
    }
}
