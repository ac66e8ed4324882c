//! `sandbox` of a stdio `[upstream.NAME]`: what its process may reach (the gateway confines it
//! by default), or `"off"`.

use super::super::raw::RawSandbox;

/// How a stdio upstream's process is confined.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sandbox {
    /// Confined (the default): the system's directories, the program's own, and these. Paths
    /// are relative to the config file; the gateway's protected files are never granted.
    On {
        /// `sandbox.read`: trees (or files) it may also read and execute.
        read: Vec<String>,
        /// `sandbox.write`: trees (or files) it may also write.
        write: Vec<String>,
        /// `sandbox.user`: who it runs as when the gateway runs as root (a name of
        /// `/etc/passwd` or `UID:GID`; `None`: `nobody`).
        user: Option<String>,
    },
    /// `sandbox = "off"`: the operator runs it unconfined, knowingly; said at start-up.
    Off,
}

impl Default for Sandbox {
    fn default() -> Sandbox {
        Sandbox::On {
            read: Vec::new(),
            write: Vec::new(),
            user: None,
        }
    }
}

/// The `sandbox` value; an error names its key under `sandbox`.
pub(super) fn parse(value: Option<toml::Value>) -> Result<Sandbox, (String, String)> {
    let wrong = |key: &str, m: String| (key.to_string(), m);
    let raw: RawSandbox = match value {
        None => return Ok(Sandbox::default()),
        Some(toml::Value::String(s)) if s == "off" => return Ok(Sandbox::Off),
        Some(toml::Value::String(s)) => return Err(wrong("sandbox", format!("{s:?} is not \"off\"; leave sandbox out (the upstream is sandboxed) or give a table: read = [\"DIR\"], write = [\"DIR\"], user = \"NAME\""))),
        Some(table @ toml::Value::Table(_)) => table
            .try_into()
            .map_err(|e: toml::de::Error| wrong("sandbox", e.message().trim().to_string()))?,
        Some(other) => {
            return Err(wrong(
                "sandbox",
                format!("is a {} where \"off\" or a table (read, write, user) is expected", other.type_str()),
            ))
        }
    };
    for (key, entries) in [("read", &raw.read), ("write", &raw.write)] {
        for entry in entries.iter().flatten() {
            if entry.is_empty() || entry.contains('\0') {
                return Err(wrong(
                    &format!("sandbox.{key}"),
                    format!("{entry:?} is not a path (non-empty, without NUL)"),
                ));
            }
        }
    }
    if let Some(user) = &raw.user {
        if user.is_empty() || user.contains('\0') {
            return Err(wrong(
                "sandbox.user",
                "names a user (of /etc/passwd, or UID:GID)".into(),
            ));
        }
    }
    Ok(Sandbox::On {
        read: raw.read.unwrap_or_default(),
        write: raw.write.unwrap_or_default(),
        user: raw.user,
    })
}
