//! Budgets inside the open transaction (issue 53): a new execution's charges checked under
//! their scopes' locks and recorded with it; its first later dispatch counted; a `failed`
//! execution (nothing was sent) uncounted.
//!
//! Each scope keeps running totals (`budget_scopes`): the counted charges since `counted_from`.
//! Charges only ever leave the window, so the totals count at least the window's use: a charge
//! that keeps them well under the limits is counted in one statement without reading the window
//! (`quick`). Near a limit, a check takes off the charges that left the window since the totals
//! were last brought up to date, and decides exactly. Each charge is added once and taken off
//! once, so a check costs the same however many calls the window holds.
//!
//! Where charges are (migration 0017): counted ones in `budget_charges`, keyed in window order
//! (budget, scope, at, execution) so a call writes one b-tree; ones waiting for a person in
//! `budget_pending`; an execution's row says which budgets and scopes it is charged to and when
//! (`budget_keys`, `budget_at`), which is how a failure or pruning finds them by key.
//!
//! Exact across replicas: on PostgreSQL a check reads the totals row `FOR UPDATE` (the row as
//! the last committer left it, once the lock is got) and reads the charges that left the window
//! in a statement of its own, so it sees every charge committed before it got the lock. SQLite
//! has one writer at a time.

use std::borrow::Cow;
use std::sync::OnceLock;

use postern_core::{ExecutionId, Timestamp};

use super::transaction::Transaction;
use crate::budget::{BudgetCharge, BudgetUsage, Checked};
use crate::db::{params, RowAccess, SqlValue, WriteConn};
use crate::error::LedgerError;
use crate::rows;

/// The writer's part that counts budgets: it borrows the open transaction.
pub(super) struct Budgets<'t, C> {
    pub(super) tx: &'t mut Transaction<C>,
}

impl<C: WriteConn> Budgets<'_, C> {
    /// Checks every charge of a new execution about to be dispatched: the budget it would pass
    /// (one that refuses before one that waits for a person), or within every limit (with the
    /// budget least left of, when little is). The charges are recorded either way: counted
    /// from `now` when within the limits, else pending (counted once a person lets it be sent).
    pub(super) async fn charge(
        &mut self,
        id: ExecutionId,
        charges: &[BudgetCharge],
        now: Timestamp,
    ) -> Result<Checked, LedgerError> {
        let mut quick = Vec::new();
        let mut exact = Vec::with_capacity(charges.len());
        let mut over: Option<(BudgetUsage, bool)> = None;
        for (i, charge) in charges.iter().enumerate() {
            if over.is_none() && self.quick(charge, now).await? {
                quick.push(i);
                continue;
            }
            let (usage, since, changed) = self.locked_usage(charge, now).await?;
            if !usage.allows(charge.amount)
                && over.as_ref().is_none_or(|(_, r)| !r && charge.refuse)
            {
                over = Some((usage.clone(), charge.refuse));
            }
            exact.push((i, usage, since, changed));
        }
        let counted = over.is_none();
        let mut least_left: Option<BudgetUsage> = None;
        for (i, mut usage, since, changed) in exact {
            let c = &charges[i];
            // One write of the totals: what left the window taken off, this charge added.
            if counted || changed {
                if counted {
                    usage.calls += 1;
                    usage.sum += c.amount;
                }
                let calls = i64::try_from(usage.calls).unwrap_or(i64::MAX);
                self.tx
                    .later(
                        "UPDATE budget_scopes SET calls = $1, total = $2, counted_from = $3 WHERE budget = $4 AND scope_key = $5",
                        params![calls, usage.sum, since, &c.budget, &c.scope],
                    )
                    .await?;
            }
            if counted
                && usage.little_left()
                && least_left.as_ref().is_none_or(|l| l.left() > usage.left())
            {
                least_left = Some(usage);
            }
        }
        if !counted {
            // Charges counted quickly before a later one was found past its limit: taken back.
            for &i in &quick {
                let c = &charges[i];
                self.tx
                    .later(
                        "UPDATE budget_scopes SET calls = calls - 1, total = total - $1 WHERE budget = $2 AND scope_key = $3",
                        params![c.amount, &c.budget, &c.scope],
                    )
                    .await?;
            }
        }
        match counted {
            true => self.insert_counted(id, charges, now).await?,
            false => self.insert_pending(id, charges).await?,
        }
        match over {
            Some((mut usage, refuse)) => {
                usage.frees_at = self.frees_at(&usage, now).await?;
                Ok(Checked::Over(usage, refuse))
            }
            None => Ok(Checked::Within(least_left)),
        }
    }

    /// Counts a charge against its scope's running totals in one statement, when even those
    /// (which may still hold charges that left the window: they only ever count too much) leave
    /// more than a little of the budget after it. False: it must be checked exactly (near a
    /// limit, the scope's first charge, or a window longer than the totals were kept for).
    async fn quick(&mut self, c: &BudgetCharge, now: Timestamp) -> Result<bool, LedgerError> {
        let since = now.0.saturating_sub(c.window_ms);
        let (max_calls, max_sum) = c.quick_limits();
        // The room left for the totals, worked out here: `total + amount` could overflow in
        // PostgreSQL for an amount the agent chose.
        let Some(room) = max_sum.checked_sub(c.amount).filter(|r| *r >= 0) else {
            return Ok(false);
        };
        let p = params![&c.budget, &c.scope, c.amount, since, max_calls, room];
        if self.tx.conn.can_defer() {
            // PostgreSQL: the answer (a row or none) rides with what is held back.
            return Ok(self.tx.conn.query_opt(QUICK_RETURNING, p).await?.is_some());
        }
        // SQLite: the count of changed rows says it; RETURNING would cost a table of its own.
        Ok(self.tx.conn.exec(QUICK, p).await? == 1)
    }

    /// Records a new execution's charges as pending (it waits for a person first).
    pub(super) async fn pending(
        &mut self,
        id: ExecutionId,
        charges: &[BudgetCharge],
        now: Timestamp,
    ) -> Result<(), LedgerError> {
        for c in charges {
            // Its scope needs a totals row for when it is sent.
            let since = now.0.saturating_sub(c.window_ms);
            self.tx
                .later(NEW_SCOPE, params![&c.budget, &c.scope, since])
                .await?;
        }
        self.insert_pending(id, charges).await
    }

    /// An execution's charges counted from `at`, in one statement.
    async fn insert_counted(
        &mut self,
        id: ExecutionId,
        charges: &[BudgetCharge],
        at: Timestamp,
    ) -> Result<(), LedgerError> {
        let id = id.to_string();
        let mut values = Vec::with_capacity(charges.len() * 5);
        for c in charges {
            values.extend_from_slice(params![&c.budget, &c.scope, at.0, &id, c.amount]);
        }
        self.tx
            .later(&insert_sql(Table::Counted, charges.len()), &values)
            .await
    }

    /// An execution's charges waiting for a person, in one statement.
    async fn insert_pending(
        &mut self,
        id: ExecutionId,
        charges: &[BudgetCharge],
    ) -> Result<(), LedgerError> {
        let id = id.to_string();
        let mut values = Vec::with_capacity(charges.len() * 4);
        for c in charges {
            values.extend_from_slice(params![&id, &c.budget, &c.scope, c.amount]);
        }
        self.tx
            .later(&insert_sql(Table::Pending, charges.len()), &values)
            .await
    }

    /// Counts an execution's pending charges from its first dispatch (after a person let it
    /// be sent). Charges already counted stay as they are: a re-dispatch is not a new effect.
    pub(super) async fn dispatched(
        &mut self,
        id: ExecutionId,
        now: Timestamp,
    ) -> Result<(), LedgerError> {
        let id = id.to_string();
        // Every statement finds nothing for an execution no budget waited on.
        let moves: [(&str, &[SqlValue]); 4] = [
            (ADD_PENDING, params![&id]),
            ("INSERT INTO budget_charges (budget, scope_key, at, execution_id, amount) SELECT budget, scope_key, $1, execution_id, amount FROM budget_pending WHERE execution_id = $2", params![now.0, &id]),
            ("UPDATE executions SET budget_at = $1 WHERE id = $2 AND EXISTS (SELECT 1 FROM budget_pending WHERE execution_id = $2)", params![now.0, &id]),
            ("DELETE FROM budget_pending WHERE execution_id = $1", params![&id]),
        ];
        for (sql, values) in moves {
            self.tx.later(sql, values).await?;
        }
        Ok(())
    }

    /// Uncounts an execution that ended `failed`: nothing of it was sent.
    pub(super) async fn nothing_sent(&mut self, id: ExecutionId) -> Result<(), LedgerError> {
        let id = id.to_string();
        let row = self
            .tx
            .conn
            .query_opt(
                "SELECT budget_keys, budget_at FROM executions WHERE id = $1",
                params![&id],
            )
            .await?;
        let Some(row) = row else {
            return Ok(());
        };
        // Held back with the batch's other writes (PostgreSQL), as any write nobody reads.
        for (sql, values) in Charged::from_row(&row)?.uncounting(&id) {
            self.tx.later(sql, &values).await?;
        }
        Ok(())
    }

    /// The charge's scope locked (PostgreSQL) and its use in the window ending `now` (what
    /// left the window since the last check taken off), with the window's start and whether
    /// the totals row needs writing back.
    async fn locked_usage(
        &mut self,
        c: &BudgetCharge,
        now: Timestamp,
    ) -> Result<(BudgetUsage, i64, bool), LedgerError> {
        let since = now.0.saturating_sub(c.window_ms);
        let lock = self.tx.cfg.dialect.for_update();
        let sql = format!("SELECT calls, total, counted_from FROM budget_scopes WHERE budget = $1 AND scope_key = $2{lock}");
        let row = match self
            .tx
            .conn
            .query_opt(&sql, params![&c.budget, &c.scope])
            .await?
        {
            Some(row) => row,
            None => {
                // The scope's first charge: its totals row, then read (and locked) as any.
                self.tx
                    .later(NEW_SCOPE, params![&c.budget, &c.scope, since])
                    .await?;
                let key = params![&c.budget, &c.scope];
                self.tx
                    .conn
                    .query_opt(&sql, key)
                    .await?
                    .ok_or_else(missing)?
            }
        };
        let (mut calls, mut total) = (rows::get_i64(&row, "calls")?, rows::get_i64(&row, "total")?);
        let from = rows::get_i64(&row, "counted_from")?;
        if since != from {
            // Take off what left the window since; a longer window than before counts again.
            let (lo, hi) = if since > from {
                (from, since)
            } else {
                (since, i64::MAX)
            };
            let p = params![&c.budget, &c.scope, lo, hi];
            let row = self
                .tx
                .conn
                .query_opt(IN_WINDOW, p)
                .await?
                .ok_or_else(missing)?;
            let (n, sum) = (rows::get_i64(&row, "calls")?, rows::get_i64(&row, "sum")?);
            (calls, total) = match since > from {
                true => (calls - n, total - sum),
                false => (n, sum),
            };
        }
        let usage = BudgetUsage {
            budget: c.budget.clone(),
            scope: c.scope.clone(),
            calls: u64::try_from(calls).unwrap_or(0),
            sum: total,
            max_calls: c.max_calls,
            max_sum: c.max_sum,
            window_ms: c.window_ms,
            frees_at: None,
        };
        Ok((usage, since, since != from))
    }

    /// When the oldest charge counted in the window leaves it (read only for a call past it).
    async fn frees_at(
        &mut self,
        u: &BudgetUsage,
        now: Timestamp,
    ) -> Result<Option<Timestamp>, LedgerError> {
        let since = now.0.saturating_sub(u.window_ms);
        let row = self
            .tx
            .conn
            .query_opt(
                "SELECT MIN(at) AS oldest FROM budget_charges WHERE budget = $1 AND scope_key = $2 AND at > $3",
                params![&u.budget, &u.scope, since],
            )
            .await?;
        let oldest = row
            .map(|r| rows::get_opt_i64(&r, "oldest"))
            .transpose()?
            .flatten();
        Ok(oldest.map(|t| Timestamp(t.saturating_add(u.window_ms))))
    }
}

/// The table a charge goes to.
#[derive(Clone, Copy)]
enum Table {
    /// Counted: `budget_charges`, in window order.
    Counted,
    /// Waiting for a person: `budget_pending`.
    Pending,
}

impl Table {
    fn insert_into(self) -> (&'static str, usize) {
        match self {
            Table::Counted => (
                "INSERT INTO budget_charges (budget, scope_key, at, execution_id, amount) VALUES ",
                5,
            ),
            Table::Pending => (
                "INSERT INTO budget_pending (execution_id, budget, scope_key, amount) VALUES ",
                4,
            ),
        }
    }
}

/// The statement inserting `n` charges into `table` (made once for the usual counts: building
/// it for every call was a tenth of the charges' cost).
fn insert_sql(table: Table, n: usize) -> Cow<'static, str> {
    static USUAL: [OnceLock<Vec<String>>; 2] = [OnceLock::new(), OnceLock::new()];
    let (into, columns) = table.insert_into();
    let build = |n: usize| {
        let rows: Vec<String> = (0..n)
            .map(|i| {
                let marks: Vec<String> = (1..=columns)
                    .map(|k| format!("${}", i * columns + k))
                    .collect();
                format!("({})", marks.join(", "))
            })
            .collect();
        format!("{into}{}", rows.join(", "))
    };
    let usual = USUAL[table as usize].get_or_init(|| (0..=4).map(build).collect());
    match usual.get(n) {
        Some(sql) => Cow::Borrowed(sql.as_str()),
        None => Cow::Owned(build(n)),
    }
}

fn missing() -> LedgerError {
    LedgerError::Corrupt("a budget's totals row is missing".into())
}

macro_rules! quick {
    () => {
        "UPDATE budget_scopes SET calls = calls + 1, total = total + $3 WHERE budget = $1 AND scope_key = $2 AND counted_from <= $4 AND calls < $5 AND total <= $6"
    };
}
/// A charge ($3) counted against its scope's totals when they stay under the quick limits ($5
/// calls; $6 the room for the sum, the quick limit less this charge); on PostgreSQL the row stays
/// locked, so replicas count one at a time.
const QUICK: &str = quick!();
/// The same, answering with a row when it counted (PostgreSQL).
const QUICK_RETURNING: &str = concat!(quick!(), " RETURNING calls");

/// A scope's totals row, made on its first charge (counting from the window's start).
const NEW_SCOPE: &str = "INSERT INTO budget_scopes (budget, scope_key, counted_from) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING";

/// The counted charges of a scope with `at` in ($3, $4].
const IN_WINDOW: &str = "SELECT COUNT(*) AS calls, CAST(COALESCE(SUM(amount), 0) AS BIGINT) AS sum FROM budget_charges WHERE budget = $1 AND scope_key = $2 AND at > $3 AND at <= $4";

/// Adds an execution's pending charges to their scopes' totals.
const ADD_PENDING: &str = "UPDATE budget_scopes SET calls = calls + 1, total = total + (SELECT c.amount FROM budget_pending c WHERE c.execution_id = $1 AND c.budget = budget_scopes.budget AND c.scope_key = budget_scopes.scope_key) WHERE EXISTS (SELECT 1 FROM budget_pending c WHERE c.execution_id = $1 AND c.budget = budget_scopes.budget AND c.scope_key = budget_scopes.scope_key)";

/// Takes a counted charge ($1 budget, $2 scope, $3 at, $4 execution) off its scope's totals
/// while they still hold it (it has not left the window).
const TAKE_OFF: &str = "UPDATE budget_scopes SET calls = calls - 1, total = total - (SELECT c.amount FROM budget_charges c WHERE c.budget = $1 AND c.scope_key = $2 AND c.at = $3 AND c.execution_id = $4) WHERE budget = $1 AND scope_key = $2 AND counted_from < $3 AND EXISTS (SELECT 1 FROM budget_charges c WHERE c.budget = $1 AND c.scope_key = $2 AND c.at = $3 AND c.execution_id = $4)";

/// Where an execution's charges are: the budgets and scopes (`executions.budget_keys`) and
/// when they were counted (`executions.budget_at`; none while it waits for a person).
pub(super) struct Charged {
    keys: Vec<(String, String)>,
    at: Option<i64>,
}

impl Charged {
    /// The `budget_keys` text of an execution's charges.
    pub(super) fn keys_text(charges: &[BudgetCharge]) -> String {
        let pairs: Vec<[&str; 2]> = charges.iter().map(|c| [&*c.budget, &*c.scope]).collect();
        serde_json::to_string(&pairs).unwrap_or_default()
    }

    /// Read from an execution's row (`budget_keys`, `budget_at`).
    pub(super) fn from_row(row: &impl RowAccess) -> Result<Charged, LedgerError> {
        let keys = match row.opt_text("budget_keys")? {
            Some(text) => serde_json::from_str::<Vec<(String, String)>>(&text)
                .map_err(|e| LedgerError::Corrupt(format!("an execution's budget_keys: {e}")))?,
            None => Vec::new(),
        };
        Ok(Charged {
            keys,
            at: rows::get_opt_i64(row, "budget_at")?,
        })
    }

    /// The statements that uncount the execution `id` (nothing of it was sent, or it is
    /// pruned): its charges leave their scopes' totals (those still in them) and the window,
    /// or stop waiting.
    pub(super) fn uncounting(&self, id: &str) -> Vec<(&'static str, Vec<SqlValue>)> {
        if self.keys.is_empty() {
            return Vec::new();
        }
        let Some(at) = self.at else {
            let sql = "DELETE FROM budget_pending WHERE execution_id = $1";
            return vec![(sql, params![id].to_vec())];
        };
        let delete = "DELETE FROM budget_charges WHERE budget = $1 AND scope_key = $2 AND at = $3 AND execution_id = $4";
        self.keys
            .iter()
            .flat_map(|(budget, scope)| {
                let key = params![budget, scope, at, id].to_vec();
                [(TAKE_OFF, key.clone()), (delete, key)]
            })
            .collect()
    }
}
