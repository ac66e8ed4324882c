//! A model-based property test of the pipeline's recovery (issue 21): a real `Gateway` on a real
//! SQLite ledger, in front of a simulated target that the test scripts request by request.
//!
//! Each case is one agent intent repeated: a sequence of identical calls, each meeting its own
//! faults — the target applies, rejects, answers 500 (before or after applying), applies and
//! never answers, is cut after the request left, refuses connections (a restart), the gateway
//! process dies mid-call (the ledger is closed and reopened: its recovery scan runs), the caller
//! goes away at some point. Then the faults stop and the intent is repeated once more.
//!
//! The properties, over every case:
//! * no intent is ever applied under two execution ids (a lost answer never became a second
//!   action);
//! * `failed` ("nothing sent") is never recorded for an execution a request of which reached
//!   the target, and never after an earlier dispatch;
//! * no call ends in a ledger error (the ledger refuses impossible transitions: the pipeline
//!   must never attempt one);
//! * an answer that says `completed` (applied) names an execution the target applied, and an
//!   answer that invites a new action (`failed`) names one the target never saw;
//! * once the target behaves, the intent settles: completed and applied once, or rejected and
//!   never applied, or `needs_review` for a tool that cannot be safely re-sent.
//!
//! It runs with a fixed seed, and once more with a random seed printed before it starts.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use postern_channels::http::{HttpDispatch, HttpOutcome, HttpSender, Sending};
use postern_core::config::Config;
use postern_core::lifecycle::{State, Verdict};
use postern_core::{EventKind, ExecutionId, FingerprintKey};
use postern_ledger::{Ledger, LedgerOptions, ListFilter};
use postern_pipeline::{Cancellation, Dialers, Gateway, Registry, Resolved, ToolCall};
use proptest::prelude::*;
use serde_json::{json, Map, Value};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::model_support::{answered_with, random_seed, run_cases, TempDir};

/// One tool per recovery path of contract §4. The URLs are never dialled: the simulated target
/// reads them.
const CONFIG: &str = r#"
[gateway]
fingerprint_key = { env = "UNUSED" }
attach_wait = "50ms"

[[actor]]
name = "agent"
token = { env = "UNUSED" }

[[tool]]
name = "invoice_status_query"
class = "idempotent_write"
match_window = "10m"
http = { method = "POST", url = "http://127.0.0.1:9/invoices" }
recovery = { status_query = { method = "GET", url = "http://127.0.0.1:9/invoices?idempotency_key={execution_id}" } }

[[tool]]
name = "invoice_resend"
class = "idempotent_write"
match_window = "10m"
http = { method = "POST", url = "http://127.0.0.1:9/invoices" }

[[tool]]
name = "invoice_if_none"
class = "conditional_write"
match_window = "10m"
http = { method = "POST", url = "http://127.0.0.1:9/invoices" }
recovery = { precondition = { method = "GET", url = "http://127.0.0.1:9/precondition" } }

[[tool]]
name = "wire_status_query"
class = "irreversible"
match_window = "10m"
http = { method = "POST", url = "http://127.0.0.1:9/wires" }
recovery = { status_query = { method = "GET", url = "http://127.0.0.1:9/wires?idempotency_key={execution_id}" } }

[[tool]]
name = "wire"
class = "irreversible"
match_window = "10m"
http = { method = "POST", url = "http://127.0.0.1:9/wires" }

[[tool]]
name = "invoice_no_window"
class = "idempotent_write"
match_window = "0s"
http = { method = "POST", url = "http://127.0.0.1:9/invoices" }
recovery = { status_query = { method = "GET", url = "http://127.0.0.1:9/invoices?idempotency_key={execution_id}" } }
"#;

/// `invoice_no_window` never matches by fingerprint: its calls are one agent request only
/// through a bridge's re-issue key (or an operation key), which every case of it carries.
const TOOLS: [&str; 6] = [
    "invoice_status_query",
    "invoice_resend",
    "invoice_if_none",
    "wire_status_query",
    "wire",
    "invoice_no_window",
];

/// What the target does with one action request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SendFault {
    /// Applies (or replays the key's earlier effect) and answers 201.
    Apply,
    /// Answers 422 without applying (a key already applied is replayed instead).
    Reject,
    /// Answers 500, having applied or not.
    Error500 { applied: bool },
    /// The request left; no answer comes back (timeout, reset), applied or not.
    NoAnswer { applied: bool },
    /// Connection refused: nothing reaches the target.
    Refused,
    /// The gateway process dies while the request is out, applied or not.
    Crash { applied: bool },
}

/// What the target does with a read (status query, precondition).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReadFault {
    Truthful,
    Refused,
    NoAnswer,
    Error500,
}

#[derive(Clone, Copy, Debug)]
struct CallPlan {
    send: SendFault,
    read: ReadFault,
    /// The caller goes away this long after the call starts (`Some(0)`: before it starts).
    disconnect_after_ms: Option<u64>,
}

#[derive(Clone, Debug)]
struct Case {
    tool: &'static str,
    with_operation_key: bool,
    /// Every call carries the same bridge re-issue key: they are re-issues of one request.
    with_reissue_key: bool,
    calls: Vec<CallPlan>,
}

fn send_fault() -> impl Strategy<Value = SendFault> {
    prop_oneof![
        3 => Just(SendFault::Apply),
        1 => Just(SendFault::Reject),
        1 => any::<bool>().prop_map(|applied| SendFault::Error500 { applied }),
        2 => any::<bool>().prop_map(|applied| SendFault::NoAnswer { applied }),
        3 => Just(SendFault::Refused),
        1 => any::<bool>().prop_map(|applied| SendFault::Crash { applied }),
    ]
}

fn read_fault() -> impl Strategy<Value = ReadFault> {
    prop_oneof![
        2 => Just(ReadFault::Truthful),
        2 => Just(ReadFault::Refused),
        1 => Just(ReadFault::NoAnswer),
        1 => Just(ReadFault::Error500),
    ]
}

fn call_plan() -> impl Strategy<Value = CallPlan> {
    (
        send_fault(),
        read_fault(),
        prop_oneof![6 => Just(None), 1 => (0u64..4).prop_map(Some)],
    )
        .prop_map(|(send, read, disconnect_after_ms)| CallPlan {
            send,
            read,
            disconnect_after_ms,
        })
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::sample::select(TOOLS.to_vec()),
        any::<bool>(),
        any::<bool>(),
        prop::collection::vec(call_plan(), 1..7),
    )
        .prop_map(|(tool, with_operation_key, reissue, calls)| Case {
            tool,
            with_operation_key,
            with_reissue_key: reissue || tool == "invoice_no_window",
            calls,
        })
}

/// The simulated target: effects by idempotency key, every request that reached it, and the
/// plan of the call in progress.
#[derive(Default)]
struct Target {
    state: Mutex<TargetState>,
    crashed: Notify,
}

#[derive(Default)]
struct TargetState {
    plan: Option<CallPlan>,
    /// Execution ids whose request applied the effect (one entry per effect).
    applied: Vec<String>,
    /// Execution ids of every action request that reached the target.
    reached: BTreeSet<String>,
}

fn answer(req: &HttpDispatch, status: u16) -> HttpOutcome {
    answered_with(req, status, format!("{{\"status\":{status}}}").into_bytes())
}

fn unknown() -> HttpOutcome {
    HttpOutcome::Unknown {
        reason: "simulated: no answer".into(),
    }
}

fn refused() -> HttpOutcome {
    HttpOutcome::NotSent {
        reason: "simulated: connection refused".into(),
    }
}

impl HttpSender for Target {
    fn send(&self, req: HttpDispatch) -> Sending<'_> {
        Box::pin(async move {
            let key = req.idempotency.as_ref().map(|(_, k)| k.clone()).unwrap();
            let (outcome, crash) = {
                let mut t = self.state.lock().unwrap();
                let fault = t.plan.expect("a plan").send;
                if fault != SendFault::Refused {
                    t.reached.insert(key.clone());
                }
                let seen = t.applied.contains(&key);
                let apply = |t: &mut TargetState| {
                    if !t.applied.contains(&key) {
                        t.applied.push(key.clone());
                    }
                };
                match fault {
                    SendFault::Apply => {
                        apply(&mut t);
                        (answer(&req, if seen { 200 } else { 201 }), false)
                    }
                    SendFault::Reject if seen => (answer(&req, 200), false),
                    SendFault::Reject => (answer(&req, 422), false),
                    SendFault::Error500 { applied }
                    | SendFault::NoAnswer { applied }
                    | SendFault::Crash { applied } => {
                        if applied {
                            apply(&mut t);
                        }
                        match fault {
                            SendFault::Error500 { .. } => (answer(&req, 500), false),
                            SendFault::NoAnswer { .. } => (unknown(), false),
                            _ => (unknown(), true),
                        }
                    }
                    SendFault::Refused => (refused(), false),
                }
            };
            if crash {
                // The process dies with the request out: no outcome is ever recorded.
                self.crashed.notify_one();
                std::future::pending::<()>().await;
            }
            outcome
        })
    }

    fn read(&self, req: HttpDispatch) -> Sending<'_> {
        Box::pin(async move {
            let t = self.state.lock().unwrap();
            match t.plan.expect("a plan").read {
                ReadFault::Refused => refused(),
                ReadFault::NoAnswer => unknown(),
                ReadFault::Error500 => answer(&req, 500),
                ReadFault::Truthful => {
                    if let Some((_, key)) = req.url.split_once("idempotency_key=") {
                        let found = t.applied.iter().any(|k| k == key);
                        answer(&req, if found { 200 } else { 404 })
                    } else {
                        // The precondition "no invoice exists yet".
                        answer(&req, if t.applied.is_empty() { 200 } else { 409 })
                    }
                }
            }
        })
    }
}

/// What one call came to, as the agent saw it.
#[derive(Debug)]
enum Seen {
    Answer {
        id: ExecutionId,
        state: State,
        is_error: bool,
    },
    Error(String),
    Crashed,
}

struct Run {
    url: String,
    config: Config,
    target: Arc<Target>,
    gateway: Option<Gateway>,
}

fn key() -> FingerprintKey {
    FingerprintKey::new(&[42u8; 32]).unwrap()
}

impl Run {
    async fn start(dir: &std::path::Path, target: Arc<Target>) -> Run {
        let url = format!("sqlite://{}", dir.join("ledger.db").display());
        let config = Config::parse(CONFIG, "model.toml").unwrap();
        let mut run = Run {
            url,
            config,
            target,
            gateway: None,
        };
        run.open().await;
        run
    }

    async fn open(&mut self) {
        let ledger = Ledger::open(&self.url, LedgerOptions::default())
            .await
            .unwrap()
            .0;
        let sender: Arc<dyn HttpSender> = self.target.clone();
        let dialers = Dialers::http_only(sender);
        let registry = Registry::new(&self.config.tools, &Resolved::default(), &dialers).unwrap();
        self.gateway = Some(Gateway::unchecked(
            self.config.clone(),
            registry,
            key(),
            Arc::new(ledger),
        ));
    }

    fn gateway(&self) -> &Gateway {
        self.gateway.as_ref().unwrap()
    }

    /// The gateway process dies (its in-flight call was already dropped); a new process opens
    /// the ledger, whose recovery scan records the dead one's dispatches as unknown.
    async fn crash_and_restart(&mut self) {
        let gateway = self.gateway.take().unwrap();
        let ledger = gateway.ledger().clone();
        drop(gateway);
        let ledger = Arc::try_unwrap(ledger)
            .unwrap_or_else(|_| panic!("the dead gateway's ledger is still shared"));
        ledger.close().await;
        self.open().await;
    }

    async fn close(mut self) {
        let gateway = self.gateway.take().unwrap();
        let ledger = gateway.ledger().clone();
        drop(gateway);
        if let Ok(ledger) = Arc::try_unwrap(ledger) {
            ledger.close().await;
        }
    }

    async fn call(&self, case: &Case, plan: CallPlan) -> Seen {
        let tool = case.tool;
        let key = case.with_operation_key.then_some("op-model-1");
        self.target.state.lock().unwrap().plan = Some(plan);
        let (asked, gone) = (CancellationToken::new(), CancellationToken::new());
        match plan.disconnect_after_ms {
            Some(0) => gone.cancel(),
            Some(ms) => {
                let gone = gone.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    gone.cancel();
                });
            }
            None => {}
        }
        let arguments: Map<String, Value> = json!({"customer": "acme", "amount": 1250})
            .as_object()
            .unwrap()
            .clone();
        let call = ToolCall {
            actor: "agent".into(),
            tool: tool.into(),
            arguments,
            operation_key: key.map(str::to_string),
            reissue_key: case.with_reissue_key.then(|| "connect:model:1".to_string()),
            intent_scope: None,
            run_id: None,
            client_address: None,
            principal: None,
            request_id: None,
            trace_parent: None,
            cancel: Some(Cancellation::new(asked, gone)),
            progress: None,
            asker: None,
        };
        tokio::select! {
            biased;
            r = self.gateway().call(call) => match r {
                Ok(r) => Seen::Answer { id: r.execution_id, state: r.state, is_error: r.is_error },
                Err(e) => Seen::Error(e.to_string()),
            },
            () = self.target.crashed.notified() => Seen::Crashed,
        }
    }

    /// Every execution with its events, as recorded.
    async fn executions(&self) -> BTreeMap<ExecutionId, (State, Vec<EventKind>)> {
        let ledger = self.gateway().ledger();
        let all = ledger
            .read()
            .list(&ListFilter {
                limit: 1000,
                ..Default::default()
            })
            .await
            .unwrap();
        let mut out = BTreeMap::new();
        for s in all {
            let view = ledger.read().execution(s.id).await.unwrap().unwrap();
            let events = view.events.iter().map(|e| e.body.event).collect();
            out.insert(s.id, (view.summary.lifecycle.state, events));
        }
        out
    }
}

/// Plays one case and checks every property; an `Err` names the first one broken.
async fn play(case: &Case) -> Result<(), String> {
    let dir = TempDir::new("model");
    let target = Arc::new(Target::default());
    let mut run = Run::start(&dir.0, target.clone()).await;
    let calm = CallPlan {
        send: SendFault::Apply,
        read: ReadFault::Truthful,
        disconnect_after_ms: None,
    };
    let mut seen = Vec::new();
    for plan in case.calls.iter().copied().chain([calm, calm]) {
        let s = run.call(case, plan).await;
        if matches!(s, Seen::Crashed) {
            run.crash_and_restart().await;
        }
        seen.push((plan, s));
    }
    let executions = run.executions().await;
    let (applied, reached) = {
        let t = target.state.lock().unwrap();
        (t.applied.clone(), t.reached.clone())
    };
    run.close().await;

    let fail = |what: &str| {
        Err(format!(
            "{what}\nanswers: {seen:#?}\nexecutions: {executions:#?}\napplied: {applied:?}\nreached: {reached:?}"
        ))
    };
    // No intent applied under two execution ids.
    if applied.len() > 1 {
        return fail("the intent was applied under two execution ids");
    }
    for (id, (state, events)) in &executions {
        let id_text = id.to_string();
        let dispatches = events
            .iter()
            .filter(|e| **e == EventKind::Dispatched)
            .count();
        if events.contains(&EventKind::Failed) && (reached.contains(&id_text) || dispatches > 1) {
            return fail(&format!(
                "{id} is recorded failed, yet a request of it may have left"
            ));
        }
        if *state == State::Failed && applied.contains(&id_text) {
            return fail(&format!("{id} is failed, yet the target applied it"));
        }
    }
    for (_, s) in &seen {
        match s {
            Seen::Error(e) if !e.starts_with("cancelled") => {
                return fail(&format!("a call ended in an error: {e}"));
            }
            Seen::Answer { id, state, .. }
                if matches!(
                    state,
                    State::Completed(Verdict::Applied) | State::Delivered(Verdict::Applied)
                ) && !applied.contains(&id.to_string()) =>
            {
                return fail(&format!(
                    "{id} answered applied, but the target never applied it"
                ));
            }
            Seen::Answer {
                id,
                state: State::Failed,
                is_error,
                ..
            } if reached.contains(&id.to_string()) || !is_error => {
                return fail(&format!(
                    "{id} answered failed (call again), but it reached the target"
                ));
            }
            _ => {}
        }
    }
    // Once the target behaves, the intent is settled (two calm calls: the first may only join
    // or settle what the faults left).
    match seen.last() {
        Some((_, Seen::Answer { id, state, .. })) => {
            let ok = match state {
                State::Completed(Verdict::Applied) | State::Delivered(Verdict::Applied) => {
                    applied == [id.to_string()]
                }
                State::Completed(Verdict::Rejected) | State::Delivered(Verdict::Rejected) => {
                    applied.is_empty()
                }
                State::NeedsReview => {
                    matches!(case.tool, "wire" | "wire_status_query" | "invoice_if_none")
                }
                _ => false,
            };
            if !ok {
                return fail(&format!(
                    "the intent did not settle: last answer {state} for {id}"
                ));
            }
        }
        _ => return fail("the last calm call got no answer"),
    }
    Ok(())
}

#[test]
fn recovery_never_turns_maybe_sent_into_not_sent_fixed_seed() {
    run_cases(21, 256, case(), |c| async move { play(&c).await });
}

#[test]
fn recovery_never_turns_maybe_sent_into_not_sent_random_seed() {
    // Printed now so a failure can be replayed with `run_cases(seed, …)`.
    let seed = random_seed("recovery model");
    run_cases(seed, 128, case(), |c| async move { play(&c).await });
}
