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
}
