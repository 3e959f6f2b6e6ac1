//! The autoscaler's job: `clusterdns autoscaler ARGS…`, or this binary called
//! `cluster-proportional-autoscaler` (the name of upstream's image entrypoint).
//! Everything else is in `clusterdns-autoscaler`, which runs its own loop.

use std::path::Path;
use std::process::ExitCode;

/// Runs the autoscaler when the command line asks for it; `None` for the other jobs.
pub fn dispatch(program: &str, args: &[String]) -> Option<ExitCode> {
    if Path::new(program).file_name() == Some("cluster-proportional-autoscaler".as_ref()) {
        return Some(clusterdns_autoscaler::main(program, args));
    }
    if args.first().is_some_and(|a| a == "autoscaler") {
        let program = format!("{program} autoscaler");
        return Some(clusterdns_autoscaler::main(&program, &args[1..]));
    }
    None
}
