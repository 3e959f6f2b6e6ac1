//! Go's `regexp/syntax` wording of a pattern error, for the plugins whose
//! CoreDNS counterparts print `error parsing regexp: …` (*rewrite*, *view*,
//! *template*; feature `regexp`). The patterns are compiled by the `regex` crate (RE2's
//! syntax, as Go's), whose errors say the same things in other words: the
//! common ones are worded as Go words them, the rest keep the crate's
//! one-line description.

/// What Go's `regexp.Compile(pattern)` error says after `error parsing
/// regexp: `, e.g. ``missing closing ): `(a` ``.
pub fn describe(pattern: &str, e: &regex::Error) -> String {
    let text = e.to_string();
    let go = |what: &str, frag: &str| format!("{what}: `{frag}`");
    if text.contains("unclosed group") {
        go("missing closing )", pattern)
    } else if text.contains("unopened group") {
        go("unexpected )", pattern)
    } else if text.contains("unclosed character class") {
        // Go quotes the class from its opening bracket on.
        let from = pattern.rfind('[').unwrap_or(0);
        go("missing closing ]", pattern.get(from..).unwrap_or(pattern))
    } else if text.contains("repetition operator missing expression") {
        // Go quotes the operator that has nothing to repeat.
        let op = pattern
            .chars()
            .find(|c| matches!(c, '*' | '+' | '?'))
            .unwrap_or('*');
        go("missing argument to repetition operator", &op.to_string())
    } else {
        text.lines()
            .last()
            .unwrap_or("")
            .trim()
            .trim_start_matches("error: ")
            .to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::describe;

    fn of(pattern: &str) -> String {
        match regex::Regex::new(pattern) {
            Ok(_) => panic!("{pattern} compiled"),
            Err(e) => describe(pattern, &e),
        }
    }

    /// Others keep the crate's description, on one line.
    #[test]
    fn others_on_one_line() {
        let d = of(r"\p{Nope}");
        assert!(!d.is_empty() && !d.contains('\n'), "{d:?}");
    }
}
