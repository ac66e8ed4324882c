//! Execution rows against their chains. The `executions` table is the gateway's working copy
//! of each execution (state, event count, record, fingerprint); the events are the evidence.
//! A row edited after the fact — a denied call set back to `authorized`, a record changed —
//! is a break naming the execution: its state and dispatch count are replayed from its events,
//! and its record is held to the `record_sha256` its `accepted` event chained.
//!
//! Rows are read before the events, so a store that is written meanwhile is judged fairly: a
//! row says "after my first N events, state S", and events are only ever appended, so the first
//! N events read later must lead to S.

use std::ops::Range;

use postern_core::digest::sha256;
use postern_core::lifecycle::{EventKind, Lifecycle};
use postern_core::ExecutionId;

use crate::chain::ChainedEvent;
use crate::decisions::{DecisionCheck, PinRow, RunRow};
use crate::fold::FoldMap;
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

/// A row as it claims, kept small: its texts in the check's one buffer, the record as its
/// digest (a million rows were a few million allocations).
struct Claim {
    state: Range<u32>,
    fingerprint: Range<u32>,
    actor: Range<u32>,
    tool: Range<u32>,
    events: u32,
    dispatches: u32,
    record_sha256: [u8; 32],
}

/// What an `accepted` event said that its row does not: (field, chained, stored).
type Contradictions = Vec<(&'static str, String, String)>;

/// One execution: what its row claims and what its events are.
#[derive(Default)]
struct Execution {
    claim: Option<Claim>,
    /// Its events by number (an execution taken over by another replica has events on two
    /// chains, which a scan may read in either order).
    events: Vec<(u32, EventKind)>,
    /// The last `accepted` event's members that contradict the row (compared as the event
    /// is read: the row was read before it).
    accepted: Option<Contradictions>,
}

/// The members of an `accepted` event's detail held to its row, in [`ACCEPTED_FIELDS`] order.
pub(crate) type AcceptedFields<'a> = [Option<&'a str>; 4];

/// (report name, detail member) of what an `accepted` event vouches for.
const ACCEPTED_FIELDS: [(&str, &str); 4] = [
    ("record (sha256)", "record_sha256"),
    ("fingerprint", "fingerprint"),
    ("actor", "actor"),
    ("tool", "tool"),
];

/// Holds every stored row to the events chained for its execution.
#[derive(Default)]
pub struct RowCheck {
    executions: FoldMap<ExecutionId, Execution>,
    /// Every claim's texts.
    text: String,
    /// The rows operator decisions govern (pins, runs), held to their notices.
    decisions: DecisionCheck,
    /// Intent slots: the execution each names (as stored), its actor and fingerprint, in
    /// `text`.
    intents: Vec<(Range<u32>, Range<u32>, Range<u32>)>,
}

impl RowCheck {
    pub fn new() -> RowCheck {
        RowCheck::default()
    }

    /// A notice's detail as stored (canonical JSON text): decisions are kept.
    pub fn notice_text(&mut self, chain: &str, seq: u64, at: i64, detail: &str) {
        if let Ok(detail) = serde_json::from_str::<serde_json::Value>(detail) {
            self.decisions.notice(chain, seq, at, &detail);
        }
    }

    /// An upstream tool's pin row (held to the last pin notice).
    pub fn pin(&mut self, row: &PinRow<'_>) {
        self.decisions.pin(row);
    }

    /// An intent slot: which execution an identical retry meets. It must name an execution
    /// of its own actor and fingerprint (whose row is held to its events).
    pub fn intent(&mut self, execution_id: &str, actor: &str, fingerprint: &str) {
        let mut keep = |s: &str| {
            let start = self.text.len() as u32;
            self.text.push_str(s);
            start..self.text.len() as u32
        };
        let slot = (keep(execution_id), keep(actor), keep(fingerprint));
        self.intents.push(slot);
    }

    /// The intent slots that name no execution of their actor and fingerprint.
    fn check_intents(&self) -> Vec<Break> {
        let text = |r: &Range<u32>| &self.text[r.start as usize..r.end as usize];
        let mut breaks = Vec::new();
        for (id, actor, fingerprint) in &self.intents {
            let (id, actor, fingerprint) = (text(id), text(actor), text(fingerprint));
            let claim = id
                .parse::<ExecutionId>()
                .ok()
                .and_then(|i| self.executions.get(&i))
                .and_then(|e| e.claim.as_ref());
            let wrong = match claim {
                None => Some(("execution_id", "(no such execution)".to_string(), id)),
                Some(c) if text(&c.actor) != actor => {
                    Some(("actor", text(&c.actor).to_string(), actor))
                }
                Some(c) if text(&c.fingerprint) != fingerprint => {
                    Some(("fingerprint", text(&c.fingerprint).to_string(), fingerprint))
                }
                Some(_) => None,
            };
            if let Some((field, chained, stored)) = wrong {
                breaks.push(Break {
                    chain: None,
                    seq: None,
                    reason: BreakReason::DecisionMismatch {
                        row: format!("intents slot naming {id}"),
                        field,
                        chained,
                        stored: stored.to_string(),
                    },
                });
            }
        }
        breaks
    }

    /// Run decisions are chained from this time on (ms).
    pub fn runs_chained_since(&mut self, at: i64) {
        self.decisions.runs_chained_since(at);
    }

    /// A run's row (its authorization and revocation held to their notices).
    pub fn run(&mut self, row: &RunRow<'_>) {
        self.decisions.run(row);
    }

    /// One stored row (read before the events).
    pub fn row(&mut self, row: &ExecutionRow<'_>) {
        self.row_digested(row, sha256(row.record.as_bytes()));
    }

    /// One stored row whose record's SHA-256 the caller took (e.g. on its reading thread).
    pub fn row_digested(&mut self, row: &ExecutionRow<'_>, record_sha256: [u8; 32]) {
        let mut keep = |s: &str| {
            let start = self.text.len() as u32;
            self.text.push_str(s);
            start..self.text.len() as u32
        };
        let claim = Claim {
            state: keep(row.state),
            fingerprint: keep(row.fingerprint),
            actor: keep(row.actor),
            tool: keep(row.tool),
            events: row.events,
            dispatches: row.dispatches,
            record_sha256,
        };
        self.executions.entry(row.id).or_default().claim = Some(claim);
    }

    /// One event of the chain. Only executions with a row are followed.
    pub fn event(&mut self, e: &ChainedEvent) {
        let d = &e.body.detail;
        if e.body.event == EventKind::Notice {
            self.decisions
                .notice(&e.body.chain, e.body.seq, e.body.at.0, d);
        }
        let fields = ACCEPTED_FIELDS.map(|(_, key)| d.get(key).and_then(|v| v.as_str()));
        self.event_parts(e.body.execution_id, e.body.n, e.body.event, &fields);
    }

    /// [`RowCheck::event`] from an event's parts; `accepted` is read only of an `accepted`
    /// event.
    pub(crate) fn event_parts(
        &mut self,
        id: ExecutionId,
        n: u32,
        event: EventKind,
        accepted: &AcceptedFields<'_>,
    ) {
        if event == EventKind::Notice {
            return;
        }
        let Some(ex) = self.executions.get_mut(&id) else {
            return;
        };
        ex.events.push((n, event));
        if event != EventKind::Accepted {
            return;
        }
        // Only `row` adds an execution, so its claim is here.
        let Some(claim) = &ex.claim else {
            return;
        };
        let text = |r: &Range<u32>| &self.text[r.start as usize..r.end as usize];
        let mut found = Vec::new();
        for ((name, _), chained) in ACCEPTED_FIELDS.iter().zip(accepted) {
            let Some(chained) = chained else { continue };
            let stored = match *name {
                "record (sha256)" if is_lower_hex_of(chained, &claim.record_sha256) => continue,
                "record (sha256)" => postern_core::hexdigits::encode(claim.record_sha256),
                "fingerprint" => text(&claim.fingerprint).to_string(),
                "actor" => text(&claim.actor).to_string(),
                _ => text(&claim.tool).to_string(),
            };
            if *chained != stored {
                found.push((*name, chained.to_string(), stored));
            }
        }
        ex.accepted = Some(found);
    }

    /// The breaks: each row that says other than its events. A row whose events are all gone
    /// (removed by retention, under a signed statement the verifier checks) is left alone.
    pub fn finish(mut self) -> Vec<Break> {
        let mut breaks = self.check_intents();
        breaks.extend(std::mem::take(&mut self.decisions).finish());
        let mut executions: Vec<_> = self.executions.into_iter().collect();
        // In id order, as the report always gave them.
        executions.sort_unstable_by_key(|(id, _)| *id);
        for (id, mut ex) in executions {
            let Some(claim) = ex.claim.take() else {
                continue;
            };
            if ex.events.is_empty() {
                continue;
            }
            let state = &self.text[claim.state.start as usize..claim.state.end as usize];
            for (field, chained, stored) in compare(&claim, state, &mut ex) {
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

/// Whether `text` is `digest` in lower-case hex (the form a row's record digest is chained in).
fn is_lower_hex_of(text: &str, digest: &[u8; 32]) -> bool {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let t = text.as_bytes();
    t.len() == 64
        && digest.iter().enumerate().all(|(i, b)| {
            t[2 * i] == DIGITS[usize::from(b >> 4)] && t[2 * i + 1] == DIGITS[usize::from(b & 15)]
        })
}

/// (field, chained, stored) for every field of `claim` (whose state is `state`) its events
/// contradict.
fn compare(claim: &Claim, state: &str, ex: &mut Execution) -> Vec<(&'static str, String, String)> {
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
    // Texts only for what differs (this runs for every execution).
    if let Some(l) = lifecycle {
        if l.state.name() != state {
            found.push(("state", l.state.to_string(), state.to_string()));
        }
        if l.dispatches != claim.dispatches {
            found.push((
                "dispatch count",
                l.dispatches.to_string(),
                claim.dispatches.to_string(),
            ));
        }
    }
    found.extend(ex.accepted.take().unwrap_or_default());
    found
}

/// A record's digest as an `accepted` event chains it (for tests elsewhere in the crate).
#[cfg(test)]
pub(crate) fn tests_digest_hex(record: &str) -> String {
    postern_core::hexdigits::encode(sha256(record.as_bytes()))
}
