//! PostgreSQL's held-back statements ([`crate::db::WriteConn::defer`]), rendered with their
//! values inline and sent together with the next round trip. Rows of the same `INSERT` are
//! sent as one multi-row statement: the server parses and plans each statement of a simple
//! query afresh, and a group commit of 64 calls holds back about a hundred inserts of the same
//! few shapes.
//!
//! Merging moves a later row up to its shape's first statement. That is safe because what
//! moves is an `INSERT` and nothing the writer holds back reads or changes a row another held
//! statement inserts in the same transaction (no triggers, no foreign keys; an update names an
//! execution an earlier commit created). Only inserts that cannot meet another row of the same
//! statement are merged: plain ones (their keys are new ids), `ON CONFLICT DO NOTHING` ones
//! (a second row with the same key is skipped, as it would have been a statement later), and
//! the [`NEW_KEYS`] shapes. Were that ever wrong, the server would refuse the statement
//! ("cannot affect row a second time"): the batch is rolled back and run again the savepoint
//! way, one statement at a time, so a wrong merge costs time, never a record.
//!
//! An execution's summary is rewritten whole by every request that moves it (one `UPDATE` of
//! the same columns, [`MERGED_UPDATES`]), about one per request. Those go as one
//! `UPDATE … FROM (VALUES …)`, a row per execution: the last one held for it, as the last of
//! the single statements would have left it. Merged updates move the other way, *later*: they
//! are sent where the next [`barrier`] is (or last), so an update always follows the insert of
//! the row it names, and no statement that reads or deletes executions, and no `COMMIT`, is
//! passed.

use super::SqlValue;
use crate::error::LedgerError;

/// `ON CONFLICT … DO UPDATE` inserts whose key is new in every transaction: a result's key is
/// its event's number, and one transaction links each event once.
const NEW_KEYS: &[&str] = &["INSERT INTO results "];

/// Updates that rewrite the same columns of one row named by its key, merged into one
/// statement (by their template's start).
const MERGED_UPDATES: &[&str] = &["UPDATE executions SET "];

/// One statement to send, or one multi-row insert or update being gathered.
enum Statement {
    /// A statement sent as it is, and whether it is a [`barrier`] (judged by its template:
    /// a value may say anything).
    Whole(String, bool),
    Rows {
        /// The template up to and including `VALUES `.
        head: String,
        /// What follows the values (an `ON CONFLICT` clause, or nothing).
        tail: String,
        rows: Vec<String>,
    },
    Updates {
        /// The template it was made from (what a row must match to join).
        template: String,
        /// The statement up to its `VALUES ` (`UPDATE t AS t SET c = v.c, … FROM (VALUES `).
        head: String,
        /// What follows the rows (`) AS v (c, …, key) WHERE t.key = v.key`).
        tail: String,
        /// Each row's key literal and its values tuple (the key last), in the order held.
        rows: Vec<(String, String)>,
    },
}

/// Statements held back, in the order they are sent.
#[derive(Default)]
pub(crate) struct Held {
    statements: Vec<Statement>,
    /// Each statement as it was held back: where it went (for [`Held::discard`]).
    log: Vec<usize>,
    /// The first statement a row may still join: none before a `COMMIT` (what follows it is
    /// the next transaction's, see `writer/optimistic.rs`).
    floor: usize,
    /// The first statement an update may still join: none before a [`barrier`].
    update_floor: usize,
}

impl Held {
    pub fn is_empty(&self) -> bool {
        self.log.is_empty()
    }

    /// How many statements are held (a mark for [`Held::discard`]).
    pub fn len(&self) -> usize {
        self.log.len()
    }

    /// How many statements the held text holds (rows merged into one count once).
    pub fn statements(&self) -> usize {
        self.statements.len()
    }

    /// Holds `sql` back with its values inline.
    pub fn push(&mut self, sql: &str, params: &[SqlValue]) -> Result<(), LedgerError> {
        if let Some(update) = update_parts(sql) {
            return self.push_update(sql, update, params);
        }
        let Some((head, tuple, tail)) = insert_parts(sql) else {
            let barrier = barrier(sql);
            self.statements
                .push(Statement::Whole(inline(sql, params)?, barrier));
            self.log.push(self.statements.len() - 1);
            if sql == "COMMIT" {
                self.floor = self.statements.len();
            }
            if barrier {
                self.update_floor = self.statements.len();
            }
            return Ok(());
        };
        let row = inline(tuple, params)?;
        let same = |s: &Statement| matches!(s, Statement::Rows { head: h, tail: t, .. } if h == head && t == tail);
        let open = || Statement::Rows {
            head: head.to_string(),
            tail: tail.to_string(),
            rows: Vec::new(),
        };
        if let Statement::Rows { rows, .. } = self.gathering(self.floor, same, open) {
            rows.push(row);
        }
        Ok(())
    }

    /// The statement from `floor` on that a row of `same` shape joins, opened (`open`) if
    /// there is none yet; the row is logged as held there.
    fn gathering(
        &mut self,
        floor: usize,
        same: impl Fn(&Statement) -> bool,
        open: impl FnOnce() -> Statement,
    ) -> &mut Statement {
        let at = match self.statements[floor..].iter().position(same) {
            Some(at) => floor + at,
            None => {
                self.statements.push(open());
                self.statements.len() - 1
            }
        };
        self.log.push(at);
        &mut self.statements[at]
    }

    fn push_update(
        &mut self,
        sql: &str,
        update: UpdateParts<'_>,
        params: &[SqlValue],
    ) -> Result<(), LedgerError> {
        let key = inline(update.key.1, params)?;
        let row = inline(&update.tuple, params)?;
        let floor = self.update_floor.max(self.floor);
        let same =
            |s: &Statement| matches!(s, Statement::Updates { template, .. } if template == sql);
        let open = || Statement::Updates {
            template: sql.to_string(),
            head: update.head,
            tail: update.tail,
            rows: Vec::new(),
        };
        if let Statement::Updates { rows, .. } = self.gathering(floor, same, open) {
            rows.push((key, row));
        }
        Ok(())
    }

    /// Forgets what was held back after `mark` ([`Held::len`]).
    pub fn discard(&mut self, mark: usize) {
        while self.log.len() > mark {
            let Some(at) = self.log.pop() else { break };
            // Statements are numbered as they were first held, so one whose first row (or
            // whole text) is being taken back is the last one left.
            let emptied = match &mut self.statements[at] {
                Statement::Whole(..) => true,
                Statement::Rows { rows, .. } => rows.pop().is_some() && rows.is_empty(),
                Statement::Updates { rows, .. } => rows.pop().is_some() && rows.is_empty(),
            };
            if emptied {
                self.statements.truncate(at);
            }
        }
        self.floor = self.floor.min(self.statements.len());
        self.update_floor = self.update_floor.min(self.statements.len());
    }

    /// The held statements as one simple query's text, and nothing held any more. Merged
    /// updates go just before the next barrier (or last).
    pub fn take(&mut self) -> String {
        let mut text = String::new();
        let mut updates: Vec<Statement> = Vec::new();
        for s in self.statements.drain(..) {
            match s {
                Statement::Whole(sql, barrier) => {
                    if barrier {
                        for u in updates.drain(..) {
                            render(&mut text, u);
                        }
                    }
                    push_statement(&mut text, &sql);
                }
                Statement::Updates { .. } => updates.push(s),
                rows => render(&mut text, rows),
            }
        }
        for u in updates {
            render(&mut text, u);
        }
        self.log.clear();
        self.floor = 0;
        self.update_floor = 0;
        text
    }
}

fn render(text: &mut String, statement: Statement) {
    match statement {
        Statement::Whole(sql, _) => push_statement(text, &sql),
        Statement::Rows { head, tail, rows } => {
            push_statement(text, &head);
            text.push_str(&rows.join(", "));
            text.push_str(&tail);
        }
        Statement::Updates {
            head, tail, rows, ..
        } => {
            // One row per key: the last held, as the last single statement would have left it.
            let last: std::collections::HashMap<&str, usize> = rows
                .iter()
                .enumerate()
                .map(|(i, (key, _))| (key.as_str(), i))
                .collect();
            push_statement(text, &head);
            let mut first = true;
            for (i, (key, row)) in rows.iter().enumerate() {
                if last[key.as_str()] == i {
                    if !first {
                        text.push_str(", ");
                    }
                    text.push_str(row);
                    first = false;
                }
            }
            text.push_str(&tail);
        }
    }
}

/// A statement a merged update must not be moved past: one that may read or delete
/// executions, or end or begin a transaction (anything but an insert or an update of another
/// table).
fn barrier(sql: &str) -> bool {
    sql.contains("executions") || !(sql.starts_with("INSERT INTO ") || sql.starts_with("UPDATE "))
}

fn push_statement(text: &mut String, sql: &str) {
    if !text.is_empty() {
        text.push_str(";\n");
    }
    text.push_str(sql);
}

/// An insert of one row that may share a statement with others of its shape: the template
/// up to `VALUES `, the row's tuple of placeholders, and what follows it.
fn insert_parts(sql: &str) -> Option<(&str, &str, &str)> {
    if !sql.starts_with("INSERT INTO ") {
        return None;
    }
    let values = sql.find(" VALUES (")? + " VALUES ".len();
    let close = values + sql[values..].find(')')? + 1;
    let (head, tuple, tail) = (&sql[..values], &sql[values..close], &sql[close..]);
    let only_placeholders = tuple[1..tuple.len() - 1]
        .split(',')
        .all(|p| p.trim().strip_prefix('$').is_some_and(is_number));
    let mergeable_tail = tail.is_empty()
        || tail == " ON CONFLICT DO NOTHING"
        || (tail.starts_with(" ON CONFLICT (") && NEW_KEYS.iter().any(|k| head.starts_with(k)));
    (only_placeholders && mergeable_tail && !head.contains('$') && !tail.contains('$'))
        .then_some((head, tuple, tail))
}

/// A [`MERGED_UPDATES`] statement taken apart: `UPDATE t SET c1 = $a, … WHERE k = $b`, every
/// value one placeholder.
struct UpdateParts<'a> {
    head: String,
    tail: String,
    /// The values tuple's template, the key last: `($a, …, $b)`.
    tuple: String,
    /// The key column and its placeholder.
    key: (&'a str, &'a str),
}

fn update_parts(sql: &str) -> Option<UpdateParts<'_>> {
    if !MERGED_UPDATES.iter().any(|m| sql.starts_with(m)) {
        return None;
    }
    let table = sql.strip_prefix("UPDATE ")?.split(' ').next()?;
    let (sets, key) = sql[sql.find(" SET ")? + " SET ".len()..].split_once(" WHERE ")?;
    let (key_column, key_value) = key.split_once(" = ")?;
    let placeholder = |p: &str| p.strip_prefix('$').is_some_and(is_number);
    if !placeholder(key_value) || key_column.contains(' ') {
        return None;
    }
    let mut columns = Vec::new();
    let mut values = Vec::new();
    for set in sets.split(", ") {
        let (column, value) = set.split_once(" = ")?;
        if !placeholder(value) || column.contains(' ') {
            return None;
        }
        columns.push(column);
        values.push(value);
    }
    let assignments: Vec<String> = columns.iter().map(|c| format!("{c} = v.{c}")).collect();
    values.push(key_value);
    columns.push(key_column);
    Some(UpdateParts {
        head: format!(
            "UPDATE {table} AS t SET {} FROM (VALUES ",
            assignments.join(", ")
        ),
        tail: format!(
            ") AS v ({}) WHERE t.{key_column} = v.{key_column}",
            columns.join(", ")
        ),
        tuple: format!("({})", values.join(", ")),
        key: (key_column, key_value),
    })
}

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// A statement with its `$N` placeholders replaced by literals, for a simple query (which
/// takes no parameters). The statement text is the ledger's own; only the values come from
/// elsewhere, and each becomes a literal that cannot end early: an escape string (`E'…'`,
/// read the same whatever `standard_conforming_strings` says) with its quotes and backslashes
/// doubled, an integer, or `decode('<hex>', 'hex')`.
pub(super) fn inline(sql: &str, params: &[SqlValue]) -> Result<String, LedgerError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::params;

    const CALLS: &str = "INSERT INTO calls (id, at) VALUES ($1, $2)";
    const RESULTS: &str = "INSERT INTO results (execution_id, attempt) VALUES ($1, $2) ON CONFLICT (execution_id, attempt) DO UPDATE SET attempt = excluded.attempt";
    const RUNS: &str =
        "INSERT INTO runs (id) VALUES ($1) ON CONFLICT (id) DO UPDATE SET seen_at = $1";
    const UPDATE: &str = "UPDATE executions SET n = $1 WHERE id = $2";

    #[test]
    fn rows_of_one_shape_become_one_statement_in_the_place_of_the_first() {
        let mut held = Held::default();
        held.push("BEGIN", &[]).unwrap();
        held.push(CALLS, params!["a", 1i64]).unwrap();
        held.push(UPDATE, params![2i64, "x"]).unwrap();
        held.push(CALLS, params!["b'", 3i64]).unwrap();
        held.push(RESULTS, params!["x", 2i64]).unwrap();
        held.push(RESULTS, params!["y", 2i64]).unwrap();
        assert_eq!(held.len(), 6);
        assert_eq!(
            held.take(),
            "BEGIN;\n\
             INSERT INTO calls (id, at) VALUES (E'a', (1)), (E'b''', (3));\n\
             INSERT INTO results (execution_id, attempt) VALUES (E'x', (2)), (E'y', (2)) ON CONFLICT (execution_id, attempt) DO UPDATE SET attempt = excluded.attempt;\n\
             UPDATE executions AS t SET n = v.n FROM (VALUES ((2), E'x')) AS v (n, id) WHERE t.id = v.id"
        );
        assert!(held.is_empty());
        assert_eq!(held.take(), "");
    }

    #[test]
    fn an_update_on_conflict_whose_key_may_repeat_is_never_merged() {
        let mut held = Held::default();
        held.push(RUNS, params!["r"]).unwrap();
        held.push(RUNS, params!["r"]).unwrap();
        assert_eq!(held.take().matches("INSERT INTO runs").count(), 2);
        // Nor a statement with several rows of its own, or a value that is not a placeholder.
        for sql in [
            "INSERT INTO t (a) VALUES ($1), ($2)",
            "INSERT INTO chains (chain, head_seq) VALUES ($1, 0)",
        ] {
            assert!(insert_parts(sql).is_none(), "{sql}");
        }
    }

    #[test]
    fn updates_of_one_shape_go_last_one_row_per_key_and_never_past_a_barrier() {
        const SUMMARY: &str = "UPDATE executions SET state = $1, first = $2 WHERE id = $3";
        let mut held = Held::default();
        held.push(SUMMARY, params!["a1", None::<i64>, "x"]).unwrap();
        // Inserted after its first update was held: the merged update must follow it.
        held.push(CALLS, params!["y", 1i64]).unwrap();
        held.push(SUMMARY, params!["b1", 5i64, "y"]).unwrap();
        held.push(SUMMARY, params!["a2", 6i64, "x"]).unwrap();
        held.push("UPDATE chains SET head = $1", params![7i64])
            .unwrap();
        held.push("SELECT n FROM executions WHERE id = $1", params!["x"])
            .unwrap();
        held.push(SUMMARY, params!["a3", 8i64, "x"]).unwrap();
        assert_eq!(held.statements(), 5);
        assert_eq!(
            held.take(),
            "INSERT INTO calls (id, at) VALUES (E'y', (1));\n\
             UPDATE chains SET head = (7);\n\
             UPDATE executions AS t SET state = v.state, first = v.first FROM (VALUES (E'b1', (5), E'y'), (E'a2', (6), E'x')) AS v (state, first, id) WHERE t.id = v.id;\n\
             SELECT n FROM executions WHERE id = E'x';\n\
             UPDATE executions AS t SET state = v.state, first = v.first FROM (VALUES (E'a3', (8), E'x')) AS v (state, first, id) WHERE t.id = v.id"
        );
        // Taken back row by row, as held.
        held.push(SUMMARY, params!["a1", 1i64, "x"]).unwrap();
        let mark = held.len();
        held.push(SUMMARY, params!["a2", 2i64, "x"]).unwrap();
        held.discard(mark);
        assert_eq!(
            held.take(),
            "UPDATE executions AS t SET state = v.state, first = v.first FROM (VALUES (E'a1', (1), E'x')) AS v (state, first, id) WHERE t.id = v.id"
        );
        // A barrier is told by the statement, never by a value.
        held.push(SUMMARY, params!["a1", 1i64, "x"]).unwrap();
        held.push("UPDATE runs SET note = $1", params!["DELETE executions"])
            .unwrap();
        held.push(SUMMARY, params!["b1", 2i64, "y"]).unwrap();
        assert_eq!(
            held.take(),
            "UPDATE runs SET note = E'DELETE executions';\n\
             UPDATE executions AS t SET state = v.state, first = v.first FROM (VALUES (E'a1', (1), E'x'), (E'b1', (2), E'y')) AS v (state, first, id) WHERE t.id = v.id"
        );
        // Only a plain `SET c = $n, … WHERE k = $m` is merged.
        for sql in [
            "UPDATE executions SET n = n + 1 WHERE id = $1",
            "UPDATE executions SET n = $1 WHERE id = $2 AND n = $3",
            "UPDATE runs SET n = $1 WHERE id = $2",
        ] {
            assert!(update_parts(sql).is_none(), "{sql}");
        }
    }

    #[test]
    fn no_row_joins_a_statement_before_a_commit() {
        let mut held = Held::default();
        held.push(CALLS, params!["a", 1i64]).unwrap();
        held.push("COMMIT", &[]).unwrap();
        held.push("BEGIN", &[]).unwrap();
        held.push(CALLS, params!["b", 2i64]).unwrap();
        held.push(CALLS, params!["c", 3i64]).unwrap();
        assert_eq!(held.statements(), 4);
        assert_eq!(
            held.take(),
            "INSERT INTO calls (id, at) VALUES (E'a', (1));\n\
             COMMIT;\n\
             BEGIN;\n\
             INSERT INTO calls (id, at) VALUES (E'b', (2)), (E'c', (3))"
        );
        // Taken, the floor is gone with what it kept apart.
        held.push(CALLS, params!["d", 4i64]).unwrap();
        held.push(CALLS, params!["e", 5i64]).unwrap();
        assert_eq!(held.statements(), 1);
    }

    #[test]
    fn discarding_to_a_mark_takes_back_rows_and_statements_alike() {
        let mut held = Held::default();
        held.push(CALLS, params!["a", 1i64]).unwrap();
        let mark = held.len();
        held.push(UPDATE, params![2i64, "x"]).unwrap();
        held.push(CALLS, params!["b", 3i64]).unwrap();
        held.push(RESULTS, params!["x", 2i64]).unwrap();
        held.discard(mark);
        assert_eq!(held.take(), "INSERT INTO calls (id, at) VALUES (E'a', (1))");
        held.push(RESULTS, params!["x", 2i64]).unwrap();
        held.discard(0);
        assert!(held.is_empty());
        assert_eq!(held.take(), "");
    }

    /// The real PostgreSQL takes a merged update with every kind of value the writer binds
    /// (text, integers, a typed NULL, an untyped one) and leaves each row as its last update.
    #[tokio::test]
    async fn postgres_runs_a_merged_update_as_the_single_ones_would() {
        use sqlx::Row;
        let mut conn = crate::db::test_postgres().await;
        let setup = "CREATE TEMP TABLE executions (id TEXT PRIMARY KEY, state TEXT NOT NULL, \
                     since BIGINT, owner TEXT); \
                     INSERT INTO executions VALUES ('x', 'accepted', 1, 'a')";
        sqlx::raw_sql(setup).execute(&mut conn).await.unwrap();
        const SUMMARY: &str =
            "UPDATE executions SET state = $1, since = $2, owner = $3 WHERE id = $4";
        let mut held = Held::default();
        held.push(SUMMARY, params!["it's", None::<i64>, "b", "x"])
            .unwrap();
        held.push(
            "INSERT INTO executions (id, state) VALUES ($1, $2)",
            params!["y", "accepted"],
        )
        .unwrap();
        held.push(
            SUMMARY,
            params!["dispatched", None::<i64>, None::<String>, "y"],
        )
        .unwrap();
        held.push(SUMMARY, params!["completed", 3i64, "c", "x"])
            .unwrap();
        let text = held.take();
        sqlx::raw_sql(&text)
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{text}: {e}"));
        let rows = sqlx::query("SELECT id, state, since, owner FROM executions ORDER BY id")
            .fetch_all(&mut conn)
            .await
            .unwrap();
        let got: Vec<(String, String, Option<i64>, Option<String>)> = rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect();
        assert_eq!(
            got,
            [
                ("x".into(), "completed".into(), Some(3), Some("c".into())),
                ("y".into(), "dispatched".into(), None, None),
            ]
        );
    }
}
