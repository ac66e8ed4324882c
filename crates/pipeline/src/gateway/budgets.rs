//! Budgets on effects at admission (issue 53): the `[[budget]]`s a call is counted against,
//! as charges the ledger checks in the accept's transaction, and what the call gets instead
//! when one would pass its limit. Nothing here counts: the ledger does, under the scope's lock.

use std::time::Duration;

use postern_core::budget::{amount_text, Budget, OnExhausted};
use postern_core::config::Config;
use postern_core::Timestamp;
use postern_ledger::{BudgetCharge, Ledger, NewEvent};
use serde_json::{Map, Value};

use super::approvals::Approvals;
use crate::decision::Waits;
use crate::error::GatewayError;
use crate::registry::ToolEntry;
use crate::telemetry::{BudgetView, ScopeUse};

/// The charges of a call of `entry` by `actor` with `arguments`: one per budget that counts it.
/// A summed argument that is not an exact non-negative number refuses the call before anything
/// is recorded.
pub(super) fn charges(
    config: &Config,
    entry: &ToolEntry,
    actor: &str,
    arguments: &Map<String, Value>,
) -> Result<Vec<BudgetCharge>, GatewayError> {
    let applying = config
        .budgets
        .iter()
        .filter(|b| b.applies(&entry.contract.name, actor));
    applying
        .map(|b| {
            // An omitted argument is the contract's default, as the effect will be.
            let defaults = &entry.contract.arguments.defaults;
            let amount = match b.sum.as_ref().map(|(name, _)| name) {
                Some(name) if !arguments.contains_key(name) => b.amount(defaults),
                _ => b.amount(arguments),
            }
            .map_err(|e| GatewayError::InvalidArguments {
                tool: entry.contract.name.clone(),
                errors: vec![e],
            })?;
            Ok(charge(b, actor, arguments, defaults, amount))
        })
        .collect()
}

fn charge(
    b: &Budget,
    actor: &str,
    arguments: &Map<String, Value>,
    defaults: &Map<String, Value>,
    amount: i64,
) -> BudgetCharge {
    BudgetCharge {
        budget: b.name.clone(),
        scope: b.scope(actor, arguments, defaults),
        amount,
        window_ms: b.window_ms(),
        max_calls: b.max_calls,
        max_sum: b.sum.as_ref().map(|(_, max)| *max),
        refuse: b.on_exhausted == OnExhausted::Refuse,
    }
}

/// The request a call past a budget that waits for a person makes (the ledger adds the budget
/// and its use to it; a budget that refuses, or an actor at its cap of waiting calls, is refused
/// by the ledger instead).
pub(super) fn approval_request(at: Timestamp, ttl: Duration) -> NewEvent {
    let waits = Waits {
        run: None,
        call: true,
    };
    Approvals::approval_request(at, ttl, &waits)
}

/// Every budget of `config` with its use at `now`.
pub(super) async fn views(
    config: &Config,
    ledger: &Ledger,
    now: Timestamp,
) -> Result<Vec<BudgetView>, GatewayError> {
    let mut out = Vec::new();
    for b in &config.budgets {
        let used = ledger
            .read()
            .budget_use(&b.name, b.window_ms(), now)
            .await?;
        let share = |calls: u64, sum: i64| {
            let c = b.max_calls.map_or(0.0, |m| calls as f64 / m.max(1) as f64);
            let s = b
                .sum
                .as_ref()
                .map_or(0.0, |(_, m)| sum as f64 / (*m).max(1) as f64);
            c.max(s)
        };
        out.push(BudgetView {
            name: b.name.clone(),
            tools: b.tools.iter().cloned().collect(),
            window_seconds: b.window.as_secs(),
            max_calls: b.max_calls,
            sum: b
                .sum
                .as_ref()
                .map(|(arg, max)| (arg.clone(), amount_text(*max))),
            on_exhausted: match b.on_exhausted {
                OnExhausted::Approval => "approval",
                OnExhausted::Refuse => "refuse",
            },
            scopes: used
                .into_iter()
                .map(|u| ScopeUse {
                    used: share(u.calls, u.sum),
                    sum: amount_text(u.sum),
                    frees_at: u.frees_at.map(|t| t.to_string()),
                    calls: u.calls,
                    scope: u.scope,
                })
                .collect(),
        });
    }
    Ok(out)
}
