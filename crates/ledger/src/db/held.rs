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

use super::{inline, SqlValue};
use crate::error::LedgerError;

/// `ON CONFLICT … DO UPDATE` inserts whose key is new in every transaction: a result's key is
/// its event's number, and one transaction links each event once.
const NEW_KEYS: &[&str] = &["INSERT INTO results "];

/// One statement to send, or one multi-row insert being gathered.
enum Statement {
    Whole(String),
    Rows {
        /// The template up to and including `VALUES `.
        head: String,
        /// What follows the values (an `ON CONFLICT` clause, or nothing).
        tail: String,
        rows: Vec<String>,
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
        let Some((head, tuple, tail)) = insert_parts(sql) else {
            self.statements.push(Statement::Whole(inline(sql, params)?));
            self.log.push(self.statements.len() - 1);
            if sql == "COMMIT" {
                self.floor = self.statements.len();
            }
            return Ok(());
        };
        let row = inline(tuple, params)?;
        let at = self.statements[self.floor..].iter().position(
            |s| matches!(s, Statement::Rows { head: h, tail: t, .. } if h == head && t == tail),
        );
        let at = match at {
            Some(at) => self.floor + at,
            None => {
                self.statements.push(Statement::Rows {
                    head: head.to_string(),
                    tail: tail.to_string(),
                    rows: Vec::new(),
                });
                self.statements.len() - 1
            }
        };
        if let Statement::Rows { rows, .. } = &mut self.statements[at] {
            rows.push(row);
        }
        self.log.push(at);
        Ok(())
    }

    /// Forgets what was held back after `mark` ([`Held::len`]).
    pub fn discard(&mut self, mark: usize) {
        while self.log.len() > mark {
            let Some(at) = self.log.pop() else { break };
            // Statements are numbered as they were first held, so one whose first row (or
            // whole text) is being taken back is the last one left.
            match &mut self.statements[at] {
                Statement::Whole(_) => self.statements.truncate(at),
                Statement::Rows { rows, .. } => {
                    rows.pop();
                    if rows.is_empty() {
                        self.statements.truncate(at);
                    }
                }
            }
        }
        self.floor = self.floor.min(self.statements.len());
    }

    /// The held statements as one simple query's text, and nothing held any more.
    pub fn take(&mut self) -> String {
        let mut text = String::new();
        for s in self.statements.drain(..) {
            match s {
                Statement::Whole(sql) => push_statement(&mut text, &sql),
                Statement::Rows { head, tail, rows } => {
                    push_statement(&mut text, &head);
                    text.push_str(&rows.join(", "));
                    text.push_str(&tail);
                }
            }
        }
        self.log.clear();
        self.floor = 0;
        text
    }
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

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
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
             UPDATE executions SET n = (2) WHERE id = E'x';\n\
             INSERT INTO results (execution_id, attempt) VALUES (E'x', (2)), (E'y', (2)) ON CONFLICT (execution_id, attempt) DO UPDATE SET attempt = excluded.attempt"
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
}
