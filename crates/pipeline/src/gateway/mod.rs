//! The pipeline: accept → authorize → dispatch (durable first) → complete (durable result) →
//! deliver, and recovery exactly per contract §4. Transport-agnostic: the MCP front (or a test)
//! hands in a [`ToolCall`] and gets a [`CallReport`].
//!
//! [`Gateway`] is a façade (`call`, `start`, `drain`) over parts that own their state and are
//! called one way, each only downward: [`Admission`](admission) → [`Recovery`](recovery) →
//! [`Approvals`](approvals) → [`Dispatch`](dispatch) → [`Records`]. Operators act through
//! [`Operator`]; [`Runs`], [`Notices`], [`ToolPolicy`] and [`UpstreamTools`] are leaves. No
//! part holds the gateway.

use std::sync::Arc;
use std::time::Duration;

use postern_core::config::Config;
use postern_core::contract::EXECUTION_STATUS;
use postern_core::lifecycle::State;
use postern_core::recovery::RecoveryDecision;
use postern_core::{EventKind, ExecutionId, FingerprintKey};
use postern_ledger::{AcceptOutcome, ExecutionSummary, Ledger, NewEvent};
use serde_json::{json, Value};

mod admission;
mod approvals;
mod asked;
mod budgets;
mod call;
mod dispatch;
mod notices;
mod operator;
mod policy;
mod promises;
mod records;
mod recovery;
mod run_approval;
mod runs;
mod span;
mod status;
mod upstreams;

pub use crate::clock::now;
pub use crate::decision::{Decided, DecisionError, PendingDecision};
pub use crate::telemetry::{BudgetView, ScopeUse};
pub use call::{agent_run, key_fault, Cancellation, ToolCall};
pub use notices::{Notice, Notices};
pub use operator::Operator;
pub use policy::ToolPolicy;
pub use promises::unkept_promises;
pub use records::Records;
pub use runs::Runs;
pub use runs::{call_json, RunView};
pub use upstreams::{UpstreamToolView, UpstreamTools, UpstreamView, VisibleUpstream};

use crate::error::GatewayError;
use crate::registry::{Registry, ToolEntry};
use crate::report::{Attempt, CallReport};
use span::{call_span, close_call_span};

pub struct Gateway {
    ledger: Arc<Ledger>,
    registry: Arc<Registry>,
    config: Arc<Config>,
    admission: admission::Admission,
    recovery: recovery::Recovery,
    approvals: Arc<approvals::Approvals>,
    dispatch: Arc<dispatch::Dispatch>,
    records: Arc<Records>,
    operator: Operator,
    /// Executions finishing in the background (MCP tasks): a graceful stop waits for them.
    background: tokio_util::task::TaskTracker,
    /// Task executions whose background run has not returned yet (a task reads `working`
    /// while its recovery is still going, whatever the record says so far).
    running: std::sync::Mutex<std::collections::HashSet<ExecutionId>>,
    /// The runs this process serves, and the calls log.
    runs: Arc<Runs>,
    /// Which tools an actor may call, and which calls wait for a person.
    policy: Arc<ToolPolicy>,
    /// New approval requests and decisions, for the console and the webhooks.
    notices: Arc<Notices>,
    /// The upstream servers' tools as they are served.
    upstream_tools: Arc<UpstreamTools>,
}

impl Gateway {
    /// A gateway serving `registry` (whose channels dial its targets). Refuses a
    /// configuration that promises what this build does not do.
    pub fn new(
        config: Config,
        registry: Registry,
        key: FingerprintKey,
        ledger: Arc<Ledger>,
    ) -> Result<Gateway, GatewayError> {
        let unkept = unkept_promises(&config);
        if !unkept.is_empty() {
            return Err(GatewayError::Unenforced(unkept));
        }
        Ok(Gateway::unchecked(config, registry, key, ledger))
    }

    /// [`Gateway::new`] without the start-up check (the model tests' simulated targets).
    pub fn unchecked(
        config: Config,
        registry: Registry,
        key: FingerprintKey,
        ledger: Arc<Ledger>,
    ) -> Gateway {
        let registry = Arc::new(registry);
        let config = Arc::new(config);
        let background = tokio_util::task::TaskTracker::new();
        let policy = Arc::new(ToolPolicy::new(config.clone(), registry.clone()));
        let upstream_tools = Arc::new(UpstreamTools::new(
            registry.clone(),
            ledger.clone(),
            config.actors.clone(),
        ));
        let notices = Arc::new(Notices::new(
            config.console.public_url.clone(),
            config.gateway.listen.clone(),
        ));
        let runs = Arc::new(Runs::new(ledger.clone(), config.clone()));
        let records = Arc::new(Records::new(ledger.clone(), registry.clone()));
        let dispatch = Arc::new(dispatch::Dispatch {
            ledger: ledger.clone(),
            records: records.clone(),
            vault: Default::default(),
            background: background.clone(),
        });
        let approvals = Arc::new(approvals::Approvals {
            ledger: ledger.clone(),
            registry: registry.clone(),
            config: config.clone(),
            notices: notices.clone(),
            dispatch: dispatch.clone(),
            held: Default::default(),
        });
        let recovery = recovery::Recovery {
            ledger: ledger.clone(),
            config: config.clone(),
            records: records.clone(),
            dispatch: dispatch.clone(),
            approvals: approvals.clone(),
        };
        let admission = admission::Admission {
            ledger: ledger.clone(),
            registry: registry.clone(),
            config: config.clone(),
            key,
            policy: policy.clone(),
            dispatch: dispatch.clone(),
            approvals: approvals.clone(),
        };
        let operator = Operator {
            ledger: ledger.clone(),
            config: config.clone(),
            approvals: approvals.clone(),
            dispatch: dispatch.clone(),
            runs: runs.clone(),
            notices: notices.clone(),
            upstream_tools: upstream_tools.clone(),
        };
        Gateway {
            ledger,
            registry,
            config,
            admission,
            recovery,
            approvals,
            dispatch,
            records,
            operator,
            background,
            running: Default::default(),
            runs,
            policy,
            notices,
            upstream_tools,
        }
    }

    /// The vault credential secrets come from (locked until unlocked).
    pub fn with_vault(self, vault: crate::vault::VaultSlot) -> Gateway {
        // Set once, before the gateway serves: a second vault is a programming error.
        if self.dispatch.vault.set(vault).is_err() {
            tracing::error!("a vault was given twice; the first is kept");
        }
        self
    }

    pub fn vault(&self) -> Option<&crate::vault::VaultSlot> {
        self.dispatch.vault()
    }

    /// What operators do: approve, deny, resolve, authorize or revoke runs, and read status.
    pub fn operator(&self) -> &Operator {
        &self.operator
    }

    /// The record as calls are answered from it (an MCP task's status, deliveries).
    pub fn records(&self) -> &Records {
        &self.records
    }

    /// Records `denied (expired)` for every approval request past its expiry (see
    /// [`Operator`] for decisions); how many.
    pub async fn expire_approvals(&self) -> Result<usize, GatewayError> {
        self.approvals.expire_approvals().await
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }

    /// The runs this process serves (the Sessions log) and the calls log.
    pub fn runs(&self) -> &Arc<Runs> {
        &self.runs
    }

    /// Loads the upstream tools' pins and keeps them current as upstreams list their tools
    /// (each first sight pinned, each change chained as a notice and withheld).
    pub async fn watch_tool_pins(&self) -> Result<(), GatewayError> {
        let pins = self.registry.pins().clone();
        pins.load(&self.ledger).await?;
        upstreams::watch_pins(
            pins,
            self.ledger.clone(),
            self.registry.upstreams().to_vec(),
        );
        Ok(())
    }

    /// Waits (at most `bound`) until every tool listed by an upstream that is up has been
    /// checked against its pin, so a listing right after start-up withholds nothing only for
    /// want of time.
    pub async fn wait_for_pins(&self, bound: std::time::Duration) {
        let deadline = tokio::time::Instant::now() + bound;
        let pins = self.registry.pins();
        let settled = || {
            self.registry.upstreams().iter().all(|exposure| {
                let state = exposure.upstream.state();
                state.up.is_err()
                    || exposure.exposed(&state.tools).iter().all(|name| {
                        state.tools.iter().filter(|t| &t.name == name).all(|t| {
                            !matches!(
                                pins.check(exposure.upstream.name(), t),
                                Err(crate::pins::Withheld::NotChecked)
                            )
                        })
                    })
            })
        };
        while !settled() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Performs (or recovers) one call, untracked: [`Gateway::call`] is the way in. Its steps
    /// are boxed: inline, every branch's state made this future ~29 KB, copied at every move.
    async fn perform(&self, call: ToolCall) -> Result<CallReport, GatewayError> {
        if call.tool == EXECUTION_STATUS {
            return Box::pin(self.execution_status(&call)).await;
        }
        let (entry, accepted, target) = Box::pin(self.admission.admit(&call)).await?;
        Box::pin(self.finish(&entry, accepted, &call, target)).await
    }

    /// Accepts (or matches) a call durably and finishes it in the background; returns once the
    /// execution is recorded. The call's record is then the only way to its result (an MCP
    /// task reads it).
    pub async fn start(self: &Arc<Self>, call: ToolCall) -> Result<ExecutionSummary, GatewayError> {
        use tracing::Instrument;
        let asker = runs::asker(&self.registry, &call);
        let span = call_span(&call, asker.class);
        let admitting = Box::pin(self.admission.admit(&call));
        let (_, accepted, target) = match admitting.instrument(span.clone()).await {
            Ok(admitted) => admitted,
            Err(e) => {
                close_call_span(&span, Err(&e));
                self.runs.record_answer(asker, Err(&e));
                return Err(e);
            }
        };
        let summary = match &accepted {
            AcceptOutcome::Created { execution: s, .. } => s.clone(),
            // The same key with other arguments: an error naming the original, never its task.
            AcceptOutcome::Existing {
                decision: RecoveryDecision::Conflict { original },
                execution,
            } => {
                return Err(GatewayError::Conflict {
                    key: call.operation_key.clone().unwrap_or_default(),
                    original: *original,
                    accepted_at: execution.accepted_at,
                })
            }
            AcceptOutcome::Existing { execution, .. } => execution.clone(),
        };
        let attempt = match &accepted {
            AcceptOutcome::Created { .. } => Attempt::New,
            _ => Attempt::Attached,
        };
        self.runs.record_call(
            asker,
            Some(summary.id),
            attempt.as_str(),
            summary.lifecycle.state.display_name(),
        );
        if summary.lifecycle.state == State::Cancelled {
            return Err(GatewayError::Cancelled);
        }
        let gateway = self.clone();
        let id = summary.id;
        if let Ok(mut running) = self.running.lock() {
            running.insert(id);
        }
        span.record("execution_id", tracing::field::display(summary.id));
        span.record("attempt", attempt.as_str());
        let finishing = span.clone();
        self.background.spawn(async move {
            if let Some(entry) = gateway.registry.get(&call.tool) {
                let answer = gateway
                    .finish(&entry, accepted, &call, target)
                    .instrument(finishing.clone())
                    .await;
                close_call_span(&finishing, answer.as_ref());
                if let Err(e) = &answer {
                    // A task's call: its record is what the client reads.
                    tracing::info!(execution_id = %id, kind = e.kind(), "a task's execution ended in an error; the task reads its record");
                }
            }
            if let Ok(mut running) = gateway.running.lock() {
                running.remove(&id);
            }
        });
        Ok(summary)
    }

    /// Performs (or recovers) one call: the way in for a call answered when it ends
    /// ([`Gateway::start`] for one answered once recorded). It is counted by the tracker, so
    /// [`Gateway::drain`] waits for it, runs in its span, and goes to the calls log. It runs in
    /// the caller's task: a spawned task per call cost ~0.4 ms at concurrency 1 here (measured
    /// with `bench/gateway-load`).
    pub async fn call(&self, call: ToolCall) -> Result<CallReport, GatewayError> {
        use tracing::Instrument;
        let asker = runs::asker(&self.registry, &call);
        let span = call_span(&call, asker.class);
        let answer = self
            .background
            .track_future(self.perform(call))
            .instrument(span.clone())
            .await;
        close_call_span(&span, answer.as_ref());
        self.runs.record_answer(asker, answer.as_ref());
        answer
    }

    /// Waits (at most `within`) for executions finishing in the background.
    pub async fn drain(&self, within: Duration) -> bool {
        self.background.close();
        tokio::time::timeout(within, self.background.wait())
            .await
            .is_ok()
    }

    /// Whether a task's execution is still being run (or recovered) in the background.
    pub fn is_running(&self, id: ExecutionId) -> bool {
        self.running.lock().is_ok_and(|r| r.contains(&id))
    }

    /// Sends a new execution (to `target`, as its `dispatched` event recorded), or recovers a
    /// matched one.
    async fn finish(
        &self,
        entry: &ToolEntry,
        accepted: AcceptOutcome,
        call: &ToolCall,
        target: Value,
    ) -> Result<CallReport, GatewayError> {
        match accepted {
            AcceptOutcome::Created { execution: s, .. }
                if s.lifecycle.state == State::Cancelled =>
            {
                Err(GatewayError::Cancelled)
            }
            AcceptOutcome::Created { execution: s, .. } if s.lifecycle.state == State::Rejected => {
                self.records.stored_report(s.id, Attempt::New).await
            }
            AcceptOutcome::Created { execution: s, .. }
                if s.lifecycle.state == State::AwaitingApproval =>
            {
                self.approvals.hold_for_approval(s.id, call);
                self.notices.notify(Notice::ApprovalRequested(s.id));
                self.records.stored_report(s.id, Attempt::New).await
            }
            AcceptOutcome::Created {
                execution: s,
                budget_left,
            } => {
                let mut report = self
                    .dispatch
                    .send(entry, s, call, Attempt::New, Some(target))
                    .await?;
                report.budget_left = budget_left;
                Ok(report)
            }
            AcceptOutcome::Existing {
                decision,
                execution,
            } => {
                let prior = (execution.id, execution.run_id.clone());
                // Boxed: a first call's future does not carry a retry's size.
                let mut report =
                    Box::pin(self.recovery.recover(entry, decision, execution, call)).await?;
                asked::withhold_from_other_runs(&self.ledger, prior, call, &mut report).await?;
                Ok(report)
            }
        }
    }

    /// Asks an execution to stop: after dispatch this is only recorded (it does not un-send).
    pub async fn request_cancel(&self, id: ExecutionId, actor: &str) -> Result<(), GatewayError> {
        let (mut summary, _) = self.records.recorded(id, actor).await?;
        // Twice at most: a dispatch (or a decision) that lands between the read and the append
        // is read again, so a cancellation that raced a dispatch is still recorded.
        for _ in 0..2 {
            let event = match summary.lifecycle.state {
                // Nothing was sent: the call is withdrawn, and no approval can send it now.
                State::AwaitingApproval | State::Authorized => {
                    self.approvals.take_held(id);
                    NewEvent::new(EventKind::Cancelled)
                        .with_detail(json!({"reason": "cancelled by its caller before it was sent"}))
                }
                State::Dispatched => NewEvent::new(EventKind::CancelRequested).with_detail(json!({"note": "cancellation asked after dispatch: the request had left; the execution runs to its recorded end"})),
                state => {
                    return Err(GatewayError::NotCancellable {
                        execution: id,
                        state: state.display_name(),
                    })
                }
            };
            match self.records.append(id, event).await {
                Err(GatewayError::Ledger(postern_ledger::LedgerError::Transition { .. })) => {
                    summary = self
                        .ledger
                        .read()
                        .summary(id)
                        .await?
                        .ok_or_else(|| GatewayError::UnknownExecution(id.to_string()))?;
                }
                other => return other.map(|_| ()),
            }
        }
        Err(GatewayError::NotCancellable {
            execution: id,
            state: summary.lifecycle.state.display_name(),
        })
    }
}
