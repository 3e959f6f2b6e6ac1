#![doc = include_str!("README.md")]

use clusterdns_contract::{PluginDef, SetupCtx};
use clusterdns_corefile::{ConfigError, Directive, Token};

/// Registration of *root*.
pub const DEF: PluginDef = PluginDef {
    name: "root",
    setup,
};

fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    let Some(tok) = read_path(dirs)? else {
        return Ok(());
    };
    let root = tok.text.clone();
    // CoreDNS stats the path once, after reading every line. A missing
    // directory may appear later, so it is a warning; any other failure
    // (a file on the way, a name too long) refuses the Corefile. Go's
    // `os.Stat("")` finds nothing, while our empty path would name the
    // Corefile's directory: say "missing" without asking.
    let found = if root.is_empty() {
        Err(std::io::Error::from(std::io::ErrorKind::NotFound))
    } else {
        std::fs::metadata(clusterdns_contract::parse::config_path(
            ctx.config_dir,
            &root,
        ))
    };
    match found {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            clusterdns_contract::warning!("root", "Root path does not exist: {}", root);
        }
        Err(e) => {
            return Err(tok.err(format!(
                "unable to access root path '{root}': {}",
                clusterdns_gocompat::os::stat_error(&root, &e)
            )));
        }
    }
    ctx.root = Some(root);
    Ok(())
}

/// The path CoreDNS's setup ends with, walking the tokens of every `root`
/// line of the block as Caddy's dispenser does: at each line start
/// (`Next`) it takes the next token as the path if it is on the same line
/// (`NextArg`), else fails with `ArgErr`; the walk goes on from the token
/// after the path, whatever it is. So `root A` gives A, `root A B C`
/// gives C, `root A B` fails after B, and the last `root` line wins. The
/// token returned is also where CoreDNS places its stat error.
fn read_path<'a>(dirs: &[&'a Directive]) -> Result<Option<&'a Token>, ConfigError> {
    let mut toks: Vec<Tok<'a>> = Vec::new();
    for d in dirs {
        flatten(d, &mut toks);
    }
    let mut path = None;
    let mut i = 0;
    while i < toks.len() {
        let at = &toks[i];
        match toks.get(i + 1) {
            Some(next) if next.line() == at.line() && next.file() == at.file() => {
                path = Some(i + 1);
                i += 2;
            }
            _ => return Err(arg_err(at)),
        }
    }
    match path.map(|p| &toks[p]) {
        Some(Tok::Word(t)) => Ok(Some(t)),
        // A brace ends the walk only if `}` shares a line with the word
        // before it, which the parser's lines do not let us see; CoreDNS
        // would take the brace as the path, we refuse it.
        Some(brace) => Err(arg_err(brace)),
        None => Ok(None),
    }
}

/// Caddy's `ArgErr` at the token the dispenser stands on.
fn arg_err(at: &Tok<'_>) -> ConfigError {
    match at {
        Tok::Word(t) => t.err(format!(
            "Wrong argument count or unexpected line ending after '{}'",
            t.text
        )),
        Tok::Open(t, _) => t.err("Unexpected token '{', expecting argument"),
        Tok::Close(t, line) => ConfigError {
            file: t.file.clone(),
            line: *line,
            msg: "Wrong argument count or unexpected line ending after '}'".into(),
        },
    }
}

/// A token of the dispenser's stream: a word of the Corefile, or a brace
/// the parser consumed (kept as the token it follows and its line).
enum Tok<'a> {
    Word(&'a Token),
    Open(&'a Token, u32),
    Close(&'a Token, u32),
}

impl Tok<'_> {
    fn line(&self) -> u32 {
        match self {
            Tok::Word(t) => t.line,
            Tok::Open(_, l) | Tok::Close(_, l) => *l,
        }
    }

    fn file(&self) -> &std::path::Path {
        match self {
            Tok::Word(t) | Tok::Open(t, _) | Tok::Close(t, _) => &t.file,
        }
    }
}

/// The tokens Caddy gives a directive: its words, then `{`, the block's
/// lines and `}`. The parser keeps no place for the braces: `{` ends the
/// directive's line, and `}` is taken to be alone on the line after the
/// block's last, as it is written in practice. An empty block leaves no
/// trace at all (README, Differences from CoreDNS).
fn flatten<'a>(d: &'a Directive, out: &mut Vec<Tok<'a>>) {
    out.push(Tok::Word(&d.name));
    out.extend(d.args.iter().map(Tok::Word));
    if let Some(last_line) = d.block.last().map(last_line) {
        let open_at = d.args.last().unwrap_or(&d.name);
        out.push(Tok::Open(open_at, open_at.line));
        for l in &d.block {
            flatten(l, out);
        }
        out.push(Tok::Close(open_at, last_line + 1));
    }
}

/// The line of the last token of `d`, its block included.
fn last_line(d: &Directive) -> u32 {
    match d.block.last() {
        Some(l) => last_line(l) + 1,
        None => d.args.last().unwrap_or(&d.name).line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{setup, setup_err, setup_in};

    fn root_of(corefile: &str) -> Option<String> {
        setup(DEF, corefile).unwrap().root
    }

    #[test]
    fn takes_the_path_as_corednss_dispenser_does() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display().to_string();
        assert_eq!(
            root_of(&format!(". {{\n root {d}\n}}")).as_deref(),
            Some(d.as_str())
        );
        // The last line wins, and of three words the third.
        assert_eq!(
            root_of(&format!(". {{\n root /nonexistent\n root {d}\n}}")).as_deref(),
            Some(d.as_str())
        );
        assert_eq!(
            root_of(&format!(". {{\n root a b {d}\n}}")).as_deref(),
            Some(d.as_str())
        );
        // A relative path is kept as written (`file` anchors it) and
        // checked under the Corefile's directory.
        std::fs::create_dir(dir.path().join("zones")).unwrap();
        let r = setup_in(DEF, ". {\n root zones\n}", dir.path()).unwrap();
        assert_eq!(r.root.as_deref(), Some("zones"));
        // No root line, no root: relative paths stay under the Corefile's
        // directory.
        assert_eq!(
            setup(crate::whoami::DEF, ". {\n whoami\n}").unwrap().root,
            None
        );
    }

    #[test]
    fn a_missing_path_is_accepted_and_adds_no_handler() {
        let r = setup(DEF, ". {\n root /nonexistent/zones\n}").unwrap();
        assert_eq!(r.root.as_deref(), Some("/nonexistent/zones"));
        assert!(r.plugins.is_empty());
        assert_eq!(root_of(". {\n root \"\"\n}").as_deref(), Some(""));
    }

    #[test]
    fn refusals_read_as_corednss() {
        let arg = |w: &str| format!("Wrong argument count or unexpected line ending after '{w}'");
        for (corefile, line, msg) in [
            (". {\n root\n}", 2, arg("root")),
            (". {\n root a b\n}", 2, arg("b")),
            (". {\n root /tmp\n root\n}", 3, arg("root")),
            (". {\n root {\n  zones\n }\n}", 3, arg("zones")),
            (
                ". {\n root zones {\n  x\n }\n}",
                2,
                "Unexpected token '{', expecting argument".to_string(),
            ),
            (
                ". {\n root /etc/passwd/x\n}",
                2,
                "unable to access root path '/etc/passwd/x': stat /etc/passwd/x: not a directory"
                    .to_string(),
            ),
            (
                ". {\n root /tmp\n root /etc/passwd/x\n}",
                3,
                "unable to access root path '/etc/passwd/x': stat /etc/passwd/x: not a directory"
                    .to_string(),
            ),
        ] {
            let e = setup(DEF, corefile)
                .err()
                .unwrap_or_else(|| panic!("{corefile:?}"));
            assert_eq!(
                (e.line, e.msg.as_str()),
                (line, msg.as_str()),
                "{corefile:?}"
            );
        }
        let long = "x".repeat(300);
        assert_eq!(
            setup_err(DEF, &format!(". {{\n root /{long}\n}}")),
            format!("unable to access root path '/{long}': stat /{long}: file name too long")
        );
    }
}
