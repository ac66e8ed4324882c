//! Postern's sandbox for stdio upstreams: what a third-party MCP server started by the gateway
//! may reach, and the launcher that confines it.
//!
//! An upstream is someone else's code running beside the gateway's keys, tokens and store. The
//! gateway never starts it directly: it starts its own binary as a launcher (`postern
//! sandbox-exec SPEC -- PROGRAM ARGS…`), which, in its own process and before it executes the
//! program, sets `no_new_privs`, becomes the sandbox's unprivileged user when the gateway runs
//! as root, restricts itself with a Landlock ruleset (and Landlock's signal and abstract-socket
//! scoping) and then executes the program, which inherits all of it. Doing this in a process of
//! its own is what lets it be done without `unsafe` (no `pre_exec` hook in the gateway).
//!
//! - [`plan`] (in the gateway, at start-up): the [`Spec`] of one upstream — the system's roots,
//!   the operator's `sandbox.read`/`sandbox.write`, the program's directory — with every
//!   [`Protected`] path (the config directory, key and token files, the vault, the store, TLS
//!   keys) left out: a tree holding one is granted child by child around it, and an entry the
//!   operator wrote that holds one is an error naming both.
//! - [`check_support`] (in the gateway, at start-up): a kernel that cannot enforce what a spec
//!   needs is said before anything starts, never found out later.
//! - [`exec`] (in the launcher): applies a spec to itself and executes the program.
//!
//! Architecture invariant: Landlock rules allow, they never deny, so no path is protected by a
//! rule: a protected path is safe because no rule grants it or a directory above it. `plan` is
//! the only place rules are chosen and it never grants a protected path nor a tree holding one;
//! the launcher grants exactly what its spec lists. This crate depends on no Postern crate and
//! knows no configuration: paths in, rules out. *(`structure.rs`.)*

mod enforce;
mod plan;
mod spec;
mod user;

use std::path::PathBuf;

pub use enforce::{check_support, exec};
pub use plan::{plan, Allowance, Launch, Protected, DEVICES, SYSTEM_READ};
pub use spec::Spec;
pub use user::User;

/// Why an upstream cannot be sandboxed as configured, or why the launcher stopped.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The kernel cannot enforce every restriction the spec needs.
    #[error("this kernel cannot enforce {}: without it an upstream could {}; set sandbox = \"off\" on the upstream to run it unsandboxed knowingly", .missing.join(" nor "), .consequence.join(", and "))]
    Unsupported {
        missing: Vec<&'static str>,
        consequence: Vec<&'static str>,
    },
    /// An operator's entry that is, or holds, a path no upstream may reach.
    #[error("sandbox.{key}: {} {} {what} {}, which no upstream may reach", .entry.display(), if .entry == .protected { "is" } else { "holds" }, .protected.display())]
    Protected {
        key: &'static str,
        entry: PathBuf,
        protected: PathBuf,
        what: String,
    },
    /// An operator's entry that does not exist (a rule is made on an existing file).
    #[error("sandbox.{key}: {}: {error}", .entry.display())]
    Entry {
        key: &'static str,
        entry: PathBuf,
        error: std::io::Error,
    },
    /// The program or working directory lies where the sandbox never grants anything.
    #[error("its {what} {} lies in {} ({protected}), which no upstream may reach: move it to a directory of its own", .path.display(), .within.display())]
    Unreachable {
        what: &'static str,
        path: PathBuf,
        within: PathBuf,
        protected: String,
    },
    /// The sandbox's user cannot be used.
    #[error("sandbox user {name:?}: {why}")]
    User { name: String, why: String },
    /// The launcher's own arguments are not a spec (a bug of the gateway, or a person).
    #[error("sandbox-exec: {0}")]
    Arguments(String),
    /// A step of confining the launcher failed: the program is not executed.
    #[error("sandbox-exec: {step}: {error}")]
    Confine {
        step: &'static str,
        error: std::io::Error,
    },
    /// Landlock refused the ruleset: the program is not executed.
    #[error("sandbox-exec: landlock: {0}")]
    Landlock(#[from] landlock::RulesetError),
    /// The program could not be executed (the launcher's last word).
    #[error("sandbox-exec: cannot execute {program}: {error}")]
    Exec {
        program: String,
        error: std::io::Error,
    },
}
