//! Reading a store without changing it. The audit verifier opens a store this way, so checking
//! the evidence never adds to it: no migrations, no instance row, no recovery scan, and only
//! read-only connections. The ledger reads its own chains, checkpoints and events through the
//! same code.

use std::path::{Path, PathBuf};

use postern_audit::{ChainedEvent, Checkpoint};
use postern_core::ExecutionId;

use crate::model::{CallRecord, ExecutionSummary, ExecutionView, ListFilter, Run, StoreHealth};
use postern_core::Timestamp;
use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyPool, ConnectOptions, Executor};

use crate::db;
use crate::db::RowAccess;
use crate::dialect::Dialect;
use crate::error::LedgerError;
use crate::rows;
use crate::schema;

mod scan;

/// A store's audit record (chain heads, checkpoints, events), read-only.
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
                        conn.execute(crate::NO_PARALLEL_READS).await?;
                        conn.execute(crate::NO_JIT).await?;
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

    /// Verifies the whole audit record as stored: every chain from its first event to its
    /// head (around what retention pruned), the signed checkpoints, and every stored result
    /// against the digest its event chained. `tick(events, total)` reports progress.
    pub async fn verify(
        &self,
        mut verifier: postern_audit::Verifier,
        mut tick: impl FnMut(u64, u64),
    ) -> Result<postern_audit::Report, LedgerError> {
        let heads = self.chain_heads().await?;
        let total: u64 = heads.iter().map(|(_, h)| *h).sum();
        for (chain, head) in heads {
            if head > 0 {
                verifier.request(postern_audit::ChainRange {
                    chain,
                    from: 1,
                    to: head,
                });
            }
        }
        // What retention removed is known before the events it left gaps between.
        for r in self.pruned_ranges().await? {
            verifier.pruned(r);
        }
        let mut events = 0u64;
        let mut results = postern_audit::ResultCheck::new();
        // Rows first: events are only appended, so rows read before them can be judged.
        let mut executions = postern_audit::RowCheck::new();
        // Checkpoints before events: the verifier then keeps the times of only the events
        // after them (for the unsigned-history rule).
        for c in self.checkpoints().await? {
            verifier.checkpoint(&c);
        }
        self.check_decision_rows(&mut executions).await?;
        if let Some(file) = &self.sqlite_file {
            let checks = scan::Checks {
                verifier: &mut verifier,
                results: &mut results,
                rows: &mut executions,
            };
            scan::verify_sqlite(file, checks, &mut |events| tick(events, total))?;
            return Ok(finish(verifier, results, executions));
        }
        self.check_rows(&mut executions).await?;
        self.scan_events(|row| match row {
            Ok(e) => {
                verifier.event(&e);
                results.event(&e);
                executions.event(&e);
                events += 1;
                if events.is_multiple_of(4096) {
                    tick(events, total);
                }
            }
            Err((pos, reason)) => verifier.malformed(pos as u64, reason),
        })
        .await?;
        self.scan_results(|reference, body| results.stored(reference, body))
            .await?;
        Ok(finish(verifier, results, executions))
    }

    /// A run (the Sessions log).
    pub async fn run(&self, id: &str) -> Result<Option<Run>, LedgerError> {
        sqlx::query(&format!(
            "SELECT {} FROM runs WHERE id = $1",
            rows::RUN_COLUMNS
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?
        .as_ref()
        .map(rows::run)
        .transpose()
    }

    /// Runs (the Sessions log), newest first.
    pub async fn runs(&self, limit: u32) -> Result<Vec<Run>, LedgerError> {
        sqlx::query(&format!(
            "SELECT {} FROM runs ORDER BY started_at DESC LIMIT {}",
            rows::RUN_COLUMNS,
            limit.max(1)
        ))
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(rows::run)
        .collect()
    }

    /// The calls that reached an execution, oldest first.
    pub async fn calls_of(&self, id: ExecutionId) -> Result<Vec<CallRecord>, LedgerError> {
        sqlx::query(&format!(
            "SELECT {} FROM calls WHERE execution_id = $1 ORDER BY id",
            rows::CALL_COLUMNS
        ))
        .bind(id.to_string())
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(rows::call)
        .collect()
    }

    /// A run's calls, oldest first (at most `limit`).
    pub async fn calls_in(&self, run: &str, limit: u32) -> Result<Vec<CallRecord>, LedgerError> {
        sqlx::query(&format!(
            "SELECT {} FROM calls WHERE run_id = $1 ORDER BY id LIMIT {}",
            rows::CALL_COLUMNS,
            limit.max(1)
        ))
        .bind(run)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(rows::call)
        .collect()
    }

    /// Every stored result body, as `(results/<execution>/<attempt>, body)`.
    pub async fn scan_results(&self, mut each: impl FnMut(&str, &[u8])) -> Result<(), LedgerError> {
        let rows = sqlx::query("SELECT execution_id, attempt, body FROM results")
            .fetch_all(&self.pool)
            .await?;
        for row in &rows {
            let id = rows::get_str(row, "execution_id")?;
            let attempt = rows::get_i64(row, "attempt")?;
            let body = db::RowAccess::blob(row, "body")?;
            each(&format!("results/{id}/{attempt}"), &body);
        }
        Ok(())
    }

    /// Every execution row, for [`postern_audit::RowCheck`].
    async fn check_rows(&self, check: &mut postern_audit::RowCheck) -> Result<(), LedgerError> {
        // Intent slots and rows in one snapshot (as the SQLite scan reads them), so a slot
        // removed with its row by retention meanwhile is not taken for a slot without a row.
        let mut snapshot = self.pool.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            .execute(&mut *snapshot)
            .await?;
        let slots = sqlx::query("SELECT execution_id, actor, fingerprint FROM intents")
            .fetch_all(&mut *snapshot)
            .await?;
        for row in &slots {
            check.intent(
                &rows::get_str(row, "execution_id")?,
                &rows::get_str(row, "actor")?,
                &rows::get_str(row, "fingerprint")?,
            );
        }
        let found = sqlx::query(
            "SELECT id, state, n, dispatches, record, fingerprint, actor, tool FROM executions",
        )
        .fetch_all(&mut *snapshot)
        .await?;
        snapshot.commit().await?;
        for row in &found {
            let id = rows::get_str(row, "id")?;
            let Ok(id) = id.parse() else {
                continue; // not an execution id at all: the verifier's events say what is there
            };
            let count =
                |name: &str| rows::get_i64(row, name).map(|v| u32::try_from(v).unwrap_or(u32::MAX));
            check.row(&postern_audit::ExecutionRow {
                id,
                state: &rows::get_str(row, "state")?,
                events: count("n")?,
                dispatches: count("dispatches")?,
                record: &rows::get_str(row, "record")?,
                fingerprint: &rows::get_str(row, "fingerprint")?,
                actor: &rows::get_str(row, "actor")?,
                tool: &rows::get_str(row, "tool")?,
            });
        }
        Ok(())
    }

    /// The rows operator decisions govern: each tool pin, and each run an operator
    /// authorized or revoked (few rows: read whole).
    async fn check_decision_rows(
        &self,
        check: &mut postern_audit::RowCheck,
    ) -> Result<(), LedgerError> {
        let pins =
            sqlx::query("SELECT upstream, tool, digest, accepted_by FROM upstream_tool_pins")
                .fetch_all(&self.pool)
                .await?;
        for row in &pins {
            check.pin(&postern_audit::PinRow {
                upstream: &rows::get_str(row, "upstream")?,
                tool: &rows::get_str(row, "tool")?,
                digest: &rows::get_str(row, "digest")?,
                accepted_by: row.opt_text("accepted_by")?.as_deref(),
            });
        }
        let since = sqlx::query("SELECT applied_at FROM schema_migrations WHERE version = 12")
            .fetch_optional(&self.pool)
            .await?;
        if let Some(row) = since {
            check.runs_chained_since(rows::get_i64(&row, "applied_at")?);
        }
        let runs = sqlx::query("SELECT id, authorized_by, authorized_at, revoked_by, revoked_at FROM runs WHERE authorized_by IS NOT NULL OR revoked_by IS NOT NULL")
            .fetch_all(&self.pool)
            .await?;
        for row in &runs {
            check.run(&postern_audit::RunRow {
                id: &rows::get_str(row, "id")?,
                authorized_by: row.opt_text("authorized_by")?.as_deref(),
                authorized_at: row.opt_int("authorized_at")?,
                revoked_by: row.opt_text("revoked_by")?.as_deref(),
                revoked_at: row.opt_int("revoked_at")?,
            });
        }
        Ok(())
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

    /// Every chain with its head position.
    pub async fn chain_heads(&self) -> Result<Vec<(String, u64)>, LedgerError> {
        // SQLite's writer reads its head from the last event and leaves the head row alone, so
        // there the events say where each chain ends (an export's header once said nothing).
        let q = if self.sqlite_file.is_some() {
            "SELECT chain, MAX(seq) AS head_seq FROM events GROUP BY chain ORDER BY chain"
        } else {
            "SELECT chain, head_seq FROM chains ORDER BY chain"
        };
        sqlx::query(q)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|r| {
                Ok((
                    rows::get_str(r, "chain")?,
                    rows::get_i64(r, "head_seq")? as u64,
                ))
            })
            .collect()
    }

    /// Every chain's last event (seq and hash), from the events themselves: what an export's
    /// signed header names as the end of each chain.
    pub async fn chain_head_events(&self) -> Result<Vec<postern_audit::ChainHead>, LedgerError> {
        sqlx::query("SELECT e.chain AS chain, e.seq AS seq, e.hash AS hash FROM events e JOIN (SELECT chain, MAX(seq) AS head FROM events GROUP BY chain) h ON e.chain = h.chain AND e.seq = h.head ORDER BY e.chain")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|r| {
                Ok(postern_audit::ChainHead {
                    chain: rows::get_str(r, "chain")?,
                    seq: rows::get_i64(r, "seq")? as u64,
                    hash: rows::hash_from_hex(&rows::get_str(r, "hash")?)?,
                })
            })
            .collect()
    }

    /// Every signed pruned-range statement (what retention left of removed events).
    pub async fn pruned_ranges(&self) -> Result<Vec<postern_audit::PrunedRange>, LedgerError> {
        sqlx::query("SELECT chain, from_seq, to_seq, before_hash, to_hash, at, key_id, signature FROM pruned_ranges ORDER BY chain, from_seq")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(rows::pruned_range)
            .collect()
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

    /// Every signed checkpoint, by chain and position.
    pub async fn checkpoints(&self) -> Result<Vec<Checkpoint>, LedgerError> {
        sqlx::query(&format!(
            "SELECT {} FROM checkpoints ORDER BY chain, seq",
            rows::CHECKPOINT_COLUMNS
        ))
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(rows::checkpoint)
        .collect()
    }

    /// Streams every event in storage order, a page at a time. A row that cannot be decoded is
    /// passed as an error with its position so a verifier can report it and go on.
    pub async fn scan_events(
        &self,
        mut each: impl FnMut(Result<ChainedEvent, (i64, String)>),
    ) -> Result<(), LedgerError> {
        if let Some(file) = &self.sqlite_file {
            return scan_sqlite_events(file, each);
        }
        let mut after: i64 = 0;
        loop {
            let q = format!(
                "SELECT * FROM (SELECT ROW_NUMBER() OVER (ORDER BY chain, seq) AS pos, {cols} FROM events ORDER BY chain, seq) AS t WHERE pos > $1 ORDER BY pos LIMIT 10000",
                cols = rows::EVENT_COLUMNS
            );
            let page = sqlx::query(&q).bind(after).fetch_all(&self.pool).await?;
            if page.is_empty() {
                return Ok(());
            }
            for row in &page {
                after = rows::get_i64(row, "pos")?;
                each(rows::event(row).map_err(|e| (after, e.to_string())));
            }
        }
    }
}

/// The report: the chain's, then what the stored results and rows add.
fn finish(
    verifier: postern_audit::Verifier,
    results: postern_audit::ResultCheck,
    executions: postern_audit::RowCheck,
) -> postern_audit::Report {
    let mut report = verifier.finish();
    report.add_breaks(results.finish());
    report.add_breaks(executions.finish());
    report
}

/// The file a `sqlite:` URL names.
pub(crate) fn sqlite_path(url: &str) -> &str {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .unwrap_or(url);
    rest.split('?').next().unwrap_or(rest)
}

/// SQLite's event scan: in physical insertion order (rowid), so a moved row shows as a reorder;
/// one read transaction, straight through rusqlite on the caller's thread (through sqlx every
/// row crossed to its worker thread and back: ~19 µs a row, against ~2 µs here).
fn scan_sqlite_events(
    file: &Path,
    mut each: impl FnMut(Result<ChainedEvent, (i64, String)>),
) -> Result<(), LedgerError> {
    let sqlite = crate::error::sqlite_error;
    // One thread uses this connection: no mutex (column lookups by name took it every time).
    let flags =
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = rusqlite::Connection::open_with_flags(file, flags).map_err(sqlite)?;
    let mut stmt = conn
        .prepare(&format!(
            "SELECT rowid AS pos, {} FROM events ORDER BY rowid",
            rows::EVENT_COLUMNS
        ))
        .map_err(sqlite)?;
    let names: Vec<String> = stmt.column_names().iter().map(|n| n.to_string()).collect();
    let mut found = stmt.query([]).map_err(sqlite)?;
    while let Some(row) = found.next().map_err(sqlite)? {
        let pos: i64 = row.get(0).map_err(sqlite)?;
        let row = db::NamedRow { row, names: &names };
        each(rows::event(&row).map_err(|e| (pos, e.to_string())));
    }
    Ok(())
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
