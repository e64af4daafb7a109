//! Every Rust snippet of README.md and docs/*.md is among the doctests that `build.rs`
//! collects (this crate's documentation under `cargo test`): counted here with a plain reading
//! of the fences, so that a snippet the collector misses cannot pass unchecked.

use std::path::Path;

/// Lines that open a fenced block labelled `rust` (```` ```rust ````, with or without
/// attributes).
fn rust_fences(markdown: &str) -> usize {
    markdown
        .lines()
        .map(str::trim_start)
        .filter(|l| {
            l.strip_prefix("```")
                .is_some_and(|info| info.split([',', ' ']).next() == Some("rust"))
        })
        .count()
}

#[test]
fn every_rust_snippet_of_the_docs_is_a_doctest() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = vec![root.join("README.md")];
    for e in std::fs::read_dir(root.join("docs")).expect("docs/") {
        let p = e.expect("docs/ entry").path();
        if p.extension().is_some_and(|x| x == "md") {
            files.push(p);
        }
    }
    let in_docs: usize = files
        .iter()
        .map(|f| rust_fences(&std::fs::read_to_string(f).expect("read markdown")))
        .sum();
    let collected = std::fs::read_to_string(Path::new(env!("OUT_DIR")).join("snippets.md"))
        .expect("OUT_DIR/snippets.md, written by build.rs");
    let doctests = collected.lines().filter(|l| *l == "```rust,no_run").count();
    assert!(
        in_docs > 0,
        "README.md has a Rust snippet; none found in {files:?}"
    );
    assert_eq!(
        doctests, in_docs,
        "build.rs collected {doctests} doctests from {in_docs} Rust snippets:\n{collected}"
    );
}
