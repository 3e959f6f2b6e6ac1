//! Setup helpers shared by every plugin, as CoreDNS keeps them in
//! `plugin/pkg/parse` and `plugin.ErrOnce`: the once-per-block check,
//! argument counts, integers, Go durations, zone names and admin listen
//! addresses, each with the error text CoreDNS prints.
//!
//! ```
//! use clusterdns_contract::parse;
//!
//! let text = ". {\n cache 30 {\n  prefetch 2 1m\n }\n cache\n}\n";
//! let env = clusterdns_corefile::ProcessEnv;
//! let cf = clusterdns_corefile::parse_str(text, "Corefile".as_ref(), &env).unwrap();
//! let dirs: Vec<_> = cf.blocks[0].directives_named("cache").collect();
//! let err = parse::once(&dirs).unwrap_err();
//! assert_eq!((err.line, err.msg.as_str()), (5, parse::ONCE));
//!
//! let prefetch = &dirs[0].block[0];
//! let [amount, duration] = prefetch.args.as_slice() else { panic!() };
//! assert_eq!(parse::atoi::<u32>(prefetch, &amount.text).unwrap(), 2);
//! assert_eq!(parse::duration(prefetch, &duration.text).unwrap().as_secs(), 60);
//! assert_eq!(
//!     parse::duration(prefetch, "1d").unwrap_err().msg,
//!     "time: unknown unit \"d\" in duration \"1d\""
//! );
//! ```

mod addr;
mod resolv;

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use clusterdns_corefile::{ConfigError, Directive, normalize_zone};
use clusterdns_wire::Name;

use crate::duration::Signed;

pub use addr::{listen_addr, once_with_addr};
pub use resolv::{resolv_search, search_names, search_of};

/// CoreDNS's `plugin.ErrOnce`, for a plugin written twice in one server block.
pub const ONCE: &str = "this plugin can only be used once per Server Block";

/// The one directive of a plugin that may appear once per server block;
/// the second one is the error ([`ONCE`]).
pub fn once<'d>(dirs: &[&'d Directive]) -> Result<&'d Directive, ConfigError> {
    match dirs {
        [d] => Ok(d),
        [_, second, ..] => Err(second.err(ONCE)),
        // The server calls a setup only for the directives it found.
        [] => Err(ConfigError {
            file: Path::new("").into(),
            line: 0,
            msg: "no directive to set up".to_owned(),
        }),
    }
}

/// The argument of a directive that takes exactly one (`c.NextArg()` once,
/// else `c.ArgErr()`).
pub fn one_arg(d: &Directive) -> Result<&str, ConfigError> {
    match d.args.as_slice() {
        [a] => Ok(a.text.as_str()),
        _ => Err(d.arg_err()),
    }
}

/// The argument of a directive that takes none or one.
pub fn optional_arg(d: &Directive) -> Result<Option<&str>, ConfigError> {
    match d.args.as_slice() {
        [] => Ok(None),
        [a] => Ok(Some(a.text.as_str())),
        _ => Err(d.arg_err()),
    }
}

/// A directive that takes no argument.
pub fn no_args(d: &Directive) -> Result<(), ConfigError> {
    if d.args.is_empty() {
        Ok(())
    } else {
        Err(d.arg_err())
    }
}

/// A directive that takes neither argument nor block (CoreDNS's `if
/// c.NextArg() { return c.ArgErr() }`: the `{` of a block is the
/// unexpected argument, which Caddy words apart). An empty block (`{}`)
/// leaves no trace in the parsed directive and goes unnoticed.
pub fn no_args_or_block(d: &Directive) -> Result<(), ConfigError> {
    no_args(d)?;
    if d.block.is_empty() {
        Ok(())
    } else {
        Err(d.err("Unexpected token '{', expecting argument"))
    }
}

/// An integer argument, with the text of Go's `strconv.Atoi` for anything
/// that is not one of type `T`.
pub fn atoi<T: FromStr>(d: &Directive, s: &str) -> Result<T, ConfigError> {
    s.parse::<T>()
        .map_err(|_| d.err(format!("strconv.Atoi: parsing \"{s}\": invalid syntax")))
}

/// An unsigned 32-bit count, with the text of Go's `strconv.ParseUint(s,
/// 10, 32)` for anything else (forward's `max_fails`, for one).
pub fn parse_uint(d: &Directive, s: &str) -> Result<u32, ConfigError> {
    clusterdns_gocompat::strconv::parse_uint(s, 10, 32)
        .map_err(|e| d.err(e.to_string()))
        .and_then(|n| u32::try_from(n).map_err(|e| d.err(e.to_string())))
}

/// A signed 32-bit integer, with the texts of Go's `strconv.ParseInt(s,
/// 10, 32)`: `invalid syntax` for anything that is not a decimal integer,
/// `value out of range` for one that does not fit (*erratic*'s amounts).
pub fn parse_int32(d: &Directive, s: &str) -> Result<i32, ConfigError> {
    clusterdns_gocompat::strconv::parse_int(s, 10, 32)
        .map_err(|e| d.err(e.to_string()))
        .and_then(|n| i32::try_from(n).map_err(|e| d.err(e.to_string())))
}

/// A record TTL option (`ttl N`) as CoreDNS's *kubernetes* and
/// *k8s_external* read it: `strconv.Atoi`, then 0 to 3600 seconds.
pub fn ttl_0_3600(d: &Directive) -> Result<u32, ConfigError> {
    let Some(a) = d.args.first() else {
        return Err(d.arg_err());
    };
    let t: i64 = atoi(d, &a.text)?;
    u32::try_from(t)
        .ok()
        .filter(|t| *t <= 3600)
        .ok_or_else(|| d.err(format!("ttl must be in range [0, 3600]: {t}")))
}

/// A Go duration argument that may not be negative
/// ([`crate::duration::parse_go`]; the error is Go's text).
pub fn duration(d: &Directive, s: &str) -> Result<Duration, ConfigError> {
    crate::duration::parse_go(s).map_err(|e| d.err(e.to_string()))
}

/// A Go duration argument that may be negative, for the settings where
/// CoreDNS refuses a negative one with a text of its own.
pub fn signed_duration(d: &Directive, s: &str) -> Result<Signed, ConfigError> {
    crate::duration::parse_go_signed(s).map_err(|e| d.err(e.to_string()))
}

/// Zone arguments as CoreDNS's `OriginsFromArgsOrServerBlock` reads
/// them when there are some: normalised, lowercase, bad ones skipped
/// silently.
pub fn origins<'a>(args: impl IntoIterator<Item = &'a str>) -> Vec<Name> {
    args.into_iter()
        .filter_map(|a| clusterdns_corefile::normalize_zones(a).ok())
        .flatten()
        .filter_map(|z| Name::from_ascii(&z).ok().map(|n| n.to_lowercase()))
        .collect()
}

/// A file argument: absolute as given, else under the Corefile's
/// directory `dir`.
pub fn config_path(dir: &Path, p: &str) -> std::path::PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        dir.join(p)
    }
}

/// A file argument as CoreDNS's plugins take it under *root*: a relative
/// `p` joined to `root` (Go's `filepath.Join`, which also cleans it) when
/// `root` is set and not empty, else `p` unchanged. This is the text
/// CoreDNS's messages show; [`config_path`] then anchors it.
pub fn rooted(root: Option<&str>, p: &str) -> String {
    match root {
        Some(r) if !r.is_empty() && !Path::new(p).is_absolute() => {
            clusterdns_gocompat::filepath::join(&[r, p])
        }
        _ => p.to_string(),
    }
}

/// A zone argument, normalised as CoreDNS's `plugin.Host(s).NormalizeExact()`
/// (one zone; a CIDR that expands to several is an error).
pub fn zone(d: &Directive, s: &str) -> Result<Name, ConfigError> {
    let z = normalize_zone(s).map_err(|e| d.err(e))?;
    Name::from_ascii(&z).map_err(|e| d.err(format!("{s}: {e}")))
}

/// The zones a plugin serves, as CoreDNS's `plugin.OriginsFromArgsOrServerBlock`:
/// its zone arguments ([`origins`]) if it has any, else the server block's
/// zones (`block`, from [`crate::SetupCtx::zones`]).
pub fn origins_or_block(args: &[&str], block: &[String]) -> Vec<Name> {
    if args.is_empty() {
        origins(block.iter().map(String::as_str))
    } else {
        origins(args.iter().copied())
    }
}

/// The zones of a `fallthrough [ZONES...]` line, as CoreDNS's
/// `fall.F.SetZonesFromArgs`: every name (the root) without arguments.
pub fn fall_zones(args: &[&str]) -> Vec<Name> {
    if args.is_empty() {
        vec![Name::root()]
    } else {
        origins(args.iter().copied())
    }
}
