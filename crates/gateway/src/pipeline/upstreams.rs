//! The operators' view of the upstream MCP servers: each link's state and, per re-exported
//! tool, the version served, the version accepted and (when they differ) both definitions —
//! and the acceptance of a changed version.

use serde::Serialize;

use super::Gateway;
use crate::error::GatewayError;
use crate::pins::{self, AcceptError};

/// One upstream as `/ops/upstreams` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct UpstreamView {
    pub name: String,
    /// `None` when up; else why not.
    pub down: Option<String>,
    /// A stdio upstream's environment: the names of the variables its process receives (the
    /// safe base and its `env` table), never their values.
    pub environment: Option<Vec<String>>,
    pub tools: Vec<UpstreamToolView>,
    /// Tools it lists that `expose = "all"` serves under no name, with why (a name a
    /// `[[tool]]` or a built-in already has, or one MCP clients refuse).
    pub not_served: Vec<NotServed>,
}

/// A listed upstream tool that is not served.
#[derive(Clone, Debug, Serialize)]
pub struct NotServed {
    pub tool: String,
    pub why: String,
}

/// One re-exported upstream tool.
#[derive(Clone, Debug, Serialize)]
pub struct UpstreamToolView {
    pub tool: String,
    /// `serving`, `withheld` (changed since accepted, or not checked yet) or `not_listed`.
    pub state: &'static str,
    pub why: Option<String>,
    pub listed_digest: Option<String>,
    pub accepted_digest: Option<String>,
    pub accepted_by: Option<String>,
    /// JSON text of the definitions, for the diff (both only when they differ).
    pub listed_definition: Option<String>,
    pub accepted_definition: Option<String>,
}

impl Gateway {
    /// Every upstream whose tools are re-exported, with its tools' pins.
    pub fn upstream_views(&self) -> Vec<UpstreamView> {
        let pins = self.registry.pins();
        self.registry
            .upstreams()
            .iter()
            .map(|exposure| {
                let upstream = &exposure.upstream;
                let state = upstream.state();
                let tools = exposure
                    .exposed(&state.tools)
                    .into_iter()
                    .map(|name| {
                        let listed = state.tools.iter().find(|t| t.name == name);
                        let accepted = pins.accepted(upstream.name(), &name);
                        let check = listed.map(|t| pins.check(upstream.name(), t));
                        let differs = matches!(check, Some(Err(_)));
                        UpstreamToolView {
                            state: match &check {
                                None => "not_listed",
                                Some(Ok(())) => "serving",
                                Some(Err(_)) => "withheld",
                            },
                            why: check.and_then(|c| c.err()).map(|w| w.to_string()),
                            listed_digest: listed.map(pins::digest),
                            accepted_digest: accepted.as_ref().map(|p| p.digest.clone()),
                            accepted_by: accepted.as_ref().and_then(|p| p.accepted_by.clone()),
                            listed_definition: listed.filter(|_| differs).map(|t| {
                                serde_json::to_string_pretty(&pins::definition(t))
                                    .unwrap_or_default()
                            }),
                            accepted_definition: accepted.filter(|_| differs).map(|p| p.definition),
                            tool: name,
                        }
                    })
                    .collect();
                UpstreamView {
                    name: upstream.name().to_string(),
                    not_served: exposure
                        .not_served(&state.tools)
                        .into_iter()
                        .map(|(tool, why)| NotServed { tool, why })
                        .collect(),
                    down: state.up.clone().err(),
                    environment: upstream.environment().map(<[String]>::to_vec),
                    tools,
                }
            })
            .collect()
    }

    /// An operator accepts the version of `tool` its upstream lists now (whose digest must be
    /// `digest`, when given): it is served again, and the acceptance is chained as a notice.
    pub async fn accept_upstream_tool(
        &self,
        upstream: &str,
        tool: &str,
        digest: Option<&str>,
        by: &str,
    ) -> Result<String, GatewayError> {
        let exposure = self
            .registry
            .upstreams()
            .iter()
            .find(|x| x.upstream.name() == upstream)
            .ok_or_else(|| {
                GatewayError::Internal(format!("no upstream {upstream:?} re-exports tools here"))
            })?;
        let state = exposure.upstream.state();
        if !exposure.exposed(&state.tools).iter().any(|t| t == tool) {
            return Err(GatewayError::UnknownTool(format!("{upstream}/{tool}")));
        }
        let listed = state.tools.iter().find(|t| t.name == tool).ok_or_else(|| {
            GatewayError::Internal(format!(
                "upstream {upstream} does not list {tool:?} now: there is no version to accept"
            ))
        })?;
        match self
            .registry
            .pins()
            .accept(&self.ledger, upstream, listed, digest, by)
            .await
        {
            Ok(pin) => {
                tracing::info!(upstream, tool, digest = %pin.digest, operator = by, "an upstream tool's version was accepted");
                Ok(pin.digest)
            }
            Err(AcceptError::Ledger(e)) => Err(e.into()),
            Err(e @ AcceptError::Stale { .. }) => Err(GatewayError::Internal(e.to_string())),
        }
    }
}
