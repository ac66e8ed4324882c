//! The tools the gateway serves: each contract with its compiled input schema and its resolved
//! credential.

use std::collections::HashMap;
use std::sync::Arc;

use postern_channels::http::Credential;
use postern_core::contract::{ChannelSpec, ToolContract};
use serde_json::Value;

use crate::error::GatewayError;

pub struct ToolEntry {
    pub contract: Arc<ToolContract>,
    validator: jsonschema::Validator,
    pub credential: Option<Credential>,
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
    /// `credentials` holds the resolved credential for each name the config declares.
    pub fn new(
        contracts: &[ToolContract],
        credentials: &HashMap<String, Credential>,
    ) -> Result<Registry, GatewayError> {
        let mut tools = HashMap::new();
        let mut order = Vec::new();
        for c in contracts {
            let validator = jsonschema::validator_for(&c.input_schema).map_err(|e| {
                GatewayError::Internal(format!(
                    "tool {}: input_schema is not a valid JSON Schema: {e}",
                    c.name
                ))
            })?;
            if let ChannelSpec::Http(h) = &c.channel {
                let templates = std::iter::once(&h.request)
                    .chain(&c.recovery.status_query)
                    .chain(&c.recovery.precondition);
                for request in templates {
                    postern_channels::http::check_template(&request.url)
                        .map_err(|e| GatewayError::Internal(format!("tool {}: {e}", c.name)))?;
                }
            }
            let credential = match &c.channel {
                ChannelSpec::Http(h) => match &h.credential {
                    Some(name) => Some(credentials.get(name).cloned().ok_or_else(|| {
                        GatewayError::Internal(format!(
                            "tool {}: credential {name} was not resolved",
                            c.name
                        ))
                    })?),
                    None => None,
                },
                _ => None,
            };
            order.push(c.name.clone());
            tools.insert(
                c.name.clone(),
                ToolEntry {
                    contract: Arc::new(c.clone()),
                    validator,
                    credential,
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

/// The input schema of the built-in `execution_status` tool.
pub fn execution_status_schema() -> Value {
    serde_json::json!({
        "type": "object",
        "required": ["execution_id"],
        "properties": { "execution_id": { "type": "string", "description": "an exe_… id returned by an earlier call" } }
    })
}
