//! Random bytes and random token soup never panic, and what parses has sane structure.

use std::collections::HashMap;
use std::path::Path;

use clusterdns_corefile::{Directive, normalize_zones, parse_key, parse_str};

/// xorshift64*: small, seeded, good enough to shuffle inputs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Pieces that exercise every lexer and parser path, including imports and env references.
const SOUP: &[&str] = &[
    "{",
    "}",
    "{ ",
    " }",
    "\n",
    "\n",
    "\n",
    " ",
    " ",
    "\t",
    "\r\n",
    "#",
    "\"",
    "\\\"",
    "\\",
    ",",
    ".:53",
    "example.org,",
    "(s)",
    "(t)",
    "import",
    "import s",
    "import t",
    "s",
    "t",
    "import *.none",
    "import missing",
    "log",
    "forward",
    ". 1.1.1.1",
    "{$A}",
    "{%A%}",
    "{$",
    "{$}",
    "\u{feff}",
    "\u{a0}",
    "é",
    "10.0.0.0/27",
    "dns://",
    ":",
    "::/0",
    "\"\"",
];

fn check(text: &str, env: &HashMap<String, String>) {
    // The main file is in a directory that does not exist, so file imports find nothing.
    let Ok(corefile) = parse_str(
        text,
        Path::new("/nonexistent-clusterdns-test/Corefile"),
        env,
    ) else {
        return;
    };
    // Structural braces never end up as names (substitution may produce one, legitimately).
    fn walk(d: &Directive, text: &str) {
        let substituted = text.contains("{$") || text.contains("{%");
        let brace = d.name.text == "{" || d.name.text == "}";
        assert!(substituted || !brace, "brace as a name: {d:?} in {text:?}");
        d.block.iter().for_each(|s| walk(s, text));
    }
    for block in &corefile.blocks {
        assert!(!block.keys.is_empty());
        for key in &block.keys {
            let _ = parse_key(key);
            assert!(key.line >= 1);
        }
        block.directives.iter().for_each(|d| walk(d, text));
    }
}

#[test]
fn random_bytes_never_panic() {
    let env = HashMap::from([("A".to_string(), "x y".to_string())]);
    let mut rng = Rng(0x5eed_c0de_f00d_0001);
    for _ in 0..3000 {
        let len = rng.below(200);
        let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        check(&String::from_utf8_lossy(&bytes), &env);
        let _ = normalize_zones(&String::from_utf8_lossy(&bytes));
    }
}

#[test]
fn token_soup_never_panics() {
    // Values with spaces and braces stay inside their token (see `check`).
    let env = HashMap::from([("A".to_string(), " x } ".to_string())]);
    let mut rng = Rng(0x5eed_c0de_f00d_0002);
    for _ in 0..5000 {
        let len = rng.below(60);
        let text: String = (0..len).map(|_| SOUP[rng.below(SOUP.len())]).collect();
        check(&text, &env);
    }
}

#[test]
fn zone_soup_never_panics() {
    let parts = [
        "1", "0", ".", ":", "/", "::", "ff", "255", "129", "a", "\\", "\\0", "-", "+",
    ];
    let mut rng = Rng(0x5eed_c0de_f00d_0003);
    for _ in 0..20_000 {
        let len = rng.below(12);
        let text: String = (0..len).map(|_| parts[rng.below(parts.len())]).collect();
        if let Ok(zones) = normalize_zones(&text) {
            assert!(
                !zones.is_empty() && zones.iter().all(|z| z.ends_with('.')),
                "{text:?}"
            );
        }
    }
}
