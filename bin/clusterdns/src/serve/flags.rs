//! CoreDNS's command line, parsed the way Go's `flag` package does:
//! `-name value`, `-name=value`, `--name`; boolean flags take no value
//! unless written `-name=false`.

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

/// The flags' help, laid out as Go's `flag.PrintDefaults` does.
const DEFAULTS: &str = "  -conf string
    \tCorefile to load (default \"Corefile\")
  -dns.port string
    \tDefault port (default \"53\")
  -p string
    \tDefault port (default \"53\")
  -pidfile string
    \tPath to write pid file
  -plugins
    \tList installed plugins
  -quiet
    \tQuiet mode (no initialization output)
  -version
    \tShow version
";

/// The usage text, as Go's `flag` package prints it for `program`.
pub fn usage(program: &str) -> String {
    format!("Usage of {program}:\n{DEFAULTS}")
}

/// Parses the arguments (without the program name).
pub fn parse(args: &[String]) -> Result<Flags, String> {
    let mut f = Flags {
        dns_port: 53,
        ..Flags::default()
    };
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if a == "--" {
            break;
        }
        let Some(body) = a.strip_prefix("--").or_else(|| a.strip_prefix('-')) else {
            break;
        };
        if body.is_empty() || body.starts_with('-') || body.starts_with('=') {
            return Err(format!("bad flag syntax: {a}"));
        }
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        let value = |i: &mut usize| -> Result<String, String> {
            if let Some(v) = inline.clone() {
                return Ok(v);
            }
            match args.get(*i) {
                Some(v) => {
                    *i += 1;
                    Ok(v.clone())
                }
                None => Err(format!("flag needs an argument: -{name}")),
            }
        };
        let boolean = |v: &Option<String>| -> Result<bool, String> {
            match v.as_deref() {
                None | Some("true") | Some("1") | Some("t") | Some("T") | Some("TRUE")
                | Some("True") => Ok(true),
                Some("false") | Some("0") | Some("f") | Some("F") | Some("FALSE")
                | Some("False") => Ok(false),
                Some(x) => Err(format!(
                    "invalid boolean value \"{x}\" for -{name}: parse error"
                )),
            }
        };
        match name {
            "conf" => f.conf = Some(value(&mut i)?),
            "dns.port" | "p" => {
                let v = value(&mut i)?;
                f.dns_port = v
                    .parse()
                    .map_err(|_| format!("invalid value \"{v}\" for flag -{name}: parse error"))?;
            }
            "pidfile" => f.pidfile = Some(value(&mut i)?),
            "quiet" => f.quiet = boolean(&inline)?,
            "plugins" => f.plugins = boolean(&inline)?,
            "version" => f.version = boolean(&inline)?,
            "h" | "help" => f.help = true,
            _ => return Err(format!("flag provided but not defined: -{name}")),
        }
    }
    Ok(f)
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
