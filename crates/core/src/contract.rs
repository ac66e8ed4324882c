//! Tool contracts: per tool, what its side effect is and how it may be recovered. A contract is
//! validated when it is built, so the rest of the gateway never meets an unsafe combination
//! (an irreversible tool that "retries", a conditional write with no precondition to query).

use std::collections::BTreeSet;
use std::time::Duration;

/// The built-in tool that reads an execution's record: a name no `[[tool]]` may take.
pub const EXECUTION_STATUS: &str = "execution_status";

use serde_json::{Map, Value};

use crate::canon;
use crate::class::{ActionClass, RecoveryMethod};

mod channel;
mod http;
mod mcp;
mod ssh;

use channel::FieldErr;
pub use channel::{ChannelRules, ChannelSpec, Probes, StatusProbe};
pub use http::{HttpBody, HttpRequestSpec, HttpSpec};
pub use mcp::{McpSpec, StatusTool, ToolErrorVerdict};
pub use ssh::SshSpec;

/// Why a tool contract was refused. Always names the tool and the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tool {tool:?}: {field}: {reason}")]
pub struct ContractError {
    pub tool: String,
    pub field: String,
    pub reason: String,
}

/// Which kind of channel performs the side effect (the record's `channel`; the channel itself
/// is `postern_channels::Channel`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChannelKind {
    Http,
    Ssh,
    Mcp,
}

impl ChannelKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChannelKind::Http => "http",
            ChannelKind::Ssh => "ssh",
            ChannelKind::Mcp => "mcp",
        }
    }
}

/// When a human must approve a use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Approval {
    /// Covered by the run's session authorization.
    #[default]
    Session,
    /// Every call needs its own approval.
    EveryCall,
}

/// How arguments are normalised before fingerprinting.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ArgumentRules {
    /// Filled in when the caller omits them, so omission and the default are the same intent.
    pub defaults: Map<String, Value>,
    /// Dropped from the record: they do not change what the action does (e.g. a trace id).
    pub non_semantic: BTreeSet<String>,
    /// Replaced by a keyed reference: the raw value never enters the record.
    pub secret: BTreeSet<String>,
}

/// How an unknown outcome is recovered.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RecoverySpec {
    pub method: RecoveryMethod,
    /// Asks the target whether this execution's key was applied; tried before the method.
    pub status_query: Option<HttpRequestSpec>,
    /// The same question as an upstream tool call (MCP tools).
    pub status_tool: Option<StatusTool>,
    /// Asks the target whether the precondition of a conditional write still holds.
    pub precondition: Option<HttpRequestSpec>,
}

/// Everything the gateway needs to know about a tool to perform and recover it safely.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ToolContract {
    pub name: String,
    pub description: String,
    pub class: ActionClass,
    pub channel: ChannelSpec,
    pub input_schema: Value,
    pub arguments: ArgumentRules,
    /// How long an identical call is matched to a prior execution. Zero for reads.
    pub match_window: Duration,
    /// How long the record (and an operation key) is kept.
    pub retention: Duration,
    pub recovery: RecoverySpec,
    pub approval: Approval,
    /// How long a call of this tool waits for its per-use approval (`None`: the gateway's
    /// `approval_ttl`). Set only where an approval is asked for.
    pub approval_ttl: Option<Duration>,
    /// Declared long-running: served as an MCP task.
    pub long_running: bool,
}

/// A contract as written, before validation. Optional fields are filled or refused by
/// [`ToolContractDraft::validate`].
#[derive(Clone, Debug, Default)]
pub struct ToolContractDraft {
    pub name: String,
    pub description: String,
    pub class: Option<ActionClass>,
    pub channel: Option<ChannelSpec>,
    pub input_schema: Option<Value>,
    pub arguments: ArgumentRules,
    pub match_window: Option<Duration>,
    pub retention: Option<Duration>,
    pub recovery_method: Option<RecoveryMethod>,
    pub status_query: Option<HttpRequestSpec>,
    pub status_tool: Option<StatusTool>,
    pub precondition: Option<HttpRequestSpec>,
    pub approval: Approval,
    pub approval_ttl: Option<Duration>,
    pub long_running: bool,
}

impl RecoverySpec {
    /// Whether the target can be asked if an execution was applied.
    pub fn has_status_probe(&self) -> bool {
        self.status_query.is_some() || self.status_tool.is_some()
    }
}

impl ToolContractDraft {
    fn has_status_probe(&self) -> bool {
        self.status_query.is_some() || self.status_tool.is_some()
    }

    /// The error for `field` of this tool.
    fn err(&self, field: &str, reason: String) -> ContractError {
        ContractError {
            tool: self.name.clone(),
            field: field.to_string(),
            reason,
        }
    }

    /// Checks every field and fills the defaults. Checks run in a fixed order, so a draft with
    /// several faults is always refused for the same one.
    pub fn validate(self) -> Result<ToolContract, ContractError> {
        let err = |field: &str, reason: String| self.err(field, reason);
        self.check_name()?;
        let class = self.class.ok_or_else(|| {
            err(
                "class",
                "missing: every tool declares its action class".into(),
            )
        })?;
        let channel = self
            .channel
            .clone()
            .ok_or_else(|| err("channel", "missing: declare one of http, ssh or mcp".into()))?;
        let input_schema = self
            .input_schema
            .clone()
            .unwrap_or_else(|| serde_json::json!({"type": "object"}));
        validate_schema(&input_schema).map_err(|r| err("input_schema", r))?;
        validate_arguments(&self.arguments, &input_schema, &err)?;
        channel.rules().validate(&input_schema, &err)?;
        let (match_window, retention) = self.windows(class)?;
        let method = self.recovery_method(class)?;
        let probes = channel.rules().probes();
        self.check_probes(probes, class)?;
        if method == RecoveryMethod::Marker && !probes.marker {
            return Err(err(
                "recovery.method",
                "the marker protocol exists only on the ssh channel; use review".into(),
            ));
        }
        for (field, probe) in [
            ("recovery.status_query", &self.status_query),
            ("recovery.precondition", &self.precondition),
        ] {
            if let Some(p) = probe {
                validate_request(p, &|r| err(field, r))?;
            }
        }
        if self.long_running && class.is_read_only() {
            return Err(err(
                "long_running",
                "a read_only tool is not run as a task".into(),
            ));
        }
        Ok(ToolContract {
            name: self.name.clone(),
            description: self.description.clone(),
            class,
            channel,
            input_schema,
            arguments: self.arguments.clone(),
            match_window,
            retention,
            recovery: RecoverySpec {
                method,
                status_query: self.status_query.clone(),
                status_tool: self.status_tool.clone(),
                precondition: self.precondition.clone(),
            },
            approval: self.approval,
            approval_ttl: self.approval_ttl,
            long_running: self.long_running,
        })
    }

    fn check_name(&self) -> Result<(), ContractError> {
        if !valid_tool_name(&self.name) {
            return Err(self.err(
                "name",
                "must be 1-64 characters of letters, digits, '_', '-' or '.'".into(),
            ));
        }
        if self.name == EXECUTION_STATUS {
            return Err(self.err("name", "execution_status is a built-in tool".into()));
        }
        Ok(())
    }

    /// The match window and retention: a read_only tool is never matched; any other must
    /// declare both, and keep its record at least as long as it can be matched.
    fn windows(&self, class: ActionClass) -> Result<(Duration, Duration), ContractError> {
        if class.is_read_only() {
            if self.match_window.is_some_and(|w| !w.is_zero()) {
                return Err(self.err(
                    "match_window",
                    "a read_only tool is never matched: remove the match window".into(),
                ));
            }
            return Ok((Duration::ZERO, self.retention.unwrap_or(Duration::ZERO)));
        }
        let w = self.match_window.ok_or_else(|| {
            self.err(
                "match_window",
                format!("missing: a {class} tool must say how long an identical call is the same intent (\"0s\" to never match)"),
            )
        })?;
        let r = self.retention.ok_or_else(|| {
            self.err(
                "retention",
                format!("missing: a {class} tool must say how long its record is kept"),
            )
        })?;
        if r < w {
            return Err(self.err(
                "retention",
                "must be at least the match window: a record cannot be matched after it is gone"
                    .into(),
            ));
        }
        Ok((w, r))
    }

    /// The declared recovery method, or the class's default (an irreversible tool that can be
    /// asked about its effect asks); refused where it is not safe for the class.
    fn recovery_method(&self, class: ActionClass) -> Result<RecoveryMethod, ContractError> {
        let method = self.recovery_method.unwrap_or_else(|| {
            if class == ActionClass::Irreversible && self.has_status_probe() {
                RecoveryMethod::StatusQuery
            } else {
                class.default_recovery()
            }
        });
        if !class.allows(method) {
            return Err(self.err(
                "recovery.method",
                format!("{method} is not safe for a {class} tool"),
            ));
        }
        if method == RecoveryMethod::StatusQuery && !self.has_status_probe() {
            return Err(self.err(
                "recovery.status_query",
                "missing: recovery method status_query needs a status query request (or, for an mcp tool, a status_tool)".into(),
            ));
        }
        Ok(method)
    }

    /// Status probes and preconditions fit the channel (an mcp tool asks its upstream, the
    /// others send HTTP) and a precondition belongs to a conditional_write, which needs one.
    fn check_probes(&self, probes: Probes, class: ActionClass) -> Result<(), ContractError> {
        match probes.status {
            StatusProbe::UpstreamTool if self.status_query.is_some() => {
                return Err(self.err(
                    "recovery.status_query",
                    "an mcp tool asks its upstream: use status_tool = \"…\"".into(),
                ))
            }
            StatusProbe::HttpQuery if self.status_tool.is_some() => {
                return Err(self.err(
                    "recovery.status_tool",
                    "only an mcp tool has a status_tool; an http tool has a status_query".into(),
                ))
            }
            StatusProbe::UpstreamTool | StatusProbe::HttpQuery => {}
        }
        if self.precondition.is_some() && !probes.precondition {
            return Err(self.err(
                "recovery.precondition",
                "a precondition is an HTTP query; an mcp tool cannot have one".into(),
            ));
        }
        if class == ActionClass::ConditionalWrite && self.precondition.is_none() {
            return Err(self.err(
                "recovery.precondition",
                "missing: a conditional_write tool needs a precondition query".into(),
            ));
        }
        if self.precondition.is_some() && class != ActionClass::ConditionalWrite {
            return Err(self.err(
                "recovery.precondition",
                format!("only a conditional_write tool has a precondition, this one is {class}"),
            ));
        }
        Ok(())
    }
}

/// A tool name MCP clients accept: 1-64 letters, digits, '_', '-' or '.'.
pub fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

fn validate_schema(schema: &Value) -> Result<(), String> {
    let obj = schema
        .as_object()
        .ok_or("must be a JSON Schema object".to_string())?;
    match obj.get("type") {
        Some(Value::String(t)) if t == "object" => {}
        _ => return Err("must have \"type\": \"object\" (tool arguments are an object)".into()),
    }
    if let Some(props) = obj.get("properties") {
        if !props.is_object() {
            return Err("properties must be an object".into());
        }
    }
    canon::check_numbers(schema).map_err(|e| e.to_string())
}

fn validate_arguments(
    rules: &ArgumentRules,
    schema: &Value,
    err: FieldErr<'_>,
) -> Result<(), ContractError> {
    let props = schema.get("properties").and_then(Value::as_object);
    let known = |field: &str, name: &str| -> Result<(), ContractError> {
        match props {
            Some(p) if !p.contains_key(name) => Err(err(
                field,
                format!("{name:?} is not a property of input_schema"),
            )),
            _ => Ok(()),
        }
    };
    for name in rules.defaults.keys() {
        known("defaults", name)?;
        if rules.secret.contains(name) {
            return Err(err(
                "defaults",
                format!("{name:?} is a secret field: secrets have no defaults in config"),
            ));
        }
    }
    canon::check_numbers(&Value::Object(rules.defaults.clone()))
        .map_err(|e| err("defaults", e.to_string()))?;
    for name in &rules.non_semantic {
        known("non_semantic", name)?;
        if rules.secret.contains(name) {
            return Err(err(
                "non_semantic",
                format!("{name:?} is also a secret field: pick one"),
            ));
        }
    }
    for name in &rules.secret {
        known("secret_fields", name)?;
    }
    Ok(())
}

pub(crate) fn validate_request(
    req: &HttpRequestSpec,
    err: &dyn Fn(String) -> ContractError,
) -> Result<(), ContractError> {
    const METHODS: [&str; 7] = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];
    if !METHODS.contains(&req.method.as_str()) {
        return Err(err(format!(
            "method {:?} is not one of {}",
            req.method,
            METHODS.join(", ")
        )));
    }
    if !(req.url.starts_with("http://") || req.url.starts_with("https://")) {
        return Err(err(format!(
            "url {:?} must start with http:// or https://",
            req.url
        )));
    }
    if req.url.matches('{').count() != req.url.matches('}').count() {
        return Err(err(format!(
            "url {:?} has an unbalanced {{placeholder}}",
            req.url
        )));
    }
    Ok(())
}
