//! CoreDNS's command line, parsed the way Go's `flag` package does:
//! `-name value`, `-name=value`, `--name`; boolean flags take no value
//! unless written `-name=false`.

use clusterdns_gocompat::flag::{self, Flag};

/// The parsed command line.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Flags {
    pub conf: Option<String>,
    pub dns_port: u16,
    pub pidfile: Option<String>,
    pub quiet: bool,
    pub plugins: bool,
    pub version: bool,
    pub help: bool,
}

/// CoreDNS's flags, as `coremain` and `caddy` register them.
const FLAGS: &[Flag] = &[
    // The help names the default that `-conf` itself has not.
    Flag::string("conf", "", "Corefile to load (default \"Corefile\")"),
    Flag::string("dns.port", "53", "Default port").checked(port),
    Flag::string("p", "53", "Default port").checked(port),
    Flag::string("pidfile", "", "Path to write pid file"),
    Flag::bool("plugins", "false", "List installed plugins"),
    Flag::bool("quiet", "false", "Quiet mode (no initialization output)"),
    Flag::bool("version", "false", "Show version"),
];

/// A port, refused as Go refuses a value it cannot set.
fn port(s: &str) -> Result<(), String> {
    s.parse::<u16>()
        .map(drop)
        .map_err(|_| "parse error".to_owned())
}

/// The usage text, as Go's `flag` package prints it for `program`.
pub fn usage(program: &str) -> String {
    flag::usage(program, FLAGS)
}

/// Parses the arguments (without the program name); the error is Go's.
pub fn parse(args: &[String]) -> Result<Flags, String> {
    let help = Flags {
        help: true,
        ..Flags::default()
    };
    let v = match flag::parse(FLAGS, args) {
        Ok(v) => v,
        Err(e) => return e.message().map_or(Ok(help), Err),
    };
    let text = |name: &str| Some(v.get(name).to_owned()).filter(|_| v.is_set(name));
    Ok(Flags {
        conf: text("conf"),
        // Checked when set; the default is a port too.
        dns_port: v.get_shared(&["dns.port", "p"]).parse().unwrap_or(53),
        pidfile: text("pidfile"),
        quiet: v.bool("quiet"),
        plugins: v.bool("plugins"),
        version: v.bool("version"),
        help: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Flags, String> {
        parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn go_flag_forms() {
        let f = p(&[
            "-conf",
            "/etc/coredns/Corefile",
            "-dns.port=1053",
            "--quiet",
            "-pidfile",
            "/run/x.pid",
        ])
        .unwrap();
        assert_eq!(f.conf.as_deref(), Some("/etc/coredns/Corefile"));
        assert_eq!(f.dns_port, 1053);
        assert!(f.quiet);
        assert_eq!(f.pidfile.as_deref(), Some("/run/x.pid"));
        assert_eq!(p(&["-p", "5353"]).unwrap().dns_port, 5353);
        assert!(!p(&["-quiet=false"]).unwrap().quiet);
        assert!(p(&["-version"]).unwrap().version);
    }

    #[test]
    fn errors_like_go() {
        assert_eq!(
            p(&["-bogus"]).unwrap_err(),
            "flag provided but not defined: -bogus"
        );
        assert_eq!(p(&["-conf"]).unwrap_err(), "flag needs an argument: -conf");
        assert!(
            p(&["-dns.port", "x"])
                .unwrap_err()
                .contains("invalid value")
        );
        assert!(
            p(&["-quiet=maybe"])
                .unwrap_err()
                .contains("invalid boolean")
        );
    }
}
