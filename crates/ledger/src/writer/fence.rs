//! Fencing: a dispatching commit checks, inside its transaction, that this instance still
//! holds its lease (see `lease.rs`).

use super::{now_millis, Writer};
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

impl<C: WriteConn> Writer<C> {
    /// PostgreSQL: refuses to dispatch unless this instance still holds its lease, read in the
    /// dispatching transaction (`FOR SHARE`: a takeover racing this commit waits for it, then
    /// sees what it dispatched).
    pub(super) async fn check_lease(&mut self) -> Result<(), LedgerError> {
        let Some(lease) = self.cfg.lease else {
            return Ok(());
        };
        if self.lease_checked {
            return Ok(());
        }
        let (renewed, by) = match self.lease_row.clone() {
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
        self.lease_checked = true;
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
}
