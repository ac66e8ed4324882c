//! The tools the gateway serves: each contract with its compiled input schema, its resolved
//! credential and its TLS profile.

use std::collections::HashMap;
use std::sync::Arc;

use postern_channels::http::{ClientIdentity, Credential, TlsProfile, TrustedRoots};
use postern_core::contract::{ChannelSpec, ToolContract};
use serde_json::Value;

use crate::error::GatewayError;
use crate::vault::VaultCredential;

pub struct ToolEntry {
    pub contract: Arc<ToolContract>,
    validator: jsonschema::Validator,
    /// The header the tool's credential puts on its requests.
    pub credential: Option<Credential>,
    /// A credential whose secret is read from the vault at each request.
    pub vault_credential: Option<VaultCredential>,
    /// Whom the tool's `https://` requests trust and which client certificate they show;
    /// `None` is the webpki roots without a client certificate.
    pub tls: Option<Arc<TlsProfile>>,
}

/// A configured credential, read: what it puts on a request.
#[derive(Clone, Debug, Default)]
pub struct ResolvedCredential {
    /// The header (bearer, basic, header kinds); `None` for `mtls` and for a secret in the
    /// vault.
    pub header: Option<Credential>,
    /// A secret in the vault, read at each request.
    pub vault: Option<VaultCredential>,
    /// The client certificate and key shown in TLS handshakes, if the credential has one.
    pub client_identity: Option<ClientIdentity>,
}

/// What a configuration's references point to, read by the binary before the registry is
/// built (the gateway reads no files).
#[derive(Clone, Debug, Default)]
pub struct Resolved {
    /// By credential name.
    pub credentials: HashMap<String, ResolvedCredential>,
    /// By `http.ca_file` as written in the config.
    pub ca_files: HashMap<String, TrustedRoots>,
}

impl ToolEntry {
    /// Schema errors as messages, naming paths and the schema's rule, never an argument's value
    /// (jsonschema's masked form writes `value` where the instance would be: at the root the
    /// instance is the whole arguments object, secret fields included).
    pub fn validate(&self, arguments: &Value) -> Result<(), Vec<String>> {
        let errors: Vec<String> = self
            .validator
            .iter_errors(arguments)
            .map(|e| {
                let path = e.instance_path().to_string();
                let at = if path.is_empty() {
                    "(arguments)"
                } else {
                    &path
                };
                format!("{at}: {}", e.masked_with("the value"))
            })
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }
}

pub struct Registry {
    tools: HashMap<String, ToolEntry>,
    order: Vec<String>,
}

impl Registry {
    /// Every tool of `contracts`, with the credentials and CA files in `resolved`. One TLS
    /// profile is built per distinct (CA file, client certificate), so tools that share both
    /// share one connection pool.
    pub fn new(contracts: &[ToolContract], resolved: &Resolved) -> Result<Registry, GatewayError> {
        let mut tools = HashMap::new();
        let mut order = Vec::new();
        let mut profiles = TlsProfiles::default();
        for c in contracts {
            let validator = jsonschema::validator_for(&c.input_schema).map_err(|e| {
                GatewayError::Internal(format!(
                    "tool {}: input_schema is not a valid JSON Schema: {e}",
                    c.name
                ))
            })?;
            let (mut credential, mut vault_credential, mut tls) = (None, None, None);
            if let ChannelSpec::Http(h) = &c.channel {
                let templates = std::iter::once(&h.request)
                    .chain(&c.recovery.status_query)
                    .chain(&c.recovery.precondition);
                for request in templates {
                    postern_channels::http::check_template(&request.url)
                        .map_err(|e| GatewayError::Internal(format!("tool {}: {e}", c.name)))?;
                }
                let resolved_credential = match &h.credential {
                    Some(name) => Some((
                        name.as_str(),
                        resolved.credentials.get(name).ok_or_else(|| {
                            GatewayError::Internal(format!(
                                "tool {}: credential {name} was not resolved",
                                c.name
                            ))
                        })?,
                    )),
                    None => None,
                };
                credential = resolved_credential.and_then(|(_, r)| r.header.clone());
                vault_credential = resolved_credential.and_then(|(_, r)| r.vault.clone());
                tls = profiles
                    .for_tool(h.ca_file.as_deref(), resolved_credential, resolved)
                    .map_err(|e| GatewayError::Internal(format!("tool {}: {e}", c.name)))?;
            }
            order.push(c.name.clone());
            tools.insert(
                c.name.clone(),
                ToolEntry {
                    contract: Arc::new(c.clone()),
                    validator,
                    credential,
                    vault_credential,
                    tls,
                },
            );
        }
        Ok(Registry { tools, order })
    }

    pub fn get(&self, name: &str) -> Option<&ToolEntry> {
        self.tools.get(name)
    }

    /// Tools in config order.
    pub fn iter(&self) -> impl Iterator<Item = &ToolEntry> {
        self.order.iter().filter_map(|n| self.tools.get(n))
    }
}

/// The TLS profiles built so far, by (CA file, name of the credential whose client certificate
/// is shown).
#[derive(Default)]
struct TlsProfiles {
    built: HashMap<(Option<String>, Option<String>), Arc<TlsProfile>>,
}

impl TlsProfiles {
    /// The profile for a tool with this CA file and credential; `None` when it has neither
    /// (the channel's shared webpki profile).
    fn for_tool(
        &mut self,
        ca_file: Option<&str>,
        credential: Option<(&str, &ResolvedCredential)>,
        resolved: &Resolved,
    ) -> Result<Option<Arc<TlsProfile>>, String> {
        let identity = credential.and_then(|(name, r)| Some((name, r.client_identity.as_ref()?)));
        if ca_file.is_none() && identity.is_none() {
            return Ok(None);
        }
        let key = (
            ca_file.map(str::to_string),
            identity.map(|(name, _)| name.to_string()),
        );
        if let Some(profile) = self.built.get(&key) {
            return Ok(Some(profile.clone()));
        }
        let roots = match ca_file {
            Some(file) => resolved
                .ca_files
                .get(file)
                .ok_or_else(|| format!("http.ca_file {file} was not read"))?,
            None => &TrustedRoots::WebPki,
        };
        let profile = TlsProfile::new(roots, identity.map(|(_, id)| id))
            .map(Arc::new)
            .map_err(|e| e.to_string())?;
        self.built.insert(key, profile.clone());
        Ok(Some(profile))
    }
}

/// The input schema of the built-in `execution_status` tool.
pub fn execution_status_schema() -> Value {
    serde_json::json!({
        "type": "object",
        "required": ["execution_id"],
        "properties": { "execution_id": { "type": "string", "description": "an exe_… id returned by an earlier call" } }
    })
}
