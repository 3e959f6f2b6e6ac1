//! The `clusterdns` binary: parses CoreDNS's command line, then hands the
//! Corefile and the compiled-in plugins to the server. Nothing else lives
//! here.

mod alloc;
mod flags;

use std::path::PathBuf;
use std::process::ExitCode;

use clusterdns_server::{ConfigSource, RunOptions};

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

/// The Corefile used when `-conf` is not given and `./Corefile` does not
/// exist (CoreDNS `DefaultInput`).
fn default_corefile(port: u16) -> String {
    format!(".:{port} {{\n    whoami\n    log\n}}\n")
}

fn version_lines() -> String {
    format!(
        "clusterdns-{}\n{}/{}, rustc, {}",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        std::env::consts::ARCH,
        option_env!("CLUSTERDNS_COMMIT").unwrap_or("")
    )
}

fn main() -> ExitCode {
    tune_memory();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let f = match flags::parse(&args) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{e}");
            eprintln!("{}", flags::USAGE);
            return ExitCode::from(2);
        }
    };
    if f.help {
        eprintln!("{}", flags::USAGE);
        return ExitCode::SUCCESS;
    }
    if f.version {
        println!("{}", version_lines());
        return ExitCode::SUCCESS;
    }
    let registry = clusterdns_plugins::registry();
    if f.plugins {
        let mut names: Vec<&str> = registry.iter().map(|p| p.name).collect();
        names.sort_unstable();
        let mut out = String::from(
            "Server types:\n  dns\n\nCaddyfile loaders:\n  flag\n  default\n\nOther plugins:\n",
        );
        for n in names {
            out.push_str("  dns.");
            out.push_str(n);
            out.push('\n');
        }
        print!("{out}");
        return ExitCode::SUCCESS;
    }
    let source = match f.conf {
        Some(p) if p == "stdin" => {
            let mut text = String::new();
            if let Err(e) = std::io::Read::read_to_string(&mut std::io::stdin(), &mut text) {
                eprintln!("unable to read Corefile from stdin: {e}");
                return ExitCode::FAILURE;
            }
            ConfigSource::Text {
                name: PathBuf::from("stdin"),
                text,
            }
        }
        Some(p) => ConfigSource::File(PathBuf::from(p)),
        None if std::path::Path::new("Corefile").exists() => {
            ConfigSource::File(PathBuf::from("Corefile"))
        }
        None => ConfigSource::Text {
            name: PathBuf::from("Corefile"),
            text: default_corefile(f.dns_port),
        },
    };
    let opts = RunOptions {
        source,
        dns_port: f.dns_port,
        registry,
        pidfile: f.pidfile.map(PathBuf::from),
        quiet: f.quiet,
        udp_workers: None,
        banner: version_lines(),
    };
    match clusterdns_server::run(opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
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
