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

mod combiner;
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
mod writer;

use std::sync::Arc;
use std::time::Duration;

use postern_audit::{ChainedEvent, Checkpoint, SigningKey};
use postern_core::{ExecutionId, Timestamp};
use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyConnection, AnyPool, ConnectOptions, Connection, Executor};
use tokio::sync::{mpsc, oneshot};

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
use writer::{now_millis, Writer, WriterConfig};
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

/// The ledger: a writer task for durable changes and a pool for reads.
pub struct Ledger {
    dialect: Dialect,
    /// The audit record's reads (chains, checkpoints, events), over the same pool.
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

/// How durable changes reach the single writer.
enum WritePath {
    /// PostgreSQL: a writer task fed by a channel (its statements are awaited anyway).
    Channel(mpsc::Sender<Op>),
    /// SQLite: callers commit on their own thread, combining whatever is queued.
    Combining(Arc<combiner::Combiner>),
}

impl Ledger {
    /// Why this gateway no longer signs checkpoints of its chain, if it does not (the store's
    /// chain is not the one it wrote: `postern status`, a metric, the error log).
    pub fn signing_refused(&self) -> Option<String> {
        self.trust.refused()
    }
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

async fn prepare_connection(conn: &mut AnyConnection, dialect: Dialect) -> Result<(), sqlx::Error> {
    if dialect == Dialect::Sqlite {
        // WAL + FULL: a commit is on disk when it returns. busy_timeout lets two processes
        // on one file take turns instead of failing.
        // Small pages: a commit writes every page it dirtied to the WAL before its fsync, and
        // an execution's rows are small. Only takes effect when the file is created.
        conn.execute("PRAGMA page_size = 4096").await?;
        conn.execute("PRAGMA journal_mode = WAL").await?;
        conn.execute("PRAGMA synchronous = FULL").await?;
        conn.execute("PRAGMA busy_timeout = 30000").await?;
    } else {
        conn.execute(NO_PARALLEL_READS).await?;
        conn.execute(NO_JIT).await?;
    }
    Ok(())
}

/// The record's reads are point lookups and first pages. Where PostgreSQL has no statistics
/// yet (a table just filled, autovacuum off) it estimates an execution's events in the tens of
/// thousands: it planned the lookup as a parallel scan (starting the workers cost 60 ms of a
/// 61 ms `activity trace` on a million executions) and, past `jit_above_cost`, JIT-compiled
/// it (18 ms of a 38 ms trace). Without either the same lookup takes under a millisecond.
pub(crate) const NO_PARALLEL_READS: &str = "SET max_parallel_workers_per_gather = 0";
pub(crate) const NO_JIT: &str = "SET jit = off";

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
        let (connect_options, mut conn) = connect_migrated(url, dialect).await?;
        let instance = register_instance(&mut conn).await?;
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
                    Box::pin(async move { prepare_connection(conn, dialect).await })
                });
        let pg_connect_options = connect_options.clone();
        let pool = pool_options.connect_with(connect_options).await?;
        let trust = Arc::new(SigningTrust::default());
        let writer_config = writer_config(dialect, &chain, &instance, &options, trust.clone());
        let writes = match dialect {
            Dialect::Sqlite => {
                drop(conn);
                start_sqlite_writer(url, writer_config, &options)?
            }
            Dialect::Postgres => {
                let (tx, rx) = mpsc::channel(4096);
                let conn = db::PgWriteConn::new(conn, pg_connect_options);
                tokio::spawn(Writer::new(conn, writer_config).run(rx));
                WritePath::Channel(tx)
            }
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
        match &self.writes {
            WritePath::Channel(tx) => tx.max_capacity() - tx.capacity(),
            WritePath::Combining(combiner) => combiner.queued(),
        }
    }

    /// This instance's id (the owner recorded on the executions it touches).
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// This instance's audit chain.
    pub fn chain(&self) -> &str {
        &self.chain
    }

    async fn call<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, LedgerError>>) -> Op,
    ) -> Result<T, LedgerError> {
        let (tx, rx) = oneshot::channel();
        match &self.writes {
            WritePath::Channel(writer) => writer
                .send(make(tx))
                .await
                .map_err(|_| LedgerError::Closed)?,
            WritePath::Combining(combiner) => combiner.submit(make(tx)),
        }
        rx.await.map_err(|_| LedgerError::Closed)?
    }

    /// Accepts a request as a new execution or matches it to a prior one, atomically and
    /// durably.
    pub async fn accept(&self, req: AcceptRequest) -> Result<AcceptOutcome, LedgerError> {
        use tracing::Instrument;
        // A child of the call's span: the durable accept-or-match commit.
        let span = tracing::debug_span!("ledger.accept");
        self.call(|tx| Op::Accept(Box::new(req), tx))
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
        self.call(|tx| Op::Append(id, Box::new(event), now, tx))
            .instrument(span)
            .await
    }

    /// Queues one lifecycle event nothing waits on (a delivery) and returns at once. It is
    /// committed with a later commit, by [`Ledger::flush`] at the latest, or when the ledger
    /// closes; an impossible transition is refused then, and written nowhere.
    pub fn append_later(&self, id: ExecutionId, event: NewEvent, now: Timestamp) {
        // Nobody reads the reply.
        let (tx, _) = oneshot::channel();
        self.submit_later(Op::Append(id, Box::new(event), now, tx));
    }

    /// Queues `op` for the writer without waiting for it (or for room in its queue).
    fn submit_later(&self, op: Op) {
        match &self.writes {
            WritePath::Combining(combiner) => combiner.submit(op),
            WritePath::Channel(writer) => {
                if let Err(mpsc::error::TrySendError::Full(op)) = writer.try_send(op) {
                    let writer = writer.clone();
                    tokio::spawn(async move { writer.send(op).await });
                }
            }
        }
    }

    /// Signs a checkpoint of this instance's chain head now.
    pub async fn checkpoint(&self, now: Timestamp) -> Result<Option<Checkpoint>, LedgerError> {
        self.call(|tx| Op::Checkpoint(now, tx)).await
    }

    /// Records a run of the Sessions log; for a run already recorded (by its own actor):
    /// marks it seen now, and resumes it if it ended only because it idled or its gateway
    /// stopped. Its first start stays.
    pub async fn start_run(&self, run: Run) -> Result<(), LedgerError> {
        self.call(|tx| Op::StartRun(Box::new(run), tx)).await
    }

    /// Records the end of a run (the first end recorded stays).
    pub async fn end_run(&self, id: &str, at: Timestamp, how: RunEnd) -> Result<(), LedgerError> {
        let id = id.to_string();
        self.call(|tx| Op::EndRun(id, at, how, tx)).await
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
        self.submit_later(Op::Stream(vec![StreamWrite::Call(Box::new(call))], tx));
    }

    /// The calls that reached an execution, oldest first.
    pub async fn calls_of(&self, id: ExecutionId) -> Result<Vec<CallRecord>, LedgerError> {
        self.store.calls_of(id).await
    }

    /// A run's calls, oldest first (at most `limit`).
    pub async fn calls_in(&self, run: &str, limit: u32) -> Result<Vec<CallRecord>, LedgerError> {
        self.store.calls_in(run, limit).await
    }

    /// One execution's row.
    pub async fn summary(&self, id: ExecutionId) -> Result<Option<ExecutionSummary>, LedgerError> {
        self.store.summary(id).await
    }

    /// Everything about one execution.
    pub async fn execution(&self, id: ExecutionId) -> Result<Option<ExecutionView>, LedgerError> {
        self.store.execution(id).await
    }

    /// Executions, newest first (by id: UUIDv7, minted when the ledger accepted them).
    pub async fn list(&self, filter: &ListFilter) -> Result<Vec<ExecutionSummary>, LedgerError> {
        self.store.list(filter).await
    }

    /// How many executions `filter` matches, whatever its `limit`.
    pub async fn count(&self, filter: &ListFilter) -> Result<u64, LedgerError> {
        self.store.count(filter).await
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
        self.call(|tx| Op::DecideRun(id, decision, by, at, tx))
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
        self.call(|tx| Op::Notice(pin.map(Box::new), detail, at, tx))
            .await
    }

    /// Every upstream tool's accepted version.
    pub async fn tool_pins(&self) -> Result<Vec<ToolPin>, LedgerError> {
        sqlx::query("SELECT upstream, tool, digest, definition, pinned_at, accepted_by FROM upstream_tool_pins ORDER BY upstream, tool")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(rows::tool_pin)
            .collect()
    }

    /// The waiting executions and the last checkpoint (see [`StoreReader::health`]).
    pub async fn health(&self, now: Timestamp) -> Result<StoreHealth, LedgerError> {
        self.store.health(now).await
    }

    /// One run of the Sessions log.
    pub async fn run(&self, id: &str) -> Result<Option<Run>, LedgerError> {
        self.store.run(id).await
    }

    /// Runs (the Sessions log), newest first.
    pub async fn runs(&self, limit: u32) -> Result<Vec<Run>, LedgerError> {
        self.store.runs(limit).await
    }

    /// Every chain with its head position.
    pub async fn chain_heads(&self) -> Result<Vec<(String, u64)>, LedgerError> {
        self.store.chain_heads().await
    }

    /// Every chain's last event (seq and hash).
    pub async fn chain_head_events(&self) -> Result<Vec<postern_audit::ChainHead>, LedgerError> {
        self.store.chain_head_events().await
    }

    /// Every signed checkpoint, by chain and position.
    pub async fn checkpoints(&self) -> Result<Vec<Checkpoint>, LedgerError> {
        self.store.checkpoints().await
    }

    /// Every signed pruned-range statement, by chain and position.
    pub async fn pruned_ranges(&self) -> Result<Vec<postern_audit::PrunedRange>, LedgerError> {
        self.store.pruned_ranges().await
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
        self.call(|tx| Op::Stream(writes, tx)).await
    }

    /// Commits everything queued before this call; returns once it is durable.
    pub async fn flush(&self) -> Result<(), LedgerError> {
        self.call(Op::Flush).await
    }

    /// A stream's events after position `after` (all of them for `None`), in order.
    pub async fn stream_events_after(
        &self,
        stream_id: &str,
        after: Option<u64>,
    ) -> Result<Vec<StreamEvent>, LedgerError> {
        let after = after.map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
        sqlx::query("SELECT stream_id, n, payload, execution_id, last, at FROM stream_events WHERE stream_id = $1 AND n > $2 ORDER BY n")
            .bind(stream_id)
            .bind(after)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(rows::stream_event)
            .collect()
    }

    /// Who may resume a stream.
    pub async fn stream_owner(&self, stream_id: &str) -> Result<Option<StreamOwner>, LedgerError> {
        sqlx::query("SELECT stream_id, session_id, actor, at FROM streams WHERE stream_id = $1")
            .bind(stream_id)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(rows::stream_owner)
            .transpose()
    }

    /// An MCP session's stored state (opaque to the ledger).
    pub async fn mcp_session(&self, id: &str) -> Result<Option<String>, LedgerError> {
        sqlx::query("SELECT state FROM mcp_sessions WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(|r| rows::get_str(r, "state"))
            .transpose()
    }

    /// The actor an MCP session belongs to, if one was recorded.
    pub async fn mcp_session_actor(&self, id: &str) -> Result<Option<String>, LedgerError> {
        sqlx::query("SELECT actor FROM mcp_session_actors WHERE session_id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(|r| rows::get_str(r, "actor"))
            .transpose()
    }

    /// Deletes transport state older than `before` (stream events, owners, sessions) and runs
    /// that ended before it. The execution record is never pruned here (see [`Ledger::prune`]).
    pub async fn prune_streams(&self, before: Timestamp) -> Result<u64, LedgerError> {
        let mut removed = 0;
        for table in [
            "stream_events",
            "streams",
            "mcp_sessions",
            "mcp_session_actors",
        ] {
            removed += sqlx::query(&format!("DELETE FROM {table} WHERE at < $1"))
                .bind(before.0)
                .execute(&self.pool)
                .await?
                .rows_affected();
        }
        // Refusals (no execution) age out with the transport state; a call that reached an
        // execution goes with that execution's record.
        removed += sqlx::query("DELETE FROM calls WHERE execution_id IS NULL AND at < $1")
            .bind(before.0)
            .execute(&self.pool)
            .await?
            .rows_affected();
        removed += sqlx::query("DELETE FROM runs WHERE ended_at IS NOT NULL AND ended_at < $1")
            .bind(before.0)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(removed)
    }

    /// Streams every event in storage order (see [`StoreReader::scan_events`]).
    pub async fn scan_events(
        &self,
        each: impl FnMut(Result<ChainedEvent, (i64, String)>),
    ) -> Result<(), LedgerError> {
        self.store.scan_events(each).await
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

/// The first connection to the store, its schema migrated: it becomes PostgreSQL's write
/// connection, and the options it was opened with open the read pool.
async fn connect_migrated(
    url: &str,
    dialect: Dialect,
) -> Result<(AnyConnectOptions, AnyConnection), LedgerError> {
    let connect_url = if dialect == Dialect::Sqlite && !url.contains('?') {
        format!("{url}?mode=rwc")
    } else {
        url.to_string()
    };
    let connect_options: AnyConnectOptions = connect_url.parse()?;
    let connect_options = connect_options.disable_statement_logging();
    let mut conn = AnyConnection::connect_with(&connect_options).await?;
    prepare_connection(&mut conn, dialect).await?;
    migrate(&mut conn, dialect).await?;
    Ok((connect_options, conn))
}

/// Records this process as a new instance of the store, with a fresh id.
async fn register_instance(conn: &mut AnyConnection) -> Result<String, LedgerError> {
    let instance = format!("inst-{}", uuid::Uuid::now_v7().simple());
    let now = now_millis();
    sqlx::query("INSERT INTO instances (id, started_at, heartbeat_at) VALUES ($1, $2, $2)")
        .bind(&instance)
        .bind(now)
        .execute(conn)
        .await?;
    Ok(instance)
}

/// Checkpoints are signed, so without a signing key none is due.
fn writer_config(
    dialect: Dialect,
    chain: &str,
    instance: &str,
    options: &LedgerOptions,
    trust: Arc<SigningTrust>,
) -> WriterConfig {
    WriterConfig {
        dialect,
        chain: chain.to_string(),
        instance: instance.to_string(),
        signing_key: options.signing_key.clone(),
        checkpoint_every: if options.signing_key.is_some() {
            options.checkpoint_every
        } else {
            0
        },
        max_batch: options.max_batch.max(1),
        lease: (dialect == Dialect::Postgres).then_some(options.lease),
        trust,
        witnessed: options
            .witnessed
            .iter()
            .filter(|c| c.chain == chain)
            .max_by_key(|c| c.seq)
            .cloned(),
        sink: options.checkpoint_sink.clone(),
    }
}

/// SQLite's writes go through a connection of their own (rusqlite), driven by its callers.
fn start_sqlite_writer(
    url: &str,
    writer_config: WriterConfig,
    options: &LedgerOptions,
) -> Result<WritePath, LedgerError> {
    let sqlite = rusqlite::Connection::open(sqlite_path(url)).map_err(error::sqlite_error)?;
    sqlite
        .execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA busy_timeout = 30000;",
        )
        .map_err(error::sqlite_error)?;
    sqlite.set_prepared_statement_cache_capacity(64);
    let writer = Writer::new(db::SqliteWriteConn(sqlite), writer_config);
    Ok(WritePath::Combining(combiner::Combiner::start(
        writer,
        options.busy_patience,
    )?))
}

async fn migrate(conn: &mut AnyConnection, dialect: Dialect) -> Result<(), LedgerError> {
    conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)").await?;
    let applied: Vec<i64> = sqlx::query("SELECT version FROM schema_migrations ORDER BY version")
        .fetch_all(&mut *conn)
        .await?
        .iter()
        .map(|r| rows::get_i64(r, "version"))
        .collect::<Result<_, _>>()?;
    let known = schema::latest_version();
    if let Some(&found) = applied.iter().max() {
        if found > known {
            return Err(LedgerError::SchemaTooNew { found, known });
        }
    }
    for m in schema::MIGRATIONS
        .iter()
        .filter(|m| !applied.contains(&m.version))
    {
        let fail = |source| LedgerError::Migration {
            version: m.version,
            name: m.name,
            source,
        };
        conn.execute(dialect.begin()).await.map_err(fail)?;
        let result = async {
            conn.execute(m.sql(dialect)).await?;
            sqlx::query(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
            )
            .bind(m.version)
            .bind(m.name)
            .bind(now_millis())
            .execute(&mut *conn)
            .await?;
            Ok::<_, sqlx::Error>(())
        }
        .await;
        match result {
            Ok(()) => conn.execute("COMMIT").await.map(|_| ()).map_err(fail)?,
            Err(e) => {
                let _ = conn.execute("ROLLBACK").await;
                // Another process may have applied it concurrently; re-check before failing.
                let done = sqlx::query("SELECT version FROM schema_migrations WHERE version = $1")
                    .bind(m.version)
                    .fetch_optional(&mut *conn)
                    .await?
                    .is_some();
                if !done {
                    return Err(fail(e));
                }
            }
        }
    }
    Ok(())
}
