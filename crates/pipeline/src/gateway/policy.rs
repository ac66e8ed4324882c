//! Which tools an actor may call, which are long-running, and which calls wait for a person
//! (a per-use approval, or a run's authorization): questions of the config and the registry
//! alone, answered by a part of the gateway that holds nothing else.

use std::sync::Arc;
use std::time::Duration;

use postern_core::config::{Config, SessionApproval};
use postern_core::contract::{Approval, ToolContract};

use super::Gateway;
use crate::registry::{ListedTool, Registry};

/// The tools' and actors' rules; reached through [`Gateway::policy`].
pub struct ToolPolicy {
    config: Arc<Config>,
    registry: Arc<Registry>,
}

impl ToolPolicy {
    pub(super) fn new(config: Arc<Config>, registry: Arc<Registry>) -> ToolPolicy {
        ToolPolicy { config, registry }
    }

    /// Tools the actor may call, in config order.
    pub fn tools_for<'a>(&'a self, actor: &'a str) -> impl Iterator<Item = ListedTool> + 'a {
        self.registry
            .iter()
            .into_iter()
            .filter(move |e| self.may_call(actor, &e.contract.name))
            .map(|e| e.listed())
    }

    pub(super) fn may_call(&self, actor: &str, tool: &str) -> bool {
        self.config.actor(actor).is_some_and(|a| a.may_call(tool))
    }

    /// Whether a tool is declared long-running (served as an MCP task).
    pub fn is_long_running(&self, tool: &str) -> bool {
        self.registry
            .get(tool)
            .is_some_and(|e| e.contract.long_running)
    }

    /// How long a call of this tool waits for its per-use approval, if it needs one.
    pub fn approval_ttl(&self, contract: &ToolContract) -> Option<Duration> {
        let credential = contract
            .channel
            .credential_ref()
            .and_then(|c| self.config.credentials.get(c));
        let asks = contract.approval == Approval::EveryCall
            || credential.is_some_and(|c| c.approval == Approval::EveryCall);
        asks.then(|| {
            contract
                .approval_ttl
                .unwrap_or(self.config.gateway.approval_ttl)
        })
    }

    /// Whether any call can wait for a person: a tool (or its credential) asks for a per-use
    /// approval, or an actor for session authorization. Without either, nothing ever expires
    /// and the expiry sweep is not run.
    pub fn waits_for_people(&self) -> bool {
        self.registry
            .iter()
            .iter()
            .map(|e| &*e.contract)
            .chain(
                self.registry
                    .upstreams()
                    .iter()
                    .filter_map(|x| x.default_contract()),
            )
            .any(|c| self.approval_ttl(c).is_some())
            || self
                .config
                .actors
                .iter()
                .any(|a| a.session_approval == SessionApproval::Required)
    }

    /// Whether every call of `tool` waits for a per-use approval.
    pub fn asks_approval(&self, tool: &str) -> bool {
        self.registry
            .get(tool)
            .is_some_and(|e| self.approval_ttl(&e.contract).is_some())
    }
}

impl Gateway {
    /// Which tools an actor may call, and which calls wait for a person.
    pub fn policy(&self) -> &ToolPolicy {
        &self.policy
    }
}
