//! Which of an upstream's tools are served here: those `[[tool]]`s re-export and, with
//! `expose = "all"`, every other one it lists, under the served names and classes.

use std::collections::HashSet;
use std::sync::Arc;

use postern_channels::mcp::{Upstream, UpstreamTool};
use postern_core::config::ExposeAll;
use postern_core::contract::ToolContract;
use postern_core::ActionClass;

/// An upstream's tools served here: those `[[tool]]`s re-export, and with `expose = "all"`
/// every other one it lists.
#[derive(Clone)]
pub struct UpstreamExposure {
    pub upstream: Arc<Upstream>,
    /// Its names of the tools `[[tool]]`s re-export.
    pub explicit: Vec<String>,
    pub(super) all: Option<Arc<ServedAll>>,
}

/// `expose = "all"` for one upstream: its default contract and the names it may not take.
pub(super) struct ServedAll {
    pub(super) expose: ExposeAll,
    /// Names `[[tool]]`s and built-ins have: an upstream tool is never served under one.
    pub(super) reserved: Arc<HashSet<String>>,
}

impl UpstreamExposure {
    /// The upstream's names of the tools served from it, given what it lists now: the
    /// explicitly re-exported ones (listed or not) and those `expose = "all"` serves.
    pub fn exposed(&self, listed: &[UpstreamTool]) -> Vec<String> {
        let mut names = self.explicit.clone();
        names.extend(
            listed
                .iter()
                .filter(|t| self.served_name(&t.name).is_ok())
                .map(|t| t.name.clone()),
        );
        names
    }

    /// The name `expose = "all"` serves the upstream's tool `tool` under, or why it serves
    /// it under none.
    pub fn served_name(&self, tool: &str) -> Result<String, String> {
        let Some(all) = &self.all else {
            return Err("the upstream does not expose all its tools".into());
        };
        if self.explicit.iter().any(|t| t == tool) {
            return Err("a [[tool]] re-exports it under its own contract".into());
        }
        let name = all.expose.served_name(tool).ok_or_else(|| {
            format!("{:?} is not a tool name MCP clients accept (1-64 letters, digits, '_', '-' or '.')", format!("{}{tool}", all.expose.prefix))
        })?;
        if all.reserved.contains(&name) {
            return Err(format!(
                "{name:?} is taken by a [[tool]] or a built-in tool"
            ));
        }
        Ok(name)
    }

    /// The prefix of the names its prompts are served under: `expose = "all"`'s prefix, else
    /// `<upstream>_`.
    pub fn prefix(&self) -> String {
        match &self.all {
            Some(all) => all.expose.prefix.clone(),
            None => format!("{}_", self.upstream.name()),
        }
    }

    /// The class an `expose = "all"` tool is served under, and why: an operator's `read_only`
    /// pattern or the upstream's `default_class` (`None`: not served under `expose = "all"`).
    pub fn served_class(&self, tool: &str) -> Option<(ActionClass, String)> {
        let all = self.all.as_ref()?;
        if self.explicit.iter().any(|t| t == tool) {
            return None;
        }
        Some(match all.expose.read_pattern(tool) {
            Some(p) => (
                ActionClass::ReadOnly,
                format!("matches read_only pattern {p:?}"),
            ),
            None => (
                all.expose.template().class,
                "the upstream's default_class".into(),
            ),
        })
    }

    /// The contract `expose = "all"` serves its tools under (named for none of them).
    pub fn default_contract(&self) -> Option<&ToolContract> {
        Some(self.all.as_ref()?.expose.template())
    }

    /// The upstream's tools not served under any name, with why.
    pub fn not_served(&self, listed: &[UpstreamTool]) -> Vec<(String, String)> {
        if self.all.is_none() {
            return Vec::new();
        }
        listed
            .iter()
            .filter(|t| !self.explicit.contains(&t.name))
            .filter_map(|t| Some((t.name.clone(), self.served_name(&t.name).err()?)))
            .collect()
    }
}
