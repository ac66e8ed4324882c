//! Replica takeover on PostgreSQL (issue 19): an instance whose lease lapsed is taken over by
//! exactly one survivor, which records its dispatched executions `outcome_unknown`; the
//! lapsed instance dispatches nothing more (checked inside the dispatching commit).

use std::time::Duration;

use postern_core::{EventKind, State};
use postern_ledger::{Ledger, LedgerError, LedgerOptions};

use crate::support::{dispatched_request, fresh_store, options, verify, Backend};

/// A lease long enough that no heartbeat renews it during the test: the test lapses it.
fn long_lease() -> LedgerOptions {
    LedgerOptions {
        lease: Duration::from_secs(30),
        ..options()
    }
}

async fn lapse(url: &str, instance: &str) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query("UPDATE instances SET heartbeat_at = 0 WHERE id = $1")
        .bind(instance)
        .execute(&mut conn)
        .await
        .unwrap();
}

async fn taken_over_by(url: &str, instance: &str) -> Option<String> {
    use sqlx::{Connection, Row};
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query("SELECT taken_over_by FROM instances WHERE id = $1")
        .bind(instance)
        .fetch_one(&mut conn)
        .await
        .unwrap()
        .get::<Option<String>, _>("taken_over_by")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_instance_is_taken_over_once_and_dispatches_nothing_more() {
    let (url, _guard) = fresh_store(Backend::Postgres).await;
    let (a, _) = Ledger::open(&url, long_lease()).await.unwrap();
    let (b, _) = Ledger::open(&url, long_lease()).await.unwrap();
    let (c, _) = Ledger::open(&url, long_lease()).await.unwrap();
    let req = dispatched_request(
        "create_invoice",
        "billing",
        r#"{"customer":"acme","amount":5}"#,
    );
    let id = a.accept(req).await.unwrap().execution().id;

    // A live owner's execution is nobody's to take.
    assert!(b.recover().await.unwrap().marked_unknown.is_empty());

    // A's lease lapses (as a paused or partitioned process's would). The commit that would
    // dispatch for it refuses, recording nothing, before anyone took it over.
    lapse(&url, a.instance()).await;
    let next = dispatched_request(
        "create_invoice",
        "billing",
        r#"{"customer":"beta","amount":6}"#,
    );
    match a.accept(next.clone()).await {
        Err(LedgerError::Fenced { instance, by: None }) => assert_eq!(instance, a.instance()),
        other => panic!("a lapsed instance dispatched: {other:?}"),
    }

    // Two survivors scan at once: exactly one takes A over and records the execution.
    let (rb, rc) = tokio::join!(b.recover(), c.recover());
    let (rb, rc) = (rb.unwrap().marked_unknown, rc.unwrap().marked_unknown);
    assert_eq!(rb.len() + rc.len(), 1, "recorded once: {rb:?} {rc:?}");
    let taker = if rb.is_empty() {
        c.instance()
    } else {
        b.instance()
    };
    assert_eq!(
        taken_over_by(&url, a.instance()).await.as_deref(),
        Some(taker)
    );
    let view = b.read().execution(id).await.unwrap().unwrap();
    assert_eq!(view.summary.lifecycle.state, State::OutcomeUnknown);
    assert_eq!(
        view.summary.lifecycle.dispatches, 1,
        "never re-sent by the scan"
    );
    let unknown: Vec<_> = view
        .events
        .iter()
        .filter(|e| e.body.event == EventKind::OutcomeUnknown)
        .collect();
    assert_eq!(unknown.len(), 1);
    assert_eq!(unknown[0].body.detail["previous_owner"], a.instance());
    assert_eq!(unknown[0].body.detail["taken_over_by"], taker);

    // Fenced for good: A dispatches nothing, even with a fresh heartbeat in the row.
    match a.accept(next).await {
        Err(LedgerError::Fenced { by: Some(by), .. }) => assert_eq!(by, taker),
        other => panic!("a taken-over instance dispatched: {other:?}"),
    }
    assert_eq!(b.read().list(&Default::default()).await.unwrap().len(), 1);
    // Scanning again finds nothing more to take.
    assert!(b.recover().await.unwrap().marked_unknown.is_empty());
    assert!(c.recover().await.unwrap().marked_unknown.is_empty());
    assert!(verify(&b).await.is_valid());
}

/// A taken-over instance learns it at its next heartbeat (the gateway then stops), and may no
/// longer send a request it dispatched before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_over_instance_learns_it_from_its_heartbeat() {
    let (url, _guard) = fresh_store(Backend::Postgres).await;
    let short = LedgerOptions {
        lease: Duration::from_millis(900),
        ..options()
    };
    let (a, _) = Ledger::open(&url, short.clone()).await.unwrap();
    let (b, _) = Ledger::open(&url, short).await.unwrap();
    let req = dispatched_request(
        "create_invoice",
        "billing",
        r#"{"customer":"acme","amount":5}"#,
    );
    a.accept(req).await.unwrap();
    assert!(a.may_send().is_ok());
    lapse(&url, a.instance()).await;
    assert_eq!(b.recover().await.unwrap().marked_unknown.len(), 1);
    let by = tokio::time::timeout(Duration::from_secs(5), a.taken_over())
        .await
        .expect("the heartbeat reports the takeover");
    assert_eq!(by, b.instance());
    let lost = a.may_send().unwrap_err();
    assert!(lost.to_string().contains(b.instance()), "{lost}");
    assert!(b.may_send().is_ok());
}
