//! The operators' view of the upstream MCP servers: each link's state and, per re-exported
//! tool, the version served, the version accepted and (when they differ) both definitions —
//! and the acceptance of a changed version.

use std::collections::HashSet;
use std::sync::Arc;

use postern_channels::mcp::Upstream;
use postern_core::contract::ChannelSpec;
use serde::Serialize;

use postern_core::config::Actor;
use postern_ledger::Ledger;

use super::Gateway;
use crate::error::GatewayError;
use crate::pins::{self, AcceptError};
use crate::registry::Registry;

/// One upstream as `/ops/upstreams` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct UpstreamView {
    pub name: String,
    /// `None` when up; else why not.
    pub down: Option<String>,
    /// A stdio upstream's process (the leader of its process group) while it runs.
    pub pid: Option<u32>,
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
    /// The class it is served under, and why (its `[[tool]]`, a `read_only` pattern, or the
    /// upstream's `default_class`; the upstream's annotations never decide).
    pub class: Option<String>,
    pub class_why: Option<String>,
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

/// An upstream an actor sees: it may call at least one of its tools, so it also sees its
/// resources and prompts (prompts named with `prefix`, like `expose = "all"` tools).
#[derive(Clone)]
pub struct VisibleUpstream {
    pub upstream: Arc<Upstream>,
    pub prefix: String,
}

/// The upstream servers' tools as they are served: which upstreams an actor sees, the pins of
/// their tools, an operator's acceptance of a changed version. Owns the tool view's change
/// signal; reached through [`Gateway::upstream_tools`].
pub struct UpstreamTools {
    registry: Arc<Registry>,
    ledger: Arc<Ledger>,
    /// The actors (which tools each may call).
    actors: Vec<Actor>,
    /// Bumped when the tools served change by an operator's act (an accepted tool version):
    /// the front tells its clients their tool list changed.
    tool_view: tokio::sync::watch::Sender<u64>,
}

impl UpstreamTools {
    pub(super) fn new(registry: Arc<Registry>, ledger: Arc<Ledger>, actors: Vec<Actor>) -> Self {
        UpstreamTools {
            registry,
            ledger,
            actors,
            tool_view: tokio::sync::watch::channel(0).0,
        }
    }

    /// The upstreams `actor` sees, in name order.
    pub fn upstreams_for(&self, actor: &str) -> Vec<VisibleUpstream> {
        let Some(config) = self.actors.iter().find(|a| a.name == actor) else {
            return Vec::new();
        };
        let served: HashSet<String> = self
            .registry
            .iter()
            .into_iter()
            .filter(|e| config.may_call(&e.contract.name))
            .filter_map(|e| match &e.contract.channel {
                ChannelSpec::Mcp(m) => Some(m.server.clone()),
                _ => None,
            })
            .collect();
        self.registry
            .upstreams()
            .iter()
            .filter(|x| served.contains(x.upstream.name()))
            .map(|x| VisibleUpstream {
                upstream: x.upstream.clone(),
                prefix: x.prefix(),
            })
            .collect()
    }

    /// The class an upstream's tool is served under, and why.
    fn class_of(
        &self,
        exposure: &crate::registry::UpstreamExposure,
        tool: &str,
    ) -> (Option<String>, Option<String>) {
        if let Some((class, why)) = exposure.served_class(tool) {
            return (Some(class.as_str().to_string()), Some(why));
        }
        let contract = self.registry.iter().into_iter().find(|e| {
            matches!(&e.contract.channel, ChannelSpec::Mcp(m) if m.server == exposure.upstream.name() && m.tool == tool)
        });
        match contract {
            Some(e) => (
                Some(e.contract.class.as_str().to_string()),
                Some(format!("its [[tool]] {}", e.contract.name)),
            ),
            None => (None, None),
        }
    }

    /// Changes the operators made to the tools served (an accepted version).
    pub fn tool_view_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.tool_view.subscribe()
    }

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
                        let (class, class_why) = self.class_of(exposure, &name);
                        let listed = state.tools.iter().find(|t| t.name == name);
                        let accepted = pins.accepted(upstream.name(), &name);
                        let check = listed.map(|t| pins.check(upstream.name(), t));
                        let differs = matches!(check, Some(Err(_)));
                        UpstreamToolView {
                            class,
                            class_why,
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
                    pid: state.pid,
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
                self.tool_view.send_modify(|n| *n += 1);
                Ok(pin.digest)
            }
            Err(AcceptError::Ledger(e)) => Err(e.into()),
            Err(e @ AcceptError::Stale { .. }) => Err(GatewayError::Internal(e.to_string())),
        }
    }
}

impl Gateway {
    /// The upstream servers' tools as they are served.
    pub fn upstream_tools(&self) -> &UpstreamTools {
        &self.upstream_tools
    }
}

/// Watches every upstream whose tools the registry re-exports and keeps the pins current.
pub(super) fn watch_pins(
    pins: Arc<crate::pins::Pins>,
    ledger: Arc<postern_ledger::Ledger>,
    upstreams: Vec<crate::registry::UpstreamExposure>,
) {
    for exposure in upstreams {
        let (pins, ledger) = (pins.clone(), ledger.clone());
        tokio::spawn(async move {
            let upstream = &exposure.upstream;
            let mut changes = upstream.subscribe();
            loop {
                let tools = changes.borrow_and_update().tools.clone();
                let exposed = exposure.exposed(&tools);
                if let Err(e) = pins
                    .observe(&ledger, upstream.name(), &tools, &exposed)
                    .await
                {
                    tracing::warn!(upstream = upstream.name(), error = %e, "the upstream's tools' pins could not be recorded");
                }
                if changes.changed().await.is_err() {
                    return;
                }
            }
        });
    }
}
