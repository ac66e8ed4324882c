//! Budgets on effects (issue 53): limits on what an actor's calls of a set of tools may do in
//! a rolling window — how many executions, and the sum of a numeric argument — each counted by
//! the ledger in the transaction that accepts the execution. Here: a `[[budget]]` as the
//! gateway keeps it, which calls it applies to and in which scope, and amounts as exact
//! millionths.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Map, Value};

/// Millionths of the summed argument: amounts are added exactly.
pub const AMOUNT_SCALE: i64 = 1_000_000;

/// What a call that would pass a budget's limit gets: nothing is sent either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnExhausted {
    /// It waits for an operator's approval (a per-use approval of that one execution).
    #[default]
    Approval,
    /// It is refused, naming the budget, its use and when it frees up.
    Refuse,
}

/// What a budget's scope is partitioned by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Partition {
    /// Each actor has its own count.
    Actor,
    /// Each value of this argument has its own count.
    Argument(String),
}

/// One `[[budget]]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Budget {
    pub name: String,
    /// The tools whose executions it counts.
    pub tools: BTreeSet<String>,
    /// Only these actors' calls count (`None`: every actor's).
    pub actors: Option<BTreeSet<String>>,
    pub per: Vec<Partition>,
    pub window: Duration,
    pub max_calls: Option<u64>,
    /// The argument summed, with its limit in millionths.
    pub sum: Option<(String, i64)>,
    pub on_exhausted: OnExhausted,
}

impl Budget {
    /// Whether a call of `tool` by `actor` is counted by this budget.
    pub fn applies(&self, tool: &str, actor: &str) -> bool {
        self.tools.contains(tool) && self.actors.as_ref().is_none_or(|a| a.contains(actor))
    }

    /// The scope a call is counted in: `actor=NAME` and `ARG=VALUE` for each partition, in
    /// order (`""`: one scope for every call). An omitted argument counts as its default (the
    /// value the effect will have), else as a scope of its own.
    pub fn scope(
        &self,
        actor: &str,
        arguments: &Map<String, Value>,
        defaults: &Map<String, Value>,
    ) -> String {
        let part = |p: &Partition| match p {
            Partition::Actor => format!("actor={actor}"),
            Partition::Argument(name) => match arguments.get(name).or_else(|| defaults.get(name)) {
                Some(Value::String(s)) => format!("{name}={s}"),
                Some(other) => format!("{name}={other}"),
                None => format!("{name} absent"),
            },
        };
        self.per.iter().map(part).collect::<Vec<_>>().join(", ")
    }

    /// The summed argument's value in millionths (0 when it sums nothing or the argument is
    /// absent); why not, when it is not a non-negative number with at most six decimals.
    pub fn amount(&self, arguments: &Map<String, Value>) -> Result<i64, String> {
        let Some((name, _)) = &self.sum else {
            return Ok(0);
        };
        let refused = || {
            format!("budget {:?} sums the argument {name:?}: it must be a number of at least 0 with at most six decimals", self.name)
        };
        match arguments.get(name) {
            None | Some(Value::Null) => Ok(0),
            Some(Value::Number(n)) => amount_of(n).filter(|a| *a >= 0).ok_or_else(refused),
            Some(_) => Err(refused()),
        }
    }

    /// The window in milliseconds.
    pub fn window_ms(&self) -> i64 {
        i64::try_from(self.window.as_millis()).unwrap_or(i64::MAX)
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
    if let Some(i) = number.as_i64() {
        return i.checked_mul(AMOUNT_SCALE);
    }
    // A float as serde_json writes it back (the shortest text that reads as the same f64):
    // digits, an optional point and an optional exponent (`1e-6`, `4999.5`).
    let text = number.to_string();
    let (negative, text) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.as_str()),
    };
    let (mantissa, exponent) = match text.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.parse::<i32>().ok()?),
        None => (text, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{whole}{fraction}");
    // The number is `digits` × 10^(exponent − fraction.len()); in millionths, × 10^6 more.
    let shift = exponent + 6 - i32::try_from(fraction.len()).ok()?;
    let digits = digits.trim_start_matches('0');
    let value: i64 = match shift {
        s if s >= 0 => {
            let scaled = format!("{digits}{}", "0".repeat(usize::try_from(s).ok()?));
            if digits.is_empty() {
                0
            } else {
                scaled.parse().ok()?
            }
        }
        s => {
            // Fewer than six decimals only: the digits cut off must all be zero.
            let cut = usize::try_from(-s).ok()?;
            let kept = digits.len().saturating_sub(cut);
            if digits[kept..].bytes().any(|b| b != b'0') {
                return None;
            }
            if kept == 0 {
                0
            } else {
                digits[..kept].parse().ok()?
            }
        }
    };
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
        assert_eq!(amount_of(&n("1e3")), Some(1_000_000_000));
        assert_eq!(amount_of(&n("1.5e-6")), None, "below a millionth");
        assert_eq!(amount_of(&n("100.10")), Some(100_100_000));
        assert_eq!(amount_of(&n("99999999999999999")), None, "too large");
        assert_eq!(amount_text(4_999_500_000), "4999.5");
        assert_eq!(amount_text(20_000_000), "20");
        assert_eq!(amount_text(-1), "-0.000001");
    }
}
