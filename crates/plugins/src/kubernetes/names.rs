//! The question, read: the query name split at the zone it is in, and the
//! cluster-name grammar over the labels left of the zone (CoreDNS's
//! `parse.go parseRequest`). Everything here borrows from the query name.

use clusterdns_wire::Name;

/// `svc` or `pod`, the last label before the zone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PodOrSvc {
    /// `<...>.svc.<zone>`.
    Svc,
    /// `<...>.pod.<zone>`.
    Pod,
}

/// A parsed query name (CoreDNS `recordRequest`). Empty slices are unset.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Parsed<'q> {
    /// `None`: the apex, `svc.<zone>` or `pod.<zone>` (NODATA).
    pub kind: Option<PodOrSvc>,
    pub namespace: &'q [u8],
    pub service: &'q [u8],
    pub endpoint: &'q [u8],
    pub port: &'q [u8],
    pub protocol: &'q [u8],
}

/// The grammar said no: NXDOMAIN-class (`errInvalidRequest`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Invalid;

pub(super) fn strip_underscore(s: &[u8]) -> &[u8] {
    s.strip_prefix(b"_").unwrap_or(s)
}

/// Parses `base`, the labels of the lowercased query name left of the zone
/// (at most 127 of them on the wire).
pub(super) fn parse<'q>(base: &[&'q [u8]]) -> Result<Parsed<'q>, Invalid> {
    let mut r = Parsed::default();
    match base {
        [] | [b"svc"] | [b"pod"] => return Ok(r),
        _ => {}
    }
    let mut last = base.len();
    let next = |last: &mut usize| -> Option<&'q [u8]> {
        *last = last.checked_sub(1)?;
        base.get(*last).copied()
    };
    let Some(kind) = next(&mut last) else {
        return Ok(r);
    };
    r.kind = Some(match kind {
        b"svc" => PodOrSvc::Svc,
        b"pod" => PodOrSvc::Pod,
        _ => return Err(Invalid),
    });
    let Some(ns) = next(&mut last) else {
        return Ok(r);
    };
    r.namespace = ns;
    let Some(svc) = next(&mut last) else {
        return Ok(r);
    };
    r.service = svc;
    match last {
        0 => {}
        1 => r.endpoint = base[0],
        2 => {
            r.protocol = strip_underscore(base[1]);
            r.port = strip_underscore(base[0]);
        }
        _ => return Err(Invalid),
    }
    Ok(r)
}

/// Most labels left of the zone that a cluster name can have
/// (`_port._proto.service.namespace.svc`); a longer name is
/// NXDOMAIN-class whatever its labels, so only this many are kept.
pub(super) const MAX_BASE: usize = 5;

/// `ns.dns.` in wire form without the root label: the apex NS and SOA
/// MNAME are this under the zone.
pub(super) const NS_DNS: &[u8] = b"\x02ns\x03dns";
/// `hostmaster`, the SOA's rname left of the zone, in wire form.
pub(super) const HOSTMASTER: &[u8] = b"\x0ahostmaster";

/// `prefix` followed by `zone` (both wire form) in `buf`; `None` past 255
/// bytes.
pub(super) fn join_wire<'b>(
    buf: &'b mut [u8; 255],
    prefix: &[u8],
    zone: &[u8],
) -> Option<&'b [u8]> {
    let len = prefix.len() + zone.len();
    buf.get_mut(..prefix.len())?.copy_from_slice(prefix);
    buf.get_mut(prefix.len()..len)?.copy_from_slice(zone);
    buf.get(..len)
}

/// The query name split at the matched zone.
pub(super) struct Split<'q> {
    /// Original case.
    pub(super) qname: &'q Name,
    /// Lowercase.
    pub(super) lower: &'q Name,
    /// The first [`MAX_BASE`] labels left of the zone (lowercase).
    pub(super) base: [&'q [u8]; MAX_BASE],
    /// How many labels are left of the zone (at most 127 on the wire).
    pub(super) n: usize,
    /// Where the zone starts in the wire form of `qname` (and `lower`).
    pub(super) off: usize,
}

impl<'q> Split<'q> {
    /// The labels left of the zone, `None` when there are more than
    /// [`MAX_BASE`] (no cluster name is that long).
    pub(super) fn base(&self) -> Option<&[&'q [u8]]> {
        self.base.get(..self.n)
    }
    /// The parsed cluster name.
    pub(super) fn parsed(&self) -> Result<Parsed<'q>, Invalid> {
        self.base().map_or(Err(Invalid), parse)
    }
    /// The labels left of the zone are exactly `labels`.
    pub(super) fn base_is(&self, labels: &[&[u8]]) -> bool {
        self.base() == Some(labels)
    }
    /// The zone's labels in the query's case.
    pub(super) fn zone_labels(&self) -> impl Iterator<Item = &'q [u8]> + use<'q> {
        self.qname.labels().skip(self.n)
    }
    /// The zone's uncompressed wire form, in the query's case.
    pub(super) fn zone_wire(&self) -> &'q [u8] {
        let wire: &'q [u8] = self.qname.as_wire();
        wire.get(self.off..).unwrap_or(&[0])
    }
    /// `prefix` (labels in wire form, no root label) followed by the zone.
    pub(super) fn under_zone(&self, prefix: &[u8]) -> Option<Name> {
        let mut buf = [0u8; 255];
        Name::from_uncompressed(join_wire(&mut buf, prefix, self.zone_wire())?).ok()
    }
    /// The zone part of the query is all lowercase (CoreDNS compares the
    /// lowercased name with the query-cased zone in a few places).
    pub(super) fn zone_is_lower(&self) -> bool {
        self.zone_labels()
            .all(|l| !l.iter().any(u8::is_ascii_uppercase))
    }
}

/// Splits `lower` (and `qname`, its original-case form) at `zone`.
pub(super) fn split<'q>(qname: &'q Name, lower: &'q Name, zone: &Name) -> Split<'q> {
    split_at(qname, lower, zone_offset(lower, zone).unwrap_or(0))
}

/// Splits at `off`, where the zone starts in `lower`'s wire form (from
/// [`zone_offset`]).
pub(super) fn split_at<'q>(qname: &'q Name, lower: &'q Name, off: usize) -> Split<'q> {
    let mut base: [&'q [u8]; MAX_BASE] = [&[]; MAX_BASE];
    let mut n = 0;
    let wire = lower.as_wire();
    let mut pos = 0;
    while pos < off {
        let Some(&len) = wire.get(pos) else { break };
        let end = pos + 1 + usize::from(len);
        let Some(label) = wire.get(pos + 1..end) else {
            break;
        };
        if let Some(slot) = base.get_mut(n) {
            *slot = label;
        }
        n += 1;
        pos = end;
    }
    Split {
        qname,
        lower,
        base,
        n,
        off: pos,
    }
}

/// Where `zone` starts in `name`'s wire form, if `name` is `zone` or below
/// it. Both are lowercase (the zones are lowercased at setup), so the
/// bytes compare exactly, without the case-insensitive comparison of
/// [`Name::ends_with`].
pub(super) fn zone_offset(name: &Name, zone: &Name) -> Option<usize> {
    let (n, z) = (name.as_wire(), zone.as_wire());
    if !n.ends_with(z) {
        return None;
    }
    // Label-aligned: the label lengths from the start land on the zone.
    let off = n.len() - z.len();
    at_label(n, off).then_some(off)
}

pub(super) fn is_reverse(lower: &Name) -> bool {
    // `<at least one label>.in-addr.arpa.` or `<...>.ip6.arpa.`, lowercase.
    let w = lower.as_wire();
    let tail = if w.ends_with(b"\x07in-addr\x04arpa\x00") {
        14
    } else if w.ends_with(b"\x03ip6\x04arpa\x00") {
        10
    } else {
        return false;
    };
    let off = w.len() - tail;
    off > 0 && at_label(w, off)
}

/// A label starts at `off` in the uncompressed wire form `w`.
fn at_label(w: &[u8], off: usize) -> bool {
    let mut pos = 0;
    while let Some(&len) = w.get(pos)
        && pos < off
    {
        pos += 1 + usize::from(len);
    }
    pos == off
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(s: &str) -> Vec<&[u8]> {
        if s.is_empty() {
            return Vec::new();
        }
        s.split('.').map(str::as_bytes).collect()
    }

    #[test]
    fn grammar() {
        assert!(parse(&labels("")).unwrap().kind.is_none());
        assert!(parse(&labels("svc")).unwrap().kind.is_none());
        assert!(parse(&labels("pod")).unwrap().kind.is_none());
        assert_eq!(parse(&labels("foo")).unwrap_err(), Invalid);
        let r = parse(&labels("ns.svc")).unwrap();
        assert_eq!((r.kind, r.namespace), (Some(PodOrSvc::Svc), &b"ns"[..]));
        let r = parse(&labels("ep.s.ns.svc")).unwrap();
        assert_eq!((r.endpoint, r.service), (&b"ep"[..], &b"s"[..]));
        let r = parse(&labels("_http._tcp.s.ns.svc")).unwrap();
        assert_eq!((r.port, r.protocol), (&b"http"[..], &b"tcp"[..]));
        let r = parse(&labels("http.tcp.s.ns.svc")).unwrap();
        assert_eq!((r.port, r.protocol), (&b"http"[..], &b"tcp"[..]));
        assert_eq!(parse(&labels("a.b.c.s.ns.svc")).unwrap_err(), Invalid);
    }
}
