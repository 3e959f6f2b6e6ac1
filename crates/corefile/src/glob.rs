//! The small glob that `import` needs: `*` and `?` in any path component.
//!
//! Like Go's `filepath.Glob`, a pattern without wildcards matches itself when it exists
//! (file or directory), hidden files are not special, and matches are sorted per directory.

use std::path::{Component, Path, PathBuf};

/// Whether `s` contains a wildcard.
pub(crate) fn has_wildcard(s: &str) -> bool {
    s.contains(['*', '?'])
}

/// All existing paths matching `pattern`.
pub(crate) fn expand(pattern: &Path) -> Vec<PathBuf> {
    let mut found = vec![PathBuf::new()];
    for component in pattern.components() {
        let part = component.as_os_str();
        match (component, part.to_str()) {
            (Component::Normal(_), Some(text)) if has_wildcard(text) => {
                found = found
                    .iter()
                    .flat_map(|dir| matching_entries(dir, text))
                    .collect();
            }
            _ => found.iter_mut().for_each(|p| p.push(part)),
        }
    }
    found.retain(|p| p.symlink_metadata().is_ok());
    found
}

fn matching_entries(dir: &Path, pattern: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| matches(pattern, name))
        .collect();
    names.sort();
    names.into_iter().map(|n| dir.join(n)).collect()
}

/// Wildcard match of one path component: `*` is any run of characters, `?` one character.
pub(crate) fn matches(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni) = (0, 0);
    // Where the last `*` was, and how much of `name` it swallowed so far.
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ni));
                pi += 1;
            }
            Some(&c) if c == '?' || c == n[ni] => {
                pi += 1;
                ni += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    pi = sp + 1;
                    ni = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn wildcards() {
        assert!(matches("*.conf", "a.conf"));
        assert!(matches("*.conf", ".conf"));
        assert!(!matches("*.conf", "a.conf.bak"));
        assert!(matches("zone?.db", "zone1.db"));
        assert!(!matches("zone?.db", "zone.db"));
        assert!(matches("a*b?c", "axxbyc"));
        assert!(matches("plain", "plain"));
        assert!(!matches("plain", "plainx"));
    }
}
