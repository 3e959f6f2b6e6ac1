//! Child processes that cannot outlive the test, scratch directories and free
//! loopback ports.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// A scratch directory, removed on drop (kept when `CLUSTERDNS_KEEP_TEST_DIRS=1`).
#[derive(Debug)]
pub struct ScratchDir {
    path: PathBuf,
}

impl ScratchDir {
    /// Creates a fresh directory under the system temp dir.
    pub fn new(prefix: &str) -> io::Result<ScratchDir> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir()
            .join("clusterdns-test-support")
            .join(format!("{prefix}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path)?;
        Ok(ScratchDir { path })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if std::env::var_os("CLUSTERDNS_KEEP_TEST_DIRS").is_none_or(|v| v != "1") {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

/// Returns a port on 127.0.0.1 that is free for both UDP and TCP right now and
/// that this process has not handed out before.
///
/// The port comes from below the kernel's ephemeral range (32768 and up
/// here). A port is free only until the server under test binds it; a port
/// from `bind(0)` is an ephemeral one, which in the meantime can become the
/// source port of any outgoing socket (a forward plugin's upstream sockets,
/// an API server's connections to etcd), and the server then fails to
/// start. Ports below that range are never chosen for those. Each process
/// starts its walk at a place of its own, so parallel test binaries rarely
/// probe the same ports.
pub fn free_port() -> io::Result<u16> {
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static HANDED_OUT: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    let handed = HANDED_OUT.get_or_init(|| Mutex::new(HashSet::new()));
    let mut set = handed.lock().unwrap_or_else(|e| e.into_inner());
    let start = std::process::id().wrapping_mul(7_919) % SPAN;
    // 7 is prime to SPAN, so the walk visits every port of the span once.
    for i in (0..SPAN).map(|i| (start + i * 7) % SPAN) {
        let port = (LOW + i) as u16;
        if set.contains(&port) {
            continue;
        }
        let free = UdpSocket::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
            && TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok();
        if free {
            set.insert(port);
            return Ok(port);
        }
    }
    Err(io::Error::other("no free loopback port found"))
}

/// Shell wrapper that ties the program's life to our end of its stdin pipe:
/// when the test process drops the pipe (drop, panic, or death by any signal,
/// SIGKILL included) the watcher sends SIGTERM to the program.
const WATCHDOG: &str = r#"exec 3<&0
"$@" </dev/null &
c=$!
( read -r _ <&3; kill "$c" 2>/dev/null ) &
w=$!
wait "$c"
rc=$?
kill "$w" 2>/dev/null
exit "$rc""#;

/// A server process started for a test. Stopped on drop, also while unwinding
/// from a panic, and (through a watchdog) when the test process dies.
#[derive(Debug)]
pub struct ServerProcess {
    name: String,
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    log: PathBuf,
}

impl ServerProcess {
    /// Starts `program args…` with stdout and stderr appended to `log`.
    pub fn spawn(
        name: &str,
        program: &Path,
        args: &[String],
        log: &Path,
    ) -> io::Result<ServerProcess> {
        let out = File::create(log)?;
        let err = out.try_clone()?;
        let mut child = Command::new("/bin/sh")
            .arg("-c")
            .arg(WATCHDOG)
            .arg("sh")
            .arg(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| {
                io::Error::new(e.kind(), format!("starting {}: {e}", program.display()))
            })?;
        let stdin = child.stdin.take();
        Ok(ServerProcess {
            name: name.to_string(),
            child: Some(child),
            stdin,
            log: log.to_path_buf(),
        })
    }

    /// The name given at spawn.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The log file (stdout and stderr).
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The last `max` bytes of the log.
    pub fn log_tail(&self, max: u64) -> String {
        let Ok(mut f) = File::open(&self.log) else {
            return String::new();
        };
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = f.seek(SeekFrom::Start(len.saturating_sub(max)));
        let mut buf = Vec::new();
        let _ = f.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    }

    /// The program's own pid (the watchdog shell's child running it), for
    /// sending it signals or reading `/proc/PID`; `None` once it has exited.
    pub fn program_pid(&self) -> Option<u32> {
        let shell = self.child.as_ref()?.id();
        let children =
            std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).ok()?;
        // The shell's children are the program and the watcher subshell; the
        // watcher is another `sh`, the program is not.
        let shell_exe = std::fs::read_link(format!("/proc/{shell}/exe")).ok();
        children
            .split_whitespace()
            .filter_map(|p| p.parse::<u32>().ok())
            .find(|p| std::fs::read_link(format!("/proc/{p}/exe")).ok() != shell_exe)
    }

    /// `Some(status)` once the process has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Waits until something accepts TCP connections on `addr` (the server
    /// has bound its sockets), failing early if the process exits.
    pub fn wait_listening(&mut self, addr: SocketAddr, timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exited() {
                return Err(io::Error::other(format!(
                    "{} exited ({status}) before listening on {addr}; log {}:\n{}",
                    self.name,
                    self.log.display(),
                    self.log_tail(4000)
                )));
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{} not listening on {addr} after {timeout:?}; log {}:\n{}",
                        self.name,
                        self.log.display(),
                        self.log_tail(4000)
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the process (SIGTERM via the watchdog, SIGKILL after 5 s).
    pub fn stop(&mut self) {
        drop(self.stdin.take());
        let Some(mut child) = self.child.take() else {
            return;
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.stop();
    }
}
