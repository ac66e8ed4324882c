//! The MCP channel's part of a contract: one tool of an upstream server, re-exported.

use std::time::Duration;

use serde_json::{Map, Value};

use super::channel::{ChannelRules, FieldErr, Probes, StatusProbe};
use super::{ChannelKind, ContractError};

/// One tool of an upstream MCP server, re-exported under this contract.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct McpSpec {
    /// The `[upstream.NAME]` it is called on.
    pub server: String,
    /// The upstream's name for the tool.
    pub tool: String,
    /// How long a call waits for the upstream's answer or its next progress report (each
    /// report extends the wait: a call runs as long as its upstream keeps it alive); then
    /// `outcome_unknown`.
    pub timeout: Duration,
    /// The longest a call runs however often its upstream reports progress (the upstream's
    /// `max_duration`, never less than `timeout`).
    pub max_duration: Duration,
    /// What an answer with `isError: true` means for the effect (default unknown: an MCP
    /// tool error may follow a partial effect).
    pub on_tool_error: ToolErrorVerdict,
    /// The config gives no `input_schema`: calls are validated against the upstream's, as it
    /// lists it now.
    pub schema_from_upstream: bool,
    /// The largest answer stored: a read's larger answer is still given to the caller (and
    /// only a note of it stored), any other's is stored as a note with its size and digest.
    pub max_response_bytes: usize,
}

/// How an upstream tool's `isError: true` result is read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolErrorVerdict {
    #[default]
    Unknown,
    Rejected,
}

/// An upstream tool that answers whether an execution was applied (the MCP channel's status
/// query): called with `arguments`, where a string `"{execution_id}"` is replaced by the id and
/// `"{name}"` by the call's argument `name`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct StatusTool {
    pub tool: String,
    pub arguments: Map<String, Value>,
}

impl ChannelRules for McpSpec {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Mcp
    }

    fn target(&self) -> String {
        format!("{}/{}", self.server, self.tool)
    }

    fn method(&self) -> String {
        "tools/call".to_string()
    }

    // The upstream's own credential, if any, is its transport's.
    fn credential_ref(&self) -> Option<&str> {
        None
    }

    fn validate(&self, _input_schema: &Value, err: FieldErr<'_>) -> Result<(), ContractError> {
        if self.server.is_empty() || self.tool.is_empty() {
            return Err(err("mcp", "server and tool are required".into()));
        }
        if self.timeout.is_zero() {
            return Err(err("mcp.timeout", "must be greater than zero".into()));
        }
        Ok(())
    }

    fn probes(&self) -> Probes {
        Probes {
            status: StatusProbe::UpstreamTool,
            precondition: false,
            marker: false,
        }
    }

    // The upstream's transport has its own CA file (`[upstream.NAME] ca_file`).
    fn ca_file(&self) -> Option<&str> {
        None
    }
}
