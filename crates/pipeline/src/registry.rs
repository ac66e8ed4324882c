//! The tools the gateway serves: each contract with its compiled input schema, its resolved
//! credential and the [`Channel`] its calls go through (an HTTP tool with its TLS profile, or
//! an upstream MCP server's tool). An upstream with `expose = "all"` adds a tool for each one
//! it lists, made when it is first listed or called, under the upstream's default contract.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use postern_channels::http::{ClientIdentity, Credential, HttpSender, TrustedRoots};
use postern_channels::mcp::{McpTool, Upstream};
use postern_channels::ssh::SshLinks;
use postern_channels::Channel;
use postern_core::config::ExposeAll;
use postern_core::contract::{ChannelSpec, ToolContract};
use serde_json::Value;

use crate::error::GatewayError;
use crate::pins::Pins;
use crate::vault::VaultCredential;

mod builder;
mod exposure;

use builder::{TlsProfiles, ToolBuilder};
use exposure::ServedAll;
pub use exposure::UpstreamExposure;

pub struct ToolEntry {
    pub contract: Arc<ToolContract>,
    validator: jsonschema::Validator,
    /// The header the tool's credential puts on its requests.
    pub credential: Option<Credential>,
    /// A credential whose secret is read from the vault at each request.
    pub vault_credential: Option<VaultCredential>,
    /// Where its calls go.
    pub channel: Arc<dyn Channel>,
    /// For a tool re-exported from an upstream MCP server: the upstream and its name for it.
    pub upstream: Option<UpstreamBinding>,
}

/// An upstream tool behind a contract: the schema (when the config gives none) and the
/// untrusted annotations come from what the upstream lists now.
pub struct UpstreamBinding {
    pub upstream: Arc<Upstream>,
    pub tool: String,
    /// The accepted versions of upstream tools: a changed one is withheld.
    pins: Arc<Pins>,
    /// The config gave no input schema: the upstream's is used (compiled once per list).
    schema_from_upstream: bool,
    compiled: Mutex<Option<(u64, Arc<jsonschema::Validator>)>>,
    /// The listed version's digest, computed once per tool list (every call checks it).
    digest: Mutex<Option<(u64, String)>>,
}

/// A tool as `tools/list` shows it.
#[derive(Clone, Debug)]
pub struct ListedTool {
    pub contract: Arc<ToolContract>,
    pub description: String,
    pub input_schema: Value,
    /// An upstream's own annotations (`readOnlyHint`, …): shown, never trusted.
    pub upstream_annotations: Option<Value>,
    /// Why calls cannot be sent now (an upstream that is down).
    pub unavailable: Option<String>,
    /// Why the tool is not served at all now (its upstream changed it: tool pinning).
    pub withheld: Option<String>,
    /// An upstream tool's display title and the schema of its `structuredContent`, as the
    /// upstream lists them (its results' `structuredContent` is passed on unchanged).
    pub title: Option<String>,
    pub output_schema: Option<Value>,
}

/// What the registry's channels dial through: the HTTP sender (a simulated target in the
/// model tests) and the upstream MCP servers, by name.
#[derive(Clone)]
pub struct Dialers {
    pub http: Arc<dyn HttpSender>,
    pub upstreams: HashMap<String, Arc<Upstream>>,
    /// The upstreams (of `upstreams`) that serve every tool they list.
    pub exposed_all: HashMap<String, ExposeAll>,
    /// The SSH connections every ssh tool shares (one per host, user and key).
    pub ssh: Arc<SshLinks>,
}

impl Dialers {
    /// HTTP through `http`, no upstream MCP servers.
    pub fn http_only(http: Arc<dyn HttpSender>) -> Dialers {
        Dialers {
            http,
            upstreams: HashMap::new(),
            exposed_all: HashMap::new(),
            ssh: Arc::default(),
        }
    }
}

/// A configured credential, read: what it puts on a request.
#[derive(Clone, Debug, Default)]
pub struct ResolvedCredential {
    /// What the credential puts on a request: a header (bearer, basic, header kinds) or an
    /// SSH private key (`ssh_key`); `None` for `mtls` and for a secret in the vault.
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
        let upstream_validator = match &self.upstream {
            Some(b) if b.schema_from_upstream => b.validator().map_err(|e| vec![e])?,
            _ => None,
        };
        let validator = upstream_validator.as_deref().unwrap_or(&self.validator);
        let errors: Vec<String> = validator
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

impl ToolEntry {
    /// The tool as listed now: for an upstream tool, the upstream's schema (unless the config
    /// gives one), its description (unless the config gives one) and its annotations.
    pub fn listed(&self) -> ListedTool {
        let c = &self.contract;
        let mut listed = ListedTool {
            contract: c.clone(),
            description: c.description.clone(),
            input_schema: c.input_schema.clone(),
            upstream_annotations: None,
            unavailable: self.channel.unavailable(),
            withheld: None,
            title: None,
            output_schema: None,
        };
        if let Some(b) = &self.upstream {
            if let Some(listing) = b.listed() {
                let t = &listing.1;
                if b.schema_from_upstream {
                    listed.input_schema = t.input_schema.clone();
                }
                if listed.description.is_empty() {
                    listed.description = t.description.clone();
                }
                listed.upstream_annotations = t.annotations.clone();
                listed.title = t.title.clone();
                listed.output_schema = t.output_schema.clone();
                listed.withheld = b.withheld(&listing);
            } else if listed.unavailable.is_none() {
                listed.unavailable = Some(format!(
                    "upstream {} does not list a tool {:?}",
                    b.upstream.name(),
                    b.tool
                ));
            }
        }
        listed
    }
}

impl ToolEntry {
    /// Whether its upstream lists it with an output schema.
    pub fn has_output_schema(&self) -> bool {
        self.upstream
            .as_ref()
            .and_then(|b| b.listed())
            .is_some_and(|listing| listing.1.output_schema.is_some())
    }

    /// Why an upstream tool may not be called now although it is listed: its definition
    /// changed since it was accepted (or is not checked yet).
    pub fn withheld(&self) -> Option<String> {
        let b = self.upstream.as_ref()?;
        b.withheld(&b.listed()?)
    }
}

impl UpstreamBinding {
    fn new(link: &Arc<Upstream>, m: &postern_core::contract::McpSpec, pins: &Arc<Pins>) -> Self {
        UpstreamBinding {
            upstream: link.clone(),
            tool: m.tool.clone(),
            pins: pins.clone(),
            schema_from_upstream: m.schema_from_upstream,
            compiled: Mutex::new(None),
            digest: Mutex::new(None),
        }
    }

    /// The tool as listed now, with the generation of that list (one snapshot).
    fn listed(&self) -> Option<(u64, postern_channels::mcp::UpstreamTool)> {
        let state = self.upstream.state();
        let tool = state.tools.iter().find(|t| t.name == self.tool)?.clone();
        Some((state.generation, tool))
    }

    /// Why the listed version `tool` is withheld, if it is (its digest cached per list: every
    /// call checks it).
    fn withheld(
        &self,
        (generation, tool): &(u64, postern_channels::mcp::UpstreamTool),
    ) -> Option<String> {
        let generation = *generation;
        let digest = {
            let mut cached = self.digest.lock().ok()?;
            match cached.as_ref() {
                Some((g, d)) if *g == generation => d.clone(),
                _ => {
                    let d = crate::pins::digest(tool);
                    *cached = Some((generation, d.clone()));
                    d
                }
            }
        };
        self.pins
            .check_digest(self.upstream.name(), &tool.name, &digest)
            .err()
            .map(|w| w.to_string())
    }

    fn validator(&self) -> Result<Option<Arc<jsonschema::Validator>>, String> {
        let state = self.upstream.state();
        let mut compiled = self.compiled.lock().map_err(|_| "poisoned".to_string())?;
        if let Some((generation, v)) = compiled.as_ref() {
            if *generation == state.generation {
                return Ok(Some(v.clone()));
            }
        }
        let Some(tool) = state.tools.iter().find(|t| t.name == self.tool) else {
            // Nothing to validate against: the channel refuses the call, sending nothing, and
            // it is recorded `failed` with why.
            return Ok(None);
        };
        if tool.input_schema.get("type").and_then(Value::as_str) != Some("object") {
            return Err(format!(
                "upstream {}'s input schema for {:?} is not an object schema: refused, nothing sent",
                self.upstream.name(),
                self.tool
            ));
        }
        let v = jsonschema::validator_for(&tool.input_schema).map(Arc::new).map_err(|e| {
            format!(
                "upstream {}'s input schema for {:?} is not a valid JSON Schema ({e}): refused, nothing sent",
                self.upstream.name(),
                self.tool
            )
        })?;
        *compiled = Some((state.generation, v.clone()));
        Ok(Some(v))
    }
}

pub struct Registry {
    tools: HashMap<String, Arc<ToolEntry>>,
    order: Vec<String>,
    pins: Arc<Pins>,
    exposures: Vec<UpstreamExposure>,
    /// The tools of `expose = "all"` upstreams made so far, by served name.
    served_all: Mutex<HashMap<String, Arc<ToolEntry>>>,
}

impl Registry {
    /// Every tool of `contracts`, with the credentials and CA files in `resolved`. One TLS
    /// profile is built per distinct (CA file, client certificate), so tools that share both
    /// share one connection pool.
    pub fn new(
        contracts: &[ToolContract],
        resolved: &Resolved,
        dialers: &Dialers,
    ) -> Result<Registry, GatewayError> {
        let mut build = ToolBuilder {
            resolved,
            dialers,
            profiles: TlsProfiles::default(),
            pins: Arc::new(Pins::default()),
            exposures: BTreeMap::new(),
        };
        let mut tools = HashMap::new();
        let mut order = Vec::new();
        for c in contracts {
            let entry = build.tool(c)?;
            order.push(c.name.clone());
            tools.insert(c.name.clone(), Arc::new(entry));
        }
        build.expose_all(&order)?;
        Ok(Registry {
            tools,
            order,
            pins: build.pins,
            exposures: build.exposures.into_values().collect(),
            served_all: Mutex::new(HashMap::new()),
        })
    }
}

impl Registry {
    /// The tool served as `name`: a configured one, or one an `expose = "all"` upstream lists
    /// now (or listed earlier, or may list: it is down, and a retry must still reach the
    /// record).
    pub fn get(&self, name: &str) -> Option<Arc<ToolEntry>> {
        if let Some(entry) = self.tools.get(name) {
            return Some(entry.clone());
        }
        if let Some(entry) = self.served_all.lock().ok()?.get(name) {
            return Some(entry.clone());
        }
        self.exposures.iter().find_map(|x| {
            let all = x.all.as_ref()?;
            let tool = name.strip_prefix(all.expose.prefix.as_str())?;
            if x.served_name(tool).ok()? != name {
                return None;
            }
            let state = x.upstream.state();
            let listed = state.tools.iter().any(|t| t.name == tool);
            (listed || state.up.is_err()).then(|| self.served(x, all, name, tool))
        })
    }

    /// The entry of `expose = "all"` tool `tool`, served as `name` (made once).
    fn served(
        &self,
        x: &UpstreamExposure,
        all: &ServedAll,
        name: &str,
        tool: &str,
    ) -> Arc<ToolEntry> {
        let mut served = self.served_all.lock().unwrap_or_else(|p| p.into_inner());
        served
            .entry(name.to_string())
            .or_insert_with(|| {
                let contract = all.expose.contract(name, tool);
                let ChannelSpec::Mcp(m) = &contract.channel else {
                    unreachable!("an expose = \"all\" contract is an mcp one")
                };
                let channel = Arc::new(McpTool::new(
                    x.upstream.clone(),
                    m,
                    None,
                    contract.class.is_read_only(),
                ));
                let upstream = Some(UpstreamBinding::new(&x.upstream, m, &self.pins));
                Arc::new(ToolEntry {
                    validator: jsonschema::validator_for(&contract.input_schema)
                        .expect("{\"type\": \"object\"} compiles"),
                    contract: Arc::new(contract),
                    credential: None,
                    vault_credential: None,
                    channel,
                    upstream,
                })
            })
            .clone()
    }

    /// The upstream tools' pins.
    pub fn pins(&self) -> &Arc<Pins> {
        &self.pins
    }

    /// Each upstream whose tools are served here, by name.
    pub fn upstreams(&self) -> &[UpstreamExposure] {
        &self.exposures
    }

    /// Tools in config order, then each `expose = "all"` upstream's in its listing's order.
    pub fn iter(&self) -> Vec<Arc<ToolEntry>> {
        let mut all: Vec<Arc<ToolEntry>> = self
            .order
            .iter()
            .filter_map(|n| self.tools.get(n).cloned())
            .collect();
        for x in &self.exposures {
            let Some(served) = &x.all else { continue };
            for t in x.upstream.state().tools.iter() {
                if let Ok(name) = x.served_name(&t.name) {
                    all.push(self.served(x, served, &name, &t.name));
                }
            }
        }
        all
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
