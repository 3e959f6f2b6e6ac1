//! What every job's process does around the server: the runtime, the
//! signals and the pidfile.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;

use clusterdns_server::Controller;
use tokio::signal::unix::{self, SignalKind, signal};

/// The multi-threaded runtime the server's tasks run on.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    // As many runtime workers as CPUs we may run on (at most 4): on a
    // server pinned to one core, a second worker only adds context
    // switches to the forwarding path.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cpus.clamp(1, 4))
        .thread_name("clusterdns-rt")
        .enable_all()
        .build()
}

/// SIGTERM and SIGINT (stop, after the lameduck period) and SIGUSR1
/// (reload), as CoreDNS handles them. Installed once the server serves:
/// before, the default actions apply, as they do for CoreDNS.
pub struct Signals {
    term: unix::Signal,
    int: unix::Signal,
    usr1: unix::Signal,
}

impl Signals {
    /// Installs the handlers (needs the runtime's context).
    pub fn install() -> std::io::Result<Self> {
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            usr1: signal(SignalKind::user_defined1())?,
        })
    }

    /// Hands each signal to `on` (with `controller`) until `server` ends;
    /// its result.
    pub async fn drive<F: Future>(
        &mut self,
        controller: &Controller,
        mut server: Pin<&mut F>,
        on: fn(Signal, &Controller),
    ) -> F::Output {
        loop {
            let signal = tokio::select! {
                done = &mut server => return done,
                _ = self.term.recv() => Signal::Term,
                _ = self.int.recv() => Signal::Int,
                _ = self.usr1.recv() => Signal::Usr1,
            };
            on(signal, controller);
        }
    }
}

/// A signal the process answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM.
    Term,
    /// SIGINT.
    Int,
    /// SIGUSR1.
    Usr1,
}

/// The file holding the process ID (`-pidfile`), removed when dropped.
pub struct Pidfile(PathBuf);

impl Pidfile {
    /// Writes this process's ID to `path`.
    pub fn write(path: PathBuf) -> std::io::Result<Self> {
        std::fs::write(&path, format!("{}\n", std::process::id()))?;
        Ok(Self(path))
    }
}

impl Drop for Pidfile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
