//! Enforcing a spec: the launcher confines itself and executes the program; the gateway checks
//! at start-up that the kernel can do it.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::Path;

use landlock::{
    Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, PathFdError, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetError, RulesetStatus, Scope, ABI,
};

use crate::{SandboxError, Spec, User};

/// The filesystem rights the sandbox handles when the kernel has them, up to ioctl on devices
/// (ABI 5): a newer right is not handled until it is tested here.
const FS_ABI: ABI = ABI::V5;
/// The filesystem rights that must be handled: truncation (ABI 3) among them, else a program
/// could truncate any file the user may write.
const FS_REQUIRED: ABI = ABI::V3;
/// Signal and abstract-socket scoping (ABI 6).
const SCOPE_ABI: ABI = ABI::V6;

const FS_MISSING: &str = "Landlock filesystem rules with truncation (Landlock ABI 3, Linux 6.2)";
const FS_CONSEQUENCE: &str = "read the gateway's keys, tokens, vault and store";
const SCOPE_MISSING: &str =
    "Landlock signal and abstract-socket scoping (Landlock ABI 6, Linux 6.12)";
const SCOPE_CONSEQUENCE: &str = "signal the gateway, which runs as the same user";

/// Whether this kernel enforces what a spec needs: filesystem rules always, scoping when
/// `scoped`. The error names what would not be enforced.
pub fn check_support(scoped: bool) -> Result<(), SandboxError> {
    let mut missing = Vec::new();
    let mut consequence = Vec::new();
    let hard = || Ruleset::default().set_compatibility(CompatLevel::HardRequirement);
    let creates = |r: Result<Ruleset, RulesetError>| r.and_then(Ruleset::create).is_ok();
    if !creates(hard().handle_access(AccessFs::from_all(FS_REQUIRED))) {
        missing.push(FS_MISSING);
        consequence.push(FS_CONSEQUENCE);
    }
    if scoped && !creates(hard().scope(Scope::from_all(SCOPE_ABI))) {
        missing.push(SCOPE_MISSING);
        consequence.push(SCOPE_CONSEQUENCE);
    }
    match missing.is_empty() {
        true => Ok(()),
        false => Err(SandboxError::Unsupported {
            missing,
            consequence,
        }),
    }
}

/// The launcher: applies the spec in `args` (as [`Spec::to_args`] wrote it, then the program
/// and its arguments) to this process and executes the program, which inherits it. Returns
/// only why it did not: nothing is executed unconfined.
pub fn exec(args: Vec<OsString>) -> SandboxError {
    let (spec, program, args) = match Spec::from_args(args) {
        Ok(parsed) => parsed,
        Err(e) => return e,
    };
    if let Err(e) = confine(&spec) {
        return e;
    }
    let error = std::process::Command::new(&program).args(&args).exec();
    SandboxError::Exec {
        program: program.to_string_lossy().into_owned(),
        error,
    }
}

/// `no_new_privs`, the user, the ruleset: in that order, so the ruleset's paths are opened as
/// the user the program will be, and nothing after this can gain a privilege back.
fn confine(spec: &Spec) -> Result<(), SandboxError> {
    only_thread()?;
    rustix::thread::set_no_new_privs(true).map_err(|e| SandboxError::Confine {
        step: "no_new_privs",
        error: e.into(),
    })?;
    if let Some(user) = spec.user {
        become_user(user)?;
    }
    restrict(spec)
}

/// The user and group switches below are per thread on Linux: they are the process's only
/// while it has one thread, which the launcher checks rather than assumes.
fn only_thread() -> Result<(), SandboxError> {
    let threads = std::fs::read_dir("/proc/self/task")
        .map_err(|error| SandboxError::Confine {
            step: "counting threads",
            error,
        })?
        .count();
    match threads {
        1 => Ok(()),
        n => Err(SandboxError::Confine {
            step: "counting threads",
            error: std::io::Error::other(format!("{n} threads, where the launcher needs one")),
        }),
    }
}

/// No supplementary groups, then the group, then the user (real, effective and saved: no way
/// back), checked.
fn become_user(user: User) -> Result<(), SandboxError> {
    use rustix::process::{Gid, Uid};
    let step = |step: &'static str| {
        move |e: rustix::io::Errno| SandboxError::Confine {
            step,
            error: e.into(),
        }
    };
    let (uid, gid) = (Uid::from_raw(user.uid), Gid::from_raw(user.gid));
    rustix::thread::set_thread_groups(&[]).map_err(step("dropping supplementary groups"))?;
    rustix::thread::set_thread_res_gid(gid, gid, gid).map_err(step("setting the group"))?;
    rustix::thread::set_thread_res_uid(uid, uid, uid).map_err(step("setting the user"))?;
    if rustix::process::getuid() != uid || rustix::process::geteuid() != uid {
        return Err(SandboxError::Confine {
            step: "setting the user",
            error: std::io::Error::other("the user did not change"),
        });
    }
    Ok(())
}

/// The Landlock ruleset: filesystem rights handled (truncation required), scoping (required
/// when the spec says so), each path of the spec granted read or write.
fn restrict(spec: &Spec) -> Result<(), SandboxError> {
    let scope_level = match spec.scoped {
        true => CompatLevel::HardRequirement,
        false => CompatLevel::BestEffort,
    };
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(FS_REQUIRED))?
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(FS_ABI))?
        .set_compatibility(scope_level)
        .scope(Scope::from_all(SCOPE_ABI))?
        .set_compatibility(CompatLevel::BestEffort)
        .create()?;
    for (paths, write) in [(&spec.read, false), (&spec.write, true)] {
        for path in paths {
            if let Some(rule) = rule(path, write)? {
                ruleset = ruleset.add_rule(rule)?;
            }
        }
    }
    let status = ruleset.restrict_self()?;
    if status.ruleset == RulesetStatus::NotEnforced || !status.no_new_privs {
        return Err(SandboxError::Confine {
            step: "landlock",
            error: std::io::Error::other("the ruleset is not enforced"),
        });
    }
    Ok(())
}

/// The rule granting `path` (a directory: beneath it); `None` when it no longer exists or the
/// user cannot reach it.
fn rule(path: &Path, write: bool) -> Result<Option<PathBeneath<PathFd>>, SandboxError> {
    // What the user cannot reach (or no longer exists) is not granted: the rule would allow
    // nothing the user may do anyway, and the program says what it misses when it runs.
    let fd = match PathFd::new(path) {
        Ok(fd) => fd,
        Err(PathFdError::OpenCall { source, .. })
            if matches!(
                source.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
            ) =>
        {
            return Ok(None)
        }
        Err(e) => {
            return Err(SandboxError::Confine {
                step: "opening a path of the spec",
                error: std::io::Error::other(e.to_string()),
            })
        }
    };
    let rights: BitFlags<AccessFs> = match write {
        true => AccessFs::from_all(FS_ABI),
        false => AccessFs::from_read(FS_ABI),
    };
    let rights = match std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
        true => rights,
        false => rights & AccessFs::from_file(FS_ABI),
    };
    Ok(Some(PathBeneath::new(fd, rights)))
}
