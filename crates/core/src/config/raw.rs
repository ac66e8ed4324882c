//! The TOML shapes of `postern.toml`, exactly as written. Every table denies unknown keys.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use super::{EnvValue, SecretRef};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub gateway: RawGateway,
    #[serde(default)]
    pub issuer: Vec<super::identity::RawIssuer>,
    #[serde(default)]
    pub actor: Vec<RawActor>,
    #[serde(default)]
    pub operator: Vec<RawOperator>,
    #[serde(default)]
    pub credential: BTreeMap<String, RawCredential>,
    #[serde(default)]
    pub upstream: BTreeMap<String, RawUpstream>,
    #[serde(default)]
    pub tool: Vec<RawTool>,
    #[serde(default)]
    pub budget: Vec<super::budget::RawBudget>,
    #[serde(default)]
    pub telemetry: super::telemetry::RawTelemetry,
    #[serde(default)]
    pub console: super::console::RawConsole,
    #[serde(default)]
    pub approver: super::console::RawApprover,
    #[serde(default)]
    pub audit: super::audit::RawAudit,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGateway {
    pub listen: Option<String>,
    pub public_url: Option<String>,
    pub store: Option<String>,
    pub fingerprint_key: SecretRef,
    pub signing_key: Option<SecretRef>,
    pub retention: Option<String>,
    pub max_body_bytes: Option<u64>,
    pub allowed_origins: Option<Vec<String>>,
    pub approval_ttl: Option<String>,
    pub attach_wait: Option<String>,
    pub checkpoint_every: Option<String>,
    pub max_calls_per_actor: Option<u32>,
    pub max_sessions_per_actor: Option<u32>,
    pub max_streams_per_actor: Option<u32>,
    pub max_pending_approvals_per_actor: Option<u32>,
    pub max_connections_per_actor: Option<u32>,
    pub max_connections: Option<u32>,
    pub max_connections_per_address: Option<u32>,
    pub trusted_proxies: Option<Vec<String>>,
    pub first_byte_timeout: Option<String>,
    pub header_read_timeout: Option<String>,
    pub body_read_timeout: Option<String>,
    pub min_body_rate: Option<u32>,
    pub idle_timeout: Option<String>,
    pub session_idle: Option<String>,
    pub instance_lease: Option<String>,
    pub tls: Option<RawListenerTls>,
    pub vault: Option<String>,
    pub vault_passphrase: Option<SecretRef>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawListenerTls {
    pub cert: String,
    pub key: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawActor {
    pub name: Spanned<String>,
    pub token: Option<SecretRef>,
    pub client_cert_fingerprint: Option<String>,
    pub session_approval: Option<String>,
    pub tools: Option<Vec<String>>,
    pub claims: Option<super::identity::RawClaims>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOperator {
    pub name: Spanned<String>,
    pub token: Option<SecretRef>,
    pub claims: Option<super::identity::RawClaims>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCredential {
    pub kind: String,
    pub secret: Option<SecretRef>,
    pub username: Option<String>,
    pub header: Option<String>,
    pub client_certificate: Option<String>,
    pub client_key: Option<SecretRef>,
    pub approval: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawUpstream {
    pub command: Option<Vec<String>>,
    pub env: Option<BTreeMap<String, EnvValue>>,
    pub cwd: Option<String>,
    pub url: Option<String>,
    pub credential: Option<String>,
    pub ca_file: Option<String>,
    pub timeout: Option<String>,
    pub max_duration: Option<String>,
    pub startup_timeout: Option<String>,
    pub max_response_bytes: Option<u64>,
    pub on_tool_error: Option<String>,
    pub expose: Option<String>,
    pub prefix: Option<String>,
    pub default_class: Option<String>,
    pub read_only: Option<Vec<String>>,
    pub match_window: Option<String>,
    pub approval: Option<String>,
    /// `"off"` or a [`RawSandbox`] table: read by `upstream::sandbox`, which names the key.
    pub sandbox: Option<toml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSandbox {
    pub read: Option<Vec<String>>,
    pub write: Option<Vec<String>>,
    pub user: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTool {
    pub name: Spanned<String>,
    #[serde(default)]
    pub description: String,
    pub class: Option<String>,
    pub match_window: Option<String>,
    pub retention: Option<String>,
    pub input_schema: Option<toml::Value>,
    pub defaults: Option<toml::Table>,
    pub non_semantic: Option<Vec<String>>,
    pub secret_fields: Option<Vec<String>>,
    pub approval: Option<String>,
    pub approval_ttl: Option<String>,
    #[serde(default)]
    pub long_running: bool,
    pub http: Option<RawHttp>,
    pub ssh: Option<RawSsh>,
    pub mcp: Option<RawMcp>,
    pub recovery: Option<RawRecovery>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHttp {
    pub method: String,
    pub url: String,
    pub credential: Option<String>,
    pub body: Option<String>,
    pub idempotency_header: Option<String>,
    pub connect_timeout: Option<String>,
    pub response_timeout: Option<String>,
    pub ca_file: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSsh {
    pub host: String,
    pub port: Option<u16>,
    pub user: String,
    pub host_key: String,
    pub credential: String,
    pub command: String,
    pub cwd: Option<String>,
    pub timeout: Option<String>,
    pub unchanged_exit_codes: Option<Vec<i64>>,
    pub marker_dir: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMcp {
    pub server: String,
    pub tool: String,
    pub timeout: Option<String>,
    pub max_response_bytes: Option<u64>,
    pub on_tool_error: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRecovery {
    pub method: Option<String>,
    pub status_query: Option<RawRequest>,
    pub status_tool: Option<String>,
    pub arguments: Option<toml::Table>,
    pub precondition: Option<RawRequest>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRequest {
    pub method: String,
    pub url: String,
}
