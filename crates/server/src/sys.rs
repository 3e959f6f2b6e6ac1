//! The batched datagram syscalls std does not wrap: `recvmmsg` and
//! `sendmmsg`, over buffers allocated once per worker, and the packet-info
//! control messages that let a wildcard socket answer from the address a
//! query was sent to.
#![allow(unsafe_code)]

use std::io;
use std::mem::{MaybeUninit, size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;

/// Largest query we read; of a longer datagram only these first bytes
/// are read, and they are served as the query: answered when the message
/// ends within them (trailing bytes ignored), FORMERR otherwise. CoreDNS
/// does the same with the first 512 bytes (miekg/dns reads UDP into a
/// buffer of its minimum message size).
pub(crate) const RX_SIZE: usize = 4096;

/// Room for one packet-info control message (`in6_pktinfo` is the larger
/// of the two families').
// SAFETY: CMSG_SPACE only computes a length.
const CTRL_LEN: usize = unsafe { libc::CMSG_SPACE(size_of::<libc::in6_pktinfo>() as u32) } as usize;

/// A control-message buffer, aligned as the `cmsghdr` at its start must be.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct Ctrl([u8; CTRL_LEN]);

/// Receive and send state for one worker: `n` slots of buffers,
/// addresses and message headers.
pub(crate) struct Batch {
    pub rx: Vec<[u8; RX_SIZE]>,
    pub rx_len: Vec<usize>,
    pub addrs: Vec<libc::sockaddr_storage>,
    pub addr_len: Vec<libc::socklen_t>,
    /// The address each datagram was sent to, where the socket reports it
    /// (a wildcard socket, see [`report_destination`]): its reply leaves
    /// from there.
    dst: Vec<Option<IpAddr>>,
    pub tx: Vec<Vec<u8>>,
    /// Indices of slots whose `tx` holds a reply to send.
    pub tx_ready: Vec<usize>,
    /// How many of `tx_ready` were sent by an interrupted [`Batch::send`].
    tx_done: usize,
    /// Receive headers and their iovecs: point at `rx` and `addrs`.
    rx_iov: Vec<libc::iovec>,
    rx_hdrs: Vec<libc::mmsghdr>,
    /// The control buffers the kernel writes each datagram's destination
    /// into; `None` for a socket bound to one address, whose replies leave
    /// from it anyway.
    rx_ctrl: Option<Vec<Ctrl>>,
    /// How many receive headers, from the first, the kernel may have
    /// changed since they were last set (the last batch's count).
    rx_dirty: usize,
    /// Send headers and their iovecs, rewritten for every send.
    iov: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    /// The send headers' source-address control messages.
    tx_ctrl: Vec<Ctrl>,
}

// SAFETY: the raw pointers inside the iovecs and headers only ever point
// into this struct's own heap buffers (allocated once, never resized, so
// they stay put when the struct moves); send headers are rewritten before
// every send, receive headers before first use and after the kernel
// changed them.
unsafe impl Send for Batch {}

impl Batch {
    /// A batch of `n` slots; `destinations`: the socket reports each
    /// datagram's destination address ([`report_destination`]), and the
    /// replies are sent from it.
    pub(crate) fn new(n: usize, destinations: bool) -> Self {
        // SAFETY: all-zero bytes are a valid value for these plain C structs.
        let zero_addr: libc::sockaddr_storage = unsafe { zeroed() };
        let zero_iov = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        // SAFETY: as above.
        let zero_hdr: libc::mmsghdr = unsafe { zeroed() };
        Self {
            rx: vec![[0u8; RX_SIZE]; n],
            rx_len: vec![0; n],
            addrs: vec![zero_addr; n],
            addr_len: vec![0; n],
            dst: vec![None; n],
            tx: (0..n).map(|_| Vec::with_capacity(RX_SIZE)).collect(),
            tx_ready: Vec::with_capacity(n),
            tx_done: 0,
            rx_iov: vec![zero_iov; n],
            rx_hdrs: vec![zero_hdr; n],
            rx_ctrl: destinations.then(|| vec![Ctrl([0; CTRL_LEN]); n]),
            rx_dirty: n,
            iov: vec![zero_iov; n],
            hdrs: vec![zero_hdr; n],
            tx_ctrl: vec![Ctrl([0; CTRL_LEN]); n],
        }
    }

    /// Number of slots.
    pub(crate) fn len(&self) -> usize {
        self.rx.len()
    }

    /// Receives up to `len()` datagrams (on a blocking socket: waiting
    /// until at least one is there, or the socket's receive timeout
    /// passes; on a non-blocking one `WouldBlock` when none is). Returns
    /// how many slots were filled; a datagram longer than the buffer
    /// fills it (see [`RX_SIZE`]).
    pub(crate) fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        let n = self.len();
        // Only the headers the last batch used were changed by the kernel
        // (name length, flags, control length, message length); the
        // buffers they point at never move (allocated once, never resized).
        for i in 0..self.rx_dirty {
            self.rx_iov[i] = libc::iovec {
                iov_base: self.rx[i].as_mut_ptr().cast(),
                iov_len: RX_SIZE,
            };
            let h = &mut self.rx_hdrs[i].msg_hdr;
            h.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = &mut self.rx_iov[i];
            h.msg_iovlen = 1;
            match &mut self.rx_ctrl {
                Some(ctrl) => {
                    h.msg_control = ctrl[i].0.as_mut_ptr().cast();
                    h.msg_controllen = CTRL_LEN as _;
                }
                None => {
                    h.msg_control = std::ptr::null_mut();
                    h.msg_controllen = 0;
                }
            }
            h.msg_flags = 0;
            self.rx_hdrs[i].msg_len = 0;
        }
        self.rx_dirty = 0;
        // SAFETY: every header points at live buffers of this batch with
        // their true lengths; the kernel writes at most those lengths.
        let got = unsafe {
            libc::recvmmsg(
                fd,
                self.rx_hdrs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if got < 0 {
            // The kernel may have written into headers before failing.
            self.rx_dirty = n;
            return Err(io::Error::last_os_error());
        }
        let got = (got as usize).min(n);
        self.rx_dirty = got;
        for i in 0..got {
            let h = &self.rx_hdrs[i];
            self.addr_len[i] = h.msg_hdr.msg_namelen;
            self.rx_len[i] = (h.msg_len as usize).min(RX_SIZE);
            self.dst[i] = if self.rx_ctrl.is_some() {
                destination(&h.msg_hdr)
            } else {
                None
            };
        }
        Ok(got)
    }

    /// The sender of slot `i`.
    pub(crate) fn peer(&self, i: usize) -> Option<SocketAddr> {
        storage_to_addr(&self.addrs[i], self.addr_len[i])
    }

    /// The address slot `i`'s reply is sent from, where the socket alone
    /// does not decide it (see [`Batch::new`]).
    pub(crate) fn source(&self, i: usize) -> Option<IpAddr> {
        self.dst[i]
    }

    /// Sends the replies of the slots in `tx_ready` to their senders.
    /// Datagrams the kernel refuses are skipped (as a lost UDP reply).
    /// On a non-blocking socket whose send buffer is full this returns
    /// `WouldBlock` and remembers how far it got: call it again once the
    /// socket is writable. Otherwise `tx_ready` is empty afterwards.
    pub(crate) fn send(&mut self, fd: RawFd) -> io::Result<()> {
        let m = self.tx_ready.len();
        for (k, &i) in self.tx_ready.iter().enumerate() {
            self.iov[k] = libc::iovec {
                iov_base: self.tx[i].as_mut_ptr().cast(),
                iov_len: self.tx[i].len(),
            };
            let h = &mut self.hdrs[k].msg_hdr;
            h.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = self.addr_len[i];
            h.msg_iov = &mut self.iov[k];
            h.msg_iovlen = 1;
            match self.dst[i] {
                Some(src) => {
                    h.msg_control = self.tx_ctrl[k].0.as_mut_ptr().cast();
                    h.msg_controllen = self.tx_ctrl[k].set_source(src) as _;
                }
                None => {
                    h.msg_control = std::ptr::null_mut();
                    h.msg_controllen = 0;
                }
            }
            h.msg_flags = 0;
        }
        while self.tx_done < m {
            let done = self.tx_done;
            // SAFETY: headers [done, m) point at live reply buffers and
            // addresses of this batch.
            let sent = unsafe {
                libc::sendmmsg(
                    fd,
                    self.hdrs[done..].as_mut_ptr(),
                    (m - done) as libc::c_uint,
                    0,
                )
            };
            if sent < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::Interrupted => continue,
                    io::ErrorKind::WouldBlock => return Err(e),
                    // Skip the datagram that failed and go on with the rest.
                    _ => self.tx_done += 1,
                }
            } else {
                self.tx_done += sent as usize;
            }
        }
        self.tx_ready.clear();
        self.tx_done = 0;
        Ok(())
    }

    /// Forgets the replies not sent yet.
    pub(crate) fn drop_pending(&mut self) {
        self.tx_ready.clear();
        self.tx_done = 0;
    }
}

/// Sends one datagram without blocking (for replies from the
/// asynchronous path, which share the worker's socket), from `from` where
/// the socket alone does not decide the source ([`Batch::source`]).
pub(crate) fn send_to(
    fd: RawFd,
    buf: &[u8],
    to: SocketAddr,
    from: Option<IpAddr>,
) -> io::Result<()> {
    let (mut storage, len) = addr_to_storage(to);
    let mut iov = libc::iovec {
        iov_base: buf.as_ptr().cast_mut().cast(),
        iov_len: buf.len(),
    };
    let mut ctrl = Ctrl([0; CTRL_LEN]);
    // SAFETY: all-zero bytes are a valid msghdr.
    let mut h: libc::msghdr = unsafe { zeroed() };
    h.msg_name = (&mut storage as *mut libc::sockaddr_storage).cast();
    h.msg_namelen = len;
    h.msg_iov = &mut iov;
    h.msg_iovlen = 1;
    if let Some(src) = from {
        h.msg_controllen = ctrl.set_source(src) as _;
        h.msg_control = ctrl.0.as_mut_ptr().cast();
    }
    // SAFETY: the header points at `iov` (over `buf`, which the kernel
    // only reads), `storage` and `ctrl`, all live for the call.
    let r = unsafe { libc::sendmsg(fd, &h, libc::MSG_DONTWAIT) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Asks the kernel to report, with each datagram `fd` receives, the
/// address it was sent to (`IP_PKTINFO`, `IPV6_RECVPKTINFO`). A socket
/// bound to the wildcard address needs it to answer from the address a
/// query was sent to, as miekg/dns does: without it the kernel picks the
/// reply's source by the route back, which on a host with several
/// addresses is not always the one asked, and the client (or conntrack,
/// undoing a Service's DNAT) drops the reply.
pub(crate) fn report_destination(fd: RawFd, v6: bool) -> io::Result<()> {
    let (level, name) = if v6 {
        (libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO)
    } else {
        (libc::IPPROTO_IP, libc::IP_PKTINFO)
    };
    let on: libc::c_int = 1;
    // SAFETY: the option value is a live c_int of the length given.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&on as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

impl Ctrl {
    /// Writes a packet-info message that sends from `src` (the interface
    /// left to the route, as miekg/dns leaves it) and returns its length.
    fn set_source(&mut self, src: IpAddr) -> usize {
        let hdr: *mut libc::cmsghdr = self.0.as_mut_ptr().cast();
        // SAFETY: the buffer is CTRL_LEN bytes, aligned for a cmsghdr, and
        // CTRL_LEN is CMSG_SPACE of the larger payload: the header and
        // either payload fit. Payloads are written unaligned.
        unsafe {
            match src {
                IpAddr::V4(ip) => {
                    let info = libc::in_pktinfo {
                        ipi_ifindex: 0,
                        ipi_spec_dst: libc::in_addr {
                            s_addr: u32::from(ip).to_be(),
                        },
                        ipi_addr: libc::in_addr { s_addr: 0 },
                    };
                    (*hdr).cmsg_level = libc::IPPROTO_IP;
                    (*hdr).cmsg_type = libc::IP_PKTINFO;
                    (*hdr).cmsg_len = libc::CMSG_LEN(size_of::<libc::in_pktinfo>() as u32) as _;
                    std::ptr::write_unaligned(libc::CMSG_DATA(hdr).cast(), info);
                    libc::CMSG_SPACE(size_of::<libc::in_pktinfo>() as u32) as usize
                }
                IpAddr::V6(ip) => {
                    let info = libc::in6_pktinfo {
                        ipi6_addr: libc::in6_addr {
                            s6_addr: ip.octets(),
                        },
                        ipi6_ifindex: 0,
                    };
                    (*hdr).cmsg_level = libc::IPPROTO_IPV6;
                    (*hdr).cmsg_type = libc::IPV6_PKTINFO;
                    (*hdr).cmsg_len = libc::CMSG_LEN(size_of::<libc::in6_pktinfo>() as u32) as _;
                    std::ptr::write_unaligned(libc::CMSG_DATA(hdr).cast(), info);
                    CTRL_LEN
                }
            }
        }
    }
}

/// The destination address in a received datagram's packet-info message,
/// if it is one a reply can be sent from (not a multicast or broadcast
/// address: such a reply leaves from the address the route picks, as
/// before).
fn destination(h: &libc::msghdr) -> Option<IpAddr> {
    // SAFETY: the header's control pointer and length are the kernel's
    // report over this batch's control buffer; the CMSG_* walk stays
    // inside them, and payloads are read unaligned.
    let ip = unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        let mut found = None;
        while !c.is_null() {
            let data = libc::CMSG_DATA(c);
            match ((*c).cmsg_level, (*c).cmsg_type) {
                (libc::IPPROTO_IP, libc::IP_PKTINFO) => {
                    let info: libc::in_pktinfo = std::ptr::read_unaligned(data.cast());
                    found = Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                        info.ipi_addr.s_addr,
                    ))));
                    break;
                }
                (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => {
                    let info: libc::in6_pktinfo = std::ptr::read_unaligned(data.cast());
                    found = Some(IpAddr::V6(Ipv6Addr::from(info.ipi6_addr.s6_addr)));
                    break;
                }
                _ => c = libc::CMSG_NXTHDR(h, c),
            }
        }
        found
    }?;
    let usable = match ip {
        IpAddr::V4(v4) => !v4.is_multicast() && !v4.is_broadcast() && !v4.is_unspecified(),
        IpAddr::V6(v6) => !v6.is_multicast() && !v6.is_unspecified(),
    };
    usable.then_some(ip)
}

fn storage_to_addr(s: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    match i32::from(s.ss_family) {
        libc::AF_INET if len as usize >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let a: &libc::sockaddr_in = unsafe { &*(s as *const _ as *const libc::sockaddr_in) };
            let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 if len as usize >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let a: &libc::sockaddr_in6 = unsafe { &*(s as *const _ as *const libc::sockaddr_in6) };
            let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
            let port = u16::from_be(a.sin6_port);
            Some(match ip.to_ipv4_mapped() {
                Some(v4) => SocketAddr::new(IpAddr::V4(v4), port),
                None => SocketAddr::V6(SocketAddrV6::new(
                    ip,
                    port,
                    a.sin6_flowinfo,
                    a.sin6_scope_id,
                )),
            })
        }
        _ => None,
    }
}

fn addr_to_storage(a: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    let mut storage = MaybeUninit::<libc::sockaddr_storage>::zeroed();
    let len = match a {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in.
            let sin = unsafe { &mut *(storage.as_mut_ptr() as *mut libc::sockaddr_in) };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = v4.port().to_be();
            sin.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
            size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in6.
            let sin6 = unsafe { &mut *(storage.as_mut_ptr() as *mut libc::sockaddr_in6) };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = v6.port().to_be();
            sin6.sin6_addr.s6_addr = v6.ip().octets();
            sin6.sin6_flowinfo = v6.flowinfo();
            sin6.sin6_scope_id = v6.scope_id();
            size_of::<libc::sockaddr_in6>()
        }
    };
    // SAFETY: zero-initialised, then the relevant fields were written.
    (unsafe { storage.assume_init() }, len as libc::socklen_t)
}

/// Registers a socket with the current runtime's reactor for readable
/// readiness only. Must run inside a runtime context.
///
/// Only readable: with edge-triggered epoll, a socket registered for
/// writable readiness raises an EPOLLOUT event after every send (the
/// send buffer's space changes), which costs the worker an extra
/// `epoll_wait` wake-up per batch for nothing. A full send buffer is
/// rare for UDP and is waited out with short sleeps instead.
pub(crate) fn register(
    s: socket2::Socket,
) -> io::Result<tokio::io::unix::AsyncFd<socket2::Socket>> {
    // SAFETY: the descriptor belongs to `s`, which the `AsyncFd` owns: it
    // stays open for as long as it is registered and is deregistered (on
    // drop) before it closes.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(s, tokio::io::Interest::READABLE) }
        .map_err(io::Error::from)
}

/// The process's soft limit of open files (`RLIMIT_NOFILE`); `None` when
/// unknown or unlimited.
pub(crate) fn open_file_limit() -> Option<u64> {
    // SAFETY: getrlimit writes only the local struct it is given.
    let mut r: libc::rlimit = unsafe { zeroed() };
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0
        || r.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    Some(r.rlim_cur)
}
