//! The writer's records that are not an execution's events: runs (and operators' decisions on
//! them), notices (with tool pins) and stream state.

use std::sync::OnceLock;

use postern_core::{EventKind, ExecutionId, Timestamp};
use serde_json::Value;

use super::transaction::Transaction;
use crate::db::{params, WriteConn};
use crate::error::LedgerError;
use crate::model::{Run, RunDecision, RunEnd, ToolPin};
use crate::streams::StreamWrite;

/// The writer's part that writes runs, notices and stream state: it borrows the open
/// transaction.
pub(super) struct Records<'t, C> {
    pub(super) tx: &'t mut Transaction<C>,
}

impl<C: WriteConn> Records<'_, C> {
    /// A run seen again is marked seen; one that ended only because it idled or its gateway
    /// stopped is resumed (its start stays). Only by its own actor.
    pub(super) async fn start_run(&mut self, run: &Run) -> Result<(), LedgerError> {
        self.tx
            .later(
                start_run_sql(),
                params![
                    &run.id,
                    &run.actor,
                    &run.client_name,
                    &run.client_version,
                    &run.client_address,
                    &run.principal.as_ref().map(|p| p.issuer.clone()),
                    &run.principal.as_ref().map(|p| p.subject.clone()),
                    &run.principal.as_ref().and_then(|p| p.client_id.clone()),
                    &run.protocol_version,
                    &run.transport,
                    run.started_at.0
                ],
            )
            .await
    }

    /// Whether this decision was recorded. Set once: the condition makes the first decision
    /// the only one. A recorded decision is chained as a notice in the same transaction, so
    /// `audit verify --store` holds the row to it (an edited `authorized_by` is a break).
    pub(super) async fn decide_run(
        &mut self,
        id: &str,
        decision: RunDecision,
        by: &str,
        at: Timestamp,
    ) -> Result<bool, LedgerError> {
        let (sql, notice) = match decision {
            RunDecision::Authorize => ("UPDATE runs SET authorized_by = $1, authorized_at = $2 WHERE id = $3 AND authorized_at IS NULL AND revoked_at IS NULL", "run_authorized"),
            RunDecision::Revoke => ("UPDATE runs SET revoked_by = $1, revoked_at = $2 WHERE id = $3 AND revoked_at IS NULL", "run_revoked"),
        };
        let recorded = self.tx.conn.exec(sql, params![by, at.0, id]).await? == 1;
        if recorded {
            let detail = serde_json::json!({"notice": notice, "run": id, "by": by});
            self.notice(None, detail, at).await?;
        }
        Ok(recorded)
    }

    /// Records the end of a run (the first end recorded stays).
    pub(super) async fn end_run(
        &mut self,
        id: &str,
        at: Timestamp,
        reason: RunEnd,
    ) -> Result<(), LedgerError> {
        self.tx
            .later(
                "UPDATE runs SET ended_at = $1, end_reason = $2 WHERE id = $3 AND ended_at IS NULL",
                params![at.0, reason.as_str(), id],
            )
            .await
    }

    /// Sets the tool's pin (if any) and chains the notice, in the same transaction. Of two
    /// replicas' pins the later stays, as `audit verify` reads the notices.
    pub(super) async fn notice(
        &mut self,
        pin: Option<&ToolPin>,
        detail: Value,
        at: Timestamp,
    ) -> Result<(), LedgerError> {
        if let Some(p) = pin {
            self.tx.later("INSERT INTO upstream_tool_pins (upstream, tool, digest, definition, pinned_at, accepted_by) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (upstream, tool) DO UPDATE SET digest = excluded.digest, definition = excluded.definition, pinned_at = excluded.pinned_at, accepted_by = excluded.accepted_by WHERE upstream_tool_pins.pinned_at <= excluded.pinned_at", params![&p.upstream, &p.tool, &p.digest, &p.definition, p.pinned_at.0, &p.accepted_by]).await?;
        }
        // A notice has an id of its own: it is no execution's event.
        let id = ExecutionId::from_bytes(*uuid::Uuid::now_v7().as_bytes());
        self.tx.append_event(id, 1, EventKind::Notice, at, detail)
    }

    /// Writes the stream records in order, stopping at the first that fails.
    pub(super) async fn write_streams(
        &mut self,
        writes: &[StreamWrite],
    ) -> Result<(), LedgerError> {
        for write in writes {
            let (sql, values) = write.sql();
            self.tx.later(sql, &values).await?;
        }
        Ok(())
    }
}

/// Records a run, or resumes it when it ended in a way [`RunEnd::resumable`] says a later call
/// resumes (its end is cleared); the rule lives there, this SQL only spells it.
fn start_run_sql() -> &'static str {
    static SQL: OnceLock<String> = OnceLock::new();
    SQL.get_or_init(|| {
        let resumable: Vec<String> = RunEnd::ALL
            .iter()
            .filter(|e| e.resumable())
            .map(|e| format!("'{}'", e.as_str()))
            .collect();
        let resumable = resumable.join(", ");
        format!("INSERT INTO runs (id, actor, client_name, client_version, client_address, principal_issuer, principal_subject, principal_client, protocol_version, transport, started_at, seen_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11) ON CONFLICT (id) DO UPDATE SET seen_at = excluded.seen_at, ended_at = CASE WHEN runs.end_reason IN ({resumable}) THEN NULL ELSE runs.ended_at END, end_reason = CASE WHEN runs.end_reason IN ({resumable}) THEN NULL ELSE runs.end_reason END WHERE runs.actor = excluded.actor")
    })
}
