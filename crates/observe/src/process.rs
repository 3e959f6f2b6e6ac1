//! The `process_*` families every Prometheus client library exports, as
//! Prometheus' Go client reads them on Linux (its process collector over
//! procfs), so the CoreDNS dashboards' memory, CPU and descriptor panels
//! show clusterdns too. Read from `/proc/self` at each scrape: nothing on
//! the query path. A file that cannot be read leaves its families out, as
//! the Go client does without error reporting.

use std::fmt::Write as _;
use std::sync::Arc;

use crate::metrics::{Collector, fmt_f64};

/// The name the families are registered under (the first of them).
pub const NAME: &str = "process_cpu_seconds_total";

/// Procfs' `userHZ`: the Go client divides `/proc` ticks by 100, not by
/// `sysconf(_SC_CLK_TCK)` (100 on every Linux it runs on).
const USER_HZ: f64 = 100.0;

/// The process's own figures, rendered at scrape time.
#[derive(Debug, Default)]
pub struct Process;

/// One sample: name, help, type, value.
type Sample = (&'static str, &'static str, &'static str, f64);

impl Process {
    fn samples() -> Vec<Sample> {
        let mut out = Vec::with_capacity(9);
        if let Some(s) = std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|t| Stat::parse(&t))
        {
            out.push((
                "process_cpu_seconds_total",
                "Total user and system CPU time spent in seconds.",
                "counter",
                (s.utime + s.stime) as f64 / USER_HZ,
            ));
            out.push((
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                "gauge",
                s.vsize as f64,
            ));
            out.push((
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                "gauge",
                (s.rss * page_size()) as f64,
            ));
            if let Some(boot) = boot_time() {
                out.push((
                    "process_start_time_seconds",
                    "Start time of the process since unix epoch in seconds.",
                    "gauge",
                    boot as f64 + s.starttime as f64 / USER_HZ,
                ));
            }
        }
        if let Some(n) = open_fds() {
            out.push((
                "process_open_fds",
                "Number of open file descriptors.",
                "gauge",
                n as f64,
            ));
        }
        if let Some((files, space)) = std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|t| limits(&t))
        {
            out.push((
                "process_max_fds",
                "Maximum number of open file descriptors.",
                "gauge",
                files as f64,
            ));
            out.push((
                "process_virtual_memory_max_bytes",
                "Maximum amount of virtual memory available in bytes.",
                "gauge",
                space as f64,
            ));
        }
        if let Some((rx, tx)) = std::fs::read_to_string("/proc/self/net/netstat")
            .ok()
            .and_then(|t| octets(&t))
        {
            out.push((
                "process_network_receive_bytes_total",
                "Number of bytes received by the process over the network.",
                "counter",
                rx,
            ));
            out.push((
                "process_network_transmit_bytes_total",
                "Number of bytes sent by the process over the network.",
                "counter",
                tx,
            ));
        }
        // The text format lists families by name, as the Go client's
        // gatherer sorts them.
        out.sort_by(|a, b| a.0.cmp(b.0));
        out
    }
}

impl Collector for Process {
    fn name(&self) -> &str {
        NAME
    }

    fn render(&self, out: &mut String) {
        for (name, help, kind, v) in Self::samples() {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            let _ = writeln!(out, "{name} {}", fmt_f64(v));
        }
    }

    fn as_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}

/// The fields of `/proc/self/stat` the families need (proc(5) numbers).
#[derive(Debug, PartialEq)]
struct Stat {
    utime: u64,
    stime: u64,
    starttime: u64,
    vsize: u64,
    rss: u64,
}

impl Stat {
    fn parse(text: &str) -> Option<Stat> {
        // The command name (field 2) may hold spaces and parentheses: the
        // fields start after its last `)`, with field 3.
        let rest = &text[text.rfind(')')? + 1..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        let at = |n: usize| f.get(n - 3)?.parse::<u64>().ok();
        Some(Stat {
            utime: at(14)?,
            stime: at(15)?,
            starttime: at(22)?,
            vsize: at(23)?,
            rss: at(24)?,
        })
    }
}

// The page size is only in sysconf(3).
#[allow(unsafe_code)]
fn page_size() -> u64 {
    // SAFETY: sysconf reads a constant of the system; no memory is passed.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(n).unwrap_or(4096)
}

/// `btime` of `/proc/stat`: the boot time, seconds since the epoch.
fn boot_time() -> Option<u64> {
    std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse().ok())
}

/// Open descriptors: the size Linux 6.2+ gives `/proc/self/fd`, else its
/// entries counted (procfs' fast and slow paths).
fn open_fds() -> Option<u64> {
    match std::fs::metadata("/proc/self/fd") {
        Ok(m) if m.len() > 0 => Some(m.len()),
        _ => Some(std::fs::read_dir("/proc/self/fd").ok()?.count() as u64),
    }
}

/// The soft limits on open files and address space; `unlimited` is
/// `u64::MAX`, as procfs reads it.
fn limits(text: &str) -> Option<(u64, u64)> {
    let soft = |label: &str| {
        let line = text.lines().find(|l| l.starts_with(label))?;
        let v = line[label.len()..].split_whitespace().next()?;
        if v == "unlimited" {
            Some(u64::MAX)
        } else {
            v.parse().ok()
        }
    };
    Some((soft("Max open files")?, soft("Max address space")?))
}

/// `IpExt`'s `InOctets` and `OutOctets` of the network namespace's
/// `/proc/self/net/netstat` (0 where the kernel lists neither, as procfs).
fn octets(text: &str) -> Option<(f64, f64)> {
    let mut lines = text.lines().filter(|l| l.starts_with("IpExt:"));
    let names: Vec<&str> = lines.next()?.split_whitespace().collect();
    let values: Vec<&str> = lines.next()?.split_whitespace().collect();
    let get = |key: &str| {
        names
            .iter()
            .position(|n| *n == key)
            .and_then(|i| values.get(i)?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Some((get("InOctets"), get("OutOctets")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_after_an_odd_command_name() {
        let line = "42 (a b) c)) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 0 0 20 0 4 0 \
                    1234 567890 321 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0";
        assert_eq!(
            Stat::parse(line),
            Some(Stat {
                utime: 7,
                stime: 3,
                starttime: 1234,
                vsize: 567_890,
                rss: 321
            })
        );
        assert_eq!(Stat::parse("42 (x) S 1"), None);
    }

    #[test]
    fn limits_and_octets() {
        let l = "Limit                     Soft Limit           Hard Limit           Units     \n\
                 Max open files            1024                 524288               files     \n\
                 Max address space         unlimited            unlimited            bytes     \n";
        assert_eq!(limits(l), Some((1024, u64::MAX)));
        let n = "TcpExt: SyncookiesSent X\nTcpExt: 0 1\nIpExt: InNoRoutes InOctets OutOctets\nIpExt: 0 1500 900\n";
        assert_eq!(octets(n), Some((1500.0, 900.0)));
    }

    /// The live process: every family there, once, in name order, with
    /// this process's own figures.
    #[test]
    fn renders_this_process() {
        let mut out = String::new();
        Process.render(&mut out);
        let names: Vec<&str> = out
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split(' ').next())
            .collect();
        assert_eq!(
            names,
            [
                "process_cpu_seconds_total",
                "process_max_fds",
                "process_network_receive_bytes_total",
                "process_network_transmit_bytes_total",
                "process_open_fds",
                "process_resident_memory_bytes",
                "process_start_time_seconds",
                "process_virtual_memory_bytes",
                "process_virtual_memory_max_bytes",
            ],
            "{out}"
        );
        let value = |n: &str| -> f64 {
            out.lines()
                .find_map(|l| l.strip_prefix(&format!("{n} "))?.parse().ok())
                .unwrap_or(-1.0)
        };
        assert!(value("process_resident_memory_bytes") > 1e6, "{out}");
        assert!(value("process_open_fds") >= 3.0, "{out}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        let start = value("process_start_time_seconds");
        assert!(start > now - 3600.0 && start <= now + 1.0, "{start} {now}");
    }
}
