//! Reading a store without changing it: [`StoreReader`], a reader that cannot write. The audit
//! verifier opens a store this way, so checking the evidence never adds to it: no migrations, no
//! instance row, no recovery scan, and only read-only connections. A ledger reads through one
//! over its own pool ([`Ledger::read`](crate::Ledger::read)).

use std::path::PathBuf;

use postern_core::{ExecutionId, Timestamp};
use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyPool, ConnectOptions, Executor};

use crate::dialect::Dialect;
use crate::error::LedgerError;
use crate::model::{ExecutionSummary, ExecutionView, ListFilter, StoreHealth, ToolPin};
use crate::rows;
use crate::schema;

mod budgets;
mod chains;
mod runs;
mod scan;
mod transport;
mod verify;

/// A store, read: executions (here), runs and calls (`runs.rs`), the audit record
/// (`chains.rs`, checked whole by `verify.rs`) and transport state (`transport.rs`). It has no
/// write path.
pub struct StoreReader {
    pool: AnyPool,
    /// SQLite: the database file (the event scan reads it directly); `None` on PostgreSQL.
    sqlite_file: Option<PathBuf>,
}

impl StoreReader {
    /// Opens the store at `url` for reading only. A SQLite file must already exist, and the
    /// store's schema must be the one this build writes (it is never migrated from here).
    pub async fn open(url: &str) -> Result<StoreReader, LedgerError> {
        sqlx::any::install_default_drivers();
        let dialect =
            Dialect::from_url(url).ok_or_else(|| LedgerError::UnsupportedUrl(url.to_string()))?;
        let sqlite_file = (dialect == Dialect::Sqlite).then(|| PathBuf::from(sqlite_path(url)));
        let connect_url = match &sqlite_file {
            Some(file) if !file.is_file() => {
                return Err(LedgerError::NoStore {
                    url: url.to_string(),
                    reason: format!("{} does not exist", file.display()),
                })
            }
            Some(file) => format!("sqlite://{}?mode=ro", file.display()),
            None => url.to_string(),
        };
        let options: AnyConnectOptions = connect_url.parse()?;
        let postgres = dialect == Dialect::Postgres;
        let pool = AnyPoolOptions::new()
            .max_connections(2)
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    if postgres {
                        conn.execute("SET default_transaction_read_only = on")
                            .await?;
                        conn.execute(crate::connect::NO_PARALLEL_READS).await?;
                        conn.execute(crate::connect::NO_JIT).await?;
                    }
                    Ok(())
                })
            })
            .connect_with(options.disable_statement_logging())
            .await?;
        let reader = StoreReader { pool, sqlite_file };
        reader.check_schema(url).await?;
        Ok(reader)
    }

    /// One execution's row.
    pub async fn summary(&self, id: ExecutionId) -> Result<Option<ExecutionSummary>, LedgerError> {
        let q = format!(
            "SELECT {} FROM executions WHERE id = $1",
            rows::SUMMARY_COLUMNS
        );
        sqlx::query(&q)
            .bind(id.to_string())
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(rows::summary)
            .transpose()
    }

    /// Everything about one execution.
    pub async fn execution(&self, id: ExecutionId) -> Result<Option<ExecutionView>, LedgerError> {
        let q = format!(
            "SELECT {}, record FROM executions WHERE id = $1",
            rows::SUMMARY_COLUMNS
        );
        let Some(row) = sqlx::query(&q)
            .bind(id.to_string())
            .fetch_optional(&self.pool)
            .await?
        else {
            return Ok(None);
        };
        let summary = rows::summary(&row)?;
        let record = serde_json::from_str(&rows::get_str(&row, "record")?)
            .map_err(|e| LedgerError::Corrupt(e.to_string()))?;
        let q = format!(
            "SELECT {} FROM events WHERE execution_id = $1 ORDER BY n",
            rows::EVENT_COLUMNS
        );
        let events = sqlx::query(&q)
            .bind(id.to_string())
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(rows::event)
            .collect::<Result<Vec<_>, _>>()?;
        let result = sqlx::query("SELECT attempt, digest, size, truncated, body FROM results WHERE execution_id = $1 ORDER BY attempt DESC LIMIT 1")
            .bind(id.to_string())
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(rows::result)
            .transpose()?;
        Ok(Some(ExecutionView {
            summary,
            record,
            events,
            result,
        }))
    }

    /// Executions, newest first (by id: UUIDv7, minted when the ledger accepted them).
    pub async fn list(&self, filter: &ListFilter) -> Result<Vec<ExecutionSummary>, LedgerError> {
        let (conditions, binds) = conditions(filter);
        let q = format!(
            "SELECT {} FROM executions WHERE 1 = 1{conditions} ORDER BY id DESC LIMIT {}",
            rows::SUMMARY_COLUMNS,
            if filter.limit == 0 { 100 } else { filter.limit }
        );
        let mut query = sqlx::query(&q);
        for b in &binds {
            query = query.bind(b);
        }
        query
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(rows::summary)
            .collect()
    }

    /// How many executions `filter` matches, whatever its `limit` (what a page leaves out).
    pub async fn count(&self, filter: &ListFilter) -> Result<u64, LedgerError> {
        let (conditions, binds) = conditions(filter);
        let q = format!("SELECT COUNT(*) AS n FROM executions WHERE 1 = 1{conditions}");
        let mut query = sqlx::query(&q);
        for b in &binds {
            query = query.bind(b);
        }
        let row = query.fetch_one(&self.pool).await?;
        Ok(u64::try_from(rows::get_i64(&row, "n")?).unwrap_or(0))
    }

    /// Every upstream tool's accepted version.
    pub async fn tool_pins(&self) -> Result<Vec<ToolPin>, LedgerError> {
        sqlx::query("SELECT upstream, tool, digest, definition, pinned_at, accepted_by FROM upstream_tool_pins ORDER BY upstream, tool")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(rows::tool_pin)
            .collect()
    }

    /// The reader a ledger keeps over its own pool.
    pub(crate) fn over(pool: AnyPool, sqlite_file: Option<PathBuf>) -> Self {
        StoreReader { pool, sqlite_file }
    }

    async fn check_schema(&self, url: &str) -> Result<(), LedgerError> {
        let found: Option<i64> =
            sqlx::query("SELECT MAX(version) AS version FROM schema_migrations")
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| LedgerError::NoStore {
                    url: url.to_string(),
                    reason: format!("it holds no Postern ledger ({e})"),
                })?
                .map(|r| rows::get_i64(&r, "version"))
                .transpose()?;
        let known = schema::latest_version();
        match found {
            Some(found) if found > known => Err(LedgerError::SchemaTooNew { found, known }),
            Some(found) if found < known => Err(LedgerError::SchemaTooOld { found, known }),
            Some(_) => Ok(()),
            None => Err(LedgerError::NoStore {
                url: url.to_string(),
                reason: "it holds no Postern ledger (no schema version)".into(),
            }),
        }
    }

    /// The figures an operator watches (`postern status`, `/metrics` gauges): each an indexed
    /// count of the few executions in a waiting state, so it stays cheap on a million rows.
    pub async fn health(&self, now: Timestamp) -> Result<StoreHealth, LedgerError> {
        // Literal states, never bound: only then can the planner use the partial index that
        // holds just the executions in that state (migration 9), whatever the store's size.
        let count = |state: &'static str, since: Option<i64>| {
            let mut sql = format!("SELECT COUNT(*) AS n FROM executions WHERE state = '{state}'");
            if let Some(t) = since {
                sql.push_str(&format!(" AND state_since >= {t}"));
            }
            async move {
                let row = sqlx::query(&sql).fetch_one(&self.pool).await?;
                Ok::<u64, LedgerError>(u64::try_from(rows::get_i64(&row, "n")?).unwrap_or(0))
            }
        };
        let awaiting_approval = count("awaiting_approval", None).await?;
        let needs_review = count("needs_review", None).await?;
        let outcome_unknown = count("outcome_unknown", None).await?;
        let dispatched = count("dispatched", None).await?;
        let unknown_last_hour = count("outcome_unknown", Some(now.0 - 3_600_000)).await?;
        let oldest_approval = sqlx::query(
            "SELECT MIN(state_since) AS at FROM executions WHERE state = 'awaiting_approval'",
        )
        .fetch_one(&self.pool)
        .await?;
        let oldest_approval_since = rows::get_opt_i64(&oldest_approval, "at")?.map(Timestamp);
        let last_checkpoint = sqlx::query(&format!(
            "SELECT {} FROM checkpoints ORDER BY at DESC LIMIT 1",
            rows::CHECKPOINT_COLUMNS
        ))
        .fetch_optional(&self.pool)
        .await?
        .as_ref()
        .map(rows::checkpoint)
        .transpose()?;
        Ok(StoreHealth {
            awaiting_approval,
            oldest_approval_since,
            needs_review,
            outcome_unknown,
            unknown_last_hour,
            dispatched,
            last_checkpoint,
        })
    }
}

/// The file a `sqlite:` URL names.
pub(crate) fn sqlite_path(url: &str) -> &str {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .unwrap_or(url);
    rest.split('?').next().unwrap_or(rest)
}

/// The smallest execution id a ledger could mint at `t` (a UUIDv7's first 48 bits are its
/// millisecond time).
fn first_id_at(t: Timestamp) -> ExecutionId {
    let millis = u128::from(u64::try_from(t.0.max(0)).unwrap_or(0) & 0xffff_ffff_ffff);
    ExecutionId::from_bytes((millis << 80).to_be_bytes())
}

/// The `AND …` conditions of `filter` and the values they bind (`$1`, `$2`, …).
fn conditions(filter: &ListFilter) -> (String, Vec<String>) {
    let (mut q, mut binds) = (String::new(), Vec::new());
    for (col, val) in [
        ("actor", &filter.actor),
        ("state", &filter.state),
        ("run_id", &filter.run_id),
        ("tool", &filter.tool),
        ("fingerprint", &filter.fingerprint),
        ("operation_key", &filter.operation_key),
    ] {
        if let Some(v) = val {
            binds.push(v.clone());
            q.push_str(&format!(" AND {col} = ${}", binds.len()));
        }
    }
    // Ids are UUIDv7 in fixed-width base32, so they sort by acceptance time: a time range
    // and a page boundary are both ranges of the primary key.
    let bounds = [
        (">=", filter.accepted_from.map(first_id_at)),
        ("<", filter.accepted_to.map(first_id_at)),
        ("<", filter.before),
    ];
    for (op, bound) in bounds {
        if let Some(id) = bound {
            binds.push(id.to_string());
            q.push_str(&format!(" AND id {op} ${}", binds.len()));
        }
    }
    (q, binds)
}
