#![doc = include_str!("README.md")]

use std::net::IpAddr;

use clusterdns_contract::{PluginDef, SetupCtx, warning};
use clusterdns_corefile::{ConfigError, Directive, Token};

use crate::pkg::ifaces::{Interface, interfaces};

/// Registration of *bind*.
pub const DEF: PluginDef = PluginDef {
    name: "bind",
    setup,
};

fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    let ifaces = match interfaces() {
        Ok(i) => i,
        Err(e) => {
            warning!(
                "",
                "plugin/bind: failed to get interfaces list, cannot bind by interface name: {e}"
            );
            Vec::new()
        }
    };
    ctx.bind = resolve(dirs, &ifaces)?;
    Ok(())
}

/// The addresses of every `bind` line of a block, each line's `except`
/// applied to that line only, without duplicates.
fn resolve(dirs: &[&Directive], ifaces: &[Interface]) -> Result<Vec<IpAddr>, ConfigError> {
    let mut all: Vec<IpAddr> = Vec::new();
    for d in dirs {
        if d.args.is_empty() {
            return Err(d.err("at least one address or interface name is expected"));
        }
        let mut except: Vec<IpAddr> = Vec::new();
        for line in &d.block {
            match line.name.text.as_str() {
                "except" => {
                    if line.args.is_empty() {
                        return Err(line.err(
                            "at least one address or interface must be given to except subdirective",
                        ));
                    }
                    except.extend(list_ip(&line.args, ifaces)?);
                }
                other => return Err(line.err(format!("invalid option {other:?}"))),
            }
        }
        for ip in list_ip(&d.args, ifaces)? {
            if !except.contains(&ip) && !all.contains(&ip) {
                all.push(ip);
            }
        }
    }
    Ok(all)
}

/// Addresses and interface names to addresses. An interface gives every
/// address it has; IPv6 link-local ones are left out (they need a zone,
/// which a listener address here cannot carry).
fn list_ip(args: &[Token], ifaces: &[Interface]) -> Result<Vec<IpAddr>, ConfigError> {
    let mut out = Vec::new();
    for a in args {
        let matching: Vec<&Interface> = ifaces.iter().filter(|i| i.name == a.text).collect();
        if !matching.is_empty() {
            for i in matching {
                out.extend(i.addrs.iter().copied().filter(|ip| !is_v6_link_local(ip)));
            }
            continue;
        }
        match a.text.parse::<IpAddr>() {
            Ok(ip) => out.push(ip),
            Err(_) => {
                return Err(a.err(format!(
                    "not a valid IP address or interface name: {:?}",
                    a.text
                )));
            }
        }
    }
    Ok(out)
}

fn is_v6_link_local(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V6(v6) => {
            (v6.segments()[0] & 0xffc0) == 0xfe80 || (v6.segments()[0] & 0xff0f) == 0xff02
        }
        IpAddr::V4(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{setup as run_setup, setup_err};

    fn fake() -> Vec<Interface> {
        vec![
            Interface {
                name: "lo".into(),
                addrs: vec!["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()],
            },
            Interface {
                name: "eth0".into(),
                addrs: vec!["10.0.0.5".parse().unwrap(), "fe80::1".parse().unwrap()],
            },
        ]
    }

    fn resolved(c: &str) -> Result<Vec<String>, String> {
        let owned = crate::testutil::directives(c, "bind");
        let dirs: Vec<&Directive> = owned.iter().collect();
        resolve(&dirs, &fake())
            .map(|v| v.iter().map(ToString::to_string).collect())
            .map_err(|e| e.msg)
    }

    #[test]
    fn addresses_interfaces_and_except() {
        assert_eq!(resolved(". {\n bind 127.0.0.2\n}").unwrap(), ["127.0.0.2"]);
        assert_eq!(resolved(". {\n bind lo\n}").unwrap(), ["127.0.0.1", "::1"]);
        assert_eq!(resolved(". {\n bind eth0\n}").unwrap(), ["10.0.0.5"]);
        assert_eq!(
            resolved(". {\n bind lo eth0 {\n except ::1 10.0.0.5\n }\n}").unwrap(),
            ["127.0.0.1"]
        );
        // Several lines merge; an except applies to its own line only.
        assert_eq!(
            resolved(". {\n bind lo {\n except 127.0.0.1\n }\n bind 127.0.0.1 127.0.0.1\n}")
                .unwrap(),
            ["::1", "127.0.0.1"]
        );
    }

    #[test]
    fn rejects() {
        let cases = [
            (
                ". {\n bind\n}",
                "at least one address or interface name is expected",
            ),
            (
                ". {\n bind nope0\n}",
                "not a valid IP address or interface name: \"nope0\"",
            ),
            (
                ". {\n bind lo {\n except\n }\n}",
                "at least one address or interface must be given to except subdirective",
            ),
            (". {\n bind lo {\n only x\n }\n}", "invalid option \"only\""),
            (
                ". {\n bind lo {\n except 1.2.3\n }\n}",
                "not a valid IP address or interface name: \"1.2.3\"",
            ),
        ];
        for (c, want) in cases {
            assert_eq!(resolved(c).unwrap_err(), want, "{c}");
        }
        assert_eq!(
            setup_err(DEF, ". {\n bind 300.1.1.1\n}"),
            "not a valid IP address or interface name: \"300.1.1.1\""
        );
    }

    #[test]
    fn real_loopback_interface() {
        let ifs = interfaces().unwrap();
        let lo = ifs.iter().find(|i| i.name == "lo").expect("lo exists");
        assert!(lo.addrs.contains(&"127.0.0.1".parse().unwrap()), "{lo:?}");
        let r = run_setup(DEF, ". {\n bind lo {\n except ::1\n }\n}").unwrap();
        let _ = r;
    }
}
