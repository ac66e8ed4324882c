//! The SSH channel's part of a contract: a command template on a pinned host, run under the
//! marker protocol.

use std::time::Duration;

use serde_json::Value;

use super::channel::{ChannelRules, FieldErr, Probes, StatusProbe};
use super::{ChannelKind, ContractError};

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SshSpec {
    pub host: String,
    pub port: u16,
    pub user: String,
    /// Pinned host key: an OpenSSH public key line (`ssh-ed25519 AAAA…`) or its SHA-256
    /// fingerprint (`SHA256:…`).
    pub host_key: String,
    pub credential: String,
    /// Command template; `{name}` is replaced by the POSIX-shell-quoted argument, so it must
    /// stand in plain shell code, outside quotes ([`crate::shell::check_command`]).
    pub command: String,
    /// The directory the command runs in on the host (`None`: the user's home).
    pub cwd: Option<String>,
    /// How long a dispatch stays connected waiting for the command to end; after that its
    /// outcome is unknown and the marker answers the retry.
    pub timeout: Duration,
    /// Exit codes that mean "nothing changed": `rejected`. Other non-zero codes are unknown.
    pub unchanged_exit_codes: Vec<i32>,
    /// Where the markers live on the host (`None`: `${POSTERN_MARKER_DIR:-$HOME/.postern/exec}`).
    pub marker_dir: Option<String>,
}

impl SshSpec {
    /// The argument names the command template uses, in order of first use.
    pub fn placeholders(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        let mut rest = self.command.as_str();
        while let Some(start) = rest.find('{') {
            let Some(len) = rest[start..].find('}') else {
                break;
            };
            let name = &rest[start + 1..start + len];
            if !names.contains(&name) {
                names.push(name);
            }
            rest = &rest[start + len + 1..];
        }
        names
    }
}

impl ChannelRules for SshSpec {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Ssh
    }

    fn target(&self) -> String {
        format!("{}@{}:{}", self.user, self.host, self.port)
    }

    fn method(&self) -> String {
        self.command.clone()
    }

    fn credential_ref(&self) -> Option<&str> {
        Some(self.credential.as_str())
    }

    fn validate(&self, input_schema: &Value, err: FieldErr<'_>) -> Result<(), ContractError> {
        if self.host.is_empty() || self.user.is_empty() || self.command.is_empty() {
            return Err(err("ssh", "host, user and command are required".into()));
        }
        let fingerprint = self.host_key.strip_prefix("SHA256:");
        if fingerprint.is_none_or(str::is_empty) && self.host_key.split_whitespace().count() < 2 {
            return Err(err(
                "ssh.host_key",
                "must be a pinned OpenSSH public key line (\"ssh-ed25519 AAAA…\") or its fingerprint (\"SHA256:…\", as ssh-keygen -lf prints)".into(),
            ));
        }
        if self.command.matches('{').count() != self.command.matches('}').count() {
            return Err(err("ssh.command", "has an unbalanced {placeholder}".into()));
        }
        crate::shell::check_command_typed(&self.command, &typed_properties(input_schema))
            .map_err(|e| err("ssh.command", e.to_string()))?;
        if self.timeout.is_zero() {
            return Err(err("ssh.timeout", "must be greater than zero".into()));
        }
        // Every `{name}` in the command must be an argument the schema declares.
        let props = input_schema.get("properties").and_then(Value::as_object);
        for name in self.placeholders() {
            if !props.is_some_and(|p| p.contains_key(name)) {
                return Err(err(
                    "ssh.command",
                    format!("{{{name}}} is not a property of input_schema"),
                ));
            }
        }
        Ok(())
    }

    fn probes(&self) -> Probes {
        Probes {
            status: StatusProbe::HttpQuery,
            precondition: true,
            marker: true,
        }
    }

    // Pinned by its host key: no CA.
    fn ca_file(&self) -> Option<&str> {
        None
    }
}

/// The properties whose schema allows only an integer, a boolean or one of an enum's (or a
/// `const`'s) operator-chosen values: all an SSH template may let bash read again.
fn typed_properties(input_schema: &Value) -> Vec<&str> {
    let Some(props) = input_schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    props
        .iter()
        .filter(|(_, p)| {
            matches!(
                p.get("type").and_then(Value::as_str),
                Some("integer" | "boolean")
            ) || p
                .get("enum")
                .and_then(Value::as_array)
                .is_some_and(|e| !e.is_empty())
                || p.get("const").is_some()
        })
        .map(|(name, _)| name.as_str())
        .collect()
}
