//! Issue 34: the workspace's structure rules, checked so that they stay true. The crate graph
//! (from `cargo tree`): which crates may name which dependencies. Each crate's top-level
//! modules: no import cycle. Stderr: only the binary's `messages` module writes to it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

mod sizes;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Each workspace crate's direct normal (non-dev, non-build) dependencies, by package name,
/// as `cargo tree` resolves them for this platform.
fn normal_dependencies() -> BTreeMap<String, BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "--workspace",
            "--no-dedupe",
            "-e",
            "normal",
            "--depth",
            "1",
        ])
        .args(["--prefix", "depth", "--format", "{p}"])
        .current_dir(workspace())
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut current = String::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = |l: &str| l.split_whitespace().next().unwrap_or("").to_string();
        if let Some(root) = line.strip_prefix('0') {
            current = name(root);
            graph.entry(current.clone()).or_default();
        } else if let Some(dep) = line.strip_prefix('1') {
            graph.entry(current.clone()).or_default().insert(name(dep));
        }
    }
    graph
}

#[test]
fn every_crate_depends_only_on_what_its_job_needs() {
    let graph = normal_dependencies();
    let deps = |krate: &str| {
        graph
            .get(krate)
            .unwrap_or_else(|| panic!("no crate {krate}"))
    };
    let libraries = [
        "postern-core",
        "postern-audit",
        "postern-ledger",
        "postern-channels",
        "postern-vault",
        "postern-pipeline",
        "postern-front",
        "postern-console",
        "postern-demo",
        "postern-sandbox",
        "postern-identity",
    ];
    // The graph was read (a parse that found nothing would pass every rule below).
    assert!(deps("postern-front").contains("rmcp") && deps("postern-ledger").contains("sqlx"));
    for (krate, its) in &graph {
        assert!(
            !its.is_empty(),
            "{krate}: no dependencies read (a tree cut short?)"
        );
    }
    let mut broken = Vec::new();
    let mut forbid = |krate: &str, dep: &str, why: &str| {
        if deps(krate).contains(dep) {
            broken.push(format!("{krate} depends on {dep}: {why}"));
        }
    };
    for krate in libraries.iter().chain(&["postern"]) {
        forbid(
            krate,
            "postern-testkit",
            "shipped code depends on no test code",
        );
    }
    // Only the front serves MCP; the channels (upstream client), the demo (its stand-in
    // upstream) and the binary (`postern connect`, a client bridge) speak it on their edges.
    for krate in [
        "postern-core",
        "postern-audit",
        "postern-ledger",
        "postern-vault",
        "postern-pipeline",
        "postern-console",
    ] {
        forbid(krate, "rmcp", "only the front knows MCP");
    }
    for krate in [
        "postern-core",
        "postern-pipeline",
        "postern-ledger",
        "postern-audit",
    ] {
        for server in ["axum", "hyper", "hyper-util", "tower"] {
            forbid(
                krate,
                server,
                "no HTTP server below the front and the console",
            );
        }
    }
    for krate in libraries.iter().filter(|k| **k != "postern-ledger") {
        forbid(krate, "sqlx", "SQL lives only in the ledger");
    }
    for dep in ["tokio", "sqlx", "reqwest", "tracing"] {
        forbid("postern-core", dep, "the core is pure: no I/O, no runtime");
    }
    forbid(
        "postern-console",
        "postern-front",
        "the console decides through the pipeline, not the MCP front",
    );
    forbid(
        "postern-console",
        "postern-channels",
        "the console never dials a target",
    );
    for krate in libraries.iter().filter(|k| **k != "postern-demo") {
        forbid(krate, "postern-demo", "only the binary links the demo");
    }
    for krate in [
        "postern-core",
        "postern-ledger",
        "postern-audit",
        "postern-channels",
        "postern-vault",
    ] {
        forbid(krate, "postern-pipeline", "the pipeline is above them");
        forbid(krate, "postern-front", "the front is above them");
    }
    forbid(
        "postern-pipeline",
        "postern-front",
        "the front is above the pipeline",
    );
    for krate in libraries.iter().filter(|k| **k != "postern-identity") {
        forbid(
            krate,
            "jsonwebtoken",
            "only the identity crate knows JWT and JWK",
        );
    }
    for dep in [
        "postern-pipeline",
        "postern-front",
        "postern-ledger",
        "rmcp",
        "axum",
    ] {
        forbid(
            "postern-identity",
            dep,
            "identity turns a token into a principal: it knows no request, actor or record",
        );
    }
    // The sandbox is planned and applied by the binary (its launcher is the binary): the
    // channels run a launcher they are given and know nothing of what it enforces.
    for krate in libraries.iter().filter(|k| **k != "postern-sandbox") {
        forbid(
            krate,
            "postern-sandbox",
            "only the binary plans and applies the sandbox",
        );
    }
    for dep in deps("postern-demo")
        .iter()
        .filter(|d| d.starts_with("postern-"))
    {
        broken.push(format!(
            "postern-demo depends on {dep}: it stands for the world outside the gateway"
        ));
    }
    for dep in deps("postern-sandbox")
        .iter()
        .filter(|d| d.starts_with("postern-"))
    {
        broken.push(format!(
            "postern-sandbox depends on {dep}: it knows paths and rules, no configuration"
        ));
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// The `.rs` files under `dir`, recursively.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The top-level module a file under `src` belongs to (`None`: the crate root).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    match first.as_str() {
        "lib.rs" | "main.rs" | "bin" => None,
        f => Some(f.trim_end_matches(".rs").to_string()),
    }
}

/// A cycle in `edges`, if there is one.
fn cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_string());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, edges, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|n| visit(n, edges, &mut Vec::new(), &mut done))
}

/// The first path segment after every `crate::` (and, when `super_is_root`, `super::`) in
/// `text`'s code lines, `crate::{a, b::c}` groups included.
fn imported_modules(text: &str, super_is_root: bool) -> BTreeSet<String> {
    let prefixes: &[&str] = if super_is_root {
        &["crate::", "super::"]
    } else {
        &["crate::"]
    };
    imported_after(text, prefixes)
}

/// The first path segment after every one of `prefixes` in `text`'s code lines.
fn imported_after(text: &str, prefixes: &[&str]) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    // Joined, so a group spread over lines reads as one.
    let code: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join(" ");
    for prefix in prefixes {
        for (at, _) in code.match_indices(prefix) {
            if code[..at]
                .chars()
                .last()
                .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
            {
                continue;
            }
            let rest = &code[at + prefix.len()..];
            match rest.strip_prefix('{') {
                Some(group) => {
                    // Top-level items of the group: split at commas outside nested braces.
                    let mut depth = 0;
                    let mut start = 0;
                    for (i, c) in group.char_indices() {
                        match c {
                            '{' => depth += 1,
                            '}' if depth == 0 => {
                                names.insert(ident(group[start..i].trim()));
                                break;
                            }
                            '}' => depth -= 1,
                            ',' if depth == 0 => {
                                names.insert(ident(group[start..i].trim()));
                                start = i + 1;
                            }
                            _ => {}
                        }
                    }
                }
                None => {
                    names.insert(ident(rest));
                }
            }
        }
    }
    names.remove("");
    names
}

#[test]
fn imports_are_read_in_every_form() {
    let text = "use crate::{alpha::X, beta, gamma::{Y, Z}};\nuse super::delta;\nlet x = crate::epsilon::f();\n// crate::commented\n";
    let found: Vec<String> = imported_modules(text, true).into_iter().collect();
    assert_eq!(found, ["alpha", "beta", "delta", "epsilon", "gamma"]);
    assert!(!imported_modules(text, false).contains("delta"));
}

#[test]
fn no_crate_has_an_import_cycle_between_its_modules() {
    let mut cycles = Vec::new();
    for krate in std::fs::read_dir(workspace().join("crates")).unwrap() {
        let src = krate.unwrap().path().join("src");
        if !src.is_dir() {
            continue;
        }
        let files = sources(&src);
        let modules: BTreeSet<String> = files.iter().filter_map(|f| module_of(&src, f)).collect();
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for file in &files {
            let Some(from) = module_of(&src, file) else {
                continue;
            };
            let text = std::fs::read_to_string(file).unwrap();
            // `super::` from a file directly under `src` is the crate root, as `crate::` is.
            let depth = file.strip_prefix(&src).unwrap().components().count();
            for name in imported_modules(&text, depth == 1) {
                if name != from && modules.contains(&name) {
                    edges.entry(from.clone()).or_default().insert(name);
                }
            }
        }
        if let Some(c) = cycle(&edges) {
            cycles.push(format!("{}: {}", src.display(), c.join(" → ")));
        }
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

/// The module directories under `src` (`gateway/`, …), as module paths (`gateway`).
fn module_directories(src: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if d != *src || path.file_name().is_some_and(|n| n != "bin") {
                    dirs.push(path.clone());
                }
                stack.push(path);
            }
        }
    }
    dirs.sort();
    dirs
}

/// Inside a module directory, its children (each file or directory under it, the parent's
/// own file aside) import one another one way: a part never calls back into a part that
/// calls it.
#[test]
fn no_module_directory_has_an_import_cycle_between_its_children() {
    let mut cycles = Vec::new();
    for krate in std::fs::read_dir(workspace().join("crates")).unwrap() {
        let src = krate.unwrap().path().join("src");
        if !src.is_dir() {
            continue;
        }
        for dir in module_directories(&src) {
            let rel = dir.strip_prefix(&src).unwrap();
            let path: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            let absolute = format!("crate::{}::", path.join("::"));
            let files: Vec<PathBuf> = sources(&dir)
                .into_iter()
                .filter(|f| f.parent() != Some(dir.as_path()) || !f.ends_with("mod.rs"))
                .collect();
            let child = |f: &Path| -> String {
                let first = f.strip_prefix(&dir).unwrap().components().next().unwrap();
                first
                    .as_os_str()
                    .to_string_lossy()
                    .trim_end_matches(".rs")
                    .to_string()
            };
            let children: BTreeSet<String> = files.iter().map(|f| child(f)).collect();
            let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            for file in &files {
                let from = child(file);
                // Its code: a test module may reach anywhere.
                let text = std::fs::read_to_string(file).unwrap();
                let text: String = text
                    .lines()
                    .take(sizes::code_lines(&text))
                    .collect::<Vec<_>>()
                    .join("\n");
                // `super::` from a file directly in the directory is the parent module.
                let direct = file.parent() == Some(dir.as_path());
                let prefixes = [absolute.as_str(), "super::"];
                let prefixes = if direct {
                    &prefixes[..]
                } else {
                    &prefixes[..1]
                };
                for name in imported_after(&text, prefixes) {
                    if name != from && children.contains(&name) {
                        edges.entry(from.clone()).or_default().insert(name);
                    }
                }
            }
            if let Some(c) = cycle(&edges) {
                cycles.push(format!("{}: {}", dir.display(), c.join(" → ")));
            }
        }
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn only_the_binarys_messages_module_writes_to_stderr() {
    let mut found = Vec::new();
    for krate in std::fs::read_dir(workspace().join("crates")).unwrap() {
        let src = krate.unwrap().path().join("src");
        if !src.is_dir() {
            continue;
        }
        for file in sources(&src) {
            // The binary's messages module; helper binaries (`src/bin/`) whose stderr is their
            // usage line.
            let rel = file.strip_prefix(workspace().join("crates")).unwrap();
            if rel == Path::new("postern/src/messages.rs")
                || rel.components().any(|c| c.as_os_str() == "bin")
            {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            for (n, line) in text.lines().enumerate() {
                if line.contains("eprintln!") || line.contains("eprint!") {
                    found.push(format!("{}:{}: {}", rel.display(), n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "stderr outside messages.rs (use tracing, or messages::say):\n{}",
        found.join("\n")
    );
}

/// docs/cli.md is what the binary's own clap definitions say (every command, argument and
/// default): regenerate it with `postern cli-reference > docs/cli.md` when a command changes.
#[test]
fn the_cli_reference_is_the_binarys_own() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_postern"))
        .arg("cli-reference")
        .output()
        .unwrap();
    assert!(out.status.success());
    let generated = String::from_utf8(out.stdout).unwrap();
    let path = crate::foreign::repo_root().join("docs/cli.md");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        generated == committed,
        "docs/cli.md is not what the binary says: run `cargo run -p postern -- cli-reference > docs/cli.md`"
    );
    for verb in ["serve", "connect", "login", "approvals", "audit"] {
        assert!(
            generated.contains(&format!("## `postern {verb}`")),
            "{verb}"
        );
    }
}

/// ARCHITECTURE.md's crate-graph drawing is `cargo tree`'s graph of the workspace crates: every
/// arrow drawn is a normal dependency, and every normal dependency between workspace crates is
/// drawn.
#[test]
fn the_crate_graph_drawn_here_is_cargo_trees() {
    let text = std::fs::read_to_string(workspace().join("ARCHITECTURE.md")).unwrap();
    let section = &text[text.find("## Crate graph").expect("a Crate graph section")..];
    let block = section
        .split("```")
        .nth(1)
        .expect("a drawing in a code block");
    let package = |name: &str| -> String {
        let name = name.trim().trim_end_matches(" (binary)").trim();
        match name.strip_prefix("bench/") {
            Some(bench) => format!("postern-{bench}"),
            None if name == "postern" => "postern".into(),
            None => format!("postern-{name}"),
        }
    };
    let mut drawn: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in block.lines().filter(|l| l.contains("──►")) {
        let (from, to) = line.split_once("──►").unwrap();
        // What follows two spaces and a parenthesis is a remark, not a crate.
        let to = to.split("  (").next().unwrap_or("").trim();
        let targets: BTreeSet<String> = match to {
            "(no Postern crate)" => BTreeSet::new(),
            list => list.split(',').map(package).collect(),
        };
        for name in from.trim().trim_end_matches('─').split(',') {
            drawn
                .entry(package(name))
                .or_default()
                .extend(targets.clone());
        }
    }
    let graph = normal_dependencies();
    let actual: BTreeMap<String, BTreeSet<String>> = graph
        .iter()
        .filter(|(k, _)| k.starts_with("postern"))
        .map(|(k, deps)| {
            let ours = deps
                .iter()
                .filter(|d| graph.contains_key(*d))
                .cloned()
                .collect();
            (k.clone(), ours)
        })
        .collect();
    assert!(
        actual.len() > 10,
        "the workspace's crates were read: {actual:?}"
    );
    let mut differences = Vec::new();
    for (krate, deps) in &actual {
        let shown = drawn.get(krate).cloned().unwrap_or_default();
        if !drawn.contains_key(krate) {
            differences.push(format!("{krate} is not drawn"));
        }
        for missing in deps.difference(&shown) {
            differences.push(format!("{krate} → {missing} is not drawn"));
        }
        for extra in shown.difference(deps) {
            differences.push(format!("{krate} → {extra} is drawn but is no dependency"));
        }
    }
    for krate in drawn.keys().filter(|k| !actual.contains_key(*k)) {
        differences.push(format!("{krate} is drawn but is no workspace crate"));
    }
    assert!(
        differences.is_empty(),
        "ARCHITECTURE.md's crate graph differs from cargo tree:\n{}",
        differences.join("\n")
    );
}
