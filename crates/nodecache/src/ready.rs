//! Node-local readiness (beyond upstream): `/ready` on the agent's
//! metrics listener is answered by a real query through the cache — an
//! `A` query for `-ready-query` sent over UDP to the agent's own listener
//! (the first link-local `-localip`, else the first `-localip`), as a pod
//! would ask. Ready when a reply with our id comes back within
//! [`TIMEOUT`] with NOERROR or NXDOMAIN (the chain, the cache and, for a
//! name not cached, the upstream all worked); not ready on SERVFAIL,
//! REFUSED or silence. CoreDNS's `ready` reports only that the plugins
//! finished starting; upstream node-local-dns has no readiness at all.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use clusterdns_wire::prelude::*;

use crate::crashsafe::link_local;

/// The default `-ready-query`: the name upstream's watchdog proposal
/// (kubernetes/dns PR #302) asks, answered by the cluster DNS.
pub const DEFAULT_NAME: &str = "kubernetes.default.svc.cluster.local.";

/// How long a probe waits for the reply (forward's own read timeout).
pub const TIMEOUT: Duration = Duration::from_secs(2);

/// The probe.
#[derive(Debug, Clone)]
pub struct ReadyProbe {
    target: SocketAddr,
    name: Name,
}

impl ReadyProbe {
    /// A probe asking `name` of the listener on `local_ips` port
    /// `dns_port`; `None` when `name` is not a domain name or there is no
    /// address.
    pub fn new(local_ips: &[IpAddr], dns_port: u16, name: &str) -> Option<Self> {
        let ip = local_ips
            .iter()
            .find(|i| link_local(i))
            .or_else(|| local_ips.first())?;
        Some(ReadyProbe {
            target: SocketAddr::new(*ip, dns_port),
            name: Name::from_ascii(name).ok()?,
        })
    }

    /// Where the probe asks.
    pub fn target(&self) -> SocketAddr {
        self.target
    }

    /// One probe: `Ok` when ready, else why not.
    pub async fn check(&self) -> Result<(), String> {
        let id = fastrand::u16(..);
        let mut q = Vec::with_capacity(64);
        let mut b = MessageBuilder::new(
            &mut q,
            Header {
                id,
                flags: clusterdns_wire::FLAG_RD,
                ..Header::default()
            },
        );
        b.push_question(&self.name, Rtype::A, Class::IN)
            .map_err(|e| format!("query: {e}"))?;
        b.finish();
        let bind: SocketAddr = if self.target.is_ipv6() {
            "[::]:0".parse().map_err(|e| format!("{e}"))?
        } else {
            "0.0.0.0:0".parse().map_err(|e| format!("{e}"))?
        };
        let sock = tokio::net::UdpSocket::bind(bind)
            .await
            .map_err(|e| format!("socket: {e}"))?;
        sock.connect(self.target)
            .await
            .map_err(|e| format!("{}: {e}", self.target))?;
        sock.send(&q)
            .await
            .map_err(|e| format!("{}: {e}", self.target))?;
        let mut buf = vec![0u8; 4096];
        let wait = async {
            loop {
                let n = sock.recv(&mut buf).await?;
                // Not ours (a late reply to an earlier probe): wait on.
                if let Ok(m) = Message::parse(&buf[..n])
                    && m.header().id == id
                {
                    return Ok::<Rcode, std::io::Error>(m.rcode());
                }
            }
        };
        match tokio::time::timeout(TIMEOUT, wait).await {
            Err(_) => Err(format!(
                "no reply from {} for {} within {TIMEOUT:?}",
                self.target, self.name
            )),
            Ok(Err(e)) => Err(format!("{}: {e}", self.target)),
            Ok(Ok(rc)) if rc == Rcode::NOERROR || rc == Rcode::NXDOMAIN => Ok(()),
            Ok(Ok(rc)) => Err(format!("{} answered {} with {rc}", self.target, self.name)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asks_the_link_local_address_first() {
        let ips: Vec<IpAddr> = vec![
            "10.96.0.10".parse().expect("ip"),
            "169.254.20.10".parse().expect("ip"),
        ];
        let p = ReadyProbe::new(&ips, 53, DEFAULT_NAME).expect("probe");
        assert_eq!(p.target(), "169.254.20.10:53".parse().expect("addr"));
        let p = ReadyProbe::new(&ips[..1], 5353, DEFAULT_NAME).expect("probe");
        assert_eq!(p.target(), "10.96.0.10:5353".parse().expect("addr"));
        assert!(ReadyProbe::new(&[], 53, DEFAULT_NAME).is_none());
    }
}
