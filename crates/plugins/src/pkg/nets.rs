//! The networks of one policy as sorted, merged address ranges: a lookup
//! is a bisection over a slice, without allocation.

use std::net::IpAddr;

/// A set of IPv4 and IPv6 networks.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Nets {
    /// Inclusive ranges, sorted and disjoint once sealed.
    v4: Vec<(u32, u32)>,
    v6: Vec<(u128, u128)>,
}

impl Nets {
    /// Every address of both families.
    pub fn all() -> Self {
        Self {
            v4: vec![(0, u32::MAX)],
            v6: vec![(0, u128::MAX)],
        }
    }

    /// Adds `ADDRESS/PREFIX` (host bits allowed, as Go's `net.ParseCIDR`);
    /// `false` when it is not one.
    pub fn insert_cidr(&mut self, s: &str) -> bool {
        let Some((addr, len)) = clusterdns_corefile::cidr::parse(s) else {
            return false;
        };
        match clusterdns_corefile::cidr::network(addr, len) {
            IpAddr::V4(lo) => {
                let lo = u32::from(lo);
                let host = u32::MAX.checked_shr(u32::from(len)).unwrap_or(0);
                self.v4.push((lo, lo | host));
            }
            IpAddr::V6(lo) => {
                let lo = u128::from(lo);
                let host = u128::MAX.checked_shr(u32::from(len)).unwrap_or(0);
                self.v6.push((lo, lo | host));
            }
        }
        true
    }

    /// Sorts and merges the ranges; call once all are in.
    pub fn seal(&mut self) {
        merge(&mut self.v4);
        merge(&mut self.v6);
    }

    /// Whether `ip` is in one of the networks (the set must be sealed).
    #[inline]
    pub fn contains(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(a) => within(&self.v4, u32::from(a)),
            IpAddr::V6(a) => within(&self.v6, u128::from(a)),
        }
    }
}

fn merge<T: Copy + Ord + num_like::Succ>(r: &mut Vec<(T, T)>) {
    r.sort_unstable();
    let mut out: Vec<(T, T)> = Vec::with_capacity(r.len());
    for &(lo, hi) in r.iter() {
        match out.last_mut() {
            Some(last) if last.1.succ().is_none_or(|n| lo <= n) => {
                if hi > last.1 {
                    last.1 = hi;
                }
            }
            _ => out.push((lo, hi)),
        }
    }
    *r = out;
}

#[inline]
fn within<T: Copy + Ord>(r: &[(T, T)], x: T) -> bool {
    // The first range starting past `x`; the one before it may hold `x`.
    let i = r.partition_point(|&(lo, _)| lo <= x);
    i > 0 && r[i - 1].1 >= x
}

mod num_like {
    /// The next value, if any (for merging adjacent ranges).
    pub trait Succ: Sized {
        fn succ(self) -> Option<Self>;
    }
    impl Succ for u32 {
        fn succ(self) -> Option<Self> {
            self.checked_add(1)
        }
    }
    impl Succ for u128 {
        fn succ(self) -> Option<Self> {
            self.checked_add(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(list: &[&str]) -> Nets {
        let mut n = Nets::default();
        for s in list {
            assert!(n.insert_cidr(s), "{s}");
        }
        n.seal();
        n
    }

    #[test]
    fn ranges_merge_and_bisect() {
        let n = nets(&[
            "10.0.0.0/24",
            "10.0.1.0/24",
            "192.168.1.7/16",
            "10.0.0.128/25",
            "2001:db8::/32",
        ]);
        assert_eq!(
            n.v4,
            vec![(0x0a00_0000, 0x0a00_01ff), (0xc0a8_0000, 0xc0a8_ffff)]
        );
        for (ip, want) in [
            ("10.0.0.0", true),
            ("10.0.1.255", true),
            ("10.0.2.0", false),
            ("9.255.255.255", false),
            ("192.168.200.1", true),
            ("192.169.0.0", false),
            ("2001:db8::1", true),
            ("2001:db9::1", false),
            ("::1", false),
        ] {
            assert_eq!(n.contains(ip.parse().unwrap()), want, "{ip}");
        }
        let all = nets(&["0.0.0.0/0", "::/0"]);
        assert!(all.contains("255.255.255.255".parse().unwrap()));
        assert!(all.contains("::".parse().unwrap()));
        assert_eq!(all, {
            let mut a = Nets::all();
            a.seal();
            a
        });
    }

    #[test]
    fn cidr_syntax_as_go() {
        let mut n = Nets::default();
        for bad in [
            "10.0.0.0",
            "10.0.0.0/33",
            "10.0.0/8",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "10.0.0.0/-8",
            "::1/129",
            "x/8",
            "010.0.0.0/8",
        ] {
            assert!(!n.insert_cidr(bad), "{bad}");
        }
        assert!(n.insert_cidr("10.0.0.1/0"));
        assert!(n.insert_cidr("10.0.0.1/008"));
    }
}
