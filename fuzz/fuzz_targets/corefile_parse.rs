//! Feeds arbitrary text to the Corefile parser and the key parser and checks that:
//! - nothing panics (imports point at a directory that does not exist; an input with a `/`
//!   after an `import` is skipped: it could name the host's own files, and reading and lexing
//!   `/etc/*` took most of a campaign's time without testing the parser more; file imports
//!   are tested with files of their own in crates/corefile's tests);
//! - parsing is deterministic;
//! - every block has keys, and every key either parses or gives a located error.
#![no_main]

use std::collections::HashMap;
use std::path::Path;

use clusterdns_corefile::{normalize_zones, parse_key, parse_str};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Some(at) = text.find("import")
        && text[at..].contains('/')
    {
        return;
    }
    let env = HashMap::from([("A".to_string(), "x }".to_string())]);
    let main = Path::new("/nonexistent-clusterdns-fuzz/Corefile");
    let first = parse_str(&text, main, &env);
    assert_eq!(first, parse_str(&text, main, &env));
    if let Ok(corefile) = first {
        for block in &corefile.blocks {
            assert!(!block.keys.is_empty());
            for key in &block.keys {
                if let Err(e) = parse_key(key) {
                    assert_eq!(e.line, key.line);
                }
            }
        }
    }
    let _ = normalize_zones(&text);
});
