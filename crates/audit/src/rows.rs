//! Execution rows against their chains. The `executions` table is the gateway's working copy
//! of each execution (state, event count, record, fingerprint); the events are the evidence.
//! A row edited after the fact — a denied call set back to `authorized`, a record changed —
//! is a break naming the execution: its state and dispatch count are replayed from its events,
//! and its record is held to the `record_sha256` its `accepted` event chained.
//!
//! Rows are read before the events, so a store that is written meanwhile is judged fairly: a
//! row says "after my first N events, state S", and events are only ever appended, so the first
//! N events read later must lead to S.

use std::collections::BTreeMap;

use postern_core::lifecycle::{EventKind, Lifecycle};
use postern_core::ExecutionId;
use sha2::{Digest, Sha256};

use crate::chain::ChainedEvent;
use crate::verify::{Break, BreakReason};

/// One execution's row as stored.
pub struct ExecutionRow<'a> {
    pub id: ExecutionId,
    pub state: &'a str,
    pub events: u32,
    pub dispatches: u32,
    pub record: &'a str,
    pub fingerprint: &'a str,
    pub actor: &'a str,
    pub tool: &'a str,
}

/// A row as it claims, kept small (the record as its digest).
struct Claim {
    state: String,
    events: u32,
    dispatches: u32,
    record_sha256: String,
    fingerprint: String,
    actor: String,
    tool: String,
}

/// One execution: what its row claims and what its events are.
#[derive(Default)]
struct Execution {
    claim: Option<Claim>,
    /// Its events by number (an execution taken over by another replica has events on two
    /// chains, which a scan may read in either order).
    events: Vec<(u32, EventKind)>,
    /// The `accepted` event's detail: record digest, fingerprint, actor, tool.
    accepted: Option<serde_json::Value>,
}

/// Holds every stored row to the events chained for its execution.
#[derive(Default)]
pub struct RowCheck {
    executions: BTreeMap<ExecutionId, Execution>,
}

impl RowCheck {
    pub fn new() -> RowCheck {
        RowCheck::default()
    }

    /// One stored row (read before the events).
    pub fn row(&mut self, row: &ExecutionRow<'_>) {
        self.executions.entry(row.id).or_default().claim = Some(Claim {
            state: row.state.to_string(),
            events: row.events,
            dispatches: row.dispatches,
            record_sha256: hex::encode(Sha256::digest(row.record.as_bytes())),
            fingerprint: row.fingerprint.to_string(),
            actor: row.actor.to_string(),
            tool: row.tool.to_string(),
        });
    }

    /// One event of the chain. Only executions with a row are followed.
    pub fn event(&mut self, e: &ChainedEvent) {
        if e.body.event == EventKind::Notice {
            return;
        }
        let Some(ex) = self.executions.get_mut(&e.body.execution_id) else {
            return;
        };
        ex.events.push((e.body.n, e.body.event));
        if e.body.event == EventKind::Accepted {
            ex.accepted = Some(e.body.detail.clone());
        }
    }

    /// The breaks: each row that says other than its events. A row whose events are all gone
    /// (removed by retention, under a signed statement the verifier checks) is left alone.
    pub fn finish(self) -> Vec<Break> {
        let mut breaks = Vec::new();
        for (id, mut ex) in self.executions {
            let Some(claim) = ex.claim.take() else {
                continue;
            };
            if ex.events.is_empty() {
                continue;
            }
            for (field, chained, stored) in compare(&claim, &mut ex) {
                breaks.push(Break {
                    chain: None,
                    seq: None,
                    reason: BreakReason::RowMismatch {
                        execution_id: id,
                        field,
                        chained,
                        stored,
                    },
                });
            }
        }
        breaks
    }
}

/// (field, chained, stored) for every field of `claim` its events contradict.
fn compare(claim: &Claim, ex: &mut Execution) -> Vec<(&'static str, String, String)> {
    ex.events.sort_unstable_by_key(|(n, _)| *n);
    let seen = ex.events.len() as u32;
    // The lifecycle after the row's first N events (a refused step is the verifier's break).
    let lifecycle = ex
        .events
        .iter()
        .take_while(|(n, _)| *n <= claim.events)
        .fold(None, |l, (_, event)| Lifecycle::step(l, *event).ok().or(l));
    let mut found = Vec::new();
    // An event missing between others is the verifier's break ("event #k is missing"); what
    // the row says beyond it follows from that, and is not said twice.
    if ex
        .events
        .iter()
        .enumerate()
        .any(|(i, (n, _))| *n != i as u32 + 1)
    {
        return found;
    }
    if seen < claim.events {
        // The execution's last events are gone (a cut tail — the only sign of one that no
        // signed checkpoint covered): its state follows from that.
        found.push(("event count", seen.to_string(), claim.events.to_string()));
        return found;
    }
    if let Some(l) = lifecycle {
        found.push(("state", l.state.to_string(), claim.state.clone()));
        found.push((
            "dispatch count",
            l.dispatches.to_string(),
            claim.dispatches.to_string(),
        ));
    }
    if let Some(a) = &ex.accepted {
        let field = |name: &str| a.get(name).and_then(|v| v.as_str()).map(str::to_string);
        for (name, stored) in [
            ("record (sha256)", &claim.record_sha256),
            ("fingerprint", &claim.fingerprint),
            ("actor", &claim.actor),
            ("tool", &claim.tool),
        ] {
            let key = if name == "record (sha256)" {
                "record_sha256"
            } else {
                name
            };
            if let Some(chained) = field(key) {
                found.push((name, chained, stored.clone()));
            }
        }
    }
    found.retain(|(_, chained, stored)| chained != stored);
    found
}
