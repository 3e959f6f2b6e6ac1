//! Go's `os` error texts: a failed `os.Stat` prints `stat PATH: TEXT`
//! (`*fs.PathError`), where TEXT is the `syscall.Errno`'s string, and
//! CoreDNS puts that line into some of its setup errors.

/// `os.Stat(path)`'s error as Go prints it, from the error Rust's
/// `std::fs::metadata` gave for the same path.
pub fn stat_error(path: &str, e: &std::io::Error) -> String {
    format!("stat {path}: {}", errno_text(e))
}

/// The text Go's `syscall.Errno` prints for `e`. Go's Linux table is the C
/// library's `strerror` with the first letter in lower case ("not a
/// directory", "file name too long"), which is what Rust's text for a raw
/// OS error starts with. A NUL in the path never reaches the system in
/// either language: Go refuses it with `EINVAL`.
pub fn errno_text(e: &std::io::Error) -> String {
    let Some(code) = e.raw_os_error() else {
        return match e.kind() {
            std::io::ErrorKind::InvalidInput => "invalid argument".to_string(),
            _ => e.to_string(),
        };
    };
    let text = std::io::Error::from_raw_os_error(code).to_string();
    // Rust appends " (os error N)" to the C text.
    let text = text
        .strip_suffix(&format!(" (os error {code})"))
        .unwrap_or(&text);
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}
