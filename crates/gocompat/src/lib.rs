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
//!
//! It sits below everything else of ours and knows no DNS, so the Corefile
//! crate, the plugins and the agents that are not plugins share one copy.

pub mod cidr;
pub mod filepath;
pub mod flag;
pub mod hex;
pub mod os;
pub mod strconv;
pub mod time;
