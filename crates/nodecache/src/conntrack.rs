//! Our replies' conntrack entries, deleted when the cache stops serving.
//!
//! A reply sent from one of our addresses while its query was untracked
//! is tracked whenever the reply's NOTRACK rule is missing at that
//! instant: the two rules of an address never come and go at once (a
//! query in flight while they change, or another agent's teardown and our
//! put-back interleaving during a rolling update). The kernel then keeps
//! an entry from our address and port 53 to the client's port, without
//! kube-proxy's NAT. While we serve, a new client socket the kernel gives
//! that port meets the entry and reaches us anyway; once we stop, it
//! reaches an address nobody serves, every retry of it too, until the
//! entry times out (30 s for UDP, minutes once assured): a glibc lookup
//! at the kube-dns ClusterIP then fails after both its tries. So the
//! teardown deletes these entries, as kube-proxy deletes the UDP entries
//! of a Service endpoint that went away.

use std::net::IpAddr;

use netlink_packet_core::{
    NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_packet_netfilter::conntrack::{
    ConntrackAttribute, ConntrackMessage, IPTuple, ProtoTuple, Tuple,
};
use netlink_packet_netfilter::{
    NetfilterHeader, NetfilterMessage, NetfilterMessageInner, NetfilterProtoFamily,
};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_NETFILTER};

/// What stopped the deletion.
#[derive(Debug, thiserror::Error)]
pub enum ConntrackError {
    #[error("netfilter netlink socket: {0}")]
    Socket(std::io::Error),
    #[error("conntrack {what}: {source}")]
    Kernel {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("conntrack dump: {0}")]
    Decode(String),
}

/// `CTA_ZONE`, which the crate does not name: copied onto the delete so
/// an entry in a conntrack zone is the one deleted.
const CTA_ZONE: u16 = 18;

/// How long one answer from the kernel may take: a kernel without
/// conntrack's netlink interface must not hold the teardown.
const RECV_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Deletes the conntrack entries whose original direction leaves one of
/// `ips` from `port` (any protocol); how many were deleted. Blocking.
pub fn forget_replies(ips: &[IpAddr], port: u16) -> Result<usize, ConntrackError> {
    let mut sock = Socket::new(NETLINK_NETFILTER).map_err(ConntrackError::Socket)?;
    sock.bind_auto().map_err(ConntrackError::Socket)?;
    sock.connect(&SocketAddr::new(0, 0))
        .map_err(ConntrackError::Socket)?;
    nix::sys::socket::setsockopt(
        &sock,
        nix::sys::socket::sockopt::ReceiveTimeout,
        &nix::sys::time::TimeVal::new(RECV_TIMEOUT.as_secs() as _, 0),
    )
    .map_err(|e| ConntrackError::Socket(e.into()))?;
    let mut deleted = 0;
    for family in [NetfilterProtoFamily::IPv4, NetfilterProtoFamily::IPv6] {
        let v4 = family == NetfilterProtoFamily::IPv4;
        if !ips.iter().any(|ip| ip.is_ipv4() == v4) {
            continue;
        }
        let entries = exchange(&sock, family, ConntrackMessage::Get(Vec::new()), NLM_F_DUMP)
            .map_err(|source| ConntrackError::Kernel {
                what: "dump",
                source,
            })?;
        for entry in entries {
            let Some(key) = reply_from(&entry, ips, port) else {
                continue;
            };
            match exchange(&sock, family, ConntrackMessage::Delete(key), NLM_F_ACK) {
                Ok(_) => deleted += 1,
                // Gone meanwhile (timed out, or deleted by someone else).
                Err(e) if e.raw_os_error() == Some(nix::libc::ENOENT) => {}
                Err(source) => {
                    return Err(ConntrackError::Kernel {
                        what: "delete",
                        source,
                    });
                }
            }
        }
    }
    Ok(deleted)
}

/// The attributes that name `entry` for a delete, when its original
/// direction leaves one of `ips` from `port`.
fn reply_from(
    entry: &[ConntrackAttribute],
    ips: &[IpAddr],
    port: u16,
) -> Option<Vec<ConntrackAttribute>> {
    let orig = entry.iter().find_map(|a| match a {
        ConntrackAttribute::CtaTupleOrig(t) => Some(t),
        _ => None,
    })?;
    let src = orig.iter().find_map(|t| match t {
        Tuple::Ip(ip) => ip.iter().find_map(|i| match i {
            IPTuple::SourceAddress(a) => Some(a.to_canonical()),
            _ => None,
        }),
        _ => None,
    })?;
    let sport = orig.iter().find_map(|t| match t {
        Tuple::Proto(p) => p.iter().find_map(|i| match i {
            ProtoTuple::SourcePort(p) => Some(*p),
            _ => None,
        }),
        _ => None,
    })?;
    if sport != port || !ips.iter().any(|ip| ip.to_canonical() == src) {
        return None;
    }
    let mut key = vec![ConntrackAttribute::CtaTupleOrig(orig.clone())];
    key.extend(
        entry
            .iter()
            .filter(|a| matches!(a, ConntrackAttribute::Other(n) if netlink_packet_core::Nla::kind(n) == CTA_ZONE))
            .cloned(),
    );
    Some(key)
}

/// Sends one request and reads its answer: the entries of a dump, or the
/// acknowledgement of anything else (no entries).
fn exchange(
    sock: &Socket,
    family: NetfilterProtoFamily,
    msg: ConntrackMessage,
    flags: u16,
) -> std::io::Result<Vec<Vec<ConntrackAttribute>>> {
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | flags;
    let mut packet = NetlinkMessage::new(
        header,
        NetlinkPayload::from(NetfilterMessage::new(
            NetfilterHeader::new(family, 0, 0),
            msg,
        )),
    );
    packet.finalize();
    let mut buf = vec![0; packet.buffer_len()];
    packet.serialize(&mut buf);
    sock.send(&buf, 0)?;
    let dump = flags & NLM_F_DUMP != 0;
    let mut entries = Vec::new();
    let mut rx = vec![0u8; 1 << 16];
    loop {
        rx.clear();
        let n = sock.recv(&mut rx, 0)?;
        let mut at = 0;
        while at < n {
            let Some(bytes) = rx.get(at..n) else { break };
            let m = NetlinkMessage::<NetfilterMessage>::deserialize(bytes)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?;
            let len = m.header.length as usize;
            match m.payload {
                NetlinkPayload::Done(_) => return Ok(entries),
                NetlinkPayload::Error(e) => match e.code {
                    // An acknowledgement.
                    None => return Ok(entries),
                    Some(code) => return Err(std::io::Error::from_raw_os_error(-code.get())),
                },
                NetlinkPayload::InnerMessage(NetfilterMessage {
                    inner: NetfilterMessageInner::Conntrack(ConntrackMessage::New(attrs)),
                    ..
                }) => entries.push(attrs),
                _ => {}
            }
            if len == 0 {
                break;
            }
            at += len;
        }
        if !dump {
            return Ok(entries);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use netlink_packet_netfilter::conntrack::Protocol;

    fn entry(src: &str, sport: u16, dst: &str, dport: u16) -> Vec<ConntrackAttribute> {
        let tuple = |s: &str, sp: u16, d: &str, dp: u16| {
            vec![
                Tuple::Ip(vec![
                    IPTuple::SourceAddress(s.parse().unwrap()),
                    IPTuple::DestinationAddress(d.parse().unwrap()),
                ]),
                Tuple::Proto(vec![
                    ProtoTuple::Protocol(Protocol::Udp),
                    ProtoTuple::SourcePort(sp),
                    ProtoTuple::DestinationPort(dp),
                ]),
            ]
        };
        vec![
            ConntrackAttribute::CtaTupleOrig(tuple(src, sport, dst, dport)),
            ConntrackAttribute::CtaTupleReply(tuple(dst, dport, src, sport)),
            ConntrackAttribute::CtaTimeout(27),
        ]
    }

    #[test]
    fn only_entries_leaving_our_addresses_from_the_port_are_picked() {
        let ips: Vec<IpAddr> = vec![
            "10.96.0.10".parse().unwrap(),
            "fd00:96::10".parse().unwrap(),
        ];
        // Our reply, tracked: picked, named by its original tuple alone.
        let ours = entry("10.96.0.10", 53, "10.244.0.2", 40053);
        let key = reply_from(&ours, &ips, 53).unwrap();
        assert_eq!(key, ours[..1].to_vec());
        assert!(reply_from(&entry("fd00:96::10", 53, "fd00:244::2", 1), &ips, 53).is_some());
        // A client's query (kube-proxy's DNAT of it, or ours untracked
        // the other way), another port, another address: left alone.
        assert!(reply_from(&entry("10.244.0.2", 40053, "10.96.0.10", 53), &ips, 53).is_none());
        assert!(reply_from(&entry("10.96.0.10", 8080, "10.244.0.2", 1), &ips, 53).is_none());
        assert!(reply_from(&entry("10.96.0.11", 53, "10.244.0.2", 1), &ips, 53).is_none());
        // No original tuple: nothing to name.
        assert!(reply_from(&[ConntrackAttribute::CtaTimeout(1)], &ips, 53).is_none());
    }
}
