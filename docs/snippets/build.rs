//! Collects the Rust snippets of README.md and docs/*.md (two and one directory up) into
//! `OUT_DIR/snippets.md`, which `src/lib.rs` takes as the crate's documentation under rustdoc's
//! doctests: `cargo test` compiles every snippet a reader may copy.
//!
//! A snippet is a fenced block whose info string starts with `rust` (```` ```rust ````).
//! Indented and unlabelled blocks are not taken (rustdoc would read them as Rust too, and they
//! are shell commands here). Each becomes a `no_run` doctest (snippets open network
//! interfaces; compiling them is the check), wrapped in a `main` that returns a `Result` unless
//! it has a `main` of its own, so that `?` works as the text shows it; the wrapping lines are
//! hidden (`# `), and a hidden comment names the file and line the snippet comes from.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let manifest =
        PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    // docs/snippets/ -> the repository.
    let root = manifest.join("../..");
    let mut files = vec![root.join("README.md")];
    if let Ok(dir) = std::fs::read_dir(root.join("docs")) {
        let mut docs: Vec<PathBuf> = dir
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .collect();
        docs.sort();
        files.extend(docs);
    }
    println!("cargo:rerun-if-changed=build.rs");
    // A new page in docs/.
    println!("cargo:rerun-if-changed={}", root.join("docs").display());
    let mut out = String::from("Every Rust snippet of README.md and docs/*.md.\n");
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
        // A package without its docs (a vendored copy) has no snippets to check.
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        let name = file.strip_prefix(&root).unwrap_or(file);
        for (line, code) in snippets(&text) {
            out.push_str(&doctest(name, line, &code));
        }
    }
    let dest = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR")).join("snippets.md");
    std::fs::write(&dest, out).expect("write OUT_DIR/snippets.md");
}

/// The fenced blocks of `markdown` labelled `rust`: the line of the opening fence (from 1) and
/// the code.
fn snippets(markdown: &str) -> Vec<(usize, String)> {
    /// An open fenced block: its first line, its fence (character and length) and, if it is
    /// Rust, the code so far.
    struct Open {
        line: usize,
        fence: char,
        len: usize,
        code: Option<String>,
    }
    let mut found = Vec::new();
    let mut open: Option<Open> = None;
    for (i, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        let fence = trimmed.chars().next().filter(|c| *c == '`' || *c == '~');
        let len = fence.map_or(0, |f| trimmed.chars().take_while(|&c| c == f).count());
        match open.as_mut() {
            None => {
                if let (Some(fence), true) = (fence, len >= 3) {
                    let info = trimmed[len..].trim();
                    let rust = info.split([',', ' ']).next() == Some("rust");
                    open = Some(Open {
                        line: i + 1,
                        fence,
                        len,
                        code: rust.then(String::new),
                    });
                }
            }
            Some(block) => {
                // A closing fence: the same character, at least as long, nothing after it.
                if fence == Some(block.fence)
                    && len >= block.len
                    && trimmed[len..].trim().is_empty()
                {
                    if let Some(code) = block.code.take() {
                        found.push((block.line, code));
                    }
                    open = None;
                } else if let Some(code) = block.code.as_mut() {
                    code.push_str(line);
                    code.push('\n');
                }
            }
        }
    }
    found
}

/// `code` from `file`, line `line`, as a no_run doctest.
fn doctest(file: &Path, line: usize, code: &str) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "\n```rust,no_run\n# // {}, line {line}", file.display());
    let own_main = code.contains("fn main");
    if !own_main {
        t.push_str("# fn main() -> Result<(), Box<dyn std::error::Error>> {\n");
    }
    t.push_str(code);
    if !own_main {
        t.push_str("# Ok(())\n# }\n");
    }
    t.push_str("```\n");
    t
}
