//! Command lines as Go programs read them. A job declares its flags as a
//! table of [`Flag`]s; [`parse`] reads the arguments as Go's `flag` package
//! does (CoreDNS, node-local-dns), [`parse_pflag`] as spf13/pflag does
//! (cluster-proportional-autoscaler), and [`usage`] and [`pflag_usage`]
//! print the help each prints. What the values mean, and any check beyond
//! the flag's kind, stays with the job.
//!
//! The two dialects, as their packages have them:
//!
//! - Go's `flag`: `-name` or `--name`, `-name=value`, `-name value` for
//!   all but booleans (a boolean takes a value only after `=`); the flags
//!   end at the first argument that is not one, or after `--`; `-h` and
//!   `-help`, unless declared, ask for the usage.
//! - pflag: `--name=value` or `--name value`, one-letter shorthands
//!   (`-v 2`, `-v=2`, `-v2`, and booleans grouped, `-ab`); arguments that
//!   are not flags may stand between flags; `--help` and `-h`, unless
//!   declared, ask for the usage.

use crate::strconv::{self, Reason};
use crate::time;

/// What a flag holds, which decides whether it needs a value, the type
/// its usage line names, and which default counts as zero (not shown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A boolean: given alone, it is `true`.
    Bool,
    /// A Go `int`, read by `strconv.ParseInt(s, 0, 64)`.
    Int,
    /// A string, never refused.
    Str,
    /// A Go `time.Duration`, read by `time.ParseDuration`.
    Duration,
    /// A value of the job's own type, named so in the usage; refused only
    /// by the flag's [`Check`].
    Other(&'static str),
}

/// A job's own check of a value, run when the flag is set (Go's
/// `Value.Set`): the error is the reason Go's message ends with.
pub type Check = fn(&str) -> Result<(), String>;

/// One flag of a command line.
#[derive(Debug, Clone, Copy)]
pub struct Flag {
    /// Its name, without dashes.
    pub name: &'static str,
    /// What it holds.
    pub kind: Kind,
    /// Its value when not given, as Go prints it.
    pub default: &'static str,
    /// Its help text.
    pub help: &'static str,
    /// pflag's one-letter shorthand (Go's `flag` has none).
    pub shorthand: Option<char>,
    /// The job's check of a value, in place of the kind's own.
    pub check: Option<Check>,
}

impl Flag {
    /// A flag of `kind`.
    pub const fn new(
        name: &'static str,
        kind: Kind,
        default: &'static str,
        help: &'static str,
    ) -> Flag {
        Flag {
            name,
            kind,
            default,
            help,
            shorthand: None,
            check: None,
        }
    }

    /// A boolean flag.
    pub const fn bool(name: &'static str, default: &'static str, help: &'static str) -> Flag {
        Flag::new(name, Kind::Bool, default, help)
    }

    /// A string flag.
    pub const fn string(name: &'static str, default: &'static str, help: &'static str) -> Flag {
        Flag::new(name, Kind::Str, default, help)
    }

    /// An integer flag.
    pub const fn int(name: &'static str, default: &'static str, help: &'static str) -> Flag {
        Flag::new(name, Kind::Int, default, help)
    }

    /// The flag with pflag's shorthand `c`.
    pub const fn short(self, c: char) -> Flag {
        Flag {
            shorthand: Some(c),
            ..self
        }
    }

    /// The flag with the job's `check` of its values.
    pub const fn checked(self, check: Check) -> Flag {
        Flag {
            check: Some(check),
            ..self
        }
    }

    /// Whether its default is the zero value of its kind, which the usage
    /// does not show (Go's `isZeroValue`, pflag's `defaultIsZeroValue`).
    fn default_is_zero(&self) -> bool {
        match self.kind {
            Kind::Bool => self.default == "false",
            Kind::Int => self.default == "0",
            Kind::Str => self.default.is_empty(),
            Kind::Duration => self.default == "0s",
            Kind::Other(_) => matches!(self.default, "" | "0" | "false" | "<nil>"),
        }
    }

    /// The type its usage line names (Go's `UnquoteUsage`): none for a
    /// boolean.
    fn type_name(&self) -> &'static str {
        match self.kind {
            Kind::Bool => "",
            Kind::Int => "int",
            Kind::Str => "string",
            Kind::Duration => "duration",
            Kind::Other(t) => t,
        }
    }

    /// ` (default …)` where the default is not zero, a string's quoted.
    fn default_note(&self) -> String {
        if self.default_is_zero() {
            String::new()
        } else if self.kind == Kind::Str {
            format!(" (default {})", strconv::quote(self.default))
        } else {
            format!(" (default {})", self.default)
        }
    }
}

/// Why a command line was refused, as the Go program would have stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The package's own message (`flag provided but not defined: -x`,
    /// `unknown flag: --x`, …): Go prints it and the usage, and exits 2.
    #[error("{0}")]
    Syntax(String),
    /// `-h` or `-help` (pflag: `-h`, `--help`) where not declared: Go
    /// prints the usage and exits 0.
    #[error("help requested")]
    Help,
}

impl Error {
    /// The message, or `None` for a request for help: for a job that
    /// answers help as a flag of its own.
    pub fn message(&self) -> Option<String> {
        match self {
            Error::Syntax(m) => Some(m.clone()),
            Error::Help => None,
        }
    }

    /// The exit code of a Go program whose flag set stops on this error
    /// (`flag.ExitOnError`).
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Syntax(_) => 2,
            Error::Help => 0,
        }
    }
}

/// The flags given, in order, and the arguments left over.
#[derive(Debug, Clone)]
pub struct Parsed<'a> {
    flags: &'a [Flag],
    given: Vec<(&'a str, String)>,
    rest: Vec<String>,
}

impl<'a> Parsed<'a> {
    /// The value of `name`: the last one given, else its default.
    pub fn get(&self, name: &str) -> &str {
        self.get_shared(&[name])
    }

    /// The value of flags that Go binds to one variable (CoreDNS's `-p`
    /// and `-dns.port`): the last one given of any of `names`, else the
    /// default of the first.
    pub fn get_shared(&self, names: &[&str]) -> &str {
        self.given
            .iter()
            .rev()
            .find(|(n, _)| names.contains(n))
            .map(|(_, v)| v.as_str())
            .or_else(|| {
                let first = names.first()?;
                self.flags
                    .iter()
                    .find(|f| f.name == *first)
                    .map(|f| f.default)
            })
            .unwrap_or("")
    }

    /// Whether `name` was given.
    pub fn is_set(&self, name: &str) -> bool {
        self.given.iter().any(|(n, _)| *n == name)
    }

    /// A boolean flag's value (checked when given; a default that is not
    /// a Go boolean reads as `false`).
    pub fn bool(&self, name: &str) -> bool {
        strconv::parse_bool(self.get(name)).unwrap_or(false)
    }

    /// An integer flag's value (checked when given; a default that is not
    /// a Go integer reads as 0).
    pub fn int(&self, name: &str) -> i64 {
        strconv::parse_int(self.get(name), 0, 64).unwrap_or(0)
    }

    /// The arguments that are not flags: those after the flags (Go's
    /// `flag.Args`), or with pflag those between and after them.
    pub fn rest(&self) -> &[String] {
        &self.rest
    }
}

/// Parses `args` (without the program name) as Go's `flag.FlagSet.Parse`
/// does for `flags`, with its error texts.
pub fn parse<'a>(flags: &'a [Flag], args: &[String]) -> Result<Parsed<'a>, Error> {
    let fail = |s: String| Err(Error::Syntax(s));
    let mut given = Vec::new();
    let mut i = 0;
    while let Some(s) = args.get(i) {
        if s.len() < 2 || !s.starts_with('-') {
            break;
        }
        let dashes = if s.as_bytes()[1] == b'-' {
            if s.len() == 2 {
                i += 1;
                break;
            }
            2
        } else {
            1
        };
        let body = &s[dashes..];
        if body.starts_with('-') || body.starts_with('=') {
            return fail(format!("bad flag syntax: {s}"));
        }
        i += 1;
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (body, None),
        };
        let Some(flag) = flags.iter().find(|f| f.name == name) else {
            if name == "help" || name == "h" {
                return Err(Error::Help);
            }
            return fail(format!("flag provided but not defined: -{name}"));
        };
        let value = if flag.kind == Kind::Bool {
            let v = inline.unwrap_or("true");
            if strconv::parse_bool(v).is_err() {
                return fail(format!(
                    "invalid boolean value {} for -{name}: parse error",
                    strconv::quote(v)
                ));
            }
            v.to_owned()
        } else {
            let v = match inline {
                Some(v) => v.to_owned(),
                None => match args.get(i) {
                    Some(v) => {
                        i += 1;
                        v.clone()
                    }
                    None => return fail(format!("flag needs an argument: -{name}")),
                },
            };
            if let Err(why) = go_check(flag, &v) {
                return fail(format!(
                    "invalid value {} for flag -{name}: {why}",
                    strconv::quote(&v)
                ));
            }
            v
        };
        given.push((flag.name, value));
    }
    Ok(Parsed {
        flags,
        given,
        rest: args[i..].to_vec(),
    })
}

/// Go's `Value.Set` for the kinds of the `flag` package, whose errors are
/// only ever `parse error` and `value out of range`.
fn go_check(flag: &Flag, v: &str) -> Result<(), String> {
    if let Some(check) = flag.check {
        return check(v);
    }
    match flag.kind {
        Kind::Int => match strconv::parse_int(v, 0, 64) {
            Err(e) if e.reason == Reason::Range => Err("value out of range".to_owned()),
            Err(_) => Err("parse error".to_owned()),
            Ok(_) => Ok(()),
        },
        Kind::Duration => time::parse_go_signed(v)
            .map(drop)
            .map_err(|_| "parse error".to_owned()),
        Kind::Bool | Kind::Str | Kind::Other(_) => Ok(()),
    }
}

/// Go's default usage for `program`: `Usage of <program>:` and
/// [`defaults`].
pub fn usage(program: &str, flags: &[Flag]) -> String {
    format!("Usage of {program}:\n{}", defaults(flags))
}

/// Go's `flag.PrintDefaults`: each flag sorted by name, its help on the
/// next line after four spaces and a tab (a one-letter boolean's on the
/// same line), with its default where that is not zero.
pub fn defaults(flags: &[Flag]) -> String {
    let mut sorted: Vec<&Flag> = flags.iter().collect();
    sorted.sort_by_key(|f| f.name);
    let mut out = String::new();
    for f in sorted {
        let mut line = format!("  -{}", f.name);
        let ty = f.type_name();
        if !ty.is_empty() {
            line.push(' ');
            line.push_str(ty);
        }
        line.push_str(if line.len() <= 4 { "\t" } else { "\n    \t" });
        line.push_str(&f.help.replace('\n', "\n    \t"));
        line.push_str(&f.default_note());
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// How pflag normalises a name before looking it up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Normalize {
    /// As written.
    None,
    /// Kubernetes' `WordSepNormalizeFunc`: `_` reads as `-`.
    WordSep,
}

impl Normalize {
    fn apply(self, name: &str) -> String {
        match self {
            Normalize::None => name.to_owned(),
            Normalize::WordSep => name.replace('_', "-"),
        }
    }
}

/// Parses `args` (without the program name) as spf13/pflag's
/// `FlagSet.Parse` does for `flags`, with its error texts.
pub fn parse_pflag<'a>(
    flags: &'a [Flag],
    args: &[String],
    normalize: Normalize,
) -> Result<Parsed<'a>, Error> {
    let mut given = Vec::new();
    let mut rest = Vec::new();
    let mut i = 0;
    while let Some(s) = args.get(i) {
        i += 1;
        if s.len() < 2 || !s.starts_with('-') {
            rest.push(s.clone());
            continue;
        }
        if let Some(body) = s.strip_prefix("--") {
            if body.is_empty() {
                rest.extend_from_slice(&args[i..]);
                break;
            }
            if body.starts_with('-') || body.starts_with('=') {
                return Err(Error::Syntax(format!("bad flag syntax: {s}")));
            }
            let (name, inline) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (body, None),
            };
            let wanted = normalize.apply(name);
            let Some(flag) = flags.iter().find(|f| f.name == wanted) else {
                if name == "help" {
                    return Err(Error::Help);
                }
                return Err(Error::Syntax(format!("unknown flag: --{name}")));
            };
            let value = match inline {
                Some(v) => v.to_owned(),
                None if flag.kind == Kind::Bool => "true".to_owned(),
                None => match args.get(i) {
                    Some(v) => {
                        i += 1;
                        v.clone()
                    }
                    None => {
                        return Err(Error::Syntax(format!("flag needs an argument: {s}")));
                    }
                },
            };
            given.push((flag.name, pflag_set(flag, value)?));
            continue;
        }
        // Shorthands: `-abc` is `-a -b -c` while they are booleans; the
        // first that is not takes the rest of the word, or the next word.
        let mut shorts = &s[1..];
        while let Some(c) = shorts.chars().next() {
            let after = &shorts[c.len_utf8()..];
            let Some(flag) = flags.iter().find(|f| f.shorthand == Some(c)) else {
                if c == 'h' {
                    return Err(Error::Help);
                }
                return Err(Error::Syntax(format!(
                    "unknown shorthand flag: '{c}' in -{shorts}"
                )));
            };
            let value = if let Some(v) = after.strip_prefix('=').filter(|v| !v.is_empty()) {
                shorts = "";
                v.to_owned()
            } else if flag.kind == Kind::Bool {
                shorts = after;
                "true".to_owned()
            } else if !after.is_empty() {
                shorts = "";
                after.to_owned()
            } else if let Some(v) = args.get(i) {
                i += 1;
                shorts = "";
                v.clone()
            } else {
                return Err(Error::Syntax(format!(
                    "flag needs an argument: '{c}' in -{shorts}"
                )));
            };
            given.push((flag.name, pflag_set(flag, value)?));
        }
    }
    Ok(Parsed { flags, given, rest })
}

/// pflag's `Value.Set` and its message, which carries the strconv error
/// as it is.
fn pflag_set(flag: &Flag, value: String) -> Result<String, Error> {
    let checked = match (flag.check, flag.kind) {
        (Some(check), _) => check(&value),
        (None, Kind::Bool) => strconv::parse_bool(&value)
            .map(drop)
            .map_err(|e| e.to_string()),
        (None, Kind::Int) => strconv::parse_int(&value, 0, 64)
            .map(drop)
            .map_err(|e| e.to_string()),
        (None, Kind::Duration) => time::parse_go_signed(&value)
            .map(drop)
            .map_err(|e| e.to_string()),
        (None, Kind::Str | Kind::Other(_)) => Ok(()),
    };
    match checked {
        Ok(()) => Ok(value),
        Err(why) => {
            let shown = match flag.shorthand {
                Some(c) => format!("-{c}, --{}", flag.name),
                None => format!("--{}", flag.name),
            };
            Err(Error::Syntax(format!(
                "invalid argument {} for {} flag: {why}",
                strconv::quote(&value),
                strconv::quote(&shown)
            )))
        }
    }
}

/// pflag's default usage for `program`: `Usage of <program>:` and
/// [`pflag_defaults`].
pub fn pflag_usage(program: &str, flags: &[Flag]) -> String {
    format!("Usage of {program}:\n{}", pflag_defaults(flags))
}

/// pflag's `FlagUsages`: each flag sorted by name, `-s, --name type` or
/// `    --name type`, the help texts aligned three spaces past the longest.
pub fn pflag_defaults(flags: &[Flag]) -> String {
    let mut sorted: Vec<&Flag> = flags.iter().collect();
    sorted.sort_by_key(|f| f.name);
    let lines: Vec<(String, String)> = sorted
        .into_iter()
        .map(|f| {
            let mut line = match f.shorthand {
                Some(c) => format!("  -{c}, --{}", f.name),
                None => format!("      --{}", f.name),
            };
            let ty = f.type_name();
            if !ty.is_empty() {
                line.push(' ');
                line.push_str(ty);
            }
            (line, format!("{}{}", f.help, f.default_note()))
        })
        .collect();
    let width = lines.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (line, help) in lines {
        out.push_str(&format!("{line:width$}   {help}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    //! Go's and pflag's own results (values, error texts, usage layouts)
    //! are `tests/go_outputs.rs`'s; these are this module's API: shared
    //! flags, exit codes, a job's check.
    use super::*;

    const GO: &[Flag] = &[
        Flag::string("conf", "", "Corefile to load"),
        Flag::string("p", "53", "Default port"),
        Flag::string("dns.port", "53", "Default port"),
        Flag::bool("quiet", "false", "Quiet mode"),
        Flag::bool("up", "true", "Up"),
        Flag::int("n", "0", "A number"),
        Flag::new("every", Kind::Duration, "60ns", "How often"),
        Flag::bool("x", "false", "One letter"),
    ];

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    fn go(a: &[&str]) -> Result<Parsed<'static>, Error> {
        parse(GO, &args(a))
    }

    #[test]
    fn go_forms() {
        let p = go(&[
            "-conf",
            "/c",
            "--p=1053",
            "-quiet",
            "-up=false",
            "--n",
            "0x10",
        ])
        .expect("parses");
        assert_eq!(p.get("conf"), "/c");
        assert_eq!(p.get_shared(&["dns.port", "p"]), "1053");
        assert!(p.bool("quiet") && !p.bool("up"));
        assert_eq!(p.int("n"), 16);
        assert!(p.is_set("conf") && !p.is_set("every"));
        assert_eq!(p.get("every"), "60ns");
        assert!(p.rest().is_empty());
        // Unset: the defaults; of shared flags, the first one's.
        let p = go(&[]).expect("parses");
        assert_eq!(
            (p.get("dns.port"), p.bool("up"), p.int("n")),
            ("53", true, 0)
        );
        assert_eq!(
            go(&["-dns.port", "1", "-p", "2"])
                .expect("parses")
                .get_shared(&["dns.port", "p"]),
            "2"
        );
    }

    #[test]
    fn go_stops_at_the_first_argument_not_a_flag() {
        let rest = |a: &[&str]| go(a).expect("parses").rest().to_vec();
        assert_eq!(
            rest(&["-quiet", "x", "-conf", "c"]),
            args(&["x", "-conf", "c"])
        );
        assert_eq!(rest(&["--", "-quiet"]), args(&["-quiet"]));
        assert_eq!(rest(&["-", "-quiet"]), args(&["-", "-quiet"]));
        // A boolean never takes the next argument.
        assert_eq!(rest(&["-quiet", "false"]), args(&["false"]));
        // A value may look like a flag.
        assert_eq!(
            go(&["-conf", "-quiet"]).expect("parses").get("conf"),
            "-quiet"
        );
    }

    #[test]
    fn go_help_and_exit_codes() {
        assert_eq!(
            go(&["-every", "-5ns"]).expect("Go takes it").get("every"),
            "-5ns"
        );
        for help in ["-h", "--help", "-help=x"] {
            assert_eq!(go(&[help, "-bogus"]).unwrap_err(), Error::Help, "{help}");
        }
        assert_eq!(go(&["-h"]).unwrap_err().exit_code(), 0);
        assert_eq!(go(&["-bogus"]).unwrap_err().exit_code(), 2);
    }

    #[test]
    fn a_check_replaces_the_kinds() {
        fn port(s: &str) -> Result<(), String> {
            s.parse::<u16>().map(drop).map_err(|_| "parse error".into())
        }
        let flags = [Flag::string("p", "53", "Port").checked(port)];
        assert!(parse(&flags, &args(&["-p", "5353"])).is_ok());
        assert_eq!(
            parse(&flags, &args(&["-p", "x"])).unwrap_err().to_string(),
            "invalid value \"x\" for flag -p: parse error"
        );
    }

    const PF: &[Flag] = &[
        Flag::string("target", "", "Target to scale."),
        Flag::int("poll-period-seconds", "10", "Poll period."),
        Flag::bool("version", "false", "Print the version and exit."),
        Flag::bool("all", "false", "All.").short('a'),
        Flag::int("v", "0", "log level for V logs").short('v'),
        Flag::new(
            "vmodule",
            Kind::Other("moduleSpec"),
            "",
            "comma-separated list",
        ),
        Flag::string("health-address", ":8080", "Address"),
    ];

    fn pf(a: &[&str]) -> Result<Parsed<'static>, Error> {
        parse_pflag(PF, &args(a), Normalize::WordSep)
    }

    #[test]
    fn pflag_forms() {
        let p = pf(&[
            "--target",
            "deployment/x",
            "pos",
            "--poll_period_seconds=0x1e",
            "--version",
            "-v",
            "4",
            "more",
        ])
        .expect("parses");
        assert_eq!(p.get("target"), "deployment/x");
        assert_eq!(p.int("poll-period-seconds"), 30);
        assert!(p.bool("version"));
        assert_eq!(p.int("v"), 4);
        assert_eq!(p.rest(), args(&["pos", "more"]));
        assert_eq!(pf(&["-v=3"]).expect("parses").int("v"), 3);
        assert_eq!(pf(&["-v3"]).expect("parses").int("v"), 3);
        let p = pf(&["-av", "5"]).expect("parses");
        assert!(p.bool("all"));
        assert_eq!(p.int("v"), 5);
        assert_eq!(
            pf(&["-", "--", "--bogus"]).expect("parses").rest(),
            args(&["-", "--bogus"])
        );
        let p = pf(&[]).expect("parses");
        assert_eq!(
            (p.int("poll-period-seconds"), p.get("health-address")),
            (10, ":8080")
        );
        // A boolean takes a value only after `=`.
        let p = pf(&["--version", "false"]).expect("parses");
        assert!(p.bool("version"));
        assert!(!pf(&["--version=false"]).expect("parses").bool("version"));
    }

    #[test]
    fn pflag_help() {
        for help in ["--help", "-h", "-ah"] {
            assert_eq!(pf(&[help, "--foo"]).unwrap_err(), Error::Help, "{help}");
        }
    }
}
