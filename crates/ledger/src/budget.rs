//! Budgets on effects as the ledger counts them (issue 53): a new execution's charges, checked
//! and recorded in the transaction that accepts it, and a budget's usage as read back.
//!
//! The ledger knows no budget's rules beyond the numbers a charge carries: which budget and
//! scope it is, the amount, the window and the limits. What is counted: an execution's first
//! dispatch (an unknown outcome counts, a retry never counts twice); an execution that ends
//! `failed` (nothing was sent) is counted no more.

use postern_core::Timestamp;
use serde::Serialize;
use serde_json::{json, Value};

/// Millionths of the summed argument: amounts are added exactly.
pub const AMOUNT_SCALE: i64 = 1_000_000;

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

/// An amount in millionths as a decimal (`4999.5`, `20`).
pub fn amount_text(millionths: i64) -> String {
    let sign = if millionths < 0 { "-" } else { "" };
    let abs = millionths.unsigned_abs();
    let scale = AMOUNT_SCALE.unsigned_abs();
    let (whole, fraction) = (abs / scale, abs % scale);
    if fraction == 0 {
        return format!("{sign}{whole}");
    }
    let digits = format!("{fraction:06}");
    format!("{sign}{whole}.{}", digits.trim_end_matches('0'))
}

/// A JSON number as millionths, exactly: `None` for a number with more than six decimals, or
/// one too large.
pub fn amount_of(number: &serde_json::Number) -> Option<i64> {
    let text = number.to_string();
    let (negative, text) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.as_str()),
    };
    if text.contains(['e', 'E']) {
        return None;
    }
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if fraction.len() > 6 || whole.is_empty() {
        return None;
    }
    let whole: i64 = whole.parse().ok()?;
    let fraction: i64 = format!("{fraction:0<6}").parse().ok()?;
    let value = whole.checked_mul(AMOUNT_SCALE)?.checked_add(fraction)?;
    Some(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_are_read_and_shown_exactly() {
        let n = |s: &str| serde_json::from_str::<serde_json::Number>(s).unwrap();
        assert_eq!(amount_of(&n("4999.5")), Some(4_999_500_000));
        assert_eq!(amount_of(&n("0.000001")), Some(1));
        assert_eq!(amount_of(&n("20")), Some(20_000_000));
        assert_eq!(amount_of(&n("-3.25")), Some(-3_250_000));
        assert_eq!(amount_of(&n("0.0000001")), None, "seven decimals");
        assert_eq!(amount_of(&n("1e3")), None);
        assert_eq!(amount_of(&n("99999999999999999")), None, "too large");
        assert_eq!(amount_text(4_999_500_000), "4999.5");
        assert_eq!(amount_text(20_000_000), "20");
        assert_eq!(amount_text(-1), "-0.000001");
    }

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
