//! Shuffling records of a finished reply in place, on the wire bytes.
//!
//! Records are not re-encoded: two records of the same kind and the same
//! encoded length swap their bytes. That keeps every compression pointer
//! valid provided (1) no name anywhere in the message reads a byte of a
//! record that moves and (2) every name a pointer inside a moving record
//! leads to lies wholly before the first slot of its group (so after the
//! move it is still before the pointer, as the wire parser requires). A
//! "name a pointer leads to" is every byte its walk reads, pointers
//! followed, not only the byte it points at: a pointer may land on a name
//! that runs on into later records. A group that breaks either rule is
//! left as it is. Nothing is allocated: the record table lives on the
//! stack.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use clusterdns_wire::{HEADER_LEN, Rtype};

/// Most records looked at; a larger reply is left unshuffled.
pub(crate) const MAX_RECORDS: usize = 512;

/// One record's place in the message.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    start: u16,
    len: u16,
    rdata: u16,
    rtype: u16,
    section: u8,
    /// Some name in the message reads a byte of this record.
    pointed: bool,
    /// The last byte read by the names this record's pointers lead to
    /// (0: no pointer).
    reach: u16,
}

/// A subnet for `prefer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Subnet {
    /// Network address.
    pub addr: IpAddr,
    /// Prefix length.
    pub prefix: u8,
}

impl Subnet {
    /// Parses `ip/prefix` like Go's `net.ParseCIDR` (the error text is Go's).
    pub(crate) fn parse(s: &str) -> Result<Subnet, String> {
        let (addr, prefix) = clusterdns_corefile::cidr::parse(s)
            .ok_or_else(|| format!("invalid CIDR address: {s}"))?;
        Ok(Subnet { addr, prefix })
    }

    /// Whether `ip` is inside (an IPv4 net never contains an IPv6 address,
    /// except an IPv4-mapped one, as Go).
    pub(crate) fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

fn u16_at(buf: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*buf.get(off)?, *buf.get(off + 1)?]))
}

/// Walks the name written at `off` (not following pointers): returns where
/// it ends and the pointer it ends with, if any.
fn scan_name(buf: &[u8], mut off: usize) -> Option<(usize, Option<u16>)> {
    loop {
        let len = *buf.get(off)?;
        match len & 0xC0 {
            0x00 if len == 0 => return Some((off + 1, None)),
            0x00 => off += 1 + usize::from(len),
            0xC0 => return Some((off + 2, Some(u16_at(buf, off)? & 0x3FFF))),
            _ => return None,
        }
    }
}

/// Offsets (from the rdata start) of the names a record type carries and
/// that may be compressed, and how many follow each other.
fn rdata_names(rtype: Rtype) -> Option<(usize, usize)> {
    match rtype.0 {
        // NS, MD, MF, CNAME, MB, MG, MR, PTR, DNAME
        2 | 3 | 4 | 5 | 7 | 8 | 9 | 12 | 39 => Some((0, 1)),
        // SOA, MINFO, RP
        6 | 14 | 17 => Some((0, 2)),
        // MX, AFSDB, RT, KX
        15 | 18 | 21 | 36 => Some((2, 1)),
        // SRV
        33 => Some((6, 1)),
        _ => None,
    }
}

/// What to do with the records of one reply.
pub(crate) struct Plan<'a> {
    /// Subnets preferred in the answer and additional sections.
    pub prefer: &'a [Subnet],
}

/// Marks the slots holding any byte of `from..=to` as pointed into.
fn mark(slots: &mut [Slot], from: u16, to: u16) {
    let first = slots.partition_point(|s| u32::from(s.start) + u32::from(s.len) <= u32::from(from));
    for s in slots[first..].iter_mut().take_while(|s| s.start <= to) {
        s.pointed = true;
    }
}

/// The last byte the name at `t` reads, its pointers followed; `u16::MAX`
/// when the walk does not end (the message is then malformed anyway).
fn reach(buf: &[u8], mut t: usize) -> u16 {
    let mut last = 0;
    // Bounded: a real name has at most 127 labels and as many pointers.
    for _ in 0..128 {
        let Some((end, next)) = scan_name(buf, t) else {
            return u16::MAX;
        };
        last = last.max(end - 1);
        match next {
            Some(n) => t = usize::from(n),
            None => return u16::try_from(last).unwrap_or(u16::MAX),
        }
    }
    u16::MAX
}

/// Fills `slots` with the layout of `buf`; returns how many records
/// (`None` when the reply is malformed or has more than `N` records).
fn layout<const N: usize>(buf: &[u8], slots: &mut [Slot; N]) -> Option<usize> {
    if buf.len() > usize::from(u16::MAX) {
        return None;
    }
    let qd = u16_at(buf, 4)?;
    let counts = [u16_at(buf, 6)?, u16_at(buf, 8)?, u16_at(buf, 10)?];
    let total: usize = counts.iter().map(|&c| usize::from(c)).sum();
    if total > N {
        return None;
    }
    let mut off = HEADER_LEN;
    for _ in 0..qd {
        off = scan_name(buf, off)?.0 + 4;
    }
    let mut n = 0;
    for (section, &count) in counts.iter().enumerate() {
        for _ in 0..count {
            let start = off;
            let (name_end, owner_ptr) = scan_name(buf, off)?;
            let rtype = u16_at(buf, name_end)?;
            let rdlen = usize::from(u16_at(buf, name_end + 8)?);
            let rdata = name_end + 10;
            let end = rdata + rdlen;
            if end > buf.len() {
                return None;
            }
            let mut slot = Slot {
                start: start as u16,
                len: (end - start) as u16,
                rdata: rdata as u16,
                rtype,
                section: section as u8,
                pointed: false,
                reach: 0,
            };
            let mut targets = [0u16; 3];
            let mut nt = 0;
            if let Some(t) = owner_ptr {
                targets[nt] = t;
                nt += 1;
            }
            if let Some((skip, names)) = rdata_names(Rtype(rtype)) {
                let mut p = rdata + skip;
                for _ in 0..names {
                    let (e, t) = scan_name(buf, p)?;
                    if e > end {
                        return None;
                    }
                    if let Some(t) = t {
                        targets[nt] = t;
                        nt += 1;
                    }
                    p = e;
                }
            }
            let mut reaches = [0u16; 3];
            for (r, &t) in reaches.iter_mut().zip(&targets[..nt]) {
                *r = reach(buf, usize::from(t));
                slot.reach = slot.reach.max(*r);
            }
            slots[n] = slot;
            n += 1;
            for (&t, &r) in targets[..nt].iter().zip(&reaches) {
                mark(&mut slots[..n], t, r);
            }
            off = end;
        }
    }
    Some(n)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Address,
    Mx,
}

fn kind(rtype: u16) -> Option<Kind> {
    match Rtype(rtype) {
        Rtype::A | Rtype::AAAA => Some(Kind::Address),
        Rtype::MX => Some(Kind::Mx),
        _ => None,
    }
}

/// Swaps the bytes of two equal-length, distinct slots.
fn swap(buf: &mut [u8], a: Slot, b: Slot) {
    let (a, b) = if a.start < b.start { (a, b) } else { (b, a) };
    let len = usize::from(a.len);
    let (lo, hi) = buf.split_at_mut(usize::from(b.start));
    lo[usize::from(a.start)..usize::from(a.start) + len].swap_with_slice(&mut hi[..len]);
}

/// The address in an A/AAAA record.
fn address(buf: &[u8], s: &Slot) -> Option<IpAddr> {
    let r = usize::from(s.rdata);
    let end = usize::from(s.start) + usize::from(s.len);
    let data = buf.get(r..end)?;
    match data.len() {
        4 => Some(IpAddr::V4(Ipv4Addr::new(
            data[0], data[1], data[2], data[3],
        ))),
        16 => {
            let mut o = [0u8; 16];
            o.copy_from_slice(data);
            Some(IpAddr::V6(Ipv6Addr::from(o)))
        }
        _ => None,
    }
}

/// Records in a reply small enough for the small tables (most replies):
/// zeroing the `MAX_RECORDS` tables costs more than the rest of the shuffle.
const SMALL_RECORDS: usize = 16;

/// Shuffles the A/AAAA records and the MX records of each section of the
/// reply in `buf` among their own positions, then (with `prefer`) moves
/// addresses in preferred subnets to the front of their group, in the
/// order of the subnets. Returns how many groups were shuffled.
pub(crate) fn shuffle(buf: &mut [u8], plan: &Plan<'_>) -> usize {
    let (Some(an), Some(ns), Some(ar)) = (u16_at(buf, 6), u16_at(buf, 8), u16_at(buf, 10)) else {
        return 0;
    };
    // A group is two or more records of one section: none possible.
    if an < 2 && ns < 2 && ar < 2 {
        return 0;
    }
    if usize::from(an) + usize::from(ns) + usize::from(ar) <= SMALL_RECORDS {
        shuffle_in::<SMALL_RECORDS>(buf, plan)
    } else {
        shuffle_in::<MAX_RECORDS>(buf, plan)
    }
}

/// [`shuffle`] with tables for at most `N` records.
fn shuffle_in<const N: usize>(buf: &mut [u8], plan: &Plan<'_>) -> usize {
    let mut slots = [Slot::default(); N];
    let Some(n) = layout(buf, &mut slots) else {
        return 0;
    };
    let mut done = [false; N];
    let mut group = [0u16; N];
    let mut shuffled = 0;
    for i in 0..n {
        let Some(k) = kind(slots[i].rtype) else {
            continue;
        };
        if done[i] {
            continue;
        }
        let (sec, len) = (slots[i].section, slots[i].len);
        let mut g = 0;
        let mut ok = true;
        for j in i..n {
            let s = &slots[j];
            if done[j] || s.section != sec || s.len != len || kind(s.rtype) != Some(k) {
                continue;
            }
            done[j] = true;
            group[g] = j as u16;
            g += 1;
            ok &= !s.pointed && (s.reach == 0 || s.reach < slots[i].start);
        }
        if g < 2 || !ok {
            continue;
        }
        let members = &group[..g];
        // Fisher-Yates over the group's positions.
        for a in (1..g).rev() {
            let b = fastrand::usize(..=a);
            if a != b {
                swap(
                    buf,
                    slots[usize::from(members[a])],
                    slots[usize::from(members[b])],
                );
            }
        }
        shuffled += 1;
        if k == Kind::Address && sec != 1 && !plan.prefer.is_empty() {
            prefer(buf, &slots, members, plan.prefer);
        }
    }
    shuffled
}

/// Stable insertion sort of a shuffled address group by the index of the
/// first preferred subnet containing each address.
fn prefer(buf: &mut [u8], slots: &[Slot], members: &[u16], subnets: &[Subnet]) {
    let rank = |buf: &[u8], i: u16| -> usize {
        let s = &slots[usize::from(i)];
        address(buf, s)
            .and_then(|ip| subnets.iter().position(|n| n.contains(ip)))
            .unwrap_or(subnets.len())
    };
    for a in 1..members.len() {
        let mut b = a;
        while b > 0 && rank(buf, members[b - 1]) > rank(buf, members[b]) {
            swap(
                buf,
                slots[usize::from(members[b - 1])],
                slots[usize::from(members[b])],
            );
            b -= 1;
        }
    }
}
