//! `audit verify --store`: the whole audit record checked as stored, and the rows it governs.
//! SQLite's store is read straight through rusqlite (`scan.rs`); PostgreSQL's through the pool.

use sqlx::AnyPool;

use super::{scan, StoreReader};
use crate::db::{self, RowAccess};
use crate::error::LedgerError;
use crate::rows;

impl StoreReader {
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
        check_decision_rows(&self.pool, &mut executions).await?;
        if let Some(file) = &self.sqlite_file {
            let checks = scan::Checks {
                verifier: &mut verifier,
                results: &mut results,
                rows: &mut executions,
            };
            scan::verify_sqlite(file, checks, &mut |events| tick(events, total))?;
            return Ok(finish(verifier, results, executions));
        }
        check_rows(&self.pool, &mut executions).await?;
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
}

/// Every execution row, for [`postern_audit::RowCheck`].
async fn check_rows(
    pool: &AnyPool,
    check: &mut postern_audit::RowCheck,
) -> Result<(), LedgerError> {
    // Intent slots and rows in one snapshot (as the SQLite scan reads them), so a slot
    // removed with its row by retention meanwhile is not taken for a slot without a row.
    let mut snapshot = pool.begin().await?;
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
    pool: &AnyPool,
    check: &mut postern_audit::RowCheck,
) -> Result<(), LedgerError> {
    let pins = sqlx::query("SELECT upstream, tool, digest, accepted_by FROM upstream_tool_pins")
        .fetch_all(pool)
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
        .fetch_optional(pool)
        .await?;
    if let Some(row) = since {
        check.runs_chained_since(rows::get_i64(&row, "applied_at")?);
    }
    let runs = sqlx::query("SELECT id, authorized_by, authorized_at, revoked_by, revoked_at FROM runs WHERE authorized_by IS NOT NULL OR revoked_by IS NOT NULL")
        .fetch_all(pool)
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
