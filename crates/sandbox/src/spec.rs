//! A [`Spec`]: what the launcher enforces on one upstream, carried from the gateway to the
//! launcher as its arguments (paths only: nothing in it is a secret, and it is visible in the
//! process list like the upstream's own command).

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

use crate::{SandboxError, User};

/// What the launcher grants and requires. Made by [`plan`](crate::plan); every path is
/// absolute and resolved (no symbolic link left to follow).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Spec {
    /// Trees (or files) the program may read and execute.
    pub read: Vec<PathBuf>,
    /// Trees (or files) the program may also write: create, remove, rename, truncate.
    pub write: Vec<PathBuf>,
    /// The user the launcher becomes before it executes the program (the gateway runs as
    /// root); `None`: the gateway's own.
    pub user: Option<User>,
    /// Whether signal and abstract-socket scoping is required (the program keeps the
    /// gateway's uid, so only Landlock's scoping keeps it from signalling the gateway). When
    /// not required it is still applied wherever the kernel has it.
    pub scoped: bool,
}

const READ: &str = "--read";
const WRITE: &str = "--write";
const USER: &str = "--user";
const SCOPED: &str = "--scoped";
const END: &str = "--";

impl Spec {
    /// The launcher's arguments before the program: they end with `--`.
    pub fn to_args(&self) -> Vec<OsString> {
        let mut args = Vec::new();
        if let Some(user) = self.user {
            args.push(USER.into());
            args.push(format!("{}:{}", user.uid, user.gid).into());
        }
        if self.scoped {
            args.push(SCOPED.into());
        }
        for (flag, paths) in [(READ, &self.read), (WRITE, &self.write)] {
            for path in paths {
                args.push(flag.into());
                args.push(path.into());
            }
        }
        args.push(END.into());
        args
    }

    /// The spec, the program and its arguments from the launcher's arguments (as
    /// [`to_args`](Spec::to_args) wrote them, the program's after `--`).
    pub fn from_args(
        args: impl IntoIterator<Item = OsString>,
    ) -> Result<(Spec, OsString, Vec<OsString>), SandboxError> {
        let mut spec = Spec::default();
        let mut args = args.into_iter();
        let wrong = |m: String| SandboxError::Arguments(m);
        loop {
            let flag = args
                .next()
                .ok_or_else(|| wrong("no `-- PROGRAM` to execute".into()))?;
            if flag == END {
                break;
            }
            if flag == SCOPED {
                spec.scoped = true;
                continue;
            }
            let value = args
                .next()
                .ok_or_else(|| wrong(format!("{} needs a value", flag.to_string_lossy())))?;
            match flag.to_str() {
                Some(READ) => spec.read.push(absolute(value)?),
                Some(WRITE) => spec.write.push(absolute(value)?),
                Some(USER) => spec.user = Some(user(&value)?),
                _ => return Err(wrong(format!("unknown {:?}", flag.to_string_lossy()))),
            }
        }
        let program = args
            .next()
            .ok_or_else(|| wrong("no program after --".into()))?;
        Ok((spec, program, args.collect()))
    }
}

fn absolute(value: OsString) -> Result<PathBuf, SandboxError> {
    let path = PathBuf::from(value);
    match path.is_absolute() {
        true => Ok(path),
        false => Err(SandboxError::Arguments(format!(
            "{} is not an absolute path",
            path.display()
        ))),
    }
}

fn user(value: &OsStr) -> Result<User, SandboxError> {
    let text = value.to_string_lossy();
    let parsed = text
        .split_once(':')
        .and_then(|(u, g)| Some((u.parse().ok()?, g.parse().ok()?)));
    match parsed {
        Some((uid, gid)) => Ok(User { uid, gid }),
        None => Err(SandboxError::Arguments(format!(
            "--user {text:?} is not UID:GID"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_survives_its_arguments() {
        let spec = Spec {
            read: vec!["/usr".into(), "/opt/with space".into()],
            write: vec!["/srv/files".into()],
            user: Some(User {
                uid: 65534,
                gid: 65534,
            }),
            scoped: true,
        };
        let mut args = spec.to_args();
        args.extend(["node".into(), "--".into(), "--read".into()]);
        let (back, program, rest) = Spec::from_args(args).unwrap();
        assert_eq!(back, spec);
        assert_eq!(program, "node");
        assert_eq!(rest, ["--", "--read"]);
    }

    #[test]
    fn arguments_that_are_not_a_spec_are_refused() {
        for args in [
            vec!["--read", "relative", "--", "p"],
            vec!["--read", "/usr"],
            vec!["--user", "nobody", "--", "p"],
            vec!["--bogus", "x", "--", "p"],
            vec!["--"],
        ] {
            let args = args.into_iter().map(OsString::from);
            assert!(Spec::from_args(args).is_err());
        }
    }
}
