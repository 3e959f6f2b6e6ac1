//! Process log lines in CoreDNS's format: `[LEVEL] plugin/NAME: message`.
//!
//! Lines go to standard output, as CoreDNS writes them, one `write` per
//! line so lines from several threads never interleave.

use std::io::Write;

/// Severity of a log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
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
            Level::Info => "[INFO]",
            Level::Warning => "[WARNING]",
            Level::Error => "[ERROR]",
            Level::Fatal => "[FATAL]",
        }
    }
}

/// Writes one line `[LEVEL] plugin/PLUGIN: msg` (or `[LEVEL] msg` when
/// `plugin` is empty).
pub fn write(level: Level, plugin: &str, msg: std::fmt::Arguments<'_>) {
    let line = if plugin.is_empty() {
        format!("{} {}\n", level.tag(), msg)
    } else {
        format!("{} plugin/{}: {}\n", level.tag(), plugin, msg)
    };
    raw(line.as_bytes());
}

/// Writes bytes to standard output in one call (for query log lines that
/// are formatted elsewhere). Errors writing the log are ignored, as a
/// closed stdout must not stop DNS.
pub fn raw(line: &[u8]) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(line);
    let _ = out.flush();
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
