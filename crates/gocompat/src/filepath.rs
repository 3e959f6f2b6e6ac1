//! Go's `path/filepath` on Unix: `Clean` and `Join`. CoreDNS joins a
//! plugin's relative file argument to the *root* directory with `Join`,
//! and the joined, cleaned text is what its messages show.

/// `filepath.Clean(path)`: the shortest path naming the same file by
/// lexical processing alone (repeated `/` made one, `.` dropped, `..`
/// taken back over the element before it, `..` at the root dropped);
/// `"."` for an empty result.
pub fn clean(path: &str) -> String {
    let p = path.as_bytes();
    if p.is_empty() {
        return ".".to_string();
    }
    let rooted = p[0] == b'/';
    let mut out: Vec<u8> = Vec::with_capacity(p.len());
    // `dotdot` is where `..` may no longer back up: after the root's `/`
    // or after `..` elements that a relative path keeps.
    let mut dotdot = 0;
    if rooted {
        out.push(b'/');
        dotdot = 1;
    }
    let mut r = 0;
    let at = |i: usize| p.get(i).copied();
    while r < p.len() {
        let end = |i: usize| i == p.len() || p[i] == b'/';
        if p[r] == b'/' || (p[r] == b'.' && end(r + 1)) {
            r += 1;
        } else if p[r] == b'.' && at(r + 1) == Some(b'.') && end(r + 2) {
            r += 2;
            if out.len() > dotdot {
                // Back over the last element and the `/` before it
                // (stopping at `dotdot`), as Go's `out.w--` loop does.
                while let Some(c) = out.pop() {
                    if c == b'/' || out.len() <= dotdot {
                        break;
                    }
                }
            } else if !rooted {
                if !out.is_empty() {
                    out.push(b'/');
                }
                out.extend_from_slice(b"..");
                dotdot = out.len();
            }
        } else {
            if (rooted && out.len() != 1) || (!rooted && !out.is_empty()) {
                out.push(b'/');
            }
            while r < p.len() && p[r] != b'/' {
                out.push(p[r]);
                r += 1;
            }
        }
    }
    if out.is_empty() {
        return ".".to_string();
    }
    // Only whole elements of a `&str` were copied or removed, at ASCII
    // separators, so the bytes are still UTF-8.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// `filepath.Join(elems...)`: the non-empty elements joined with `/` and
/// cleaned; `""` when every element is empty.
pub fn join(elems: &[&str]) -> String {
    let parts: Vec<&str> = elems.iter().copied().filter(|e| !e.is_empty()).collect();
    if parts.is_empty() {
        return String::new();
    }
    clean(&parts.join("/"))
}
