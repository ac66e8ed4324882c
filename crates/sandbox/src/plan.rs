//! Choosing one upstream's rules, in the gateway at start-up: what the system needs, what the
//! operator allowed, what the program needs — and never a protected path.
//!
//! Landlock only allows, so "deny the config directory" is done by never granting it nor any
//! tree above it: a granted tree that holds a protected path is replaced by its children,
//! recursively, around that path. The trees are resolved now (symbolic links followed), so a
//! link pointing into a protected tree is seen for what it is. A directory split this way is
//! granted as its entries are at start-up: an entry made in it later is not granted until the
//! gateway starts again (never more than was planned).

use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::{SandboxError, Spec, User};

/// What every upstream may read and execute: the system's programs, libraries and
/// configuration (the dynamic linker's, locales, CA certificates, the resolver's), `/opt`'s
/// installed software, `/proc` and `/sys` (another process's `/proc` entries stay closed: the
/// kernel asks Landlock, which refuses a process outside the upstream's own domain, and the
/// gateway is not dumpable), the randomness devices. Not `/tmp`, `/var`, `/home`, `/root`,
/// `/srv` or `/run` (other than the resolver's files), which hold other people's data; an
/// upstream that needs them names them in `sandbox.read` or `sandbox.write`.
pub const SYSTEM_READ: [&str; 14] = [
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/proc",
    "/sys",
    "/run/systemd/resolve",
    "/dev/random",
    "/dev/urandom",
];

/// The devices every upstream may read and write (shells write to `/dev/null`, with
/// truncation).
pub const DEVICES: [&str; 3] = ["/dev/null", "/dev/zero", "/dev/full"];

/// Paths no upstream may reach, each with what it is (for messages).
#[derive(Clone, Debug, Default)]
pub struct Protected {
    paths: Vec<(PathBuf, String)>,
}

impl Protected {
    /// Adds `path`, resolved as it is now; a file that does not exist yet (a store's `-wal`)
    /// by its resolved directory and its name, so it is protected the moment it appears.
    pub fn add(&mut self, path: &Path, what: impl Into<String>) {
        self.paths.push((resolve(path), what.into()));
    }

    /// Every protected path, resolved, with what it is.
    pub fn paths(&self) -> impl Iterator<Item = (&Path, &str)> {
        self.paths.iter().map(|(p, w)| (p.as_path(), w.as_str()))
    }

    /// The protected path that `path` is or holds.
    fn held_by(&self, path: &Path) -> Option<&(PathBuf, String)> {
        self.paths.iter().find(|(p, _)| p.starts_with(path))
    }

    /// The protected path that `path` is or lies within.
    fn holding(&self, path: &Path) -> Option<&(PathBuf, String)> {
        self.paths.iter().find(|(p, _)| path.starts_with(p))
    }
}

/// `path` with every symbolic link resolved; what does not exist yet, by its nearest existing
/// ancestor resolved and the rest as written.
fn resolve(path: &Path) -> PathBuf {
    if let Ok(real) = path.canonicalize() {
        return real;
    }
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) if !parent.as_os_str().is_empty() => resolve(parent).join(name),
        _ => std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()),
    }
}

/// What the operator allowed one upstream (`sandbox.read`, `sandbox.write`), as absolute
/// paths.
#[derive(Clone, Debug, Default)]
pub struct Allowance {
    pub read: Vec<PathBuf>,
    pub write: Vec<PathBuf>,
}

/// How the upstream is started: its program as configured (a path, or a name looked up in
/// `path`, the `PATH` it is started with) and its working directory.
#[derive(Clone, Copy, Debug)]
pub struct Launch<'a> {
    pub program: &'a OsStr,
    pub path: Option<&'a OsStr>,
    pub cwd: Option<&'a Path>,
}

/// The spec of one upstream: the operator's entries, [`SYSTEM_READ`] and [`DEVICES`], the
/// program's directory (as written and as resolved) and its working directory — none of them a
/// protected path or a tree holding one. An operator's entry that is missing, or is or holds a
/// protected path, is an error naming both; so is a program or working directory that lies
/// within a protected path where no operator's entry grants it.
pub fn plan(
    allowance: &Allowance,
    protected: &Protected,
    launch: Launch<'_>,
    user: Option<User>,
    scoped: bool,
) -> Result<Spec, SandboxError> {
    let mut split = Splitter {
        protected,
        visited: HashSet::new(),
    };
    let mut spec = Spec {
        user,
        scoped,
        ..Spec::default()
    };
    for (key, entries, out) in [
        ("read", &allowance.read, &mut spec.read),
        ("write", &allowance.write, &mut spec.write),
    ] {
        for entry in entries {
            out.push(explicit(key, entry, protected)?);
        }
    }
    for root in SYSTEM_READ {
        split.grant(Path::new(root), &mut spec.read);
    }
    for device in DEVICES {
        split.grant(Path::new(device), &mut spec.write);
    }
    if let Some(cwd) = launch.cwd.and_then(|c| c.canonicalize().ok()) {
        split.grant(&cwd, &mut spec.read);
        reachable("working directory", &cwd, &spec, protected)?;
    }
    if let Some(program) = find_program(launch) {
        let real = program.canonicalize().unwrap_or_else(|_| program.clone());
        for dir in [program.parent(), real.parent()].into_iter().flatten() {
            split.grant(dir, &mut spec.read);
        }
        reachable("program", &real, &spec, protected)?;
    }
    for list in [&mut spec.read, &mut spec.write] {
        list.sort();
        list.dedup();
    }
    Ok(spec)
}

/// An operator's entry, resolved: it must exist and be or hold no protected path (lying
/// within one, as a directory of its own inside the config directory does, is allowed).
fn explicit(
    key: &'static str,
    entry: &Path,
    protected: &Protected,
) -> Result<PathBuf, SandboxError> {
    let real = entry.canonicalize().map_err(|error| SandboxError::Entry {
        key,
        entry: entry.to_path_buf(),
        error,
    })?;
    match protected.held_by(&real) {
        Some((path, what)) => Err(SandboxError::Protected {
            key,
            entry: entry.to_path_buf(),
            protected: path.clone(),
            what: what.clone(),
        }),
        None => Ok(real),
    }
}

/// Refuses a program or working directory that no rule covers because it lies within a
/// protected path (unless an operator's entry within that path grants it): it could never run.
fn reachable(
    what: &'static str,
    path: &Path,
    spec: &Spec,
    protected: &Protected,
) -> Result<(), SandboxError> {
    if spec
        .read
        .iter()
        .chain(&spec.write)
        .any(|g| path.starts_with(g))
    {
        return Ok(());
    }
    match protected.holding(path) {
        Some((within, why)) => Err(SandboxError::Unreachable {
            what,
            path: path.to_path_buf(),
            within: within.clone(),
            protected: why.clone(),
        }),
        None => Ok(()),
    }
}

/// Grants trees, split around protected paths.
struct Splitter<'a> {
    protected: &'a Protected,
    /// Directories already split (a link back to an ancestor is not followed twice).
    visited: HashSet<PathBuf>,
}

impl Splitter<'_> {
    /// Grants `path` whole when it holds no protected path; else each of its entries the same
    /// way; never a protected path or what lies within one. What does not exist, or cannot be
    /// listed, is not granted.
    fn grant(&mut self, path: &Path, out: &mut Vec<PathBuf>) {
        let Ok(real) = path.canonicalize() else {
            return;
        };
        if self.protected.holding(&real).is_some() {
            return;
        }
        if self.protected.held_by(&real).is_none() {
            out.push(real);
            return;
        }
        if !self.visited.insert(real.clone()) {
            return;
        }
        let Ok(entries) = std::fs::read_dir(&real) else {
            return;
        };
        for entry in entries.flatten() {
            self.grant(&entry.path(), out);
        }
    }
}

/// The program the launcher will execute: a path (relative to the working directory) as it
/// is, a name the first executable file of that name on `PATH`, as `execvp` finds it.
fn find_program(launch: Launch<'_>) -> Option<PathBuf> {
    let program = Path::new(launch.program);
    if launch.program.as_bytes().contains(&b'/') {
        let base = match launch.cwd {
            Some(cwd) => cwd.to_path_buf(),
            None => std::env::current_dir().ok()?,
        };
        let path = base.join(program);
        return path.exists().then_some(path);
    }
    std::env::split_paths(launch.path?)
        .map(|dir| dir.join(program))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

#[cfg(test)]
mod tests;
