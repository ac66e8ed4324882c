//! Budgets on effects as the ledger counts them (issue 53): a new execution's charges, checked
//! and recorded in the transaction that accepts it, and a budget's usage as read back.
//!
//! The ledger knows no budget's rules beyond the numbers a charge carries: which budget and
//! scope it is, the amount, the window and the limits. What is counted: an execution's first
//! dispatch (an unknown outcome counts, a retry never counts twice); an execution that ends
//! `failed` (nothing was sent) is counted no more.

use postern_core::budget::amount_text;
use postern_core::Timestamp;
use serde::Serialize;
use serde_json::{json, Value};

/// One budget a new execution is counted against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BudgetCharge {
    /// The `[[budget]]`'s name.
    pub budget: String,
    /// The scope within it: the actor and argument values it is partitioned by (`""`: one
    /// scope for every call).
    pub scope: String,
    /// The summed argument's value in millionths (0 when the budget counts executions only).
    pub amount: i64,
    /// The rolling window, in milliseconds.
    pub window_ms: i64,
    /// At most this many counted executions in the window.
    pub max_calls: Option<u64>,
    /// At most this sum (millionths) in the window.
    pub max_sum: Option<i64>,
    /// Past this budget the call is refused, whatever the request's `over_budget` says.
    pub refuse: bool,
}

impl BudgetCharge {
    /// The limits a charge is checked against without reading what left the window: each
    /// lowered so that a charge within it leaves more than a little of the budget
    /// ([`BudgetUsage::little_left`]) even by totals that may still hold charges that left the
    /// window. `i64::MAX`: no such limit. A charge past these is checked exactly.
    pub(crate) fn quick_limits(&self) -> (i64, i64) {
        let calls = self.max_calls.map_or(i64::MAX, |max| {
            let max = i64::try_from(max).unwrap_or(i64::MAX);
            max - (max / 5 + 1).max(2)
        });
        let sum = self.max_sum.map_or(i64::MAX, |max| max - (max / 5 + 1));
        (calls, sum)
    }
}

/// What checking a new execution's charges found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Checked {
    /// Within every limit, and counted; with the budget least left of when little is
    /// ([`BudgetUsage::little_left`]), its use including this execution.
    Within(Option<BudgetUsage>),
    /// Past this budget (and whether it refuses): nothing counted.
    Over(BudgetUsage, bool),
}

/// A budget's use in its window, as read in the transaction that checked it (or by an
/// operator's read).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BudgetUsage {
    pub budget: String,
    pub scope: String,
    /// Executions counted in the window.
    pub calls: u64,
    /// Their summed argument, in millionths.
    pub sum: i64,
    pub max_calls: Option<u64>,
    pub max_sum: Option<i64>,
    pub window_ms: i64,
    /// When the oldest counted execution leaves the window (`None`: none is counted).
    pub frees_at: Option<Timestamp>,
}

impl BudgetUsage {
    /// Whether one more execution of `amount` stays within the limits.
    pub fn allows(&self, amount: i64) -> bool {
        self.max_calls.is_none_or(|max| self.calls < max)
            && self
                .max_sum
                .is_none_or(|max| self.sum.saturating_add(amount) <= max)
    }

    /// Whether little of the budget is left, so that an answer says how much: at most one
    /// call, or at most a fifth of a limit.
    pub fn little_left(&self) -> bool {
        let calls = self.max_calls.is_some_and(|max| {
            let left = max.saturating_sub(self.calls);
            left <= 1 || left.saturating_mul(5) <= max
        });
        let sum = self
            .max_sum
            .is_some_and(|max| max.saturating_sub(self.sum).saturating_mul(5) <= max);
        calls || sum
    }

    /// The share of the budget left, by whichever limit is nearer (1: no limit).
    pub fn left(&self) -> f64 {
        let share = |left: f64, max: f64| if max > 0.0 { left / max } else { 0.0 };
        let calls = self.max_calls.map_or(1.0, |max| {
            share(max.saturating_sub(self.calls) as f64, max as f64)
        });
        let sum = self.max_sum.map_or(1.0, |max| {
            share(max.saturating_sub(self.sum) as f64, max as f64)
        });
        calls.min(sum)
    }

    /// The use as the record and an answer show it: amounts as decimals, the window in
    /// seconds, when it frees up.
    pub fn to_json(&self) -> Value {
        json!({
            "name": self.budget,
            "scope": self.scope,
            "calls": self.calls,
            "max_calls": self.max_calls,
            "sum": amount_text(self.sum),
            "max_sum": self.max_sum.map(amount_text),
            "window_seconds": self.window_ms / 1000,
            "frees_at": self.frees_at.map(|t| t.to_string()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use postern_core::budget::AMOUNT_SCALE;

    #[test]
    fn a_limit_allows_up_to_itself_and_no_further() {
        let usage = |calls, sum| BudgetUsage {
            budget: "b".into(),
            scope: String::new(),
            calls,
            sum,
            max_calls: Some(3),
            max_sum: Some(10 * AMOUNT_SCALE),
            window_ms: 1000,
            frees_at: None,
        };
        assert!(usage(2, 0).allows(0));
        assert!(!usage(3, 0).allows(0));
        assert!(usage(0, 4 * AMOUNT_SCALE).allows(6 * AMOUNT_SCALE));
        assert!(!usage(0, 4 * AMOUNT_SCALE).allows(6 * AMOUNT_SCALE + 1));
    }

    /// A charge within the quick limits never leaves little of the budget, and one past them
    /// (but within the budget) always does: the answer's note is never skipped by the quick
    /// check, and the exact check is made only near a limit.
    #[test]
    fn the_quick_limits_end_where_little_is_left() {
        for max in 0..200u64 {
            let charge = BudgetCharge {
                budget: "b".into(),
                scope: String::new(),
                amount: 0,
                window_ms: 1000,
                max_calls: Some(max),
                max_sum: Some(max as i64),
                refuse: false,
            };
            let (quick_calls, quick_sum) = charge.quick_limits();
            for after in 0..=max {
                let by_calls = BudgetUsage {
                    budget: "b".into(),
                    scope: String::new(),
                    calls: after,
                    sum: 0,
                    max_calls: Some(max),
                    max_sum: None,
                    window_ms: 1000,
                    frees_at: None,
                };
                assert_eq!(
                    by_calls.little_left(),
                    after as i64 > quick_calls,
                    "calls {after} of {max}"
                );
                let by_sum = BudgetUsage {
                    calls: 0,
                    sum: after as i64,
                    max_calls: None,
                    max_sum: Some(max as i64),
                    ..by_calls
                };
                assert_eq!(
                    by_sum.little_left(),
                    after as i64 > quick_sum,
                    "sum {after} of {max}"
                );
            }
        }
    }
}
