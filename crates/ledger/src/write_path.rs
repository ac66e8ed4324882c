//! How durable changes reach the single writer: on PostgreSQL a writer task fed by a channel,
//! on SQLite callers that commit on their own thread (`combiner.rs`). Either way a request's
//! answer comes back once its commit is durable.

use std::sync::Arc;

use sqlx::any::AnyConnectOptions;
use sqlx::AnyConnection;
use tokio::sync::{mpsc, oneshot};

use crate::combiner::Combiner;
use crate::db;
use crate::dialect::Dialect;
use crate::error::{self, LedgerError};
use crate::ops::Op;
use crate::reader::sqlite_path;
use crate::writer::{SigningTrust, Writer, WriterConfig};
use crate::LedgerOptions;

/// How durable changes reach the single writer.
pub(crate) enum WritePath {
    /// PostgreSQL: a writer task fed by a channel (its statements are awaited anyway).
    Channel(mpsc::Sender<Op>),
    /// SQLite: callers commit on their own thread, combining whatever is queued.
    Combining(Arc<Combiner>),
}

impl WritePath {
    /// SQLite's writes go through a connection of their own (rusqlite), driven by its callers.
    pub fn sqlite(
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
        Ok(WritePath::Combining(Combiner::start(
            writer,
            options.busy_patience,
        )?))
    }

    /// PostgreSQL's writer: a task over the store's first connection, fed by a channel.
    pub fn postgres(
        conn: AnyConnection,
        connect_options: AnyConnectOptions,
        writer_config: WriterConfig,
    ) -> WritePath {
        let (tx, rx) = mpsc::channel(4096);
        let conn = db::PgWriteConn::new(conn, connect_options);
        tokio::spawn(Writer::new(conn, writer_config).run(rx));
        WritePath::Channel(tx)
    }

    /// Write requests waiting for the writer.
    pub fn queued(&self) -> usize {
        match self {
            WritePath::Channel(tx) => tx.max_capacity() - tx.capacity(),
            WritePath::Combining(combiner) => combiner.queued(),
        }
    }

    /// Sends `make`'s op to the writer and waits for its answer (sent once its commit is
    /// durable).
    pub async fn call<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, LedgerError>>) -> Op,
    ) -> Result<T, LedgerError> {
        let (tx, rx) = oneshot::channel();
        match self {
            WritePath::Channel(writer) => writer
                .send(make(tx))
                .await
                .map_err(|_| LedgerError::Closed)?,
            WritePath::Combining(combiner) => combiner.submit(make(tx)),
        }
        rx.await.map_err(|_| LedgerError::Closed)?
    }

    /// Queues `op` for the writer without waiting for it (or for room in its queue).
    pub fn submit_later(&self, op: Op) {
        match self {
            WritePath::Combining(combiner) => combiner.submit(op),
            WritePath::Channel(writer) => {
                if let Err(mpsc::error::TrySendError::Full(op)) = writer.try_send(op) {
                    let writer = writer.clone();
                    tokio::spawn(async move { writer.send(op).await });
                }
            }
        }
    }
}

/// Checkpoints are signed, so without a signing key none is due.
pub(crate) fn writer_config(
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
