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
//! did not move" means "nothing of the op is in the transaction" — while the transaction is
//! still open. Some errors (I/O, a full disk, no memory) make SQLite roll the whole
//! transaction back by itself, moving no count, and later statements would then commit one by
//! one: so after every op, failed or not, a transaction that is no longer open tangles the
//! batch too (the count reads `None`), and the batch runs again apart in a new one.

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
            let mark = self.tx.mark_op();
            let changed = self.tx.conn.rows_changed();
            let outcome = self.process(op).await;
            let now_changed = self.tx.conn.rows_changed();
            if now_changed.is_none() || (!outcome.is_ok() && now_changed != changed) {
                self.roll_back_together(head_before, counted_before).await;
                return Together::Tangled(batch);
            }
            if !outcome.is_ok() {
                // Nothing of it reached the transaction: undone in memory alone.
                self.tx.undo_op(mark);
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use postern_core::Timestamp;
    use tokio::sync::oneshot;

    use super::super::{SigningTrust, Writer, WriterConfig};
    use crate::db::{OwnedRow, SqlValue, SqliteWriteConn, WriteConn};
    use crate::dialect::Dialect;
    use crate::error::{LedgerError, StorageFault};
    use crate::model::Run;
    use crate::ops::Op;

    /// A connection on which SQLite loses the open transaction under the statement that
    /// carries `at`, as an I/O error, a full disk or no memory make it do: the whole
    /// transaction is rolled back, the statement fails, and the count of changed rows stays.
    struct LosesTheTransaction {
        inner: SqliteWriteConn,
        at: &'static str,
        lost: bool,
    }

    impl WriteConn for LosesTheTransaction {
        async fn exec(&mut self, sql: &str, params: &[SqlValue]) -> Result<u64, LedgerError> {
            let carries = params
                .iter()
                .any(|p| matches!(p, SqlValue::Text(t) if t == self.at));
            if carries && !self.lost {
                self.lost = true;
                self.inner.exec("ROLLBACK", &[]).await?;
                return Err(LedgerError::storage(
                    StorageFault::Unavailable,
                    "disk I/O error",
                ));
            }
            self.inner.exec(sql, params).await
        }
        async fn query_opt(
            &mut self,
            sql: &str,
            params: &[SqlValue],
        ) -> Result<Option<OwnedRow>, LedgerError> {
            self.inner.query_opt(sql, params).await
        }
        fn rows_changed(&self) -> Option<u64> {
            self.inner.rows_changed()
        }
    }

    fn run(id: &str) -> Run {
        Run {
            id: id.into(),
            actor: "billing".into(),
            client_name: None,
            client_version: None,
            client_address: None,
            principal: None,
            protocol_version: None,
            transport: "http".into(),
            started_at: Timestamp(1_795_987_279_123),
            ended_at: None,
            end_reason: None,
            authorized: None,
            revoked: None,
        }
    }

    /// The transaction is lost under the second of three ops: the first op's row went with
    /// it, and the third would be committed alone, outside any transaction, while every op
    /// is told "nothing recorded". The batch must run again apart and record all three.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_transaction_sqlite_lost_under_an_op_sends_the_batch_apart() {
        let dir = std::env::temp_dir().join(format!("postern-together-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ledger.db");
        let url = format!("sqlite://{}", path.display());
        let (ledger, _) = crate::Ledger::open(&url, crate::LedgerOptions::default())
            .await
            .unwrap();
        drop(ledger);
        let conn = LosesTheTransaction {
            inner: SqliteWriteConn(rusqlite::Connection::open(&path).unwrap()),
            at: "run-2",
            lost: false,
        };
        let mut writer = Writer::new(
            conn,
            WriterConfig {
                dialect: Dialect::Sqlite,
                chain: "together".into(),
                instance: "inst-together".into(),
                signing_key: None,
                checkpoint_every: 0,
                max_batch: 16,
                lease: None,
                trust: Arc::new(SigningTrust::default()),
                witnessed: None,
                sink: None,
            },
        );
        let mut replies = Vec::new();
        let batch: Vec<Op> = ["run-1", "run-2", "run-3"]
            .into_iter()
            .map(|id| {
                let (tx, rx) = oneshot::channel();
                replies.push(rx);
                Op::StartRun(Box::new(run(id)), tx)
            })
            .collect();
        writer.begin().await.unwrap();
        assert!(writer.commit_begun(batch).await.is_ok());
        for reply in replies {
            reply
                .await
                .unwrap()
                .expect("recorded, once the batch ran apart");
        }
        let check = rusqlite::Connection::open(&path).unwrap();
        let runs: i64 = check
            .query_row(
                "SELECT COUNT(*) FROM runs WHERE id IN ('run-1', 'run-2', 'run-3')",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(runs, 3);
        drop(check);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
