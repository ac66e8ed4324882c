//! The single writer: every durable change goes through one connection. Requests that arrive
//! while a commit is in flight are batched into the next transaction (group commit), each
//! inside its own savepoint so one request's failure never undoes another's. PostgreSQL runs it
//! as a task fed by a channel ([`Writer::run`]), and first tries a batch without savepoints,
//! its writes held back and sent with the next statement that needs an answer
//! (`optimistic.rs`), its commit also opening the batch of what arrived meanwhile; a batch that
//! does not go through whole is rolled back and run again the savepoint way. SQLite's callers
//! drive it themselves (`combiner.rs`), and a batch of several ops is first written without
//! savepoints as well (`together.rs`): an op that failed after it changed rows sends it back to
//! the savepoint way in a new transaction.
//!
//! The writer is in parts, each a type over what it needs: [`Transaction`] (the connection, the
//! settings and what the open transaction holds), and the parts that borrow it: [`Executions`]
//! (accept-or-match, lifecycle events), [`Records`] (runs, notices, stream state), [`Fence`](fence::Fence)
//! (this instance's lease), [`Pruner`] (retention) and [`Signer`] (checkpoints, only of a chain
//! it wrote or checked, read through [`StoredChain`](chain_check::StoredChain)). [`Writer`]
//! itself batches and commits.

use std::sync::Arc;

use postern_audit::{Checkpoint, SigningKey};
use tokio::sync::mpsc;

use crate::db::WriteConn;
use crate::dialect::Dialect;
use crate::error::{LedgerError, StorageFault};
use crate::ops::{Deferral, Op, Outcome};

mod accept;
mod budgets;
mod chain_check;
mod claims;
mod commit;
mod executions;
mod fence;
mod optimistic;
mod prune;
mod records;
mod together;
mod transaction;
mod trust;

use executions::Executions;
use prune::Pruner;
use records::Records;
use transaction::Transaction;
pub use trust::{CheckpointSink, SigningTrust};
use trust::{OwnChain, Signer};

/// `batch` and the ops waiting behind it, up to `max` in all, less those `held` keeps back for
/// later (lazy ops not due yet).
fn gather(
    rx: &mut mpsc::Receiver<Op>,
    held: &mut Deferral,
    mut batch: Vec<Op>,
    max: usize,
) -> Vec<Op> {
    while batch.len() < max {
        match rx.try_recv() {
            Ok(op) => batch.push(op),
            Err(_) => break,
        }
    }
    held.sort(batch, max, false)
}

pub(crate) struct WriterConfig {
    pub dialect: Dialect,
    pub chain: String,
    pub instance: String,
    pub signing_key: Option<Arc<SigningKey>>,
    pub checkpoint_every: u64,
    pub max_batch: usize,
    /// PostgreSQL: the instance lease a dispatching commit checks its own row against.
    pub lease: Option<std::time::Duration>,
    /// Whether this writer may still sign (shared with the ledger's status).
    pub trust: Arc<SigningTrust>,
    /// The latest checkpoint of this chain a witness outside the store holds.
    pub witnessed: Option<Checkpoint>,
    /// Told of each checkpoint once committed.
    pub sink: Option<CheckpointSink>,
}

/// The single writer: the open transaction, and what it knows of its own chain between
/// transactions. It batches ops and commits them; each op is run by the part it belongs to.
pub(crate) struct Writer<C> {
    tx: Transaction<C>,
    /// The committed head and checkpoint this writer vouches for (`trust.rs`).
    own: OwnChain,
    metrics: crate::telemetry::CommitMetrics,
}

impl<C: WriteConn> Writer<C> {
    pub fn new(conn: C, cfg: WriterConfig) -> Writer<C> {
        let own = OwnChain {
            trust: cfg.trust.clone(),
            witnessed: cfg.witnessed.clone(),
            sink: cfg.sink.clone(),
            ..OwnChain::default()
        };
        Writer {
            own,
            tx: Transaction::new(conn, cfg),
            metrics: crate::telemetry::CommitMetrics::new(),
        }
    }

    /// The write loop for a dialect whose writes are awaited (PostgreSQL): one task, fed by a
    /// channel.
    pub async fn run(mut self, mut rx: mpsc::Receiver<Op>) {
        let mut held = Deferral::default();
        loop {
            let next = match held.due_at() {
                None => rx.recv().await,
                Some(due) => {
                    let due = tokio::time::Instant::from_std(due);
                    match tokio::time::timeout_at(due, rx.recv()).await {
                        Ok(op) => op,
                        Err(_) => {
                            // Held long enough and nothing urgent came: commit them alone.
                            let batch = held.sort(Vec::new(), self.tx.cfg.max_batch, true);
                            self.commit_batch(batch).await;
                            continue;
                        }
                    }
                }
            };
            let Some(op) = next else {
                // The ledger is closing: what was held is committed before the writer ends.
                let batch = held.sort(Vec::new(), self.tx.cfg.max_batch, true);
                if !batch.is_empty() {
                    self.commit_batch(batch).await;
                }
                return;
            };
            let max = self.tx.cfg.max_batch;
            let mut batch = Vec::with_capacity(max);
            batch.push(op);
            let commit = gather(&mut rx, &mut held, batch, max);
            if !commit.is_empty() {
                // What arrives while a batch is written goes with its commit (`optimistic.rs`).
                let mut waiting = || gather(&mut rx, &mut held, Vec::new(), max);
                self.commit_batch_with(commit, &mut waiting).await;
            }
        }
    }

    pub fn max_batch(&self) -> usize {
        self.tx.cfg.max_batch
    }

    pub async fn commit_batch(&mut self, batch: Vec<Op>) {
        self.commit_batch_with(batch, &mut Vec::new).await
    }

    /// Commits `batch`; PostgreSQL's commit also opens the batch of the ops `waiting` then.
    async fn commit_batch_with(&mut self, batch: Vec<Op>, waiting: &mut optimistic::Waiting<'_>) {
        let batch = if self.tx.conn.can_defer() {
            match self.commit_optimistic(batch, waiting).await {
                Some(again) => again,
                None => return,
            }
        } else {
            batch
        };
        if let Err(e) = self.begin().await {
            let why = not_begun(e);
            for op in batch {
                op.refuse(&why);
            }
            return;
        }
        if let Err((batch, e)) = self.commit_begun(batch).await {
            let why = not_begun(e);
            for op in batch {
                op.refuse(&why);
            }
        }
    }

    /// Opens the write transaction ([`Writer::commit_begun`] then fills and commits it),
    /// reconnecting first if the connection was lost.
    pub async fn begin(&mut self) -> Result<u64, LedgerError> {
        self.tx.conn.ensure_connected().await?;
        self.tx.conn.exec(self.tx.cfg.dialect.begin(), &[]).await
    }

    pub fn conn_mut(&mut self) -> &mut C {
        &mut self.tx.conn
    }

    /// Runs one op against the open transaction, by the part it belongs to; its answer waits
    /// for the commit. The op stays whole, so its batch can be run again.
    async fn process(&mut self, op: &Op) -> Outcome {
        let tx = &mut self.tx;
        match op {
            Op::Accept(req, _) => Outcome::Accept(Executions { tx }.accept(req).await),
            Op::Append(id, ev, now, _) => {
                Outcome::Append(Executions { tx }.append(*id, ev, *now).await)
            }
            Op::Abandoned(id, owner, now, _) => {
                Outcome::Bool(Executions { tx }.abandoned(*id, owner, *now).await)
            }
            Op::Checkpoint(now, _) => Outcome::Checkpoint(self.signer().checkpoint(*now).await),
            Op::StartRun(run, _) => Outcome::Unit(Records { tx }.start_run(run).await),
            Op::DecideRun(id, decision, by, at, _) => Outcome::Bool(
                Records { tx }
                    .decide_run(id, decision.clone(), by, *at)
                    .await,
            ),
            Op::Notice(pin, detail, at, _) => Outcome::Unit(
                Records { tx }
                    .notice(pin.as_deref(), detail.clone(), *at)
                    .await,
            ),
            Op::EndRun(id, at, reason, _) => {
                Outcome::Unit(Records { tx }.end_run(id, *at, *reason).await)
            }
            Op::Stream(writes, _) => Outcome::Unit(Records { tx }.write_streams(writes).await),
            Op::Flush(_) => Outcome::Unit(Ok(())),
            Op::Prune(plan, now, _) => Outcome::Prune(Pruner::over(tx).prune(plan, *now).await),
            Op::Heartbeat(now, _) => Outcome::Unit(tx.fence().heartbeat(*now).await),
            Op::TakeOver(owner, cutoff, now, _) => {
                Outcome::Bool(self.take_over(owner, *cutoff, *now).await)
            }
        }
    }

    /// The part that signs, over the open transaction.
    fn signer(&mut self) -> Signer<'_, C> {
        Signer {
            tx: &mut self.tx,
            own: &mut self.own,
        }
    }
}

pub(crate) fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Why a request got no transaction: nothing of it was recorded.
pub(super) fn not_begun(e: LedgerError) -> (StorageFault, String) {
    let (fault, msg) = e.as_fault();
    (
        fault,
        format!("could not open a transaction, nothing of this request was recorded: {msg}"),
    )
}
