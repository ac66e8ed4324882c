//! SQLite's batch without savepoints. The savepoint way (`commit.rs`) spends two statements per
//! op of a batch (`SAVEPOINT`, `RELEASE`), and every page an op changes is copied into the
//! savepoint's journal first: at concurrency 1 that was a fifth of the statements of a call.
//!
//! So a batch of several ops is first written whole, op after op, with no savepoint. An op
//! that fails without having changed a row (a refused transition, an unknown execution, a
//! fenced dispatch: SQLite's count of changed rows did not move) is undone in memory alone, as
//! the savepoint way undoes it, and the batch goes on. An op that fails after it changed rows
//! cannot be taken out alone: the transaction is rolled back, so nothing of the batch was
//! recorded, and the batch is handed back untouched ([`Writer::process`] borrows its ops) to
//! run again the savepoint way in a new transaction, which keeps each op apart. The answers
//! wait for the commit either way.
//!
//! A failed statement changes no rows (SQLite undoes a statement that fails), so "the count
//! did not move" means "nothing of the op is in the transaction".

use super::transaction::Head;
use super::Writer;
use crate::db::WriteConn;
use crate::ops::{Done, Op, Outcome};

/// How a batch written together ended.
pub(super) enum Together {
    /// Every op written, or failed without writing: the transaction may commit.
    Written(Vec<Done>),
    /// An op failed after it changed rows: rolled back, nothing recorded; the ops, unanswered.
    Tangled(Vec<Op>),
}

impl<C: WriteConn> Writer<C> {
    /// Whether `batch` is written together: several ops, on a connection that counts changed
    /// rows (SQLite).
    pub(super) fn writes_together(&self, batch: &[Op]) -> bool {
        batch.len() > 1 && self.tx.conn.rows_changed().is_some()
    }

    /// Writes `batch` into the open transaction without savepoints (see the module doc).
    pub(super) async fn write_together(&mut self, head_before: Head, batch: Vec<Op>) -> Together {
        let counted_before = self.tx.appended_since_checkpoint;
        let mut outcomes: Vec<Outcome> = Vec::with_capacity(batch.len());
        for op in &batch {
            let saved = (
                self.tx.head,
                self.tx.appended_since_checkpoint,
                self.tx.pending.len(),
            );
            let changed = self.tx.conn.rows_changed();
            self.tx.touched.clear();
            let outcome = self.process(op).await;
            if !outcome.is_ok() {
                if self.tx.conn.rows_changed() != changed {
                    self.roll_back_together(head_before, counted_before).await;
                    return Together::Tangled(batch);
                }
                // Nothing of it reached the transaction: undone in memory alone.
                (self.tx.head, self.tx.appended_since_checkpoint) = (saved.0, saved.1);
                self.tx.pending.truncate(saved.2);
                if let Some(recall) = &mut self.tx.recall {
                    for id in self.tx.touched.drain(..) {
                        recall.forget(id);
                    }
                }
            }
            outcomes.push(outcome);
        }
        let done: Vec<Done> = batch
            .into_iter()
            .zip(outcomes)
            .map(|(op, outcome)| op.answer(outcome))
            .collect();
        Together::Written(done)
    }

    /// Nothing of the batch may stay: the transaction and everything remembered of it go.
    async fn roll_back_together(&mut self, head_before: Head, counted_before: u64) {
        self.own.not_committed(false);
        let _ = self.tx.conn.exec("ROLLBACK", &[]).await;
        self.tx.head = head_before;
        self.tx.appended_since_checkpoint = counted_before;
        self.tx.pending.clear();
        self.tx.recall = None;
    }
}
