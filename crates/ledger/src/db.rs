//! The writer's view of a database connection: run a statement, read at most one row. Two
//! implementations: sqlx (PostgreSQL) and rusqlite (SQLite, called directly on the writer's
//! own thread, `sqlite.rs`). Statements are written once, with `$N` placeholders, for both.

use std::future::Future;
use std::sync::Arc;

use sqlx::any::AnyRow;
use sqlx::{Row, ValueRef};

use crate::error::LedgerError;

mod held;
mod postgres;
mod sqlite;

pub(crate) use postgres::PgWriteConn;
pub(crate) use sqlite::SqliteWriteConn;

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

    /// Rows changed by every statement this connection ran so far, where the connection counts
    /// them (SQLite's `total_changes`): an op that failed without moving it wrote nothing, so it
    /// is undone without a savepoint (`writer/together.rs`). `None`: not counted (PostgreSQL),
    /// or no transaction is open (SQLite rolled it back by itself).
    fn rows_changed(&self) -> Option<u64> {
        None
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

/// The tests' connection to the real PostgreSQL (`POSTERN_TEST_PG`, else the local one).
#[cfg(test)]
pub(crate) async fn test_postgres() -> sqlx::PgConnection {
    use sqlx::Connection;
    sqlx::PgConnection::connect(&postern_testkit::postgres::test_admin_url())
        .await
        .expect("PostgreSQL must be running (see .ci/run)")
}
