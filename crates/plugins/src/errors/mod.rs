#![doc = include_str!("README.md")]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use clusterdns_contract::duration::{format_go, parse_go};
use clusterdns_contract::log::Level;
use clusterdns_contract::{Flow, Outcome, Plugin, PluginDef, Request, ResponseWriter, SetupCtx};
use clusterdns_corefile::{ConfigError, Directive};
use parking_lot::Mutex;

/// Registration of *errors*.
pub const DEF: PluginDef = PluginDef {
    name: "errors",
    setup,
};

/// Longest `consolidate` pattern accepted, as CoreDNS (`maxRegexpLen`).
const MAX_REGEXP_LEN: usize = 10_000;

fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    let errors = Arc::new(parse(dirs)?);
    if !errors.patterns.is_empty() {
        let tasks: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>> = Arc::default();
        let (start, t) = (errors.clone(), tasks.clone());
        ctx.shared.on_startup.push(Box::new(move || {
            let rt = tokio::runtime::Handle::try_current()
                .map_err(|e| format!("plugin/errors: no runtime: {e}"))?;
            let mut t = t.lock();
            for i in 0..start.patterns.len() {
                let e = start.clone();
                t.push(rt.spawn(async move { e.consolidate_loop(i).await }));
            }
            Ok(())
        }));
        let stop = errors.clone();
        ctx.shared.on_shutdown.push(Box::new(move || {
            for t in tasks.lock().drain(..) {
                t.abort();
            }
            stop.stop();
            Ok(())
        }));
    }
    ctx.add_plugin(errors);
    Ok(())
}

/// Reads the `errors` directives of a block.
fn parse(dirs: &[&Directive]) -> Result<Errors, ConfigError> {
    let d = clusterdns_contract::parse::once(dirs)?;
    match d.args.as_slice() {
        [] => {}
        [a] if a.text == "stdout" => {}
        [a] => return Err(a.err(format!("invalid log file: {}", a.text))),
        _ => return Err(d.arg_err()),
    }
    let mut patterns = Vec::new();
    for line in &d.block {
        match line.name.text.as_str() {
            "stacktrace" => {}
            "consolidate" => patterns.push(parse_consolidate(line)?),
            other => {
                return Err(line.err(format!(
                    "Syntax error: Unexpected token '{other}', expecting 'Unknown field {other}'"
                )));
            }
        }
    }
    Ok(Errors {
        patterns,
        stopped: AtomicBool::new(false),
    })
}

fn parse_consolidate(line: &Directive) -> Result<Pattern, ConfigError> {
    let args = &line.args;
    if args.len() < 2 || args.len() > 4 {
        return Err(line.arg_err());
    }
    let period = parse_go(&args[0].text).map_err(|e| args[0].err(e.to_string()))?;
    let re_text = &args[1].text;
    if re_text.len() > MAX_REGEXP_LEN {
        return Err(args[1].err(format!(
            "regex pattern too long: {} > {MAX_REGEXP_LEN}",
            re_text.len()
        )));
    }
    let re = regex::Regex::new(re_text).map_err(|e| args[1].err(e.to_string()))?;
    let mut level: Option<Option<Level>> = None;
    let mut show_first = false;
    for a in &args[2..] {
        let lv = match a.text.as_str() {
            "warning" => Some(Some(Level::Warning)),
            "error" => Some(Some(Level::Error)),
            "info" => Some(Some(Level::Info)),
            // Printed only with the *debug* plugin (`Level::Debug` lines).
            "debug" => Some(Some(Level::Debug)),
            "show_first" => None,
            other => return Err(a.err(format!("unknown option in consolidate: {other}"))),
        };
        match lv {
            Some(l) => {
                if level.is_some() {
                    return Err(a.err("multiple log levels specified in consolidate"));
                }
                if show_first {
                    return Err(a.err("log level must come before show_first in consolidate"));
                }
                level = Some(l);
            }
            None => show_first = true,
        }
    }
    Ok(Pattern {
        period,
        re,
        level: level.unwrap_or(Some(Level::Error)),
        show_first,
        count: AtomicU32::new(0),
        wake: tokio::sync::Notify::new(),
    })
}

/// One `consolidate` rule.
#[derive(Debug)]
struct Pattern {
    period: Duration,
    re: regex::Regex,
    /// The level of its lines (`Debug`: printed only with *debug*).
    level: Option<Level>,
    show_first: bool,
    /// Errors matched in the current period.
    count: AtomicU32,
    /// Woken by the first match of a period.
    wake: tokio::sync::Notify,
}

/// The *errors* handler: logs the errors of the queries it passed on.
#[derive(Debug)]
pub struct Errors {
    patterns: Vec<Pattern>,
    stopped: AtomicBool,
}

impl Errors {
    /// Prints the summary of pattern `i` and resets its count.
    fn flush(&self, i: usize) {
        let p = &self.patterns[i];
        let n = p.count.swap(0, Ordering::Relaxed);
        if n == 0 || (n == 1 && p.show_first) {
            return;
        }
        if let Some(level) = p.level {
            clusterdns_contract::log::write(
                level,
                "errors",
                format_args!(
                    "{n} errors like '{}' occurred in last {}",
                    p.re.as_str(),
                    format_go(p.period)
                ),
            );
        }
    }

    /// Waits for the first match of a period, sleeps the period, prints.
    async fn consolidate_loop(&self, i: usize) {
        loop {
            self.patterns[i].wake.notified().await;
            tokio::time::sleep(self.patterns[i].period).await;
            self.flush(i);
        }
    }

    /// Flushes every pending summary (on shutdown or reload).
    fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
        for i in 0..self.patterns.len() {
            self.flush(i);
        }
    }

    /// Counts `err` against the first matching pattern. Returns the level
    /// to log the error at, or `None` when it is consolidated (or debug).
    fn classify(&self, err: &str) -> Option<Option<Level>> {
        for p in &self.patterns {
            if !p.re.is_match(err) {
                continue;
            }
            if self.stopped.load(Ordering::Relaxed) {
                return Some(p.level);
            }
            let n = p.count.fetch_add(1, Ordering::Relaxed) + 1;
            if n == 1 {
                p.wake.notify_one();
                if p.show_first {
                    return Some(p.level);
                }
            }
            return None;
        }
        Some(Some(Level::Error))
    }

    /// The line CoreDNS prints for an error: `RCODE NAME TYPE: ERROR`.
    fn line(req: &Request<'_>, outcome: &Outcome, err: &str) -> String {
        format!(
            "{} {} {}: {}",
            outcome.rcode.0,
            req.qname_lower(),
            req.qtype(),
            err
        )
    }
}

impl Plugin for Errors {
    fn name(&self) -> &'static str {
        "errors"
    }

    fn query(&self, _req: &Request<'_>, _w: &mut ResponseWriter) -> Flow {
        Flow::Next
    }

    fn response(&self, req: &Request<'_>, _w: &mut ResponseWriter, outcome: &Outcome) {
        let Some(e) = &outcome.error else {
            return;
        };
        // Errors are rare; formatting them allocates, answers never do.
        let err = e.to_string();
        if let Some(Some(level)) = self.classify(&err) {
            clusterdns_contract::log::write(
                level,
                "errors",
                format_args!("{}", Self::line(req, outcome, &err)),
            );
        }
    }
}

#[cfg(test)]
mod tests;
