//! `ADDRESS/PREFIX` as Go's `net.ParseCIDR` reads it: the one reading the
//! Corefile's keys and the plugins (*acl*, *view*, *dns64*, *loadbalance*)
//! share, so that what CoreDNS accepts and refuses is decided in one place.

use std::net::IpAddr;

/// The address as written (host bits kept) and the prefix length, or
/// `None` where Go's `net.ParseCIDR` fails (its error is always `invalid
/// CIDR address: <s>`): the prefix is decimal digits only, leading zeros
/// allowed, at most the address's bit length; no zone, no spaces.
pub fn parse(s: &str) -> Option<(IpAddr, u8)> {
    let (addr, len) = s.split_once('/')?;
    let addr: IpAddr = addr.parse().ok()?;
    if len.is_empty() || !len.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let bits = if addr.is_ipv4() { 32 } else { 128 };
    // Leading zeros are Go's too: only the value counts.
    let len = len.trim_start_matches('0');
    let len: u32 = if len.is_empty() { 0 } else { len.parse().ok()? };
    (len <= bits).then_some((addr, len as u8))
}

/// `addr` with the host bits of a `len`-bit prefix cleared (the network
/// Go's `ParseCIDR` returns beside the address).
pub fn network(addr: IpAddr, len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            IpAddr::from((u32::from(a) & mask).to_be_bytes())
        }
        IpAddr::V6(a) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            IpAddr::from((u128::from(a) & mask).to_be_bytes())
        }
    }
}
