//! Retention (issue 12): executions past their retention go whole, their events leave signed
//! pruned ranges the verifier links across, unsettled executions stay whatever their age, and
//! an edited or removed statement is a break.

use std::collections::HashMap;
use std::time::Duration;

use postern_core::lifecycle::{State, Verdict};
use postern_core::{EventKind, ExecutionId};
use postern_ledger::{AcceptOutcome, Ledger, NewEvent, ResultBody, Retention};

use crate::support::*;

fn keep(d: Duration) -> Retention {
    Retention {
        default: d,
        by_tool: HashMap::new(),
    }
}

/// A completed invoice (with a stored result); its id.
async fn completed(ledger: &Ledger, amount: u32) -> ExecutionId {
    let AcceptOutcome::Created { execution: s, .. } = ledger
        .accept(dispatched_request(
            "create_invoice",
            "billing",
            &format!(r#"{{"amount":{amount}}}"#),
        ))
        .await
        .unwrap()
    else {
        panic!("a new execution")
    };
    let body = ResultBody {
        body: format!(r#"{{"id":"inv_{amount}"}}"#).into_bytes(),
        size: 16,
        truncated: false,
    };
    ledger
        .append(
            s.id,
            NewEvent::new(EventKind::Completed(Verdict::Applied)).with_result(body),
            now(),
        )
        .await
        .unwrap();
    s.id
}

/// A wire whose answer was lost: `outcome_unknown`, never pruned.
async fn unsettled(ledger: &Ledger) -> ExecutionId {
    let AcceptOutcome::Created { execution: s, .. } = ledger
        .accept(dispatched_request(
            "wire_money",
            "billing",
            r#"{"amount":7}"#,
        ))
        .await
        .unwrap()
    else {
        panic!("a new execution")
    };
    ledger
        .append(s.id, NewEvent::new(EventKind::OutcomeUnknown), now())
        .await
        .unwrap();
    s.id
}

async fn assert_valid(ledger: &Ledger) -> postern_audit::Report {
    let report = verify(ledger).await;
    assert!(report.is_valid(), "{report}");
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruning_removes_whole_executions_and_the_chain_still_verifies() {
    for backend in BACKENDS {
        let (url, _guard) = fresh_store(backend).await;
        let ledger = open(&url).await;
        let mut old = Vec::new();
        for i in 0..5 {
            old.push(completed(&ledger, i).await);
        }
        let stuck = unsettled(&ledger).await;
        for i in 5..10 {
            old.push(completed(&ledger, i).await);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;

        let report = ledger.prune(&keep(Duration::ZERO)).await.unwrap();
        // All ten completed ones but the one holding the chain's head (the next event links to
        // it), with their four events each.
        assert_eq!(report.executions, 9, "{backend:?}: {report:?}");
        assert_eq!(report.events, 36, "{backend:?}: {report:?}");
        for id in &old[..9] {
            assert!(
                ledger.read().summary(*id).await.unwrap().is_none(),
                "{id} pruned"
            );
        }
        assert!(
            ledger.read().summary(old[9]).await.unwrap().is_some(),
            "the head stays"
        );
        let kept = ledger
            .read()
            .execution(stuck)
            .await
            .unwrap()
            .expect("unsettled: kept");
        assert_eq!(kept.summary.lifecycle.state, State::OutcomeUnknown);
        assert_eq!(kept.events.len(), 4, "with every event");

        let verified = assert_valid(&ledger).await;
        assert_eq!(verified.pruned_events, 36, "{verified}");
        assert!(
            verified.to_string().contains("pruned by retention"),
            "{verified}"
        );
        // Two ranges: before and after the unsettled execution's events.
        assert_eq!(
            ledger.read().pruned_ranges().await.unwrap().len(),
            2,
            "{backend:?}"
        );

        // The chain goes on, and a second pass merges with the ranges already there.
        for i in 10..14 {
            completed(&ledger, i).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        let second = ledger.prune(&keep(Duration::ZERO)).await.unwrap();
        assert_eq!(second.executions, 4, "{backend:?}: {second:?}");
        assert_eq!(
            ledger.read().pruned_ranges().await.unwrap().len(),
            2,
            "merged"
        );
        assert_valid(&ledger).await;

        // Within retention nothing goes.
        completed(&ledger, 99).await;
        completed(&ledger, 100).await;
        let none = ledger
            .prune(&keep(Duration::from_secs(3600)))
            .await
            .unwrap();
        assert_eq!((none.executions, none.events), (0, 0));
        assert_valid(&ledger).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_or_missing_pruned_range_is_a_break() {
    use sqlx::Connection;
    let (url, _guard) = fresh_store(Backend::Sqlite).await;
    let ledger = open(&url).await;
    for i in 0..4 {
        completed(&ledger, i).await;
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    ledger.prune(&keep(Duration::ZERO)).await.unwrap();
    assert_valid(&ledger).await;

    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    // Widened by hand (to hide one more event): the signature no longer holds.
    sqlx::query("UPDATE pruned_ranges SET to_seq = to_seq + 1")
        .execute(&mut conn)
        .await
        .unwrap();
    let report = verify(&ledger).await;
    assert!(!report.is_valid());
    assert!(
        report.to_string().contains("unsigned pruned range"),
        "{report}"
    );
    // Removed: the events it stood for are a plain gap.
    sqlx::query("DELETE FROM pruned_ranges")
        .execute(&mut conn)
        .await
        .unwrap();
    let report = verify(&ledger).await;
    assert!(!report.is_valid());
    assert!(report.to_string().contains("gap"), "{report}");
}
