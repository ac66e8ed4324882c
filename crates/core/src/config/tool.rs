//! A `[[tool]]` table: its channel (`http`, `ssh` or `mcp`), class, recovery and arguments,
//! turned into a draft and validated into a [`ToolContract`]. Errors name the tool and field.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use super::raw::{RawHttp, RawMcp, RawRecovery, RawRequest, RawSsh, RawTool};
use super::{parse_approval, upstream, Credential, CredentialKind, GatewaySettings, Upstream};
use crate::class::{ActionClass, RecoveryMethod};
use crate::contract::{
    Approval, ArgumentRules, ChannelSpec, HttpBody, HttpRequestSpec, HttpSpec, SshSpec,
    ToolContract, ToolContractDraft,
};
use crate::duration::parse_duration;

/// A field of the tool and what is wrong with it; the tool's name is added by [`build_tool`].
type Fault = (&'static str, String);

pub(super) fn build_tool(
    t: RawTool,
    gateway: &GatewaySettings,
    credentials: &BTreeMap<String, Credential>,
    upstreams: &BTreeMap<String, Upstream>,
) -> Result<ToolContract, String> {
    let name = t.name.get_ref().clone();
    let field = |(f, m): Fault| format!("tool {name:?}: {f}: {m}");
    let has_schema = t.input_schema.is_some();
    let channel =
        channel(t.http, t.ssh, t.mcp, has_schema, credentials, upstreams).map_err(field)?;
    let class = class(t.class.as_deref(), channel.as_ref()).map_err(field)?;
    let recovery = t.recovery.unwrap_or(RawRecovery {
        method: None,
        status_query: None,
        status_tool: None,
        arguments: None,
        precondition: None,
    });
    let status_tool =
        upstream::status_tool(recovery.status_tool, recovery.arguments).map_err(field)?;
    let recovery_method = recovery_method(recovery.method.as_deref()).map_err(field)?;
    let input_schema = t
        .input_schema
        .map(|v| serde_json::to_value(v).map_err(|e| field(("input_schema", e.to_string()))))
        .transpose()?;
    let defaults = defaults(t.defaults).map_err(field)?;
    let is_read = class.is_some_and(ActionClass::is_read_only);
    let approval = parse_approval(t.approval.as_deref()).map_err(|m| field(("approval", m)))?;
    let asks_approval = asks_approval(approval, channel.as_ref(), credentials);
    let match_window = optional_duration(&t.match_window, "match_window").map_err(field)?;
    // A tool without its own retention keeps its record as long as the gateway says, unless
    // it only reads (then nothing needs keeping).
    let retention = optional_duration(&t.retention, "retention")
        .map_err(field)?
        .or(if is_read {
            None
        } else {
            Some(gateway.retention)
        });
    let approval_ttl = approval_ttl(&t.approval_ttl, asks_approval).map_err(field)?;
    let draft = ToolContractDraft {
        name: name.clone(),
        description: t.description,
        class,
        channel,
        input_schema,
        arguments: ArgumentRules {
            defaults,
            non_semantic: t.non_semantic.unwrap_or_default().into_iter().collect(),
            secret: t.secret_fields.unwrap_or_default().into_iter().collect(),
        },
        match_window,
        retention,
        recovery_method,
        status_query: recovery.status_query.map(request),
        status_tool,
        precondition: recovery.precondition.map(request),
        approval,
        approval_ttl,
        long_running: t.long_running,
    };
    draft.validate().map_err(|e| e.to_string())
}

/// The one channel a tool declares; `None` (no channel) is refused by validation.
fn channel(
    http: Option<RawHttp>,
    ssh: Option<RawSsh>,
    mcp: Option<RawMcp>,
    has_schema: bool,
    credentials: &BTreeMap<String, Credential>,
    upstreams: &BTreeMap<String, Upstream>,
) -> Result<Option<ChannelSpec>, Fault> {
    // Each declared channel table, tagged: adding a channel adds one entry and one arm.
    let mut declared: Vec<RawChannel> = [
        http.map(RawChannel::Http),
        ssh.map(RawChannel::Ssh),
        mcp.map(RawChannel::Mcp),
    ]
    .into_iter()
    .flatten()
    .collect();
    if declared.len() > 1 {
        return Err(("channel", "declare exactly one of http, ssh or mcp".into()));
    }
    let Some(raw) = declared.pop() else {
        return Ok(None);
    };
    match raw {
        RawChannel::Http(h) => http_channel(h, credentials).map(Some),
        RawChannel::Ssh(s) => ssh_channel(s, credentials).map(Some),
        RawChannel::Mcp(m) => Ok(Some(ChannelSpec::Mcp(upstream::mcp_spec(
            m, upstreams, has_schema,
        )?))),
    }
}

/// A tool's channel table as written (`http`, `ssh` or `mcp`).
enum RawChannel {
    Http(RawHttp),
    Ssh(RawSsh),
    Mcp(RawMcp),
}

fn known_credential<'a>(
    c: &str,
    credentials: &'a BTreeMap<String, Credential>,
) -> Result<&'a Credential, Fault> {
    credentials.get(c).ok_or_else(|| {
        (
            "credential",
            format!("{c:?} is not declared in [credential.*]"),
        )
    })
}

fn http_channel(
    h: RawHttp,
    credentials: &BTreeMap<String, Credential>,
) -> Result<ChannelSpec, Fault> {
    if let Some(c) = &h.credential {
        if known_credential(c, credentials)?.kind == CredentialKind::SshKey {
            return Err((
                "http.credential",
                format!("{c:?} is an ssh_key, which no HTTP request carries"),
            ));
        }
    }
    check_tls_fields(&h, credentials)?;
    let method = h.method.to_ascii_uppercase();
    let body = http_body(h.body.as_deref(), &method)?;
    Ok(ChannelSpec::Http(HttpSpec {
        request: HttpRequestSpec { method, url: h.url },
        credential: h.credential,
        body,
        idempotency_header: h
            .idempotency_header
            .unwrap_or_else(|| "Idempotency-Key".to_string()),
        connect_timeout: optional_duration(&h.connect_timeout, "http.connect_timeout")?
            .unwrap_or(Duration::from_secs(5)),
        response_timeout: optional_duration(&h.response_timeout, "http.response_timeout")?
            .unwrap_or(Duration::from_secs(30)),
        ca_file: h.ca_file,
    }))
}

/// Without `body`, the methods that usually carry one send the arguments.
fn http_body(value: Option<&str>, method: &str) -> Result<HttpBody, Fault> {
    match value {
        Some("arguments") => Ok(HttpBody::Arguments),
        Some("none") => Ok(HttpBody::None),
        None if matches!(method, "POST" | "PUT" | "PATCH") => Ok(HttpBody::Arguments),
        None => Ok(HttpBody::None),
        Some(other) => Err((
            "http.body",
            format!("{other:?} is not \"arguments\" or \"none\""),
        )),
    }
}

/// TLS settings only where TLS happens: a CA file or a client certificate on a tool whose
/// request is plain `http://` would be silently unused, so it is refused.
fn check_tls_fields(h: &RawHttp, credentials: &BTreeMap<String, Credential>) -> Result<(), Fault> {
    let https = h.url.starts_with("https://");
    if h.ca_file.as_deref() == Some("") {
        return Err((
            "http.ca_file",
            "is empty; name a PEM file of CA certificates".into(),
        ));
    }
    if h.ca_file.is_some() && !https {
        return Err((
            "http.ca_file",
            "the url is not https://, so no certificate would ever be checked against it".into(),
        ));
    }
    let credential = h.credential.as_ref().and_then(|c| credentials.get(c));
    if let Some(c) = credential.filter(|c| c.client_certificate.is_some()) {
        if !https {
            return Err((
                "http.credential",
                format!(
                    "{:?} has a client certificate, but the url is not https:// (mTLS needs TLS)",
                    c.name
                ),
            ));
        }
    }
    Ok(())
}

fn ssh_channel(
    s: RawSsh,
    credentials: &BTreeMap<String, Credential>,
) -> Result<ChannelSpec, Fault> {
    if known_credential(&s.credential, credentials)?.kind != CredentialKind::SshKey {
        return Err((
            "ssh.credential",
            format!("{:?} is not of kind ssh_key", s.credential),
        ));
    }
    Ok(ChannelSpec::Ssh(SshSpec {
        host: s.host,
        port: s.port.unwrap_or(22),
        user: s.user,
        host_key: s.host_key,
        credential: s.credential,
        command: s.command,
        cwd: s.cwd,
        timeout: optional_duration(&s.timeout, "ssh.timeout")?.unwrap_or(Duration::from_secs(60)),
        unchanged_exit_codes: exit_codes(s.unchanged_exit_codes)?,
        marker_dir: s.marker_dir,
    }))
}

/// Exit code 0 already means success, so only 1-255 can be declared "nothing changed".
fn exit_codes(codes: Option<Vec<i64>>) -> Result<Vec<i32>, Fault> {
    codes
        .unwrap_or_default()
        .into_iter()
        .map(|c| match c {
            1..=255 => Ok(c as i32),
            _ => Err((
                "ssh.unchanged_exit_codes",
                format!("{c} is not an exit code of 1-255"),
            )),
        })
        .collect()
}

fn class(value: Option<&str>, channel: Option<&ChannelSpec>) -> Result<Option<ActionClass>, Fault> {
    match value {
        Some(s) => ActionClass::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .map(Some)
            .ok_or_else(|| ("class", format!("{s:?} is not one of read_only, idempotent_write, conditional_write, irreversible, remote_command"))),
        // Upstream MCP annotations are untrusted hints: without a declared class, assume the worst.
        None if matches!(channel, Some(ChannelSpec::Mcp(_))) => Ok(Some(ActionClass::Irreversible)),
        None => Ok(None),
    }
}

fn recovery_method(value: Option<&str>) -> Result<Option<RecoveryMethod>, Fault> {
    let Some(s) = value else {
        return Ok(None);
    };
    [
        RecoveryMethod::Retry,
        RecoveryMethod::RetrySameKey,
        RecoveryMethod::StatusQuery,
        RecoveryMethod::Precondition,
        RecoveryMethod::Marker,
        RecoveryMethod::Review,
    ]
    .into_iter()
    .find(|m| m.as_str() == s)
    .map(Some)
    .ok_or_else(|| ("recovery.method", format!("{s:?} is not one of retry, retry_same_key, status_query, precondition, marker, review")))
}

fn request(r: RawRequest) -> HttpRequestSpec {
    HttpRequestSpec {
        method: r.method.to_ascii_uppercase(),
        url: r.url,
    }
}

fn defaults(table: Option<toml::Table>) -> Result<serde_json::Map<String, Value>, Fault> {
    let Some(table) = table else {
        return Ok(serde_json::Map::new());
    };
    match serde_json::to_value(table).map_err(|e| ("defaults", e.to_string()))? {
        Value::Object(m) => Ok(m),
        _ => Err(("defaults", "must be a table".into())),
    }
}

/// Whether a call of the tool waits for approval: the tool or its credential says so.
fn asks_approval(
    approval: Approval,
    channel: Option<&ChannelSpec>,
    credentials: &BTreeMap<String, Credential>,
) -> bool {
    approval == Approval::EveryCall
        || channel
            .and_then(ChannelSpec::credential_ref)
            .and_then(|c| credentials.get(c))
            .is_some_and(|c| c.approval == Approval::EveryCall)
}

/// A TTL on a tool that never waits for approval would be silently unused, so it is refused.
fn approval_ttl(value: &Option<String>, asks_approval: bool) -> Result<Option<Duration>, Fault> {
    match value {
        None => Ok(None),
        Some(_) if !asks_approval => Err((
            "approval_ttl",
            "neither the tool nor its credential asks for approval = \"every_call\", so nothing would ever wait for it".into(),
        )),
        Some(_) => match optional_duration(value, "approval_ttl")? {
            Some(d) if d.is_zero() => Err(("approval_ttl", "must be longer than 0".into())),
            other => Ok(other),
        },
    }
}

fn optional_duration(
    value: &Option<String>,
    field: &'static str,
) -> Result<Option<Duration>, Fault> {
    value
        .as_deref()
        .map(parse_duration)
        .transpose()
        .map_err(|e| (field, e.to_string()))
}
