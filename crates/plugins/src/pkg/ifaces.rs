//! The host's network interfaces and their addresses, from
//! `getifaddrs(3)`.
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A network interface and its IP addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// Its name, e.g. `eth0`.
    pub name: String,
    /// Its addresses, in the kernel's order.
    pub addrs: Vec<IpAddr>,
}

/// Lists the interfaces with their IPv4 and IPv6 addresses (interfaces
/// without an address are listed with none).
pub fn interfaces() -> std::io::Result<Vec<Interface>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut out: Vec<Interface> = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, alive
        // until freeifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        let ip = if ifa.ifa_addr.is_null() {
            None
        } else {
            // SAFETY: ifa_addr points to a sockaddr whose family tells
            // its real type.
            unsafe { sockaddr_ip(ifa.ifa_addr) }
        };
        let idx = match out.iter().position(|i| i.name == name) {
            Some(i) => i,
            None => {
                out.push(Interface {
                    name,
                    addrs: Vec::new(),
                });
                out.len() - 1
            }
        };
        if let Some(ip) = ip {
            out[idx].addrs.push(ip);
        }
    }
    // SAFETY: frees the list once; no reference into it survives.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// The IP of a socket address of family AF_INET or AF_INET6.
///
/// # Safety
/// `sa` must point to a valid socket address of the size its family
/// implies.
unsafe fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    // SAFETY: the caller guarantees `sa` is valid; the casts follow the
    // family field.
    unsafe {
        match i32::from((*sa).sa_family) {
            libc::AF_INET => {
                let sin = &*(sa.cast::<libc::sockaddr_in>());
                Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                    sin.sin_addr.s_addr,
                ))))
            }
            libc::AF_INET6 => {
                let sin6 = &*(sa.cast::<libc::sockaddr_in6>());
                Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
            }
            _ => None,
        }
    }
}
