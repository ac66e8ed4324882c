//! The Sessions log's ends and the calls log, on both stores: how a run ended (the first end
//! recorded stays), which ends a later call of the run resumes, the idle pass, and the calls
//! an execution or a run is shown with.

use postern_core::Timestamp;
use postern_ledger::{CallRecord, Ledger, Run, RunEnd};

use crate::support::{fresh_store, now, open, request, BACKENDS};

fn run(id: &str, actor: &str, started_at: Timestamp) -> Run {
    Run::new(
        id.into(),
        actor.into(),
        "streamable-http".into(),
        started_at,
    )
}

fn call(run: &str, request_id: &str, attempt: &str, at: Timestamp) -> CallRecord {
    CallRecord {
        at,
        actor: "billing".into(),
        tool: "create_invoice".into(),
        run_id: Some(run.into()),
        request_id: Some(request_id.into()),
        execution_id: None,
        attempt: attempt.into(),
        operation_key: None,
        outcome: "completed".into(),
        instance: "test".into(),
    }
}

async fn end_of(ledger: &Ledger, id: &str) -> (Option<Timestamp>, Option<RunEnd>) {
    let r = ledger
        .read()
        .run(id)
        .await
        .unwrap()
        .expect("the run exists");
    (r.ended_at, r.end_reason)
}

/// Every end is recorded with its reason; the first end stays; only an end the run did not
/// choose (idle, a gateway stopping) is resumed by the run's next start, and only by its own
/// actor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_ends_are_recorded_and_resumed_only_when_not_chosen() {
    for backend in BACKENDS {
        let (url, _guard) = fresh_store(backend).await;
        let ledger = open(&url).await;
        let t0 = now();
        for how in RunEnd::ALL {
            let id = format!("run-{}", how.as_str());
            ledger.start_run(run(&id, "billing", t0)).await.unwrap();
            assert_eq!(end_of(&ledger, &id).await, (None, None), "{backend:?}");
            let at = Timestamp(t0.0 + 10);
            ledger.end_run(&id, at, how).await.unwrap();
            // A second end changes nothing: the first one is what happened.
            ledger
                .end_run(&id, Timestamp(t0.0 + 20), RunEnd::GatewayStopped)
                .await
                .unwrap();
            assert_eq!(
                end_of(&ledger, &id).await,
                (Some(at), Some(how)),
                "{backend:?}"
            );

            // Another actor presenting the run id never reopens it.
            ledger.start_run(run(&id, "ops", now())).await.unwrap();
            assert_eq!(
                end_of(&ledger, &id).await,
                (Some(at), Some(how)),
                "{backend:?}"
            );
            let stored = ledger.read().run(&id).await.unwrap().unwrap();
            assert_eq!(stored.actor, "billing", "{backend:?}");

            // Its own actor's next call resumes it if it idled or its gateway stopped.
            ledger.start_run(run(&id, "billing", now())).await.unwrap();
            let resumed = end_of(&ledger, &id).await;
            if how.resumable() {
                assert_eq!(resumed, (None, None), "{how:?} {backend:?}");
                let again = ledger.read().run(&id).await.unwrap().unwrap();
                assert_eq!(again.started_at, t0, "the run keeps its start: {backend:?}");
            } else {
                assert_eq!(resumed, (Some(at), Some(how)), "{how:?} {backend:?}");
            }
        }
        assert!(
            RunEnd::IdleExpired.resumable() && RunEnd::GatewayStopped.resumable(),
            "a run resumes after an end it did not choose"
        );
        assert!(!RunEnd::Closed.resumable() && !RunEnd::TransportClosed.resumable());
    }
}

/// The idle pass ends, as `idle_expired`, exactly the open runs neither seen nor called since
/// the cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idle_pass_ends_only_idle_open_runs() {
    for backend in BACKENDS {
        let (url, _guard) = fresh_store(backend).await;
        let ledger = open(&url).await;
        let t = now().0;
        let old = Timestamp(t - 60_000);
        let cut = Timestamp(t - 10_000);
        ledger
            .start_run(run("quiet", "billing", old))
            .await
            .unwrap();
        ledger.start_run(run("busy", "billing", old)).await.unwrap();
        ledger
            .start_run(run("young", "billing", now()))
            .await
            .unwrap();
        // Started long ago, and seen again just now (a call arrived, not yet answered).
        ledger.start_run(run("seen", "billing", old)).await.unwrap();
        ledger
            .start_run(run("seen", "billing", now()))
            .await
            .unwrap();
        ledger
            .start_run(run("closed", "billing", old))
            .await
            .unwrap();
        ledger
            .end_run("closed", Timestamp(t - 30_000), RunEnd::Closed)
            .await
            .unwrap();
        ledger.record_call(call("quiet", "1", "new", Timestamp(t - 50_000)));
        ledger.record_call(call("busy", "1", "new", Timestamp(t - 5_000)));
        ledger.flush().await.unwrap();

        let mut ended = ledger.expire_runs(cut, now()).await.unwrap();
        ended.sort();
        assert_eq!(ended, ["quiet"], "{backend:?}");
        assert_eq!(
            end_of(&ledger, "quiet").await.1,
            Some(RunEnd::IdleExpired),
            "{backend:?}"
        );
        assert_eq!(end_of(&ledger, "busy").await, (None, None), "{backend:?}");
        assert_eq!(end_of(&ledger, "young").await, (None, None), "{backend:?}");
        assert_eq!(end_of(&ledger, "seen").await, (None, None), "{backend:?}");
        let seen = ledger.read().run("seen").await.unwrap().unwrap();
        assert_eq!(seen.started_at, old, "its first start stays: {backend:?}");
        assert_eq!(
            end_of(&ledger, "closed").await.1,
            Some(RunEnd::Closed),
            "{backend:?}"
        );
        // Nothing more to end.
        assert!(ledger.expire_runs(cut, now()).await.unwrap().is_empty());
    }
}

/// The calls log: a run's calls and an execution's calls, oldest first, as recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_are_listed_per_run_and_per_execution() {
    for backend in BACKENDS {
        let (url, _guard) = fresh_store(backend).await;
        let ledger = open(&url).await;
        let exe = ledger
            .accept(request(
                "create_invoice",
                "billing",
                r#"{"customer":"acme","amount":5}"#,
            ))
            .await
            .unwrap()
            .execution()
            .id;
        let at = now();
        let on = |c: CallRecord| CallRecord {
            execution_id: Some(exe),
            ..c
        };
        ledger.record_call(on(call("run-a", "1", "new", at)));
        ledger.record_call(on(call("run-b", "\"x\"", "attached", at)));
        ledger.record_call(call("run-a", "2", "refused", at));
        ledger.record_call(on(call("run-a", "3", "recovered", at)));
        ledger.flush().await.unwrap();

        let of_exe: Vec<(Option<String>, Option<String>, String)> = ledger
            .read()
            .calls_of(exe)
            .await
            .unwrap()
            .into_iter()
            .map(|c| (c.run_id, c.request_id, c.attempt))
            .collect();
        let some = |s: &str| Some(s.to_string());
        assert_eq!(
            of_exe,
            [
                (some("run-a"), some("1"), "new".to_string()),
                (some("run-b"), some("\"x\""), "attached".to_string()),
                (some("run-a"), some("3"), "recovered".to_string()),
            ],
            "{backend:?}"
        );
        let in_a: Vec<String> = ledger
            .read()
            .calls_in("run-a", 10)
            .await
            .unwrap()
            .into_iter()
            .map(|c| c.attempt)
            .collect();
        assert_eq!(in_a, ["new", "refused", "recovered"], "{backend:?}");
        assert_eq!(ledger.read().calls_in("run-a", 2).await.unwrap().len(), 2);
        let refused = &ledger.read().calls_in("run-a", 10).await.unwrap()[1];
        assert_eq!(refused.execution_id, None);
        assert_eq!(refused.instance, "test");
    }
}
