#![doc = include_str!("../README.md")]

mod error;
pub mod flags;
mod health;
mod lease;
mod log;
pub mod nodes;
pub mod params;
mod run;

use std::process::ExitCode;

pub use error::{ParamsError, PollError};
pub use run::RunError;

/// The version `--version` prints.
pub const VERSION: &str = concat!("clusterdns-", env!("CARGO_PKG_VERSION"));

/// `clusterdns autoscaler ARGS…` (or the binary called `cluster-proportional-autoscaler`):
/// parses the flags as upstream does, then runs the loop on its own runtime. Exit codes are
/// upstream's: 2 for a bad flag, 1 for bad values or a fatal error, 0 for `--version`/`--help`.
pub fn main(program: &str, args: &[String]) -> ExitCode {
    let f = match flags::parse(args, std::env::var("MY_POD_NAMESPACE").ok()) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{e}");
            eprint!("{}", flags::usage(program));
            return ExitCode::from(2);
        }
    };
    if f.help {
        eprint!("{}", flags::usage(program));
        return ExitCode::SUCCESS;
    }
    if f.version {
        println!("{VERSION}");
        return ExitCode::SUCCESS;
    }
    log::set_verbosity(f.verbosity);
    let targets = match f.validate() {
        Ok(t) => t,
        Err(errors) => {
            for e in errors {
                log::error!("{e}");
            }
            log::error!("failed to validate all input parameters");
            return ExitCode::FAILURE;
        }
    };
    log::info!(
        0,
        "Scaling Namespace: {}, Target: {}",
        f.namespace,
        f.target
    );
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            log::error!("{e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run::run(f, targets)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{e}");
            ExitCode::FAILURE
        }
    }
}
