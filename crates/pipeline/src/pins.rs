//! Tool pinning: a defence against an upstream that silently changes a tool it already lists
//! (a "rug pull"). The first version the gateway sees of each re-exported upstream tool — a
//! SHA-256 digest of its canonical name, description and input schema — is recorded in the
//! ledger; when the upstream later lists a different one, the tool is withheld from
//! `tools/list` and its calls are refused (nothing recorded, nothing sent) until an operator
//! accepts the new version (`postern upstream accept`). Pinning, every change seen and every
//! acceptance are `notice` events in the audit chain.

use std::collections::HashMap;
use std::sync::Mutex;

use postern_channels::mcp::UpstreamTool;
use postern_core::canon;
use postern_ledger::{Ledger, LedgerError, ToolPin};
use serde_json::{json, Value};

use crate::clock::now;

/// A tool's definition as pinned: what its digest covers.
pub fn definition(tool: &UpstreamTool) -> Value {
    json!({
        "name": tool.name,
        "description": tool.description,
        "inputSchema": tool.input_schema,
    })
}

/// The hex SHA-256 of the definition's canonical (RFC 8785) bytes.
pub fn digest(tool: &UpstreamTool) -> String {
    let definition = definition(tool);
    // A schema with numbers JCS cannot write still gets a digest that changes with it.
    let bytes = canon::canonical_bytes(&definition)
        .or_else(|_| serde_json::to_vec(&definition))
        .unwrap_or_default();
    hex_digest(&bytes)
}

fn hex_digest(bytes: &[u8]) -> String {
    postern_core::hexdigits::encode(postern_core::digest::sha256(bytes))
}

/// What the gateway knows of each re-exported upstream tool's pin.
#[derive(Default)]
pub struct Pins {
    /// `None` until the ledger's pins are loaded: until then every upstream tool is withheld.
    accepted: Mutex<Option<HashMap<(String, String), ToolPin>>>,
    /// Changes already recorded as notices, so a change is chained once, not once per listing.
    reported: Mutex<std::collections::HashSet<(String, String, String)>>,
}

/// Why a listed upstream tool is not served now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Withheld {
    /// The gateway has not compared it with its pin yet (just started).
    NotChecked,
    /// The upstream lists another version than the accepted one.
    Changed { accepted: String, listed: String },
}

impl std::fmt::Display for Withheld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Withheld::NotChecked => f.write_str("its definition is not checked against its pin yet"),
            Withheld::Changed { accepted, listed } => write!(
                f,
                "the upstream changed its definition (accepted sha256:{}, listed sha256:{}); it is withheld until an operator accepts the new version: postern upstream accept",
                &accepted[..12.min(accepted.len())],
                &listed[..12.min(listed.len())]
            ),
        }
    }
}

impl Pins {
    /// Loads the accepted versions from the ledger.
    pub async fn load(&self, ledger: &Ledger) -> Result<(), LedgerError> {
        let pins = ledger.read().tool_pins().await?;
        let map = pins
            .into_iter()
            .map(|p| ((p.upstream.clone(), p.tool.clone()), p))
            .collect();
        if let Ok(mut accepted) = self.accepted.lock() {
            *accepted = Some(map);
        }
        Ok(())
    }

    /// Whether `tool` as the upstream lists it now may be served; `Err(why)` if withheld.
    pub fn check(&self, upstream: &str, tool: &UpstreamTool) -> Result<(), Withheld> {
        self.check_digest(upstream, &tool.name, &digest(tool))
    }

    /// [`Pins::check`] for a listed version whose digest is known (`listed`).
    pub fn check_digest(&self, upstream: &str, tool: &str, listed: &str) -> Result<(), Withheld> {
        let accepted = self.accepted.lock().map_err(|_| Withheld::NotChecked)?;
        let Some(map) = accepted.as_ref() else {
            return Err(Withheld::NotChecked);
        };
        match map.get(&(upstream.to_string(), tool.to_string())) {
            None => Err(Withheld::NotChecked),
            Some(pin) if pin.digest == listed => Ok(()),
            Some(pin) => Err(Withheld::Changed {
                accepted: pin.digest.clone(),
                listed: listed.to_string(),
            }),
        }
    }

    /// The accepted version of a tool, if any.
    pub fn accepted(&self, upstream: &str, tool: &str) -> Option<ToolPin> {
        let accepted = self.accepted.lock().ok()?;
        accepted
            .as_ref()?
            .get(&(upstream.to_string(), tool.to_string()))
            .cloned()
    }

    /// Compares what the upstream lists now with the pins: a tool seen for the first time is
    /// pinned; a changed one is chained as a notice (once per version seen).
    pub async fn observe(
        &self,
        ledger: &Ledger,
        upstream: &str,
        listed: &[UpstreamTool],
        exposed: &[String],
    ) -> Result<(), LedgerError> {
        for tool in listed.iter().filter(|t| exposed.contains(&t.name)) {
            let current = digest(tool);
            match self.accepted(upstream, &tool.name) {
                None => {
                    let pin = pin_of(upstream, tool, &current, None);
                    let detail = json!({"notice": "upstream_tool_pinned", "upstream": upstream, "tool": tool.name, "digest": current});
                    ledger.notice(Some(pin.clone()), detail, now()).await?;
                    self.set(pin);
                }
                Some(pin) if pin.digest != current => {
                    let key = (upstream.to_string(), tool.name.clone(), current.clone());
                    let first = self.reported.lock().is_ok_and(|mut r| r.insert(key));
                    if first {
                        let detail = json!({"notice": "upstream_tool_changed", "upstream": upstream, "tool": tool.name, "accepted_digest": pin.digest, "listed_digest": current, "withheld": true});
                        ledger.notice(None, detail, now()).await?;
                        tracing::warn!(upstream, tool = %tool.name, "an upstream tool changed its definition; withheld until accepted (postern upstream accept {upstream} {})", tool.name);
                    }
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// Records an operator's acceptance of the version listed now (whose digest must be
    /// `expected`, when given).
    pub async fn accept(
        &self,
        ledger: &Ledger,
        upstream: &str,
        tool: &UpstreamTool,
        expected: Option<&str>,
        by: &str,
    ) -> Result<ToolPin, AcceptError> {
        let current = digest(tool);
        if let Some(want) = expected {
            if want != current {
                return Err(AcceptError::Stale {
                    expected: want.to_string(),
                    listed: current,
                });
            }
        }
        let previous = self.accepted(upstream, &tool.name).map(|p| p.digest);
        let pin = pin_of(upstream, tool, &current, Some(by));
        let detail = json!({"notice": "upstream_tool_accepted", "upstream": upstream, "tool": tool.name, "digest": current, "previous_digest": previous, "by": by});
        ledger
            .notice(Some(pin.clone()), detail, now())
            .await
            .map_err(AcceptError::Ledger)?;
        self.set(pin.clone());
        Ok(pin)
    }

    fn set(&self, pin: ToolPin) {
        if let Ok(mut accepted) = self.accepted.lock() {
            accepted
                .get_or_insert_with(HashMap::new)
                .insert((pin.upstream.clone(), pin.tool.clone()), pin);
        }
    }
}

fn pin_of(upstream: &str, tool: &UpstreamTool, digest: &str, by: Option<&str>) -> ToolPin {
    ToolPin {
        upstream: upstream.to_string(),
        tool: tool.name.clone(),
        digest: digest.to_string(),
        definition: serde_json::to_string_pretty(&definition(tool)).unwrap_or_default(),
        pinned_at: now(),
        accepted_by: by.map(str::to_string),
    }
}

/// Why an acceptance was not recorded.
#[derive(Debug, thiserror::Error)]
pub enum AcceptError {
    #[error("the upstream lists version sha256:{listed} now, not the {expected} that was shown; look again (postern upstream show) before accepting")]
    Stale { expected: String, listed: String },
    #[error(transparent)]
    Ledger(LedgerError),
}
