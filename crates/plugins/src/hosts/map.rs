//! The parsed form of a hosts file (CoreDNS `hostsfile.go`), immutable once
//! built.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use clusterdns_wire::Name;

/// How entries are read.
#[derive(Debug, Clone)]
pub(crate) struct ParseOptions {
    /// Zones the plugin serves; names outside them are dropped.
    pub origins: Vec<Name>,
    /// Generate PTR data (`no_reverse` clears it).
    pub auto_reverse: bool,
}

/// Whether `name` is in one of `zones` (CoreDNS `Zones.Matches != ""`).
pub(crate) fn in_zones(zones: &[Name], name: &Name) -> bool {
    zones.iter().any(|z| name.ends_with(z))
}

/// The maps' hash: foldhash, seeded per process. The keys are our
/// configuration, not chosen by clients, so the cost of SipHash's flood
/// resistance on every query buys nothing (BENCHMARKS.md has the count).
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// Name → addresses and address → names, as CoreDNS's `Map`. Names are
/// lowercase FQDNs; wildcard owners (`*.example.com.`) are kept apart and
/// generate no PTR data.
#[derive(Debug, Default)]
pub(crate) struct Map {
    name4: HashMap<Name, Vec<Ipv4Addr>>,
    name6: HashMap<Name, Vec<Ipv6Addr>>,
    wild4: HashMap<Name, Vec<Ipv4Addr>>,
    wild6: HashMap<Name, Vec<Ipv6Addr>>,
    addr: HashMap<IpAddr, Vec<Name>>,
}

/// An IP as Go's `net.ParseIP` reads it after the zone (`%eth0`) is cut:
/// IPv4-mapped IPv6 addresses count as IPv4.
fn parse_ip(s: &str) -> Option<IpAddr> {
    let s = s.split('%').next().unwrap_or(s);
    match s.parse::<IpAddr>().ok()? {
        IpAddr::V6(v6) => Some(match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }),
        v4 => Some(v4),
    }
}

impl Map {
    /// Parses hosts-file text: `IP name [aliases...]` per line, `#` starts
    /// a comment, lines with fewer than two fields or an unreadable IP are
    /// skipped, as are names outside the origins or not valid names.
    pub(crate) fn parse(text: &str, opts: &ParseOptions) -> Map {
        let mut m = Map::default();
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or("");
            let mut fields = line.split_ascii_whitespace();
            let (Some(ip), Some(_)) = (fields.next(), fields.clone().next()) else {
                continue;
            };
            let Some(ip) = parse_ip(ip) else { continue };
            for f in fields {
                let Ok(mut name) = Name::from_ascii(f) else {
                    continue;
                };
                name.make_lowercase();
                if !in_zones(&opts.origins, &name) {
                    continue;
                }
                if name.first_label() == Some(b"*".as_slice()) {
                    match ip {
                        IpAddr::V4(v4) => m.wild4.entry(name).or_default().push(v4),
                        IpAddr::V6(v6) => m.wild6.entry(name).or_default().push(v6),
                    }
                    continue;
                }
                match ip {
                    IpAddr::V4(v4) => m.name4.entry(name).or_default().push(v4),
                    IpAddr::V6(v6) => m.name6.entry(name).or_default().push(v6),
                }
                if opts.auto_reverse {
                    m.addr.entry(ip).or_default().push(name);
                }
            }
        }
        m
    }

    /// Number of addresses and reverse names (CoreDNS `Map.Len`).
    pub(crate) fn len(&self) -> usize {
        self.name4.values().map(Vec::len).sum::<usize>()
            + self.name6.values().map(Vec::len).sum::<usize>()
            + self.wild4.values().map(Vec::len).sum::<usize>()
            + self.wild6.values().map(Vec::len).sum::<usize>()
            + self.addr.values().map(Vec::len).sum::<usize>()
    }

    /// The IPv4 addresses of `host` (lowercase): its own entry, else the
    /// wildcard one label up (`wild` is `host` with its first label
    /// replaced by `*`, if it has two labels or more).
    pub(crate) fn v4(&self, host: &Name, wild: Option<&Name>) -> &[Ipv4Addr] {
        lookup(&self.name4, &self.wild4, host, wild)
    }

    /// The IPv6 addresses of `host`, as [`Map::v4`].
    pub(crate) fn v6(&self, host: &Name, wild: Option<&Name>) -> &[Ipv6Addr] {
        lookup(&self.name6, &self.wild6, host, wild)
    }

    /// Whether there are wildcard owners (else a wildcard pattern is never
    /// needed).
    pub(crate) fn has_wildcards(&self) -> bool {
        !(self.wild4.is_empty() && self.wild6.is_empty())
    }

    /// The names of `ip`, for PTR answers.
    pub(crate) fn names(&self, ip: &IpAddr) -> &[Name] {
        self.addr.get(ip).map_or(&[], Vec::as_slice)
    }
}

fn lookup<'m, T>(
    exact: &'m HashMap<Name, Vec<T>>,
    wild: &'m HashMap<Name, Vec<T>>,
    host: &Name,
    pattern: Option<&Name>,
) -> &'m [T] {
    if let Some(v) = exact.get(host) {
        return v;
    }
    if wild.is_empty() {
        return &[];
    }
    match pattern.and_then(|p| wild.get(p)) {
        Some(v) => v,
        None => &[],
    }
}

/// `host` with its leftmost label replaced by `*` (CoreDNS
/// `replaceWithAsteriskLabel`); `None` for names of fewer than two labels.
pub(crate) fn wildcard_of(host: &Name) -> Option<Name> {
    let parent = host.parent()?;
    if parent.is_root() {
        return None;
    }
    parent.prepend_label(b"*").ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> Name {
        Name::from_ascii(s).unwrap()
    }

    fn opts(origins: &[&str], rev: bool) -> ParseOptions {
        ParseOptions {
            origins: origins.iter().map(|o| n(o)).collect(),
            auto_reverse: rev,
        }
    }

    const FILE: &str = "\
# comment line
127.0.0.1 localhost   # trailing comment
255.255.255.255 broadcasthost
::1 localhost ip6-localhost
10.0.0.1 Example.ORG alias1 alias2.example.org.
10.0.0.2 example.org
fe80::1%lo0 linklocal
::ffff:192.0.2.9 mapped
bad-ip nothing
10.0.0.3
1.2.3.4 *.wild.org
256.1.1.1 toolarge
";

    #[test]
    fn parses_names_families_comments_and_reverse() {
        let m = Map::parse(FILE, &opts(&["."], true));
        assert_eq!(m.v4(&n("localhost."), None), [Ipv4Addr::LOCALHOST]);
        assert_eq!(m.v6(&n("localhost."), None), [Ipv6Addr::LOCALHOST]);
        assert_eq!(
            m.v4(&n("example.org."), None),
            [
                "10.0.0.1".parse::<Ipv4Addr>().unwrap(),
                "10.0.0.2".parse().unwrap()
            ]
        );
        assert_eq!(m.v4(&n("alias1."), None).len(), 1);
        assert_eq!(m.v4(&n("alias2.example.org."), None).len(), 1);
        assert_eq!(
            m.v6(&n("linklocal."), None),
            ["fe80::1".parse::<Ipv6Addr>().unwrap()]
        );
        assert_eq!(
            m.v4(&n("mapped."), None),
            ["192.0.2.9".parse::<Ipv4Addr>().unwrap()]
        );
        assert!(m.v4(&n("nothing."), None).is_empty());
        assert!(m.v4(&n("toolarge."), None).is_empty());
        assert_eq!(
            m.names(&"10.0.0.1".parse().unwrap()),
            [n("example.org."), n("alias1."), n("alias2.example.org.")]
        );
        assert_eq!(
            m.names(&"::1".parse().unwrap()),
            [n("localhost."), n("ip6-localhost.")]
        );
        // No PTR for wildcards.
        assert!(m.names(&"1.2.3.4".parse().unwrap()).is_empty());
        // 7 IPv4 and 3 IPv6 addresses, 1 wildcard, 10 reverse names.
        assert_eq!(m.len(), 7 + 3 + 1 + 10);
    }

    #[test]
    fn origins_filter_and_no_reverse() {
        let m = Map::parse(FILE, &opts(&["example.org."], false));
        assert!(m.v4(&n("localhost."), None).is_empty());
        assert_eq!(m.v4(&n("example.org."), None).len(), 2);
        assert!(m.names(&"10.0.0.1".parse().unwrap()).is_empty());
    }

    #[test]
    fn wildcards_match_one_label() {
        let m = Map::parse(FILE, &opts(&["."], true));
        let q = n("a.wild.org.");
        let w = wildcard_of(&q);
        assert_eq!(w, Some(n("*.wild.org.")));
        assert_eq!(m.v4(&q, w.as_ref()).len(), 1);
        let deep = n("b.a.wild.org.");
        assert!(m.v4(&deep, wildcard_of(&deep).as_ref()).is_empty());
        let apex = n("wild.org.");
        assert!(m.v4(&apex, wildcard_of(&apex).as_ref()).is_empty());
        assert_eq!(wildcard_of(&n("org.")), None);
        assert_eq!(wildcard_of(&Name::root()), None);
    }
}
