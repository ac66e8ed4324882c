//! Postern's durable ledger: executions, the append-only hash-chained event log, stored
//! results, operation keys and runs, on embedded SQLite (default) or PostgreSQL (several
//! gateway replicas).
//!
//! Architecture invariant: this is the only crate with SQL. Every change goes through one
//! writer task per instance that batches concurrent requests into shared commits (group
//! commit); a request's reply is sent only after its commit is durable, which is what makes
//! `dispatched` write-ahead and results durable before answers.
//!
//! Architecture invariant: accept-or-match is decided inside one transaction, at a row the
//! database makes unique (the intent slot, or the operation key): never check-then-insert.
//! Transitions are checked against the core's lifecycle table before anything is written.
//!
//! Architecture invariant: the ledger never retries an action. Its recovery scan only records
//! `outcome_unknown` for executions a stopped instance left `dispatched`. (PostgreSQL's writer
//! does replace a lost connection, between transactions only, and renews the instance's lease
//! through the writer: an instance that cannot write lets its lease lapse.)
//!
//! Architecture invariant: a taken-over or lapsed instance dispatches nothing. On PostgreSQL
//! the takeover scan claims an instance whose lease expired once (`taken_over_by`), and every
//! transaction that records `dispatched` checks its own instance row inside it (`lease.rs`).
//! Each stored result has its own slot (its event's number): a later result never overwrites
//! the body an earlier event chained the digest of.
//!
//! Architecture invariant: events are only ever removed by retention, whole executions at a
//! time and only final ones, and each removed run of the chain leaves a signed pruned-range
//! statement the verifier links across.
//!
//! Architecture invariant: the writer signs a checkpoint only of a chain it wrote or checked
//! (`writer/trust.rs`): a stored head that does not run on from the one it committed stops its
//! signing for good ([`Ledger::signing_refused`]); each checkpoint names the one before it.
//! Every error says which storage fault it is
//! ([`StorageFault`]): busy and unavailable are worth waiting for, full and read-only are not.
//!
//! Architecture invariant: a budget on effects (issue 53) is counted in the transaction that
//! accepts the execution, under its scope's lock (`writer/budgets.rs`): an execution counts from
//! its first dispatch, once, and no longer if it ends `failed`. *Checked by* `budgets::*`.
//!
//! A reader that cannot write is a type: [`Ledger::read`] gives the ledger's [`StoreReader`]
//! (the one `audit verify --store` opens alone), which has no write path. [`Ledger`] keeps the
//! writes and its lifecycle (liveness, leases and retention in modules of their own); the
//! writer is in parts, a type for each role (`writer.rs`).

mod budget;
mod combiner;
mod connect;
mod db;
mod dialect;
pub mod disk;
mod error;
mod lease;
mod liveness;
mod model;
mod ops;
mod reader;
mod recall;
mod retention;
mod rows;
mod schema;
mod streams;
pub mod telemetry;
mod write_path;
mod writer;

use std::sync::Arc;
use std::time::Duration;

use postern_audit::{Checkpoint, SigningKey};
use postern_core::{ExecutionId, Timestamp};
use sqlx::any::AnyPoolOptions;
use sqlx::AnyPool;
use tokio::sync::oneshot;

pub use budget::{BudgetCharge, BudgetUsage};
pub use dialect::Dialect;
pub use error::{LedgerError, StorageFault};
pub use model::{
    AcceptOutcome, AcceptRequest, CallRecord, ExecutionSummary, ExecutionView, ListFilter,
    NewEvent, RecoveryReport, ResultBody, Run, RunDecision, RunEnd, RunPrincipal, StoreHealth,
    StoredResult, ToolPin,
};
pub use reader::StoreReader;
pub use retention::{PruneReport, Retention};
pub use streams::{StreamEvent, StreamOwner, StreamWrite};

pub use lease::LeaseLost;
use liveness::Liveness;
use ops::Op;
use reader::sqlite_path;
use write_path::WritePath;
pub use writer::{CheckpointSink, SigningTrust};

/// How a ledger is opened.
#[derive(Clone, Debug)]
pub struct LedgerOptions {
    /// Signs checkpoints; without it, no checkpoints are written.
    pub signing_key: Option<Arc<SigningKey>>,
    /// Sign a checkpoint after this many events (0: only when asked).
    pub checkpoint_every: u64,
    /// PostgreSQL: how long an instance may be silent before its in-flight executions are
    /// declared `outcome_unknown` by another.
    pub lease: Duration,
    /// The most requests one commit carries.
    pub max_batch: usize,
    /// SQLite: how long a commit waits for another process's write lock before it fails as
    /// [`StorageFault::Busy`].
    pub busy_patience: Duration,
    /// The latest checkpoint of each chain a witness outside the store holds: the first
    /// signature after start-up requires the store to still hold it.
    pub witnessed: Vec<Checkpoint>,
    /// Told of each checkpoint once it is committed (the witness).
    pub checkpoint_sink: Option<CheckpointSink>,
}

impl Default for LedgerOptions {
    fn default() -> Self {
        LedgerOptions {
            signing_key: None,
            checkpoint_every: 1000,
            lease: Duration::from_secs(30),
            max_batch: 256,
            busy_patience: Duration::from_secs(30),
            witnessed: Vec::new(),
            checkpoint_sink: None,
        }
    }
}

/// The ledger: a writer for durable changes and, for reads, a [`StoreReader`] over the same
/// pool ([`Ledger::read`]).
pub struct Ledger {
    dialect: Dialect,
    /// The reads, over the same pool: a reader that cannot write.
    store: StoreReader,
    instance: String,
    chain: String,
    pool: AnyPool,
    writes: WritePath,
    liveness: Liveness,
    heartbeat: Option<tokio::task::JoinHandle<()>>,
    /// This instance's hold on its lease (PostgreSQL), as its heartbeat last renewed it.
    lease: Arc<lease::LeaseState>,
    /// Whether the writer still signs its chain (`writer/trust.rs`).
    trust: Arc<SigningTrust>,
}

impl Drop for Ledger {
    fn drop(&mut self) {
        if let WritePath::Combining(c) = &self.writes {
            c.close();
        }
        if let Some(h) = self.heartbeat.take() {
            h.abort();
        }
    }
}

impl Ledger {
    /// Opens (creating if needed) the store at `url`, applies migrations and runs the
    /// recovery scan.
    pub async fn open(
        url: &str,
        options: LedgerOptions,
    ) -> Result<(Ledger, RecoveryReport), LedgerError> {
        sqlx::any::install_default_drivers();
        let dialect =
            Dialect::from_url(url).ok_or_else(|| LedgerError::UnsupportedUrl(url.to_string()))?;
        let (connect_options, mut conn) = connect::connect_migrated(url, dialect).await?;
        let instance = connect::register_instance(&mut conn).await?;
        // SQLite serialises writers on the file, so one chain is shared; PostgreSQL replicas
        // each write their own chain and never contend for one head row.
        let chain = match dialect {
            Dialect::Sqlite => "main".to_string(),
            Dialect::Postgres => instance.clone(),
        };
        let liveness = match dialect {
            Dialect::Sqlite => Liveness::lock_files(sqlite_path(url), &instance)?,
            Dialect::Postgres => Liveness::Heartbeat {
                lease: options.lease,
            },
        };
        let pool_options =
            AnyPoolOptions::new()
                .max_connections(4)
                .after_connect(move |conn, _| {
                    Box::pin(async move { connect::prepare_connection(conn, dialect).await })
                });
        let pg_connect_options = connect_options.clone();
        let pool = pool_options.connect_with(connect_options).await?;
        let trust = Arc::new(SigningTrust::default());
        let writer_config =
            write_path::writer_config(dialect, &chain, &instance, &options, trust.clone());
        let writes = match dialect {
            Dialect::Sqlite => {
                drop(conn);
                WritePath::sqlite(url, writer_config, &options)?
            }
            Dialect::Postgres => WritePath::postgres(conn, pg_connect_options, writer_config),
        };

        let lease = lease::LeaseState::new((dialect == Dialect::Postgres).then_some(options.lease));
        let heartbeat = match &writes {
            WritePath::Channel(writer) => Some(lease::heartbeat(
                writer.downgrade(),
                options.lease,
                lease.clone(),
            )),
            WritePath::Combining(_) => None,
        };

        let ledger = Ledger {
            dialect,
            store: StoreReader::over(
                pool.clone(),
                (dialect == Dialect::Sqlite).then(|| sqlite_path(url).into()),
            ),
            instance,
            chain,
            pool,
            writes,
            liveness,
            heartbeat,
            lease,
            trust,
        };
        let report = ledger.recover().await?;
        Ok((ledger, report))
    }

    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// Write requests waiting for the writer (a `/metrics` gauge).
    pub fn queue_depth(&self) -> usize {
        self.writes.queued()
    }

    /// This instance's id (the owner recorded on the executions it touches).
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// This instance's audit chain.
    pub fn chain(&self) -> &str {
        &self.chain
    }

    /// The ledger's reads: executions, runs and calls, the audit record, transport state. The
    /// reader cannot write.
    pub fn read(&self) -> &StoreReader {
        &self.store
    }

    /// Why this gateway no longer signs checkpoints of its chain, if it does not (the store's
    /// chain is not the one it wrote: `postern status`, a metric, the error log).
    pub fn signing_refused(&self) -> Option<String> {
        self.trust.refused()
    }

    /// Accepts a request as a new execution or matches it to a prior one, atomically and
    /// durably.
    pub async fn accept(&self, req: AcceptRequest) -> Result<AcceptOutcome, LedgerError> {
        use tracing::Instrument;
        // A child of the call's span: the durable accept-or-match commit.
        let span = tracing::debug_span!("ledger.accept");
        self.writes
            .call(|tx| Op::Accept(Box::new(req), tx))
            .instrument(span)
            .await
    }

    /// Appends one lifecycle event; durable when this returns.
    pub async fn append(
        &self,
        id: ExecutionId,
        event: NewEvent,
        now: Timestamp,
    ) -> Result<ExecutionSummary, LedgerError> {
        use tracing::Instrument;
        let span = tracing::debug_span!("ledger.append", event = %event.kind);
        self.writes
            .call(|tx| Op::Append(id, Box::new(event), now, tx))
            .instrument(span)
            .await
    }

    /// Queues one lifecycle event nothing waits on (a delivery) and returns at once. It is
    /// committed with a later commit, by [`Ledger::flush`] at the latest, or when the ledger
    /// closes; an impossible transition is refused then, and written nowhere.
    pub fn append_later(&self, id: ExecutionId, event: NewEvent, now: Timestamp) {
        // Nobody reads the reply.
        let (tx, _) = oneshot::channel();
        self.writes
            .submit_later(Op::Append(id, Box::new(event), now, tx));
    }

    /// Signs a checkpoint of this instance's chain head now.
    pub async fn checkpoint(&self, now: Timestamp) -> Result<Option<Checkpoint>, LedgerError> {
        self.writes.call(|tx| Op::Checkpoint(now, tx)).await
    }

    /// Records a run of the Sessions log; for a run already recorded (by its own actor):
    /// marks it seen now, and resumes it if it ended only because it idled or its gateway
    /// stopped. Its first start stays.
    pub async fn start_run(&self, run: Run) -> Result<(), LedgerError> {
        self.writes.call(|tx| Op::StartRun(Box::new(run), tx)).await
    }

    /// Records the end of a run (the first end recorded stays).
    pub async fn end_run(&self, id: &str, at: Timestamp, how: RunEnd) -> Result<(), LedgerError> {
        let id = id.to_string();
        self.writes.call(|tx| Op::EndRun(id, at, how, tx)).await
    }

    /// Ends, as `idle_expired`, every open run no gateway has seen (started, resumed, or
    /// re-recorded by [`Ledger::start_run`]) since `before`, and that has had no call since
    /// (whichever instance served it); returns their ids.
    pub async fn expire_runs(
        &self,
        before: Timestamp,
        now: Timestamp,
    ) -> Result<Vec<String>, LedgerError> {
        let idle: Vec<String> = sqlx::query(
            "SELECT id FROM runs WHERE ended_at IS NULL AND seen_at < $1 AND NOT EXISTS (SELECT 1 FROM calls WHERE calls.run_id = runs.id AND calls.at >= $1)",
        )
        .bind(before.0)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|row| rows::get_str(row, "id"))
        .collect::<Result<_, _>>()?;
        for id in &idle {
            self.end_run(id, now, RunEnd::IdleExpired).await?;
        }
        Ok(idle)
    }

    /// Records a call as answered. Nothing waits for it: it rides the next commit.
    pub fn record_call(&self, call: CallRecord) {
        let (tx, _) = oneshot::channel();
        self.writes
            .submit_later(Op::Stream(vec![StreamWrite::Call(Box::new(call))], tx));
    }

    /// Records an operator's decision about a run, if none of its kind is recorded yet (and,
    /// to authorize, it is not revoked): whether this one was.
    pub async fn decide_run(
        &self,
        id: &str,
        decision: RunDecision,
        by: &str,
        at: Timestamp,
    ) -> Result<bool, LedgerError> {
        let (id, by) = (id.to_string(), by.to_string());
        self.writes
            .call(|tx| Op::DecideRun(id, decision, by, at, tx))
            .await
    }

    /// Chains a gateway-level `notice` into the audit log and, with `pin`, sets that upstream
    /// tool's accepted version, in one commit.
    pub async fn notice(
        &self,
        pin: Option<ToolPin>,
        detail: serde_json::Value,
        at: Timestamp,
    ) -> Result<(), LedgerError> {
        self.writes
            .call(|tx| Op::Notice(pin.map(Box::new), detail, at, tx))
            .await
    }

    /// Records transport state for resumable streams. It shares the next commit rather than
    /// spending one of its own; the future resolves once that commit is durable.
    pub async fn record_stream(&self, write: StreamWrite) -> Result<(), LedgerError> {
        self.record_streams(vec![write]).await
    }

    /// As [`Ledger::record_stream`], committed now rather than with the next commit: for a
    /// write a client is waiting on (a session's owner and state, before its `initialize` is
    /// answered), where riding a later commit would add its hold to the client's wait.
    pub async fn record_stream_now(&self, write: StreamWrite) -> Result<(), LedgerError> {
        // The write is queued first (join polls in order), so the flush commits it.
        let (written, flushed) = tokio::join!(self.record_stream(write), self.flush());
        written.and(flushed)
    }

    /// Several transport writes in one commit, in order (all or none).
    pub async fn record_streams(&self, writes: Vec<StreamWrite>) -> Result<(), LedgerError> {
        self.writes.call(|tx| Op::Stream(writes, tx)).await
    }

    /// Commits everything queued before this call; returns once it is durable.
    pub async fn flush(&self) -> Result<(), LedgerError> {
        self.writes.call(Op::Flush).await
    }

    /// Closes the writer after everything queued is committed.
    pub async fn close(self) {
        // Records held back for a later commit (deliveries) are committed before this returns.
        if let Err(e) = self.flush().await {
            tracing::error!(error = %e, "the last held records (deliveries, calls log) could not be committed at close");
        }
        let pool = self.pool.clone();
        let instance = self.instance.clone();
        let _ = sqlx::query("DELETE FROM instances WHERE id = $1")
            .bind(&instance)
            .execute(&pool)
            .await;
        let writer = match &self.writes {
            WritePath::Combining(c) => c.stop(),
            WritePath::Channel(_) => None,
        };
        drop(self);
        // When this returns the file is closed: nothing of the ledger still writes to it.
        if let Some(writer) = writer {
            let _ = tokio::task::spawn_blocking(move || writer.join()).await;
        }
        pool.close().await;
    }
}
