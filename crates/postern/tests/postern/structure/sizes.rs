//! Issue 51: the sizes that keep parts owned. No source file holds more than 500 lines of code
//! (its tests aside) and no type has more than 30 methods: a file or a type past them holds
//! more than one part, and is split along its seams instead.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{sources, workspace};

const MAX_CODE_LINES: usize = 500;
const MAX_METHODS: usize = 30;

/// Every crate's `src` directory.
fn crate_sources() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(workspace().join("crates"))
        .unwrap()
        .map(|e| e.unwrap().path().join("src"))
        .filter(|src| src.is_dir())
        .collect();
    dirs.sort();
    dirs
}

/// The lines of `text` before its tests (`#[cfg(test)]` at the start of a line).
pub(super) fn code_lines(text: &str) -> usize {
    text.lines()
        .take_while(|l| !l.starts_with("#[cfg(test)]"))
        .count()
}

/// The type an inherent `impl` line opens (`impl<T> Name<T> {`), or `None` (a trait impl, or
/// not an impl line).
fn inherent_impl(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("impl")?;
    if !(rest.starts_with(' ') || rest.starts_with('<')) || !line.trim_end().ends_with('{') {
        return None;
    }
    // Past the impl's own generics.
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in rest.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            c if depth == 0 && !c.is_whitespace() => {
                start = i;
                break;
            }
            _ => {}
        }
    }
    let head = &rest[start..];
    if head.contains(" for ") {
        return None;
    }
    let name_len = head
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(head.len());
    Some(&head[..name_len]).filter(|n| !n.is_empty())
}

/// Whether `line` declares a method of the impl it is in (indented once).
fn is_method(line: &str) -> bool {
    let Some(item) = line.strip_prefix("    ") else {
        return false;
    };
    let item = ["pub(crate) ", "pub(super) ", "pub "]
        .iter()
        .find_map(|p| item.strip_prefix(p))
        .unwrap_or(item);
    let item = item.strip_prefix("async ").unwrap_or(item);
    let item = item.strip_prefix("const ").unwrap_or(item);
    item.starts_with("fn ")
}

/// Methods per type in one crate's code (tests aside), summed over its inherent impls.
fn methods_per_type(src: &Path) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for file in sources(src) {
        let text = std::fs::read_to_string(&file).unwrap();
        let mut open: Option<String> = None;
        for line in text.lines().take(code_lines(&text)) {
            if let Some(name) = inherent_impl(line) {
                open = Some(name.to_string());
            } else if line.starts_with('}') {
                open = None;
            } else if let Some(name) = open.as_ref().filter(|_| is_method(line)) {
                *counts.entry(name.clone()).or_insert(0) += 1;
            }
        }
    }
    counts
}

#[test]
fn methods_and_impls_are_read_as_written() {
    assert_eq!(inherent_impl("impl Gateway {"), Some("Gateway"));
    assert_eq!(inherent_impl("impl<C: Conn> Writer<C> {"), Some("Writer"));
    assert_eq!(inherent_impl("impl Drop for Ledger {"), None);
    assert_eq!(inherent_impl("impl<T> From<T> for Thing<T> {"), None);
    assert!(is_method("    pub(crate) async fn accept(&self) {"));
    assert!(is_method("    fn helper() {"));
    assert!(!is_method("        fn nested() {"));
    assert_eq!(code_lines("a\nb\n#[cfg(test)]\nmod tests;\n"), 2);
}

#[test]
fn no_source_file_holds_more_than_500_lines_of_code() {
    let mut over = Vec::new();
    for src in crate_sources() {
        for file in sources(&src) {
            let lines = code_lines(&std::fs::read_to_string(&file).unwrap());
            if lines > MAX_CODE_LINES {
                let shown = file.strip_prefix(workspace()).unwrap_or(&file).display();
                over.push(format!("{shown}: {lines} lines"));
            }
        }
    }
    assert!(
        over.is_empty(),
        "files over {MAX_CODE_LINES} lines of code (split them along their seams):\n{}",
        over.join("\n")
    );
}

#[test]
fn no_type_has_more_than_30_methods() {
    let mut over = Vec::new();
    for src in crate_sources() {
        for (name, count) in methods_per_type(&src) {
            if count > MAX_METHODS {
                over.push(format!("{}: {name} has {count} methods", src.display()));
            }
        }
    }
    assert!(
        over.is_empty(),
        "types over {MAX_METHODS} methods (give a part its own type):\n{}",
        over.join("\n")
    );
}
