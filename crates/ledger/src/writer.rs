//! The single writer: every durable change goes through one connection. Requests that arrive
//! while a commit is in flight are batched into the next transaction (group commit), each
//! inside its own savepoint so one request's failure never undoes another's. PostgreSQL runs it
//! as a task fed by a channel ([`Writer::run`]), and first tries a batch without savepoints,
//! its writes held back and sent with the next statement that needs an answer
//! (`optimistic.rs`), its commit also opening the batch of what arrived meanwhile; a batch that
//! does not go through whole is rolled back and run again the savepoint way. SQLite's callers
//! drive it themselves (`combiner.rs`).

use std::sync::{Arc, OnceLock};

use postern_audit::{ChainedEvent, Checkpoint, EventBody, SigningKey, GENESIS_HASH};
use postern_core::lifecycle::State;
use postern_core::{hexdigits, EventKind, ExecutionId, Timestamp};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use crate::db::{params, RowAccess, SqlValue, WriteConn};
use crate::dialect::Dialect;
use crate::error::{LedgerError, StorageFault};
use crate::model::{ExecutionSummary, NewEvent};
use crate::ops::{Deferral, Op, Outcome};
use crate::recall::Recall;
use crate::rows;

mod accept;
mod chain_check;
mod claims;
mod commit;
mod fence;
mod optimistic;
mod prune;
mod records;
mod trust;

pub use trust::{CheckpointSink, SigningTrust};

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

pub(crate) struct Writer<C> {
    conn: C,
    cfg: WriterConfig,
    /// The chain head as of the open transaction.
    head: (u64, [u8; 32]),
    appended_since_checkpoint: u64,
    /// Events linked in the open transaction, written just before it commits.
    /// Each with its detail's canonical JSON, as hashed (and as stored).
    pending: Vec<(ChainedEvent, String)>,
    /// SQLite only: the head and summaries as of the last commit (see [`Recall`]).
    recall: Option<Recall>,
    /// Executions the current op wrote into `recall` (forgotten again if the op fails).
    touched: Vec<ExecutionId>,
    /// Whether the open transaction has checked this instance's lease (once per commit).
    lease_checked: bool,
    /// The batch is being tried without savepoints (`optimistic.rs`): writes nobody reads the
    /// answer of are held back ([`Writer::later`]).
    optimistic: bool,
    /// PostgreSQL: this instance's row (`heartbeat_at`, `taken_over_by`) as the open
    /// transaction read it `FOR SHARE`, before any op ran; `None` once an op may have changed it.
    lease_row: Option<(i64, Option<String>)>,
    /// The accept being run claimed its intent slot in the batch's opening round trip
    /// (`claims.rs`).
    claim: Option<claims::Claim>,
    /// The committed head and checkpoint this writer vouches for (`trust.rs`).
    own: trust::OwnChain,
}

impl<C: WriteConn> Writer<C> {
    pub fn new(conn: C, cfg: WriterConfig) -> Writer<C> {
        let own = trust::OwnChain {
            trust: cfg.trust.clone(),
            witnessed: cfg.witnessed.clone(),
            sink: cfg.sink.clone(),
            ..trust::OwnChain::default()
        };
        Writer {
            own,
            conn,
            cfg,
            head: (0, GENESIS_HASH),
            appended_since_checkpoint: 0,
            pending: Vec::new(),
            recall: None,
            touched: Vec::new(),
            lease_checked: false,
            optimistic: false,
            lease_row: None,
            claim: None,
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
                            let batch = held.sort(Vec::new(), self.cfg.max_batch, true);
                            self.commit_batch(batch).await;
                            continue;
                        }
                    }
                }
            };
            let Some(op) = next else {
                // The ledger is closing: what was held is committed before the writer ends.
                let batch = held.sort(Vec::new(), self.cfg.max_batch, true);
                if !batch.is_empty() {
                    self.commit_batch(batch).await;
                }
                return;
            };
            let max = self.cfg.max_batch;
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
        self.cfg.max_batch
    }

    pub async fn commit_batch(&mut self, batch: Vec<Op>) {
        self.commit_batch_with(batch, &mut Vec::new).await
    }

    /// Commits `batch`; PostgreSQL's commit also opens the batch of the ops `waiting` then.
    async fn commit_batch_with(&mut self, batch: Vec<Op>, waiting: &mut optimistic::Waiting<'_>) {
        let batch = if self.conn.can_defer() {
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
        self.commit_begun(batch).await
    }

    /// Opens the write transaction ([`Writer::commit_begun`] then fills and commits it),
    /// reconnecting first if the connection was lost.
    pub async fn begin(&mut self) -> Result<u64, LedgerError> {
        self.conn.ensure_connected().await?;
        self.conn.exec(self.cfg.dialect.begin(), &[]).await
    }

    pub fn conn_mut(&mut self) -> &mut C {
        &mut self.conn
    }

    /// Runs one op against the open transaction; its answer waits for the commit. The op
    /// stays whole, so its batch can be run again.
    async fn process(&mut self, op: &Op) -> Outcome {
        match op {
            Op::Accept(req, _) => Outcome::Accept(self.accept(req).await),
            Op::Append(id, ev, now, _) => Outcome::Append(self.append(*id, ev, *now).await),
            Op::Abandoned(id, owner, now, _) => {
                Outcome::Bool(self.abandoned(*id, owner, *now).await)
            }
            Op::Checkpoint(now, _) => Outcome::Checkpoint(self.checkpoint(*now).await),
            Op::StartRun(run, _) => Outcome::Unit(self.start_run(run).await),
            Op::DecideRun(id, decision, by, at, _) => {
                Outcome::Bool(self.decide_run(id, decision.clone(), by, *at).await)
            }
            Op::Notice(pin, detail, at, _) => {
                Outcome::Unit(self.notice(pin.as_deref(), detail.clone(), *at).await)
            }
            Op::EndRun(id, at, reason, _) => Outcome::Unit(self.end_run(id, *at, *reason).await),
            Op::Stream(writes, _) => Outcome::Unit(self.write_streams(writes).await),
            Op::Flush(_) => Outcome::Unit(Ok(())),
            Op::Prune(plan, now, _) => Outcome::Prune(self.prune(plan, *now).await),
            Op::Heartbeat(now, _) => Outcome::Unit(self.heartbeat(*now).await),
            Op::TakeOver(owner, cutoff, now, _) => {
                Outcome::Bool(self.take_over(owner, *cutoff, *now).await)
            }
        }
    }

    /// A write whose answer nothing reads: held back while a batch is tried without
    /// savepoints (it then goes with the next statement that needs an answer, or the commit),
    /// else sent now.
    async fn later(&mut self, sql: &str, params: &[SqlValue]) -> Result<(), LedgerError> {
        if self.optimistic {
            self.conn.defer(sql, params)
        } else {
            self.conn.exec(sql, params).await.map(|_| ())
        }
    }

    /// Appends one event to an execution and answers with its summary after it.
    async fn append(
        &mut self,
        id: ExecutionId,
        ev: &NewEvent,
        now: Timestamp,
    ) -> Result<ExecutionSummary, LedgerError> {
        let mut s = self.load_summary(id).await?;
        self.apply(&mut s, ev, now).await?;
        Ok(s)
    }

    /// The chain head for a transaction just opened: remembered from the last commit if no
    /// other connection wrote since (SQLite), else read.
    async fn open_head(&mut self) -> Result<(u64, [u8; 32]), LedgerError> {
        if self.cfg.dialect.keeps_head_row() {
            // PostgreSQL: summaries are remembered for this transaction only (its row locks
            // keep them true until it ends).
            let head = self.load_head().await?;
            self.recall = Some(Recall::new(-1, head));
            return Ok(head);
        }
        let row = self.conn.query_opt("PRAGMA data_version", &[]).await?;
        let version = row
            .map(|r| rows::get_i64(&r, "data_version"))
            .transpose()?
            .unwrap_or(-1);
        if let Some(recall) = &self.recall {
            if recall.version == version {
                return Ok(recall.head);
            }
        }
        let head = self.load_head().await?;
        self.recall = Some(Recall::new(version, head));
        Ok(head)
    }

    /// Remembers a summary this transaction wrote (forgotten again if its op fails).
    fn remember(&mut self, s: &ExecutionSummary) {
        if let Some(recall) = &mut self.recall {
            recall.remember(s);
            self.touched.push(s.id);
        }
    }

    async fn load_head(&mut self) -> Result<(u64, [u8; 32]), LedgerError> {
        if !self.cfg.dialect.keeps_head_row() {
            let row = self
                .conn
                .query_opt(
                    "SELECT seq, hash FROM events WHERE chain = $1 ORDER BY seq DESC LIMIT 1",
                    params![&self.cfg.chain],
                )
                .await?;
            let Some(row) = row else {
                return Ok((0, GENESIS_HASH));
            };
            let seq = u64::try_from(rows::get_i64(&row, "seq")?)
                .map_err(|e| LedgerError::Corrupt(e.to_string()))?;
            return Ok((seq, rows::hash_from_hex(&rows::get_str(&row, "hash")?)?));
        }
        let q = format!(
            "SELECT head_seq, head_hash FROM chains WHERE chain = $1{}",
            self.cfg.dialect.for_update()
        );
        if let Some(row) = self.conn.query_opt(&q, params![&self.cfg.chain]).await? {
            let seq = u64::try_from(rows::get_i64(&row, "head_seq")?)
                .map_err(|e| LedgerError::Corrupt(e.to_string()))?;
            return Ok((
                seq,
                rows::hash_from_hex(&rows::get_str(&row, "head_hash")?)?,
            ));
        }
        self.conn
            .exec(
                "INSERT INTO chains (chain, head_seq, head_hash) VALUES ($1, 0, $2)",
                params![&self.cfg.chain, hexdigits::encode(GENESIS_HASH)],
            )
            .await?;
        Ok((0, GENESIS_HASH))
    }

    async fn store_head(&mut self) -> Result<(), LedgerError> {
        if !self.cfg.dialect.keeps_head_row() {
            return Ok(());
        }
        self.later(
            "UPDATE chains SET head_seq = $1, head_hash = $2 WHERE chain = $3",
            params![
                self.head.0 as i64,
                hexdigits::encode(self.head.1),
                &self.cfg.chain
            ],
        )
        .await
    }

    async fn checkpoint(&mut self, now: Timestamp) -> Result<Option<Checkpoint>, LedgerError> {
        let key = self
            .cfg
            .signing_key
            .clone()
            .ok_or(LedgerError::NoSigningKey)?;
        // A second checkpoint in one transaction names the first (still uncommitted).
        let in_transaction = self.signed_in_transaction();
        match (in_transaction, self.own.trust.refused()) {
            (_, Some(why)) => return Err(LedgerError::SigningRefused(why)),
            (None, None) => self.may_sign().await?,
            (Some(_), None) => {}
        }
        let last = in_transaction.or(self.own.last_checkpoint);
        if self.head.0 == 0 || last.is_some_and(|l| l.seq == self.head.0) {
            // Nothing new to vouch for (the head is already signed).
            return Ok(None);
        }
        let c = key.checkpoint(&self.cfg.chain, self.head, now, last)?;
        self.store_checkpoint(&c).await?;
        self.appended_since_checkpoint = 0;
        Ok(Some(c))
    }

    /// Writes a checkpoint this transaction signed (it counts once committed).
    async fn store_checkpoint(&mut self, c: &Checkpoint) -> Result<(), LedgerError> {
        let prev = c
            .prev
            .map(|p| (p.seq as i64, hexdigits::encode(p.head_hash)));
        self.later("INSERT INTO checkpoints (chain, seq, head_hash, at, key_id, signature, prev_seq, prev_hash) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING", params![&c.chain, c.seq as i64, hexdigits::encode(c.head_hash), c.at.0, &c.key_id, &c.signature, prev.as_ref().map(|p| p.0), prev.map(|p| p.1)]).await?;
        self.own.signing.push(c.clone());
        Ok(())
    }

    async fn load_summary(&mut self, id: ExecutionId) -> Result<ExecutionSummary, LedgerError> {
        if let Some(s) = self.recall.as_ref().and_then(|r| r.summary(id)).cloned() {
            // Debug builds (the test suites) check every remembered summary against its row
            // (not while writes are held back: the read would send them, and an op that then
            // failed could no longer be undone alone, so the suites would miss that path).
            #[cfg(debug_assertions)]
            if !self.optimistic {
                let read = self.read_summary(id).await?;
                assert_eq!(s, read, "remembered summary of {id} differs from its row");
            }
            return Ok(s);
        }
        self.read_summary(id).await
    }

    async fn read_summary(&mut self, id: ExecutionId) -> Result<ExecutionSummary, LedgerError> {
        let q = format!(
            "SELECT {} FROM executions WHERE id = $1{}",
            rows::SUMMARY_COLUMNS,
            self.cfg.dialect.for_update()
        );
        let row = self
            .conn
            .query_opt(&q, params![id.to_string()])
            .await?
            .ok_or(LedgerError::UnknownExecution(id))?;
        rows::summary(&row)
    }

    /// Appends one lifecycle event to an existing execution and updates its row.
    async fn apply(
        &mut self,
        s: &mut ExecutionSummary,
        ev: &NewEvent,
        now: Timestamp,
    ) -> Result<(), LedgerError> {
        self.advance(s, ev, now).await?;
        self.later("UPDATE executions SET state = $1, n = $2, dispatches = $3, cancel_requested = $4, state_since = $5, first_dispatched_at = $6, rejection_retryable = $7, owner = $8 WHERE id = $9", params![s.lifecycle.state.to_string(), i64::from(s.events), i64::from(s.lifecycle.dispatches), i64::from(s.lifecycle.cancel_requested), now.0, s.first_dispatched_at.map(|t| t.0), i64::from(s.rejection_retryable), &self.cfg.instance, s.id.to_string()]).await?;
        self.remember(s);
        Ok(())
    }

    /// Moves the summary through one event, refusing impossible transitions before anything is
    /// written; stores the result, and queues the chained event for this batch's commit.
    async fn advance(
        &mut self,
        s: &mut ExecutionSummary,
        ev: &NewEvent,
        now: Timestamp,
    ) -> Result<(), LedgerError> {
        let next = s
            .lifecycle
            .next(ev.kind)
            .map_err(|source| LedgerError::Transition {
                execution_id: s.id,
                source,
            })?;
        let n = s.events + 1;
        let mut detail = match &ev.detail {
            Value::Object(m) => m.clone(),
            Value::Null => Default::default(),
            other => [("value".to_string(), other.clone())].into_iter().collect(),
        };
        if let Some(result) = &ev.result {
            // Each result-bearing event has its own slot, its event number: one dispatch can
            // bear two (an unknown answer, then the status query's), and a second result must
            // never overwrite the body an earlier event chained the digest of. (Stores written
            // before this keyed the slot by dispatch count; their refs still name their rows.)
            let attempt = n;
            let digest = format!("sha256:{}", hexdigits::encode(Sha256::digest(&result.body)));
            self.later("INSERT INTO results (execution_id, attempt, digest, size, truncated, body) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (execution_id, attempt) DO UPDATE SET digest = excluded.digest, size = excluded.size, truncated = excluded.truncated, body = excluded.body", params![s.id.to_string(), i64::from(attempt), &digest, result.size as i64, i64::from(result.truncated), &result.body]).await?;
            detail.insert("result_digest".into(), json!(digest));
            detail.insert(
                "result_ref".into(),
                json!(format!("results/{}/{attempt}", s.id)),
            );
            detail.insert("result_size".into(), json!(result.size));
        }
        if ev.kind == EventKind::Dispatched {
            self.check_lease().await?;
            detail.insert("idempotency_key".into(), json!(s.id.to_string()));
            detail.insert("attempt".into(), json!(next.dispatches));
        }
        self.append_event(s.id, n, ev.kind, now, Value::Object(detail))?;
        s.lifecycle = next;
        s.events = n;
        s.state_since = now;
        if ev.kind == EventKind::Dispatched && s.first_dispatched_at.is_none() {
            s.first_dispatched_at = Some(now);
        }
        if matches!(ev.kind, EventKind::Completed(_)) {
            s.rejection_retryable = ev.retryable_rejection;
        }
        Ok(())
    }

    /// Links the event into the chain and queues it; [`Writer::flush_events`] writes the queue
    /// in a few multi-row statements just before the commit.
    fn append_event(
        &mut self,
        id: ExecutionId,
        n: u32,
        kind: EventKind,
        at: Timestamp,
        detail: Value,
    ) -> Result<(), LedgerError> {
        let body = EventBody {
            chain: self.cfg.chain.clone(),
            seq: self.head.0 + 1,
            execution_id: id,
            n,
            event: kind,
            at,
            detail,
        };
        let (e, detail) = ChainedEvent::link_keeping_detail(body, self.head.1)?;
        self.head = (e.body.seq, e.hash);
        self.appended_since_checkpoint += 1;
        self.pending.push((e, detail));
        Ok(())
    }

    async fn flush_events(&mut self) -> Result<(), LedgerError> {
        let mut pending = std::mem::take(&mut self.pending).into_iter().peekable();
        while pending.peek().is_some() {
            let chunk: Vec<_> = pending.by_ref().take(EVENT_ROWS).collect();
            let sql = insert_events_sql(chunk.len());
            let mut params = Vec::with_capacity(chunk.len() * 9);
            for (e, detail) in chunk {
                params.extend([
                    SqlValue::Text(e.body.chain),
                    SqlValue::Int(e.body.seq as i64),
                    SqlValue::Text(e.body.execution_id.to_string()),
                    SqlValue::Int(i64::from(e.body.n)),
                    SqlValue::Text(e.body.event.to_string()),
                    SqlValue::Int(e.body.at.0),
                    SqlValue::Text(detail),
                    SqlValue::Text(hexdigits::encode(e.prev_hash)),
                    SqlValue::Text(hexdigits::encode(e.hash)),
                ]);
            }
            self.later(sql, &params).await?;
        }
        Ok(())
    }

    async fn abandoned(
        &mut self,
        id: ExecutionId,
        owner: &str,
        now: Timestamp,
    ) -> Result<bool, LedgerError> {
        let row = self
            .conn
            .query_opt(
                &format!(
                    "SELECT owner FROM executions WHERE id = $1{}",
                    self.cfg.dialect.for_update()
                ),
                params![id.to_string()],
            )
            .await?
            .ok_or(LedgerError::UnknownExecution(id))?;
        let current_owner: Option<String> = row.opt_text("owner")?;
        let mut s = self.load_summary(id).await?;
        if s.lifecycle.state != State::Dispatched || current_owner.as_deref() != Some(owner) {
            return Ok(false);
        }
        let ev = NewEvent::new(EventKind::OutcomeUnknown).with_detail(json!({
            "reason": "the gateway instance that dispatched it stopped before recording the target's answer",
            "previous_owner": owner,
            "taken_over_by": self.cfg.instance,
        }));
        self.apply(&mut s, &ev, now).await?;
        Ok(true)
    }
}

/// Events per multi-row `INSERT`.
const EVENT_ROWS: usize = 100;

/// The multi-row event `INSERT` for `rows` rows, built once per size (every commit runs one).
fn insert_events_sql(rows: usize) -> &'static str {
    static SQL: [OnceLock<String>; EVENT_ROWS] = [const { OnceLock::new() }; EVENT_ROWS];
    SQL[rows - 1].get_or_init(|| {
        let mut sql = String::from("INSERT INTO events (chain, seq, execution_id, n, event, at, detail, prev_hash, hash) VALUES ");
        for i in 0..rows {
            if i > 0 {
                sql.push_str(", ");
            }
            let placeholders: Vec<String> = (1..=9).map(|c| format!("${}", i * 9 + c)).collect();
            sql.push('(');
            sql.push_str(&placeholders.join(", "));
            sql.push(')');
        }
        sql
    })
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
