//! Fencing: a dispatching commit checks, inside its transaction, that this instance still
//! holds its lease (see `lease.rs`); the heartbeat renews it through the writer, and a
//! takeover claims a lapsed instance's (and signs its chain's head).

use postern_core::Timestamp;

use super::{now_millis, Writer, WriterConfig};
use crate::db::{params, RowAccess, WriteConn};
use crate::error::LedgerError;
use crate::rows;

/// This instance's row, read in the dispatching transaction. `FOR SHARE`: a takeover racing
/// the commit waits for it, then sees what it dispatched.
pub(super) const LEASE_ROW: &str =
    "SELECT heartbeat_at, taken_over_by FROM instances WHERE id = $1 FOR SHARE";

/// `heartbeat_at` and `taken_over_by` of a [`LEASE_ROW`] row.
pub(super) fn lease_row(row: &impl RowAccess) -> Result<(i64, Option<String>), LedgerError> {
    Ok((
        rows::get_i64(row, "heartbeat_at")?,
        row.opt_text("taken_over_by")?,
    ))
}

/// The open transaction's hold on this instance's lease: the row it read, whether it checked.
pub(super) struct Fence<'t, C> {
    pub(super) conn: &'t mut C,
    pub(super) cfg: &'t WriterConfig,
    /// Whether the open transaction has checked this instance's lease (once per commit).
    pub(super) checked: &'t mut bool,
    /// This instance's row as the open transaction read it (`optimistic.rs`), if it still says
    /// what the transaction did.
    pub(super) row: &'t mut Option<(i64, Option<String>)>,
}

impl<C: WriteConn> Fence<'_, C> {
    /// PostgreSQL: refuses to dispatch unless this instance still holds its lease, read in the
    /// dispatching transaction (`FOR SHARE`: a takeover racing this commit waits for it, then
    /// sees what it dispatched).
    pub(super) async fn check_lease(&mut self) -> Result<(), LedgerError> {
        let Some(lease) = self.cfg.lease else {
            return Ok(());
        };
        if *self.checked {
            return Ok(());
        }
        let (renewed, by) = match self.row.clone() {
            // Read `FOR SHARE` by this transaction before any op ran (`optimistic.rs`).
            Some(row) => row,
            None => {
                let row = self
                    .conn
                    .query_opt(LEASE_ROW, params![&self.cfg.instance])
                    .await?;
                let Some(row) = row else {
                    return Err(self.fenced().await);
                };
                lease_row(&row)?
            }
        };
        let lease_ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
        // The wall clock, as the heartbeat writes it (an event's `now` may be another time).
        if by.is_some() || renewed < now_millis() - lease_ms {
            return Err(LedgerError::Fenced {
                instance: self.cfg.instance.clone(),
                by,
            });
        }
        *self.checked = true;
        Ok(())
    }

    /// The error of an instance found fenced, naming who took it over.
    pub(super) async fn fenced(&mut self) -> LedgerError {
        let by = match self
            .conn
            .query_opt(
                "SELECT taken_over_by FROM instances WHERE id = $1",
                params![&self.cfg.instance],
            )
            .await
        {
            Ok(Some(row)) => row.opt_text("taken_over_by").ok().flatten(),
            _ => None,
        };
        LedgerError::Fenced {
            instance: self.cfg.instance.clone(),
            by,
        }
    }

    /// Renews this instance's lease. A taken-over instance renews nothing: it learns it was
    /// fenced.
    pub(super) async fn heartbeat(&mut self, now: Timestamp) -> Result<(), LedgerError> {
        // The lease row read at the start of the transaction no longer says what this one did.
        *self.row = None;
        match self
            .conn
            .exec(
                "UPDATE instances SET heartbeat_at = $1 WHERE id = $2 AND taken_over_by IS NULL",
                params![now.0, &self.cfg.instance],
            )
            .await
        {
            Ok(0) => Err(self.fenced().await),
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

impl<C: WriteConn> Writer<C> {
    /// Whether this instance took `owner` over. Claimed once: the first survivor whose update
    /// finds the lease expired; it also signs the taken-over chain's head.
    pub(super) async fn take_over(
        &mut self,
        owner: &str,
        cutoff: Timestamp,
        now: Timestamp,
    ) -> Result<bool, LedgerError> {
        let took = self
            .tx
            .conn
            .exec(
                "UPDATE instances SET taken_over_by = $1, taken_over_at = $2 WHERE id = $3 AND taken_over_by IS NULL AND heartbeat_at < $4",
                params![&self.tx.cfg.instance, now.0, owner, cutoff.0],
            )
            .await?
            == 1;
        // Its chain (PostgreSQL: named by the instance) is signed to its end: the stopped
        // instance never will, and an unsigned tail is a break once old enough.
        if took && owner != self.tx.cfg.chain {
            self.signer().sign_taken_over(owner, now).await?;
        }
        Ok(took)
    }
}
