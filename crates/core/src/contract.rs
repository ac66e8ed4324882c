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

/// How an HTTP request body is built from the arguments.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HttpBody {
    /// No body.
    None,
    /// The (validated) arguments object as a JSON body.
    Arguments,
}

/// An HTTP request template; `{name}` in the URL is replaced by the argument `name`
/// (percent-encoded), `{execution_id}` by the execution id.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct HttpRequestSpec {
    pub method: String,
    pub url: String,
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct HttpSpec {
    pub request: HttpRequestSpec,
    pub credential: Option<String>,
    pub body: HttpBody,
    /// Header that carries the execution id on every non-read request.
    pub idempotency_header: String,
    pub connect_timeout: Duration,
    pub response_timeout: Duration,
    /// A PEM file of CA certificates (relative to the config file) that the tool's `https://`
    /// requests trust instead of the webpki roots.
    pub ca_file: Option<String>,
}

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

/// The channel-specific part of a contract.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChannelSpec {
    Http(HttpSpec),
    Ssh(SshSpec),
    Mcp(McpSpec),
}

impl ChannelSpec {
    pub fn channel(&self) -> ChannelKind {
        match self {
            ChannelSpec::Http(_) => ChannelKind::Http,
            ChannelSpec::Ssh(_) => ChannelKind::Ssh,
            ChannelSpec::Mcp(_) => ChannelKind::Mcp,
        }
    }

    /// The target as it enters the action record: where the effect lands, without arguments.
    pub fn target(&self) -> String {
        match self {
            ChannelSpec::Http(h) => h.request.url.clone(),
            ChannelSpec::Ssh(s) => format!("{}@{}:{}", s.user, s.host, s.port),
            ChannelSpec::Mcp(m) => format!("{}/{}", m.server, m.tool),
        }
    }

    /// The operation as it enters the action record.
    pub fn method(&self) -> String {
        match self {
            ChannelSpec::Http(h) => h.request.method.clone(),
            ChannelSpec::Ssh(s) => s.command.clone(),
            ChannelSpec::Mcp(_) => "tools/call".to_string(),
        }
    }

    pub fn credential_ref(&self) -> Option<&str> {
        match self {
            ChannelSpec::Http(h) => h.credential.as_deref(),
            ChannelSpec::Ssh(s) => Some(s.credential.as_str()),
            ChannelSpec::Mcp(_) => None,
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
        validate_channel(&channel, &input_schema, &err)?;
        self.check_placeholders(&channel, &input_schema)?;
        let (match_window, retention) = self.windows(class)?;
        let method = self.recovery_method(class)?;
        self.check_probes(&channel, class)?;
        if method == RecoveryMethod::Marker && channel.channel() != ChannelKind::Ssh {
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

    /// Every `{name}` in an ssh command must be an argument the schema declares.
    fn check_placeholders(
        &self,
        channel: &ChannelSpec,
        input_schema: &Value,
    ) -> Result<(), ContractError> {
        let ChannelSpec::Ssh(s) = channel else {
            return Ok(());
        };
        let props = input_schema.get("properties").and_then(Value::as_object);
        for name in s.placeholders() {
            if !props.is_some_and(|p| p.contains_key(name)) {
                return Err(self.err(
                    "ssh.command",
                    format!("{{{name}}} is not a property of input_schema"),
                ));
            }
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
    fn check_probes(&self, channel: &ChannelSpec, class: ActionClass) -> Result<(), ContractError> {
        match (channel, &self.status_query, &self.status_tool) {
            (ChannelSpec::Mcp(_), Some(_), _) => {
                return Err(self.err(
                    "recovery.status_query",
                    "an mcp tool asks its upstream: use status_tool = \"…\"".into(),
                ))
            }
            (ChannelSpec::Http(_) | ChannelSpec::Ssh(_), _, Some(_)) => {
                return Err(self.err(
                    "recovery.status_tool",
                    "only an mcp tool has a status_tool; an http tool has a status_query".into(),
                ))
            }
            // Every channel is named: a new one must say what its probes are.
            (ChannelSpec::Mcp(_), None, _)
            | (ChannelSpec::Http(_) | ChannelSpec::Ssh(_), _, None) => {}
        }
        if self.precondition.is_some() && matches!(channel, ChannelSpec::Mcp(_)) {
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

type FieldErr<'a> = &'a dyn Fn(&str, String) -> ContractError;

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

fn validate_request(
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

fn validate_channel(
    channel: &ChannelSpec,
    input_schema: &Value,
    err: FieldErr<'_>,
) -> Result<(), ContractError> {
    match channel {
        ChannelSpec::Http(h) => {
            validate_request(&h.request, &|r| err("http", r))?;
            if h.idempotency_header.is_empty()
                || !h
                    .idempotency_header
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            {
                return Err(err(
                    "http.idempotency_header",
                    format!("{:?} is not a valid header name", h.idempotency_header),
                ));
            }
            if h.response_timeout.is_zero() || h.connect_timeout.is_zero() {
                return Err(err("http", "timeouts must be greater than zero".into()));
            }
        }
        ChannelSpec::Ssh(s) => {
            if s.host.is_empty() || s.user.is_empty() || s.command.is_empty() {
                return Err(err("ssh", "host, user and command are required".into()));
            }
            let fingerprint = s.host_key.strip_prefix("SHA256:");
            if fingerprint.is_none_or(str::is_empty) && s.host_key.split_whitespace().count() < 2 {
                return Err(err(
                    "ssh.host_key",
                    "must be a pinned OpenSSH public key line (\"ssh-ed25519 AAAA…\") or its fingerprint (\"SHA256:…\", as ssh-keygen -lf prints)".into(),
                ));
            }
            if s.command.matches('{').count() != s.command.matches('}').count() {
                return Err(err("ssh.command", "has an unbalanced {placeholder}".into()));
            }
            crate::shell::check_command_typed(&s.command, &typed_properties(input_schema))
                .map_err(|e| err("ssh.command", e.to_string()))?;
            if s.timeout.is_zero() {
                return Err(err("ssh.timeout", "must be greater than zero".into()));
            }
        }
        ChannelSpec::Mcp(m) => {
            if m.server.is_empty() || m.tool.is_empty() {
                return Err(err("mcp", "server and tool are required".into()));
            }
            if m.timeout.is_zero() {
                return Err(err("mcp.timeout", "must be greater than zero".into()));
            }
        }
    }
    Ok(())
}
