//! Transport state for resumable streams (stream events, stream owners, MCP sessions), on both
//! stores: what is recorded reads back exactly, duplicates never overwrite, pruning takes only
//! what is older than the cutoff and never the execution record, and all of it outlives a close
//! and reopen.

use postern_core::lifecycle::Verdict;
use postern_core::{EventKind, ExecutionId, Timestamp};
use postern_ledger::{Ledger, NewEvent, ResultBody, StreamEvent, StreamOwner, StreamWrite};

use crate::support::{dispatched_request, fresh_store, now, open, verify, BACKENDS};

fn event(stream: &str, n: u64, payload: &str, at: Timestamp) -> StreamEvent {
    StreamEvent {
        stream_id: stream.to_string(),
        n,
        payload: payload.to_string(),
        execution_id: None,
        last: false,
        at,
    }
}

fn owner(stream: &str, session: Option<&str>, actor: &str, at: Timestamp) -> StreamOwner {
    StreamOwner {
        stream_id: stream.to_string(),
        session_id: session.map(str::to_string),
        actor: actor.to_string(),
        at,
    }
}

fn put_session(id: &str, state: &str, at: Timestamp) -> StreamWrite {
    StreamWrite::PutSession {
        id: id.to_string(),
        state: state.to_string(),
        at,
    }
}

/// A stream of five events whose last carries an execution's answer.
fn five_events(stream: &str, execution: ExecutionId, at: Timestamp) -> Vec<StreamEvent> {
    (0..5)
        .map(|n| {
            let mut e = event(
                stream,
                n,
                &format!("{{\"event\":{n}}}"),
                Timestamp(at.0 + n as i64),
            );
            if n == 4 {
                e.execution_id = Some(execution);
                e.last = true;
            }
            e
        })
        .collect()
}

async fn record(ledger: &Ledger, write: StreamWrite) {
    ledger.record_stream(write).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_events_read_back_in_order_after_a_position() {
    for backend in BACKENDS {
        let (url, _guard) = fresh_store(backend).await;
        let ledger = open(&url).await;
        let execution = ExecutionId::from_bytes([7; 16]);
        let events = five_events("stream-a", execution, now());
        // Recorded out of order; read back by position.
        for i in [3, 0, 4, 1, 2] {
            record(&ledger, StreamWrite::Event(events[i].clone())).await;
        }
        // Another stream's events never mix in.
        for n in 0..3 {
            record(
                &ledger,
                StreamWrite::Event(event("stream-b", n, "other", now())),
            )
            .await;
        }
        // Durable once `record_stream` returned: read at once, without a flush.
        let all = ledger
            .read()
            .stream_events_after("stream-a", None)
            .await
            .unwrap();
        assert_eq!(
            all, events,
            "{backend:?}: every field round-trips, in order"
        );
        assert_eq!(all[4].execution_id, Some(execution), "{backend:?}");
        assert!(all[4].last, "{backend:?}");
        assert!(
            all[..4].iter().all(|e| !e.last && e.execution_id.is_none()),
            "{backend:?}: {all:?}"
        );
        // `after` is exclusive.
        assert_eq!(
            ledger
                .read()
                .stream_events_after("stream-a", Some(0))
                .await
                .unwrap(),
            events[1..],
            "{backend:?}"
        );
        assert_eq!(
            ledger
                .read()
                .stream_events_after("stream-a", Some(2))
                .await
                .unwrap(),
            events[3..],
            "{backend:?}"
        );
        assert!(
            ledger
                .read()
                .stream_events_after("stream-a", Some(4))
                .await
                .unwrap()
                .is_empty(),
            "{backend:?}: nothing after the last"
        );
        assert!(
            ledger
                .read()
                .stream_events_after("stream-a", Some(u64::MAX))
                .await
                .unwrap()
                .is_empty(),
            "{backend:?}: a position beyond any"
        );
        let b = ledger
            .read()
            .stream_events_after("stream-b", None)
            .await
            .unwrap();
        assert_eq!(
            b.iter().map(|e| e.n).collect::<Vec<_>>(),
            [0, 1, 2],
            "{backend:?}"
        );
        assert!(b.iter().all(|e| e.payload == "other"), "{backend:?}");
        assert!(
            ledger
                .read()
                .stream_events_after("stream-unknown", None)
                .await
                .unwrap()
                .is_empty(),
            "{backend:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_stream_position_is_ignored() {
    for backend in BACKENDS {
        let (url, _guard) = fresh_store(backend).await;
        let ledger = open(&url).await;
        let at = now();
        record(&ledger, StreamWrite::Event(event("s", 0, "priming", at))).await;
        record(&ledger, StreamWrite::Event(event("s", 1, "first", at))).await;
        // The same (stream, n) again, with other contents: accepted without error, not written.
        let mut again = event("s", 1, "second", Timestamp(at.0 + 5));
        again.execution_id = Some(ExecutionId::from_bytes([9; 16]));
        again.last = true;
        ledger
            .record_stream(StreamWrite::Event(again))
            .await
            .unwrap_or_else(|e| panic!("{backend:?}: a duplicate is not an error: {e}"));
        // The same position in another stream is its own row.
        record(&ledger, StreamWrite::Event(event("t", 1, "t-first", at))).await;
        let s = ledger.read().stream_events_after("s", None).await.unwrap();
        assert_eq!(
            s,
            vec![event("s", 0, "priming", at), event("s", 1, "first", at)],
            "{backend:?}: the first write stands"
        );
        assert_eq!(
            ledger.read().stream_events_after("t", None).await.unwrap(),
            vec![event("t", 1, "t-first", at)],
            "{backend:?}"
        );
        // A duplicate does not disturb writes sharing its commit.
        let (dup, fresh) = tokio::join!(
            ledger.record_stream(StreamWrite::Event(event("s", 0, "dup", at))),
            ledger.record_stream(StreamWrite::Event(event("s", 2, "fresh", at))),
        );
        dup.unwrap();
        fresh.unwrap();
        let payloads: Vec<String> = ledger
            .read()
            .stream_events_after("s", None)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.payload)
            .collect();
        assert_eq!(payloads, ["priming", "first", "fresh"], "{backend:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_owners_round_trip_and_are_never_replaced() {
    for backend in BACKENDS {
        let (url, _guard) = fresh_store(backend).await;
        let ledger = open(&url).await;
        let at = now();
        let in_session = owner("s-1", Some("session-1"), "billing", at);
        let sessionless = owner("s-2", None, "ops", at);
        record(&ledger, StreamWrite::Owner(in_session.clone())).await;
        record(&ledger, StreamWrite::Owner(sessionless.clone())).await;
        assert_eq!(
            ledger.read().stream_owner("s-1").await.unwrap(),
            Some(in_session.clone()),
            "{backend:?}"
        );
        assert_eq!(
            ledger.read().stream_owner("s-2").await.unwrap(),
            Some(sessionless.clone()),
            "{backend:?}: a stream outside any session"
        );
        assert_eq!(ledger.read().stream_owner("s-3").await.unwrap(), None);
        // A second claim of a stream (another session and actor) changes nothing.
        record(
            &ledger,
            StreamWrite::Owner(owner("s-1", Some("session-2"), "ops", Timestamp(at.0 + 1))),
        )
        .await;
        record(
            &ledger,
            StreamWrite::Owner(owner("s-2", Some("session-9"), "ops", at)),
        )
        .await;
        assert_eq!(
            ledger.read().stream_owner("s-1").await.unwrap(),
            Some(in_session),
            "{backend:?}: the first owner stands"
        );
        assert_eq!(
            ledger.read().stream_owner("s-2").await.unwrap(),
            Some(sessionless),
            "{backend:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_sessions_are_put_overwritten_and_dropped() {
    for backend in BACKENDS {
        let (url, _guard) = fresh_store(backend).await;
        let ledger = open(&url).await;
        let at = now();
        assert_eq!(ledger.read().mcp_session("m-1").await.unwrap(), None);
        record(&ledger, put_session("m-1", r#"{"v":1}"#, at)).await;
        record(&ledger, put_session("m-2", r#"{"other":true}"#, at)).await;
        assert_eq!(
            ledger.read().mcp_session("m-1").await.unwrap().as_deref(),
            Some(r#"{"v":1}"#),
            "{backend:?}"
        );
        record(
            &ledger,
            put_session("m-1", r#"{"v":2}"#, Timestamp(at.0 + 1)),
        )
        .await;
        assert_eq!(
            ledger.read().mcp_session("m-1").await.unwrap().as_deref(),
            Some(r#"{"v":2}"#),
            "{backend:?}: the later put wins"
        );
        record(&ledger, StreamWrite::DropSession("m-1".into())).await;
        assert_eq!(
            ledger.read().mcp_session("m-1").await.unwrap(),
            None,
            "{backend:?}"
        );
        assert_eq!(
            ledger.read().mcp_session("m-2").await.unwrap().as_deref(),
            Some(r#"{"other":true}"#),
            "{backend:?}: only the dropped session goes"
        );
        // Dropping what is not there is not an error; a dropped id can be put again.
        record(&ledger, StreamWrite::DropSession("m-1".into())).await;
        record(&ledger, StreamWrite::DropSession("never".into())).await;
        record(&ledger, put_session("m-1", r#"{"v":3}"#, at)).await;
        assert_eq!(
            ledger.read().mcp_session("m-1").await.unwrap().as_deref(),
            Some(r#"{"v":3}"#),
            "{backend:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_commits_what_was_queued_before_it() {
    for backend in BACKENDS {
        let (url, _guard) = fresh_store(backend).await;
        let ledger = open(&url).await;
        ledger.flush().await.unwrap();
        let at = now();
        // Queue a write (one poll sends it to the writer) without waiting for its commit.
        let mut queued =
            Box::pin(ledger.record_stream(StreamWrite::Event(event("q", 0, "queued", at))));
        tokio::select! {
            biased;
            r = &mut queued => r.unwrap(),
            () = std::future::ready(()) => {}
        }
        ledger.flush().await.unwrap();
        assert_eq!(
            ledger.read().stream_events_after("q", None).await.unwrap(),
            vec![event("q", 0, "queued", at)],
            "{backend:?}: durable once the flush returned"
        );
        queued.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruning_takes_only_older_transport_state_and_never_the_record() {
    for backend in BACKENDS {
        let (url, _guard) = fresh_store(backend).await;
        let ledger = open(&url).await;
        // An execution with a result, recorded (and so older than every cutoff below).
        let req = dispatched_request(
            "create_invoice",
            "billing",
            r#"{"customer":"acme","amount":5}"#,
        );
        let id = ledger.accept(req).await.unwrap().execution().id;
        ledger
            .append(
                id,
                NewEvent::new(EventKind::Completed(Verdict::Applied)).with_result(ResultBody {
                    body: b"{\"invoice\":\"inv_1\"}".to_vec(),
                    size: 19,
                    truncated: false,
                }),
                now(),
            )
            .await
            .unwrap();
        ledger
            .append(id, NewEvent::new(EventKind::DeliveryFailed), now())
            .await
            .unwrap();
        let before = ledger.read().execution(id).await.unwrap().unwrap();
        let heads = ledger.read().chain_heads().await.unwrap();

        let old = Timestamp(1_000);
        let cutoff = Timestamp(2_000);
        let young = Timestamp(3_000);
        for (stream, at) in [("old", old), ("edge", cutoff), ("young", young)] {
            for n in 0..2 {
                let mut e = event(stream, n, stream, at);
                e.execution_id = Some(id);
                record(&ledger, StreamWrite::Event(e)).await;
            }
            record(
                &ledger,
                StreamWrite::Owner(owner(stream, Some(stream), "billing", at)),
            )
            .await;
            record(&ledger, put_session(stream, stream, at)).await;
        }

        // Strictly older than the cutoff: the old stream's 2 events, its owner, its session.
        let removed = ledger.prune_streams(cutoff).await.unwrap();
        assert_eq!(removed, 4, "{backend:?}");
        assert!(ledger
            .read()
            .stream_events_after("old", None)
            .await
            .unwrap()
            .is_empty());
        assert_eq!(ledger.read().stream_owner("old").await.unwrap(), None);
        assert_eq!(ledger.read().mcp_session("old").await.unwrap(), None);
        for kept in ["edge", "young"] {
            assert_eq!(
                ledger
                    .read()
                    .stream_events_after(kept, None)
                    .await
                    .unwrap()
                    .len(),
                2,
                "{backend:?}: {kept}"
            );
            assert!(
                ledger.read().stream_owner(kept).await.unwrap().is_some(),
                "{kept}"
            );
            assert_eq!(
                ledger.read().mcp_session(kept).await.unwrap().as_deref(),
                Some(kept),
                "{backend:?}"
            );
        }
        assert_eq!(
            ledger.prune_streams(cutoff).await.unwrap(),
            0,
            "{backend:?}"
        );

        // A cutoff after everything takes all transport state and still none of the record.
        let later = Timestamp(now().0 + 3_600_000);
        assert_eq!(ledger.prune_streams(later).await.unwrap(), 8, "{backend:?}");
        for gone in ["edge", "young"] {
            assert!(ledger
                .read()
                .stream_events_after(gone, None)
                .await
                .unwrap()
                .is_empty());
            assert_eq!(ledger.read().stream_owner(gone).await.unwrap(), None);
            assert_eq!(ledger.read().mcp_session(gone).await.unwrap(), None);
        }
        let after = ledger.read().execution(id).await.unwrap().unwrap();
        assert_eq!(after.summary, before.summary, "{backend:?}");
        assert_eq!(after.events, before.events, "{backend:?}");
        assert_eq!(after.result, before.result, "{backend:?}");
        assert_eq!(after.events.len(), 5, "{backend:?}");
        assert_eq!(
            ledger.read().chain_heads().await.unwrap(),
            heads,
            "{backend:?}"
        );
        let report = verify(&ledger).await;
        assert!(report.is_valid(), "{backend:?}: {report}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transport_state_survives_close_and_reopen() {
    for backend in BACKENDS {
        let (url, _guard) = fresh_store(backend).await;
        let ledger = open(&url).await;
        let at = now();
        let execution = ExecutionId::from_bytes([3; 16]);
        let events = five_events("kept", execution, at);
        for e in &events {
            record(&ledger, StreamWrite::Event(e.clone())).await;
        }
        let sessionless = owner("kept", None, "billing", at);
        let in_session = owner("other", Some("m-1"), "ops", at);
        record(&ledger, StreamWrite::Owner(sessionless.clone())).await;
        record(&ledger, StreamWrite::Owner(in_session.clone())).await;
        record(&ledger, put_session("m-1", r#"{"v":1}"#, at)).await;
        record(&ledger, put_session("m-1", r#"{"v":2}"#, at)).await;
        record(&ledger, put_session("m-2", r#"{"gone":1}"#, at)).await;
        record(&ledger, StreamWrite::DropSession("m-2".into())).await;
        ledger.close().await;

        let reopened = open(&url).await;
        assert_eq!(
            reopened
                .read()
                .stream_events_after("kept", None)
                .await
                .unwrap(),
            events,
            "{backend:?}"
        );
        assert_eq!(
            reopened
                .read()
                .stream_events_after("kept", Some(1))
                .await
                .unwrap(),
            events[2..],
            "{backend:?}"
        );
        assert_eq!(
            reopened.read().stream_owner("kept").await.unwrap(),
            Some(sessionless),
            "{backend:?}"
        );
        assert_eq!(
            reopened.read().stream_owner("other").await.unwrap(),
            Some(in_session),
            "{backend:?}"
        );
        assert_eq!(
            reopened.read().mcp_session("m-1").await.unwrap().as_deref(),
            Some(r#"{"v":2}"#),
            "{backend:?}"
        );
        assert_eq!(
            reopened.read().mcp_session("m-2").await.unwrap(),
            None,
            "{backend:?}"
        );
        // The reopened ledger goes on recording after what it found.
        let mut next = event("kept", 5, "after reopen", now());
        next.last = true;
        record(&reopened, StreamWrite::Event(next.clone())).await;
        record(&reopened, StreamWrite::Event(event("kept", 0, "dup", at))).await;
        let all = reopened
            .read()
            .stream_events_after("kept", None)
            .await
            .unwrap();
        assert_eq!(all.len(), 6, "{backend:?}");
        assert_eq!(all[0], events[0], "{backend:?}");
        assert_eq!(all[5], next, "{backend:?}");
        reopened.close().await;
    }
}
