//! The audit crate's one integration-test binary: the chain format and the verifier on
//! in-memory logs (the CLI tests tamper with real files and databases).

// A scenario test reads top to bottom; the bound on function length is for library code.
#![allow(clippy::too_many_lines)]

use postern_audit::{
    event_hash, BreakReason, ChainedEvent, EventBody, SigningKey, Verifier, GENESIS_HASH,
};
use postern_core::lifecycle::Verdict;
use postern_core::{EventKind, ExecutionId, Timestamp};
use proptest::prelude::*;
use serde_json::{json, Value};

mod fuzz;

fn body(seq: u64, exec: u8, n: u32, event: EventKind, detail: Value) -> EventBody {
    EventBody {
        chain: "main".into(),
        seq,
        execution_id: ExecutionId::from_bytes([exec; 16]),
        n,
        event,
        at: Timestamp(1_800_000_000_000 + seq as i64),
        detail,
    }
}

fn chain_of(bodies: Vec<EventBody>) -> Vec<ChainedEvent> {
    let mut prev = GENESIS_HASH;
    bodies
        .into_iter()
        .map(|b| {
            let e = ChainedEvent::link(b, prev).unwrap();
            prev = e.hash;
            e
        })
        .collect()
}

fn lifecycle_log() -> Vec<ChainedEvent> {
    let mut bodies = Vec::new();
    let mut seq = 0;
    for exec in 1..=3u8 {
        for (n, ev) in [
            EventKind::Accepted,
            EventKind::Authorized,
            EventKind::Dispatched,
            EventKind::Completed(Verdict::Applied),
            EventKind::Delivered,
        ]
        .into_iter()
        .enumerate()
        {
            seq += 1;
            bodies.push(body(seq, exec, n as u32 + 1, ev, json!({"k": seq})));
        }
    }
    chain_of(bodies)
}

fn key() -> SigningKey {
    SigningKey::from_bytes([3; 32])
}

fn verify(events: &[ChainedEvent], checkpoint_at: Option<usize>) -> postern_audit::Report {
    let k = key();
    let mut v = Verifier::new(k.verifying_key());
    for e in events {
        v.event(e);
    }
    if let Some(i) = checkpoint_at {
        let e = &lifecycle_log()[i];
        v.checkpoint(
            &k.checkpoint("main", (e.body.seq, e.hash), Timestamp(1), None)
                .unwrap(),
        );
    }
    v.finish()
}

#[test]
fn an_intact_log_is_valid() {
    let report = verify(&lifecycle_log(), Some(14));
    assert!(report.is_valid(), "{report}");
    assert_eq!(
        (report.events, report.executions, report.valid_signatures),
        (15, 3, 1)
    );
}

#[test]
fn an_impossible_state_sequence_is_reported_with_its_execution() {
    let mut bodies: Vec<EventBody> = lifecycle_log().into_iter().map(|e| e.body).collect();
    bodies[2].event = EventKind::Completed(Verdict::Applied); // completed without dispatch
    let report = verify(&chain_of(bodies), None);
    assert!(report.breaks.iter().any(|b| matches!(&b.reason, BreakReason::ImpossibleTransition { execution_id, .. } if *execution_id == ExecutionId::from_bytes([1; 16]))), "{report}");
    assert!(
        report
            .to_string()
            .contains("impossible state sequence for execution exe_"),
        "{report}"
    );
}

/// Versions before issue 21 could record `failed` ("nothing sent") after a re-dispatch of an
/// execution whose first dispatch may have been applied: the verifier flags such a sequence.
#[test]
fn failed_after_an_earlier_dispatch_is_reported_as_impossible() {
    use EventKind::*;
    let events = [
        Accepted,
        Authorized,
        Dispatched,
        OutcomeUnknown,
        Dispatched,
        Failed,
    ];
    let bodies = events
        .into_iter()
        .enumerate()
        .map(|(i, ev)| body(i as u64 + 1, 7, i as u32 + 1, ev, json!({})))
        .collect();
    let report = verify(&chain_of(bodies), None);
    assert_eq!(report.breaks.len(), 1, "{report}");
    assert!(
        matches!(
            &report.breaks[0].reason,
            BreakReason::ImpossibleTransition {
                event: Failed,
                after_earlier_dispatch: true,
                ..
            }
        ),
        "{report}"
    );
    assert_eq!(report.breaks[0].seq, Some(6));
    let text = report.to_string();
    assert!(text.contains("after an earlier dispatch"), "{text}");
    // The same `failed` after a first and only dispatch is a valid lifecycle.
    let bodies = [Accepted, Authorized, Dispatched, Failed]
        .into_iter()
        .enumerate()
        .map(|(i, ev)| body(i as u64 + 1, 7, i as u32 + 1, ev, json!({})))
        .collect();
    let report = verify(&chain_of(bodies), None);
    assert!(report.is_valid(), "{report}");
}

#[test]
fn a_forged_chain_is_caught_by_the_checkpoint() {
    // Rewriting history and re-hashing every event keeps the links intact, but the signed head
    // no longer matches.
    let mut bodies: Vec<EventBody> = lifecycle_log().into_iter().map(|e| e.body).collect();
    bodies[1].detail = json!({"k": "forged"});
    let report = verify(&chain_of(bodies), Some(14));
    assert!(
        report
            .breaks
            .iter()
            .any(|b| b.reason == BreakReason::CheckpointMismatch),
        "{report}"
    );
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-9_007_199_254_740_992i64..9_007_199_254_740_992).prop_map(|i| json!(i)),
        (-1e15f64..1e15).prop_map(|f| json!(f)),
        "\\PC{0,12}".prop_map(Value::String),
        "[\u{0}-\u{1f}\"\\\\/\u{7f}\u{e000}-\u{ffff}\u{10000}-\u{10fff}]{0,6}"
            .prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(
                "[a-z\u{e000}-\u{e0ff}\u{10000}-\u{100ff}]{0,4}",
                inner,
                0..5
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn the_fast_canonical_writer_matches_serde_jcs(value in json_value()) {
        let mut fast = Vec::new();
        postern_core::canon::write_canonical(&value, &mut fast).unwrap();
        prop_assert_eq!(String::from_utf8(fast).unwrap(), String::from_utf8(postern_core::canon::canonical_bytes(&value).unwrap()).unwrap());
    }

    #[test]
    fn action_record_bytes_match_serde_jcs(args in prop::collection::btree_map("\\PC{0,6}", json_value(), 0..5), tool in "\\PC{0,8}") {
        let record = postern_core::ActionRecord {
            actor: "billing".into(),
            tool,
            channel: postern_core::contract::ChannelKind::Http,
            target: "https://api.example.com/v1/invoices".into(),
            credential_ref: Some("stripe".into()),
            method: "POST".into(),
            arguments: args.into_iter().collect(),
            intent_scope: "billing".into(),
        };
        prop_assert_eq!(
            String::from_utf8(record.canonical_bytes().unwrap()).unwrap(),
            String::from_utf8(postern_core::canon::canonical_bytes(&record).unwrap()).unwrap()
        );
    }

    #[test]
    fn the_event_body_bytes_match_serde_jcs(detail in json_value(), seq in 1u64..u64::MAX / 2, n in 1u32..100) {
        let b = body(seq, 9, n, EventKind::Completed(Verdict::Rejected), detail);
        let fast = b.canonical_bytes().unwrap();
        prop_assert_eq!(String::from_utf8(fast).unwrap(), String::from_utf8(postern_core::canon::canonical_bytes(&b).unwrap()).unwrap());
        let linked = ChainedEvent::link(b.clone(), GENESIS_HASH).unwrap();
        prop_assert_eq!(linked.hash, event_hash(&GENESIS_HASH, &b).unwrap());
        // What a store writes: the same event and hash, and the detail's own canonical bytes.
        let (kept, detail) = ChainedEvent::link_keeping_detail(b.clone(), GENESIS_HASH).unwrap();
        prop_assert_eq!(&kept, &linked);
        prop_assert_eq!(detail, String::from_utf8(postern_core::canon::canonical_bytes(&b.detail).unwrap()).unwrap());
        prop_assert_eq!(b.execution_id.ascii().to_vec(), b.execution_id.to_string().into_bytes());
    }
}
