//! The writer's view of a database connection: run a statement, read at most one row. Two
//! implementations: sqlx (PostgreSQL) and rusqlite (SQLite, called directly on the writer's
//! own thread). Statements are written once, with `$N` placeholders, for both.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Column, Row, ValueRef};

use crate::error::{LedgerError, StorageFault};
use held::Held;

mod held;

/// A statement parameter or a column value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum SqlValue {
    Null,
    /// A null where PostgreSQL must know it is an integer.
    NullInt,
    Int(i64),
    Text(String),
    Blob(Vec<u8>),
}

pub(crate) trait IntoSql {
    fn into_sql(self) -> SqlValue;
    fn null() -> SqlValue {
        SqlValue::Null
    }
}

impl IntoSql for i64 {
    fn into_sql(self) -> SqlValue {
        SqlValue::Int(self)
    }
    fn null() -> SqlValue {
        SqlValue::NullInt
    }
}
impl IntoSql for String {
    fn into_sql(self) -> SqlValue {
        SqlValue::Text(self)
    }
}
impl IntoSql for &String {
    fn into_sql(self) -> SqlValue {
        SqlValue::Text(self.clone())
    }
}
impl IntoSql for &str {
    fn into_sql(self) -> SqlValue {
        SqlValue::Text(self.to_string())
    }
}
impl IntoSql for &Vec<u8> {
    fn into_sql(self) -> SqlValue {
        SqlValue::Blob(self.clone())
    }
}
impl<T: IntoSql> IntoSql for Option<T> {
    fn into_sql(self) -> SqlValue {
        self.map_or(T::null(), IntoSql::into_sql)
    }
}
impl IntoSql for &Option<String> {
    fn into_sql(self) -> SqlValue {
        self.as_ref()
            .map_or(SqlValue::Null, |s| SqlValue::Text(s.clone()))
    }
}

macro_rules! params {
    ($($p:expr),* $(,)?) => { &[$($crate::db::IntoSql::into_sql($p)),*] };
}
pub(crate) use params;

/// Typed access to a row's columns by name.
pub(crate) trait RowAccess {
    fn value(&self, col: &str) -> Result<SqlValue, LedgerError>;

    fn text(&self, col: &str) -> Result<String, LedgerError> {
        match self.value(col)? {
            SqlValue::Text(s) => Ok(s),
            other => Err(mistyped(col, "text", &other)),
        }
    }
    fn opt_text(&self, col: &str) -> Result<Option<String>, LedgerError> {
        match self.value(col)? {
            SqlValue::Null | SqlValue::NullInt => Ok(None),
            SqlValue::Text(s) => Ok(Some(s)),
            other => Err(mistyped(col, "text", &other)),
        }
    }
    fn int(&self, col: &str) -> Result<i64, LedgerError> {
        match self.value(col)? {
            SqlValue::Int(i) => Ok(i),
            other => Err(mistyped(col, "integer", &other)),
        }
    }
    fn opt_int(&self, col: &str) -> Result<Option<i64>, LedgerError> {
        match self.value(col)? {
            SqlValue::Null | SqlValue::NullInt => Ok(None),
            SqlValue::Int(i) => Ok(Some(i)),
            other => Err(mistyped(col, "integer", &other)),
        }
    }
    fn blob(&self, col: &str) -> Result<Vec<u8>, LedgerError> {
        match self.value(col)? {
            SqlValue::Blob(b) => Ok(b),
            SqlValue::Text(s) => Ok(s.into_bytes()),
            other => Err(mistyped(col, "blob", &other)),
        }
    }
}

fn mistyped(col: &str, want: &str, got: &SqlValue) -> LedgerError {
    let kind = match got {
        SqlValue::Null | SqlValue::NullInt => "null",
        SqlValue::Int(_) => "integer",
        SqlValue::Text(_) => "text",
        SqlValue::Blob(_) => "blob",
    };
    LedgerError::Corrupt(format!("column {col}: expected {want}, found {kind}"))
}

impl RowAccess for AnyRow {
    fn value(&self, col: &str) -> Result<SqlValue, LedgerError> {
        let raw = self
            .try_get_raw(col)
            .map_err(|e| LedgerError::Corrupt(format!("column {col}: {e}")))?;
        if raw.is_null() {
            return Ok(SqlValue::Null);
        }
        if let Ok(i) = self.try_get::<i64, _>(col) {
            return Ok(SqlValue::Int(i));
        }
        if let Ok(s) = self.try_get::<String, _>(col) {
            return Ok(SqlValue::Text(s));
        }
        self.try_get::<Vec<u8>, _>(col)
            .map(SqlValue::Blob)
            .map_err(|e| LedgerError::Corrupt(format!("column {col}: {e}")))
    }
}

/// A row read by the writer, owned.
pub(crate) struct OwnedRow {
    names: Arc<[String]>,
    values: Vec<SqlValue>,
}

/// A row read straight through rusqlite (the store verifier's scan), its columns found by the
/// statement's names taken once (rusqlite's own lookup asks SQLite for every name each time).
pub(crate) struct NamedRow<'r> {
    pub row: &'r rusqlite::Row<'r>,
    pub names: &'r [String],
}

impl RowAccess for NamedRow<'_> {
    fn value(&self, col: &str) -> Result<SqlValue, LedgerError> {
        let i = self
            .names
            .iter()
            .position(|n| n == col)
            .ok_or_else(|| LedgerError::Corrupt(format!("no column {col}")))?;
        self.row
            .get_ref(i)
            .map(sql_value)
            .map_err(|e| LedgerError::Corrupt(format!("column {col}: {e}")))
    }
}

/// A SQLite value as the ledger's own.
fn sql_value(v: rusqlite::types::ValueRef<'_>) -> SqlValue {
    use rusqlite::types::ValueRef as V;
    match v {
        V::Null => SqlValue::Null,
        V::Integer(i) => SqlValue::Int(i),
        V::Real(f) => SqlValue::Text(f.to_string()),
        V::Text(t) => SqlValue::Text(String::from_utf8_lossy(t).into_owned()),
        V::Blob(b) => SqlValue::Blob(b.to_vec()),
    }
}

impl RowAccess for OwnedRow {
    fn value(&self, col: &str) -> Result<SqlValue, LedgerError> {
        self.names
            .iter()
            .position(|n| n == col)
            .map(|i| self.values[i].clone())
            .ok_or_else(|| LedgerError::Corrupt(format!("no column {col}")))
    }
}

/// What the writer needs from a connection.
pub(crate) trait WriteConn: Send {
    fn exec(
        &mut self,
        sql: &str,
        params: &[SqlValue],
    ) -> impl Future<Output = Result<u64, LedgerError>> + Send;
    fn query_opt(
        &mut self,
        sql: &str,
        params: &[SqlValue],
    ) -> impl Future<Output = Result<Option<OwnedRow>, LedgerError>> + Send;
    /// Replaces a lost connection, between transactions only (the writer calls it before
    /// `BEGIN`). A connection that cannot be lost says yes at once.
    fn ensure_connected(&mut self) -> impl Future<Output = Result<(), LedgerError>> + Send {
        std::future::ready(Ok(()))
    }

    /// Whether statements whose answer nobody reads can be held back and sent with the next
    /// round trip ([`WriteConn::defer`]). PostgreSQL: yes (each statement is a round trip to
    /// a server); SQLite: no (a call costs microseconds, and the writer never asks).
    fn can_defer(&self) -> bool {
        false
    }

    /// Holds a statement back until the next round trip: the next `exec`, `query_opt`,
    /// `query_all` or `flush` sends it first, in the same message, so a statement that fails
    /// makes that call fail. Only called where [`WriteConn::can_defer`].
    fn defer(&mut self, _sql: &str, _params: &[SqlValue]) -> Result<(), LedgerError> {
        Err(LedgerError::Corrupt(
            "this connection sends every statement as it comes".into(),
        ))
    }

    /// How much is held back (a mark for [`WriteConn::discard_deferred`]).
    fn deferred_len(&self) -> usize {
        0
    }

    /// Forgets what was held back after the `mark` [`WriteConn::deferred_len`] gave.
    fn discard_deferred(&mut self, _mark: usize) {}

    /// Round trips made so far: a statement held back has reached the server only once this
    /// has moved.
    fn round_trips(&self) -> u64 {
        0
    }

    /// Sends what is held back, and `sql` (which may be several statements), in one round
    /// trip; every row any of them returns, in order.
    fn query_all(
        &mut self,
        _sql: &str,
        _params: &[SqlValue],
    ) -> impl Future<Output = Result<Vec<OwnedRow>, LedgerError>> + Send {
        std::future::ready(Err(LedgerError::Corrupt(
            "this connection sends one statement at a time".into(),
        )))
    }

    /// Sends what is held back, in one round trip.
    fn flush(&mut self) -> impl Future<Output = Result<(), LedgerError>> + Send {
        std::future::ready(Ok(()))
    }

    /// How many statements what is held back sends ([`WriteConn::send_held`] counts them).
    fn held_statements(&self) -> usize {
        0
    }

    /// Sends what is held back in one round trip, and says how far the server got: a
    /// message that commits one transaction and opens the next must tell a failure before
    /// its `COMMIT` from one after.
    fn send_held(&mut self) -> impl Future<Output = Sent> + Send {
        std::future::ready(Sent {
            rows: Vec::new(),
            completed: 0,
            failed: Some(LedgerError::Corrupt(
                "this connection sends one statement at a time".into(),
            )),
        })
    }
}

/// What one round trip of held-back statements came to ([`WriteConn::send_held`]).
pub(crate) struct Sent {
    /// Every row the statements returned, in order.
    pub rows: Vec<OwnedRow>,
    /// How many statements the server completed, in order, before it stopped.
    pub completed: usize,
    /// What stopped it, if anything did: the statement after the completed ones failed (the
    /// server skips the rest of the message), or the connection was lost.
    pub failed: Option<LedgerError>,
}

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

/// A statement with its `$N` placeholders replaced by literals, for a simple query (which
/// takes no parameters). The statement text is the ledger's own; only the values come from
/// elsewhere, and each becomes a literal that cannot end early: an escape string (`E'…'`,
/// read the same whatever `standard_conforming_strings` says) with its quotes and backslashes
/// doubled, an integer, or `decode('<hex>', 'hex')`.
pub(crate) fn inline(sql: &str, params: &[SqlValue]) -> Result<String, LedgerError> {
    use std::fmt::Write;
    let mut out = String::with_capacity(sql.len() + 16 * params.len());
    let mut rest = sql;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let digits = rest[at + 1..]
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len() - at - 1);
        let n: usize = rest[at + 1..at + 1 + digits]
            .parse()
            .map_err(|_| LedgerError::Corrupt(format!("a bare $ in a statement: {sql}")))?;
        let value = n
            .checked_sub(1)
            .and_then(|i| params.get(i))
            .ok_or_else(|| LedgerError::Corrupt(format!("no value for ${n} in {sql}")))?;
        match value {
            SqlValue::Null => out.push_str("NULL"),
            SqlValue::NullInt => out.push_str("NULL::bigint"),
            // In parentheses: `- -1` would begin a comment.
            SqlValue::Int(i) => drop(write!(out, "({i})")),
            SqlValue::Text(t) => {
                if t.contains('\0') {
                    // PostgreSQL's text cannot hold it either; a parameter would fail too.
                    return Err(LedgerError::Corrupt(
                        "a text value holds a NUL character".into(),
                    ));
                }
                out.push_str("E'");
                for c in t.chars() {
                    match c {
                        '\'' => out.push_str("''"),
                        '\\' => out.push_str("\\\\"),
                        c => out.push(c),
                    }
                }
                out.push('\'');
            }
            SqlValue::Blob(b) => {
                out.push_str("decode('");
                out.push_str(&postern_core::hexdigits::encode(b));
                out.push_str("', 'hex')");
            }
        }
        rest = &rest[at + 1 + digits..];
    }
    out.push_str(rest);
    Ok(out)
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
    /// are inline, see [`inline`]).
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

/// SQLite, called directly. Lives on the writer's own thread (each call blocks for its
/// duration, a commit for its fsync).
pub(crate) struct SqliteWriteConn(pub rusqlite::Connection);

fn sqlite_sql(sql: &str) -> String {
    // `?N` is SQLite's own numbered-parameter syntax; `$N` would be a *named* parameter.
    sql.replace('$', "?")
}

/// Bound by reference: a commit binds ~40 values, and copying every text was measurable.
impl rusqlite::ToSql for SqlValue {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, Value, ValueRef};
        Ok(match self {
            SqlValue::Null | SqlValue::NullInt => ToSqlOutput::Owned(Value::Null),
            SqlValue::Int(i) => ToSqlOutput::Owned(Value::Integer(*i)),
            SqlValue::Text(s) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
            SqlValue::Blob(b) => ToSqlOutput::Borrowed(ValueRef::Blob(b)),
        })
    }
}

use crate::error::sqlite_error as sqlite_err;

impl SqliteWriteConn {
    /// How long a statement waits for another process's lock before failing with "busy".
    pub fn set_patience(&mut self, patience: std::time::Duration) -> Result<(), LedgerError> {
        self.0.busy_timeout(patience).map_err(sqlite_err)
    }

    fn exec_now(&mut self, sql: &str, params: &[SqlValue]) -> Result<u64, LedgerError> {
        // Cached as well: `BEGIN IMMEDIATE` and `COMMIT` run twice per execution, and parsing
        // them each time cost ~10% of an execution at concurrency 1 (`docs/performance.md`).
        let mut stmt = self
            .0
            .prepare_cached(&sqlite_sql(sql))
            .map_err(sqlite_err)?;
        let n = stmt
            .execute(rusqlite::params_from_iter(params.iter()))
            .map_err(sqlite_err)?;
        Ok(n as u64)
    }

    fn query_now(
        &mut self,
        sql: &str,
        params: &[SqlValue],
    ) -> Result<Option<OwnedRow>, LedgerError> {
        let mut stmt = self
            .0
            .prepare_cached(&sqlite_sql(sql))
            .map_err(sqlite_err)?;
        let names: Arc<[String]> = stmt.column_names().iter().map(|s| s.to_string()).collect();
        let mut rows = stmt
            .query(rusqlite::params_from_iter(params.iter()))
            .map_err(sqlite_err)?;
        let Some(row) = rows.next().map_err(sqlite_err)? else {
            return Ok(None);
        };
        let mut values = Vec::with_capacity(names.len());
        for i in 0..names.len() {
            values.push(sql_value(row.get_ref(i).map_err(sqlite_err)?));
        }
        Ok(Some(OwnedRow { names, values }))
    }
}

impl WriteConn for SqliteWriteConn {
    async fn exec(&mut self, sql: &str, params: &[SqlValue]) -> Result<u64, LedgerError> {
        self.exec_now(sql, params)
    }
    async fn query_opt(
        &mut self,
        sql: &str,
        params: &[SqlValue],
    ) -> Result<Option<OwnedRow>, LedgerError> {
        self.query_now(sql, params)
    }
}

/// The tests' connection to the real PostgreSQL (`POSTERN_TEST_PG`, else the local one).
#[cfg(test)]
pub(crate) async fn test_postgres() -> sqlx::PgConnection {
    use sqlx::Connection;
    sqlx::PgConnection::connect(&postern_testkit::postgres::test_admin_url())
        .await
        .expect("PostgreSQL must be running (see .ci/run)")
}

#[cfg(test)]
mod tests {
    use super::{inline, test_postgres, SqlValue};
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
