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

/// The Corefile used when `-conf` is not given and `./Corefile` does not
/// exist (CoreDNS `DefaultInput`).
fn default_corefile(port: u16) -> String {
    format!(".:{port} {{\n    whoami\n    log\n}}\n")
}

/// Whether a Corefile has nothing but blanks and comments: CoreDNS then
/// serves its default server instead of nothing.
fn is_blank(text: &str) -> bool {
    text.lines()
        .map(str::trim)
        .all(|l| l.is_empty() || l.starts_with('#'))
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

/// `-plugins`: CoreDNS 1.14's bare list, one name a line, sorted, then the
/// empty line of its `fmt.Println`.
fn plugin_list<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let mut names: Vec<&str> = names.collect();
    names.sort_unstable();
    let mut out = String::new();
    for n in names {
        out.push_str(n);
        out.push('\n');
    }
    out.push('\n');
    out
}

/// The Corefile at `path`, or CoreDNS's default server when it holds only
/// blanks and comments. Read errors are left to the server to report.
fn file_source(path: PathBuf, port: u16) -> ConfigSource {
    match std::fs::read_to_string(&path) {
        Ok(text) if is_blank(&text) => ConfigSource::Text {
            name: path,
            text: default_corefile(port),
        },
        _ => ConfigSource::File(path),
    }
}

fn main() -> ExitCode {
    tune_memory();
    raise_nofile();
    let program = std::env::args()
        .next()
        .unwrap_or_else(|| "clusterdns".into());
    let args: Vec<String> = std::env::args().skip(1).collect();
    let f = match flags::parse(&args) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{e}");
            eprint!("{}", flags::usage(&program));
            return ExitCode::from(2);
        }
    };
    if f.help {
        eprint!("{}", flags::usage(&program));
        return ExitCode::SUCCESS;
    }
    if f.version {
        println!("{}", version_lines());
        return ExitCode::SUCCESS;
    }
    let registry = clusterdns_plugins::registry();
    if f.plugins {
        print!("{}", plugin_list(registry.iter().map(|p| p.name)));
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
        Some(p) => file_source(PathBuf::from(p), f.dns_port),
        None if std::path::Path::new("Corefile").exists() => {
            file_source(PathBuf::from("Corefile"), f.dns_port)
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
