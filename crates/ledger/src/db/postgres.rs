//! PostgreSQL's writer connection: statements through sqlx, a lost connection replaced between
//! transactions, and held-back statements (`held.rs`) sent with their values inline.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Column, Row};

use super::held::Held;
use super::{OwnedRow, RowAccess, Sent, SqlValue, WriteConn};
use crate::error::{LedgerError, StorageFault};

fn bind_all<'q>(
    mut q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    params: &[SqlValue],
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    for p in params {
        q = match p {
            SqlValue::Null => q.bind(Option::<String>::None),
            SqlValue::NullInt => q.bind(Option::<i64>::None),
            SqlValue::Int(i) => q.bind(*i),
            SqlValue::Text(s) => q.bind(s.clone()),
            SqlValue::Blob(b) => q.bind(b.clone()),
        };
    }
    q
}

/// PostgreSQL's writer connection. A connection the server dropped (a restart, a network
/// cut) is replaced with backoff, but only between transactions: the statements of one
/// transaction never silently continue on a new connection, where they would autocommit.
pub(crate) struct PgWriteConn {
    conn: Option<AnyConnection>,
    options: sqlx::any::AnyConnectOptions,
    backoff: Duration,
    next_attempt: Option<Instant>,
    /// Statements held back ([`WriteConn::defer`]), rendered with their values inline.
    deferred: Held,
    round_trips: u64,
}

const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const LONGEST_BACKOFF: Duration = Duration::from_secs(5);

impl PgWriteConn {
    pub fn new(conn: AnyConnection, options: sqlx::any::AnyConnectOptions) -> PgWriteConn {
        PgWriteConn {
            conn: Some(conn),
            options,
            backoff: FIRST_BACKOFF,
            next_attempt: None,
            deferred: Held::default(),
            round_trips: 0,
        }
    }

    fn connection(&mut self) -> Result<&mut AnyConnection, LedgerError> {
        self.conn.as_mut().ok_or_else(|| {
            LedgerError::storage(
                StorageFault::Unavailable,
                "the connection to PostgreSQL was lost; the writer reconnects before its next transaction",
            )
        })
    }

    /// Drops the connection when the error says it is gone.
    fn watch<T>(&mut self, r: Result<T, LedgerError>) -> Result<T, LedgerError> {
        if let Err(e) = &r {
            if e.fault() == Some(StorageFault::Unavailable) {
                self.conn = None;
            }
        }
        r
    }
}

impl WriteConn for PgWriteConn {
    async fn exec(&mut self, sql: &str, params: &[SqlValue]) -> Result<u64, LedgerError> {
        // The count must be this statement's alone: what is held back goes first, on its own.
        self.flush().await?;
        self.round_trips += 1;
        let r = self.connection()?.exec_any(sql, params).await;
        self.watch(r)
    }

    async fn query_opt(
        &mut self,
        sql: &str,
        params: &[SqlValue],
    ) -> Result<Option<OwnedRow>, LedgerError> {
        if !self.deferred.is_empty() {
            // Held-back statements return no rows: the first row is this query's.
            return Ok(self.query_all(sql, params).await?.into_iter().next());
        }
        self.round_trips += 1;
        let r = self.connection()?.query_opt_any(sql, params).await;
        self.watch(r)
    }

    async fn ensure_connected(&mut self) -> Result<(), LedgerError> {
        if self.conn.is_some() {
            return Ok(());
        }
        if let Some(at) = self.next_attempt {
            let now = Instant::now();
            if now < at {
                return Err(LedgerError::storage(
                    StorageFault::Unavailable,
                    format!(
                        "PostgreSQL cannot be reached; the writer tries again in {} ms",
                        (at - now).as_millis()
                    ),
                ));
            }
        }
        use sqlx::ConnectOptions;
        match self.options.connect().await {
            Ok(conn) => {
                self.conn = Some(conn);
                self.backoff = FIRST_BACKOFF;
                self.next_attempt = None;
                Ok(())
            }
            Err(e) => {
                self.next_attempt = Some(Instant::now() + self.backoff);
                self.backoff = (self.backoff * 2).min(LONGEST_BACKOFF);
                Err(LedgerError::storage(
                    StorageFault::Unavailable,
                    format!("PostgreSQL cannot be reached: {e}"),
                ))
            }
        }
    }

    fn can_defer(&self) -> bool {
        true
    }

    fn defer(&mut self, sql: &str, params: &[SqlValue]) -> Result<(), LedgerError> {
        self.deferred.push(sql, params)
    }

    fn deferred_len(&self) -> usize {
        self.deferred.len()
    }

    fn discard_deferred(&mut self, mark: usize) {
        self.deferred.discard(mark);
    }

    fn round_trips(&self) -> u64 {
        self.round_trips
    }

    async fn query_all(
        &mut self,
        sql: &str,
        params: &[SqlValue],
    ) -> Result<Vec<OwnedRow>, LedgerError> {
        self.defer(sql, params)?;
        let text = self.deferred.take();
        self.round_trips += 1;
        let r = self.connection()?.simple_rows(&text).await;
        self.watch(r)
    }

    async fn flush(&mut self) -> Result<(), LedgerError> {
        if self.deferred.is_empty() {
            return Ok(());
        }
        let text = self.deferred.take();
        self.round_trips += 1;
        let r = self.connection()?.simple_exec(&text).await;
        self.watch(r)
    }

    fn held_statements(&self) -> usize {
        self.deferred.statements()
    }

    async fn send_held(&mut self) -> Sent {
        let text = self.deferred.take();
        self.round_trips += 1;
        let mut sent = match self.connection() {
            Ok(conn) => conn.simple_counted(&text).await,
            Err(e) => Sent {
                rows: Vec::new(),
                completed: 0,
                failed: Some(e),
            },
        };
        if let Some(e) = sent.failed.take() {
            sent.failed = self.watch::<()>(Err(e)).err();
        }
        sent
    }
}

/// Statements on a plain sqlx connection (what [`PgWriteConn`] holds).
trait AnyConnectionExt {
    async fn exec_any(&mut self, sql: &str, params: &[SqlValue]) -> Result<u64, LedgerError>;
    async fn query_opt_any(
        &mut self,
        sql: &str,
        params: &[SqlValue],
    ) -> Result<Option<OwnedRow>, LedgerError>;
    /// Runs several statements as one simple query (one round trip, no parameters: the values
    /// are inline, see `held::inline`).
    async fn simple_exec(&mut self, text: &str) -> Result<(), LedgerError>;
    /// The same, with the rows all of them returned.
    async fn simple_rows(&mut self, text: &str) -> Result<Vec<OwnedRow>, LedgerError>;
    /// The same, counting the statements completed before a failure.
    async fn simple_counted(&mut self, text: &str) -> Sent;
}

impl AnyConnectionExt for AnyConnection {
    async fn exec_any(&mut self, sql: &str, params: &[SqlValue]) -> Result<u64, LedgerError> {
        Ok(bind_all(sqlx::query(sql), params)
            .execute(&mut *self)
            .await?
            .rows_affected())
    }

    async fn query_opt_any(
        &mut self,
        sql: &str,
        params: &[SqlValue],
    ) -> Result<Option<OwnedRow>, LedgerError> {
        let Some(row) = bind_all(sqlx::query(sql), params)
            .fetch_optional(&mut *self)
            .await?
        else {
            return Ok(None);
        };
        owned(&row).map(Some)
    }

    async fn simple_exec(&mut self, text: &str) -> Result<(), LedgerError> {
        // Through `Executor` (a boxed future): `RawSql::execute` is an `async fn` whose future
        // the compiler cannot prove `Send` for every lifetime.
        sqlx::Executor::execute(&mut *self, sqlx::raw_sql(text)).await?;
        Ok(())
    }

    async fn simple_rows(&mut self, text: &str) -> Result<Vec<OwnedRow>, LedgerError> {
        let rows = sqlx::Executor::fetch_all(&mut *self, sqlx::raw_sql(text)).await?;
        rows.iter().map(owned).collect()
    }

    async fn simple_counted(&mut self, text: &str) -> Sent {
        use futures_util::TryStreamExt;
        let mut sent = Sent {
            rows: Vec::new(),
            completed: 0,
            failed: None,
        };
        // Each statement of a simple query ends with its own `CommandComplete`, which sqlx
        // hands on as a query result; an `ErrorResponse` ends the stream.
        let mut stream = sqlx::Executor::fetch_many(&mut *self, sqlx::raw_sql(text));
        loop {
            match stream.try_next().await {
                Ok(Some(sqlx::Either::Left(_))) => sent.completed += 1,
                Ok(Some(sqlx::Either::Right(row))) => match owned(&row) {
                    Ok(row) => sent.rows.push(row),
                    Err(e) => sent.failed = Some(e),
                },
                Ok(None) => return sent,
                Err(e) => {
                    sent.failed = Some(e.into());
                    return sent;
                }
            }
        }
    }
}

fn owned(row: &AnyRow) -> Result<OwnedRow, LedgerError> {
    let names: Arc<[String]> = row.columns().iter().map(|c| c.name().to_string()).collect();
    let values = names
        .iter()
        .map(|n| row.value(n))
        .collect::<Result<_, _>>()?;
    Ok(OwnedRow { names, values })
}

#[cfg(test)]
mod tests {
    use super::super::held::inline;
    use crate::db::{test_postgres, SqlValue};
    use sqlx::Row;

    /// Every literal [`inline`] writes is read back by the real PostgreSQL as exactly the value
    /// (a wrong escape would be a syntax error the batched way silently falls back from, or
    /// worse, SQL of the value's own).
    #[tokio::test]
    async fn inline_literals_read_back_as_written() {
        let mut conn = test_postgres().await;
        let texts = [
            "it's",
            r"back\slash\'",
            "$1 $2 $$ E'x'",
            "'); SELECT 1; --",
            "/* open comment",
            "line\nbreak\ttab",
            "ünïcødé ✓ 𝄞",
            r"\x00\\'\\",
            "",
        ];
        for text in texts {
            let sql = inline(
                "SELECT $1::text AS t, $2::bigint AS i, $3::bytea AS b",
                &[
                    SqlValue::Text(text.to_string()),
                    SqlValue::Int(-1),
                    SqlValue::Blob(text.as_bytes().to_vec()),
                ],
            )
            .unwrap();
            let row = sqlx::query(sql.as_str())
                .fetch_one(&mut conn)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            assert_eq!(row.get::<String, _>("t"), text, "{sql}");
            assert_eq!(row.get::<i64, _>("i"), -1, "{sql}");
            assert_eq!(row.get::<Vec<u8>, _>("b"), text.as_bytes(), "{sql}");
        }
        assert!(inline("SELECT $1", &[SqlValue::Text("a\0b".into())]).is_err());
    }
}
