//! One suite, two stores: every test runs against SQLite and the real PostgreSQL.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use postern_core::lifecycle::{State, Verdict};
use postern_core::recovery::RecoveryDecision;
use postern_core::EventKind;
use postern_ledger::{AcceptOutcome, Ledger, LedgerError, NewEvent, ResultBody};

use crate::support::{
    count, dispatched_request, fresh_store, now, open, options, request, verify, Backend, BACKENDS,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_concurrent_identical_accepts_make_one_execution() {
    for backend in BACKENDS {
        let (url, _guard) = fresh_store(backend).await;
        let ledger = Arc::new(open(&url).await);
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let l = ledger.clone();
                tokio::spawn(async move {
                    l.accept(request(
                        "create_invoice",
                        "billing",
                        r#"{"customer":"acme","amount":5}"#,
                    ))
                    .await
                    .unwrap()
                })
            })
            .collect();
        let mut ids = HashSet::new();
        let mut created = 0;
        for t in tasks {
            let outcome = t.await.unwrap();
            if matches!(outcome, AcceptOutcome::Created { .. }) {
                created += 1;
            }
            ids.insert(outcome.execution().id);
        }
        assert_eq!((created, ids.len()), (1, 1), "{backend:?}");
        assert_eq!(count(&ledger).await, 1, "{backend:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_ledgers_on_one_postgres_make_one_execution() {
    let (url, _guard) = fresh_store(Backend::Postgres).await;
    let a = Arc::new(open(&url).await);
    let b = Arc::new(open(&url).await);
    assert_ne!(a.chain(), b.chain(), "replicas write separate chains");
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let l = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(async move {
                l.accept(request(
                    "create_invoice",
                    "billing",
                    r#"{"customer":"acme","amount":5}"#,
                ))
                .await
                .unwrap()
                .execution()
                .id
            })
        })
        .collect();
    let mut ids = HashSet::new();
    for t in tasks {
        ids.insert(t.await.unwrap());
    }
    assert_eq!(ids.len(), 1);
    assert_eq!(count(&a).await, 1);
    let report = verify(&a).await;
    assert!(report.is_valid(), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matching_follows_the_recovery_decision() {
    for backend in BACKENDS {
        let (url, _guard) = fresh_store(backend).await;
        let ledger = open(&url).await;
        let first = ledger
            .accept(request(
                "create_invoice",
                "billing",
                r#"{"customer":"acme","amount":5}"#,
            ))
            .await
            .unwrap();
        let AcceptOutcome::Created {
            execution: first, ..
        } = first
        else {
            panic!("{backend:?}: first call must create")
        };
        let again = ledger
            .accept(request(
                "create_invoice",
                "billing",
                r#"{"amount":5,"customer":"acme"}"#,
            ))
            .await
            .unwrap();
        assert!(
            matches!(again, AcceptOutcome::Existing { decision: RecoveryDecision::Continue { execution_id }, .. } if execution_id == first.id),
            "{backend:?}: {again:?}"
        );
        // Another actor, another execution.
        let other = ledger
            .accept(request(
                "create_invoice",
                "ops",
                r#"{"customer":"acme","amount":5}"#,
            ))
            .await
            .unwrap();
        assert!(
            matches!(other, AcceptOutcome::Created { .. }),
            "{backend:?}"
        );
        // Reads are never matched.
        for _ in 0..2 {
            let read = ledger
                .accept(request("list_invoices", "billing", "{}"))
                .await
                .unwrap();
            assert!(matches!(read, AcceptOutcome::Created { .. }), "{backend:?}");
        }
        // Dispatched → attach; completed → the stored result.
        ledger
            .append(first.id, NewEvent::new(EventKind::Authorized), now())
            .await
            .unwrap();
        ledger
            .append(first.id, NewEvent::new(EventKind::Dispatched), now())
            .await
            .unwrap();
        let attach = ledger
            .accept(request(
                "create_invoice",
                "billing",
                r#"{"customer":"acme","amount":5}"#,
            ))
            .await
            .unwrap();
        assert!(
            matches!(
                attach,
                AcceptOutcome::Existing {
                    decision: RecoveryDecision::Attach { .. },
                    ..
                }
            ),
            "{backend:?}"
        );
        let body = ResultBody {
            body: b"{\"invoice\":\"inv_1\"}".to_vec(),
            size: 19,
            truncated: false,
        };
        let done = ledger
            .append(
                first.id,
                NewEvent::new(EventKind::Completed(Verdict::Applied)).with_result(body.clone()),
                now(),
            )
            .await
            .unwrap();
        assert_eq!(done.lifecycle.state, State::Completed(Verdict::Applied));
        let stored = ledger
            .accept(request(
                "create_invoice",
                "billing",
                r#"{"customer":"acme","amount":5}"#,
            ))
            .await
            .unwrap();
        assert!(
            matches!(
                stored,
                AcceptOutcome::Existing {
                    decision: RecoveryDecision::ReturnResult {
                        delivered_before: false,
                        ..
                    },
                    ..
                }
            ),
            "{backend:?}"
        );
        let view = ledger.read().execution(first.id).await.unwrap().unwrap();
        assert_eq!(view.result.unwrap().body, body.body);
        assert_eq!(view.events.len(), 4);
        assert_eq!(
            view.events[2].body.detail["idempotency_key"],
            first.id.to_string()
        );
        assert_eq!(count(&ledger).await, 4, "{backend:?}");
        let report = verify(&ledger).await;
        assert!(report.is_valid(), "{backend:?}: {report}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impossible_transitions_are_refused_and_write_nothing() {
    for backend in BACKENDS {
        let (url, _guard) = fresh_store(backend).await;
        let ledger = open(&url).await;
        let id = ledger
            .accept(request("wire_money", "billing", r#"{"to":"x"}"#))
            .await
            .unwrap()
            .execution()
            .id;
        for event in [
            EventKind::Dispatched,
            EventKind::Completed(Verdict::Applied),
            EventKind::Delivered,
            EventKind::Accepted,
        ] {
            let err = ledger
                .append(id, NewEvent::new(event), now())
                .await
                .unwrap_err();
            assert!(
                matches!(err, LedgerError::Transition { execution_id, .. } if execution_id == id),
                "{backend:?}: {err}"
            );
        }
        let view = ledger.read().execution(id).await.unwrap().unwrap();
        assert_eq!(view.events.len(), 1, "{backend:?}");
        assert_eq!(view.summary.lifecycle.state, State::Accepted);
        // A refused request in a batch does not disturb the others committed with it.
        let ok = ledger
            .append(id, NewEvent::new(EventKind::Authorized), now())
            .await
            .unwrap();
        assert_eq!(ok.lifecycle.state, State::Authorized);
        let unknown = postern_core::ExecutionId::from_bytes([1; 16]);
        assert!(matches!(
            ledger
                .append(unknown, NewEvent::new(EventKind::Authorized), now())
                .await,
            Err(LedgerError::UnknownExecution(_))
        ));
        assert!(verify(&ledger).await.is_valid());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operation_key_reuse_with_another_intent_is_a_conflict() {
    for backend in BACKENDS {
        let (url, _guard) = fresh_store(backend).await;
        let ledger = open(&url).await;
        let keyed = |args: &str, key: &str| {
            let mut r = request("create_invoice", "billing", args);
            r.operation_key = Some(key.to_string());
            r
        };
        let first = ledger
            .accept(keyed(r#"{"customer":"acme","amount":5}"#, "order-1"))
            .await
            .unwrap()
            .execution()
            .id;
        let conflict = ledger
            .accept(keyed(r#"{"customer":"acme","amount":6}"#, "order-1"))
            .await
            .unwrap();
        assert!(
            matches!(conflict, AcceptOutcome::Existing { decision: RecoveryDecision::Conflict { original }, .. } if original == first),
            "{backend:?}: {conflict:?}"
        );
        let same = ledger
            .accept(keyed(r#"{"customer":"acme","amount":5}"#, "order-1"))
            .await
            .unwrap();
        assert_eq!(same.execution().id, first);
        // A new key is a new, separate action even with the same arguments.
        let second = ledger
            .accept(keyed(r#"{"customer":"acme","amount":5}"#, "order-2"))
            .await
            .unwrap();
        assert!(
            matches!(second, AcceptOutcome::Created { .. }),
            "{backend:?}"
        );
        // The key is per actor.
        let mut other = keyed(r#"{"customer":"acme","amount":6}"#, "order-1");
        other = {
            let mut r = request("create_invoice", "ops", r#"{"customer":"acme","amount":6}"#);
            r.operation_key = other.operation_key;
            r
        };
        assert!(
            matches!(
                ledger.accept(other).await.unwrap(),
                AcceptOutcome::Created { .. }
            ),
            "{backend:?}"
        );
        assert_eq!(count(&ledger).await, 3, "{backend:?}");
    }
}

/// A bridge's re-issue key (issue 22) finds the execution an earlier attempt of the same agent
/// request reached, past the window; a new re-issue key never forces a new action (inside the
/// window an identical request is matched by fingerprint as before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reissue_key_finds_its_execution_past_the_window() {
    const ARGS: &str = r#"{"customer":"acme","amount":5}"#;
    for backend in BACKENDS {
        let (url, _guard) = fresh_store(backend).await;
        let ledger = open(&url).await;
        let attempt = |key: &str, minutes_later: i64| {
            let mut r = dispatched_request("create_invoice", "billing", ARGS);
            r.reissue_key = Some(key.to_string());
            r.now = postern_core::Timestamp(r.now.0 + minutes_later * 60_000);
            r
        };
        let first = ledger.accept(attempt("run-a:1", 0)).await.unwrap();
        assert!(
            matches!(first, AcceptOutcome::Created { .. }),
            "{backend:?}"
        );
        let first = first.execution().id;
        // 11 minutes later (the window is 10): the re-issue is the same request.
        let again = ledger.accept(attempt("run-a:1", 11)).await.unwrap();
        assert!(
            matches!(&again, AcceptOutcome::Existing { execution, .. } if execution.id == first),
            "{backend:?}: {again:?}"
        );
        // A new agent request inside the window: matched by fingerprint, and its key then finds
        // the same execution past the window too.
        let other = ledger.accept(attempt("run-a:2", 1)).await.unwrap();
        assert_eq!(other.execution().id, first, "{backend:?}");
        let later = ledger.accept(attempt("run-a:2", 12)).await.unwrap();
        assert_eq!(later.execution().id, first, "{backend:?}");
        // A new request past the window is a new execution, and its re-issues find that one.
        let new = ledger.accept(attempt("run-a:3", 11)).await.unwrap();
        assert!(matches!(new, AcceptOutcome::Created { .. }), "{backend:?}");
        let new = new.execution().id;
        assert_ne!(new, first);
        let reissued = ledger.accept(attempt("run-a:3", 30)).await.unwrap();
        assert_eq!(reissued.execution().id, new, "{backend:?}");
        // The same re-issue key with other arguments is a conflict naming the original.
        let mut changed = dispatched_request(
            "create_invoice",
            "billing",
            r#"{"customer":"acme","amount":6}"#,
        );
        changed.reissue_key = Some("run-a:1".into());
        let conflict = ledger.accept(changed).await.unwrap();
        assert!(
            matches!(conflict, AcceptOutcome::Existing { decision: RecoveryDecision::Conflict { original }, .. } if original == first),
            "{backend:?}: {conflict:?}"
        );
        assert_eq!(count(&ledger).await, 2, "{backend:?}");
        assert!(verify(&ledger).await.is_valid(), "{backend:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_scan_marks_a_stopped_instances_dispatched_executions_unknown() {
    for backend in BACKENDS {
        let (url, _guard) = fresh_store(backend).await;
        let ledger = open(&url).await;
        let req = dispatched_request(
            "create_invoice",
            "billing",
            r#"{"customer":"acme","amount":5}"#,
        );
        let id = ledger.accept(req).await.unwrap().execution().id;
        // A live instance's in-flight execution is left alone.
        let (observer, report) = Ledger::open(&url, options()).await.unwrap();
        assert!(report.marked_unknown.is_empty(), "{backend:?}: live owner");
        drop(observer);
        // The owner stops without recording a result (no clean close).
        drop(ledger);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let (reopened, report) = Ledger::open(&url, options()).await.unwrap();
        assert_eq!(report.marked_unknown, vec![id], "{backend:?}");
        let s = reopened.read().summary(id).await.unwrap().unwrap();
        assert_eq!(s.lifecycle.state, State::OutcomeUnknown, "{backend:?}");
        // Nothing is retried by the ledger: the execution was dispatched once.
        assert_eq!(s.lifecycle.dispatches, 1);
        let (_again, report) = Ledger::open(&url, options()).await.unwrap();
        assert!(
            report.marked_unknown.is_empty(),
            "{backend:?}: reported once"
        );
        assert!(verify(&reopened).await.is_valid());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_are_recorded() {
    for backend in BACKENDS {
        let (url, _guard) = fresh_store(backend).await;
        let ledger = open(&url).await;
        let run = postern_ledger::Run {
            id: "run-1".into(),
            actor: "billing".into(),
            client_name: Some("rmcp".into()),
            client_version: Some("3.11".into()),
            client_address: Some("192.0.2.7".into()),
            principal: Some(postern_ledger::RunPrincipal {
                issuer: "https://id.example".into(),
                subject: "svc-1".into(),
                client_id: Some("claude".into()),
            }),
            protocol_version: Some("2025-06-18".into()),
            transport: "streamable-http".into(),
            started_at: now(),
            ended_at: None,
            end_reason: None,
            authorized: None,
            revoked: None,
        };
        ledger.start_run(run.clone()).await.unwrap();
        ledger
            .end_run("run-1", now(), postern_ledger::RunEnd::Closed)
            .await
            .unwrap();
        let runs = ledger.read().runs(10).await.unwrap();
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].client_name.as_deref(), Some("rmcp"));
        assert_eq!(
            runs[0].client_address.as_deref(),
            Some("192.0.2.7"),
            "{backend:?}"
        );
        assert_eq!(runs[0].principal, run.principal, "{backend:?}");
        assert!(runs[0].ended_at.is_some(), "{backend:?}");
        assert_eq!(runs[0].end_reason, Some(postern_ledger::RunEnd::Closed));
    }
}

/// A run's authorization and revocation are each recorded once: of two operators deciding
/// at once exactly one is; a revoked run is never authorized afterwards; an unknown run is
/// decided by nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_decisions_are_recorded_once() {
    use postern_ledger::RunDecision::{Authorize, Revoke};
    for backend in BACKENDS {
        let (url, _guard) = fresh_store(backend).await;
        let ledger = std::sync::Arc::new(open(&url).await);
        for id in ["run-a", "run-b"] {
            let run = postern_ledger::Run::new(id.into(), "billing".into(), "stdio".into(), now());
            ledger.start_run(run).await.unwrap();
        }
        let (l1, l2) = (ledger.clone(), ledger.clone());
        let (a, b) = tokio::join!(
            l1.decide_run("run-a", Authorize, "alice", now()),
            l2.decide_run("run-a", Authorize, "bob", now())
        );
        assert_eq!(
            u8::from(a.unwrap()) + u8::from(b.unwrap()),
            1,
            "{backend:?}"
        );
        let run = ledger.read().run("run-a").await.unwrap().unwrap();
        assert!(run.authorized.is_some() && run.revoked.is_none());
        assert!(ledger
            .decide_run("run-a", Revoke, "alice", now())
            .await
            .unwrap());
        assert!(!ledger
            .decide_run("run-a", Revoke, "bob", now())
            .await
            .unwrap());
        assert!(ledger
            .decide_run("run-b", Revoke, "alice", now())
            .await
            .unwrap());
        assert!(!ledger
            .decide_run("run-b", Authorize, "bob", now())
            .await
            .unwrap());
        assert!(!ledger
            .decide_run("run-x", Authorize, "bob", now())
            .await
            .unwrap());
        let b = ledger.read().run("run-b").await.unwrap().unwrap();
        assert_eq!(b.revoked.as_ref().map(|r| r.0.as_str()), Some("alice"));
        assert!(b.authorized.is_none());
    }
}

/// SQLite callers commit on their own thread, also on a single-threaded runtime (one fsync at
/// most blocks it). Writes are durable when they return, and a delivery held back because
/// nothing waits on it is committed by the writer's thread when it falls due.
#[tokio::test(flavor = "current_thread")]
async fn writes_complete_on_a_single_threaded_runtime() {
    for backend in BACKENDS {
        let (url, _guard) = fresh_store(backend).await;
        let ledger = open(&url).await;
        let req = dispatched_request("create_invoice", "billing", r#"{"amount":3}"#);
        let id = ledger.accept(req).await.unwrap().execution().id;
        let done = ledger
            .append(
                id,
                NewEvent::new(EventKind::Completed(Verdict::Applied)),
                now(),
            )
            .await
            .unwrap();
        assert_eq!(done.lifecycle.state, State::Completed(Verdict::Applied));
        // A delivery is held back for a later commit; alone, it is committed when due.
        let delivered = tokio::time::timeout(
            Duration::from_secs(5),
            ledger.append(id, NewEvent::new(EventKind::Delivered), now()),
        )
        .await
        .expect("a held delivery is committed within its hold time")
        .unwrap();
        assert_eq!(
            delivered.lifecycle.state,
            State::Delivered(Verdict::Applied)
        );
        let view = ledger.read().execution(id).await.unwrap().unwrap();
        assert_eq!(view.events.len(), 5, "{backend:?}");
        assert!(verify(&ledger).await.is_valid());
    }
}

/// While another process holds the SQLite file's write lock, a caller's write waits without
/// blocking its own thread (so it can still be timed out or cancelled), and once the lock is
/// released the queued write is committed all the same: nothing accepted is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_behind_another_process_lock_waits_asynchronously_and_lands() {
    use sqlx::Connection;

    let (url, _guard) = fresh_store(Backend::Sqlite).await;
    let ledger = open(&url).await;
    // Another writer (a second gateway, or a tool) takes the file's write lock.
    let mut other = sqlx::SqliteConnection::connect(&url).await.unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut other)
        .await
        .unwrap();

    let started = std::time::Instant::now();
    let waited = tokio::time::timeout(
        Duration::from_millis(300),
        ledger.accept(request("create_invoice", "billing", r#"{"amount":9}"#)),
    )
    .await;
    assert!(
        waited.is_err(),
        "the write cannot land while the lock is held"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the caller was never stuck waiting for the lock on its own thread: {:?}",
        started.elapsed()
    );

    sqlx::query("ROLLBACK").execute(&mut other).await.unwrap();
    drop(other);
    // The write the caller stopped waiting for was queued: it lands once the file is free.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while count(&ledger).await == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the queued accept was never committed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // And the writer is free for the next caller.
    let next = ledger
        .accept(request("create_invoice", "billing", r#"{"amount":10}"#))
        .await
        .unwrap();
    assert!(matches!(next, AcceptOutcome::Created { .. }));
    assert_eq!(count(&ledger).await, 2);
    assert!(verify(&ledger).await.is_valid());
}

/// One dispatch can bear two results (an unknown answer's body, then the status query's): each
/// keeps its own row, so the digest the first event chained still matches its stored body. (The
/// chaos run found the second overwriting the first: `audit verify --store` broke.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_results_of_one_dispatch_both_stay_verifiable() {
    for backend in BACKENDS {
        let (url, _guard) = fresh_store(backend).await;
        let ledger = open(&url).await;
        let req = dispatched_request(
            "create_invoice",
            "billing",
            r#"{"customer":"acme","amount":5}"#,
        );
        let id = ledger.accept(req).await.unwrap().execution().id;
        let result = |body: &[u8]| ResultBody {
            body: body.to_vec(),
            size: body.len() as u64,
            truncated: false,
        };
        let mut unknown = NewEvent::new(EventKind::OutcomeUnknown);
        unknown.result = Some(result(b"{\"error\":\"injected failure after commit\"}"));
        ledger
            .append(id, unknown, crate::support::now())
            .await
            .unwrap();
        let mut done = NewEvent::new(EventKind::Completed(Verdict::Applied));
        done.result = Some(result(b"{\"id\":\"inv_1\"}"));
        ledger
            .append(id, done, crate::support::now())
            .await
            .unwrap();
        let view = ledger.read().execution(id).await.unwrap().unwrap();
        assert_eq!(
            view.result.unwrap().body,
            b"{\"id\":\"inv_1\"}",
            "{backend:?}: the latest result"
        );
        let store = postern_ledger::StoreReader::open(&url).await.unwrap();
        let verifier = postern_audit::Verifier::new(crate::support::signing_key().verifying_key());
        let report = store.verify(verifier, |_, _| {}).await.unwrap();
        assert!(report.is_valid(), "{backend:?}: {report}");
    }
}
