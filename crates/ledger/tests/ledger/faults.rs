//! Storage faults are typed and survivable: a locked SQLite file is `Busy` (not "corrupt"),
//! and PostgreSQL's writer comes back by itself after its connection is killed, renewing its
//! lease only while it can write.

use std::time::{Duration, Instant};

use postern_ledger::{AcceptOutcome, Ledger, LedgerOptions, StorageFault};
use sqlx::Connection;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_sqlite_file_is_busy_not_corrupt_and_the_next_write_lands() {
    let (url, _guard) = fresh_store(Backend::Sqlite).await;
    let options = LedgerOptions {
        busy_patience: Duration::from_millis(200),
        ..options()
    };
    let (ledger, _) = Ledger::open(&url, options).await.unwrap();
    let mut other = sqlx::SqliteConnection::connect(&url).await.unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut other)
        .await
        .unwrap();

    let refused = ledger
        .accept(request("create_invoice", "billing", r#"{"amount":1}"#))
        .await
        .expect_err("the file is locked by another process");
    assert_eq!(refused.fault(), Some(StorageFault::Busy), "{refused}");
    assert!(
        refused
            .to_string()
            .contains("nothing of this request was recorded"),
        "{refused}"
    );

    sqlx::query("ROLLBACK").execute(&mut other).await.unwrap();
    drop(other);
    let next = ledger
        .accept(request("create_invoice", "billing", r#"{"amount":1}"#))
        .await
        .unwrap();
    assert!(matches!(next, AcceptOutcome::Created { .. }));
    assert!(verify(&ledger).await.is_valid());
}

/// The database name of a PostgreSQL store URL.
fn database_of(url: &str) -> String {
    url.rsplit_once('/').unwrap().1.to_string()
}

async fn admin() -> sqlx::PgConnection {
    sqlx::PgConnection::connect(&pg_admin_url()).await.unwrap()
}

/// Ends every session on `db` (what a server restart does to them).
async fn kill_sessions(db: &str) {
    sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
    )
    .bind(db)
    .execute(&mut admin().await)
    .await
    .unwrap();
}

async fn heartbeat_at(db_url: &str, instance: &str) -> i64 {
    let mut conn = sqlx::PgConnection::connect(db_url).await.unwrap();
    sqlx::query_scalar("SELECT heartbeat_at FROM instances WHERE id = $1")
        .bind(instance)
        .fetch_one(&mut conn)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_writer_reconnects_and_its_lease_lapses_only_while_it_cannot_write() {
    let (url, _guard) = fresh_store(Backend::Postgres).await;
    let db = database_of(&url);
    let ledger = open(&url).await; // lease 1 s: a heartbeat every 333 ms
    ledger
        .accept(request("create_invoice", "billing", r#"{"amount":1}"#))
        .await
        .unwrap();

    // The server goes away for the writer, and stays away: no new connection is allowed.
    let mut a = admin().await;
    sqlx::query(&format!("ALTER DATABASE {db} ALLOW_CONNECTIONS false"))
        .execute(&mut a)
        .await
        .unwrap();
    kill_sessions(&db).await;
    let refused = ledger
        .accept(request("create_invoice", "billing", r#"{"amount":2}"#))
        .await
        .expect_err("nothing can be written while the database refuses connections");
    assert_eq!(
        refused.fault(),
        Some(StorageFault::Unavailable),
        "{refused}"
    );
    // The lease is not renewed meanwhile (a replica may take over): read it once the outage
    // has lasted several leases.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    sqlx::query(&format!("ALTER DATABASE {db} ALLOW_CONNECTIONS true"))
        .execute(&mut a)
        .await
        .unwrap();
    let stale = heartbeat_at(&url, ledger.instance()).await;
    let age = now().0 - stale;
    assert!(
        age >= 1200,
        "the heartbeat went on while the writer could not write (last {age} ms ago)"
    );

    // Back: the writer reconnects by itself (with backoff) and the lease is renewed again.
    let deadline = Instant::now() + Duration::from_secs(20);
    let created = loop {
        match ledger
            .accept(request("create_invoice", "billing", r#"{"amount":2}"#))
            .await
        {
            Ok(outcome) => break outcome,
            Err(e) => {
                assert_eq!(e.fault(), Some(StorageFault::Unavailable), "{e}");
                assert!(
                    Instant::now() < deadline,
                    "the writer never reconnected: {e}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert!(matches!(created, AcceptOutcome::Created { .. }));
    tokio::time::sleep(Duration::from_millis(900)).await;
    let renewed = heartbeat_at(&url, ledger.instance()).await;
    assert!(
        renewed > stale,
        "the lease was not renewed after reconnecting"
    );
    assert!(verify(&ledger).await.is_valid());
}

/// What a request's answer said about its record.
enum Said {
    Recorded(postern_core::ExecutionId),
    Nothing,
    Unknown,
}

/// Worker `w`'s `n`th request (every other one dispatched).
fn nth(w: usize, n: usize) -> postern_ledger::AcceptRequest {
    let args = format!(r#"{{"customer":"w{w}-{n}","amount":1}}"#);
    if n.is_multiple_of(2) {
        dispatched_request("create_invoice", "billing", &args)
    } else {
        request("create_invoice", "billing", &args)
    }
}

/// The writer's connection is cut again and again while requests keep coming, so cuts land
/// before, inside and after commits that also open the next batch (`writer/optimistic.rs`).
/// Every answer must stay true: a request told it was recorded is found again, and one told
/// nothing of it was recorded is not (asking again creates it); only an answer that says
/// "unknown" may go either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_stay_true_when_the_writers_connection_is_cut_under_load() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let (url, _guard) = fresh_store(Backend::Postgres).await;
    let db = database_of(&url);
    let ledger = std::sync::Arc::new(open(&url).await);
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..16)
        .map(|w| {
            let (ledger, stop) = (ledger.clone(), stop.clone());
            tokio::spawn(async move {
                let mut said = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    said.push(match ledger.accept(nth(w, said.len())).await {
                        Ok(AcceptOutcome::Created { execution: s, .. }) => Said::Recorded(s.id),
                        Ok(other) => panic!("a new request met an execution: {other:?}"),
                        Err(e) if e.to_string().contains("is unknown") => Said::Unknown,
                        Err(_) => Said::Nothing,
                    });
                }
                // The cuts are over: each request asked again says what was recorded.
                let mut counts = [0; 3];
                for (n, said) in said.into_iter().enumerate() {
                    let again = accept_when_back(&ledger, nth(w, n)).await;
                    match (said, again) {
                        (Said::Recorded(id), AcceptOutcome::Existing { execution, .. }) => {
                            assert_eq!(execution.id, id, "w{w}-{n}");
                            counts[0] += 1;
                        }
                        (Said::Nothing, AcceptOutcome::Created { .. }) => counts[1] += 1,
                        (Said::Unknown, _) => counts[2] += 1,
                        (Said::Recorded(_), again) => {
                            panic!("w{w}-{n} was recorded, then not found: {again:?}")
                        }
                        (Said::Nothing, again) => {
                            panic!("w{w}-{n} was told nothing was recorded, yet it was: {again:?}")
                        }
                    }
                }
                counts
            })
        })
        .collect();
    // Most cuts let the writer reconnect at once (it runs the cut batch again); every fifth
    // keeps the server away for a moment, so requests are refused meanwhile.
    let mut a = admin().await;
    let allow = |yes: bool| format!("ALTER DATABASE {db} ALLOW_CONNECTIONS {yes}");
    for i in 0..30 {
        tokio::time::sleep(Duration::from_millis(40 + (i * 37) % 60)).await;
        let away = i % 5 == 4;
        if away {
            sqlx::query(&allow(false)).execute(&mut a).await.unwrap();
        }
        kill_sessions(&db).await;
        if away {
            tokio::time::sleep(Duration::from_millis(20)).await;
            sqlx::query(&allow(true)).execute(&mut a).await.unwrap();
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut counts = [0; 3];
    for w in workers {
        for (total, n) in counts.iter_mut().zip(w.await.unwrap()) {
            *total += n;
        }
    }
    let [recorded, nothing, unknown] = counts;
    eprintln!("recorded {recorded}, nothing recorded {nothing}, unknown {unknown}");
    assert!(recorded > 100, "too few requests got through: {recorded}");
    assert!(nothing > 0, "no cut ever refused a request");
    assert!(verify(&ledger).await.is_valid());
}

/// Accepts `req`, waiting out the writer's reconnection.
async fn accept_when_back(ledger: &Ledger, req: postern_ledger::AcceptRequest) -> AcceptOutcome {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match ledger.accept(req.clone()).await {
            Ok(outcome) => return outcome,
            // A lease that lapsed while the writer could not renew it comes back with it.
            Err(e)
                if Instant::now() < deadline
                    && (e.fault().is_some_and(|f| f.is_transient())
                        || matches!(e, postern_ledger::LedgerError::Fenced { .. })) =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(e) => panic!("the ledger did not come back: {e}"),
        }
    }
}
