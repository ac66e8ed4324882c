//! Group commit: a batch of ops written into one transaction, each inside its own savepoint
//! (so one op's failure never undoes another's), then committed and answered together.
//! PostgreSQL first tries a batch without savepoints (`optimistic.rs`) and comes here with
//! what that could not keep apart.

use std::time::Instant;

use postern_core::{EventKind, Timestamp};

use super::together::Together;
use super::transaction::Head;
use super::{not_begun, now_millis, Writer};
use crate::db::WriteConn;
use crate::error::{LedgerError, StorageFault};
use crate::ops::{Done, Op};

/// How one op of a batch went.
enum Step {
    /// Written, or failed and undone: its reply waits for the commit.
    Done(Done),
    /// Its savepoint could not be opened, so it was not run.
    NotRun(Op, LedgerError),
    /// A savepoint statement failed after it ran: its writes cannot be kept apart.
    Tangled(Done, LedgerError),
}

/// What writing a batch left in the transaction.
enum Written {
    /// Every op written or undone alone: the transaction may commit.
    Kept(Vec<Done>),
    /// A lone op (no savepoint) failed: the transaction must be rolled back.
    LoneFailed(Vec<Done>),
    /// The batch was rolled back and every op answered.
    Abandoned,
}

/// Ops handed back unanswered, with why: their batch tangled when written together and the
/// transaction to run it again the savepoint way could not be opened.
pub type Unbegun = (Vec<Op>, LedgerError);

impl<C: WriteConn> Writer<C> {
    /// Writes a batch into the transaction [`Writer::begin`] opened, commits it and replies.
    /// A batch that tangled when written together (`together.rs`) runs again the savepoint way
    /// in a new transaction; if that cannot be opened, its ops come back unanswered, for the
    /// caller to queue again or refuse.
    pub async fn commit_begun(&mut self, batch: Vec<Op>) -> Result<(), Unbegun> {
        let Some(batch) = self.commit_in(batch, true).await else {
            return Ok(());
        };
        if let Err(e) = self.begin().await {
            return Err((batch, e));
        }
        // The savepoint way never hands a batch back.
        let _ = self.commit_in(batch, false).await;
        Ok(())
    }

    /// Writes and commits `batch` in the open transaction, together when `together` allows
    /// and the batch can be (else the savepoint way); a batch that tangled comes back.
    async fn commit_in(&mut self, batch: Vec<Op>, together: bool) -> Option<Vec<Op>> {
        let started = Instant::now();
        let requests = batch.len();
        let head_before = match self.tx.open_head().await {
            Ok(h) => h,
            Err(e) => {
                let why = not_begun(e);
                let _ = self.tx.conn.exec("ROLLBACK", &[]).await;
                for op in batch {
                    op.refuse(&why);
                }
                return None;
            }
        };
        if let Err(e) = self.signer().adopt_head(head_before).await {
            let why = not_begun(e);
            let _ = self.tx.conn.exec("ROLLBACK", &[]).await;
            for op in batch {
                op.refuse(&why);
            }
            return None;
        }
        self.tx.head = head_before;
        self.tx.pending.clear();
        self.tx.lease_checked = false;
        self.tx.lease_row = None;
        let written = if together && self.writes_together(&batch) {
            match self.write_together(head_before, batch).await {
                Together::Written(done) => Written::Kept(done),
                Together::Tangled(batch) => return Some(batch),
            }
        } else {
            self.write_batch(head_before, batch).await
        };
        match written {
            Written::Kept(done) => {
                self.commit_written(head_before, done, requests, started)
                    .await;
            }
            Written::LoneFailed(done) => self.roll_back_lone(head_before, done).await,
            Written::Abandoned => {}
        }
        None
    }

    async fn write_batch(&mut self, head_before: Head, batch: Vec<Op>) -> Written {
        // A lone request needs no savepoint: if it fails, the whole transaction is rolled back.
        let savepoints = batch.len() > 1;
        let mut done = Vec::with_capacity(batch.len());
        let mut ops = batch.into_iter();
        while let Some(op) = ops.next() {
            match self.write_op(op, savepoints).await {
                Step::Done(d) => done.push(d),
                Step::NotRun(op, e) => {
                    // Without a savepoint one request's failure could not be undone alone:
                    // nothing of the batch is committed.
                    let rest = std::iter::once(op).chain(ops);
                    self.abandon_batch(head_before, done, rest, e).await;
                    return Written::Abandoned;
                }
                Step::Tangled(d, e) => {
                    done.push(d);
                    self.abandon_batch(head_before, done, ops, e).await;
                    return Written::Abandoned;
                }
            }
        }
        if !savepoints && done.iter().any(|d| !d.is_ok()) {
            Written::LoneFailed(done)
        } else {
            Written::Kept(done)
        }
    }

    /// Runs one op (inside a savepoint when the batch has several); a failed op's chain
    /// links and remembered summaries are undone with its writes.
    async fn write_op(&mut self, op: Op, savepoints: bool) -> Step {
        let mark = self.tx.mark_op();
        if savepoints {
            if let Err(e) = self.tx.conn.exec("SAVEPOINT op", &[]).await {
                return Step::NotRun(op, e);
            }
        }
        let outcome = self.process(&op).await;
        let d = op.answer(outcome);
        if savepoints {
            // On failure, the failed request's writes may still be in the transaction.
            if let Err(e) = self.tx.end_savepoint(d.is_ok()).await {
                return Step::Tangled(d, e);
            }
        }
        if !d.is_ok() {
            self.tx.undo_op(mark);
        }
        Step::Done(d)
    }

    /// Nothing of the lone failed request may stay; its reply is its own error.
    async fn roll_back_lone(&mut self, head_before: Head, done: Vec<Done>) {
        self.own.not_committed(false);
        let _ = self.tx.conn.exec("ROLLBACK", &[]).await;
        self.tx.head = head_before;
        self.tx.recall = None;
        for d in done {
            d.send(None);
        }
    }

    /// Commits what the batch wrote and answers every op with the commit's outcome.
    async fn commit_written(
        &mut self,
        head_before: Head,
        done: Vec<Done>,
        requests: usize,
        started: Instant,
    ) {
        let events: Vec<EventKind> = self.tx.pending.iter().map(|(e, _)| e.body.event).collect();
        let failure = match self.finish_commit(head_before).await {
            Ok(commit_statement) => {
                self.metrics
                    .committed(requests, &events, started.elapsed(), commit_statement);
                None
            }
            Err(why) => {
                crate::telemetry::commit_failed(why.0);
                Some(why)
            }
        };
        if let Some((fault, _)) = &failure {
            self.own.not_committed(*fault == StorageFault::Unavailable);
            let _ = self.tx.conn.exec("ROLLBACK", &[]).await;
            self.tx.head = head_before;
            self.tx.pending.clear();
            self.tx.recall = None;
        } else {
            self.own.committed(self.tx.head, &self.tx.cfg.chain);
            if let Some(recall) = &mut self.tx.recall {
                // This connection's own commits leave `data_version` as it was.
                recall.head = self.tx.head;
            }
        }
        for d in done {
            d.send(failure.as_ref());
        }
    }

    /// Writes the batch's events, head and due checkpoint (held back too while the batch is
    /// tried without savepoints: they then go with the `COMMIT`).
    pub(super) async fn write_tail(&mut self, head_before: Head) -> Result<(), LedgerError> {
        if self.tx.head != head_before {
            self.tx.flush_events().await?;
            self.tx.store_head().await?;
            // Due by count, while the chain is trusted: a refusal to sign must never fail the
            // commit of what the batch recorded.
            if self.tx.cfg.checkpoint_every > 0
                && self.tx.appended_since_checkpoint >= self.tx.cfg.checkpoint_every
                && self.own.trust.refused().is_none()
            {
                match self.signer().checkpoint(Timestamp(now_millis())).await {
                    Err(LedgerError::SigningRefused(_)) => {}
                    other => {
                        other?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Writes the batch's events, head and due checkpoint, and commits. The error says whether
    /// anything may have been recorded: a connection lost during `COMMIT` leaves that unknown.
    async fn finish_commit(
        &mut self,
        head_before: Head,
    ) -> Result<std::time::Duration, (StorageFault, String)> {
        let nothing = |e: LedgerError| {
            let (fault, msg) = e.as_fault();
            (
                fault,
                format!("the commit failed, nothing of this request was recorded: {msg}"),
            )
        };
        self.write_tail(head_before).await.map_err(nothing)?;
        let commit = std::time::Instant::now();
        match self.tx.conn.exec("COMMIT", &[]).await {
            Ok(_) => Ok(commit.elapsed()),
            Err(e) if e.fault() == Some(StorageFault::Unavailable) => Err((
                StorageFault::Unavailable,
                format!("the connection was lost during the commit, so whether this request was recorded is unknown until the store is back: {e}"),
            )),
            Err(e) => Err(nothing(e)),
        }
    }

    /// Rolls the whole transaction back after a statement that keeps requests apart
    /// (savepoints) failed: every request of the batch, answered or not, is refused.
    async fn abandon_batch(
        &mut self,
        head_before: Head,
        done: Vec<Done>,
        rest: impl Iterator<Item = Op>,
        cause: LedgerError,
    ) {
        let (fault, msg) = cause.as_fault();
        let why = (
            fault,
            format!("the batch this request was in could not be kept apart from a failed one, so nothing of it was recorded: {msg}"),
        );
        self.own.not_committed(false);
        let _ = self.tx.conn.exec("ROLLBACK", &[]).await;
        self.tx.head = head_before;
        self.tx.pending.clear();
        self.tx.recall = None;
        for d in done {
            d.send(Some(&why));
        }
        for op in rest {
            op.refuse(&why);
        }
    }
}
