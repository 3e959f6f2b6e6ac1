//! The `serve` job: CoreDNS's command line and lifecycle around the
//! server library.

mod flags;

use std::path::PathBuf;
use std::process::ExitCode;

use clusterdns_observe::info;
use clusterdns_server::{ConfigSource, Controller, Options, ServerError};

use crate::process::{Pidfile, Signal, Signals};

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

/// Runs the job for the command line `args` (without the program name,
/// `program`); `version` is what `-version` prints and the banner ends
/// with.
pub fn main(program: &str, args: &[String], version: String) -> ExitCode {
    let f = match flags::parse(args) {
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
        println!("{version}");
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
    let opts = Options {
        source,
        dns_port: f.dns_port,
        registry,
        quiet: f.quiet,
        udp_workers: None,
        banner: version,
        metrics: None,
        inherited: Default::default(),
    };
    let rt = match crate::process::runtime() {
        Ok(rt) => rt,
        Err(e) => return failed(ServerError::Runtime(e)),
    };
    let code = rt.block_on(serve(opts, f.pidfile.map(PathBuf::from)));
    // Log lines are written by a thread of their own: let the last ones
    // out before the process exits.
    clusterdns_observe::log::flush();
    code
}

/// Serves until SIGTERM or SIGINT; the pidfile exists while it serves.
async fn serve(opts: Options, pidfile: Option<PathBuf>) -> ExitCode {
    let (mut controller, control) = clusterdns_server::control();
    let mut server = std::pin::pin!(clusterdns_server::serve(opts, control));
    tokio::select! {
        // Stopped before serving: the Corefile or a listener failed.
        done = &mut server => return exited(done),
        _ = controller.serving() => {}
    }
    let mut signals = match Signals::install() {
        Ok(s) => s,
        Err(e) => return failed(ServerError::Runtime(e)),
    };
    let _pidfile = match pidfile.map(Pidfile::write).transpose() {
        Ok(p) => p,
        Err(e) => {
            return failed(ServerError::Startup(format!(
                "failed to write pidfile: {e}"
            )));
        }
    };
    exited(signals.drive(&controller, server, on_signal).await)
}

/// What CoreDNS logs for a signal and asks of its server.
fn on_signal(signal: Signal, controller: &Controller) {
    match signal {
        Signal::Term => {
            info!("", "SIGTERM: Shutting down servers then terminating");
            controller.shutdown();
        }
        Signal::Int => {
            info!("", "SIGINT: Shutting down");
            controller.shutdown();
        }
        Signal::Usr1 => {
            info!("", "SIGUSR1: Reloading");
            controller.reload();
        }
    }
}

fn exited(done: Result<(), ServerError>) -> ExitCode {
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => failed(e),
    }
}

fn failed(e: ServerError) -> ExitCode {
    eprintln!("{e}");
    ExitCode::FAILURE
}
