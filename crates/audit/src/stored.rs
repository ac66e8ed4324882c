//! A store's event rows, verified a chunk at a time. The reading side fills an [`EventChunk`]
//! from each row's columns as stored (no JSON tree built: a detail already in canonical form is
//! hashed as it is), either side may [`EventChunk::hash`] it (the costly part, so two threads
//! can share it), and [`EventChunk::apply`] runs the checks that need store order.

use std::ops::Range;
use std::sync::Arc;

use postern_core::{EventKind, ExecutionId, Timestamp};

use crate::canonical::{canonical_picks, Picked};
use crate::chain::{event_hash, raw_event_hash, ChainedEvent};
use crate::results::ResultCheck;
use crate::rows::RowCheck;
use crate::verify::{EventMeta, Verifier};

/// One event row's columns, borrowed from the store's row.
#[derive(Clone, Copy, Debug)]
pub struct EventColumns<'a> {
    pub chain: &'a str,
    pub seq: i64,
    pub execution_id: &'a str,
    pub n: i64,
    pub event: &'a str,
    pub at: i64,
    pub detail: &'a str,
    pub prev_hash: &'a str,
    pub hash: &'a str,
}

/// An event decoded from its columns, its detail left as the canonical text it is stored as.
struct RawEvent {
    chain: Arc<str>,
    seq: u64,
    execution_id: ExecutionId,
    n: u32,
    event: EventKind,
    at: Timestamp,
    /// The detail's place in the chunk's text; `picked` ranges are in the same text.
    detail: Range<u32>,
    picked: Picked,
    prev_hash: [u8; 32],
    hash: [u8; 32],
}

enum Row {
    Raw(RawEvent),
    /// A row the caller decoded in full (its detail is not a form the raw path vouches for).
    Decoded(Box<ChainedEvent>),
    /// A row that is no event at all: its position and why.
    Unreadable(i64, String),
}

/// Rows in store order, with whether each event's own hash holds once [`EventChunk::hash`] ran.
#[derive(Default)]
pub struct EventChunk {
    rows: Vec<Row>,
    text: String,
    intact: Option<Vec<bool>>,
    /// The last chain read, shared by the rows after it on the same chain.
    chain: Option<Arc<str>>,
}

impl EventChunk {
    pub fn with_capacity(rows: usize) -> EventChunk {
        EventChunk {
            rows: Vec::with_capacity(rows),
            text: String::with_capacity(rows * 256),
            ..EventChunk::default()
        }
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Takes a row as stored. `false` when it does not decode as an event or its detail is not
    /// in a form hashed as stored: the caller then decodes it in full ([`Self::push_decoded`]
    /// or [`Self::push_unreadable`]), with the reasons it always gave.
    pub fn push_columns(&mut self, c: &EventColumns<'_>) -> bool {
        if self.chain.as_deref() != Some(c.chain) {
            // One allocation per change of chain, shared by the rows after it.
            self.chain = Some(Arc::from(c.chain));
        }
        let Some(chain) = self.chain.clone() else {
            return false;
        };
        let decoded = (|| {
            Some(RawEvent {
                chain,
                seq: u64::try_from(c.seq).ok()?,
                execution_id: c.execution_id.parse().ok()?,
                n: u32::try_from(c.n).ok()?,
                event: c.event.parse().ok()?,
                at: Timestamp(c.at),
                detail: 0..0,
                picked: canonical_picks(c.detail)?,
                prev_hash: postern_core::hexdigits::decode32(c.prev_hash)?,
                hash: postern_core::hexdigits::decode32(c.hash)?,
            })
        })();
        let Some(mut e) = decoded else {
            return false;
        };
        let Ok(start) = u32::try_from(self.text.len()) else {
            return false;
        };
        self.text.push_str(c.detail);
        e.detail = start..start + c.detail.len() as u32;
        for r in e.picked.iter_mut().flatten() {
            *r = r.start + start..r.end + start;
        }
        self.rows.push(Row::Raw(e));
        self.intact = None;
        true
    }

    pub fn push_decoded(&mut self, e: ChainedEvent) {
        self.rows.push(Row::Decoded(Box::new(e)));
        self.intact = None;
    }

    pub fn push_unreadable(&mut self, pos: i64, reason: String) {
        self.rows.push(Row::Unreadable(pos, reason));
    }

    /// Whether the hashes are checked already.
    pub fn is_hashed(&self) -> bool {
        self.intact.is_some()
    }

    /// Checks each event's own hash (`SHA-256(prev_hash ‖ JCS(body))`).
    pub fn hash(&mut self) {
        let mut body = Vec::with_capacity(512);
        let intact = self
            .rows
            .iter()
            .map(|row| match row {
                Row::Raw(e) => raw_event_hash(
                    &mut body,
                    &e.prev_hash,
                    e.at,
                    &e.chain,
                    &self.text.as_bytes()[e.detail.start as usize..e.detail.end as usize],
                    e.event,
                    e.execution_id,
                    e.n,
                    e.seq,
                )
                .is_ok_and(|h| h == e.hash),
                Row::Decoded(e) => event_hash(&e.prev_hash, &e.body).is_ok_and(|h| h == e.hash),
                Row::Unreadable(..) => false,
            })
            .collect();
        self.intact = Some(intact);
    }

    /// Empties the chunk, keeping its buffers for the next rows.
    pub fn clear(&mut self) {
        self.rows.clear();
        self.text.clear();
        self.intact = None;
    }

    /// Runs the in-order checks (hashing first if no one has), then empties the chunk; how
    /// many events it held.
    pub fn apply(
        &mut self,
        verifier: &mut Verifier,
        results: &mut ResultCheck,
        rows: &mut RowCheck,
    ) -> u64 {
        if self.intact.is_none() {
            self.hash();
        }
        let intact = self.intact.take().unwrap_or_default();
        let text = self.text.as_str();
        let pick =
            |r: &Option<Range<u32>>| r.clone().map(|r| &text[r.start as usize..r.end as usize]);
        let mut events = 0;
        for (row, intact) in self.rows.iter().zip(intact) {
            match row {
                Row::Raw(e) => {
                    let meta = EventMeta {
                        chain: &e.chain,
                        seq: e.seq,
                        execution_id: e.execution_id,
                        n: e.n,
                        event: e.event,
                        at: e.at,
                        prev_hash: e.prev_hash,
                        hash: e.hash,
                    };
                    verifier.event_checked(&meta, intact);
                    let [result_ref, result_digest, record, fingerprint, actor, tool] = &e.picked;
                    if let (Some(r), Some(d)) = (pick(result_ref), pick(result_digest)) {
                        results.claim(r, d, &e.chain, e.seq);
                    }
                    let accepted = [record, fingerprint, actor, tool].map(pick);
                    rows.event_parts(e.execution_id, e.n, e.event, &accepted);
                    if e.event == EventKind::Notice {
                        let detail = &text[e.detail.start as usize..e.detail.end as usize];
                        rows.notice_text(&e.chain, e.seq, e.at.0, detail);
                    }
                    events += 1;
                }
                Row::Decoded(e) => {
                    verifier.event_checked(&EventMeta::of(e), intact);
                    results.event(e);
                    rows.event(e);
                    events += 1;
                }
                Row::Unreadable(pos, reason) => verifier.malformed(*pos as u64, reason.clone()),
            }
        }
        self.clear();
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::{EventBody, SigningKey, GENESIS_HASH};
    use crate::rows::ExecutionRow;
    use postern_core::lifecycle::Verdict;
    use serde_json::json;

    /// A log of two executions (one with a stored result), as a store keeps it: each detail in
    /// the canonical text its hash covered.
    fn stored_log() -> Vec<(ChainedEvent, String)> {
        let mut prev = GENESIS_HASH;
        let mut seq = 0;
        let mut log = Vec::new();
        for exec in 1..=2u8 {
            let id = ExecutionId::from_bytes([exec; 16]);
            let events = [
                (
                    EventKind::Accepted,
                    json!({"actor": "a", "tool": "t", "fingerprint": "f",
                    "record_sha256": crate::rows::tests_digest_hex("r"), "run_id": null}),
                ),
                (EventKind::Authorized, json!({})),
                (
                    EventKind::Dispatched,
                    json!({"idempotency_key": id.to_string()}),
                ),
                (
                    EventKind::Completed(Verdict::Applied),
                    json!({"result_ref": format!("results/{id}/4"),
                    "result_digest": "sha256:00", "result_size": 30}),
                ),
            ];
            for (n, (event, detail)) in events.into_iter().enumerate() {
                seq += 1;
                let body = EventBody {
                    chain: "main".into(),
                    seq,
                    execution_id: id,
                    n: n as u32 + 1,
                    event,
                    at: Timestamp(1_800_000_000_000 + seq as i64),
                    detail,
                };
                let (e, text) = ChainedEvent::link_keeping_detail(body, prev).unwrap();
                prev = e.hash;
                log.push((e, text));
            }
        }
        log
    }

    fn report(log: &[(ChainedEvent, String)], chunked: bool) -> String {
        let key = SigningKey::from_bytes([5; 32]);
        let (mut v, mut results, mut rows) = (
            Verifier::new(key.verifying_key()),
            ResultCheck::new(),
            RowCheck::new(),
        );
        for exec in 1..=2u8 {
            rows.row(&ExecutionRow {
                id: ExecutionId::from_bytes([exec; 16]),
                state: "completed(applied)",
                events: 4,
                dispatches: if exec == 1 { 1 } else { 2 },
                record: "r",
                fingerprint: "f",
                actor: if exec == 1 { "a" } else { "b" },
                tool: "t",
            });
        }
        let mut chunk = EventChunk::with_capacity(4);
        for (e, text) in log {
            if !chunked {
                v.event(e);
                results.event(e);
                rows.event(e);
                continue;
            }
            let (prev, hash) = (hex::encode(e.prev_hash), hex::encode(e.hash));
            let id = e.body.execution_id.to_string();
            let c = EventColumns {
                chain: &e.body.chain,
                seq: e.body.seq as i64,
                execution_id: &id,
                n: i64::from(e.body.n),
                event: e.body.event.name(),
                at: e.body.at.0,
                detail: text,
                prev_hash: &prev,
                hash: &hash,
            };
            if !chunk.push_columns(&c) {
                chunk.push_decoded(e.clone());
            }
        }
        chunk.apply(&mut v, &mut results, &mut rows);
        assert!(chunk.is_empty());
        results.stored(
            &format!("results/{}/4", ExecutionId::from_bytes([1; 16])),
            b"x",
        );
        let mut r = v.finish();
        r.add_breaks(results.finish());
        r.add_breaks(rows.finish());
        r.to_string()
    }

    /// Read a chunk at a time, a store gives the report event-by-event reading gives: intact,
    /// with a detail edited (canonical or not), and with rows and results that disagree.
    #[test]
    fn chunks_report_what_events_one_by_one_report() {
        let log = stored_log();
        assert_eq!(report(&log, true), report(&log, false));
        assert!(
            report(&log, true).contains("result mismatch"),
            "{}",
            report(&log, true)
        );
        assert!(report(&log, true).contains("dispatch count"));
        for (i, edited) in [
            (1, "{\"a\":1}"),
            (2, "{ }"),
            (5, "{\"actor\":\"z\",\"tool\":\"t\"}"),
        ] {
            let mut log = stored_log();
            log[i].1 = edited.to_string();
            log[i].0.body.detail = serde_json::from_str(edited).unwrap();
            let (a, b) = (report(&log, true), report(&log, false));
            assert_eq!(a, b);
            assert!(a.contains("hash mismatch"), "{a}");
        }
    }
}
