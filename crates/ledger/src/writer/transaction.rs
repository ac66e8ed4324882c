//! The writer's connection and settings, and what its open transaction holds: the chain head
//! it links events to, the events linked but not yet written, the summaries it remembers
//! ([`Recall`]) and the lease row it read. Every part of the writer writes through it:
//! [`Transaction::later`] holds a write back while a batch is tried without savepoints.

use std::sync::OnceLock;

use postern_audit::{ChainedEvent, EventBody, GENESIS_HASH};
use postern_core::{hexdigits, EventKind, ExecutionId, Timestamp};
use serde_json::Value;

use super::claims::Claim;
use super::fence::Fence;
use super::WriterConfig;
use crate::db::{params, SqlValue, WriteConn};
use crate::error::LedgerError;
use crate::model::ExecutionSummary;
use crate::recall::Recall;
use crate::rows;

/// The chain head (sequence number, hash).
pub(super) type Head = (u64, [u8; 32]);

/// Where the open transaction stood before an op ran ([`Transaction::mark_op`]).
#[derive(Clone, Copy)]
pub(super) struct OpMark {
    head: Head,
    appended: u64,
    linked: usize,
}

/// The write connection, the writer's settings, and the open transaction's state.
pub(super) struct Transaction<C> {
    pub(super) conn: C,
    pub(super) cfg: WriterConfig,
    /// The chain head as of the open transaction.
    pub(super) head: Head,
    pub(super) appended_since_checkpoint: u64,
    /// Events linked in the open transaction, written just before it commits.
    /// Each with its detail's canonical JSON, as hashed (and as stored).
    pub(super) pending: Vec<(ChainedEvent, String)>,
    /// SQLite only: the head and summaries as of the last commit (see [`Recall`]).
    pub(super) recall: Option<Recall>,
    /// Executions the current op wrote into `recall` (forgotten again if the op fails).
    pub(super) touched: Vec<ExecutionId>,
    /// Whether the open transaction has checked this instance's lease (once per commit).
    pub(super) lease_checked: bool,
    /// The batch is being tried without savepoints (`optimistic.rs`): writes nobody reads the
    /// answer of are held back ([`Transaction::later`]).
    pub(super) optimistic: bool,
    /// PostgreSQL: this instance's row (`heartbeat_at`, `taken_over_by`) as the open
    /// transaction read it `FOR SHARE`, before any op ran; `None` once an op may have changed it.
    pub(super) lease_row: Option<(i64, Option<String>)>,
    /// The accept being run claimed its intent slot in the batch's opening round trip
    /// (`claims.rs`).
    pub(super) claim: Option<Claim>,
}

impl<C: WriteConn> Transaction<C> {
    pub(super) fn new(conn: C, cfg: WriterConfig) -> Transaction<C> {
        Transaction {
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

    /// A write whose answer nothing reads: held back while a batch is tried without
    /// savepoints (it then goes with the next statement that needs an answer, or the commit),
    /// else sent now.
    pub(super) async fn later(
        &mut self,
        sql: &str,
        params: &[SqlValue],
    ) -> Result<(), LedgerError> {
        if self.optimistic {
            self.conn.defer(sql, params)
        } else {
            self.conn.exec(sql, params).await.map(|_| ())
        }
    }

    /// Keeps (`ok`) or rolls back the op's savepoint, then releases it.
    pub(super) async fn end_savepoint(&mut self, ok: bool) -> Result<(), LedgerError> {
        if !ok {
            self.conn.exec("ROLLBACK TO SAVEPOINT op", &[]).await?;
        }
        self.conn
            .exec("RELEASE SAVEPOINT op", &[])
            .await
            .map(|_| ())
    }

    /// The chain head for a transaction just opened: remembered from the last commit if no
    /// other connection wrote since (SQLite), else read.
    pub(super) async fn open_head(&mut self) -> Result<Head, LedgerError> {
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

    /// The chain head as stored: the last event (SQLite), or the chain's row, locked, which is
    /// created at genesis if there is none yet (PostgreSQL).
    async fn load_head(&mut self) -> Result<Head, LedgerError> {
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

    /// PostgreSQL: moves the chain's row to the head (SQLite reads it from the last event).
    pub(super) async fn store_head(&mut self) -> Result<(), LedgerError> {
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

    /// Where the transaction stands before an op runs (the op's remembered summaries are
    /// listed from here on): what [`Transaction::undo_op`] goes back to.
    pub(super) fn mark_op(&mut self) -> OpMark {
        self.touched.clear();
        OpMark {
            head: self.head,
            appended: self.appended_since_checkpoint,
            linked: self.pending.len(),
        }
    }

    /// Undoes in memory what a failed op linked and remembered since `mark` (its writes are
    /// undone by its savepoint, or none reached the store).
    pub(super) fn undo_op(&mut self, mark: OpMark) {
        (self.head, self.appended_since_checkpoint) = (mark.head, mark.appended);
        self.pending.truncate(mark.linked);
        if let Some(recall) = &mut self.recall {
            for id in self.touched.drain(..) {
                recall.forget(id);
            }
        }
    }

    /// Remembers a summary this transaction wrote (forgotten again if its op fails).
    pub(super) fn remember(&mut self, s: &ExecutionSummary) {
        if let Some(recall) = &mut self.recall {
            recall.remember(s);
            self.touched.push(s.id);
        }
    }

    pub(super) async fn load_summary(
        &mut self,
        id: ExecutionId,
    ) -> Result<ExecutionSummary, LedgerError> {
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

    /// Links the event into the chain and queues it; [`Transaction::flush_events`] writes the queue
    /// in a few multi-row statements just before the commit.
    pub(super) fn append_event(
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

    /// Writes the events linked in this transaction, a few multi-row statements in all.
    pub(super) async fn flush_events(&mut self) -> Result<(), LedgerError> {
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

    /// The head as the store holds it in the open transaction: events this transaction
    /// linked but has not written yet are this writer's own.
    pub(super) fn stored_head(&self) -> Head {
        self.pending
            .first()
            .map_or(self.head, |(e, _)| (e.body.seq - 1, e.prev_hash))
    }

    /// The lease's part of the open transaction (`fence.rs`).
    pub(super) fn fence(&mut self) -> Fence<'_, C> {
        Fence {
            conn: &mut self.conn,
            cfg: &self.cfg,
            checked: &mut self.lease_checked,
            row: &mut self.lease_row,
        }
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
