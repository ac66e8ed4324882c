//! Operator decisions against the rows they govern. Accepting a changed upstream tool,
//! authorizing or revoking a run: each is chained as a notice in the transaction that writes
//! its row, and the gateway acts on the row. So a row edited in the store (a changed tool
//! accepted by nobody, a run authorized by someone else) must be a break, as an edited
//! `executions` row is (`rows.rs`).

use std::collections::HashMap;

use serde_json::Value;

use crate::verify::{Break, BreakReason};

/// A decision as chained: who made it and what it set.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Chained {
    value: String,
    by: Option<String>,
    chain: String,
    seq: u64,
}

/// Collects decision notices and rows, then compares them.
#[derive(Default)]
pub struct DecisionCheck {
    /// (upstream, tool) → the last pin notice, by time then place.
    pins: HashMap<(String, String), (i64, Chained)>,
    /// (run, "authorized" | "revoked") → the notice.
    runs: HashMap<(String, &'static str), Chained>,
    /// Run decisions made before this time (ms) were not chained (stores older than the
    /// rule): one with no notice is let be.
    runs_chained_since: i64,
    /// Rows are read before the events: held until [`DecisionCheck::finish`].
    pin_rows: Vec<OwnedPin>,
    run_rows: Vec<OwnedRun>,
    breaks: Vec<Break>,
}

struct OwnedPin {
    upstream: String,
    tool: String,
    digest: String,
    accepted_by: Option<String>,
}

struct OwnedRun {
    id: String,
    authorized_by: Option<String>,
    authorized_at: Option<i64>,
    revoked_by: Option<String>,
    revoked_at: Option<i64>,
}

/// An upstream tool's pin as stored.
pub struct PinRow<'a> {
    pub upstream: &'a str,
    pub tool: &'a str,
    pub digest: &'a str,
    pub accepted_by: Option<&'a str>,
}

/// A run's decisions as stored.
pub struct RunRow<'a> {
    pub id: &'a str,
    pub authorized_by: Option<&'a str>,
    pub authorized_at: Option<i64>,
    pub revoked_by: Option<&'a str>,
    pub revoked_at: Option<i64>,
}

impl DecisionCheck {
    pub fn new() -> DecisionCheck {
        DecisionCheck::default()
    }

    /// Run decisions are chained from this time on (the store's migration to it).
    pub fn runs_chained_since(&mut self, at: i64) {
        self.runs_chained_since = at;
    }

    /// A notice event's detail (only decision notices are kept).
    pub fn notice(&mut self, chain: &str, seq: u64, at: i64, detail: &Value) {
        let text = |k: &str| detail.get(k).and_then(Value::as_str).map(str::to_string);
        let chained = |value: String| Chained {
            value,
            by: text("by"),
            chain: chain.to_string(),
            seq,
        };
        match text("notice").as_deref() {
            Some("upstream_tool_pinned" | "upstream_tool_accepted") => {
                let (Some(upstream), Some(tool), Some(digest)) =
                    (text("upstream"), text("tool"), text("digest"))
                else {
                    return;
                };
                let entry = (at, chained(digest));
                let key = (upstream, tool);
                let later = self
                    .pins
                    .get(&key)
                    .is_none_or(|(t, c)| (at, chain, seq) >= (*t, c.chain.as_str(), c.seq));
                if later {
                    self.pins.insert(key, entry);
                }
            }
            Some(kind @ ("run_authorized" | "run_revoked")) => {
                let Some(run) = text("run") else { return };
                let what = if kind == "run_authorized" {
                    "authorized"
                } else {
                    "revoked"
                };
                self.runs.insert((run, what), chained(String::new()));
            }
            _ => {}
        }
    }

    /// A pin row: its digest and acceptor must be the last pin notice's.
    pub fn pin(&mut self, row: &PinRow<'_>) {
        self.pin_rows.push(OwnedPin {
            upstream: row.upstream.to_string(),
            tool: row.tool.to_string(),
            digest: row.digest.to_string(),
            accepted_by: row.accepted_by.map(str::to_string),
        });
    }

    /// A run row: who authorized or revoked it must be who the notices say.
    pub fn run(&mut self, row: &RunRow<'_>) {
        self.run_rows.push(OwnedRun {
            id: row.id.to_string(),
            authorized_by: row.authorized_by.map(str::to_string),
            authorized_at: row.authorized_at,
            revoked_by: row.revoked_by.map(str::to_string),
            revoked_at: row.revoked_at,
        });
    }

    fn check_pin(&mut self, row: &PinRow<'_>) {
        let key = (row.upstream.to_string(), row.tool.to_string());
        let place = format!("upstream_tool_pins {}/{}", row.upstream, row.tool);
        match self.pins.get(&key).cloned() {
            None => self.mismatch(&place, "pin", "(no notice)", row.digest, None),
            Some((_, c)) => {
                if c.value != row.digest {
                    let at = Some((c.chain.clone(), c.seq));
                    self.mismatch(&place, "digest", &c.value, row.digest, at);
                }
                if c.by.as_deref() != row.accepted_by {
                    let (chained, at) = (shown(c.by.as_deref()), Some((c.chain.clone(), c.seq)));
                    self.mismatch(&place, "accepted_by", &chained, &shown(row.accepted_by), at);
                }
            }
        }
    }

    fn check_run(&mut self, row: &RunRow<'_>) {
        for (what, stored, at) in [
            ("authorized", row.authorized_by, row.authorized_at),
            ("revoked", row.revoked_by, row.revoked_at),
        ] {
            let chained = self.runs.get(&(row.id.to_string(), what)).cloned();
            let chained_by = chained.as_ref().and_then(|c| c.by.as_deref());
            let before_rule = chained.is_none() && at.is_some_and(|t| t < self.runs_chained_since);
            if stored.is_some() && chained_by != stored && !before_rule {
                let place = format!("runs {}", row.id);
                let at = chained.as_ref().map(|c| (c.chain.clone(), c.seq));
                let field = if what == "authorized" {
                    "authorized_by"
                } else {
                    "revoked_by"
                };
                self.mismatch(&place, field, &shown(chained_by), &shown(stored), at);
            }
        }
    }

    fn mismatch(
        &mut self,
        place: &str,
        field: &'static str,
        chained: &str,
        stored: &str,
        at: Option<(String, u64)>,
    ) {
        let (chain, seq) = at.map_or((None, None), |(c, s)| (Some(c), Some(s)));
        self.breaks.push(Break {
            chain,
            seq,
            reason: BreakReason::DecisionMismatch {
                row: place.to_string(),
                field,
                chained: chained.to_string(),
                stored: stored.to_string(),
            },
        });
    }

    pub fn finish(mut self) -> Vec<Break> {
        for p in std::mem::take(&mut self.pin_rows) {
            self.check_pin(&PinRow {
                upstream: &p.upstream,
                tool: &p.tool,
                digest: &p.digest,
                accepted_by: p.accepted_by.as_deref(),
            });
        }
        for r in std::mem::take(&mut self.run_rows) {
            self.check_run(&RunRow {
                id: &r.id,
                authorized_by: r.authorized_by.as_deref(),
                authorized_at: r.authorized_at,
                revoked_by: r.revoked_by.as_deref(),
                revoked_at: r.revoked_at,
            });
        }
        self.breaks
    }
}

fn shown(v: Option<&str>) -> String {
    v.map_or("(none)".into(), str::to_string)
}
