//! The `clusterdns` binary: parses CoreDNS's command line, then hands the
//! Corefile and the compiled-in plugins to the server. Nothing else lives
//! here.

mod flags;

use std::path::PathBuf;
use std::process::ExitCode;

use clusterdns_server::{ConfigSource, RunOptions};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
