//! A model-based property test of per-use approvals (issue 14): a real `Gateway` on a real
//! SQLite ledger, in front of a simulated target that applies whatever reaches it, driven by a
//! random interleaving of identical calls, approvals and denials (alone, or two operators at
//! once), gateway restarts (the held arguments are lost) and waits past the approval's expiry.
//!
//! The properties, over every case:
//! * nothing reaches the target before an operator's approval is recorded for it, and nothing
//!   denied (or expired) ever reaches it;
//! * one intent is one execution: every identical call names the same execution id;
//! * an execution is decided once: at most one approval or denial in its events, and of two
//!   operators deciding at once exactly one is recorded (the other is told who won);
//! * no call ends in a ledger error;
//! * once approved and called again, it is applied exactly once.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use postern_channels::http::{HttpDispatch, HttpOutcome, HttpSender, Sending};
use postern_core::config::Config;
use postern_core::lifecycle::State;
use postern_core::{EventKind, ExecutionId};
use postern_pipeline::{Gateway, GatewayError};
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
approval = "every_call"
approval_ttl = "250ms"
http = { method = "POST", url = "http://127.0.0.1:9/payments" }
"#;

#[derive(Clone, Copy, Debug)]
enum Step {
    /// The agent repeats the identical call.
    Call,
    Approve,
    Deny,
    /// Two operators decide at once: approve and deny, or approve twice.
    Race {
        both_approve: bool,
    },
    /// The gateway process stops and starts again (held arguments are lost).
    Restart,
    /// Long enough for the request to expire if it is still pending.
    WaitPastExpiry,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => Just(Step::Call),
        2 => Just(Step::Approve),
        1 => Just(Step::Deny),
        1 => any::<bool>().prop_map(|both_approve| Step::Race { both_approve }),
        1 => Just(Step::Restart),
        1 => Just(Step::WaitPastExpiry),
    ]
}

/// A target that applies every request that reaches it.
#[derive(Default)]
struct Target {
    reached: Mutex<Vec<String>>,
}

impl HttpSender for Target {
    fn send(&self, req: HttpDispatch) -> Sending<'_> {
        Box::pin(async move {
            let key = req.idempotency.as_ref().map(|(_, k)| k.clone()).unwrap();
            self.reached.lock().unwrap().push(key);
            answered(&req, 201)
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
    async fn open(&mut self) {
        self.served.start().await;
    }

    fn gateway(&self) -> &Arc<Gateway> {
        self.served.get()
    }

    async fn stop(&mut self) {
        self.served.stop().await;
    }

    async fn call(&self) -> Result<(ExecutionId, State), String> {
        let call = tool_call("agent", "pay", json!({"to": "acme", "amount": 70}));
        match self.gateway().call(call).await {
            Ok(r) => Ok((r.execution_id, r.state)),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Approves (with the execution's own fingerprint) or denies; whether it was recorded.
    async fn decide(&self, id: ExecutionId, approve: bool, who: &str) -> Result<bool, String> {
        let g = self.gateway();
        let result = if approve {
            let fingerprint = g
                .ledger()
                .read()
                .summary(id)
                .await
                .unwrap()
                .unwrap()
                .fingerprint;
            g.operator()
                .approve(&id.to_string(), who, &fingerprint.to_string(), None)
                .await
        } else {
            g.operator().deny(&id.to_string(), who, None).await
        };
        match result {
            Ok(_) => Ok(true),
            Err(GatewayError::Decision(_)) => Ok(false),
            Err(e) => Err(format!("decision ended in {e}")),
        }
    }
}

async fn play(steps: &[Step]) -> Result<(), String> {
    let dir = TempDir::new("approval-model");
    let target: Arc<Target> = Arc::default();
    let config = Config::parse(CONFIG, "approval-model.toml").unwrap();
    let mut run = Run {
        served: ModelGateway::new(&dir, config, target.clone()),
        target,
    };
    run.open().await;
    let (mut id, state) = run.call().await?;
    if state != State::AwaitingApproval {
        return Err(format!("a new call is {state}, not awaiting approval"));
    }
    let mut recorded_decisions = 0;
    for step in steps {
        match *step {
            Step::Call => {
                let (got, _) = run.call().await?;
                if got != id {
                    // Only after the execution ended with nothing sent (an approval that was
                    // never sent within its approval_ttl is rejected): a new one, waiting anew.
                    succeeded_by(&run, id, got).await?;
                    id = got;
                    recorded_decisions = 0;
                }
            }
            Step::Approve | Step::Deny => {
                if run
                    .decide(id, matches!(step, Step::Approve), "alice")
                    .await?
                {
                    recorded_decisions += 1;
                }
            }
            Step::Race { both_approve } => {
                let (a, b) = tokio::join!(
                    run.decide(id, true, "alice"),
                    run.decide(id, both_approve, "bob")
                );
                let won = usize::from(a?) + usize::from(b?);
                if won > 1 {
                    return Err("two concurrent decisions were both recorded".into());
                }
                recorded_decisions += won;
            }
            Step::Restart => {
                run.stop().await;
                run.open().await;
            }
            Step::WaitPastExpiry => {
                tokio::time::sleep(Duration::from_millis(300)).await;
                run.gateway()
                    .expire_approvals()
                    .await
                    .map_err(|e| e.to_string())?;
            }
        }
        check(&run, id).await?;
    }
    // Calm: the agent calls once more; an approved execution is then applied exactly once.
    let (got, state) = run.call().await?;
    if got != id {
        succeeded_by(&run, id, got).await?;
        id = got;
        recorded_decisions = 0;
    }
    run.stop().await;
    run.open().await;
    check(&run, id).await?;
    let view = run
        .gateway()
        .ledger()
        .read()
        .execution(id)
        .await
        .unwrap()
        .unwrap();
    let approved = approved_at(&view.events).is_some();
    let reached = run.target.reached.lock().unwrap().clone();
    if approved && reached.len() != 1 {
        return Err(format!(
            "approved and called again, yet applied {} times (last answer {state})",
            reached.len()
        ));
    }
    if recorded_decisions > 1 {
        return Err(format!(
            "{recorded_decisions} decisions recorded for one execution"
        ));
    }
    run.stop().await;
    Ok(())
}

/// A second execution of the intent is allowed only after the first ended `rejected` with
/// nothing sent; the new one waits for its own approval.
async fn succeeded_by(run: &Run, old: ExecutionId, new: ExecutionId) -> Result<(), String> {
    let ledger = run.gateway().ledger();
    let old_state = ledger
        .read()
        .summary(old)
        .await
        .unwrap()
        .unwrap()
        .lifecycle
        .state;
    let new_state = ledger
        .read()
        .summary(new)
        .await
        .unwrap()
        .unwrap()
        .lifecycle
        .state;
    let reached = run.target.reached.lock().unwrap().clone();
    if old_state != State::Rejected || reached.iter().any(|k| *k == old.to_string()) {
        return Err(format!(
            "an identical call made a second execution {new} while the first is {old_state}"
        ));
    }
    if new_state != State::AwaitingApproval {
        return Err(format!(
            "the new execution {new} is {new_state}, not awaiting approval"
        ));
    }
    Ok(())
}

/// The seq of the approval, if one was recorded.
fn approved_at(events: &[postern_audit::ChainedEvent]) -> Option<u32> {
    events
        .iter()
        .find(|e| {
            e.body.event == EventKind::Authorized && e.body.detail.get("approved_by").is_some()
        })
        .map(|e| e.body.n)
}

async fn check(run: &Run, id: ExecutionId) -> Result<(), String> {
    let view = run
        .gateway()
        .ledger()
        .read()
        .execution(id)
        .await
        .unwrap()
        .unwrap();
    let decisions = view
        .events
        .iter()
        .filter(|e| {
            e.body.event == EventKind::Denied
                || (e.body.event == EventKind::Authorized
                    && e.body.detail.get("approved_by").is_some())
        })
        .count();
    if decisions > 1 {
        return Err(format!("{decisions} decisions in the events of {id}"));
    }
    let dispatched_at = view
        .events
        .iter()
        .find(|e| e.body.event == EventKind::Dispatched)
        .map(|e| e.body.n);
    let reached: BTreeSet<String> = run.target.reached.lock().unwrap().iter().cloned().collect();
    if reached.iter().any(|k| *k != id.to_string()) {
        return Err(format!("the target saw another execution: {reached:?}"));
    }
    if !reached.is_empty() {
        match (approved_at(&view.events), dispatched_at) {
            (Some(a), Some(d)) if a < d => {}
            _ => {
                return Err(
                    "the target was reached without a recorded approval before dispatch".into(),
                )
            }
        }
    }
    let denied = view
        .events
        .iter()
        .any(|e| e.body.event == EventKind::Denied);
    if denied && !reached.is_empty() {
        return Err("a denied execution reached the target".into());
    }
    Ok(())
}

#[test]
fn an_approval_is_decided_once_and_nothing_is_sent_without_it_fixed_seed() {
    run_cases(
        14,
        64,
        prop::collection::vec(step(), 1..9),
        |steps| async move { play(&steps).await },
    );
}

#[test]
fn an_approval_is_decided_once_and_nothing_is_sent_without_it_random_seed() {
    let seed = random_seed("approval model");
    run_cases(
        seed,
        32,
        prop::collection::vec(step(), 1..9),
        |steps| async move { play(&steps).await },
    );
}
