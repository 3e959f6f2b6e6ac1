//! The zero-loss upgrade (beyond upstream): a new instance takes the
//! running one's listening sockets over a Unix socket (SCM_RIGHTS) in a
//! directory both pods mount (`-handover-socket`, on a hostPath), so
//! during a DaemonSet rolling update with `maxSurge: 1` both processes
//! serve the very same sockets. When the old one is told to stop, it
//! stops reading and answers what it had in flight; what is queued in the
//! kernel is read by the new one. The addresses are never unbound, so
//! the interception (either mode) never changes, and the old instance
//! leaves the rules, the table and the interface to its successor.
//!
//! The exchange, on a `SOCK_SEQPACKET` socket (each message arrives
//! whole, with its descriptors):
//!
//! ```text
//! new → old   take
//! old → new   udp 169.254.20.10:53      + 1 descriptor   (one per socket)
//! old → new   tcp 169.254.20.10:53      + 1 descriptor
//! old → new   end 5
//! new → old   serving                   (once every listener serves)
//! ```
//!
//! The connection then stays open for the new instance's life: the old
//! one knows its successor still serves as long as it is (a successor
//! that died closes it, and the old one then tears down as usual).
//!
//! Each instance listens on the path once it serves: the new one binds
//! beside it and renames over the old one's, so the path always leads to
//! a live instance, and the old one removes the path on exit only while
//! it is still its own.
//!
//! Whoever is handed the sockets owns the node's DNS, so only a process of
//! the agent's own user may take part, on either side: the socket file is
//! created mode 0600 (whatever the umask) in a directory created mode 0700,
//! and each end checks the other's uid (SO_PEERCRED) as well, since the
//! directory is a hostPath whose mode an operator may have loosened. A
//! stranger is refused before it is read from, so it cannot hold the
//! running instance's hand-over up either. The binary is not compared: an
//! upgrade is precisely another binary.

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::socket::{
    self, AddressFamily, Backlog, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag,
    SockType, UnixAddr, sockopt,
};
use nix::sys::time::TimeVal;

/// The default `-handover-socket`: a directory the DaemonSet mounts from
/// the host, so successive pods on a node meet there.
pub const DEFAULT_PATH: &str = "/run/clusterdns/node-cache.sock";

/// The longest message of the exchange.
const MAX_MSG: usize = 512;

/// One socket handed over: what it is (`udp ADDR`, `tcp ADDR`, …, the
/// caller's words) and the descriptor.
#[derive(Debug)]
pub struct Item {
    /// What the socket is, in the caller's words.
    pub tag: String,
    /// The socket.
    pub fd: OwnedFd,
}

fn err(e: nix::Error) -> io::Error {
    io::Error::from(e)
}

fn seqpacket() -> io::Result<OwnedFd> {
    socket::socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(err)
}

/// One end of a hand-over connection.
#[derive(Debug)]
pub struct Conn {
    fd: OwnedFd,
}

impl Conn {
    /// The process at the other end (SO_PEERCRED).
    pub fn peer_pid(&self) -> Option<i32> {
        socket::getsockopt(&self.fd, sockopt::PeerCredentials)
            .ok()
            .map(|c| c.pid())
    }

    /// The other end's pid and uid (SO_PEERCRED), when the kernel says.
    fn peer(&self) -> Option<(i32, u32)> {
        socket::getsockopt(&self.fd, sockopt::PeerCredentials)
            .ok()
            .map(|c| (c.pid(), c.uid()))
    }

    /// Sends `text`, with `fd` attached when given.
    pub fn send(&self, text: &str, fd: Option<RawFd>) -> io::Result<()> {
        let iov = [IoSlice::new(text.as_bytes())];
        let fds: Vec<RawFd> = fd.into_iter().collect();
        let cmsgs: Vec<ControlMessage<'_>> = if fds.is_empty() {
            Vec::new()
        } else {
            vec![ControlMessage::ScmRights(&fds)]
        };
        socket::sendmsg::<()>(
            self.fd.as_raw_fd(),
            &iov,
            &cmsgs,
            MsgFlags::MSG_NOSIGNAL,
            None,
        )
        .map_err(err)?;
        Ok(())
    }

    /// Receives one message and the descriptors attached to it, waiting
    /// at most `within`. End of file is `UnexpectedEof`.
    pub fn recv(&self, within: Duration) -> io::Result<(String, Vec<OwnedFd>)> {
        let tv = TimeVal::new(
            within.as_secs().try_into().unwrap_or(i64::MAX),
            within.subsec_micros().into(),
        );
        socket::setsockopt(&self.fd, sockopt::ReceiveTimeout, &tv).map_err(err)?;
        let mut buf = [0u8; MAX_MSG];
        let mut cmsg = nix::cmsg_space!([RawFd; 4]);
        let mut iov = [IoSliceMut::new(&mut buf)];
        let msg = socket::recvmsg::<()>(
            self.fd.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )
        .map_err(err)?;
        let mut fds = Vec::new();
        for c in msg.cmsgs().map_err(err)? {
            if let ControlMessageOwned::ScmRights(raw) = c {
                for r in raw {
                    // SAFETY: the kernel just installed this descriptor
                    // in our table for us; nothing else owns it.
                    #[allow(unsafe_code)]
                    fds.push(unsafe { OwnedFd::from_raw_fd(r) });
                }
            }
        }
        let n = msg.bytes;
        if n == 0 && fds.is_empty() {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let text = String::from_utf8_lossy(&buf[..n]).into_owned();
        Ok((text, fds))
    }

    /// Whether the other end still has the connection open (a message
    /// waiting counts as open).
    pub fn alive(&self) -> bool {
        let mut b = [0u8; 1];
        match socket::recv(
            self.fd.as_raw_fd(),
            &mut b,
            MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_PEEK,
        ) {
            Ok(n) => n > 0,
            Err(nix::Error::EAGAIN) => true,
            Err(_) => false,
        }
    }
}

/// Why a hand-over failed.
#[derive(Debug, thiserror::Error)]
pub enum HandoverError {
    /// A socket call failed.
    #[error("hand-over on {path}: {source}")]
    Io {
        /// The socket's path.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The other side said something unexpected.
    #[error("hand-over on {path}: unexpected message {got:?}")]
    Protocol {
        /// The socket's path.
        path: PathBuf,
        /// What came.
        got: String,
    },
    /// The listening process is not of our user: nothing is taken from it.
    #[error(
        "hand-over on {path}: the listening process {pid} runs as uid {uid}, not ours ({ours}); not taking its sockets"
    )]
    Stranger {
        /// The socket's path.
        path: PathBuf,
        /// The listener's pid.
        pid: i32,
        /// The listener's uid.
        uid: u32,
        /// Ours.
        ours: u32,
    },
}

/// The effective uid of this process: the only one a hand-over trusts.
fn own_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// What [`Listener::accept`] found at the other end.
#[derive(Debug)]
pub enum Accepted {
    /// A process of our own user: a successor.
    Peer(Conn),
    /// A process of another user (or one the kernel would not name),
    /// already disconnected.
    Stranger {
        /// Its pid (0 when unknown).
        pid: i32,
        /// Its uid (`None` when unknown).
        uid: Option<u32>,
    },
}

/// The successor's side: connects to `path` and takes the running
/// instance's sockets. `Ok(None)` when nobody listens there (no file, or
/// a file a dead instance left): start from scratch.
pub fn take(path: &Path, within: Duration) -> Result<Option<(Conn, Vec<Item>)>, HandoverError> {
    let io = |source: io::Error| HandoverError::Io {
        path: path.to_path_buf(),
        source,
    };
    let fd = seqpacket().map_err(io)?;
    let addr = UnixAddr::new(path).map_err(|e| io(err(e)))?;
    match socket::connect(fd.as_raw_fd(), &addr) {
        Ok(()) => {}
        Err(nix::Error::ENOENT | nix::Error::ECONNREFUSED) => return Ok(None),
        Err(e) => return Err(io(err(e))),
    }
    let conn = Conn { fd };
    // The kernel records the listener's credentials at listen(): a socket
    // file some other user put there is not a predecessor.
    let ours = own_uid();
    match conn.peer() {
        Some((_, uid)) if uid == ours => {}
        other => {
            let (pid, uid) = other.unwrap_or((0, u32::MAX));
            return Err(HandoverError::Stranger {
                path: path.to_path_buf(),
                pid,
                uid,
                ours,
            });
        }
    }
    conn.send("take", None).map_err(io)?;
    let mut items = Vec::new();
    loop {
        let (text, mut fds) = conn.recv(within).map_err(io)?;
        if let Some(n) = text.strip_prefix("end ") {
            if n.parse::<usize>().ok() != Some(items.len()) {
                return Err(HandoverError::Protocol {
                    path: path.to_path_buf(),
                    got: text,
                });
            }
            return Ok(Some((conn, items)));
        }
        match (fds.pop(), fds.is_empty()) {
            (Some(fd), true) => items.push(Item { tag: text, fd }),
            _ => {
                return Err(HandoverError::Protocol {
                    path: path.to_path_buf(),
                    got: text,
                });
            }
        }
    }
}

/// The running instance's side: gives `items` on `conn` (after its
/// `take`) and waits for the successor to say it serves.
pub fn give(
    conn: &Conn,
    items: &[Item],
    take_within: Duration,
    serve_within: Duration,
) -> io::Result<()> {
    let (first, _) = conn.recv(take_within)?;
    if first != "take" {
        return Err(io::Error::other(format!("unexpected message {first:?}")));
    }
    for i in items {
        conn.send(&i.tag, Some(i.fd.as_raw_fd()))?;
    }
    conn.send(&format!("end {}", items.len()), None)?;
    let (said, _) = conn.recv(serve_within)?;
    if said != "serving" {
        return Err(io::Error::other(format!("unexpected message {said:?}")));
    }
    Ok(())
}

/// The successor's last word: it serves on the sockets.
pub fn serving(conn: &Conn) -> io::Result<()> {
    conn.send("serving", None)
}

/// A listening hand-over socket at a path.
#[derive(Debug)]
pub struct Listener {
    fd: OwnedFd,
    path: PathBuf,
    /// The socket file's device and inode, to tell ours from a
    /// successor's.
    id: (u64, u64),
}

fn file_id(path: &Path) -> io::Result<(u64, u64)> {
    let m = std::fs::symlink_metadata(path)?;
    Ok((m.dev(), m.ino()))
}

impl Listener {
    /// Listens at `path` (creating its directory, mode 0700, if missing),
    /// replacing whatever socket file is there in one rename; the socket
    /// file is mode 0600, so only our user (and root) may connect.
    pub fn bind(path: &Path) -> io::Result<Listener> {
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
        }
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(format!(".{}", std::process::id()));
        let tmp = PathBuf::from(tmp);
        let _ = std::fs::remove_file(&tmp);
        let fd = seqpacket()?;
        socket::bind(fd.as_raw_fd(), &UnixAddr::new(&tmp).map_err(err)?).map_err(err)?;
        // bind() created the file as the umask allows; narrow it before the
        // rename makes it reachable at `path`.
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
        let backlog = Backlog::new(8).map_err(err)?;
        socket::listen(&fd, backlog).map_err(err)?;
        let id = file_id(&tmp)?;
        std::fs::rename(&tmp, path)?;
        Ok(Listener {
            fd,
            path: path.to_path_buf(),
            id,
        })
    }

    /// Waits for the next process to connect: a successor of our own
    /// user, or a stranger, whose connection is closed unread.
    pub fn accept(&self) -> io::Result<Accepted> {
        let conn = loop {
            match socket::accept4(self.fd.as_fd().as_raw_fd(), SockFlag::SOCK_CLOEXEC) {
                // SAFETY: accept4 returned a new descriptor that we own.
                #[allow(unsafe_code)]
                Ok(raw) => {
                    break Conn {
                        fd: unsafe { OwnedFd::from_raw_fd(raw) },
                    };
                }
                Err(nix::Error::EINTR | nix::Error::ECONNABORTED) => continue,
                Err(e) => return Err(err(e)),
            }
        };
        Ok(match conn.peer() {
            Some((_, uid)) if uid == own_uid() => Accepted::Peer(conn),
            Some((pid, uid)) => Accepted::Stranger {
                pid,
                uid: Some(uid),
            },
            None => Accepted::Stranger { pid: 0, uid: None },
        })
    }

    /// Whether the path still names this listener (a successor's rename
    /// replaces it).
    pub fn owns_path(&self) -> bool {
        file_id(&self.path).is_ok_and(|id| id == self.id)
    }

    /// Removes the path if it is still ours.
    pub fn remove_if_ours(&self) {
        if self.owns_path() {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    /// The path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    #[test]
    fn sockets_travel_and_the_path_follows_the_newest() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("sub/ho.sock");
        assert!(
            take(&path, Duration::from_secs(1))
                .expect("no one")
                .is_none()
        );
        let old = Listener::bind(&path).expect("bind");
        let (conn, giver) = hand_over_one_udp(old, &path);
        let (old, old_side) = giver.join().expect("thread");
        assert!(old_side.alive());
        assert_eq!(old_side.peer_pid(), Some(std::process::id() as i32));
        // The successor listens: the old one no longer owns the path.
        let new = Listener::bind(&path).expect("rebind");
        assert!(!old.owns_path() && new.owns_path());
        old.remove_if_ours();
        assert!(path.exists());
        drop(conn);
        assert!(!old_side.alive());
        new.remove_if_ours();
        assert!(!path.exists());
    }

    /// `old` gives one UDP socket to a `take` at `path` (this process, on
    /// both sides), checked to arrive whole: the successor's connection and
    /// the giver's thread, which returns the listener and its side.
    fn hand_over_one_udp(
        old: Listener,
        path: &Path,
    ) -> (Conn, std::thread::JoinHandle<(Listener, Conn)>) {
        let udp = UdpSocket::bind("127.0.0.1:0").expect("udp");
        let at = udp.local_addr().expect("addr");
        let giver = std::thread::spawn(move || {
            let Accepted::Peer(conn) = old.accept().expect("accept") else {
                panic!("our own process refused as a stranger");
            };
            let items = vec![Item {
                tag: format!("udp {at}"),
                fd: OwnedFd::from(udp),
            }];
            give(
                &conn,
                &items,
                Duration::from_secs(5),
                Duration::from_secs(5),
            )
            .expect("give");
            (old, conn)
        });
        let (conn, items) = take(path, Duration::from_secs(5))
            .expect("take")
            .expect("someone");
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].tag, format!("udp {at}"));
        let got = UdpSocket::from(items.into_iter().next().expect("one").fd);
        assert_eq!(got.local_addr().expect("addr"), at);
        serving(&conn).expect("serving");
        (conn, giver)
    }

    /// A process of another user, for the stranger tests: `python3` run
    /// as `nobody` on `script`. `None` (the test is skipped) unless we are
    /// root, who alone may start one.
    fn as_nobody(script: &str, path: &Path) -> Option<std::process::Child> {
        use std::os::unix::process::CommandExt;
        if own_uid() != 0 {
            eprintln!("not root: cannot run a process of another user; skipped");
            return None;
        }
        Some(
            std::process::Command::new("python3")
                .arg("-c")
                .arg(script)
                .arg(path)
                .uid(65534)
                .gid(65534)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("python3"),
        )
    }

    /// What the stranger's script printed and its exit status.
    fn finish(child: std::process::Child) -> String {
        let out = child.wait_with_output().expect("wait");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    const CONNECT: &str = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print("connect", e.errno); sys.exit(0)
s.settimeout(10)
try:
    s.send(b"take")
    print("got", len(s.recv(512)))
except OSError:
    print("got 0")
"#;

    #[test]
    fn only_our_own_user_takes_the_sockets() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let path = dir.path().join("run/ho.sock");
        let listener = Listener::bind(&path).expect("bind");
        // Made narrow whatever the umask.
        let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().expect("dir")), 0o700);

        let Some(child) = as_nobody(CONNECT, &path) else {
            return;
        };
        // The directory keeps it out: connect(2) is refused (EACCES).
        assert_eq!(finish(child), format!("connect {}", libc::EACCES));

        // An operator's looser hostPath: the peer check still refuses it,
        // without reading what it sent, and closes its connection.
        for p in [path.parent().expect("dir"), path.as_path()] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        }
        let child = as_nobody(CONNECT, &path).expect("root");
        match listener.accept().expect("accept") {
            Accepted::Stranger { uid, pid } => {
                assert_eq!(uid, Some(65534));
                assert_eq!(pid, child.id() as i32);
            }
            Accepted::Peer(_) => panic!("a process of uid 65534 taken for a successor"),
        }
        // Its connection was closed: nothing came back (or its send broke).
        assert_eq!(finish(child), "got 0");

        // A successor of our own user is served as before.
        let (_conn, giver) = hand_over_one_udp(listener, &path);
        giver.join().expect("thread");
    }

    #[test]
    fn a_listener_of_another_user_is_not_a_predecessor() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777))
            .expect("chmod");
        let path = dir.path().join("ho.sock");
        let listen = r#"
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.bind(sys.argv[1]); os.chmod(sys.argv[1], 0o777); s.listen(1)
print("listening", flush=True)
c, _ = s.accept()
c.settimeout(5)
try:
    print("read", len(c.recv(512)))
except OSError:
    print("read nothing")
"#;
        let Some(mut child) = as_nobody(listen, &path) else {
            return;
        };
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.as_mut().expect("stdout")),
            &mut line,
        )
        .expect("read");
        assert_eq!(line.trim(), "listening");
        match take(&path, Duration::from_secs(5)) {
            Err(HandoverError::Stranger { uid, ours, .. }) => {
                assert_eq!((uid, ours), (65534, 0));
            }
            other => panic!("took from a stranger: {other:?}"),
        }
        // Nothing was said to it: the connection closed unread.
        assert_eq!(finish(child), "read 0");
    }
}
