//! SQLite's writer connection: rusqlite, called directly on the writer's own thread.

use std::sync::Arc;

use super::{sql_value, OwnedRow, SqlValue, WriteConn};
use crate::error::sqlite_error as sqlite_err;
use crate::error::LedgerError;

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
    fn rows_changed(&self) -> Option<u64> {
        // Only while the transaction is open: an I/O error, a full disk or no memory can make
        // SQLite roll the whole transaction back by itself, which moves no count.
        (!self.0.is_autocommit()).then(|| self.0.total_changes())
    }
}
