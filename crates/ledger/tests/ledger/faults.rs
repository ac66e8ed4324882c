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
    assert!(matches!(next, AcceptOutcome::Created(_)));
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
    assert!(matches!(created, AcceptOutcome::Created(_)));
    tokio::time::sleep(Duration::from_millis(900)).await;
    let renewed = heartbeat_at(&url, ledger.instance()).await;
    assert!(
        renewed > stale,
        "the lease was not renewed after reconnecting"
    );
    assert!(verify(&ledger).await.is_valid());
}
