//! Go's behaviour, where clusterdns must match it to the letter because the
//! programs it replaces are written in Go: what they accept, what they
//! refuse and the words they refuse it with.
//!
//! - `strconv`: `ParseBool`, `ParseInt`, `ParseUint` and `Quote`, with
//!   `strconv.NumError`'s texts.
//! - `flag`: a command line declared as a table of flags, parsed as Go's
//!   `flag` package (`flag::parse`) or spf13/pflag (`flag::parse_pflag`)
//!   parses it, and the usage text each prints.
//! - `time`: `time.ParseDuration` and `Duration.String`.
//! - `cidr`: `net.ParseCIDR`.
//! - `hex`: `encoding/hex`'s `DecodeString`.
//! - `filepath`: `path/filepath`'s `Clean` and `Join` (Unix).
//! - `os`: the texts of `os.Stat`'s errors.
//! - `regexp` (feature `regexp`): `regexp.Compile`'s error texts for a
//!   pattern the `regex` crate refused.
//!
//! Each is tested against Go itself: `tests/go_outputs.tsv` holds what
//! Go returned for every input there, written by the rig's Go program
//! `gocompat-oracle` (`scripts/rig.d/gocompat`), which the test runs again to
//! check the table; `isprint.rs` (which runes `Quote` leaves as they are)
//! is that program's output too.
//!
//! It sits below everything else of ours and knows no DNS, so the Corefile
//! crate, the plugins and the agents that are not plugins share one copy.

pub mod cidr;
pub mod filepath;
pub mod flag;
pub mod hex;
mod isprint;
pub mod os;
#[cfg(feature = "regexp")]
pub mod regexp;
pub mod strconv;
pub mod time;
