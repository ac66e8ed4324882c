//! `postern.toml`: parsed and validated in one place so every verb sees the same rules.
//! Unknown keys are refused with the file, line and key; secrets appear only as references;
//! every tool becomes a validated [`ToolContract`].

mod audit;
mod budget;
mod console;
mod gateway;
mod identity;
mod people;
mod raw;
mod secret;
mod telemetry;
mod tls;
mod tool;
mod upstream;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

pub use audit::Audit;
pub use console::{Console, SignIn, Webhook};
pub use identity::{
    provider_url, ClaimMatch, Introspection, Issuer, Principal, ASYMMETRIC_ALGORITHMS,
    LONGEST_BELIEF,
};
pub use ipnet::IpNet;
pub use secret::{EnvValue, SecretRef};
pub use telemetry::Telemetry;
pub use tls::{CertificateFingerprint, ClientCertificate, ListenerTls};
pub use upstream::{
    ExposeAll, Sandbox, Upstream, UpstreamTransport, DEFAULT_EXPOSE_WINDOW, DEFAULT_MAX_DURATION,
    DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_STARTUP_TIMEOUT, DEFAULT_UPSTREAM_TIMEOUT,
};

use crate::contract::{Approval, ToolContract};

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
    /// Identity providers whose access tokens authenticate agents (`[[issuer]]`).
    pub issuers: Vec<Issuer>,
    pub actors: Vec<Actor>,
    /// The people who decide approvals and resolve reviews (never an actor).
    pub operators: Vec<Operator>,
    pub credentials: BTreeMap<String, Credential>,
    pub upstreams: BTreeMap<String, Upstream>,
    pub tools: Vec<ToolContract>,
    /// Limits on effects (`[[budget]]`), counted by the ledger.
    pub budgets: Vec<crate::budget::Budget>,
    pub telemetry: Telemetry,
    pub console: Console,
    pub audit: Audit,
}

#[derive(Clone, Debug)]
pub struct GatewaySettings {
    pub listen: String,
    /// The URL clients reach the gateway at (`https://postern.example.com`): `/mcp`'s resource
    /// URL (RFC 9728, RFC 8707) is this plus `/mcp`; `None`: the scheme and `Host` a request
    /// came with.
    pub public_url: Option<String>,
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
    /// How many of one actor's calls may await an operator's approval at once (counted in the
    /// store); one more is recorded rejected, with the reason, and nothing is sent.
    pub max_pending_approvals_per_actor: u32,
    /// How many connections one actor may hold, and request bodies it may have in flight, on
    /// one gateway, counted as soon as a request's credentials are read, before its body. At
    /// the cap a new connection of the actor's closes its idlest one (idle 2 s at least); only
    /// when none is is the request answered 429 (nothing recorded, nothing sent) and its
    /// connection closed.
    pub max_connections_per_actor: u32,
    /// Open HTTP connections; one more is answered 503 with `Retry-After` and closed.
    pub max_connections: u32,
    /// Open connections from one source address (IPv6: its /64), so one client cannot take all.
    pub max_connections_per_address: u32,
    /// Load balancers whose connections start with a PROXY protocol header (v1 or v2): the
    /// client address it carries is the connection's, for the per-address cap and the logs. A
    /// PROXY header from any other address is refused.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// A new connection that sends no byte this long is closed, freeing its slot.
    pub first_byte_timeout: Duration,
    /// How long a client may take to send a request's headers, counted from accepting its
    /// connection or from the first byte of a later request on it; a slower client is
    /// disconnected (slowloris).
    pub header_read_timeout: Duration,
    /// A request body must arrive within this, plus one second per `min_body_rate` bytes
    /// received; a slower one is answered 408 and its connection closed.
    pub body_read_timeout: Duration,
    /// Bytes per second a request body must keep up after `body_read_timeout`.
    pub min_body_rate: u64,
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
    /// A static token (the console's log-in, the CLI, `/ops`).
    pub token: Option<SecretRef>,
    /// The access tokens of an `[[issuer]]` that are this operator's (on `/ops`).
    pub claims: Option<ClaimMatch>,
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
    /// The access tokens that are this actor's (`[actor.claims]`), from an `[[issuer]]`.
    pub claims: Option<ClaimMatch>,
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
        let gateway = gateway::settings(raw.gateway).map_err(|m| at(0, m))?;
        let credentials = credentials(raw.credential, &gateway).map_err(|m| at(0, m))?;
        let upstreams = upstreams(raw.upstream, &credentials, &gateway).map_err(|m| at(0, m))?;
        let tools = tools(raw.tool, &gateway, &credentials, &upstreams)
            .map_err(|(offset, m)| at(offset, m))?;
        let issuers = identity::issuers(raw.issuer, &tools).map_err(|m| at(0, m))?;
        let actors = people::actors(
            raw.actor,
            &tools,
            &upstreams,
            &issuers,
            gateway.tls.is_some(),
        )
        .map_err(|(offset, m)| at(offset, m))?;
        let operators =
            people::operators(raw.operator, &issuers).map_err(|(offset, m)| at(offset, m))?;
        let budgets =
            budget::budgets(raw.budget, &tools, &actors).map_err(|(offset, m)| at(offset, m))?;
        let telemetry = raw.telemetry.build().map_err(|e| at(0, e))?;
        let audit = raw.audit.build().map_err(|e| at(0, e))?;
        let console = console::build(raw.console, raw.approver, &issuers, &operators)
            .map_err(|e| at(0, e))?;
        Ok(Config {
            gateway,
            issuers,
            actors,
            operators,
            credentials,
            upstreams,
            tools,
            budgets,
            telemetry,
            console,
            audit,
        })
    }

    pub fn tool(&self, name: &str) -> Option<&ToolContract> {
        self.tools.iter().find(|t| t.name == name)
    }

    pub fn actor(&self, name: &str) -> Option<&Actor> {
        self.actors.iter().find(|a| a.name == name)
    }
}

/// The `[credential.NAME]` tables. The vault holds only the secrets of credentials, and
/// only when the gateway names one.
fn credentials(
    raw: BTreeMap<String, raw::RawCredential>,
    gateway: &GatewaySettings,
) -> Result<BTreeMap<String, Credential>, String> {
    let mut credentials = BTreeMap::new();
    for (name, c) in raw {
        let credential = build_credential(&name, c)?;
        if matches!(credential.secret, Some(SecretRef::Vault(_))) && gateway.vault.is_none() {
            return Err(format!("credential.{name}.secret: a vault reference needs [gateway] vault = \"postern.vault\" (created by postern vault init)"));
        }
        if matches!(
            credential.client_certificate.as_ref().map(|c| &c.key),
            Some(SecretRef::Vault(_))
        ) {
            return Err(format!("credential.{name}.client_key: the vault holds credential secrets only; give the key as {{ file = \"…\" }} or {{ env = \"…\" }}"));
        }
        credentials.insert(name, credential);
    }
    Ok(credentials)
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

/// The `[upstream.NAME]` tables, then a check across them.
fn upstreams(
    raw: BTreeMap<String, raw::RawUpstream>,
    credentials: &BTreeMap<String, Credential>,
    gateway: &GatewaySettings,
) -> Result<BTreeMap<String, Upstream>, String> {
    let mut upstreams = BTreeMap::new();
    for (name, u) in raw {
        let upstream = upstream::parse_upstream(&name, u, credentials, gateway.retention)?;
        upstreams.insert(name, upstream);
    }
    check_prefixes(&upstreams)?;
    Ok(upstreams)
}

/// The `[[tool]]` tables, in order; an error is placed at the tool's name.
fn tools(
    raw: Vec<raw::RawTool>,
    gateway: &GatewaySettings,
    credentials: &BTreeMap<String, Credential>,
    upstreams: &BTreeMap<String, Upstream>,
) -> Result<Vec<ToolContract>, (usize, String)> {
    let mut tools: Vec<ToolContract> = Vec::new();
    for t in raw {
        let offset = t.name.span().start;
        let name = t.name.get_ref().clone();
        if tools.iter().any(|x| x.name == name) {
            return Err((offset, format!("tool {name:?} is declared twice")));
        }
        let contract =
            tool::build_tool(t, gateway, credentials, upstreams).map_err(|m| (offset, m))?;
        tools.push(contract);
    }
    Ok(tools)
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
