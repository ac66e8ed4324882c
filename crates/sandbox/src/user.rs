//! The sandbox's user: who an upstream runs as when the gateway runs as root.

use crate::SandboxError;

/// A user and its primary group, by number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct User {
    pub uid: u32,
    pub gid: u32,
}

impl User {
    /// `name` from `/etc/passwd`, or `UID:GID` given by number. Root (uid 0) is refused: an
    /// upstream running as root could undo its sandbox (load a kernel module, say).
    pub fn lookup(name: &str) -> Result<User, SandboxError> {
        let why = |why: String| SandboxError::User {
            name: name.to_string(),
            why,
        };
        let numbers = name
            .split_once(':')
            .and_then(|(u, g)| Some((u.parse().ok()?, g.parse().ok()?)));
        let user = match numbers {
            Some((uid, gid)) => User { uid, gid },
            None => {
                let passwd = std::fs::read_to_string("/etc/passwd")
                    .map_err(|e| why(format!("reading /etc/passwd: {e}")))?;
                find(&passwd, name).ok_or_else(|| {
                    why("is not in /etc/passwd (name a user there, or give UID:GID)".into())
                })?
            }
        };
        if user.uid == 0 {
            return Err(why(
                "is root, whom the sandbox cannot confine: name an unprivileged user".into(),
            ));
        }
        Ok(user)
    }
}

/// The user `name` of a passwd file's text.
fn find(passwd: &str, name: &str) -> Option<User> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        if fields.next()? != name {
            return None;
        }
        let _password = fields.next()?;
        Some(User {
            uid: fields.next()?.parse().ok()?,
            gid: fields.next()?.parse().ok()?,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_are_found_by_name_or_number_and_root_is_refused() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65533:nobody:/nonexistent:/usr/sbin/nologin\n";
        assert_eq!(
            find(passwd, "nobody"),
            Some(User {
                uid: 65534,
                gid: 65533
            })
        );
        assert_eq!(find(passwd, "nobod"), None);
        assert_eq!(
            User::lookup("1000:100").unwrap(),
            User {
                uid: 1000,
                gid: 100
            }
        );
        assert!(User::lookup("0:0").is_err());
        assert!(User::lookup("root").is_err());
    }
}
