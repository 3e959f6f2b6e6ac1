//! `import` of files and globs, from a temporary directory; and the expansion limits.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use clusterdns_corefile::{ConfigError, Corefile, parse_file, parse_str};

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    let dir = path.parent().expect("a file name");
    fs::create_dir_all(dir)
        .and_then(|()| fs::write(&path, text))
        .expect("write fixture");
    path
}

fn parse(path: &Path) -> Result<Corefile, ConfigError> {
    parse_file(path, &HashMap::new())
}

/// `name args` of each directive of block `i`.
fn lines(corefile: &Corefile, i: usize) -> Vec<String> {
    let block = &corefile.blocks[i];
    block
        .directives
        .iter()
        .map(|d| {
            format!(
                "{} {}",
                d.name.text,
                d.arg_texts().collect::<Vec<_>>().join(" ")
            )
        })
        .collect()
}

#[test]
fn files_globs_and_relative_paths() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fs::canonicalize(tmp.path()).unwrap();
    let main = write(
        &dir,
        "Corefile",
        "(snip) {\n    log\n}\n.:53 {\n    import plugins/errors.conf\n    import snip\n    forward . 1.1.1.1 {\n        import opts\n    }\n}\nimport conf.d/*.server\n",
    );
    // Relative to the importing file's directory: plugins/errors.conf imports plugins/more.
    write(&dir, "plugins/errors.conf", "errors\nimport more\n");
    write(&dir, "plugins/more", "\n\ncache 30\n");
    write(&dir, "opts", "max_fails 3\n");
    write(&dir, "conf.d/b.server", "b.example {\n    whoami\n}\n");
    write(
        &dir,
        "conf.d/a.server",
        "a.example {\n    import ../opts\n}\n",
    );
    write(&dir, "conf.d/ignored.txt", "garbage {\n");

    let corefile = parse(&main).unwrap();
    assert_eq!(
        lines(&corefile, 0),
        ["errors ", "cache 30", "log ", "forward . 1.1.1.1"]
    );
    let forward = &corefile.blocks[0].directives[3];
    assert_eq!(forward.block[0].name.text, "max_fails");
    // Glob matches come in sorted order.
    let keys: Vec<_> = corefile
        .blocks
        .iter()
        .map(|b| b.keys[0].text.as_str())
        .collect();
    assert_eq!(keys, [".:53", "a.example", "b.example"]);
    assert_eq!(lines(&corefile, 1), ["max_fails 3"]);

    // Imported tokens keep their absolute file and own line.
    let cache = &corefile.blocks[0].directives[1].name;
    assert_eq!(
        (&*cache.file, cache.line),
        (dir.join("plugins/more").as_path(), 3)
    );
    assert_eq!(
        &*corefile.blocks[0].directives[0].name.file,
        dir.join("plugins/errors.conf")
    );
    assert_eq!(&*corefile.blocks[0].keys[0].file, main.as_path());

    // Every file read, once, main first.
    let files: Vec<_> = corefile
        .files
        .iter()
        .map(|f| f.strip_prefix(&dir).unwrap().to_str().unwrap())
        .collect();
    assert_eq!(
        files,
        [
            "Corefile",
            "plugins/errors.conf",
            "plugins/more",
            "opts",
            "conf.d/a.server",
            "conf.d/b.server"
        ]
    );
}

#[test]
fn absolute_paths_question_mark_and_snippets_from_files() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fs::canonicalize(tmp.path()).unwrap();
    write(&dir, "zone1.conf", "(fromfile) {\n    whoami\n}\n");
    let text = format!(
        "import {}/zone?.conf\n. {{\n    import fromfile\n}}\n",
        dir.display()
    );
    // parse_str with a relative name: an absolute import does not depend on it.
    let corefile = parse_str(&text, Path::new("Corefile"), &HashMap::new()).unwrap();
    assert_eq!(lines(&corefile, 0), ["whoami "]);

    // A snippet name wins over a file of the same name.
    write(&dir, "fromfile", "errors\n");
    let main = write(&dir, "Corefile", &text);
    assert_eq!(lines(&parse(&main).unwrap(), 0), ["whoami "]);
}

#[test]
fn import_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fs::canonicalize(tmp.path()).unwrap();
    fs::create_dir(dir.join("sub")).unwrap();
    let cases = [
        (
            "import sub\n",
            1,
            format!(
                "Could not import {}: is a directory",
                dir.join("sub").display()
            ),
        ),
        (
            ". {\n    import missing\n}\n",
            2,
            "File to import not found: missing".to_string(),
        ),
        (
            "import self.conf\n",
            1,
            format!(
                "Import cycle: {} imports itself",
                dir.join("self.conf").display()
            ),
        ),
        (
            "import ping.conf\n",
            1,
            format!(
                "Import cycle: {} imports itself",
                dir.join("ping.conf").display()
            ),
        ),
    ];
    write(&dir, "self.conf", "import self.conf\n");
    write(&dir, "ping.conf", "import pong.conf\n");
    write(&dir, "pong.conf", "import ping.conf\n");
    for (text, line, msg) in cases {
        let main = write(&dir, "Corefile", text);
        let err = parse(&main).expect_err(text);
        assert_eq!((err.line, err.msg), (line, msg), "{text}");
    }
    // The cycle is reported where the repeated import is written.
    let err = parse(&write(&dir, "Corefile", "import ping.conf\n")).unwrap_err();
    assert_eq!(&*err.file, dir.join("pong.conf"));

    // Importing the same file twice, one after the other, is fine.
    write(&dir, "log.conf", "log\n");
    let main = write(
        &dir,
        "Corefile",
        ". {\n    import log.conf\n    import log.conf\n}\n",
    );
    assert_eq!(lines(&parse(&main).unwrap(), 0), ["log ", "log "]);

    // The main file itself must exist and be a file.
    assert!(
        parse(&dir.join("nope"))
            .unwrap_err()
            .msg
            .contains("No such file")
    );
    assert_eq!(parse(&dir.join("sub")).unwrap_err().msg, "is a directory");
}

#[test]
fn snippet_expansion_limit() {
    // Each level imports the one below ten times: 11_111 expansions in all.
    let mut text = String::from("(l0) {\n    x\n}\n");
    for level in 1..=4 {
        text.push_str(&format!("(l{level}) {{\n"));
        text.push_str(&format!("    import l{}\n", level - 1).repeat(10));
        text.push_str("}\n");
    }
    let err = parse_str(
        &format!("{text}. {{\n    import l4\n}}\n"),
        Path::new("Corefile"),
        &HashMap::new(),
    )
    .unwrap_err();
    assert_eq!(err.msg, "maximum snippet import depth (10000) exceeded");
    // One level less stays within the limit.
    let ok = parse_str(
        &format!("{text}. {{\n    import l3\n}}\n"),
        Path::new("Corefile"),
        &HashMap::new(),
    )
    .unwrap();
    assert_eq!(ok.blocks[0].directives.len(), 1000);
}

#[test]
fn token_limit() {
    // 200 tokens imported 5 000 times is over a million tokens.
    let mut text = format!("(big) {{\n{}\n}}\n", "x ".repeat(200));
    text.push_str("(fan) {\n");
    text.push_str(&"    import big\n".repeat(100));
    text.push_str("}\n. {\n");
    text.push_str(&"    import fan\n".repeat(50));
    text.push_str("}\n");
    let err = parse_str(&text, Path::new("Corefile"), &HashMap::new()).unwrap_err();
    assert_eq!(
        err.msg,
        "Corefile too large: more than 1000000 tokens after imports"
    );
}
