//! PostgreSQL's batch without savepoints. Every statement on the writer's connection is a round
//! trip to the server, and the savepoint way spends four or five of them per op (`SAVEPOINT`,
//! the op's statements, `RELEASE`): the writer waited on the network for most of a commit.
//!
//! So a batch is first tried whole, in one transaction and no savepoint:
//! - one round trip opens it: `BEGIN`, this instance's row `FOR SHARE` (the fence, still read
//!   inside the dispatching transaction, see `fence.rs`), the chain head `FOR UPDATE`, and the
//!   summaries the batch's appends need, `FOR UPDATE`;
//! - every write whose answer nothing reads is held back ([`Transaction::later`]) and goes with the
//!   next statement that needs an answer (an accept's intent slot) or with the `COMMIT`; an op
//!   sees what earlier ops of the batch did through the summaries remembered for the
//!   transaction (`Recall`), or through a read that carries the held-back writes before it;
//! - one round trip writes the held-back rows, the events, the head, and commits; when more
//!   ops are waiting, the same message opens their batch too (`COMMIT; BEGIN; …`), so under
//!   load a batch costs one round trip and the writer's connection never idles between two.
//!
//! Per-op isolation holds because nothing is kept that the savepoint way would not keep: an op
//! that fails before any of its statements reached the server (a refused transition, a fenced
//! dispatch, an unknown execution found by the opening read) is undone in memory alone, its
//! held-back statements dropped; any other failure (a statement the server refused, a lost
//! connection, an op that failed after a round trip) rolls the transaction back, so nothing of
//! the batch was recorded, and the batch runs again the savepoint way (`commit.rs`), which keeps
//! each op apart. The ops are untouched by a try ([`Writer::process`] borrows them), so the
//! second run is the first run of the savepoint way. Only a failed `COMMIT` round trip is
//! different: a refusal by the server means nothing was recorded (run again), anything else
//! (a lost connection) leaves it unknown, and every op is told so. The server completes a
//! message's statements in order and skips the rest after one fails, so counting the completed
//! ones tells a failure before the `COMMIT` (nothing recorded) from one in the next batch's
//! opening (this batch recorded, the next one not begun: it is tried again on its own).

use std::collections::HashSet;
use std::time::Instant;

use postern_core::ExecutionId;

use super::claims::{self, Claim};
use super::fence::{lease_row, LEASE_ROW};
use super::transaction::{Head, Transaction};
use super::Writer;
use crate::db::{IntoSql, OwnedRow, RowAccess, WriteConn};
use crate::error::{LedgerError, StorageFault};
use crate::ops::{Op, Outcome};
use crate::recall::Recall;
use crate::rows;

/// Takes the ops waiting to be written (possibly none), for the next batch.
pub(crate) type Waiting<'a> = dyn FnMut() -> Vec<Op> + Send + 'a;

/// How a try ended.
enum Tried {
    /// Committed (or its commit's outcome is unknown: the failure says so): answer every op.
    Answered(Vec<Outcome>, Option<(StorageFault, String)>, Next),
    /// Rolled back, nothing of it recorded: run it again the savepoint way, and then the ops
    /// taken for the next batch (their opening was skipped with the failed commit).
    Again(Vec<Op>),
}

/// The batch after a committed one.
enum Next {
    /// No op was waiting.
    Nothing,
    /// Opened in the commit's round trip.
    Opened(Vec<Op>, Box<Opened>),
    /// Taken, but not opened: tried on its own.
    Unopened(Vec<Op>),
}

/// What the opening round trip read.
struct Opened {
    head: Option<Head>,
    lease: Option<(i64, Option<String>)>,
    summaries: Vec<OwnedRow>,
    /// For each op, the execution id it claims ahead with (`claims.rs`).
    ahead: Vec<Option<ExecutionId>>,
    /// The execution ids whose claims got their slots.
    claimed: HashSet<ExecutionId>,
}

impl<C: WriteConn> Writer<C> {
    /// Tries the batch without savepoints, then each batch of `waiting` ops its commit opened.
    /// `None`: every op was answered; `Some`: nothing of those ops was recorded, run them the
    /// savepoint way.
    pub(super) async fn commit_optimistic(
        &mut self,
        mut batch: Vec<Op>,
        waiting: &mut Waiting<'_>,
    ) -> Option<Vec<Op>> {
        let mut opened = None;
        loop {
            let started = Instant::now();
            let since_checkpoint = self.tx.appended_since_checkpoint;
            if opened.is_none() && self.tx.conn.ensure_connected().await.is_err() {
                // The savepoint way tries again and refuses the batch as it always did.
                return Some(batch);
            }
            self.tx.optimistic = true;
            let tried = self
                .try_batch(&batch, opened.take(), started, waiting)
                .await;
            self.tx.optimistic = false;
            self.tx.lease_row = None;
            let next = match tried {
                Tried::Answered(outcomes, failure, next) => {
                    for (op, outcome) in batch.into_iter().zip(outcomes) {
                        op.answer(outcome).send(failure.as_ref());
                    }
                    next
                }
                Tried::Again(next) => {
                    self.tx.appended_since_checkpoint = since_checkpoint;
                    batch.extend(next);
                    return Some(batch);
                }
            };
            (batch, opened) = match next {
                Next::Nothing => return None,
                Next::Opened(ops, o) => (ops, Some(*o)),
                Next::Unopened(ops) => (ops, None),
            };
        }
    }

    async fn try_batch(
        &mut self,
        batch: &[Op],
        opened: Option<Opened>,
        started: Instant,
        waiting: &mut Waiting<'_>,
    ) -> Tried {
        let opened = match opened {
            Some(opened) => Ok(opened),
            None => self.tx.open_optimistic(batch).await,
        };
        let Ok(Opened {
            // No head row yet (this chain's first commit): the savepoint way creates it.
            head: Some(head_before),
            lease,
            summaries,
            ahead,
            claimed,
        }) = opened
        else {
            return self.roll_back_try(Vec::new()).await;
        };
        if self.signer().adopt_head(head_before).await.is_err() {
            return self.roll_back_try(Vec::new()).await;
        }
        self.tx.head = head_before;
        self.tx.pending.clear();
        self.tx.lease_checked = false;
        self.tx.lease_row = lease;
        let mut recall = Recall::new(-1, head_before);
        for row in &summaries {
            match rows::summary(row) {
                Ok(s) => recall.remember(&s),
                Err(_) => return self.roll_back_try(Vec::new()).await,
            }
        }
        self.tx.recall = Some(recall);
        let mut outcomes = Vec::with_capacity(batch.len());
        for (op, id) in batch.iter().zip(ahead) {
            self.tx.claim = id.map(|id| Claim {
                id,
                won: claimed.contains(&id),
            });
            match self.try_op(op).await {
                Ok(outcome) => outcomes.push(outcome),
                // A lone op has no other to keep apart from: rolled back, its error is its
                // answer (as the savepoint way answers a lone op).
                Err(outcome) if batch.len() == 1 => {
                    self.roll_back_try(Vec::new()).await;
                    return Tried::Answered(vec![outcome], None, Next::Nothing);
                }
                Err(_) => return self.roll_back_try(Vec::new()).await,
            }
        }
        self.commit_try(head_before, outcomes, batch.len(), started, waiting)
            .await
    }

    /// Runs one op of the try. `Err`: it failed after some of its statements reached the
    /// server, so it cannot be undone alone.
    async fn try_op(&mut self, op: &Op) -> Result<Outcome, Outcome> {
        let mark = self.tx.mark_op();
        let (deferred, round_trips) = (self.tx.conn.deferred_len(), self.tx.conn.round_trips());
        // A claim made ahead is a write that reached the server.
        let claimed = self.tx.claim.as_ref().is_some_and(|c| c.won);
        let outcome = self.process(op).await;
        self.tx.claim = None;
        if outcome.is_ok() {
            return Ok(outcome);
        }
        if claimed || self.tx.conn.round_trips() != round_trips {
            return Err(outcome);
        }
        // Nothing of it reached the server: dropping what it held back and what it linked
        // undoes it, as rolling back its savepoint would.
        self.tx.conn.discard_deferred(deferred);
        self.tx.undo_op(mark);
        Ok(outcome)
    }

    /// The closing round trip: the held-back writes, the events, the head, `COMMIT`, and the
    /// opening of the ops `waiting` now, if any.
    async fn commit_try(
        &mut self,
        head_before: Head,
        outcomes: Vec<Outcome>,
        requests: usize,
        started: Instant,
        waiting: &mut Waiting<'_>,
    ) -> Tried {
        if self.write_tail(head_before).await.is_err() {
            return self.roll_back_try(Vec::new()).await;
        }
        let events: Vec<postern_core::EventKind> =
            self.tx.pending.iter().map(|(e, _)| e.body.event).collect();
        let commit = Instant::now();
        if self.tx.conn.defer("COMMIT", &[]).is_err() {
            return self.roll_back_try(Vec::new()).await;
        }
        let closing = self.tx.conn.held_statements();
        let next = waiting();
        let ahead = claims::ahead(&next);
        let mark = self.tx.conn.deferred_len();
        let opening = !next.is_empty() && self.tx.defer_opening(&next, &ahead).is_ok();
        if !opening {
            self.tx.conn.discard_deferred(mark);
        }
        let sent = self.tx.conn.send_held().await;
        if sent.completed < closing {
            return match sent.failed {
                // The server refused a statement: the transaction is aborted, nothing of it
                // stays, and the next batch's opening was skipped.
                Some(LedgerError::Database(sqlx::Error::Database(_))) => {
                    self.roll_back_try(next).await
                }
                failed => {
                    let why = failed.map_or_else(
                        || {
                            let msg = "the server ended the commit's answer early";
                            (StorageFault::Unavailable, msg.to_string())
                        },
                        |e| e.as_fault(),
                    );
                    self.commit_unknown(head_before, outcomes, why, next).await
                }
            };
        }
        self.metrics
            .committed(requests, &events, started.elapsed(), commit.elapsed());
        self.own.committed(self.tx.head, &self.tx.cfg.chain);
        self.tx.recall = None;
        let next = match (opening, sent.failed) {
            (false, _) if next.is_empty() => Next::Nothing,
            (true, None) => match opened(sent.rows, ahead) {
                Ok(o) if o.head.is_some() => Next::Opened(next, Box::new(o)),
                _ => self.unopened(next).await,
            },
            _ => self.unopened(next).await,
        };
        Tried::Answered(outcomes, None, next)
    }

    /// The next batch's opening failed after this one committed: its transaction is rolled
    /// back, and it is tried on its own.
    async fn unopened(&mut self, next: Vec<Op>) -> Next {
        let _ = self.tx.conn.exec("ROLLBACK", &[]).await;
        Next::Unopened(next)
    }

    /// The commit's answer was lost: whether the batch was recorded is unknown, and every op
    /// is told so. The next batch was not begun.
    async fn commit_unknown(
        &mut self,
        head_before: Head,
        outcomes: Vec<Outcome>,
        (fault, msg): (StorageFault, String),
        next: Vec<Op>,
    ) -> Tried {
        crate::telemetry::commit_failed(fault);
        self.own.not_committed(true);
        let _ = self.tx.conn.exec("ROLLBACK", &[]).await;
        self.forget_try(head_before);
        let next = if next.is_empty() {
            Next::Nothing
        } else {
            Next::Unopened(next)
        };
        Tried::Answered(
            outcomes,
            Some((
                fault,
                format!("the commit's answer was lost, so whether this request was recorded is unknown until the store is back: {msg}"),
            )),
            next,
        )
    }

    /// Rolls the try back: nothing of it was recorded. `next`: ops taken for the batch after
    /// it, whose opening never ran.
    async fn roll_back_try(&mut self, next: Vec<Op>) -> Tried {
        self.tx.conn.discard_deferred(0);
        let _ = self.tx.conn.exec("ROLLBACK", &[]).await;
        self.forget_try(self.tx.head);
        Tried::Again(next)
    }

    fn forget_try(&mut self, head: Head) {
        self.own.not_committed(false);
        self.tx.head = head;
        self.tx.pending.clear();
        self.tx.recall = None;
        self.tx.lease_checked = false;
        self.tx.touched.clear();
        self.tx.claim = None;
    }
}

impl<C: WriteConn> Transaction<C> {
    /// The opening round trip of a batch no commit opened.
    async fn open_optimistic(&mut self, batch: &[Op]) -> Result<Opened, LedgerError> {
        self.conn.discard_deferred(0);
        let ahead = claims::ahead(batch);
        self.defer_opening(batch, &ahead)?;
        let sent = self.conn.send_held().await;
        match sent.failed {
            Some(e) => Err(e),
            None => opened(sent.rows, ahead),
        }
    }

    /// Holds back a batch's opening: `BEGIN`, the lease row, the head, the appends' summaries,
    /// and the claims of the accepts that claim `ahead` (`claims.rs`).
    fn defer_opening(
        &mut self,
        batch: &[Op],
        ahead: &[Option<ExecutionId>],
    ) -> Result<(), LedgerError> {
        let mut ids: Vec<String> = batch
            .iter()
            .filter_map(|op| match op {
                Op::Append(id, ..) => Some(id.to_string()),
                _ => None,
            })
            .collect();
        ids.sort();
        ids.dedup();
        self.conn.defer(self.cfg.dialect.begin(), &[])?;
        if self.cfg.lease.is_some() {
            self.conn
                .defer(LEASE_ROW, &[self.cfg.instance.as_str().into_sql()])?;
        }
        self.conn.defer(
            "SELECT head_seq, head_hash FROM chains WHERE chain = $1 FOR UPDATE",
            &[self.cfg.chain.as_str().into_sql()],
        )?;
        if !ids.is_empty() {
            // In id order, so two writers locking the same rows take them in the same order.
            self.conn.defer(
                &format!(
                    "SELECT {} FROM executions WHERE id = ANY(string_to_array($1, ',')) ORDER BY id FOR UPDATE",
                    rows::SUMMARY_COLUMNS
                ),
                &[ids.join(",").into_sql()],
            )?;
        }
        if let Some((sql, params)) = claims::statement(batch, ahead) {
            self.conn.defer(&sql, &params)?;
        }
        Ok(())
    }
}

/// What an opening round trip's rows say.
fn opened(found: Vec<OwnedRow>, ahead: Vec<Option<ExecutionId>>) -> Result<Opened, LedgerError> {
    let mut opened = Opened {
        head: None,
        lease: None,
        summaries: Vec::new(),
        ahead,
        claimed: HashSet::new(),
    };
    for row in found {
        if row.value("head_seq").is_ok() {
            let seq = u64::try_from(rows::get_i64(&row, "head_seq")?)
                .map_err(|e| LedgerError::Corrupt(e.to_string()))?;
            opened.head = Some((
                seq,
                rows::hash_from_hex(&rows::get_str(&row, "head_hash")?)?,
            ));
        } else if row.value("heartbeat_at").is_ok() {
            opened.lease = Some(lease_row(&row)?);
        } else if let Ok(id) = rows::get_str(&row, claims::CLAIMED) {
            opened.claimed.insert(rows::parse_id(&id)?);
        } else {
            opened.summaries.push(row);
        }
    }
    Ok(opened)
}
