//! The end of the run: each invariant checked from the target's own state and the ledger, with
//! what it was checked over and every violation.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use postern_demo::target::Invoice;
use serde_json::Value;
use sqlx::{Connection, Row};

use crate::agents::Intent;

pub struct Check {
    pub name: &'static str,
    pub over: String,
    pub violations: Vec<String>,
}

/// What the ledger holds, read once.
pub struct Record {
    /// execution id → state
    pub states: HashMap<String, String>,
    /// operation key → execution ids
    pub by_key: HashMap<String, BTreeSet<String>>,
    /// execution id → (time of its first outcome_unknown, taken over by another instance)
    pub unknowns: HashMap<String, (i64, bool)>,
    /// execution id → times calls reaching it were answered
    pub answered: HashMap<String, Vec<i64>>,
    /// What the budgets count: executions counted by `invoices`, and the sum `invoiced` counts.
    pub counted: (u64, i64),
    /// Calls refused past a budget.
    pub refused_past_budget: u64,
}

pub async fn read(store: &str) -> Record {
    let mut db = sqlx::PgConnection::connect(store).await.expect("the store");
    let mut r = Record {
        states: HashMap::new(),
        by_key: HashMap::new(),
        unknowns: HashMap::new(),
        answered: HashMap::new(),
        counted: (0, 0),
        refused_past_budget: 0,
    };
    for row in sqlx::query("SELECT id, state, operation_key FROM executions")
        .fetch_all(&mut db)
        .await
        .unwrap()
    {
        let id: String = row.get("id");
        if let Some(k) = row.get::<Option<String>, _>("operation_key") {
            r.by_key.entry(k).or_default().insert(id.clone());
        }
        r.states.insert(id, row.get("state"));
    }
    for row in sqlx::query(
        "SELECT execution_id, at, detail FROM events WHERE event = 'outcome_unknown' ORDER BY at",
    )
    .fetch_all(&mut db)
    .await
    .unwrap()
    {
        let detail: Value =
            serde_json::from_str(&row.get::<String, _>("detail")).unwrap_or(Value::Null);
        r.unknowns
            .entry(row.get("execution_id"))
            .or_insert((row.get("at"), detail.get("taken_over_by").is_some()));
    }
    for row in sqlx::query("SELECT execution_id, at FROM calls WHERE execution_id IS NOT NULL")
        .fetch_all(&mut db)
        .await
        .unwrap()
    {
        r.answered
            .entry(row.get("execution_id"))
            .or_default()
            .push(row.get("at"));
    }
    let counted = |budget: &'static str| {
        sqlx::query("SELECT COUNT(*) AS n, CAST(COALESCE(SUM(amount), 0) AS BIGINT) AS sum FROM budget_charges WHERE budget = $1 AND at IS NOT NULL").bind(budget)
    };
    let calls = counted("invoices").fetch_one(&mut db).await.unwrap();
    let sum = counted("invoiced").fetch_one(&mut db).await.unwrap();
    r.counted = (
        u64::try_from(calls.get::<i64, _>("n")).unwrap_or(0),
        sum.get::<i64, _>("sum"),
    );
    let refused = sqlx::query(
        "SELECT COUNT(*) AS n FROM events WHERE event = 'rejected' AND detail LIKE '%\"budget\"%'",
    )
    .fetch_one(&mut db)
    .await
    .unwrap();
    r.refused_past_budget = u64::try_from(refused.get::<i64, _>("n")).unwrap_or(0);
    r
}

/// (g) The budgets are never exceeded (issue 53): the target applied at most `max_calls`
/// invoices summing to at most `max_sum`, and the ledger counted every one it applied (what it
/// counts may be more: an unknown outcome counts whether or not it was applied).
pub fn budgets(invoices: &[Invoice], record: &Record, limits: crate::cluster::Limits) -> Check {
    use postern_core::budget::AMOUNT_SCALE;
    let applied = invoices.len() as u64;
    let sum: i64 = invoices.iter().map(|i| i.amount).sum();
    let (counted, counted_sum) = record.counted;
    let mut violations = Vec::new();
    if applied > limits.max_calls {
        violations.push(format!(
            "{applied} invoices applied, the budget allows {}",
            limits.max_calls
        ));
    }
    if sum > limits.max_sum {
        violations.push(format!(
            "invoices summing to {sum} applied, the budget allows {}",
            limits.max_sum
        ));
    }
    if counted < applied || counted_sum < sum * AMOUNT_SCALE {
        violations.push(format!("the ledger counted {counted} executions summing to {} for {applied} applied invoices summing to {sum}", counted_sum / AMOUNT_SCALE));
    }
    Check {
        name: "(g) the budgets are never exceeded, and every applied invoice is counted",
        over: format!(
            "{applied} invoices of at most {}, sum {sum} of at most {}; {} calls refused past a budget",
            limits.max_calls, limits.max_sum, record.refused_past_budget
        ),
        violations,
    }
}

fn final_state(s: &str) -> bool {
    [
        "completed",
        "delivered",
        "delivery_failed",
        "failed",
        "rejected",
        "denied",
        "cancelled",
        "resolved",
    ]
    .iter()
    .any(|f| s.starts_with(f))
}

pub fn check(
    intents: &[Intent],
    invoices: &[Invoice],
    record: &Record,
    audit_valid: Result<(), String>,
    operator_unknowns: Option<u64>,
) -> Vec<Check> {
    let mut by_exec: HashMap<&str, usize> = HashMap::new();
    for inv in invoices {
        if let Some(k) = &inv.idempotency_key {
            *by_exec.entry(k.as_str()).or_default() += 1;
        }
    }
    let applied = |ids: &BTreeSet<String>| {
        ids.iter()
            .map(|id| by_exec.get(id.as_str()).copied().unwrap_or(0))
            .sum::<usize>()
    };
    let none = BTreeSet::new();

    // (a) No intent applied twice: per key, and per customer no more than its keys.
    let mut a = Vec::new();
    for i in intents {
        let n = applied(record.by_key.get(&i.key).unwrap_or(&none));
        if n > 1 {
            a.push(format!("key {} applied {n} times", i.key));
        }
    }
    let mut keys_of: BTreeMap<&str, usize> = BTreeMap::new();
    for i in intents {
        *keys_of.entry(i.customer.as_str()).or_default() += 1;
    }
    let mut per_customer: BTreeMap<&str, usize> = BTreeMap::new();
    for inv in invoices {
        *per_customer.entry(inv.customer.as_str()).or_default() += 1;
    }
    for (c, n) in &per_customer {
        let keys = keys_of.get(c).copied().unwrap_or(0);
        if *n > keys {
            a.push(format!("customer {c}: {n} invoices for {keys} key(s)"));
        }
    }

    // (b) Told completed: applied exactly once; told failed (or refused): never applied.
    let mut b = Vec::new();
    let mut told_final = 0;
    for i in intents {
        let ids = record.by_key.get(&i.key).unwrap_or(&none);
        match i.told.as_deref() {
            Some("completed") | Some("resolved") => {
                told_final += 1;
                let n = applied(ids);
                if n != 1 {
                    b.push(format!(
                        "key {} was told completed; applied {n} times",
                        i.key
                    ));
                }
            }
            Some(s @ ("failed" | "rejected" | "denied" | "cancelled")) => {
                told_final += 1;
                let n = applied(ids);
                if n != 0 {
                    b.push(format!("key {} was told {s}; applied {n} times", i.key));
                }
            }
            _ => {}
        }
    }

    // (c) Nothing stuck: every execution final, or honestly unknown / under review.
    let c: Vec<String> = record
        .states
        .iter()
        .filter(|(_, s)| !final_state(s) && *s != "outcome_unknown" && *s != "needs_review")
        .map(|(id, s)| format!("{id} is {s}"))
        .collect();

    // (d) Every execution id an agent was given is in the ledger.
    let given: BTreeSet<&String> = intents.iter().flat_map(|i| i.executions.iter()).collect();
    let d: Vec<String> = given
        .iter()
        .filter(|id| !record.states.contains_key(id.as_str()))
        .map(|id| format!("{id} is not in the ledger"))
        .collect();

    // (e) The audit record verifies, every replica's chain.
    let e: Vec<String> = audit_valid.err().into_iter().collect();

    // (f) Every unknown outcome was surfaced: told to an agent as unknown, its settled state
    // given as an agent's last answer about it (a final state comes after the unknown), answered
    // to a later call in the calls log, or shown to operators (still unknown or under review:
    // /ops/status counts them). The calls log alone is not enough: it rides the next commit,
    // and a replica killed right after answering loses its row.
    let mut told_unknown: BTreeSet<&String> = intents
        .iter()
        .filter(|i| i.seen.contains("outcome_unknown") || i.seen.contains("needs_review"))
        .flat_map(|i| i.executions.iter())
        .collect();
    told_unknown.extend(
        intents
            .iter()
            .filter(|i| i.settled())
            .filter_map(|i| i.last.as_ref()),
    );
    let mut f = Vec::new();
    let mut waiting = 0u64;
    for (id, (at, _)) in &record.unknowns {
        let state = record.states.get(id).map(String::as_str).unwrap_or("?");
        if state == "outcome_unknown" || state == "needs_review" {
            waiting += 1;
            continue;
        }
        let later = record
            .answered
            .get(id)
            .is_some_and(|t| t.iter().any(|c| c >= at));
        if !later && !told_unknown.contains(id) {
            f.push(format!(
                "{id} became outcome_unknown and is now {state}, and no agent or operator was told"
            ));
        }
    }
    match operator_unknowns {
        Some(n) if n >= waiting => {}
        Some(n) => f.push(format!(
            "{waiting} executions wait unknown or under review, the operators' status shows {n}"
        )),
        None => f.push("the operators' status could not be read".into()),
    }

    vec![
        Check {
            name: "(a) no intent applied twice on the target",
            over: format!("{} keys, {} invoices", intents.len(), invoices.len()),
            violations: a,
        },
        Check {
            name: "(b) told completed = applied once; told failed = never applied",
            over: format!("{told_final} settled intents"),
            violations: b,
        },
        Check {
            name: "(c) every execution final or honestly unknown / under review",
            over: format!("{} executions", record.states.len()),
            violations: c,
        },
        Check {
            name: "(d) every execution id an agent received is in the ledger",
            over: format!("{} ids", given.len()),
            violations: d,
        },
        Check {
            name: "(e) audit verify --store: every chain VALID",
            over: "the store".into(),
            violations: e,
        },
        Check {
            name: "(f) every unknown outcome surfaced to an agent or operator",
            over: format!("{} unknowns", record.unknowns.len()),
            violations: f,
        },
    ]
}

/// `postern audit verify --store URL --public-key FILE`.
pub fn audit(postern: &Path, store: &str, public_key: &Path) -> Result<(), String> {
    let out = std::process::Command::new(postern)
        .args(["audit", "verify", "--store", store, "--public-key"])
        .arg(public_key)
        .output()
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "audit verify: {}{}",
            text,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}
