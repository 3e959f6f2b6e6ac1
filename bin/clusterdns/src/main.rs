//! The `clusterdns` binary: one module per job, each wiring the libraries
//! together (`serve`, CoreDNS's job; `node_cache`, node-local-dns's;
//! `autoscaler`, cluster-proportional-autoscaler's; `explain`, one query's
//! account for an operator), plus what every job's
//! process shares (`process`: runtime, signals, pidfile). Nothing else lives
//! here.

mod alloc;
mod autoscaler;
mod node_cache;
mod process;
mod serve;

use std::process::ExitCode;

#[global_allocator]
static GLOBAL: alloc::MiMalloc = alloc::MiMalloc;

/// mimalloc v3's index of `mi_option_purge_delay` in `enum mi_option_e` (mimalloc.h); the
/// Rust bindings have no constant for it. Checked by the `purge_delay_index` test.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Keeps the resident set close to what is live, before anything else runs:
///
/// - no transparent huge pages: with them every touched 2 MiB of mimalloc's arena is
///   resident as a whole (figures in BENCHMARKS.md); mimalloc
///   is built without its `madvise(MADV_HUGEPAGE)` (`no_thp`), and `PR_SET_THP_DISABLE`
///   also covers kernels set to THP `always`;
/// - freed pages go back to the OS at once (`purge_delay` 0 instead of 1 s): mimalloc
///   purges only from inside an allocator call, so after the initial Kubernetes lists an
///   idle server kept the list's transient memory resident.
///   The query path does not allocate, so this costs nothing per query.
///   `MIMALLOC_PURGE_DELAY` in the environment still wins.
#[allow(unsafe_code)]
fn tune_memory() {
    // SAFETY: plain integer option of the allocator, set while `main` is the only thread.
    unsafe { libmimalloc_sys::mi_option_set_default(MI_OPTION_PURGE_DELAY, 0) };
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE takes integer arguments and only changes this process's
    // page policy. Failure (old kernel, seccomp) just leaves the default.
    let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
}

/// Raises the soft open-file limit to the hard limit, as Go's runtime does at start (so
/// CoreDNS runs with it): 1024 TCP connections and up to 256 UDP sockets per upstream do not
/// fit the common soft limit of 1024.
#[allow(unsafe_code)]
fn raise_nofile() {
    // SAFETY: getrlimit/setrlimit on a local struct; failure leaves the limit as it was.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            let _ = libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// Go's name for this machine's architecture (`GOARCH`), as CoreDNS
/// prints it after the OS.
fn goarch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        "powerpc64" => "ppc64",
        "loongarch64" => "loong64",
        other => other,
    }
}

fn version_lines() -> String {
    format!(
        "clusterdns-{}\n{}/{}, rustc, {}",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        goarch(),
        option_env!("CLUSTERDNS_COMMIT").unwrap_or("")
    )
}

fn main() -> ExitCode {
    tune_memory();
    raise_nofile();
    // `std::env::args` panics on an argument that is not UTF-8; refuse it
    // as a bad flag instead (Go's flag package takes bytes, but no flag of
    // ours or upstream's has a use for such a value).
    let mut argv = std::env::args_os();
    let argv0 = argv
        .next()
        .map(|a| a.to_string_lossy().into_owned())
        .unwrap_or_else(|| "clusterdns".into());
    let mut args: Vec<String> = Vec::new();
    for a in argv {
        match a.into_string() {
            Ok(a) => args.push(a),
            Err(a) => {
                eprintln!("invalid argument {a:?}: not UTF-8");
                return ExitCode::from(2);
            }
        }
    }
    if let Some(code) = autoscaler::dispatch(&argv0, &args) {
        return code;
    }
    // node-local-dns's DaemonSet runs the image's `node-cache`; ours runs
    // as `clusterdns node-cache` or under that name.
    let name = std::path::Path::new(&argv0)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name == "node-cache" {
        return node_cache::main(&argv0, &args, version_lines());
    }
    if args.first().is_some_and(|a| a == "explain") {
        return clusterdns_server::explain::job::main(
            &argv0,
            &args[1..],
            &clusterdns_plugins::registry(),
            process::runtime,
        );
    }
    if args.first().is_some_and(|a| a == "node-cache") {
        return node_cache::main(&format!("{argv0} node-cache"), &args[1..], version_lines());
    }
    serve::main(&argv0, &args, version_lines())
}

#[cfg(test)]
mod tests {
    /// `MI_OPTION_PURGE_DELAY` names mimalloc's purge delay: the only option whose default
    /// is 1000 (ms). Fails when a mimalloc upgrade renumbers the options.
    #[test]
    #[allow(unsafe_code)]
    fn purge_delay_index() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return;
        }
        // SAFETY: reads an integer option of the allocator.
        let v = unsafe { libmimalloc_sys::mi_option_get(super::MI_OPTION_PURGE_DELAY) };
        assert_eq!(v, 1000);
    }
}
