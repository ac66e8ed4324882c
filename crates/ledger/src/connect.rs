//! Opening a store to write it: the first connection (its schema migrated), this process's
//! instance row, and the settings every connection gets.

use sqlx::any::AnyConnectOptions;
use sqlx::{AnyConnection, ConnectOptions, Connection, Executor};

use crate::dialect::Dialect;
use crate::error::LedgerError;
use crate::rows;
use crate::schema;
use crate::writer::now_millis;

/// The settings every connection to the store gets (the read pool's and the first).
pub(crate) async fn prepare_connection(
    conn: &mut AnyConnection,
    dialect: Dialect,
) -> Result<(), sqlx::Error> {
    if dialect == Dialect::Sqlite {
        // WAL + FULL: a commit is on disk when it returns. busy_timeout lets two processes
        // on one file take turns instead of failing.
        // Small pages: a commit writes every page it dirtied to the WAL before its fsync, and
        // an execution's rows are small. Only takes effect when the file is created.
        conn.execute("PRAGMA page_size = 4096").await?;
        conn.execute("PRAGMA journal_mode = WAL").await?;
        conn.execute("PRAGMA synchronous = FULL").await?;
        conn.execute("PRAGMA busy_timeout = 30000").await?;
    } else {
        conn.execute(NO_PARALLEL_READS).await?;
        conn.execute(NO_JIT).await?;
    }
    Ok(())
}

/// The record's reads are point lookups and first pages. Where PostgreSQL has no statistics
/// yet (a table just filled, autovacuum off) it estimates an execution's events in the tens of
/// thousands: it planned the lookup as a parallel scan (starting the workers cost 60 ms of a
/// 61 ms `activity trace` on a million executions) and, past `jit_above_cost`, JIT-compiled
/// it (18 ms of a 38 ms trace). Without either the same lookup takes under a millisecond.
pub(crate) const NO_PARALLEL_READS: &str = "SET max_parallel_workers_per_gather = 0";
pub(crate) const NO_JIT: &str = "SET jit = off";

/// The first connection to the store, its schema migrated: it becomes PostgreSQL's write
/// connection, and the options it was opened with open the read pool.
pub(crate) async fn connect_migrated(
    url: &str,
    dialect: Dialect,
) -> Result<(AnyConnectOptions, AnyConnection), LedgerError> {
    let connect_url = if dialect == Dialect::Sqlite && !url.contains('?') {
        format!("{url}?mode=rwc")
    } else {
        url.to_string()
    };
    let connect_options: AnyConnectOptions = connect_url.parse()?;
    let connect_options = connect_options.disable_statement_logging();
    let mut conn = AnyConnection::connect_with(&connect_options).await?;
    prepare_connection(&mut conn, dialect).await?;
    migrate(&mut conn, dialect).await?;
    Ok((connect_options, conn))
}

/// Records this process as a new instance of the store, with a fresh id.
pub(crate) async fn register_instance(conn: &mut AnyConnection) -> Result<String, LedgerError> {
    let instance = format!("inst-{}", uuid::Uuid::now_v7().simple());
    let now = now_millis();
    sqlx::query("INSERT INTO instances (id, started_at, heartbeat_at) VALUES ($1, $2, $2)")
        .bind(&instance)
        .bind(now)
        .execute(conn)
        .await?;
    Ok(instance)
}

/// Applies the migrations the store lacks, each in its own transaction (one another process
/// applied meanwhile is taken as applied).
async fn migrate(conn: &mut AnyConnection, dialect: Dialect) -> Result<(), LedgerError> {
    conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)").await?;
    let applied: Vec<i64> = sqlx::query("SELECT version FROM schema_migrations ORDER BY version")
        .fetch_all(&mut *conn)
        .await?
        .iter()
        .map(|r| rows::get_i64(r, "version"))
        .collect::<Result<_, _>>()?;
    let known = schema::latest_version();
    if let Some(&found) = applied.iter().max() {
        if found > known {
            return Err(LedgerError::SchemaTooNew { found, known });
        }
    }
    for m in schema::MIGRATIONS
        .iter()
        .filter(|m| !applied.contains(&m.version))
    {
        let fail = |source| LedgerError::Migration {
            version: m.version,
            name: m.name,
            source,
        };
        conn.execute(dialect.begin()).await.map_err(fail)?;
        let result = async {
            conn.execute(m.sql(dialect)).await?;
            sqlx::query(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
            )
            .bind(m.version)
            .bind(m.name)
            .bind(now_millis())
            .execute(&mut *conn)
            .await?;
            Ok::<_, sqlx::Error>(())
        }
        .await;
        match result {
            Ok(()) => conn.execute("COMMIT").await.map(|_| ()).map_err(fail)?,
            Err(e) => {
                let _ = conn.execute("ROLLBACK").await;
                // Another process may have applied it concurrently; re-check before failing.
                let done = sqlx::query("SELECT version FROM schema_migrations WHERE version = $1")
                    .bind(m.version)
                    .fetch_optional(&mut *conn)
                    .await?
                    .is_some();
                if !done {
                    return Err(fail(e));
                }
            }
        }
    }
    Ok(())
}
