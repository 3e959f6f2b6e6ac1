//! The sockets of the DNS listeners: binding (UDP and TCP on one port,
//! picked again while a port-0 listener's TCP twin is taken), adopting a
//! predecessor's, and duplicating them for a successor.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use arc_swap::ArcSwap;
use clusterdns_contract::listen;
use tokio::sync::watch;

use crate::mux::Mux;
use crate::passed::{Inherited, PassedSocket, SocketKind};
use crate::tcp;
use crate::udp::UdpListener;

/// A DNS listener that is serving: UDP workers and a TCP accept task
/// sharing one swappable zone table.
pub(super) struct Listening {
    pub(super) mux: Arc<ArcSwap<Mux>>,
    udp: UdpListener,
    stop: watch::Sender<bool>,
    /// A duplicate of the TCP listener, to hand to a successor.
    tcp_fd: OwnedFd,
    /// The TCP side, finished once its connections are.
    tcp_task: tokio::task::JoinHandle<()>,
}

impl Listening {
    /// The address it serves on (with the port the kernel picked for 0).
    pub(super) fn local(&self) -> SocketAddr {
        self.udp.local
    }

    /// Stops receiving and accepting; the handles end once what was in
    /// flight is answered.
    pub(super) fn stop(self) -> Vec<tokio::task::JoinHandle<()>> {
        let _ = self.stop.send(true);
        let mut tasks = self.udp.stop();
        tasks.push(self.tcp_task);
        tasks
    }
}

/// Duplicates of every socket serving DNS (`dns`) or admin HTTP (`admin`,
/// the listening sockets).
pub(super) fn export<'a>(
    dns: &HashMap<SocketAddr, Listening>,
    admin: impl Iterator<Item = (&'a SocketAddr, &'a OwnedFd)>,
) -> Vec<PassedSocket> {
    let mut out = Vec::new();
    for (addr, l) in dns {
        for fd in &l.udp.fds {
            if let Ok(fd) = fd.try_clone() {
                out.push(PassedSocket {
                    kind: SocketKind::Udp,
                    addr: *addr,
                    fd,
                });
            }
        }
        if let Ok(fd) = l.tcp_fd.try_clone() {
            out.push(PassedSocket {
                kind: SocketKind::Tcp,
                addr: *addr,
                fd,
            });
        }
    }
    for (addr, fd) in admin {
        if let Ok(fd) = fd.try_clone() {
            out.push(PassedSocket {
                kind: SocketKind::Tcp,
                addr: *addr,
                fd,
            });
        }
    }
    out
}

pub(super) async fn start_dns(
    addr: SocketAddr,
    mux: Mux,
    workers: usize,
    rt: &tokio::runtime::Handle,
    inherited: &Inherited,
) -> std::io::Result<Listening> {
    let mux = Arc::new(ArcSwap::from_pointee(mux));
    let passed = inherited.take(SocketKind::Udp, addr);
    let passed_tcp = inherited.take(SocketKind::Tcp, addr).pop();
    let (udp, tcp) = if passed.is_empty() && passed_tcp.is_none() {
        // TCP on the same port the UDP side got (they differ only for
        // port 0).
        same_port(
            addr.port(),
            || {
                let u = UdpListener::start(addr, mux.clone(), workers, rt.clone())?;
                let port = u.local.port();
                Ok((u, port))
            },
            |port| bind_tcp(SocketAddr::new(addr.ip(), port)),
            |u| drop(u.stop()),
        )?
    } else {
        let udp = if passed.is_empty() {
            UdpListener::start(addr, mux.clone(), workers, rt.clone())?
        } else {
            UdpListener::adopt(passed, mux.clone(), rt.clone())?
        };
        let tcp = match passed_tcp {
            Some(fd) => adopt_tcp(fd),
            None => bind_tcp(SocketAddr::new(addr.ip(), udp.local.port())),
        };
        (udp, tcp)
    };
    let tcp = match tcp.and_then(with_duplicate) {
        Ok(t) => t,
        Err(e) => {
            udp.stop();
            return Err(e);
        }
    };
    let (stop, rx) = watch::channel(false);
    let tcp_task = tokio::spawn(tcp::serve(tcp.0, mux.clone(), rx));
    Ok(Listening {
        mux,
        udp,
        stop,
        tcp_fd: tcp.1,
        tcp_task,
    })
}

/// How many ports the kernel may pick for a port-0 listener before
/// binding gives up.
const PORT_PICKS: usize = 16;

/// A UDP side from `udp` and a TCP side from `tcp` on the port the UDP
/// side got. For port 0 the kernel picks that port among UDP's free ones,
/// and its TCP twin may be taken (by a client's connection, or one in
/// TIME_WAIT, which a listener cannot share): then the kernel picks
/// again, up to [`PORT_PICKS`] times, the refused UDP sides `release`d
/// only afterwards so that no pick repeats one of them. A fixed port is
/// tried once. The TCP side's error, if any, is returned with its UDP side.
fn same_port<U, T>(
    port: u16,
    mut udp: impl FnMut() -> std::io::Result<(U, u16)>,
    mut tcp: impl FnMut(u16) -> std::io::Result<T>,
    release: impl Fn(U),
) -> std::io::Result<(U, std::io::Result<T>)> {
    let picks = if port == 0 { PORT_PICKS } else { 1 };
    let mut refused = Vec::new();
    let mut last = None;
    for _ in 0..picks {
        let (u, got) = udp()?;
        match tcp(got) {
            Err(e) if port == 0 && e.kind() == std::io::ErrorKind::AddrInUse => {
                refused.push(u);
                last = Some(e);
            }
            t => {
                refused.into_iter().for_each(&release);
                return Ok((u, t));
            }
        }
    }
    refused.into_iter().for_each(&release);
    Err(last.unwrap_or_else(|| std::io::Error::from(std::io::ErrorKind::AddrInUse)))
}

/// An admin HTTP listener on `addr`: the one a predecessor passed, or a
/// new one (dual-stack for a wildcard, as CoreDNS's Go listener is), with
/// a duplicate to hand to a successor.
pub(super) fn admin(
    addr: SocketAddr,
    inherited: &Inherited,
) -> std::io::Result<(tokio::net::TcpListener, OwnedFd)> {
    match inherited.take(SocketKind::Tcp, addr).pop() {
        Some(fd) => adopt_tcp(fd),
        None => listen::tcp(addr).and_then(tokio::net::TcpListener::from_std),
    }
    .and_then(with_duplicate)
}

/// A listener and a duplicate of its socket (for a successor).
fn with_duplicate(
    l: tokio::net::TcpListener,
) -> std::io::Result<(tokio::net::TcpListener, OwnedFd)> {
    let fd = socket2::SockRef::from(&l).try_clone()?;
    Ok((l, OwnedFd::from(fd)))
}

/// A listening TCP socket another process bound.
fn adopt_tcp(fd: OwnedFd) -> std::io::Result<tokio::net::TcpListener> {
    let l = std::net::TcpListener::from(fd);
    l.set_nonblocking(true)?;
    tokio::net::TcpListener::from_std(l)
}

/// A DNS listener's TCP socket: on exactly its address, an IPv6 one
/// IPv6-only (the IPv4 side, if any, is a listener of its own).
fn bind_tcp(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    listen::exact(addr, true).and_then(tokio::net::TcpListener::from_std)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::io::{Error, ErrorKind};

    /// Picks ports from `picks` for the UDP side; the TCP side is refused
    /// (in use) on every port in `taken`. Returns what `same_port` gave and
    /// the UDP sides released.
    fn pick(
        port: u16,
        picks: &[u16],
        taken: &[u16],
    ) -> (std::io::Result<(u16, std::io::Result<u16>)>, Vec<u16>) {
        let mut next = picks.iter().copied();
        let released = RefCell::new(Vec::new());
        let got = same_port(
            port,
            || {
                let p = next.next().ok_or_else(|| Error::other("no more ports"))?;
                Ok((p, p))
            },
            |p| {
                if taken.contains(&p) {
                    Err(Error::from(ErrorKind::AddrInUse))
                } else {
                    Ok(p)
                }
            },
            |p| released.borrow_mut().push(p),
        );
        (got, released.into_inner())
    }

    #[test]
    fn port_zero_picks_again_while_the_tcp_twin_is_taken() {
        let (got, released) = pick(0, &[40001, 40002, 40003], &[40001, 40002]);
        let (udp, tcp) = got.expect("a pair");
        assert_eq!((udp, tcp.expect("tcp bound")), (40003, 40003));
        assert_eq!(released, vec![40001, 40002], "the refused UDP sides closed");
    }

    #[test]
    fn port_zero_gives_up_after_its_picks() {
        let ports: Vec<u16> = (1..=PORT_PICKS as u16 + 1).collect();
        let (got, released) = pick(0, &ports, &ports);
        assert_eq!(got.err().map(|e| e.kind()), Some(ErrorKind::AddrInUse));
        assert_eq!(released.len(), PORT_PICKS, "every refused UDP side closed");
    }

    #[test]
    fn a_fixed_port_is_tried_once() {
        let (got, released) = pick(53, &[53, 53], &[53]);
        let (udp, tcp) = got.expect("the UDP side, with the TCP side's error");
        assert_eq!(udp, 53);
        assert_eq!(tcp.err().map(|e| e.kind()), Some(ErrorKind::AddrInUse));
        assert!(released.is_empty());
    }
}
