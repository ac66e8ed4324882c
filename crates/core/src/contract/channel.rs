//! What every channel's part of a contract answers. Each channel's spec is its own module
//! (`http`, `ssh`, `mcp`) implementing [`ChannelRules`]; [`ChannelSpec`] only picks the
//! variant. Adding a channel: a module here, a variant of [`ChannelSpec`] and [`ChannelKind`],
//! a module in `postern-channels`, one arm of the registry (ARCHITECTURE.md lists them).

use serde_json::Value;

use super::{ChannelKind, ContractError, HttpSpec, McpSpec, SshSpec};

/// Builds the error for a field of the tool being validated.
pub(crate) type FieldErr<'a> = &'a dyn Fn(&str, String) -> ContractError;

/// A channel's rules, as the contract, the action record and start-up read them.
pub trait ChannelRules {
    fn kind(&self) -> ChannelKind;
    /// The target as it enters the action record: where the effect lands, without arguments.
    fn target(&self) -> String;
    /// The operation as it enters the action record.
    fn method(&self) -> String;
    /// The `[credential.NAME]` it sends with, if any.
    fn credential_ref(&self) -> Option<&str>;
    /// Checks the channel's own fields (and the arguments they use) when the contract is built.
    fn validate(&self, input_schema: &Value, err: FieldErr<'_>) -> Result<(), ContractError>;
    /// Which recovery probes the channel can ask.
    fn probes(&self) -> Probes;
    /// A CA file (relative to the config) its requests trust, read at start-up.
    fn ca_file(&self) -> Option<&str>;
}

/// The recovery probes a channel can ask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probes {
    /// How it asks whether an execution was applied.
    pub status: StatusProbe,
    /// Whether it can have a precondition query (an HTTP request).
    pub precondition: bool,
    /// Whether it runs the marker protocol.
    pub marker: bool,
}

/// How a channel asks whether an execution was applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusProbe {
    /// An HTTP request (`recovery.status_query`).
    HttpQuery,
    /// A tool of the same upstream (`recovery.status_tool`).
    UpstreamTool,
}

/// The channel-specific part of a contract.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChannelSpec {
    Http(HttpSpec),
    Ssh(SshSpec),
    Mcp(McpSpec),
}

impl ChannelSpec {
    /// The channel's rules: the one place a channel's variant is matched.
    pub fn rules(&self) -> &dyn ChannelRules {
        match self {
            ChannelSpec::Http(h) => h,
            ChannelSpec::Ssh(s) => s,
            ChannelSpec::Mcp(m) => m,
        }
    }

    pub fn channel(&self) -> ChannelKind {
        self.rules().kind()
    }

    /// The target as it enters the action record.
    pub fn target(&self) -> String {
        self.rules().target()
    }

    /// The operation as it enters the action record.
    pub fn method(&self) -> String {
        self.rules().method()
    }

    pub fn credential_ref(&self) -> Option<&str> {
        self.rules().credential_ref()
    }
}
