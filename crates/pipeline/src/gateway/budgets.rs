//! Budgets on effects at admission (issue 53): the `[[budget]]`s a call is counted against,
//! as charges the ledger checks in the accept's transaction, and what the call gets instead
//! when one would pass its limit. Nothing here counts: the ledger does, under the scope's lock.

use std::time::Duration;

use postern_core::budget::{amount_text, Budget, OnExhausted};
use postern_core::config::Config;
use postern_core::{EventKind, Timestamp};
use postern_ledger::{BudgetCharge, Ledger, NewEvent};
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::approvals::Approvals;
use crate::decision::Waits;
use crate::error::GatewayError;
use crate::registry::ToolEntry;

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
            Ok(charge(b, actor, arguments, amount))
        })
        .collect()
}

fn charge(b: &Budget, actor: &str, arguments: &Map<String, Value>, amount: i64) -> BudgetCharge {
    BudgetCharge {
        budget: b.name.clone(),
        scope: b.scope(actor, arguments),
        amount,
        window_ms: b.window_ms(),
        max_calls: b.max_calls,
        max_sum: b.sum.as_ref().map(|(_, max)| *max),
    }
}

/// What a call gets when a budget among `charges` is used up (the ledger adds the budget and
/// its use to the first event): a per-use approval request when every budget reached asks
/// for one and the actor is under its cap of waiting calls, else a refusal.
pub(super) fn over_budget(
    config: &Config,
    charges: &[BudgetCharge],
    at: Timestamp,
    ttl: Duration,
    waiting: u64,
) -> Vec<NewEvent> {
    let refuses = charges.iter().any(|c| {
        config
            .budgets
            .iter()
            .any(|b| b.name == c.budget && b.on_exhausted == OnExhausted::Refuse)
    });
    let at_cap = waiting >= u64::from(config.gateway.max_pending_approvals_per_actor);
    if refuses || at_cap {
        let why = match at_cap && !refuses {
            true => {
                "and the actor's calls waiting for an operator are at their cap, so it is refused"
            }
            false => "so it is refused (on_exhausted = \"refuse\")",
        };
        return vec![NewEvent::new(EventKind::Rejected).with_detail(json!({
            "reason": format!("a budget is used up {why}: nothing was sent"),
        }))];
    }
    let waits = Waits {
        run: None,
        call: true,
    };
    vec![Approvals::approval_request(at, ttl, &waits)]
}

/// What an answer says of the budget a call's event names (`detail.budget`, as the ledger
/// wrote it), or `None`.
pub(crate) fn budget_step(detail: &Value, waits: bool) -> Option<String> {
    let b = detail.get("budget")?;
    let text = |k: &str| {
        b.get(k)
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
    };
    let name = text("name")?;
    let mut used = Vec::new();
    if let Some(max) = b.get("max_calls").filter(|v| !v.is_null()) {
        used.push(format!(
            "{} of {max} calls",
            text("calls").unwrap_or_default()
        ));
    }
    if let Some(max) = text("max_sum").filter(|m| m != "null") {
        used.push(format!(
            "{} of {max} summed",
            text("sum").unwrap_or_default()
        ));
    }
    let window = b.get("window_seconds").and_then(Value::as_i64).unwrap_or(0);
    let frees = text("frees_at")
        .filter(|f| f != "null")
        .map_or(String::new(), |f| format!("; it frees up from {f}"));
    let scope = text("scope")
        .filter(|s| !s.is_empty())
        .map_or(String::new(), |s| format!(" for {s}"));
    let then = match waits {
        true => "Nothing was sent: it waits for an operator's approval (postern approvals approve), which sends it",
        false => "Nothing was sent: call again once it frees up, or ask an operator to raise the budget",
    };
    Some(format!(
        "budget {name}{scope} is used up ({} in the last {window}s{frees}). {then}",
        used.join(", ")
    ))
}

/// A budget and its use now, per scope counted in its window (`postern budgets`, `/ops/budgets`,
/// the console, the gauges).
#[derive(Clone, Debug, Serialize)]
pub struct BudgetView {
    pub name: String,
    pub tools: Vec<String>,
    pub window_seconds: u64,
    pub max_calls: Option<u64>,
    /// The summed argument and its limit, as a decimal.
    pub sum: Option<(String, String)>,
    pub on_exhausted: &'static str,
    pub scopes: Vec<ScopeUse>,
}

/// One scope's use of a budget in its window.
#[derive(Clone, Debug, Serialize)]
pub struct ScopeUse {
    /// `actor=NAME, ARG=VALUE`; empty for a budget counted as one.
    pub scope: String,
    pub calls: u64,
    pub sum: String,
    /// The larger of its calls and sum as a share of their limits (1.0: used up).
    pub used: f64,
    pub frees_at: Option<String>,
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
