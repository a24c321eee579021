//! The release binary carries no test hooks: every `--test-*` flag and
//! `CORELAY_TEST_*` variable of the server is declared under
//! `#[cfg(feature = "fault-injection")]`, and nothing else in the server,
//! the crates it runs as its data plane (`corelay-plane`, `corelay-ws`) or
//! the engine reads one. A source check, so it holds whichever features
//! this test was built with (the test command builds with the faults on).

use std::fs;
use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir)
        .expect("read a source directory")
        .flatten()
    {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The attributes and doc lines stacked on the item whose line is `i`.
fn attributes(lines: &[&str], i: usize) -> Vec<String> {
    lines[..i]
        .iter()
        .rev()
        .map(|l| l.trim())
        .take_while(|l| l.starts_with("#[") || l.starts_with("///") || l.starts_with("//"))
        .map(str::to_string)
        .collect()
}

#[test]
fn test_flags_and_variables_exist_only_in_a_fault_injection_build() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    // The server, the data-plane interface, the work-stealing baseline the
    // server runs, and the engine.
    for dir in ["server/src", "plane/src", "ws/src", "core/src"] {
        sources(&root.join(dir), &mut files);
    }
    let mut flags = 0;
    let mut bad = Vec::new();
    for f in &files {
        let text = fs::read_to_string(f).expect("read a source file");
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let t = line.trim();
            if t.starts_with("//") {
                continue;
            }
            // A config field named test_* (its flag is --test-*) or any
            // mention of a CORELAY_TEST_ variable.
            let field = t.starts_with("pub test_") && t.contains(':');
            let attr_env = t.starts_with("#[arg(") && t.contains("CORELAY_TEST_");
            let other = !t.starts_with("#[arg(") && t.contains("CORELAY_TEST_");
            if other {
                bad.push(format!("{}:{}: {t}", f.display(), i + 1));
            }
            if field || attr_env {
                flags += 1;
                let item = if attr_env {
                    // The field below the attribute stack it is in.
                    (i..lines.len())
                        .find(|&j| !lines[j].trim().starts_with("#["))
                        .unwrap_or(i)
                } else {
                    i
                };
                let gated = attributes(&lines, item)
                    .iter()
                    .any(|a| a == "#[cfg(feature = \"fault-injection\")]");
                if !gated {
                    bad.push(format!("{}:{}: {t}", f.display(), i + 1));
                }
            }
        }
    }
    assert!(
        flags >= 4,
        "found only {flags} test flags: has the check lost them?"
    );
    assert!(
        bad.is_empty(),
        "test hooks outside #[cfg(feature = \"fault-injection\")]:\n{}",
        bad.join("\n")
    );
}
