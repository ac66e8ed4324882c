//! `[upstream.NAME]`: the MCP servers whose tools the gateway re-exports, and the `mcp = {…}`
//! channel of a tool that calls one.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use super::raw::{RawMcp, RawUpstream};
use super::{Credential, CredentialKind, EnvValue, SecretRef};
use crate::class::ActionClass;
use crate::contract::{
    ChannelSpec, McpSpec, StatusTool, ToolContract, ToolContractDraft, ToolErrorVerdict,
};
use crate::duration::parse_duration;

mod sandbox;

pub use sandbox::Sandbox;

/// An upstream MCP server.
#[derive(Clone, Debug, PartialEq)]
pub struct Upstream {
    pub transport: UpstreamTransport,
    /// How long a call waits for an answer or its next progress report unless its tool says
    /// otherwise (each report extends the wait).
    pub timeout: Duration,
    /// The longest one call runs, however often it reports progress.
    pub max_duration: Duration,
    /// How long `serve` waits for the first connection before it lists tools or listens, and
    /// a call waits for a link that is (re)connecting before it fails, sending nothing.
    pub startup_timeout: Duration,
    /// The largest answer of its tools that is stored (a tool's `mcp.max_response_bytes` says
    /// otherwise for that tool).
    pub max_response_bytes: usize,
    /// `expose = "all"`: every tool it lists is served under one default contract.
    pub expose_all: Option<ExposeAll>,
}

/// `expose = "all"`: each tool the upstream lists is served as `<prefix><its name>` under a
/// copy of `template` (class `default_class`, default `irreversible`; window `match_window`,
/// default 10m). A tool that a `[[tool]]` re-exports explicitly is served only under that
/// contract; a name that a `[[tool]]` or `execution_status` already has is not served.
#[derive(Clone, Debug, PartialEq)]
pub struct ExposeAll {
    pub prefix: String,
    template: ToolContract,
    /// `read_only = ["list_*", …]`: the operator's patterns of the tools that only read; they
    /// are served under `reads` (class `read_only`: re-executed every time, nothing stored).
    /// The upstream's own annotations never decide this.
    pub read_only: Vec<String>,
    reads: Option<ToolContract>,
}

/// Whether `name` fits `pattern`, where `*` stands for any run of characters.
pub fn name_matches(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

impl ExposeAll {
    /// The `read_only` pattern the upstream's tool `tool` matches, if any.
    pub fn read_pattern(&self, tool: &str) -> Option<&str> {
        self.read_only
            .iter()
            .find(|p| name_matches(p, tool))
            .map(String::as_str)
    }

    /// The contract of the upstream's tool `tool`, served as `name`.
    pub fn contract(&self, name: &str, tool: &str) -> ToolContract {
        let template = match (&self.reads, self.read_pattern(tool)) {
            (Some(reads), Some(_)) => reads,
            _ => &self.template,
        };
        let mut c = template.clone();
        c.name = name.to_string();
        if let ChannelSpec::Mcp(m) = &mut c.channel {
            m.tool = tool.to_string();
        }
        c
    }

    /// The default contract itself (named `<prefix>tool`).
    pub fn template(&self) -> &ToolContract {
        &self.template
    }

    /// The name an upstream tool is served under, if it can have one (a tool name is 1-64
    /// letters, digits, '_', '-' or '.').
    pub fn served_name(&self, tool: &str) -> Option<String> {
        let name = format!("{}{tool}", self.prefix);
        crate::contract::valid_tool_name(&name).then_some(name)
    }
}

/// The match window of an `expose = "all"` tool unless the upstream says otherwise.
pub const DEFAULT_EXPOSE_WINDOW: Duration = Duration::from_secs(600);

/// How the gateway reaches an upstream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpstreamTransport {
    /// A child process speaking MCP on stdin/stdout, started with the gateway and restarted
    /// when it dies. `cwd` is relative to the config file. Its environment is a safe base
    /// (`postern_channels::mcp::INHERITED_ENV`) and `env`, nothing else of the gateway's; what
    /// it may reach, `sandbox`.
    Stdio {
        command: Vec<String>,
        env: BTreeMap<String, EnvValue>,
        cwd: Option<String>,
        sandbox: Sandbox,
    },
    /// A Streamable HTTP endpoint. `credential` names a bearer or header credential;
    /// `ca_file` (relative to the config file) replaces the webpki roots for `https://`.
    Http {
        url: String,
        credential: Option<String>,
        ca_file: Option<String>,
    },
}

impl Upstream {
    /// The credential the upstream's requests carry, if any.
    pub fn credential(&self) -> Option<&str> {
        match &self.transport {
            UpstreamTransport::Http { credential, .. } => credential.as_deref(),
            UpstreamTransport::Stdio { .. } => None,
        }
    }
}

/// A name the process environment can hold, a value without NUL, and a secret that can be read
/// when the process starts (the vault is unlocked later, by an operator).
fn check_env(var: &str, value: &EnvValue) -> Result<(), String> {
    if var.is_empty() || var.contains('=') || var.contains('\0') {
        return Err("a variable name is non-empty, without '=' or NUL".into());
    }
    match value {
        EnvValue::Plain(v) if v.contains('\0') => Err("the value holds a NUL".into()),
        EnvValue::Secret(SecretRef::Vault(_)) => Err("an upstream's environment is read when its process starts, before an operator can unlock the vault; give the secret as { env = \"…\" } or { file = \"…\" }".into()),
        _ => Ok(()),
    }
}

/// The default wait for an upstream's answer.
/// Generous: MCP tools run for minutes (a build, a crawl), and a call that reports progress
/// is extended past it anyway.
pub const DEFAULT_UPSTREAM_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// The longest a call runs by default, however often it reports progress (MCP asks clients to
/// keep such a bound).
pub const DEFAULT_MAX_DURATION: Duration = Duration::from_secs(60 * 60);

/// The default wait for an upstream's link to come up (at start, and for a call).
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(10);

pub(super) fn parse_upstream(
    name: &str,
    mut u: RawUpstream,
    credentials: &BTreeMap<String, Credential>,
    retention: Duration,
) -> Result<Upstream, String> {
    let field = |f: &str, m: String| format!("upstream.{name}.{f}: {m}");
    if !valid_name(name) {
        return Err(format!(
            "upstream.{name}: a name is 1-64 letters, digits, '_' or '-'"
        ));
    }
    let (timeout, max_duration) = call_timeouts(&u).map_err(|(f, m)| field(f, m))?;
    let startup_timeout = match &u.startup_timeout {
        None => DEFAULT_STARTUP_TIMEOUT,
        Some(t) => parse_duration(t).map_err(|e| field("startup_timeout", e.to_string()))?,
    };
    let max_response_bytes =
        response_cap(u.max_response_bytes).map_err(|m| field("max_response_bytes", m))?;
    let expose_all = expose_all(
        name,
        &mut u,
        (timeout, max_duration),
        retention,
        max_response_bytes,
    )?;
    let transport = match (u.command, u.url) {
        (Some(command), None) => {
            if command.is_empty() || command[0].is_empty() {
                return Err(field("command", "names the program first: command = [\"prog\", \"arg\"]".into()));
            }
            for (key, what) in [(&u.credential, "credential"), (&u.ca_file, "ca_file")] {
                if key.is_some() {
                    return Err(field(what, "only an upstream with url = \"…\" has one; a stdio upstream gets secrets through env".into()));
                }
            }
            let env = u.env.unwrap_or_default();
            for (var, value) in &env {
                check_env(var, value).map_err(|m| field(&format!("env.{var}"), m))?;
            }
            let sandbox = sandbox::parse(u.sandbox).map_err(|(key, m)| field(&key, m))?;
            UpstreamTransport::Stdio {
                command,
                env,
                cwd: u.cwd,
                sandbox,
            }
        }
        (None, Some(url)) => {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(field("url", format!("{url:?} must start with http:// or https://")));
            }
            for (key, what) in [
                (u.env.is_some(), "env"),
                (u.cwd.is_some(), "cwd"),
                (u.sandbox.is_some(), "sandbox"),
            ] {
                if key {
                    return Err(field(what, "only a stdio upstream (command = […]) has one".into()));
                }
            }
            if u.ca_file.is_some() && !url.starts_with("https://") {
                return Err(field("ca_file", "the url is http://, where no certificate is checked".into()));
            }
            if let Some(c) = &u.credential {
                let kind = credentials
                    .get(c)
                    .map(|c| &c.kind)
                    .ok_or_else(|| field("credential", format!("{c:?} is not declared in [credential.*]")))?;
                if !matches!(kind, CredentialKind::Bearer | CredentialKind::Header { .. }) {
                    return Err(field("credential", format!("{c:?} must be a bearer or header credential")));
                }
            }
            UpstreamTransport::Http {
                url,
                credential: u.credential,
                ca_file: u.ca_file,
            }
        }
        _ => {
            return Err(format!(
                "upstream.{name}: give exactly one of command = [\"prog\", \"arg\"] or url = \"http://…/mcp\""
            ))
        }
    };
    Ok(Upstream {
        transport,
        timeout,
        max_duration,
        startup_timeout,
        max_response_bytes,
        expose_all,
    })
}

/// The upstream's `timeout` (from the last sign of life) and `max_duration` (in all).
fn call_timeouts(u: &RawUpstream) -> Result<(Duration, Duration), (&'static str, String)> {
    let timeout = match &u.timeout {
        None => DEFAULT_UPSTREAM_TIMEOUT,
        Some(t) => match parse_duration(t).map_err(|e| ("timeout", e.to_string()))? {
            d if d.is_zero() => return Err(("timeout", "must be greater than zero".into())),
            d => d,
        },
    };
    let max_duration = match &u.max_duration {
        None => DEFAULT_MAX_DURATION.max(timeout),
        Some(t) => match parse_duration(t).map_err(|e| ("max_duration", e.to_string()))? {
            d if d < timeout => {
                return Err((
                    "max_duration",
                    format!("{t} is shorter than the upstream's timeout ({}): it is the longest a call runs however often it reports progress", crate::duration::format_duration(timeout)),
                ))
            }
            d => d,
        },
    };
    Ok((timeout, max_duration))
}

/// The `expose`, `prefix`, `default_class`, `match_window`, `approval` and `on_tool_error`
/// keys of an upstream.
fn expose_all(
    name: &str,
    u: &mut RawUpstream,
    (timeout, max_duration): (Duration, Duration),
    retention: Duration,
    max_response_bytes: usize,
) -> Result<Option<ExposeAll>, String> {
    let field = |f: &str, m: String| format!("upstream.{name}.{f}: {m}");
    match u.expose.as_deref() {
        Some("all") => {}
        Some(other) => return Err(field("expose", format!("{other:?} is not \"all\" (leave it out to serve only the tools a [[tool]] re-exports)"))),
        None => {
            for (set, key) in [
                (u.prefix.is_some(), "prefix"),
                (u.default_class.is_some(), "default_class"),
                (u.match_window.is_some(), "match_window"),
                (u.approval.is_some(), "approval"),
                (u.on_tool_error.is_some(), "on_tool_error"),
                (u.read_only.is_some(), "read_only"),
            ] {
                if set {
                    return Err(field(key, "applies only with expose = \"all\"".into()));
                }
            }
            return Ok(None);
        }
    }
    let prefix = u.prefix.take().unwrap_or_else(|| format!("{name}_"));
    if !prefix.is_empty() && !crate::contract::valid_tool_name(&prefix) {
        return Err(field(
            "prefix",
            format!("{prefix:?} may hold only letters, digits, '_', '-' or '.'"),
        ));
    }
    let class = match u.default_class.take() {
        None => ActionClass::Irreversible,
        Some(s) => ActionClass::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| field("default_class", format!("{s:?} is not one of read_only, idempotent_write, conditional_write, irreversible, remote_command")))?,
    };
    let match_window = match u.match_window.take() {
        Some(w) => parse_duration(&w).map_err(|e| field("match_window", e.to_string()))?,
        None if class.is_read_only() => Duration::ZERO,
        None => DEFAULT_EXPOSE_WINDOW,
    };
    let approval =
        super::parse_approval(u.approval.take().as_deref()).map_err(|m| field("approval", m))?;
    let on_tool_error = tool_error_verdict(u.on_tool_error.take().as_deref())
        .map_err(|m| field("on_tool_error", m))?;
    let draft = |class: ActionClass, match_window: Duration| ToolContractDraft {
        name: format!("{prefix}tool"),
        class: Some(class),
        channel: Some(ChannelSpec::Mcp(McpSpec {
            server: name.to_string(),
            // Named per tool by `contract`; validated here under a stand-in.
            tool: "tool".into(),
            timeout,
            max_duration,
            on_tool_error,
            schema_from_upstream: true,
            max_response_bytes,
        })),
        match_window: Some(match_window),
        retention: (!class.is_read_only()).then_some(retention.max(match_window)),
        approval,
        ..ToolContractDraft::default()
    };
    let read_only = read_patterns(u.read_only.take()).map_err(|m| field("read_only", m))?;
    let reads = match read_only.is_empty() {
        true => None,
        false => Some(
            draft(ActionClass::ReadOnly, Duration::ZERO)
                .validate()
                .map_err(|e| field("read_only", e.reason))?,
        ),
    };
    let template = draft(class, match_window).validate().map_err(|e| {
        field(
            "default_class",
            format!(
                "{class} cannot be served without a contract of its own: {}",
                e.reason
            ),
        )
    })?;
    Ok(Some(ExposeAll {
        prefix,
        template,
        read_only,
        reads,
    }))
}

/// `read_only` patterns: tool names with `*` for any run of characters.
fn read_patterns(patterns: Option<Vec<String>>) -> Result<Vec<String>, String> {
    let patterns = patterns.unwrap_or_default();
    for p in &patterns {
        let plain = p.replace('*', "x");
        if p.is_empty() || p.len() > 64 || !crate::contract::valid_tool_name(&plain) {
            return Err(format!("{p:?} is not a tool-name pattern (letters, digits, '_', '-', '.', and '*' for any run of them)"));
        }
    }
    Ok(patterns)
}

pub(super) fn mcp_spec(
    m: RawMcp,
    upstreams: &BTreeMap<String, Upstream>,
    schema_in_config: bool,
) -> Result<McpSpec, (&'static str, String)> {
    let upstream = upstreams.get(&m.server).ok_or_else(|| {
        (
            "mcp.server",
            format!("{:?} is not declared in [upstream.*]", m.server),
        )
    })?;
    let timeout = match &m.timeout {
        None => upstream.timeout,
        Some(t) => parse_duration(t).map_err(|e| ("mcp.timeout", e.to_string()))?,
    };
    let on_tool_error =
        tool_error_verdict(m.on_tool_error.as_deref()).map_err(|m| ("mcp.on_tool_error", m))?;
    let max_response_bytes = match m.max_response_bytes {
        None => upstream.max_response_bytes,
        some => response_cap(some).map_err(|e| ("mcp.max_response_bytes", e))?,
    };
    Ok(McpSpec {
        server: m.server,
        tool: m.tool,
        timeout,
        max_duration: upstream.max_duration.max(timeout),
        on_tool_error,
        schema_from_upstream: !schema_in_config,
        max_response_bytes,
    })
}

/// The default largest answer stored (256 KiB).
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 256 * 1024;
/// The largest `max_response_bytes` accepted (64 MiB: an answer is held in memory whole).
const MOST_RESPONSE_BYTES: u64 = 64 * 1024 * 1024;

fn response_cap(value: Option<u64>) -> Result<usize, String> {
    match value {
        None => Ok(DEFAULT_MAX_RESPONSE_BYTES),
        Some(n) if (1024..=MOST_RESPONSE_BYTES).contains(&n) => Ok(n as usize),
        Some(n) => Err(format!(
            "{n} is not between 1024 and {MOST_RESPONSE_BYTES} bytes"
        )),
    }
}

pub(super) fn status_tool(
    tool: Option<String>,
    arguments: Option<toml::Table>,
) -> Result<Option<StatusTool>, (&'static str, String)> {
    match (tool, arguments) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err((
            "recovery.arguments",
            "are the arguments of a status_tool, and there is none".into(),
        )),
        (Some(tool), arguments) => {
            let arguments = match arguments {
                None => serde_json::Map::new(),
                Some(table) => match serde_json::to_value(table)
                    .map_err(|e| ("recovery.arguments", e.to_string()))?
                {
                    Value::Object(m) => m,
                    _ => return Err(("recovery.arguments", "must be a table".into())),
                },
            };
            Ok(Some(StatusTool { tool, arguments }))
        }
    }
}

/// What an upstream's `isError: true` means for the effect: `unknown` (the default: an error
/// may follow a partial effect) or `rejected` (nothing was applied).
fn tool_error_verdict(value: Option<&str>) -> Result<ToolErrorVerdict, String> {
    match value {
        None | Some("unknown") => Ok(ToolErrorVerdict::Unknown),
        Some("rejected") => Ok(ToolErrorVerdict::Rejected),
        Some(other) => Err(format!("{other:?} is not \"unknown\" or \"rejected\"")),
    }
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::name_matches;

    #[test]
    fn read_patterns_match_names_as_globs() {
        assert!(name_matches("list_*", "list_files"));
        assert!(name_matches("list_*", "list_"));
        assert!(!name_matches("list_*", "delete_list_x"));
        assert!(name_matches("*_status", "order_status"));
        assert!(name_matches("get*info", "get-system-info"));
        assert!(!name_matches("get*info", "get-system-infos"));
        assert!(name_matches("read_file", "read_file"));
        assert!(!name_matches("read_file", "read_files"));
        assert!(name_matches("*", "anything"));
    }
}
