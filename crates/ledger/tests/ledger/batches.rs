//! Group commit keeps each request apart: a request that fails in the middle of a batch leaves
//! the others of the batch whole, and nothing of itself. On PostgreSQL this exercises both ways
//! a batch is written (`writer/optimistic.rs`): a failure found before any of the request's
//! statements reached the server (a refused append) is undone alone, and one found after (an
//! accept whose follow-up events are refused once its intent slot was claimed) sends the batch
//! back to the savepoint way. SQLite's batch is written together first too
//! (`writer/together.rs`): a refused append changed no row and is undone alone, a refused accept
//! had claimed its slot, so the transaction is rolled back and the batch runs again apart.

use std::sync::Arc;

use postern_core::lifecycle::{State, Verdict};
use postern_core::EventKind;
use postern_ledger::{AcceptOutcome, Ledger, LedgerError, NewEvent};

use crate::support::{
    count, dispatched_request, fresh_store, now, open, request, verify, Backend, BACKENDS,
};

/// Holds the writer back so requests pile up and are taken in as one batch once [`release`]d.
/// PostgreSQL: another connection holds this ledger's chain head row, so the writer waits in
/// its next transaction's first statement. SQLite: another connection holds the file's write
/// lock, so callers cannot open a transaction on their own thread and hand their requests to
/// the combiner's thread, which waits for the lock and then takes what queued meanwhile.
async fn stall(backend: Backend, url: &str, ledger: &Ledger) -> Stall {
    use sqlx::{Connection, Executor};
    match backend {
        Backend::Postgres => {
            let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
            conn.execute("BEGIN").await.unwrap();
            let lock = format!(
                "SELECT head_seq FROM chains WHERE chain = '{}' FOR UPDATE",
                ledger.chain()
            );
            conn.execute(lock.as_str()).await.unwrap();
            Stall::Postgres(conn)
        }
        Backend::Sqlite => {
            let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
            conn.execute("BEGIN IMMEDIATE").await.unwrap();
            Stall::Sqlite(conn)
        }
    }
}

/// The other connection of [`stall`], in its open transaction.
enum Stall {
    Postgres(sqlx::PgConnection),
    Sqlite(sqlx::SqliteConnection),
}

async fn release(stall: Stall) {
    use sqlx::Executor;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    match stall {
        Stall::Postgres(mut conn) => {
            conn.execute("ROLLBACK").await.unwrap();
        }
        Stall::Sqlite(mut conn) => {
            conn.execute("ROLLBACK").await.unwrap();
        }
    }
}

/// What one request of a mixed batch is, and what it must come to.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// `authorized` on an accepted execution: recorded.
    Authorize,
    /// `completed` on an accepted execution: refused, nothing written.
    BadAppend,
    /// A new dispatched execution: created.
    Accept,
    /// A new execution whose follow-up events are refused: nothing of it recorded.
    BadAccept,
}

fn bad_accept(args: &str) -> postern_ledger::AcceptRequest {
    request("create_invoice", "billing", args)
        .then(vec![NewEvent::new(EventKind::Completed(Verdict::Applied))])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_failing_mid_batch_leaves_the_others_whole_and_nothing_of_itself() {
    for backend in BACKENDS {
        let (url, _guard) = fresh_store(backend).await;
        let ledger = Arc::new(open(&url).await);
        let mut expected = 0;
        for round in 0..12 {
            // The last rounds hold no accept that fails after it wrote: on SQLite their batches
            // commit as written together, each refused append undone alone.
            let tangles = round < 8;
            let kinds: Vec<Kind> = (0..16)
                .map(|i| match (i + round) % 5 {
                    0 | 3 => Kind::Authorize,
                    1 => Kind::BadAppend,
                    2 => Kind::Accept,
                    _ if tangles => Kind::BadAccept,
                    _ => Kind::Accept,
                })
                .collect();
            // The executions the appends go to, accepted beforehand.
            let mut targets = Vec::new();
            for (i, k) in kinds.iter().enumerate() {
                if matches!(k, Kind::Authorize | Kind::BadAppend) {
                    let args = format!(r#"{{"customer":"t{round}-{i}","amount":1}}"#);
                    let s = ledger
                        .accept(request("create_invoice", "billing", &args))
                        .await;
                    targets.push(Some(s.unwrap().execution().id));
                    expected += 1;
                } else {
                    targets.push(None);
                }
            }
            // All at once, so the writer takes them in as few batches as it can.
            let held = stall(backend, &url, &ledger).await;
            let tasks: Vec<_> = kinds
                .iter()
                .zip(&targets)
                .enumerate()
                .map(|(i, (&kind, &target))| {
                    let l = ledger.clone();
                    let args = format!(r#"{{"customer":"n{round}-{i}","amount":2}}"#);
                    tokio::spawn(async move {
                        match kind {
                            Kind::Authorize => l
                                .append(
                                    target.unwrap(),
                                    NewEvent::new(EventKind::Authorized),
                                    now(),
                                )
                                .await
                                .map(|s| s.lifecycle.state),
                            Kind::BadAppend => l
                                .append(
                                    target.unwrap(),
                                    NewEvent::new(EventKind::Completed(Verdict::Applied)),
                                    now(),
                                )
                                .await
                                .map(|s| s.lifecycle.state),
                            Kind::Accept => l
                                .accept(dispatched_request("create_invoice", "billing", &args))
                                .await
                                .map(|o| o.execution().lifecycle.state),
                            Kind::BadAccept => l
                                .accept(bad_accept(&args))
                                .await
                                .map(|o| o.execution().lifecycle.state),
                        }
                    })
                })
                .collect();
            release(held).await;
            for (i, (task, kind)) in tasks.into_iter().zip(&kinds).enumerate() {
                let got = task.await.unwrap();
                match kind {
                    Kind::Authorize => assert_eq!(got.unwrap(), State::Authorized, "{backend:?}"),
                    Kind::Accept => {
                        assert_eq!(got.unwrap(), State::Dispatched, "{backend:?}");
                        expected += 1;
                    }
                    Kind::BadAppend | Kind::BadAccept => assert!(
                        matches!(got, Err(LedgerError::Transition { .. })),
                        "{backend:?} {kind:?} #{i}: {got:?}"
                    ),
                }
            }
            // A refused append wrote nothing: its execution is still as it was.
            for (kind, target) in kinds.iter().zip(&targets) {
                if let (Kind::BadAppend, Some(id)) = (kind, target) {
                    let view = ledger.read().execution(*id).await.unwrap().unwrap();
                    assert_eq!(view.summary.lifecycle.state, State::Accepted, "{backend:?}");
                    assert_eq!(view.events.len(), 1, "{backend:?}");
                }
            }
            // A refused accept kept no intent slot: the same request, asked properly, is new.
            for (i, kind) in kinds.iter().enumerate() {
                if let Kind::BadAccept = kind {
                    let args = format!(r#"{{"customer":"n{round}-{i}","amount":2}}"#);
                    let again = ledger
                        .accept(dispatched_request("create_invoice", "billing", &args))
                        .await
                        .unwrap();
                    assert!(
                        matches!(again, AcceptOutcome::Created { .. }),
                        "{backend:?}: {again:?}"
                    );
                    expected += 1;
                }
            }
        }
        assert_eq!(count(&ledger).await, expected, "{backend:?}");
        assert!(verify(&ledger).await.is_valid(), "{backend:?}");
    }
}

/// Values that could end a literal early or be read as SQL travel unchanged: on PostgreSQL
/// the batched way writes them inline (`db::inline`), so each is read back byte for byte, in
/// a batch of several and alone, and the chain still verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_that_look_like_sql_are_stored_as_written() {
    const HOSTILE: [&str; 8] = [
        "it's",
        r"back\slash\'",
        "$1 $2 $$ E'x'",
        "'); DROP TABLE executions; --",
        "/* open comment",
        "line\nbreak\ttab",
        "ünïcødé ✓ 𝄞",
        r"\x00\\'\\",
    ];
    for backend in BACKENDS {
        let (url, _guard) = fresh_store(backend).await;
        let ledger = Arc::new(open(&url).await);
        let held = stall(backend, &url, &ledger).await;
        let tasks: Vec<_> = HOSTILE
            .iter()
            .map(|v| {
                let l = ledger.clone();
                let args = serde_json::json!({"customer": v, "amount": 7}).to_string();
                tokio::spawn(async move {
                    let id = l
                        .accept(dispatched_request("create_invoice", "billing", &args))
                        .await
                        .unwrap()
                        .execution()
                        .id;
                    let body = postern_ledger::ResultBody {
                        body: args.clone().into_bytes(),
                        size: args.len() as u64,
                        truncated: false,
                    };
                    l.append(
                        id,
                        NewEvent::new(EventKind::Completed(Verdict::Applied)).with_result(body),
                        now(),
                    )
                    .await
                    .unwrap();
                    id
                })
            })
            .collect();
        release(held).await;
        for (task, v) in tasks.into_iter().zip(HOSTILE) {
            let id = task.await.unwrap();
            let view = ledger.read().execution(id).await.unwrap().unwrap();
            let record = view.record.to_string();
            let customer = serde_json::to_string(v).unwrap();
            assert!(
                record.contains(&customer),
                "{backend:?}: {v:?} not kept in {record}"
            );
            let result = view.result.expect("the result is stored");
            let stored = String::from_utf8(result.body).unwrap();
            assert!(stored.contains(&customer), "{backend:?}: result {stored}");
            assert_eq!(
                view.summary.lifecycle.state,
                State::Completed(Verdict::Applied)
            );
        }
        assert_eq!(count(&ledger).await, HOSTILE.len());
        let report = verify(&ledger).await;
        assert!(report.is_valid(), "{backend:?}: {report:?}");
    }
}

/// Identical requests that arrive together meet in one execution: on PostgreSQL their intent
/// slots are claimed in one statement at the start of the batch (`writer/claims.rs`), where a
/// row the same statement inserted first is a conflict like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identical_requests_in_one_batch_meet_in_one_execution() {
    for backend in BACKENDS {
        let (url, _guard) = fresh_store(backend).await;
        let ledger = Arc::new(open(&url).await);
        let held = stall(backend, &url, &ledger).await;
        // Eight copies each of three requests, interleaved.
        let tasks: Vec<_> = (0..24)
            .map(|i| {
                let l = ledger.clone();
                let args = format!(r#"{{"customer":"same-{}","amount":3}}"#, i % 3);
                tokio::spawn(async move {
                    l.accept(dispatched_request("create_invoice", "billing", &args))
                        .await
                        .unwrap()
                })
            })
            .collect();
        release(held).await;
        let mut created = std::collections::HashMap::new();
        let mut outcomes = Vec::new();
        for (i, task) in tasks.into_iter().enumerate() {
            let outcome = task.await.unwrap();
            if let AcceptOutcome::Created { execution: s, .. } = &outcome {
                assert!(
                    created.insert(i % 3, s.id).is_none(),
                    "{backend:?}: a second execution for request {}",
                    i % 3
                );
            }
            outcomes.push((i % 3, outcome.execution().id));
        }
        assert_eq!(created.len(), 3, "{backend:?}");
        for (which, id) in outcomes {
            assert_eq!(id, created[&which], "{backend:?}: request {which}");
        }
        assert_eq!(count(&ledger).await, 3, "{backend:?}");
        assert!(verify(&ledger).await.is_valid(), "{backend:?}");
    }
}
