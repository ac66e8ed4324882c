//! `postern init --from-mcp-json FILE`: a gateway config made from the MCP servers a host
//! already runs (Claude Desktop's, Cursor's and the MCP Inspector's `mcpServers`, VS Code's
//! `servers`), and the one change to the host's config that routes it through Postern.
//!
//! Each server becomes an `[upstream.NAME]` with `expose = "all"` under the safe default
//! contract, `irreversible`: a call whose answer was lost is never sent again on its own. The
//! tools a server listed when init asked it (`probe`) that only read, by its annotations or
//! their names (`classify`), are named in its `read_only`, each with why, for the operator to
//! review; at serve time annotations decide nothing. No value of the file lands in the config
//! that may be a secret: every `env` value becomes `{ env = "POSTERN_UP_<NAME>_<KEY>" }`, an
//! HTTP server's header a `[credential.NAME]` read from the environment, and the variables are
//! printed, a value that looks secret masked. The config has one actor (the host) and one
//! operator, each with a token read from the environment.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{anyhow, Context, Result};
use postern_core::config::Config;

use names::{prefixes, upstream_names};
use servers::{parse_document, Transport};
use tables::{gateway_section, header, people_toml, upstream_toml};
use variables::{Export, Vars};

/// The one actor: the host, through `postern connect` (or `serve --stdio`).
const AGENT: &str = "agent";
/// Where the gateway reads the agent's token from.
const AGENT_TOKEN_VAR: &str = "POSTERN_AGENT_TOKEN";
/// The one operator, and where the gateway (and the operator's commands: `postern status`,
/// `review` …, whose default this is) read its token from.
const OPERATOR: &str = "operator";
const OPERATOR_TOKEN_VAR: &str = "POSTERN_OPERATOR_TOKEN";

/// The tools each upstream listed when `init` asked it, by upstream name, or why it did not
/// answer; an upstream not in it was not asked.
pub type ListedTools = BTreeMap<String, Result<Vec<classify::Listed>, String>>;

/// An upstream made from a server, for the summary.
struct Made {
    name: String,
    source: String,
    prefix: String,
    transport: &'static str,
    /// How its reads were chosen, for the summary.
    reads: String,
}

/// What `init --from-mcp-json` writes and prints.
pub struct Onboarding {
    /// The host's file and the starter config it was made with, to make it again with the
    /// servers' tools (`with_tools`).
    source: (String, String),
    config: String,
    /// The file, for messages.
    file: String,
    /// `mcpServers` or `servers`: the host's key, used again in the snippets printed.
    key: &'static str,
    /// The generated config's listen address.
    listen: String,
    made: Vec<Made>,
    exports: Vec<Export>,
    notes: Vec<String>,
}

impl Onboarding {
    /// Reads `file` and makes the config, with the `[gateway]` section of `starter`. Nothing is
    /// written: an error leaves no trace.
    pub fn from_file(file: &Path, starter: &str) -> Result<Onboarding> {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        Onboarding::from_text(&text, &one_line(&file.display().to_string()), starter)
    }

    fn from_text(text: &str, file: &str, starter: &str) -> Result<Onboarding> {
        Onboarding::make(text, file, starter, &ListedTools::new())
    }

    /// The same config, each upstream's reads named from the tools it listed (`listed`).
    pub fn with_tools(&self, listed: &ListedTools) -> Result<Onboarding> {
        Onboarding::make(&self.source.0, &self.file, &self.source.1, listed)
    }

    /// The parsed config (to start its upstreams) and the values of the variables it names.
    pub fn for_probe(&self) -> Result<(Config, BTreeMap<String, String>)> {
        let config = Config::parse(&self.config, "postern.toml")?;
        let values = self
            .exports
            .iter()
            .map(|e| (e.var.clone(), e.value.clone()))
            .collect();
        Ok((config, values))
    }

    fn make(text: &str, file: &str, starter: &str, listed: &ListedTools) -> Result<Onboarding> {
        let (key, servers, mut notes) = parse_document(text, file)?;
        let names = upstream_names(&servers, &mut notes);
        let prefixes = prefixes(&names, &mut notes)?;
        let mut vars = Vars::default();
        let mut exports = Vec::new();
        let mut body = String::new();
        let mut made = Vec::new();
        for ((server, name), prefix) in servers.iter().zip(&names).zip(&prefixes) {
            body.push('\n');
            let tools = listed.get(name.as_str());
            body.push_str(&upstream_toml(
                server,
                (name, prefix),
                tools,
                &mut vars,
                &mut exports,
            ));
            made.push(Made {
                name: name.clone(),
                source: server.source.clone(),
                prefix: prefix.clone(),
                transport: match server.transport {
                    Transport::Stdio { .. } => "stdio",
                    Transport::Http { .. } => "http",
                },
                reads: classify::summary(tools),
            });
            if let Transport::Http { url, .. } = &server.transport {
                if url.contains('?') {
                    notes.push(format!("server {:?}: its url's query is written to postern.toml as it is; if it holds a key, move the key into a header", server.source));
                }
                if url.trim_end_matches('/').ends_with("/sse") {
                    notes.push(format!("server {:?}: its url ends in /sse, the path of the SSE transport, which Postern does not speak; if the upstream does not come up, use the server's Streamable HTTP endpoint", server.source));
                }
            }
        }
        let config = format!(
            "{}\n{}{}{body}",
            header(file, servers.len(), &exports),
            gateway_section(starter)?,
            people_toml(&prefixes),
        );
        let parsed = Config::parse(&config, "postern.toml").map_err(|e| {
            anyhow!("the config made from {file} does not parse (a bug of postern init): {e}")
        })?;
        Ok(Onboarding {
            source: (text.to_string(), starter.to_string()),
            config,
            file: file.to_string(),
            key,
            listen: parsed.gateway.listen,
            made,
            exports,
            notes,
        })
    }

    /// The text of `postern.toml`.
    pub fn config(&self) -> &str {
        &self.config
    }
}

/// A TOML basic string.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Text for one line of a comment or a message.
fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

pub mod classify;
mod names;
mod print;
mod sandbox;
mod servers;
mod tables;
#[cfg(test)]
mod tests;
mod variables;
