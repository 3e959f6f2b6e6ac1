//! The search list of a `resolv.conf(5)` file, read as miekg/dns's
//! `ClientConfigFromFile` reads it (*autopath*'s file argument, and
//! *kubernetes*'s host search domains for *autopath*).

use std::path::Path;

use clusterdns_wire::Name;

/// The search domains of the `resolv.conf`-like file at `path`, as
/// written (not normalised): the last `search` line's words, or the
/// last `domain` line's one word, whichever comes later.
/// The error is the OS's text as Go prints it (`no such file or
/// directory`), for the caller's `open NAME: ` prefix.
pub fn resolv_search(path: &Path) -> Result<Vec<String>, String> {
    let text = std::fs::read(path).map_err(|e| go_os_text(&e))?;
    Ok(search_of(&String::from_utf8_lossy(&text)))
}

/// The search domains of `resolv.conf` text (see [`resolv_search`]).
pub fn search_of(text: &str) -> Vec<String> {
    let mut search = Vec::new();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        match f.next() {
            Some("domain") => search = f.next().map(str::to_owned).into_iter().collect(),
            Some("search") => search = f.map(str::to_owned).collect(),
            _ => {}
        }
    }
    search
}

/// Search domains as CoreDNS normalises them (`plugin.Zones.Normalize`:
/// lowercase, fully qualified); ones that are no domain name are skipped.
pub fn search_names(search: &[String]) -> Vec<Name> {
    search
        .iter()
        .filter_map(|s| {
            let n = if s.ends_with('.') {
                Name::from_ascii(s)
            } else {
                Name::from_ascii(&format!("{s}."))
            };
            n.ok().map(|n| n.to_lowercase())
        })
        .collect()
}

/// An OS error as Go prints it: the C library's message, lowercased
/// first letter, without Rust's ` (os error N)`.
fn go_os_text(e: &std::io::Error) -> String {
    let text = e.to_string();
    let text = text
        .find(" (os error ")
        .map_or(text.as_str(), |i| &text[..i]);
    let mut chars = text.chars();
    chars
        .next()
        .map(|c| c.to_lowercase().chain(chars).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_search_or_domain_line_wins() {
        assert_eq!(
            search_of("nameserver 1.1.1.1\nsearch a.b c\n"),
            ["a.b", "c"]
        );
        assert_eq!(search_of("search a b\ndomain d e\n"), ["d"]);
        assert_eq!(search_of("domain d\nsearch\n"), Vec::<String>::new());
        assert_eq!(search_of("domain\n"), Vec::<String>::new());
        assert_eq!(search_of("# search x\n  search  y  \n"), ["y"]);
    }

    #[test]
    fn missing_file_reads_as_go() {
        let e = resolv_search(Path::new("/nonexistent/resolv.conf")).unwrap_err();
        assert_eq!(e, "no such file or directory");
        let n = search_names(&["A.b".into(), "c.".into(), "..".into()]);
        let n: Vec<String> = n.iter().map(ToString::to_string).collect();
        assert_eq!(n, ["a.b.", "c."]);
    }
}
