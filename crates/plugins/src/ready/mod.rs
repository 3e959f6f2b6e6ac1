#![doc = include_str!("README.md")]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use clusterdns_contract::{HttpReply, HttpRoute, PluginDef, ReadyList, SetupCtx, info};
use clusterdns_corefile::{ConfigError, Directive};
use parking_lot::Mutex;

/// Registration of *ready*.
pub const DEF: PluginDef = PluginDef {
    name: "ready",
    setup,
};

/// CoreDNS's default readiness address.
const DEFAULT_ADDR: &str = ":8181";

fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    let (d, addr) = clusterdns_contract::parse::once_with_addr(dirs, DEFAULT_ADDR)?;
    let mut continuously = false;
    for line in &d.block {
        match line.name.text.as_str() {
            "monitor" => {
                let [a] = line.args.as_slice() else {
                    return Err(line.arg_err());
                };
                continuously = match a.text.as_str() {
                    "until-ready" => false,
                    "continuously" => true,
                    other => {
                        return Err(a.err(format!("monitor type '{other}' not supported")));
                    }
                };
            }
            other => return Err(line.err(format!("unknown property '{other}'"))),
        }
    }
    let state = Arc::new(Ready {
        list: ctx.shared.readiness.clone(),
        shutting_down: ctx.shared.shutting_down.clone(),
        continuously,
        seen_ready: Mutex::new(Vec::new()),
    });
    ctx.shared.routes.push(HttpRoute {
        addr,
        path: "/ready".to_string(),
        handler: Arc::new(move || state.reply()),
    });
    Ok(())
}

/// The `/ready` handler's state.
struct Ready {
    list: ReadyList,
    shutting_down: Arc<AtomicBool>,
    continuously: bool,
    /// With `until-ready`, plugins that were ready once are not asked
    /// again.
    seen_ready: Mutex<Vec<&'static str>>,
}

impl Ready {
    /// The plugins not ready now, sorted, without duplicates.
    fn not_ready(&self) -> Vec<&'static str> {
        let checks = self.list.0.lock().clone();
        let mut seen = self.seen_ready.lock();
        let mut out: Vec<&'static str> = Vec::new();
        for (name, check) in &checks {
            if !self.continuously && seen.contains(name) {
                continue;
            }
            if !check() && !out.contains(name) {
                out.push(name);
            }
        }
        if !self.continuously {
            for (name, _) in &checks {
                if !out.contains(name) && !seen.contains(name) {
                    seen.push(name);
                }
            }
        }
        out.sort_unstable();
        out
    }

    fn reply(&self) -> HttpReply {
        let text = |status, body: &[u8]| HttpReply {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.to_vec(),
            streamed: false,
        };
        if self.shutting_down.load(Ordering::Relaxed) {
            return text(503, b"Shutting down");
        }
        let not_ready = self.not_ready();
        if not_ready.is_empty() {
            return text(200, b"OK");
        }
        let list = not_ready.join(",");
        info!("ready", "Plugins not ready: {list:?}");
        text(503, list.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;
    use crate::testutil::{setup as run_setup, setup_err};

    #[test]
    fn setup_accepts() {
        let r = run_setup(DEF, ". {\n ready\n}").unwrap();
        assert_eq!(r.shared.routes[0].addr, "0.0.0.0:8181".parse().unwrap());
        assert_eq!(r.shared.routes[0].path, "/ready");
        let r = run_setup(
            DEF,
            ". {\n ready 127.0.0.1:1 {\n monitor continuously\n }\n}",
        )
        .unwrap();
        assert_eq!(r.shared.routes[0].addr, "127.0.0.1:1".parse().unwrap());
        assert!(run_setup(DEF, ". {\n ready {\n monitor until-ready\n }\n}").is_ok());
    }

    #[test]
    fn setup_rejects() {
        let cases = [
            (". {\n ready\n ready\n}", clusterdns_contract::parse::ONCE),
            (
                ". {\n ready a b\n}",
                "Wrong argument count or unexpected line ending after 'b'",
            ),
            (
                ". {\n ready 8181\n}",
                "address 8181: missing port in address",
            ),
            (
                ". {\n ready {\n monitor\n }\n}",
                "Wrong argument count or unexpected line ending after 'monitor'",
            ),
            (
                ". {\n ready {\n monitor sometimes\n }\n}",
                "monitor type 'sometimes' not supported",
            ),
            (". {\n ready {\n foo\n }\n}", "unknown property 'foo'"),
        ];
        for (c, want) in cases {
            assert_eq!(setup_err(DEF, c), want, "{c}");
        }
    }

    fn ready_with(continuously: bool) -> (Ready, Arc<AtomicBool>, Arc<AtomicBool>) {
        let list = ReadyList::default();
        let k = Arc::new(AtomicBool::new(false));
        let e = Arc::new(AtomicBool::new(false));
        let (k2, e2) = (k.clone(), e.clone());
        list.0
            .lock()
            .push(("kubernetes", Arc::new(move || k2.load(Ordering::Relaxed))));
        list.0
            .lock()
            .push(("erratic", Arc::new(move || e2.load(Ordering::Relaxed))));
        let r = Ready {
            list,
            shutting_down: Arc::default(),
            continuously,
            seen_ready: Mutex::new(Vec::new()),
        };
        (r, k, e)
    }

    #[test]
    fn reports_not_ready_sorted_comma_joined() {
        let (r, k, e) = ready_with(false);
        let rep = r.reply();
        assert_eq!(
            (rep.status, rep.body.as_slice()),
            (503, &b"erratic,kubernetes"[..])
        );
        k.store(true, Ordering::Relaxed);
        assert_eq!(r.reply().body, b"erratic");
        e.store(true, Ordering::Relaxed);
        assert_eq!((r.reply().status, r.reply().body), (200, b"OK".to_vec()));
        // until-ready: once ready, never asked again.
        k.store(false, Ordering::Relaxed);
        assert_eq!(r.reply().status, 200);
        r.shutting_down.store(true, Ordering::Relaxed);
        assert_eq!(
            (r.reply().status, r.reply().body),
            (503, b"Shutting down".to_vec())
        );
    }

    #[test]
    fn continuously_asks_every_time() {
        let (r, k, e) = ready_with(true);
        k.store(true, Ordering::Relaxed);
        e.store(true, Ordering::Relaxed);
        assert_eq!(r.reply().status, 200);
        k.store(false, Ordering::Relaxed);
        assert_eq!(
            (r.reply().status, r.reply().body),
            (503, b"kubernetes".to_vec())
        );
    }
}
