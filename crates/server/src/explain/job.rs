//! The `explain` job: one name through a Corefile's server blocks, and
//! what decided its answer, for an operator debugging a Pod's lookup.
//!
//! ```text
//! clusterdns explain [-conf Corefile] [-objects dump.yaml | -kubeconfig FILE]
//!                    [-from IP] [-port N] [-tcp] NAME [TYPE]
//! ```
//!
//! The Corefile is set up as `serve` sets it up, nothing is bound, and the
//! query runs through the listener of `-port` (by default the Corefile's one
//! port, else 53) as if it came
//! from `-from` (a Pod's IP: what *autopath*, `isolate` and `zone_aware`
//! look at). The *kubernetes* blocks read `-objects` (what `kubectl get
//! ns,svc,endpointslices,pods[,nodes] -A -o yaml` prints) or the cluster of
//! `-kubeconfig` in place of their own source; without either they use
//! what the Corefile says. `log`, `loop` and `reload` are left out: they
//! change no answer, and would write to stdout, query the listen address
//! or watch the file. Forwarding happens for real. The explanation is all
//! that goes to stdout: log lines go to stderr.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clusterdns_contract::PluginDef;
use clusterdns_contract::Proto;
use clusterdns_contract::metrics::Registry;
use clusterdns_corefile::{Corefile, Directive, Token};

use super::Explanation;
use crate::{ConfigSource, Instance};
use clusterdns_wire::{Class, Header, Message, MessageBuilder, Name, Rtype, Section};

/// How long the *kubernetes* blocks may take to list the cluster.
const SYNC_WAIT: Duration = Duration::from_secs(30);

/// Plugins left out of the set-up Corefile (see the module doc).
const LEFT_OUT: &[&str] = &["log", "loop", "reload"];

/// The command line.
#[derive(Debug, PartialEq, Eq)]
struct Args {
    conf: PathBuf,
    objects: Option<PathBuf>,
    kubeconfig: Option<PathBuf>,
    from: IpAddr,
    /// `-port`; `None`: the Corefile's one port, else 53.
    port: Option<u16>,
    tcp: bool,
    name: String,
    qtype: Rtype,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
enum ArgError {
    #[error("flag needs an argument: -{0}")]
    Missing(String),
    #[error("flag provided but not defined: -{0}")]
    Unknown(String),
    #[error("invalid value {value:?} for flag -{flag}")]
    Invalid { flag: &'static str, value: String },
    #[error("-objects and -kubeconfig are two sources for the same blocks: give one")]
    TwoSources,
    #[error("a name to explain is needed")]
    NoName,
    #[error("unknown query type {0:?}")]
    Type(String),
    #[error("unexpected argument {0:?} after NAME [TYPE]")]
    Extra(String),
}

fn usage(program: &str) -> String {
    format!(
        "Usage: {program} explain [-conf Corefile] [-objects FILE | -kubeconfig FILE] \
         [-from IP] [-port N] [-tcp] NAME [TYPE]\n\
         \x20 -conf string\n\tCorefile to load (default \"Corefile\")\n\
         \x20 -objects string\n\tKubernetes objects in YAML for the kubernetes blocks\n\
         \x20 -kubeconfig string\n\tkubeconfig of the cluster for the kubernetes blocks\n\
         \x20 -from string\n\tthe client's address, e.g. a Pod's IP (default \"127.0.0.1\")\n\
         \x20 -port int\n\tthe listener's port (default: the Corefile's one port, else 53)\n\
         \x20 -tcp\n\tas if the query came over TCP\n"
    )
}

fn parse_args(args: &[String]) -> Result<Args, ArgError> {
    let mut a = Args {
        conf: PathBuf::from("Corefile"),
        objects: None,
        kubeconfig: None,
        from: IpAddr::V4(Ipv4Addr::LOCALHOST),
        port: None,
        tcp: false,
        name: String::new(),
        qtype: Rtype::A,
    };
    let mut rest = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let Some(flag) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            rest.push(arg.clone());
            continue;
        };
        let (flag, inline) = match flag.split_once('=') {
            Some((f, v)) => (f, Some(v.to_string())),
            None => (flag, None),
        };
        if flag == "tcp" {
            a.tcp = true;
            continue;
        }
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| ArgError::Missing(flag.to_string()))
        };
        match flag {
            "conf" => a.conf = PathBuf::from(value()?),
            "objects" => a.objects = Some(PathBuf::from(value()?)),
            "kubeconfig" => a.kubeconfig = Some(PathBuf::from(value()?)),
            "from" => {
                let v = value()?;
                a.from = v.parse().map_err(|_| ArgError::Invalid {
                    flag: "from",
                    value: v,
                })?;
            }
            "port" => {
                let v = value()?;
                a.port = Some(v.parse().map_err(|_| ArgError::Invalid {
                    flag: "port",
                    value: v,
                })?);
            }
            other => return Err(ArgError::Unknown(other.to_string())),
        }
    }
    if a.objects.is_some() && a.kubeconfig.is_some() {
        return Err(ArgError::TwoSources);
    }
    let mut rest = rest.into_iter();
    a.name = rest.next().ok_or(ArgError::NoName)?;
    if let Some(t) = rest.next() {
        a.qtype = t.parse().map_err(|_| ArgError::Type(t.clone()))?;
    }
    if let Some(extra) = rest.next() {
        return Err(ArgError::Extra(extra));
    }
    Ok(a)
}

/// Points every *kubernetes* block at `objects` or `kubeconfig` (dropping
/// its own `endpoint`, `kubeconfig`, `tls` and `snapshot` lines) and
/// leaves out [`LEFT_OUT`].
fn edit(corefile: &mut Corefile, objects: Option<&PathBuf>, kubeconfig: Option<&PathBuf>) {
    let source = objects
        .map(|p| ("snapshot", p))
        .or(kubeconfig.map(|p| ("kubeconfig", p)));
    for block in &mut corefile.blocks {
        block
            .directives
            .retain(|d| !LEFT_OUT.contains(&d.name.text.as_str()));
        let Some((option, path)) = source else {
            continue;
        };
        for d in block
            .directives
            .iter_mut()
            .filter(|d| d.name.text == "kubernetes")
        {
            d.block.retain(|l| {
                !matches!(
                    l.name.text.as_str(),
                    "endpoint" | "kubeconfig" | "tls" | "snapshot"
                )
            });
            let at = |text: &str| Token {
                text: text.to_string(),
                ..d.name.clone()
            };
            d.block.push(Directive {
                name: at(option),
                args: vec![at(&path.display().to_string())],
                block: Vec::new(),
            });
        }
    }
}

/// The query `dig NAME TYPE` sends: RD and an OPT of 1232 bytes.
fn query(name: &Name, qtype: Rtype) -> Vec<u8> {
    let mut buf = Vec::new();
    let header = Header {
        id: 0x4c58,
        flags: 0x0100,
        ..Header::default()
    };
    let mut b = MessageBuilder::new(&mut buf, header);
    // A name of at most 255 bytes and an OPT always fit a new message.
    let _ = b.push_question(name, qtype, Class::IN);
    let _ = b.push_opt(1232, false, &[]);
    b.finish();
    buf
}

/// The reply in dig's layout.
fn render_reply(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "no reply: the query is dropped (nothing is sent back)\n".into();
    }
    let Ok(msg) = Message::parse(bytes) else {
        return format!("a reply of {} bytes that does not parse\n", bytes.len());
    };
    let h = msg.header();
    let flags: Vec<&str> = [
        (h.qr(), "qr"),
        (h.aa(), "aa"),
        (h.tc(), "tc"),
        (h.rd(), "rd"),
        (h.ra(), "ra"),
    ]
    .into_iter()
    .filter_map(|(on, f)| on.then_some(f))
    .collect();
    let mut out = format!(
        ";; status: {}, flags: {}; ANSWER: {}, AUTHORITY: {}, ADDITIONAL: {}\n",
        msg.rcode(),
        flags.join(" "),
        h.ancount,
        h.nscount,
        h.arcount
    );
    for section in [Section::Answer, Section::Authority, Section::Additional] {
        let records: Vec<String> = msg
            .section(section)
            .filter(|r| r.rtype != Rtype::OPT)
            .map(|r| match r.to_owned_record(&msg) {
                Ok(rec) => rec.to_string(),
                Err(_) => format!("{}\t{}\t{}\t(undecodable rdata)", r.name, r.ttl, r.rtype),
            })
            .collect();
        if records.is_empty() {
            continue;
        }
        let title = match section {
            Section::Answer => "ANSWER",
            Section::Authority => "AUTHORITY",
            _ => "ADDITIONAL",
        };
        out.push_str(&format!(";; {title} SECTION:\n"));
        for r in records {
            out.push_str(&r);
            out.push('\n');
        }
    }
    out
}

/// The report: block, chain, who answered and why, the reply.
fn render(e: &Explanation, server: &str) -> String {
    let mut out = String::new();
    let Some(zone) = &e.zone else {
        out.push_str(&format!(
            "listener {server}: answered before any server block (unreadable, a class it does \
             not serve, or no block's zone holds the name)\n"
        ));
        out.push_str(&render_reply(&e.reply));
        return out;
    };
    out.push_str(&format!("server block: {zone} on {server}\n"));
    out.push_str(&format!("plugins: {}\n", e.plugins.join(" ")));
    match &e.error {
        Some(err) => out.push_str(&format!(
            "answered by: the server, as {} failed: {err}\n",
            e.answered_by
        )),
        None => out.push_str(&format!("answered by: {}\n", e.answered_by)),
    }
    for (plugin, note) in &e.notes {
        out.push_str(&format!("  {plugin}: {note}\n"));
    }
    out.push_str(&render_reply(&e.reply));
    out
}

/// Runs the job for `args` (after `explain`) with the binary's plugins
/// (`registry`) on the runtime `runtime` makes.
pub fn main(
    program: &str,
    args: &[String],
    registry: &[PluginDef],
    runtime: impl FnOnce() -> std::io::Result<tokio::runtime::Runtime>,
) -> ExitCode {
    if args
        .iter()
        .any(|a| a == "-h" || a == "-help" || a == "--help")
    {
        eprint!("{}", usage(program));
        return ExitCode::SUCCESS;
    }
    let a = match parse_args(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            eprint!("{}", usage(program));
            return ExitCode::from(2);
        }
    };
    let name = match Name::from_ascii(&a.name) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("invalid name {:?}: {e}", a.name);
            return ExitCode::from(2);
        }
    };
    // stdout is the explanation; log lines (a watch failing, a plugin's
    // errors) go beside it on stderr.
    clusterdns_contract::log::to_stderr();
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let code = rt.block_on(run(a, name, registry));
    clusterdns_contract::log::flush();
    code
}

async fn run(a: Args, name: Name, registry: &[PluginDef]) -> ExitCode {
    let source = ConfigSource::File(a.conf.clone());
    let built = Instance::build_edited(
        &source,
        registry,
        a.port.unwrap_or(53),
        Arc::new(Registry::default()),
        &mut |c| edit(c, a.objects.as_ref(), a.kubeconfig.as_ref()),
    );
    let mut instance = match built {
        Ok(i) => i,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    for hook in std::mem::take(&mut instance.shared.on_startup) {
        if let Err(e) = hook() {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    }
    let start = Instant::now();
    loop {
        let waiting = instance.shared.readiness.not_ready();
        if waiting.is_empty() {
            break;
        }
        if start.elapsed() > SYNC_WAIT {
            println!(
                "not ready after {} s: {} (answers below come from what is known so far)",
                SYNC_WAIT.as_secs(),
                waiting.join(", ")
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut ports: Vec<u16> = instance.listeners.iter().map(|l| l.addr.port()).collect();
    ports.sort_unstable();
    ports.dedup();
    let port = match (a.port, ports.as_slice()) {
        (Some(p), _) => p,
        (None, [one]) => *one,
        (None, _) => 53,
    };
    let Some(listener) = instance.listeners.iter().find(|l| l.addr.port() == port) else {
        let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
        eprintln!(
            "no server block listens on port {port} (ports: {}); use -port",
            ports.join(", ")
        );
        return ExitCode::FAILURE;
    };
    let packet = query(&name, a.qtype);
    let proto = if a.tcp { Proto::Tcp } else { Proto::Udp };
    let client = SocketAddr::new(a.from, 40000);
    println!(
        "question: {name} {} from {} over {}",
        a.qtype,
        a.from,
        proto.as_str()
    );
    let e = super::explain(&listener.mux, &packet, client, listener.addr, proto).await;
    print!("{}", render(&e, listener.mux.label.as_str()));
    // No shutdown hooks: they would end the API watches mid-stream and log
    // it; the process exits, and its tasks go with the runtime.
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn flags_and_positionals() {
        let a = parse_args(&args(
            "-conf C -from 10.244.1.5 -port=1053 -tcp web.ns.svc.cluster.local AAAA",
        ))
        .expect("parses");
        assert_eq!(a.conf, PathBuf::from("C"));
        assert_eq!(a.from, "10.244.1.5".parse::<IpAddr>().expect("ip"));
        assert_eq!(a.port, Some(1053));
        assert!(a.tcp);
        assert_eq!(a.name, "web.ns.svc.cluster.local");
        assert_eq!(a.qtype, Rtype::AAAA);
    }

    #[test]
    fn bad_command_lines() {
        assert_eq!(parse_args(&args("")), Err(ArgError::NoName));
        assert_eq!(
            parse_args(&args("-port")),
            Err(ArgError::Missing("port".into()))
        );
        assert_eq!(
            parse_args(&args("-port x a")),
            Err(ArgError::Invalid {
                flag: "port",
                value: "x".into()
            })
        );
        assert_eq!(
            parse_args(&args("-bogus a")),
            Err(ArgError::Unknown("bogus".into()))
        );
        assert_eq!(
            parse_args(&args("a NOPE")),
            Err(ArgError::Type("NOPE".into()))
        );
        assert_eq!(parse_args(&args("a A b")), Err(ArgError::Extra("b".into())));
        assert_eq!(
            parse_args(&args("-objects o -kubeconfig k a")),
            Err(ArgError::TwoSources)
        );
    }
}
