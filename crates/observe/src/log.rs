//! Process log lines in CoreDNS's format: `[LEVEL] plugin/NAME: message`.
//!
//! Lines go to standard output, as CoreDNS writes them (standard error
//! after [`to_stderr`], for a job whose stdout is its result), but never from the
//! thread that produced them: a query worker copies its line into a
//! pooled buffer and hands it to a bounded lock-free queue
//! ([`QUEUE_LINES`] lines); one writer thread drains the queue and writes
//! to stdout, several lines per `write`, so lines never interleave. When
//! stdout does not keep up (a full pipe: a stalled log shipper, a paused
//! container runtime) the queue fills and further lines are dropped and
//! counted in `coredns_log_lines_dropped_total`; once a write goes through
//! again, one line says how many were dropped. Answers never wait for
//! stdout.
//!
//! In the steady state nothing is allocated per line: buffers go back to
//! a free pool after the writer wrote them. `[FATAL]` lines (the process
//! exits next) wait for the queue to drain and are written directly.

use std::io::Write;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, TryRecvError};

/// Lines the queue holds before further lines are dropped.
pub const QUEUE_LINES: usize = 8192;

/// A pooled buffer larger than this after use is freed rather than kept
/// (a rare huge line must not pin its memory).
const KEEP_CAPACITY: usize = 1024;

/// At most this many bytes go to stdout in one `write`.
const WRITE_BATCH: usize = 64 * 1024;

/// While lines flow, the writer looks for more every [`POLL_SLEEP`]; it
/// blocks after this many looks found none.
const POLL_ROUNDS: u32 = 100;
const POLL_SLEEP: Duration = Duration::from_millis(1);

/// How long [`flush`] waits at most for the queue to drain.
const FLUSH_WAIT: Duration = Duration::from_secs(2);

/// Severity of a log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// `[DEBUG]`, written only while [`debug_enabled`] (the *debug* plugin).
    Debug,
    /// `[INFO]`
    Info,
    /// `[WARNING]`
    Warning,
    /// `[ERROR]`
    Error,
    /// `[FATAL]`
    Fatal,
}

impl Level {
    fn tag(self) -> &'static str {
        match self {
            Level::Debug => "[DEBUG]",
            Level::Info => "[INFO]",
            Level::Warning => "[WARNING]",
            Level::Error => "[ERROR]",
            Level::Fatal => "[FATAL]",
        }
    }
}

/// The queue to the writer thread and the pool of empty buffers.
struct Queue {
    lines: Sender<Vec<u8>>,
    free_tx: Sender<Vec<u8>>,
    free_rx: Receiver<Vec<u8>>,
}

/// Lines dropped since the process started (`coredns_log_lines_dropped_total`).
static DROPPED: AtomicU64 = AtomicU64::new(0);
/// Lines queued and not written yet (for [`flush`]).
static PENDING: AtomicU64 = AtomicU64::new(0);

static QUEUE: OnceLock<Option<Queue>> = OnceLock::new();

/// The queue, starting the writer thread on first use; `None` when the
/// thread could not be started (lines are then written directly).
fn queue() -> Option<&'static Queue> {
    QUEUE
        .get_or_init(|| {
            let (lines, rx) = crossbeam_channel::bounded::<Vec<u8>>(QUEUE_LINES);
            let (free_tx, free_rx) = crossbeam_channel::bounded::<Vec<u8>>(QUEUE_LINES);
            let back = free_tx.clone();
            std::thread::Builder::new()
                .name("log-writer".into())
                .spawn(move || writer(&rx, &back))
                .ok()?;
            Some(Queue {
                lines,
                free_tx,
                free_rx,
            })
        })
        .as_ref()
}

/// The writer thread: takes lines off the queue, writes them in batches
/// (blocking on stdout is fine here), reports drops once a write succeeded.
fn writer(rx: &Receiver<Vec<u8>>, free: &Sender<Vec<u8>>) {
    let mut out: Vec<u8> = Vec::with_capacity(WRITE_BATCH);
    let mut reported = 0u64;
    loop {
        let Some(first) = next_line(rx) else {
            return;
        };
        out.clear();
        let mut n = 1u64;
        out.extend_from_slice(&first);
        recycle(free, first);
        while out.len() < WRITE_BATCH {
            match rx.try_recv() {
                Ok(line) => {
                    out.extend_from_slice(&line);
                    recycle(free, line);
                    n += 1;
                }
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        // Errors writing the log are ignored, as a closed stdout must not
        // stop DNS.
        let written = write_stdout(&out);
        PENDING.fetch_sub(n, Ordering::Release);
        let dropped = DROPPED.load(Ordering::Relaxed);
        if written && dropped > reported {
            let line = format!(
                "[WARNING] {} log lines dropped: standard output was not keeping up\n",
                dropped - reported
            );
            reported = dropped;
            write_stdout(line.as_bytes());
        }
    }
}

/// The next line: polled with short sleeps for a while after the last
/// one, so that under a steady flow of lines no producer has to wake a
/// blocked writer (a futex call per line); after [`POLL_ROUNDS`] empty
/// polls the writer blocks until a line comes (`None`: every sender gone).
fn next_line(rx: &Receiver<Vec<u8>>) -> Option<Vec<u8>> {
    for _ in 0..POLL_ROUNDS {
        match rx.try_recv() {
            Ok(line) => return Some(line),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) => std::thread::sleep(POLL_SLEEP),
        }
    }
    rx.recv().ok()
}

fn recycle(free: &Sender<Vec<u8>>, mut buf: Vec<u8>) {
    if buf.capacity() <= KEEP_CAPACITY {
        buf.clear();
        let _ = free.try_send(buf);
    }
}

/// Whether lines go to stderr instead of stdout (see [`to_stderr`]).
static STDERR: AtomicBool = AtomicBool::new(false);

/// Sends every later line to standard error: for jobs whose standard output
/// is their result (`clusterdns explain`), where a watch error logged in
/// the middle would corrupt what a reader or a script takes from stdout.
pub fn to_stderr() {
    STDERR.store(true, Ordering::Relaxed);
}

fn write_stdout(bytes: &[u8]) -> bool {
    if STDERR.load(Ordering::Relaxed) {
        let mut out = std::io::stderr().lock();
        return out.write_all(bytes).is_ok() && out.flush().is_ok();
    }
    let mut out = std::io::stdout().lock();
    out.write_all(bytes).is_ok() && out.flush().is_ok()
}

/// Queues one line for stdout, or drops and counts it when the queue is
/// full. `fill` appends the line's bytes to an empty buffer.
fn enqueue(fill: impl FnOnce(&mut Vec<u8>)) {
    let Some(q) = queue() else {
        let mut buf = Vec::new();
        fill(&mut buf);
        write_stdout(&buf);
        return;
    };
    if q.lines.is_full() {
        DROPPED.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let mut buf = q.free_rx.try_recv().unwrap_or_default();
    fill(&mut buf);
    PENDING.fetch_add(1, Ordering::Relaxed);
    if let Err(e) = q.lines.try_send(buf) {
        PENDING.fetch_sub(1, Ordering::Relaxed);
        DROPPED.fetch_add(1, Ordering::Relaxed);
        let _ = q.free_tx.try_send(e.into_inner());
    }
}

/// Whether `[DEBUG]` lines are written: CoreDNS's `log.D`, process-wide,
/// set while the serving configuration has a *debug* block.
static DEBUG: AtomicBool = AtomicBool::new(false);

/// Turns `[DEBUG]` lines on or off.
pub fn set_debug(on: bool) {
    DEBUG.store(on, Ordering::Relaxed);
}

/// Whether `[DEBUG]` lines are written.
pub fn debug_enabled() -> bool {
    DEBUG.load(Ordering::Relaxed)
}

/// Writes one line `[LEVEL] plugin/PLUGIN: msg` (or `[LEVEL] msg` when
/// `plugin` is empty).
pub fn write(level: Level, plugin: &str, msg: std::fmt::Arguments<'_>) {
    if level == Level::Debug && !debug_enabled() {
        return;
    }
    let fill = |buf: &mut Vec<u8>| {
        let _ = if plugin.is_empty() {
            writeln!(buf, "{} {}", level.tag(), msg)
        } else {
            writeln!(buf, "{} plugin/{}: {}", level.tag(), plugin, msg)
        };
    };
    if level == Level::Fatal {
        // The process exits next: the line must be out before it does.
        flush();
        let mut buf = Vec::new();
        fill(&mut buf);
        write_stdout(&buf);
        return;
    }
    enqueue(fill);
}

/// Writes bytes to standard output as one unit (for query log lines that
/// are formatted elsewhere), through the queue.
pub fn raw(line: &[u8]) {
    enqueue(|buf| buf.extend_from_slice(line));
}

/// Waits (at most a couple of seconds, stdout may be stalled) until every
/// queued line was written: call before the process exits.
pub fn flush() {
    let start = std::time::Instant::now();
    while PENDING.load(Ordering::Acquire) > 0 && start.elapsed() < FLUSH_WAIT {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Log lines dropped so far because the queue was full.
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// `coredns_log_lines_dropped_total`, for the metrics registry.
#[derive(Debug, Default)]
pub struct DroppedLines;

impl crate::metrics::Collector for DroppedLines {
    fn name(&self) -> &str {
        "coredns_log_lines_dropped_total"
    }

    fn render(&self, out: &mut String) {
        use std::fmt::Write as _;
        let _ = write!(
            out,
            "# HELP coredns_log_lines_dropped_total Log lines dropped because standard output was not keeping up.\n\
             # TYPE coredns_log_lines_dropped_total counter\n\
             coredns_log_lines_dropped_total {}\n",
            dropped()
        );
    }

    fn as_any(self: std::sync::Arc<Self>) -> std::sync::Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}

/// `[DEBUG] plugin/NAME: ...`, only with the *debug* plugin (the
/// arguments are not formatted otherwise).
#[macro_export]
macro_rules! debug {
    ($plugin:expr, $($arg:tt)*) => {
        if $crate::log::debug_enabled() {
            $crate::log::write($crate::log::Level::Debug, $plugin, format_args!($($arg)*))
        }
    };
}

/// `[INFO] plugin/NAME: ...`
#[macro_export]
macro_rules! info {
    ($plugin:expr, $($arg:tt)*) => {
        $crate::log::write($crate::log::Level::Info, $plugin, format_args!($($arg)*))
    };
}

/// `[WARNING] plugin/NAME: ...`
#[macro_export]
macro_rules! warning {
    ($plugin:expr, $($arg:tt)*) => {
        $crate::log::write($crate::log::Level::Warning, $plugin, format_args!($($arg)*))
    };
}

/// `[ERROR] plugin/NAME: ...`
#[macro_export]
macro_rules! error {
    ($plugin:expr, $($arg:tt)*) => {
        $crate::log::write($crate::log::Level::Error, $plugin, format_args!($($arg)*))
    };
}
