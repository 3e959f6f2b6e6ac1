//! Domain names.
//!
//! On the wire a name is a sequence of labels, each a length byte (1..=63)
//! followed by that many bytes, ended by the zero-length root label. At
//! most 255 bytes in all (RFC 1035 §3.1). Inside a message a name may end
//! in a *compression pointer* instead: two bytes `11pppppp pppppppp`
//! giving the offset of the rest of the name (RFC 1035 §4.1.4).
//!
//! [`Name`] keeps the uncompressed wire form in a fixed 255-byte array, so
//! creating, copying or lowercasing one never touches the heap. Equality
//! and hashing are byte-exact (case-sensitive); use [`Name::eq_ignore_case`]
//! or compare [`Name::to_lowercase`] copies for DNS semantics. Since length
//! bytes are at most 63, below `'A'`, ASCII-lowercasing the whole wire form
//! lowercases exactly the label bytes.

use core::fmt;
use core::hash::{Hash, Hasher};
use core::str::FromStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::error::{NameError, ParseError};
use crate::header::HEADER_LEN;

/// Maximum length of a name in wire form, root label included.
pub const MAX_NAME_LEN: usize = 255;
/// Maximum length of one label.
pub const MAX_LABEL_LEN: usize = 63;

/// An absolute domain name in uncompressed wire form. No heap.
#[derive(Clone, Copy)]
pub struct Name {
    len: u8,
    buf: [u8; MAX_NAME_LEN],
}

/// Walks the possibly compressed name at `*off` in `msg`, handing each
/// label (without its length byte, root excluded) to `label`, and moves
/// `*off` past the name as it appears at that position. Returns the
/// uncompressed wire length.
///
/// Pointers must point strictly backwards, before the start of the run of
/// labels that contains them, and not into the header. Each hop therefore
/// lands earlier than the last, so loops are impossible and the walk is
/// bounded by the message length.
///
/// What a pointer leads to must also lie wholly before the pointer: after
/// a hop, every byte read (labels, the root, the next pointer) comes from
/// the part of the message before the pointer just followed. A name thus
/// never depends on bytes after the place it is written, which is what
/// lets [`truncate`](crate::truncate) keep any prefix of whole records.
/// Without this rule a pointer could land on a label that runs over the
/// pointer itself and on into later records, and cutting those records
/// would leave a name that no longer parses. Encoders only ever point at
/// an earlier complete name, so no real message is refused by it.
pub(crate) fn walk_name(
    msg: &[u8],
    off: &mut usize,
    mut label: impl FnMut(&[u8]),
) -> Result<usize, ParseError> {
    let mut pos = *off;
    let mut run_start = pos;
    let mut end = None;
    let mut total = 1;
    // The bytes this name may read: all of them until the first hop, then
    // only those before the last pointer followed.
    let mut window = msg;
    loop {
        let len = usize::from(*window.get(pos).ok_or(ParseError)?);
        match len & 0xC0 {
            0x00 if len == 0 => {
                *off = end.unwrap_or(pos + 1);
                return Ok(total);
            }
            0x00 => {
                let bytes = window.get(pos + 1..pos + 1 + len).ok_or(ParseError)?;
                total += len + 1;
                if total > MAX_NAME_LEN {
                    return Err(ParseError);
                }
                label(bytes);
                pos += len + 1;
            }
            0xC0 => {
                let low = usize::from(*window.get(pos + 1).ok_or(ParseError)?);
                let target = ((len & 0x3F) << 8) | low;
                if target >= run_start || target < HEADER_LEN {
                    return Err(ParseError);
                }
                end.get_or_insert(pos + 2);
                window = &window[..pos];
                pos = target;
                run_start = target;
            }
            // 0x40 and 0x80: extended label types (RFC 6891 §5), unsupported.
            _ => return Err(ParseError),
        }
    }
}

/// Whether the (possibly compressed) name at `off` in `buf` is `want`
/// (an uncompressed wire name), byte for byte or, with `fold`, ignoring
/// ASCII case (length bytes are below 64, so folding leaves them alone).
/// Pointers are followed without checking their direction, so `buf` must
/// be a message whose names were validated (a parsed one) or one this
/// crate wrote; anything malformed is `false`.
pub(crate) fn wire_name_eq(buf: &[u8], mut off: usize, want: &[u8], fold: bool) -> bool {
    let eq = |a: &[u8], b: &[u8]| {
        if fold {
            a.eq_ignore_ascii_case(b)
        } else {
            a == b
        }
    };
    // The usual case, in one comparison: written out in full.
    if buf.get(off..off + want.len()).is_some_and(|b| eq(b, want)) {
        return true;
    }
    let mut s = 0;
    // Bounded: at most 127 labels and as many pointer hops.
    for _ in 0..2 * MAX_NAME_LEN {
        let Some(&len) = buf.get(off) else {
            return false;
        };
        if len & 0xC0 == 0xC0 {
            let Some(&low) = buf.get(off + 1) else {
                return false;
            };
            off = (usize::from(len & 0x3F) << 8) | usize::from(low);
            continue;
        }
        let end = 1 + usize::from(len);
        match (buf.get(off..off + end), want.get(s..s + end)) {
            (Some(a), Some(b)) if eq(a, b) => {}
            _ => return false,
        }
        if len == 0 {
            return true;
        }
        s += end;
        off += end;
    }
    false
}

/// Whether `wire` is exactly one uncompressed name: labels of at most 63
/// bytes, the root label last, at most 255 bytes in all.
pub(crate) fn is_uncompressed(wire: &[u8]) -> bool {
    uncompressed_len(wire, 0) == Some(wire.len())
}

/// Wire length of the name at `start` if it is complete, uncompressed and
/// valid; `None` sends the caller to the general walk.
fn uncompressed_len(msg: &[u8], start: usize) -> Option<usize> {
    let mut pos = start;
    loop {
        let len = usize::from(*msg.get(pos)?);
        if len == 0 {
            let total = pos + 1 - start;
            return (total <= MAX_NAME_LEN).then_some(total);
        }
        if len > MAX_LABEL_LEN || pos + 1 + len - start >= MAX_NAME_LEN {
            return None;
        }
        pos += 1 + len;
    }
}

/// Iterator over the labels of a name, left to right, root excluded.
#[derive(Debug, Clone)]
pub struct Labels<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Labels<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let (&len, tail) = self.rest.split_first()?;
        let len = usize::from(len);
        if len == 0 || len > tail.len() {
            self.rest = &[];
            return None;
        }
        let (label, rest) = tail.split_at(len);
        self.rest = rest;
        Some(label)
    }
}

impl Name {
    /// The root name, `.`.
    pub const fn root() -> Name {
        Name {
            len: 1,
            buf: [0; MAX_NAME_LEN],
        }
    }

    /// Reads a name from a message at `*off`, following compression
    /// pointers, and moves `*off` past the name as it appears there.
    pub fn from_wire(msg: &[u8], off: &mut usize) -> Result<Name, ParseError> {
        let mut name = Name::root();
        name.read_wire(msg, off)?;
        Ok(name)
    }

    /// [`Name::from_wire`] into `self` (for a name that lives in a bigger
    /// struct: no whole-`Name` copy). On error `self` holds no meaningful
    /// name and is to be dropped.
    pub(crate) fn read_wire(&mut self, msg: &[u8], off: &mut usize) -> Result<(), ParseError> {
        // Fast path: an uncompressed name (every question) is one copy.
        if let Some(len) = uncompressed_len(msg, *off) {
            self.buf[..len].copy_from_slice(&msg[*off..*off + len]);
            self.len = len as u8;
            *off += len;
            return Ok(());
        }
        self.len = 1;
        self.buf[0] = 0;
        let mut pos = 0;
        let buf = &mut self.buf;
        walk_name(msg, off, |label| {
            // walk_name guarantees the total stays within 255 bytes.
            let end = pos + 1 + label.len();
            if let Some(dst) = buf.get_mut(pos..end) {
                dst[0] = label.len() as u8;
                dst[1..].copy_from_slice(label);
            }
            pos = end;
        })?;
        if let Some(root) = self.buf.get_mut(pos) {
            *root = 0;
        }
        self.len = (pos + 1) as u8;
        Ok(())
    }

    /// Makes `self` the name of the labels `head` (wire form, no root
    /// label) followed by `suffix`, copying only their bytes.
    pub(crate) fn set_concat(&mut self, head: &[u8], suffix: &Name) -> Result<(), NameError> {
        let len = head.len() + suffix.len();
        if len > MAX_NAME_LEN {
            return Err(NameError::NameTooLong);
        }
        self.buf[..head.len()].copy_from_slice(head);
        self.buf[head.len()..len].copy_from_slice(suffix.as_wire());
        self.len = len as u8;
        Ok(())
    }

    /// Makes `self` the lowercase form of `other`, copying only its bytes.
    pub(crate) fn set_lowercase_of(&mut self, other: &Name) {
        let len = other.len();
        for (d, s) in self.buf[..len].iter_mut().zip(&other.buf[..len]) {
            *d = s.to_ascii_lowercase();
        }
        self.len = other.len;
    }

    /// Builds a name from uncompressed wire bytes (a sequence of labels
    /// ending in the root label, nothing after it).
    pub fn from_uncompressed(wire: &[u8]) -> Result<Name, ParseError> {
        if !is_uncompressed(wire) {
            return Err(ParseError);
        }
        let mut name = Name::root();
        name.buf[..wire.len()].copy_from_slice(wire);
        name.len = wire.len() as u8;
        Ok(name)
    }

    /// Parses presentation form: `"a.b."` or `"a.b"` (both absolute),
    /// `"."` for the root, with `\.`, `\\`, `\X` and `\DDD` escapes.
    pub fn from_ascii(s: &str) -> Result<Name, NameError> {
        let b = s.as_bytes();
        if b == b"." {
            return Ok(Name::root());
        }
        if b.is_empty() {
            return Err(NameError::EmptyLabel);
        }
        let mut name = Name::root();
        let mut out = 0; // start of the current label (its length byte)
        let mut label_len = 0usize;
        let mut i = 0;
        let push = |name: &mut Name, out: usize, label_len: &mut usize, byte: u8| {
            *label_len += 1;
            if *label_len > MAX_LABEL_LEN {
                return Err(NameError::LabelTooLong);
            }
            let at = out + *label_len;
            // Leave room for the root label.
            if at + 1 >= MAX_NAME_LEN {
                return Err(NameError::NameTooLong);
            }
            name.buf[at] = byte;
            Ok(())
        };
        while i < b.len() {
            match b[i] {
                b'.' => {
                    if label_len == 0 {
                        return Err(NameError::EmptyLabel);
                    }
                    name.buf[out] = label_len as u8;
                    out += 1 + label_len;
                    label_len = 0;
                    i += 1;
                }
                b'\\' => {
                    let (byte, used) = unescape(&b[i + 1..])?;
                    push(&mut name, out, &mut label_len, byte)?;
                    i += 1 + used;
                }
                c => {
                    push(&mut name, out, &mut label_len, c)?;
                    i += 1;
                }
            }
        }
        if label_len > 0 {
            name.buf[out] = label_len as u8;
            out += 1 + label_len;
        }
        if out + 1 > MAX_NAME_LEN {
            return Err(NameError::NameTooLong);
        }
        name.buf[out] = 0;
        name.len = (out + 1) as u8;
        Ok(name)
    }

    /// Builds a name from labels (left to right, root excluded).
    pub fn from_labels<'l, I>(labels: I) -> Result<Name, NameError>
    where
        I: IntoIterator<Item = &'l [u8]>,
    {
        // Written in place: no copy of the whole name per label.
        let mut name = Name::root();
        let mut at = 0;
        for label in labels {
            check_label(label)?;
            let end = at + 1 + label.len();
            if end + 1 > MAX_NAME_LEN {
                return Err(NameError::NameTooLong);
            }
            name.buf[at] = label.len() as u8;
            name.buf[at + 1..end].copy_from_slice(label);
            at = end;
        }
        name.buf[at] = 0;
        name.len = (at + 1) as u8;
        Ok(name)
    }

    /// The uncompressed wire form, root label included.
    pub fn as_wire(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }

    /// Length of the wire form (1 for the root).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Whether this is the root name.
    pub fn is_root(&self) -> bool {
        self.len == 1
    }

    /// Number of labels, root excluded (0 for the root).
    pub fn label_count(&self) -> usize {
        self.labels().count()
    }

    /// The labels left to right, root excluded.
    pub fn labels(&self) -> Labels<'_> {
        Labels {
            rest: self.as_wire(),
        }
    }

    /// The leftmost label, `None` for the root.
    pub fn first_label(&self) -> Option<&[u8]> {
        self.labels().next()
    }

    /// A lowercased copy.
    pub fn to_lowercase(&self) -> Name {
        let mut n = *self;
        n.make_lowercase();
        n
    }

    /// ASCII-lowercases in place.
    pub fn make_lowercase(&mut self) {
        let len = self.len();
        self.buf[..len].make_ascii_lowercase();
    }

    /// Equality ignoring ASCII case, as DNS compares names.
    pub fn eq_ignore_case(&self, other: &Name) -> bool {
        self.as_wire().eq_ignore_ascii_case(other.as_wire())
    }

    /// Offset where `zone` starts within this name's wire form, if this
    /// name is `zone` or below it (label-aligned, case-insensitive).
    fn suffix_offset(&self, zone: &Name) -> Option<usize> {
        let off = self.len().checked_sub(zone.len())?;
        let mut pos = 0;
        while pos < off {
            pos += 1 + usize::from(self.buf[pos]);
        }
        (pos == off && self.as_wire()[off..].eq_ignore_ascii_case(zone.as_wire())).then_some(off)
    }

    /// Whether this name equals `zone` or lies below it. Label-aligned and
    /// case-insensitive; every name ends with the root.
    pub fn ends_with(&self, zone: &Name) -> bool {
        self.suffix_offset(zone).is_some()
    }

    /// The labels left of `zone` (left to right), if this name ends with
    /// `zone`. Empty when the name equals the zone.
    pub fn strip_suffix_labels(&self, zone: &Name) -> Option<Labels<'_>> {
        let off = self.suffix_offset(zone)?;
        Some(Labels {
            rest: &self.buf[..off],
        })
    }

    /// The name without its leftmost label; `None` for the root.
    pub fn parent(&self) -> Option<Name> {
        if self.is_root() {
            return None;
        }
        let skip = 1 + usize::from(self.buf[0]);
        let mut n = Name::root();
        let rest = &self.as_wire()[skip..];
        n.buf[..rest.len()].copy_from_slice(rest);
        n.len = rest.len() as u8;
        Some(n)
    }

    /// `label` + `.` + this name.
    pub fn prepend_label(&self, label: &[u8]) -> Result<Name, NameError> {
        check_label(label)?;
        let new_len = self.len() + 1 + label.len();
        if new_len > MAX_NAME_LEN {
            return Err(NameError::NameTooLong);
        }
        let mut n = Name::root();
        n.buf[0] = label.len() as u8;
        n.buf[1..=label.len()].copy_from_slice(label);
        n.buf[1 + label.len()..new_len].copy_from_slice(self.as_wire());
        n.len = new_len as u8;
        Ok(n)
    }

    /// This name with `label` added just left of the root, e.g.
    /// `a.b.` + `c` = `a.b.c.`.
    pub fn append_label(&self, label: &[u8]) -> Result<Name, NameError> {
        check_label(label)?;
        let new_len = self.len() + 1 + label.len();
        if new_len > MAX_NAME_LEN {
            return Err(NameError::NameTooLong);
        }
        let mut n = *self;
        let at = self.len() - 1;
        n.buf[at] = label.len() as u8;
        n.buf[at + 1..at + 1 + label.len()].copy_from_slice(label);
        n.buf[new_len - 1] = 0;
        n.len = new_len as u8;
        Ok(n)
    }

    /// The labels of this name followed by `suffix`: `a.` ++ `b.c.` = `a.b.c.`.
    pub fn concat(&self, suffix: &Name) -> Result<Name, NameError> {
        let mut n = Name::root();
        n.set_concat(&self.as_wire()[..self.len() - 1], suffix)?;
        Ok(n)
    }
}

fn check_label(label: &[u8]) -> Result<(), NameError> {
    match label.len() {
        0 => Err(NameError::EmptyLabel),
        1..=MAX_LABEL_LEN => Ok(()),
        _ => Err(NameError::LabelTooLong),
    }
}

/// Decodes the escape after a backslash: returns the byte and how many
/// input bytes it used.
fn unescape(rest: &[u8]) -> Result<(u8, usize), NameError> {
    match rest {
        [a, b, c, ..] if a.is_ascii_digit() && b.is_ascii_digit() && c.is_ascii_digit() => {
            let v = u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0');
            u8::try_from(v)
                .map(|v| (v, 3))
                .map_err(|_| NameError::BadEscape)
        }
        [d, ..] if d.is_ascii_digit() => Err(NameError::BadEscape),
        [c, ..] => Ok((*c, 1)),
        [] => Err(NameError::BadEscape),
    }
}

/// Writes one label in presentation form, escaping like miekg/dns.
pub(crate) fn fmt_label(f: &mut impl fmt::Write, label: &[u8]) -> fmt::Result {
    for &b in label {
        match b {
            b'.' | b' ' | b'\'' | b'@' | b';' | b'(' | b')' | b'"' | b'\\' => {
                f.write_char('\\')?;
                f.write_char(char::from(b))?;
            }
            0x21..=0x7E => f.write_char(char::from(b))?,
            _ => write!(f, "\\{b:03}")?,
        }
    }
    Ok(())
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_root() {
            return f.write_str(".");
        }
        for label in self.labels() {
            fmt_label(f, label)?;
            f.write_str(".")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Name({self})")
    }
}

impl PartialEq for Name {
    fn eq(&self, other: &Name) -> bool {
        self.as_wire() == other.as_wire()
    }
}

impl Eq for Name {}

impl Hash for Name {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_wire().hash(state);
    }
}

impl PartialOrd for Name {
    fn partial_cmp(&self, other: &Name) -> Option<core::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Orders by wire bytes (cheap and total; not RFC 4034 canonical order).
impl Ord for Name {
    fn cmp(&self, other: &Name) -> core::cmp::Ordering {
        self.as_wire().cmp(other.as_wire())
    }
}

impl Default for Name {
    fn default() -> Self {
        Name::root()
    }
}

impl FromStr for Name {
    type Err = NameError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Name::from_ascii(s)
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The reverse-lookup name of an address: `4.3.2.1.in-addr.arpa.` for
/// 1.2.3.4, 32 nibble labels under `ip6.arpa.` for IPv6.
pub fn reverse_name(ip: IpAddr) -> Name {
    let mut n = Name::root();
    let mut pos = 0;
    let mut put = |label: &[u8]| {
        n.buf[pos] = label.len() as u8;
        n.buf[pos + 1..pos + 1 + label.len()].copy_from_slice(label);
        pos += 1 + label.len();
    };
    match ip {
        IpAddr::V4(v4) => {
            for octet in v4.octets().into_iter().rev() {
                let mut digits = [0u8; 3];
                let mut i = 3;
                let mut v = octet;
                loop {
                    i -= 1;
                    digits[i] = b'0' + v % 10;
                    v /= 10;
                    if v == 0 {
                        break;
                    }
                }
                put(&digits[i..]);
            }
            put(b"in-addr");
        }
        IpAddr::V6(v6) => {
            for byte in v6.octets().into_iter().rev() {
                put(&[HEX[usize::from(byte & 0xF)]]);
                put(&[HEX[usize::from(byte >> 4)]]);
            }
            put(b"ip6");
        }
    }
    put(b"arpa");
    n.buf[pos] = 0;
    n.len = (pos + 1) as u8;
    n
}

/// The address a full-length reverse name stands for (case-insensitive).
/// `None` for partial names (`3.2.1.in-addr.arpa.`) and anything else.
pub fn parse_reverse(name: &Name) -> Option<IpAddr> {
    // IPv4, the common case, straight from the wire bytes: the name ends
    // in `in-addr.arpa.` and what is left of it is exactly four octet
    // labels (the four end where the tail starts, so the tail is labels).
    const V4_TAIL: &[u8] = b"\x07in-addr\x04arpa\x00";
    let wire = name.as_wire();
    if let Some(head_len) = wire.len().checked_sub(V4_TAIL.len())
        && wire[head_len..].eq_ignore_ascii_case(V4_TAIL)
    {
        let mut octets = [0u8; 4];
        let mut p = 0;
        for slot in octets.iter_mut().rev() {
            let len = usize::from(*wire.get(p)?);
            *slot = parse_octet(wire.get(p + 1..p + 1 + len)?)?;
            p += 1 + len;
        }
        return (p == head_len).then(|| IpAddr::V4(Ipv4Addr::from(octets)));
    }
    let mut labels = name.labels();
    match name.label_count() {
        34 => {
            let mut octets = [0u8; 16];
            for slot in octets.iter_mut().rev() {
                let low = parse_nibble(labels.next()?)?;
                let high = parse_nibble(labels.next()?)?;
                *slot = (high << 4) | low;
            }
            let tail_ok = labels.next()?.eq_ignore_ascii_case(b"ip6")
                && labels.next()?.eq_ignore_ascii_case(b"arpa");
            tail_ok.then(|| IpAddr::V6(Ipv6Addr::from(octets)))
        }
        _ => None,
    }
}

fn parse_octet(label: &[u8]) -> Option<u8> {
    if label.is_empty() || label.len() > 3 || (label.len() > 1 && label[0] == b'0') {
        return None;
    }
    let mut v = 0u16;
    for &c in label {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + u16::from(c - b'0');
    }
    u8::try_from(v).ok()
}

fn parse_nibble(label: &[u8]) -> Option<u8> {
    match label {
        [c] => (*c as char).to_digit(16).map(|d| d as u8),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> Name {
        Name::from_ascii(s).unwrap()
    }

    /// A message: 12 zero header bytes followed by `body`.
    fn msg(body: &[u8]) -> Vec<u8> {
        let mut m = vec![0u8; HEADER_LEN];
        m.extend_from_slice(body);
        m
    }

    #[test]
    fn root() {
        let r = Name::root();
        assert_eq!(r.as_wire(), &[0]);
        assert_eq!(r.len(), 1);
        assert!(r.is_root());
        assert_eq!(r.label_count(), 0);
        assert_eq!(r.to_string(), ".");
        assert_eq!(n("."), r);
        assert_eq!(r.parent(), None);
        assert_eq!(r.first_label(), None);
        assert_eq!(Name::default(), r);
    }

    #[test]
    fn from_ascii_basic() {
        let a = n("www.Example.org.");
        assert_eq!(a.as_wire(), b"\x03www\x07Example\x03org\x00");
        assert_eq!(a, n("www.Example.org"));
        assert_eq!(a.len(), 17);
        assert_eq!(a.label_count(), 3);
        let labels: Vec<&[u8]> = a.labels().collect();
        assert_eq!(labels, [&b"www"[..], b"Example", b"org"]);
        assert_eq!(a.to_string(), "www.Example.org.");
        assert_eq!("a.b".parse::<Name>(), Ok(n("a.b.")));
    }

    #[test]
    fn from_ascii_errors() {
        assert_eq!(Name::from_ascii(""), Err(NameError::EmptyLabel));
        assert_eq!(Name::from_ascii("a..b"), Err(NameError::EmptyLabel));
        assert_eq!(Name::from_ascii(".a"), Err(NameError::EmptyLabel));
        assert_eq!(Name::from_ascii("a.."), Err(NameError::EmptyLabel));
        assert_eq!(Name::from_ascii("a\\"), Err(NameError::BadEscape));
        assert_eq!(Name::from_ascii("a\\25"), Err(NameError::BadEscape));
        assert_eq!(Name::from_ascii("a\\256"), Err(NameError::BadEscape));
        let long_label = "x".repeat(64);
        assert_eq!(Name::from_ascii(&long_label), Err(NameError::LabelTooLong));
    }

    #[test]
    fn escapes() {
        let a = n("a\\.b.c");
        assert_eq!(a.as_wire(), b"\x03a.b\x01c\x00");
        assert_eq!(a.to_string(), "a\\.b.c.");
        let b = n("\\000\\255\\032x\\\\y");
        assert_eq!(b.as_wire(), b"\x06\x00\xff x\\y\x00");
        assert_eq!(b.to_string(), "\\000\\255\\ x\\\\y.");
        assert_eq!(n(&b.to_string()), b);
        let c = n("\\@\\;\\(\\)\\\"\\'\\$");
        assert_eq!(c.to_string(), "\\@\\;\\(\\)\\\"\\'$.");
        assert_eq!(n(&c.to_string()), c);
    }

    /// Labels of 63 bytes; total exactly `total` bytes of wire form.
    fn name_of_len(total: usize) -> String {
        let mut parts = Vec::new();
        let mut left = total - 1; // root byte
        while left > 0 {
            let take = left.min(64);
            // A label of length L uses L + 1 bytes; avoid a 0-length label.
            let take = if left - take == 1 { take - 1 } else { take };
            parts.push("a".repeat(take - 1));
            left -= take;
        }
        parts.join(".")
    }

    #[test]
    fn length_limits() {
        let max = n(&name_of_len(255));
        assert_eq!(max.len(), 255);
        assert_eq!(n(&max.to_string()), max);
        assert_eq!(
            Name::from_ascii(&name_of_len(256)),
            Err(NameError::NameTooLong)
        );
        let label63 = "b".repeat(63);
        let l = n(&label63);
        assert_eq!(l.len(), 65);
        assert_eq!(l.prepend_label(&[b'x'; 64]), Err(NameError::LabelTooLong));
        assert_eq!(max.prepend_label(b"x"), Err(NameError::NameTooLong));
        assert_eq!(max.append_label(b"x"), Err(NameError::NameTooLong));
        assert_eq!(max.concat(&n("x")), Err(NameError::NameTooLong));
        assert_eq!(Name::root().prepend_label(b""), Err(NameError::EmptyLabel));

        // The same limits on the wire.
        let mut off = HEADER_LEN;
        let m = msg(max.as_wire());
        assert_eq!(Name::from_wire(&m, &mut off), Ok(max));
        assert_eq!(off, HEADER_LEN + 255);
        let mut body = vec![1, b'x'];
        body.extend_from_slice(max.as_wire());
        let m = msg(&body);
        assert_eq!(
            Name::from_wire(&m, &mut HEADER_LEN.clone()),
            Err(ParseError)
        );
        let mut body = vec![63];
        body.extend_from_slice(&[b'y'; 63]);
        body.push(0);
        let m = msg(&body);
        let mut off = HEADER_LEN;
        assert_eq!(Name::from_wire(&m, &mut off).unwrap().len(), 65);
        // 64-byte label: the length byte 0x40 is a reserved label type.
        let mut body = vec![64];
        body.extend_from_slice(&[b'y'; 64]);
        body.push(0);
        assert_eq!(
            Name::from_wire(&msg(&body), &mut HEADER_LEN.clone()),
            Err(ParseError)
        );
    }

    #[test]
    fn from_wire_pointers() {
        // 12: example.org. ; 25: www + ptr(12) ; 31: ptr(25)
        let mut body = b"\x07example\x03org\x00".to_vec();
        body.extend_from_slice(b"\x03www\xC0\x0C");
        body.extend_from_slice(b"\xC0\x19");
        let m = msg(&body);
        let mut off = 25;
        assert_eq!(Name::from_wire(&m, &mut off), Ok(n("www.example.org")));
        assert_eq!(off, 31);
        let mut off = 31;
        assert_eq!(Name::from_wire(&m, &mut off), Ok(n("www.example.org")));
        assert_eq!(off, 33);
    }

    #[test]
    fn from_wire_bad_pointers() {
        // Pointer to itself.
        let m = msg(b"\xC0\x0C");
        assert_eq!(Name::from_wire(&m, &mut 12), Err(ParseError));
        // Forward pointer.
        let m = msg(b"\xC0\x0E\x00");
        assert_eq!(Name::from_wire(&m, &mut 12), Err(ParseError));
        // Loop: 12 -> 14 is forward; 14 -> 12 backward then 12 -> 14 again.
        let m = msg(b"\x01a\xC0\x0C");
        assert_eq!(Name::from_wire(&m, &mut 14), Err(ParseError));
        // Two-step loop through earlier names.
        let m = msg(b"\x01a\xC0\x10\x01b\xC0\x0C");
        assert_eq!(Name::from_wire(&m, &mut 16), Err(ParseError));
        // Pointer past the end.
        let m = msg(b"\x00\xC0\xFF");
        assert_eq!(Name::from_wire(&m, &mut 13), Err(ParseError));
        // Backwards, but onto a label that runs over the pointer itself:
        // 12: label of 4 bytes (13..17) covering the pointer at 14.
        let m = msg(b"\x04a\xC0\x0Cb\x00");
        assert_eq!(Name::from_wire(&m, &mut 14), Err(ParseError));
        // Backwards, onto a name whose root comes after the pointer: the
        // label at 12 holds the pointer's bytes, the root is at 16.
        let m = msg(b"\x03a\xC0\x0C\x00");
        assert_eq!(Name::from_wire(&m, &mut 14), Err(ParseError));
        // Pointer into the header.
        let m = msg(b"\xC0\x02");
        assert_eq!(Name::from_wire(&m, &mut 12), Err(ParseError));
        // Truncated pointer and label.
        assert_eq!(Name::from_wire(&msg(b"\xC0"), &mut 12), Err(ParseError));
        assert_eq!(Name::from_wire(&msg(b"\x05ab"), &mut 12), Err(ParseError));
        assert_eq!(Name::from_wire(&msg(b"\x01a"), &mut 12), Err(ParseError));
        assert_eq!(Name::from_wire(&msg(b""), &mut 12), Err(ParseError));
        assert_eq!(Name::from_wire(&msg(b"\x00"), &mut 99), Err(ParseError));
        // Reserved label type 0x80.
        assert_eq!(Name::from_wire(&msg(b"\x80\x00"), &mut 12), Err(ParseError));
        // Long chain of valid backward pointers whose total exceeds 255.
        let mut body = Vec::new();
        body.extend_from_slice(
            b"\x3Faaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\x00",
        );
        for i in 0..5 {
            let prev = 12 + if i == 0 { 0 } else { 65 + (i - 1) * 66 };
            body.push(0x3F);
            body.extend_from_slice(&[b'b'; 63]);
            body.extend_from_slice(&[0xC0 | (prev >> 8) as u8, prev as u8]);
        }
        let m = msg(&body);
        assert!(Name::from_wire(&m, &mut (12 + 65)).is_ok());
        assert_eq!(
            Name::from_wire(&m, &mut (12 + 65 + 4 * 66)),
            Err(ParseError)
        );
    }

    #[test]
    fn from_uncompressed() {
        let a = n("a.b");
        assert_eq!(Name::from_uncompressed(a.as_wire()), Ok(a));
        assert_eq!(Name::from_uncompressed(b"\x01a\x00x"), Err(ParseError));
        assert_eq!(Name::from_uncompressed(b"\x01a"), Err(ParseError));
        assert_eq!(Name::from_uncompressed(b"\x40a\x00"), Err(ParseError));
        assert_eq!(Name::from_uncompressed(b""), Err(ParseError));
    }

    #[test]
    fn case_handling() {
        let a = n("WwW.ExAmple.ORG");
        assert_eq!(a.to_lowercase(), n("www.example.org"));
        assert_ne!(a, n("www.example.org"));
        assert!(a.eq_ignore_case(&n("www.example.org")));
        assert!(!a.eq_ignore_case(&n("www.example.com")));
        let mut b = a;
        b.make_lowercase();
        assert_eq!(b.as_wire(), b"\x03www\x07example\x03org\x00");
        // Length bytes are never touched (63 < 'A').
        let c = n(&"Z".repeat(63));
        assert_eq!(c.to_lowercase().as_wire()[0], 63);
    }

    #[test]
    fn suffixes() {
        let a = n("svc.NS.svc.cluster.local");
        let zone = n("cluster.local");
        assert!(a.ends_with(&zone));
        assert!(a.ends_with(&Name::root()));
        assert!(Name::root().ends_with(&Name::root()));
        assert!(a.ends_with(&a));
        assert!(a.ends_with(&n("CLUSTER.local")));
        assert!(!a.ends_with(&n("uster.local")));
        assert!(!zone.ends_with(&a));
        assert!(!n("xcluster.local").ends_with(&zone));
        let left: Vec<&[u8]> = a.strip_suffix_labels(&zone).unwrap().collect();
        assert_eq!(left, [&b"svc"[..], b"NS", b"svc"]);
        assert_eq!(zone.strip_suffix_labels(&zone).unwrap().count(), 0);
        assert!(a.strip_suffix_labels(&n("example.org")).is_none());
        assert_eq!(
            Name::root()
                .strip_suffix_labels(&Name::root())
                .unwrap()
                .count(),
            0
        );
    }

    #[test]
    fn composition() {
        let a = n("b.c");
        assert_eq!(a.parent(), Some(n("c")));
        assert_eq!(n("c").parent(), Some(Name::root()));
        assert_eq!(a.prepend_label(b"a"), Ok(n("a.b.c")));
        assert_eq!(a.append_label(b"d"), Ok(n("b.c.d")));
        assert_eq!(Name::root().append_label(b"d"), Ok(n("d")));
        assert_eq!(n("a").concat(&a), Ok(n("a.b.c")));
        assert_eq!(Name::root().concat(&a), Ok(a));
        assert_eq!(a.concat(&Name::root()), Ok(a));
        assert_eq!(a.first_label(), Some(&b"b"[..]));
        assert_eq!(Name::from_labels([&b"x"[..], b"y"]), Ok(n("x.y")));
        assert_eq!(Name::from_labels(core::iter::empty()), Ok(Name::root()));
    }

    /// `from_labels` agrees with appending label by label, errors included.
    #[test]
    fn from_labels_limits() {
        let l63 = [b'a'; 63];
        let by_append = |labels: &[&[u8]]| {
            labels
                .iter()
                .try_fold(Name::root(), |n, l| n.append_label(l))
        };
        let cases: [&[&[u8]]; 6] = [
            // 4 × 64 = 256 bytes with the root: one too many.
            &[&l63, &l63, &l63, &l63],
            // 3 × 64 + 62 + 1 = 255: the longest name.
            &[&l63, &l63, &l63, &l63[..61]],
            &[&l63, &l63, &l63, &l63[..62]],
            &[b"x", &[b'a'; 64]],
            &[b"x", b"", b"y"],
            &[b"MiXeD", b"Case"],
        ];
        for labels in cases {
            let got = Name::from_labels(labels.iter().copied());
            assert_eq!(got, by_append(labels), "{labels:?}");
        }
        assert_eq!(
            Name::from_labels(cases[1].iter().copied()).map(|n| n.len()),
            Ok(255)
        );
        assert_eq!(
            Name::from_labels(cases[0].iter().copied()),
            Err(NameError::NameTooLong)
        );
        assert_eq!(
            Name::from_labels(cases[3].iter().copied()),
            Err(NameError::LabelTooLong)
        );
    }

    #[test]
    fn ordering_and_hash() {
        use std::collections::HashSet;
        let set: HashSet<Name> = [n("a"), n("A"), n("a")].into_iter().collect();
        assert_eq!(set.len(), 2);
        assert!(n("a") < n("b"));
        assert_eq!(format!("{:?}", n("a.b")), "Name(a.b.)");
    }

    #[test]
    fn reverse_v4() {
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let r = reverse_name(ip);
        assert_eq!(r, n("1.0.0.10.in-addr.arpa."));
        assert_eq!(parse_reverse(&r), Some(ip));
        let ip: IpAddr = "255.100.9.0".parse().unwrap();
        assert_eq!(reverse_name(ip).to_string(), "0.9.100.255.in-addr.arpa.");
        assert_eq!(parse_reverse(&reverse_name(ip)), Some(ip));
        assert_eq!(
            parse_reverse(&n("1.0.0.10.IN-ADDR.Arpa")),
            Some("10.0.0.1".parse().unwrap())
        );
        assert_eq!(parse_reverse(&n("0.0.10.in-addr.arpa")), None);
        assert_eq!(parse_reverse(&n("1.0.0.256.in-addr.arpa")), None);
        assert_eq!(parse_reverse(&n("1.0.0.010.in-addr.arpa")), None);
        assert_eq!(parse_reverse(&n("1.0.0.x.in-addr.arpa")), None);
        assert_eq!(parse_reverse(&n("1.0.0.10.in-addr.arpb")), None);
        assert_eq!(parse_reverse(&n("1.0.0.10.ip6.arpa")), None);
        // Four octets exactly, the tail label-aligned.
        assert_eq!(parse_reverse(&n("5.1.0.0.10.in-addr.arpa")), None);
        assert_eq!(parse_reverse(&n("0.10.in-addr.arpa")), None);
        let inside = Name::from_labels([&b"1\x07in-addr"[..], b"arpa"]).unwrap();
        assert_eq!(parse_reverse(&inside), None);
    }

    #[test]
    fn reverse_v6() {
        let ip: IpAddr = "2001:db8::567:89ab".parse().unwrap();
        let r = reverse_name(ip);
        assert_eq!(
            r.to_string(),
            "b.a.9.8.7.6.5.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa."
        );
        assert_eq!(r.label_count(), 34);
        assert_eq!(parse_reverse(&r), Some(ip));
        assert_eq!(
            parse_reverse(&r.to_string().to_uppercase().parse().unwrap()),
            Some(ip)
        );
        assert_eq!(parse_reverse(&r.parent().unwrap()), None);
        let bad = n("bb.a.9.8.7.6.5.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa");
        assert_eq!(parse_reverse(&bad), None);
        let bad = n("g.a.9.8.7.6.5.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa");
        assert_eq!(parse_reverse(&bad), None);
        let ip: IpAddr = "::".parse().unwrap();
        assert_eq!(parse_reverse(&reverse_name(ip)), Some(ip));
    }
}
