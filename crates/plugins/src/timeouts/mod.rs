#![doc = include_str!("README.md")]

use std::time::Duration;

use clusterdns_contract::duration::{Signed, parse_go_signed};
use clusterdns_contract::{ConnLimits, PluginDef, SetupCtx};
use clusterdns_corefile::{ConfigError, Directive};

/// Registration of *timeouts*.
pub const DEF: PluginDef = PluginDef {
    name: "timeouts",
    setup,
};

/// The range CoreDNS accepts for each timeout.
const MIN: Duration = Duration::from_secs(1);
const MAX: Duration = Duration::from_secs(24 * 3600);

fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    // Every `timeouts` line counts, in order (CoreDNS loops over them).
    for d in dirs {
        parse(d, &mut ctx.conn_limits)?;
    }
    Ok(())
}

/// CoreDNS's `durations.NewDurationFromArg`: a bare integer is seconds.
fn duration_arg(s: &str) -> Option<Signed> {
    let with_unit;
    let text = if s.parse::<i64>().is_ok() {
        with_unit = format!("{s}s");
        &with_unit
    } else {
        s
    };
    parse_go_signed(text).ok()
}

/// The same text with a bare integer given its `s`, as CoreDNS quotes it.
fn as_quoted(s: &str) -> String {
    if s.parse::<i64>().is_ok() {
        format!("{s}s")
    } else {
        s.to_owned()
    }
}

fn parse(d: &Directive, limits: &mut ConnLimits) -> Result<(), ConfigError> {
    clusterdns_contract::parse::no_args(d)?;
    let mut set = 0;
    for line in &d.block {
        let option = line.name.text.as_str();
        let [arg] = line.args.as_slice() else {
            return Err(line.arg_err());
        };
        let arg = arg.text.as_str();
        if option == "maxtcpqueries" {
            let n = match arg.parse::<i64>() {
                Ok(n) => n,
                Err(e) => {
                    let why = if matches!(
                        e.kind(),
                        std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow
                    ) {
                        "value out of range"
                    } else {
                        "invalid syntax"
                    };
                    return Err(line.err(format!(
                        "invalid value for maxtcpqueries '{arg}': strconv.Atoi: parsing \"{arg}\": {why}"
                    )));
                }
            };
            limits.max_queries = Some(match n {
                -1 => None,
                n if n > 0 => Some(u32::try_from(n).unwrap_or(u32::MAX)),
                _ => {
                    return Err(line.err(format!(
                        "maxtcpqueries provided '{n}' needs to be -1 (unlimited) or a positive integer"
                    )));
                }
            });
            set += 1;
            continue;
        }
        let Some(t) = duration_arg(arg) else {
            return Err(line.err(format!("failed to parse duration '{}'", as_quoted(arg))));
        };
        if t.negative || t.magnitude < MIN || t.magnitude > MAX {
            return Err(line.err(format!(
                "timeout provided '{t}' needs to be between 1 second and 24 hours"
            )));
        }
        let slot = match option {
            "read" => &mut limits.read,
            "write" => &mut limits.write,
            "idle" => &mut limits.idle,
            _ => return Err(line.err(format!("unknown option: '{option}'"))),
        };
        *slot = Some(t.magnitude);
        set += 1;
    }
    if set == 0 {
        return Err(d.err("timeouts block with no timeouts specified"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{directives, setup_err};

    fn limits(c: &str) -> ConnLimits {
        let mut l = ConnLimits::default();
        for d in directives(c, "timeouts") {
            parse(&d, &mut l).unwrap_or_else(|e| panic!("{c}: {e}"));
        }
        l
    }

    #[test]
    fn options_set_what_they_name() {
        let l = limits(". {\n timeouts {\n  read 10\n  write 1m\n  idle 24h\n }\n}");
        assert_eq!(l.read, Some(Duration::from_secs(10)));
        assert_eq!(l.write, Some(Duration::from_secs(60)));
        assert_eq!(l.idle, Some(Duration::from_secs(86400)));
        assert_eq!(l.max_queries, None);
        let l = limits(". {\n timeouts {\n  maxtcpqueries 128\n }\n timeouts {\n  idle 2s\n }\n}");
        assert_eq!(l.max_queries, Some(Some(128)));
        assert_eq!(l.idle, Some(Duration::from_secs(2)));
        let l = limits(". {\n timeouts {\n  maxtcpqueries -1\n }\n}");
        assert_eq!(l.max_queries, Some(None));
    }

    #[test]
    fn errors_as_coredns() {
        for (c, want) in [
            (
                ". {\n timeouts\n}",
                "timeouts block with no timeouts specified",
            ),
            (
                ". {\n timeouts 5s\n}",
                "Wrong argument count or unexpected line ending after '5s'",
            ),
            (
                ". {\n timeouts {\n  read\n }\n}",
                "Wrong argument count or unexpected line ending after 'read'",
            ),
            (
                ". {\n timeouts {\n  read x\n }\n}",
                "failed to parse duration 'x'",
            ),
            (
                ". {\n timeouts {\n  read 500ms\n }\n}",
                "timeout provided '500ms' needs to be between 1 second and 24 hours",
            ),
            (
                ". {\n timeouts {\n  idle 25h\n }\n}",
                "timeout provided '25h0m0s' needs to be between 1 second and 24 hours",
            ),
            (
                ". {\n timeouts {\n  idle -5\n }\n}",
                "timeout provided '-5s' needs to be between 1 second and 24 hours",
            ),
            (". {\n timeouts {\n  foo 5s\n }\n}", "unknown option: 'foo'"),
            (
                ". {\n timeouts {\n  maxtcpqueries 0\n }\n}",
                "maxtcpqueries provided '0' needs to be -1 (unlimited) or a positive integer",
            ),
            (
                ". {\n timeouts {\n  maxtcpqueries x\n }\n}",
                "invalid value for maxtcpqueries 'x': strconv.Atoi: parsing \"x\": invalid syntax",
            ),
        ] {
            assert_eq!(setup_err(DEF, c), want, "{c}");
        }
    }
}
