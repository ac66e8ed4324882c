//! `postern.toml`: parsed and validated in one place so every verb sees the same rules.
//! Unknown keys are refused with the file, line and key; secrets appear only as references;
//! every tool becomes a validated [`ToolContract`].

mod console;
mod people;
mod raw;
mod secret;
mod telemetry;
mod tls;
mod upstream;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::Value;

pub use console::{Console, Webhook};
pub use secret::{EnvValue, SecretRef};
pub use telemetry::Telemetry;
pub use tls::{CertificateFingerprint, ClientCertificate, ListenerTls};
pub use upstream::{
    ExposeAll, Upstream, UpstreamTransport, DEFAULT_EXPOSE_WINDOW, DEFAULT_MAX_RESPONSE_BYTES,
    DEFAULT_STARTUP_TIMEOUT, DEFAULT_UPSTREAM_TIMEOUT,
};

use crate::class::{ActionClass, RecoveryMethod};
use crate::contract::{
    Approval, ArgumentRules, ChannelSpec, HttpBody, HttpRequestSpec, HttpSpec, SshSpec,
    ToolContract, ToolContractDraft,
};
use crate::duration::parse_duration;

/// A configuration error, located in its file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}:{column}: {message}")]
pub struct ConfigError {
    pub file: String,
    pub line: usize,
    pub column: usize,
    pub message: String,
}

/// The validated configuration.
#[derive(Clone, Debug)]
pub struct Config {
    pub gateway: GatewaySettings,
    pub actors: Vec<Actor>,
    /// The people who decide approvals and resolve reviews (never an actor).
    pub operators: Vec<Operator>,
    pub credentials: BTreeMap<String, Credential>,
    pub upstreams: BTreeMap<String, Upstream>,
    pub tools: Vec<ToolContract>,
    pub telemetry: Telemetry,
    pub console: Console,
}

#[derive(Clone, Debug)]
pub struct GatewaySettings {
    pub listen: String,
    pub store: String,
    pub fingerprint_key: SecretRef,
    pub signing_key: Option<SecretRef>,
    /// Retention for tools that do not set their own.
    pub retention: Duration,
    pub max_body_bytes: u64,
    /// Extra `Origin` values accepted besides loopback ones.
    pub allowed_origins: Vec<String>,
    /// How long a per-use approval request waits before it is denied as expired (a tool may
    /// set its own).
    pub approval_ttl: Duration,
    /// How long a call attached to an in-flight execution waits before answering "in progress".
    pub attach_wait: Duration,
    /// How often the head of the audit chain is signed (with `signing_key`), besides at every
    /// graceful stop: events after the last signed checkpoint are vouched for by nothing.
    pub checkpoint_every: Duration,
    /// How many `tools/call` requests one actor may have in flight on one gateway; more are
    /// answered 429 with `Retry-After` (nothing recorded, nothing sent).
    pub max_calls_per_actor: u32,
    /// How many MCP sessions one actor may hold open on one gateway. At the cap a new session
    /// evicts the actor's least recently used idle one; only when every one is busy is it
    /// answered 429 (no session opened, nothing recorded). A closed (`DELETE`) or expired
    /// session frees its slot.
    pub max_sessions_per_actor: u32,
    /// How many SSE streams one actor may keep open on one gateway (standalone `GET` streams,
    /// replays and request streams); one more is answered 429 before anything is recorded.
    pub max_streams_per_actor: u32,
    /// Open HTTP connections; one more is answered 503 with `Retry-After` and closed.
    pub max_connections: u32,
    /// Open connections from one source address (IPv6: its /64), so one client cannot take all.
    pub max_connections_per_address: u32,
    /// A new connection that sends no byte this long is closed, freeing its slot.
    pub first_byte_timeout: Duration,
    /// How long a client may take to send a request's headers, counted from accepting its
    /// connection or from the first byte of a later request on it; a slower client is
    /// disconnected (slowloris).
    pub header_read_timeout: Duration,
    /// How long a kept-alive connection may stay open with no request in flight.
    pub idle_timeout: Duration,
    /// A run (the Sessions log) with no call for this long is recorded ended, `idle_expired`.
    pub session_idle: Duration,
    /// PostgreSQL stores: how long a replica may fail to renew its lease before a survivor
    /// takes over its in-flight executions (recorded `outcome_unknown`) and fences it.
    pub instance_lease: Duration,
    /// The listener speaks TLS with this certificate (HTTP/1.1 and HTTP/2 by ALPN); `None`:
    /// plain HTTP.
    pub tls: Option<ListenerTls>,
    /// The vault file (relative to the config) that `{ vault = "NAME" }` credential secrets
    /// come from.
    pub vault: Option<String>,
    /// Where the vault's passphrase is, to unlock it at start-up; without it the gateway starts
    /// locked until an operator unlocks it.
    pub vault_passphrase: Option<SecretRef>,
}

/// A person who decides approvals and resolves reviews through the operator API (`/ops`),
/// with a token of their own: an actor's token never decides anything.
#[derive(Clone, Debug)]
pub struct Operator {
    pub name: String,
    pub token: SecretRef,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionApproval {
    Auto,
    Required,
}

#[derive(Clone, Debug)]
pub struct Actor {
    pub name: String,
    pub token: Option<SecretRef>,
    /// The client certificate the actor presents in the TLS handshake (needs `[gateway] tls`).
    /// An actor is authenticated by every credential it has: its token, its certificate, or
    /// both on the same request.
    pub client_cert_fingerprint: Option<CertificateFingerprint>,
    pub session_approval: SessionApproval,
    /// Tools the actor may call; `None` means all. `"PREFIX*"` names every tool of the
    /// `expose = "all"` upstream with that prefix.
    pub tools: Option<BTreeSet<String>>,
}

impl Actor {
    /// Whether the actor's `tools` list lets it call `tool`.
    pub fn may_call(&self, tool: &str) -> bool {
        self.tools.as_ref().is_none_or(|allowed| {
            allowed.contains(tool)
                || allowed.iter().any(|t| {
                    t.strip_suffix('*')
                        .is_some_and(|stem| tool.starts_with(stem))
                })
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CredentialKind {
    Bearer,
    Basic {
        username: String,
    },
    Header {
        name: String,
    },
    SshKey,
    /// A TLS client certificate alone (mTLS), no header.
    Mtls,
}

#[derive(Clone, Debug)]
pub struct Credential {
    pub name: String,
    pub kind: CredentialKind,
    /// The token, password, header value or SSH key; `None` only for [`CredentialKind::Mtls`],
    /// whose secret is its client key.
    pub secret: Option<SecretRef>,
    /// The client certificate shown in every TLS handshake of the tools that use this
    /// credential: always for `mtls`, optionally for `bearer`, `basic` and `header`.
    pub client_certificate: Option<ClientCertificate>,
    pub approval: Approval,
}

impl Config {
    /// Parses and validates `text`, naming `file` in every error.
    pub fn parse(text: &str, file: &str) -> Result<Config, ConfigError> {
        let at = |offset: usize, message: String| {
            let (line, column) = line_col(text, offset);
            ConfigError {
                file: file.to_string(),
                line,
                column,
                message,
            }
        };
        let raw: raw::RawConfig = toml::from_str(text).map_err(|e| {
            let offset = e.span().map_or(0, |s| s.start);
            at(offset, e.message().trim().to_string())
        })?;
        let dur = |value: &Option<String>, default: &str, offset: usize, field: &str| {
            parse_duration(value.as_deref().unwrap_or(default))
                .map_err(|e| at(offset, format!("{field}: {e}")))
        };
        // A bound of zero would refuse everything: refused, naming the key.
        let positive_dur = |value: &Option<String>, default: &str, field: &str| {
            dur(value, default, 0, field).and_then(|d| {
                if d.is_zero() {
                    Err(at(0, format!("{field}: must be longer than 0")))
                } else {
                    Ok(d)
                }
            })
        };
        let count = |value: Option<u32>, default: u32, field: &str| match value {
            Some(0) => Err(at(0, format!("{field}: at least 1"))),
            Some(n) => Ok(n),
            None => Ok(default),
        };

        let g = raw.gateway;
        if g.checkpoint_every.is_some() && g.signing_key.is_none() {
            return Err(at(
                0,
                "gateway.checkpoint_every: there is no signing_key to sign checkpoints with"
                    .to_string(),
            ));
        }
        let store = g.store.unwrap_or_else(|| "sqlite://postern.db".to_string());
        let max_connections = count(g.max_connections, 1024, "gateway.max_connections")?;
        let gateway = GatewaySettings {
            listen: g.listen.unwrap_or_else(|| "127.0.0.1:8750".to_string()),
            store: store.clone(),
            fingerprint_key: g.fingerprint_key,
            signing_key: g.signing_key,
            retention: dur(&g.retention, "7d", 0, "gateway.retention")?,
            max_body_bytes: g.max_body_bytes.unwrap_or(1 << 20),
            allowed_origins: g.allowed_origins.unwrap_or_default(),
            approval_ttl: positive_dur(&g.approval_ttl, "15m", "gateway.approval_ttl")?,
            attach_wait: dur(&g.attach_wait, "10s", 0, "gateway.attach_wait")?,
            max_calls_per_actor: count(g.max_calls_per_actor, 64, "gateway.max_calls_per_actor")?,
            max_sessions_per_actor: count(
                g.max_sessions_per_actor,
                64,
                "gateway.max_sessions_per_actor",
            )?,
            max_streams_per_actor: count(
                g.max_streams_per_actor,
                256,
                "gateway.max_streams_per_actor",
            )?,
            max_connections,
            max_connections_per_address: match g.max_connections_per_address {
                Some(n) if n > max_connections => return Err(at(0, format!("gateway.max_connections_per_address: {n} is more than max_connections ({max_connections})"))),
                n => count(n, (max_connections / 4).max(1), "gateway.max_connections_per_address")?,
            },
            first_byte_timeout: positive_dur(&g.first_byte_timeout, "5s", "gateway.first_byte_timeout")?,
            header_read_timeout: positive_dur(
                &g.header_read_timeout,
                "10s",
                "gateway.header_read_timeout",
            )?,
            idle_timeout: positive_dur(&g.idle_timeout, "2m", "gateway.idle_timeout")?,
            session_idle: positive_dur(&g.session_idle, "1h", "gateway.session_idle")?,
            instance_lease: match &g.instance_lease {
                Some(_) if !store.starts_with("postgres") => return Err(at(0, "gateway.instance_lease applies to a PostgreSQL store only (on SQLite a crashed process is known at once by its lock file)".into())),
                lease => positive_dur(lease, "30s", "gateway.instance_lease")
                    .and_then(|d| match d < Duration::from_secs(1) {
                        true => Err(at(0, "gateway.instance_lease: at least 1s".into())),
                        false => Ok(d),
                    })?,
            },
            tls: match g.tls {
                Some(t) if t.cert.is_empty() || t.key.is_empty() => {
                    return Err(at(
                        0,
                        "gateway.tls: cert and key name PEM files (relative to this file)"
                            .to_string(),
                    ))
                }
                Some(t) => Some(ListenerTls {
                    cert: t.cert,
                    key: t.key,
                }),
                None => None,
            },
            checkpoint_every: dur(&g.checkpoint_every, "1m", 0, "gateway.checkpoint_every")
                .and_then(|d| {
                    if d < Duration::from_secs(1) {
                        Err(at(0, "gateway.checkpoint_every: at least 1s".to_string()))
                    } else {
                        Ok(d)
                    }
                })?,
            vault: match g.vault {
                Some(v) if v.is_empty() => {
                    return Err(at(0, "gateway.vault: name the vault file".to_string()))
                }
                other => other,
            },
            vault_passphrase: g.vault_passphrase,
        };
        if gateway.vault_passphrase.is_some() && gateway.vault.is_none() {
            return Err(at(
                0,
                "gateway.vault_passphrase: there is no [gateway] vault to unlock".to_string(),
            ));
        }
        // The gateway must start, authenticate and sign before anyone unlocks the vault: only
        // the secrets of credentials may live in it.
        let outside = [
            ("gateway.fingerprint_key", Some(&gateway.fingerprint_key)),
            ("gateway.signing_key", gateway.signing_key.as_ref()),
            (
                "gateway.vault_passphrase",
                gateway.vault_passphrase.as_ref(),
            ),
        ];
        for (key, r) in outside {
            if matches!(r, Some(SecretRef::Vault(_))) {
                return Err(at(0, format!("{key}: a vault reference is only allowed for a credential's secret (the gateway needs this before the vault is unlocked)")));
            }
        }

        let mut credentials = BTreeMap::new();
        for (name, c) in raw.credential {
            let credential = build_credential(&name, c).map_err(|m| at(0, m))?;
            if matches!(credential.secret, Some(SecretRef::Vault(_))) && gateway.vault.is_none() {
                return Err(at(0, format!("credential.{name}.secret: a vault reference needs [gateway] vault = \"postern.vault\" (created by postern vault init)")));
            }
            if matches!(
                credential.client_certificate.as_ref().map(|c| &c.key),
                Some(SecretRef::Vault(_))
            ) {
                return Err(at(0, format!("credential.{name}.client_key: the vault holds credential secrets only; give the key as {{ file = \"…\" }} or {{ env = \"…\" }}")));
            }
            credentials.insert(name, credential);
        }

        let mut upstreams = BTreeMap::new();
        for (name, u) in raw.upstream {
            let upstream = upstream::parse_upstream(&name, u, &credentials, gateway.retention)
                .map_err(|m| at(0, m))?;
            upstreams.insert(name, upstream);
        }
        check_prefixes(&upstreams).map_err(|m| at(0, m))?;

        let mut tools: Vec<ToolContract> = Vec::new();
        for t in raw.tool {
            let offset = t.name.span().start;
            let name = t.name.get_ref().clone();
            if tools.iter().any(|x| x.name == name) {
                return Err(at(offset, format!("tool {name:?} is declared twice")));
            }
            let contract =
                build_tool(t, &gateway, &credentials, &upstreams).map_err(|m| at(offset, m))?;
            tools.push(contract);
        }

        let actors = people::actors(raw.actor, &tools, &upstreams, gateway.tls.is_some())
            .map_err(|(offset, m)| at(offset, m))?;
        let operators = people::operators(raw.operator).map_err(|(offset, m)| at(offset, m))?;

        let telemetry = raw.telemetry.build().map_err(|e| at(0, e))?;
        let console =
            console::build(raw.console, raw.approver, operators.len()).map_err(|e| at(0, e))?;
        Ok(Config {
            gateway,
            actors,
            operators,
            credentials,
            upstreams,
            tools,
            telemetry,
            console,
        })
    }

    pub fn tool(&self, name: &str) -> Option<&ToolContract> {
        self.tools.iter().find(|t| t.name == name)
    }

    pub fn actor(&self, name: &str) -> Option<&Actor> {
        self.actors.iter().find(|a| a.name == name)
    }
}

/// TLS settings only where TLS happens: a CA file or a client certificate on a tool whose
/// request is plain `http://` would be silently unused, so it is refused.
fn check_tls_fields(
    h: &raw::RawHttp,
    credentials: &BTreeMap<String, Credential>,
) -> Result<(), (&'static str, String)> {
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

/// A `[credential.NAME]` table: its kind, the fields that kind takes, and its client
/// certificate if it has one.
fn build_credential(name: &str, c: raw::RawCredential) -> Result<Credential, String> {
    let client_certificate = match (c.client_certificate, c.client_key) {
        (Some(certificate), Some(key)) => Some(ClientCertificate { certificate, key }),
        (None, None) => None,
        _ => {
            return Err(format!(
                "credential.{name}: client_certificate and client_key go together (the certificate's PEM file and its private key)"
            ))
        }
    };
    let kind = match (c.kind.as_str(), c.username, c.header) {
        ("bearer", None, None) => CredentialKind::Bearer,
        ("basic", Some(username), None) => CredentialKind::Basic { username },
        ("header", None, Some(name)) => CredentialKind::Header { name },
        ("ssh_key", None, None) if client_certificate.is_none() => CredentialKind::SshKey,
        ("mtls", None, None) if c.secret.is_none() && client_certificate.is_some() => {
            CredentialKind::Mtls
        }
        (kind, _, _) => {
            return Err(format!(
                "credential.{name}: kind {kind:?} with these fields is not valid: bearer (secret), basic (secret, username), header (secret, header), ssh_key (secret), mtls (client_certificate, client_key; no secret); bearer, basic and header may add client_certificate and client_key for mTLS"
            ))
        }
    };
    if kind != CredentialKind::Mtls && c.secret.is_none() {
        return Err(format!(
            "credential.{name}: kind {:?} needs a secret = {{ env = \"…\" }} or {{ file = \"…\" }}",
            c.kind
        ));
    }
    let approval = parse_approval(c.approval.as_deref())
        .map_err(|m| format!("credential.{name}.approval: {m}"))?;
    Ok(Credential {
        name: name.to_string(),
        kind,
        secret: c.secret,
        client_certificate,
        approval,
    })
}

pub(super) fn parse_approval(value: Option<&str>) -> Result<Approval, String> {
    match value {
        None | Some("session") => Ok(Approval::Session),
        Some("every_call") => Ok(Approval::EveryCall),
        Some(other) => Err(format!("{other:?} is not \"session\" or \"every_call\"")),
    }
}

fn build_tool(
    t: raw::RawTool,
    gateway: &GatewaySettings,
    credentials: &BTreeMap<String, Credential>,
    upstreams: &BTreeMap<String, Upstream>,
) -> Result<ToolContract, String> {
    let name = t.name.get_ref().clone();
    let field = |f: &str, m: String| format!("tool {name:?}: {f}: {m}");
    let dur = |v: &Option<String>, f: &str| -> Result<Option<Duration>, String> {
        v.as_deref()
            .map(parse_duration)
            .transpose()
            .map_err(|e| field(f, e.to_string()))
    };
    let known_credential = |c: &str| -> Result<(), String> {
        if credentials.contains_key(c) {
            Ok(())
        } else {
            Err(field(
                "credential",
                format!("{c:?} is not declared in [credential.*]"),
            ))
        }
    };

    let channel = match (t.http, t.ssh, t.mcp) {
        (Some(h), None, None) => {
            if let Some(c) = &h.credential {
                known_credential(c)?;
                if credentials[c].kind == CredentialKind::SshKey {
                    return Err(field(
                        "http.credential",
                        format!("{c:?} is an ssh_key, which no HTTP request carries"),
                    ));
                }
            }
            check_tls_fields(&h, credentials).map_err(|(f, m)| field(f, m))?;
            let method = h.method.to_ascii_uppercase();
            let body = match h.body.as_deref() {
                Some("arguments") => HttpBody::Arguments,
                Some("none") => HttpBody::None,
                None if matches!(method.as_str(), "POST" | "PUT" | "PATCH") => HttpBody::Arguments,
                None => HttpBody::None,
                Some(other) => {
                    return Err(field(
                        "http.body",
                        format!("{other:?} is not \"arguments\" or \"none\""),
                    ))
                }
            };
            Some(ChannelSpec::Http(HttpSpec {
                request: HttpRequestSpec { method, url: h.url },
                credential: h.credential,
                body,
                idempotency_header: h
                    .idempotency_header
                    .unwrap_or_else(|| "Idempotency-Key".to_string()),
                connect_timeout: dur(&h.connect_timeout, "http.connect_timeout")?
                    .unwrap_or(Duration::from_secs(5)),
                response_timeout: dur(&h.response_timeout, "http.response_timeout")?
                    .unwrap_or(Duration::from_secs(30)),
                ca_file: h.ca_file,
            }))
        }
        (None, Some(s), None) => {
            known_credential(&s.credential)?;
            if credentials[&s.credential].kind != CredentialKind::SshKey {
                return Err(field(
                    "ssh.credential",
                    format!("{:?} is not of kind ssh_key", s.credential),
                ));
            }
            Some(ChannelSpec::Ssh(SshSpec {
                host: s.host,
                port: s.port.unwrap_or(22),
                user: s.user,
                host_key: s.host_key,
                credential: s.credential,
                command: s.command,
                cwd: s.cwd,
                timeout: dur(&s.timeout, "ssh.timeout")?.unwrap_or(Duration::from_secs(60)),
                unchanged_exit_codes: s
                    .unchanged_exit_codes
                    .unwrap_or_default()
                    .into_iter()
                    .map(|c| match c {
                        1..=255 => Ok(c as i32),
                        _ => Err(field(
                            "ssh.unchanged_exit_codes",
                            format!("{c} is not an exit code of 1-255"),
                        )),
                    })
                    .collect::<Result<_, _>>()?,
                marker_dir: s.marker_dir,
            }))
        }
        (None, None, Some(m)) => Some(ChannelSpec::Mcp(
            upstream::mcp_spec(m, upstreams, t.input_schema.is_some())
                .map_err(|(f, m)| field(f, m))?,
        )),
        (None, None, None) => None,
        _ => {
            return Err(field(
                "channel",
                "declare exactly one of http, ssh or mcp".into(),
            ))
        }
    };

    let class = match t.class.as_deref() {
        Some(s) => Some(
            ActionClass::ALL
                .into_iter()
                .find(|c| c.as_str() == s)
                .ok_or_else(|| field("class", format!("{s:?} is not one of read_only, idempotent_write, conditional_write, irreversible, remote_command")))?,
        ),
        // Upstream MCP annotations are untrusted hints: without a declared class, assume the worst.
        None if matches!(channel, Some(ChannelSpec::Mcp(_))) => Some(ActionClass::Irreversible),
        None => None,
    };
    let recovery = t.recovery.unwrap_or(raw::RawRecovery {
        method: None,
        status_query: None,
        status_tool: None,
        arguments: None,
        precondition: None,
    });
    let status_tool = upstream::status_tool(recovery.status_tool, recovery.arguments)
        .map_err(|(f, m)| field(f, m))?;
    let recovery_method = match recovery.method.as_deref() {
        None => None,
        Some(s) => Some(
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
            .ok_or_else(|| field("recovery.method", format!("{s:?} is not one of retry, retry_same_key, status_query, precondition, marker, review")))?,
        ),
    };
    let request = |r: raw::RawRequest| HttpRequestSpec {
        method: r.method.to_ascii_uppercase(),
        url: r.url,
    };
    let input_schema = t
        .input_schema
        .map(|v| serde_json::to_value(v).map_err(|e| field("input_schema", e.to_string())))
        .transpose()?;
    let defaults = match t.defaults {
        None => serde_json::Map::new(),
        Some(table) => {
            match serde_json::to_value(table).map_err(|e| field("defaults", e.to_string()))? {
                Value::Object(m) => m,
                _ => return Err(field("defaults", "must be a table".into())),
            }
        }
    };
    let is_read = class.is_some_and(ActionClass::is_read_only);
    let approval = parse_approval(t.approval.as_deref()).map_err(|m| field("approval", m))?;
    let asks_approval = approval == Approval::EveryCall
        || channel
            .as_ref()
            .and_then(ChannelSpec::credential_ref)
            .and_then(|c| credentials.get(c))
            .is_some_and(|c| c.approval == Approval::EveryCall);
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
        match_window: dur(&t.match_window, "match_window")?,
        retention: dur(&t.retention, "retention")?.or(if is_read {
            None
        } else {
            Some(gateway.retention)
        }),
        recovery_method,
        status_query: recovery.status_query.map(request),
        status_tool,
        precondition: recovery.precondition.map(request),
        approval,
        approval_ttl: match &t.approval_ttl {
            None => None,
            Some(_) if !asks_approval => {
                return Err(field(
                    "approval_ttl",
                    "neither the tool nor its credential asks for approval = \"every_call\", so nothing would ever wait for it".into(),
                ))
            }
            Some(_) => match dur(&t.approval_ttl, "approval_ttl")? {
                Some(d) if d.is_zero() => {
                    return Err(field("approval_ttl", "must be longer than 0".into()))
                }
                other => other,
            },
        },
        long_running: t.long_running,
    };
    draft.validate().map_err(|e| e.to_string())
}

/// Two `expose = "all"` upstreams whose prefixes overlap could serve two tools under one name:
/// refused at start-up rather than resolved by order.
fn check_prefixes(upstreams: &BTreeMap<String, Upstream>) -> Result<(), String> {
    let all: Vec<(&String, &str)> = upstreams
        .iter()
        .filter_map(|(n, u)| Some((n, u.expose_all.as_ref()?.prefix.as_str())))
        .collect();
    for (i, (a, pa)) in all.iter().enumerate() {
        for (b, pb) in &all[i + 1..] {
            if pa.starts_with(pb) || pb.starts_with(pa) {
                return Err(format!("upstream.{a}.prefix {pa:?} and upstream.{b}.prefix {pb:?} overlap: two of their tools could get one name; give each a prefix that does not begin the other"));
            }
        }
    }
    Ok(())
}

/// 1-based line and column of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, column)
}
