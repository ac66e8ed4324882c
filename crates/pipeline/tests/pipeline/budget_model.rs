//! A model-based property test of budgets on effects (issue 53): a real `Gateway` on a real
//! SQLite ledger with `[[budget]]`s (at most 3 executions and a sum of at most 100 per hour),
//! in front of a simulated target that applies what reaches it once per idempotency key (as a
//! real API with idempotency does), driven by random interleavings of distinct calls, identical
//! retries, answers lost after the target applied the call, requests lost before it did,
//! requests that never left, operators' approvals, and gateway restarts.
//!
//! The properties, over every case:
//! * the budget's count is exactly the executions that were dispatched and did not end
//!   `failed` (nothing sent), and its sum exactly their amounts: a retry, a re-send or a
//!   restart never counts one twice, a refusal before sending never counts;
//! * every execution the target applied is counted;
//! * without an operator's approval, at most 3 executions and a sum of at most 100 reach the
//!   target: a call past the budget waits for a person, with nothing sent.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use postern_channels::http::{HttpDispatch, HttpOutcome, HttpSender, Sending};
use postern_core::budget::AMOUNT_SCALE;
use postern_core::config::Config;
use postern_core::lifecycle::State;
use postern_core::ExecutionId;
use postern_pipeline::Gateway;
use proptest::prelude::*;
use serde_json::json;

use crate::model_support::{answered, random_seed, run_cases, tool_call, ModelGateway, TempDir};

const CONFIG: &str = r#"
[gateway]
fingerprint_key = { env = "UNUSED" }
attach_wait = "50ms"

[[actor]]
name = "agent"
token = { env = "UNUSED" }

[[operator]]
name = "alice"
token = { env = "UNUSED" }

[[tool]]
name = "pay"
class = "idempotent_write"
match_window = "10m"
http = { method = "POST", url = "http://127.0.0.1:9/payments" }
input_schema = { type = "object", properties = { to = { type = "string" }, amount = { type = "number" } } }

[[budget]]
name = "payments"
tools = ["pay"]
per = ["actor"]
window = "1h"
max_calls = 3

[[budget]]
name = "payment-sum"
tools = ["pay"]
window = "1h"
sum = "amount"
max_sum = 100
"#;

/// What the target does with the next request that reaches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    /// Applies it and answers.
    Apply,
    /// Applies it; the answer is lost on the way back (outcome unknown).
    LoseAnswer,
    /// The request is lost on the way there (outcome unknown, nothing applied).
    LoseRequest,
    /// Provably never left (nothing applied: `failed` for an execution's only dispatch).
    NotSent,
}

#[derive(Clone, Copy, Debug)]
enum Step {
    /// The agent calls for intent `n` (distinct amounts), the target doing `fate`.
    Call {
        n: usize,
        fate: Fate,
    },
    /// An operator approves the oldest call waiting for a person.
    Approve,
    Restart,
}

fn step() -> impl Strategy<Value = Step> {
    let fate = prop_oneof![
        4 => Just(Fate::Apply),
        1 => Just(Fate::LoseAnswer),
        1 => Just(Fate::LoseRequest),
        1 => Just(Fate::NotSent),
    ];
    prop_oneof![
        6 => (0usize..6, fate).prop_map(|(n, fate)| Step::Call { n, fate }),
        1 => Just(Step::Approve),
        1 => Just(Step::Restart),
    ]
}

/// The amount intent `n` pays: 10, 25, 40, 55, 70, 85.
fn amount(n: usize) -> i64 {
    10 + 15 * n as i64
}

/// A target that applies each idempotency key once.
#[derive(Default)]
struct Target {
    fate: Mutex<Option<Fate>>,
    applied: Mutex<BTreeSet<String>>,
}

impl HttpSender for Target {
    fn send(&self, req: HttpDispatch) -> Sending<'_> {
        Box::pin(async move {
            let key = req.idempotency.as_ref().map(|(_, k)| k.clone()).unwrap();
            let fate = self.fate.lock().unwrap().unwrap_or(Fate::Apply);
            if matches!(fate, Fate::Apply | Fate::LoseAnswer) {
                self.applied.lock().unwrap().insert(key);
            }
            match fate {
                Fate::Apply => answered(&req, 201),
                Fate::LoseAnswer | Fate::LoseRequest => HttpOutcome::Unknown {
                    reason: "the connection was reset".into(),
                },
                Fate::NotSent => HttpOutcome::NotSent {
                    reason: "connection refused".into(),
                },
            }
        })
    }

    fn read(&self, _req: HttpDispatch) -> Sending<'_> {
        Box::pin(async {
            HttpOutcome::NotSent {
                reason: "no reads".into(),
            }
        })
    }
}

struct Run {
    target: Arc<Target>,
    served: ModelGateway,
}

impl Run {
    fn gateway(&self) -> &Arc<Gateway> {
        self.served.get()
    }

    async fn restart(&mut self) {
        self.served.stop().await;
        self.served.start().await;
    }

    async fn call(&self, n: usize) -> Result<Option<(ExecutionId, State)>, String> {
        let arguments = json!({"to": format!("supplier-{n}"), "amount": amount(n)});
        let call = tool_call("agent", "pay", arguments);
        match self.gateway().call(call).await {
            Ok(r) => Ok(Some((r.execution_id, r.state))),
            // A call may end in an error the agent is told about (in progress, a conflict):
            // what matters here is what was counted and sent.
            Err(e) if e.execution().is_some() || e.kind() != "ledger" => Ok(None),
            Err(e) => Err(format!("a call ended in {e}")),
        }
    }

    async fn approve_oldest(&self) -> Result<Option<ExecutionId>, String> {
        let operator = self.gateway().operator();
        let pending = operator
            .pending(State::AwaitingApproval)
            .await
            .map_err(|e| e.to_string())?;
        let Some(p) = pending.last() else {
            return Ok(None);
        };
        let approved = operator
            .approve(&p.execution_id, "alice", &p.fingerprint, None)
            .await;
        Ok(approved.ok().and_then(|_| p.execution_id.parse().ok()))
    }
}

/// The properties, read from the record and the target.
async fn check(
    run: &Run,
    approved: &BTreeSet<ExecutionId>,
    amounts: &BTreeMap<ExecutionId, i64>,
) -> Result<(), String> {
    let ledger = run.gateway().ledger().read();
    let now = postern_pipeline::now();
    let count = ledger
        .budget_use("payments", 3_600_000, now)
        .await
        .map_err(|e| e.to_string())?;
    let sum = ledger
        .budget_use("payment-sum", 3_600_000, now)
        .await
        .map_err(|e| e.to_string())?;
    let (counted, summed) = (
        count.first().map_or(0, |u| u.calls),
        sum.first().map_or(0, |u| u.sum),
    );
    let mut effects = 0;
    let mut effect_sum = 0;
    let mut unapproved = (0, 0);
    let applied = run.target.applied.lock().unwrap().clone();
    for (id, amount) in amounts {
        let s = ledger
            .summary(*id)
            .await
            .map_err(|e| e.to_string())?
            .unwrap();
        let dispatched = s.lifecycle.dispatches > 0 && s.lifecycle.state != State::Failed;
        if dispatched {
            effects += 1;
            effect_sum += amount;
        }
        if applied.contains(&id.to_string()) {
            if !dispatched {
                return Err(format!("{id} was applied but is {}", s.lifecycle.state));
            }
            if !approved.contains(id) {
                unapproved = (unapproved.0 + 1, unapproved.1 + amount);
            }
        }
    }
    if counted != effects || summed != effect_sum * AMOUNT_SCALE {
        return Err(format!("counted {counted} summing {summed}, but {effects} executions summing {effect_sum} were dispatched"));
    }
    if unapproved.0 > 3 || unapproved.1 > 100 {
        return Err(format!(
            "{} executions summing {} reached the target without an approval",
            unapproved.0, unapproved.1
        ));
    }
    Ok(())
}

async fn play(steps: Vec<Step>) -> Result<(), String> {
    let dir = TempDir::new("budget-model");
    let target: Arc<Target> = Arc::default();
    let config = Config::parse(CONFIG, "budget-model.toml").map_err(|e| e.to_string())?;
    let mut run = Run {
        served: ModelGateway::new(&dir, config, target.clone()),
        target,
    };
    run.served.start().await;
    let mut approved = BTreeSet::new();
    let mut amounts = BTreeMap::new();
    for step in steps {
        match step {
            Step::Call { n, fate } => {
                *run.target.fate.lock().unwrap() = Some(fate);
                if let Some((id, _)) = run.call(n).await? {
                    amounts.insert(id, amount(n));
                }
            }
            Step::Approve => {
                if let Some(id) = run.approve_oldest().await? {
                    approved.insert(id);
                    // The approved call is sent in the background.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            Step::Restart => run.restart().await,
        }
        check(&run, &approved, &amounts).await?;
    }
    run.restart().await;
    check(&run, &approved, &amounts).await
}

#[test]
fn the_budget_counts_exactly_the_effects_over_every_interleaving() {
    let steps = || proptest::collection::vec(step(), 1..24);
    run_cases(20_531, 48, steps(), play);
    run_cases(random_seed("budget model"), 16, steps(), play);
}
