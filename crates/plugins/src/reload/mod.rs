#![doc = include_str!("README.md")]

use std::time::Duration;

use clusterdns_contract::duration::{Signed, format_go, parse_go_signed};
use clusterdns_contract::setup::ReloadSettings;
use clusterdns_contract::{PluginDef, SetupCtx};
use clusterdns_corefile::{ConfigError, Directive, Token};

/// Registration of *reload*.
pub const DEF: PluginDef = PluginDef {
    name: "reload",
    setup,
};

const DEFAULT_INTERVAL: Duration = Duration::from_secs(30);
const DEFAULT_JITTER: Duration = Duration::from_secs(15);
const MIN_INTERVAL: Duration = Duration::from_secs(2);
const MIN_JITTER: Duration = Duration::from_secs(1);

/// Reads `reload [INTERVAL] [JITTER]` (the first occurrence, as CoreDNS)
/// into the interval and jitter, checked and capped as CoreDNS does.
fn parse(d: &Directive) -> Result<(Duration, Duration), ConfigError> {
    if d.args.len() > 2 {
        return Err(d.arg_err());
    }
    // Go parses a negative duration; CoreDNS then finds it below the minimum.
    let signed = |a: &Token| parse_go_signed(&a.text).map_err(|e| a.err(e.to_string()));
    let interval = match d.args.first() {
        Some(a) => signed(a)?,
        None => Signed::from(DEFAULT_INTERVAL),
    };
    if interval.negative || interval.magnitude < MIN_INTERVAL {
        return Err(d.err(format!(
            "interval value must be greater or equal to {}",
            format_go(MIN_INTERVAL)
        )));
    }
    let jitter = match d.args.get(1) {
        Some(a) => signed(a)?,
        None => Signed::from(DEFAULT_JITTER),
    };
    if !jitter.magnitude.is_zero() && (jitter.negative || jitter.magnitude < MIN_JITTER) {
        return Err(d.err(format!(
            "jitter value must be 0 or greater or equal to {}",
            format_go(MIN_JITTER)
        )));
    }
    let (interval, jitter) = (interval.magnitude, jitter.magnitude);
    Ok((interval, jitter.min(interval / 2)))
}

fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    let (interval, jitter) = parse(dirs[0])?;
    // CoreDNS draws the jitter once per configuration:
    // INTERVAL + rand[-J/2, J/2).
    let effective = if jitter.is_zero() {
        interval
    } else {
        let j = jitter.as_nanos() as u64;
        let off = fastrand::u64(0..j);
        Duration::from_nanos((interval.as_nanos() as u64 + off).saturating_sub(j / 2))
    };
    // The first block with reload decides (the plugin is process-wide).
    if ctx.shared.reload.is_none() {
        ctx.shared.reload = Some(ReloadSettings {
            interval: effective,
            jitter: Duration::ZERO,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{setup as run_setup, setup_err};

    fn settings(c: &str) -> ReloadSettings {
        run_setup(DEF, c).unwrap().shared.reload.unwrap()
    }

    #[test]
    fn defaults_and_jitter_window() {
        for _ in 0..50 {
            let s = settings(". {\n reload\n}");
            // 30s ± 7.5s.
            assert!(s.interval >= Duration::from_millis(22_500), "{s:?}");
            assert!(s.interval < Duration::from_millis(37_500), "{s:?}");
            assert_eq!(s.jitter, Duration::ZERO);
        }
        let s = settings(". {\n reload 10s 0\n}");
        assert_eq!(s.interval, Duration::from_secs(10));
        // Jitter capped at half the interval: 2s ± 0.5s.
        for _ in 0..50 {
            let s = settings(". {\n reload 2s 5s\n}");
            assert!(
                s.interval >= Duration::from_millis(1500)
                    && s.interval < Duration::from_millis(2500)
            );
        }
        assert!(
            run_setup(DEF, ". {\n reload 1m 1s\n}")
                .unwrap()
                .plugins
                .is_empty()
        );
    }

    #[test]
    fn setup_rejects() {
        let cases = [
            (
                ". {\n reload 1s\n}",
                "interval value must be greater or equal to 2s",
            ),
            (
                ". {\n reload 10s 500ms\n}",
                "jitter value must be 0 or greater or equal to 1s",
            ),
            (
                ". {\n reload 10\n}",
                "time: missing unit in duration \"10\"",
            ),
            (". {\n reload 10s x\n}", "time: invalid duration \"x\""),
            // Go parses a negative duration; CoreDNS finds it below the minimum.
            (
                ". {\n reload -1m\n}",
                "interval value must be greater or equal to 2s",
            ),
            (
                ". {\n reload 10s -1s\n}",
                "jitter value must be 0 or greater or equal to 1s",
            ),
            (
                ". {\n reload 1 2 3\n}",
                "Wrong argument count or unexpected line ending after '3'",
            ),
        ];
        for (c, want) in cases {
            assert_eq!(setup_err(DEF, c), want, "{c}");
        }
    }
}
