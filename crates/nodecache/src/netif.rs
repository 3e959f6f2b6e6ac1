//! The `nodelocaldns` link holding every `-localip` as a /32 or /128, over
//! rtnetlink, as upstream's `EnsureDummyDevice` / `RemoveDummyDevice`.
//!
//! Like upstream the link is left DOWN: the kernel delivers packets for its
//! addresses locally whatever the link state, and a link that is up would
//! change nothing but what monitoring reports.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::{StreamExt, TryStreamExt};
use rtnetlink::packet_core::NetlinkPayload;
use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::packet_route::address::{AddressAttribute, AddressFlags};
use rtnetlink::packet_route::link::{LinkAttribute, LinkInfo, LinkMessage};
use rtnetlink::sys::{AsyncSocket, SocketAddr};
use rtnetlink::{Handle, LinkBridge, LinkDummy, LinkMessageBuilder};

use crate::metrics::SetupMetrics;

/// Which kind of link holds the addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkKind {
    /// A dummy link, as upstream.
    Dummy,
    /// An empty bridge: the kernel has no dummy link type (no `dummy`
    /// module). For local delivery it behaves the same.
    Bridge,
    /// The link existed already (left by us, by upstream or by a
    /// predecessor); its kind was not changed.
    Existing,
}

/// A netlink request failed.
#[derive(Debug, thiserror::Error)]
pub enum NetifError {
    /// The netlink socket could not be opened.
    #[error("netlink socket: {0}")]
    Socket(#[from] std::io::Error),
    /// The kernel refused a request.
    #[error("{what}: {source}")]
    Netlink {
        /// What was asked.
        what: String,
        /// The kernel's answer.
        #[source]
        source: rtnetlink::Error,
    },
}

const EEXIST: i32 = 17;
const ENODEV: i32 = 19;
const EOPNOTSUPP: i32 = 95;
const EADDRNOTAVAIL: i32 = 99;

fn errno(e: &rtnetlink::Error) -> i32 {
    match e {
        rtnetlink::Error::NetlinkError(m) => -m.raw_code(),
        _ => 0,
    }
}

/// The link manager: one netlink connection, kept for the agent's life.
#[derive(Debug, Clone)]
pub struct Netif {
    handle: Handle,
    name: String,
    ips: Vec<IpAddr>,
    metrics: SetupMetrics,
}

/// The bridge fallback is logged once per process, however often the
/// link has to be made again.
static FALLBACK_LOGGED: AtomicBool = AtomicBool::new(false);

impl Netif {
    /// Opens a netlink connection in the calling thread's network
    /// namespace; its driver task runs on the current tokio runtime.
    pub fn new(name: &str, ips: &[IpAddr], metrics: SetupMetrics) -> Result<Self, NetifError> {
        let (conn, handle, _) = rtnetlink::new_connection()?;
        tokio::spawn(conn);
        Ok(Netif {
            handle,
            name: name.to_string(),
            ips: ips.to_vec(),
            metrics,
        })
    }

    /// The link, `None` when it does not exist.
    async fn lookup(&self) -> Result<Option<LinkMessage>, NetifError> {
        let mut links = self
            .handle
            .link()
            .get()
            .match_name(self.name.clone())
            .execute();
        match links.try_next().await {
            Ok(l) => Ok(l),
            Err(e) if errno(&e) == ENODEV => Ok(None),
            Err(source) => Err(NetifError::Netlink {
                what: format!("look up link {}", self.name),
                source,
            }),
        }
    }

    /// Tells, through the receiver, each time the link or one of our
    /// addresses is deleted (another instance's teardown: upstream's
    /// node-cache, stopping after ours started beside it, removes the link
    /// by name; or an operator's `ip link del`), so the caller puts them
    /// back at once instead of at its next sync. A burst of deletions is
    /// one message. Kernel notifications, not polling: the netlink
    /// multicast groups of links and of IPv4 and IPv6 addresses.
    pub fn watch(&self) -> Result<tokio::sync::mpsc::Receiver<()>, NetifError> {
        use rtnetlink::constants::{RTMGRP_IPV4_IFADDR, RTMGRP_IPV6_IFADDR, RTMGRP_LINK};
        let (mut conn, _, mut messages) = rtnetlink::new_connection()?;
        conn.socket_mut().socket_mut().bind(&SocketAddr::new(
            0,
            RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR,
        ))?;
        tokio::spawn(conn);
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let (name, ips) = (self.name.clone(), self.ips.clone());
        tokio::spawn(async move {
            while let Some((m, _)) = messages.next().await {
                let NetlinkPayload::InnerMessage(m) = m.payload else {
                    continue;
                };
                let ours = match m {
                    RouteNetlinkMessage::DelLink(l) => l
                        .attributes
                        .iter()
                        .any(|a| matches!(a, LinkAttribute::IfName(n) if *n == name)),
                    RouteNetlinkMessage::DelAddress(a) => a.attributes.iter().any(
                        |a| matches!(a, AddressAttribute::Address(ip) | AddressAttribute::Local(ip) if ips.contains(ip)),
                    ),
                    _ => false,
                };
                // Full: a message is pending already.
                if ours
                    && let Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) = tx.try_send(())
                {
                    return;
                }
            }
        });
        Ok(rx)
    }

    /// The link's index, `None` when it does not exist.
    pub async fn index(&self) -> Result<Option<u32>, NetifError> {
        Ok(self.lookup().await?.map(|l| l.header.index))
    }

    /// Makes sure the link exists with every address (upstream's
    /// `EnsureDummyDevice`): errors are counted as `interface_check` /
    /// `interface_add` and returned for the caller to log.
    pub async fn ensure(&self) -> Result<LinkKind, NetifError> {
        let existing = self.index().await.inspect_err(|_| {
            self.metrics.error("interface_check");
        })?;
        let (index, kind) = match existing {
            Some(i) => (i, LinkKind::Existing),
            None => self.add().await.inspect_err(|_| {
                self.metrics.error("interface_add");
            })?,
        };
        for ip in &self.ips {
            let prefix = if ip.is_ipv4() { 32 } else { 128 };
            let mut req = self.handle.address().add(index, *ip, prefix);
            if ip.is_ipv6() {
                // No duplicate address detection: the address is ours
                // alone and must be usable at once, on a link that is
                // never up.
                req.message_mut()
                    .attributes
                    .push(AddressAttribute::Flags(AddressFlags::Nodad));
            }
            match req.execute().await {
                Ok(()) => {}
                Err(e) if errno(&e) == EEXIST => {}
                Err(source) => {
                    self.metrics.error("interface_add");
                    return Err(NetifError::Netlink {
                        what: format!("add {ip}/{prefix} to {}", self.name),
                        source,
                    });
                }
            }
        }
        Ok(kind)
    }

    async fn add(&self) -> Result<(u32, LinkKind), NetifError> {
        let dummy = LinkDummy::new(&self.name).build();
        let kind = match self.handle.link().add(dummy).execute().await {
            Ok(()) => LinkKind::Dummy,
            Err(e) if errno(&e) == EOPNOTSUPP => {
                self.metrics.fallback();
                if !FALLBACK_LOGGED.swap(true, Ordering::Relaxed) {
                    clusterdns_observe::warning!(
                        "",
                        "the kernel has no dummy link type ({e}): {} is an empty bridge instead",
                        self.name
                    );
                }
                // Not `LinkBridge::new`, which sets the link up.
                let bridge = LinkMessageBuilder::<LinkBridge>::new(&self.name).build();
                self.handle
                    .link()
                    .add(bridge)
                    .execute()
                    .await
                    .map_err(|source| NetifError::Netlink {
                        what: format!("add bridge {}", self.name),
                        source,
                    })?;
                LinkKind::Bridge
            }
            Err(e) if errno(&e) == EEXIST => LinkKind::Existing,
            Err(source) => {
                return Err(NetifError::Netlink {
                    what: format!("add dummy link {}", self.name),
                    source,
                });
            }
        };
        match self.index().await? {
            Some(i) => Ok((i, kind)),
            None => Err(NetifError::Netlink {
                what: format!("link {} vanished after it was added", self.name),
                source: rtnetlink::Error::RequestFailed,
            }),
        }
    }

    /// Deletes the link (and so its addresses). A missing link is fine.
    pub async fn remove(&self) -> Result<(), NetifError> {
        let Some(index) = self.index().await? else {
            return Ok(());
        };
        match self.handle.link().del(index).execute().await {
            Ok(()) => Ok(()),
            Err(e) if matches!(errno(&e), ENODEV | EADDRNOTAVAIL) => Ok(()),
            Err(source) => Err(NetifError::Netlink {
                what: format!("delete link {}", self.name),
                source,
            }),
        }
    }

    /// The link's addresses, for tests and the start-up log.
    pub async fn addresses(&self) -> Result<Vec<IpAddr>, NetifError> {
        let Some(index) = self.index().await? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        let mut s = self
            .handle
            .address()
            .get()
            .set_link_index_filter(index)
            .execute();
        while let Some(m) = s.try_next().await.map_err(|source| NetifError::Netlink {
            what: format!("list addresses of {}", self.name),
            source,
        })? {
            for a in m.attributes {
                if let AddressAttribute::Address(ip) = a {
                    out.push(ip);
                }
            }
        }
        Ok(out)
    }

    /// The link's kind as the kernel reports it (`dummy`, `bridge`).
    pub async fn kind(&self) -> Result<Option<String>, NetifError> {
        let Some(l) = self.lookup().await? else {
            return Ok(None);
        };
        for a in l.attributes {
            if let LinkAttribute::LinkInfo(infos) = a {
                for i in infos {
                    if let LinkInfo::Kind(k) = i {
                        return Ok(Some(k.to_string()));
                    }
                }
            }
        }
        Ok(None)
    }
}
