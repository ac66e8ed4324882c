//! The `[upstream.NAME.sandbox]` that `init --from-mcp-json` writes: every stdio upstream runs
//! sandboxed, reading the system's directories and its program's own; what else a server is
//! known to need is allowed by name — server-filesystem the directories it serves,
//! server-memory its memory file's directory, a server `npx` starts npm's cache — and for any
//! other server a comment says how to allow more.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::{one_line, quote};

/// The npm reference servers whose needs are known, by package name.
const FILESYSTEM: &str = "@modelcontextprotocol/server-filesystem";
const MEMORY: &str = "@modelcontextprotocol/server-memory";

/// One directory a server may write, and why (a comment beside it).
struct Entry {
    path: PathBuf,
    why: String,
}

/// The sandbox table of upstream `name` started as `command` with `env` (and `cwd`).
pub(super) fn sandbox_toml(
    name: &str,
    command: &[String],
    env: &[(String, String)],
    cwd: Option<&str>,
) -> String {
    let mut write = Vec::new();
    let mut notes = Vec::new();
    let program = Path::new(&command[0])
        .file_stem()
        .and_then(|p| p.to_str())
        .unwrap_or_default();
    if program == "npx" {
        match std::env::var_os("HOME") {
            Some(home) => write.push(Entry {
                path: PathBuf::from(home).join(".npm"),
                why: "npx keeps the packages it fetches in npm's cache".into(),
            }),
            None => notes.push(
                "npx keeps the packages it fetches in npm's cache (~/.npm): add it to write"
                    .to_string(),
            ),
        }
    }
    let base = cwd.map(PathBuf::from);
    if let Some(at) = position(command, FILESYSTEM) {
        for dir in command[at + 1..].iter().filter(|a| !a.starts_with('-')) {
            match absolute(dir, base.as_deref()) {
                Some(path) => write.push(Entry {
                    path,
                    why: "a directory server-filesystem serves".into(),
                }),
                None => notes.push(format!(
                    "server-filesystem serves {}: add it to write as an absolute path",
                    one_line(dir)
                )),
            }
        }
    }
    if let Some(at) = position(command, MEMORY) {
        match memory_dir(&command[at], env, base.as_deref()) {
            Some(entry) => write.push(entry),
            // Fetched by npx, its default file lies in npm's cache, allowed above.
            None if program == "npx" => {}
            None => notes
                .push("server-memory writes its memory file: add its directory to write".into()),
        }
    }
    toml(name, &write, &notes)
}

/// Where in `command` the package `package` is named: as npx names it (`PKG`, `PKG@VERSION`)
/// or as its script (`…/PKG/dist/index.js`).
fn position(command: &[String], package: &str) -> Option<usize> {
    command.iter().position(|arg| {
        arg == package
            || arg.starts_with(&format!("{package}@"))
            || arg.replace('\\', "/").contains(&format!("{package}/"))
    })
}

/// server-memory's file is `MEMORY_FILE_PATH` (relative: to its script's directory), by
/// default `memory.jsonl` beside its script; the directory holding it, when it can be known
/// here (a package npx fetches lies in npm's cache, allowed already).
fn memory_dir(named: &str, env: &[(String, String)], base: Option<&Path>) -> Option<Entry> {
    let script = absolute(named, base).filter(|p| p.extension().is_some());
    let file = match env.iter().find(|(k, _)| k == "MEMORY_FILE_PATH") {
        Some((_, v)) if Path::new(v).is_absolute() => PathBuf::from(v),
        Some((_, v)) => script.as_deref()?.parent()?.join(v),
        None => script.as_deref()?.parent()?.join("memory.jsonl"),
    };
    Some(Entry {
        path: file.parent()?.to_path_buf(),
        why: "the directory of server-memory's memory file (MEMORY_FILE_PATH or its default)"
            .into(),
    })
}

/// `path` made absolute against `base` (the server's working directory), if it can be.
fn absolute(path: &str, base: Option<&Path>) -> Option<PathBuf> {
    let path = Path::new(path);
    match (path.is_absolute(), base) {
        (true, _) => Some(path.to_path_buf()),
        (false, Some(base)) if base.is_absolute() => Some(base.join(path)),
        _ => None,
    }
}

fn toml(name: &str, write: &[Entry], notes: &[String]) -> String {
    let mut t = String::from(
        "# Sandboxed (the default): it runs as `nobody` when the gateway runs as root, may read the\n\
         # system's directories (/usr, /etc, /opt, …) and its program's own, and never the\n\
         # gateway's config directory, keys, vault or store. What else it needs, by name:\n",
    );
    for note in notes {
        let _ = writeln!(t, "# note: {note}");
    }
    if write.is_empty() {
        let _ = writeln!(
            t,
            "#   [upstream.{name}.sandbox]\n#   read = [\"/a/directory/it/reads\"]\n#   write = [\"/a/directory/it/writes\"]"
        );
        return t;
    }
    let _ = writeln!(t, "[upstream.{name}.sandbox]\nwrite = [");
    for e in write {
        let _ = writeln!(
            t,
            "  {},   # {}",
            quote(&e.path.display().to_string()),
            e.why
        );
    }
    t.push_str("]\n");
    t
}
