//! glog's line format on stderr (`I1201 12:00:00.000000    1234 run.rs:0] message`), which
//! is what cluster-proportional-autoscaler prints with `--logtostderr`; `--v` gates the
//! verbose lines.

use std::io::Write as _;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static VERBOSITY: AtomicI64 = AtomicI64::new(0);

/// Sets glog's `--v`.
pub fn set_verbosity(v: i64) {
    VERBOSITY.store(v, Ordering::Relaxed);
}

/// Whether `V(level)` lines are printed.
pub fn enabled(level: i64) -> bool {
    VERBOSITY.load(Ordering::Relaxed) >= level
}

/// The glog prefix for severity letter `sev` now.
fn prefix(sev: char, file: &str) -> String {
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    let stamp = jiff::Timestamp::from_microsecond(micros)
        .map(|t| t.strftime("%m%d %H:%M:%S%.6f").to_string())
        .unwrap_or_default();
    let file = if file.starts_with("clusterdns_") {
        "main"
    } else {
        file
    };
    format!("{sev}{stamp} {:>7} {file}.rs:0] ", std::process::id())
}

/// Writes one line with severity `sev` (`I`, `W`, `E`, `F`).
pub fn line(sev: char, file: &str, msg: &str) {
    let mut out = std::io::stderr().lock();
    let _ = writeln!(out, "{}{msg}", prefix(sev, file));
}

/// `glog.V(level).Infof`.
macro_rules! info {
    ($level:expr, $($arg:tt)*) => {
        if $crate::log::enabled($level) {
            $crate::log::line('I', module_path!().rsplit("::").next().unwrap_or("lib"), &format!($($arg)*));
        }
    };
}

/// `glog.Errorf`.
macro_rules! error {
    ($($arg:tt)*) => {
        $crate::log::line('E', module_path!().rsplit("::").next().unwrap_or("lib"), &format!($($arg)*))
    };
}

pub(crate) use {error, info};
