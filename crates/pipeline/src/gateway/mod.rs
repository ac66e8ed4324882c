//! The pipeline: accept → authorize → dispatch (durable first) → complete (durable result) →
//! deliver, and recovery exactly per contract §4. Transport-agnostic: the MCP front (or a test)
//! hands in a [`ToolCall`] and gets a [`CallReport`].

use std::sync::Arc;
use std::time::Duration;

use postern_core::config::Config;
use postern_core::contract::EXECUTION_STATUS;
use postern_core::lifecycle::{State, Verdict};
use postern_core::recovery::RecoveryDecision;
use postern_core::{ActionRecord, Arguments, EventKind, ExecutionId, FingerprintKey};
use postern_ledger::{AcceptOutcome, AcceptRequest, ExecutionSummary, Ledger, NewEvent};
use serde_json::{json, Map, Value};
use tokio_util::sync::CancellationToken;

mod approvals;
mod asked;
mod dispatch;
mod notices;
mod policy;
mod promises;
mod recovery;
mod run_approval;
mod runs;
mod status;
mod upstreams;

pub use crate::clock::now;
pub use crate::decision::{Decided, DecisionError};
pub use approvals::PendingDecision;
pub use notices::{Notice, Notices};
pub use policy::ToolPolicy;
pub use promises::unkept_promises;
pub use runs::Runs;
pub use runs::{call_json, RunView};
pub use upstreams::{UpstreamToolView, UpstreamTools, UpstreamView, VisibleUpstream};

use crate::error::GatewayError;
use crate::registry::{Registry, ToolEntry};
use crate::report::{next_step, Attempt, CallReport};

/// The longest operation key, re-issue key, intent scope or run id accepted (each is stored,
/// and the first three are chained).
const MAX_KEY_BYTES: usize = 256;

/// The run an agent names in `_meta["io.postern/run"]`, as it is kept: `ACTOR/RUN` (a run is
/// its actor's: another actor naming the same id has a run of its own). Its bound and
/// characters are checked here, the one place an agent's run id enters, before anything of it
/// is recorded.
pub fn agent_run(actor: &str, named: &str) -> Result<String, String> {
    match key_fault("run id (io.postern/run)", named) {
        Some(fault) => Err(fault),
        None => Ok(format!("{actor}/{named}")),
    }
}

/// Why a key an agent chose (an operation key, re-issue key, intent scope or run id; `what`
/// names it) cannot be taken, or `None`. Each is stored and shown to operators, so beside the
/// length bound it may hold no control character (a newline could forge a line of the
/// operator's terminal, an ESC hide one) and no invisible formatting (a bidi override).
pub fn key_fault(what: &str, key: &str) -> Option<String> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Some(format!(
            "the {what} must be 1 to {MAX_KEY_BYTES} bytes long"
        ));
    }
    let bad = key
        .chars()
        .find(|&c| postern_core::terminal_text::acts_on_terminal(c))?;
    Some(format!(
        "the {what} holds the character U+{:04X} (a control or invisible formatting character); it is shown to operators, so it may hold only visible characters and spaces",
        bad as u32
    ))
}

/// One `tools/call`, already authenticated. Protocol links (the JSON-RPC id, the MCP session as
/// a run's name) ride along only as evidence for the calls log and the Sessions log: they never
/// decide anything.
#[derive(Clone)]
pub struct ToolCall {
    pub actor: String,
    pub tool: String,
    pub arguments: Map<String, Value>,
    pub operation_key: Option<String>,
    /// A bridge's key for every attempt of one agent request (`io.postern/reissue-key`): a
    /// re-issue finds the execution an earlier attempt reached, whatever the match window.
    /// Unlike an operation key, a new one never asks for a new action.
    pub reissue_key: Option<String>,
    pub intent_scope: Option<String>,
    pub run_id: Option<String>,
    /// The address the caller connected from (behind a trusted proxy, the one it named): kept
    /// in the audit record of a new execution. `None` over stdio.
    pub client_address: Option<String>,
    /// Whom the agent acted for, when it authenticated with an `[[issuer]]`'s access token:
    /// kept in the audit record of a new execution (never the token).
    pub principal: Option<postern_core::config::Principal>,
    /// The JSON-RPC id of the request, as the client sent it (the calls log's evidence).
    pub request_id: Option<String>,
    /// The client's W3C `traceparent` (`_meta.traceparent`): the call's span joins that trace.
    pub trace_parent: Option<String>,
    /// Fires on `notifications/cancelled` or a lost session. Before dispatch it cancels the
    /// call; after dispatch it is only recorded (contract §3 rule 6: it does not un-send).
    pub cancel: Option<Cancellation>,
    /// Where the target's progress reports go (the caller asked with a progress token).
    pub progress: Option<postern_channels::ProgressSink>,
    /// The caller's client, for an upstream's questions during the call (sampling,
    /// elicitation, roots).
    pub asker: Option<postern_channels::ClientAsker>,
}

impl ToolCall {
    /// Whether the caller is already gone (nothing more may be sent on its behalf).
    pub fn is_cancelled(&self) -> bool {
        self.cancel.as_ref().is_some_and(Cancellation::is_cancelled)
    }
}

/// A call's cancellation: fired by whichever of its two signals comes first (the client's
/// `notifications/cancelled`, and a sessionless client going away). Watched where the call
/// waits, instead of by a task of its own per call.
#[derive(Clone, Debug, Default)]
pub struct Cancellation {
    asked: CancellationToken,
    gone: CancellationToken,
}

impl Cancellation {
    pub fn new(asked: CancellationToken, gone: CancellationToken) -> Cancellation {
        Cancellation { asked, gone }
    }

    pub fn is_cancelled(&self) -> bool {
        self.asked.is_cancelled() || self.gone.is_cancelled()
    }

    /// Completes when either signal fires.
    pub async fn cancelled(&self) {
        tokio::select! {
            () = self.asked.cancelled() => {}
            () = self.gone.cancelled() => {}
        }
    }
}

pub struct Gateway {
    pub(crate) ledger: Arc<Ledger>,
    pub(crate) registry: Arc<Registry>,
    key: FingerprintKey,
    config: Arc<Config>,
    /// Executions finishing in the background (MCP tasks): a graceful stop waits for them.
    background: tokio_util::task::TaskTracker,
    /// Task executions whose background run has not returned yet (a task reads `working`
    /// while its recovery is still going, whatever the record says so far).
    running: std::sync::Mutex<std::collections::HashSet<ExecutionId>>,
    /// Arguments of calls waiting for an approval, so an approval sends them at once.
    held: approvals::HeldCalls,
    /// The vault credential secrets come from, if the config names one.
    vault: Option<crate::vault::VaultSlot>,
    /// The runs this process serves, and the calls log.
    runs: Arc<runs::Runs>,
    /// Which tools an actor may call, and which calls wait for a person.
    policy: policy::ToolPolicy,
    /// New approval requests and decisions, for the console and the webhooks.
    notices: notices::Notices,
    /// The upstream servers' tools as they are served.
    upstream_tools: upstreams::UpstreamTools,
}

/// The call's span (`tools/call`), in the client's trace when it sent one.
fn call_span(call: &ToolCall, class: &'static str) -> tracing::Span {
    // Debug level: the text and JSON logs at their default level never build it (measured:
    // the log layer formatting every span's fields cost ~2% of c=64 throughput); the span
    // exporter's filter takes it, and `POSTERN_LOG=debug` shows it around log lines.
    let span = tracing::debug_span!(
        "tools/call",
        tool = %call.tool,
        class,
        actor = %call.actor,
        execution_id = tracing::field::Empty,
        fingerprint = tracing::field::Empty,
        attempt = tracing::field::Empty,
        outcome = tracing::field::Empty,
    );
    crate::telemetry::join_client_trace(&span, call.trace_parent.as_deref());
    span
}

/// Records a call's end on its span (its refusal is logged with the calls log's row).
fn close_call_span(span: &tracing::Span, answer: Result<&CallReport, &GatewayError>) {
    match answer {
        Ok(r) => {
            span.record("execution_id", tracing::field::display(r.execution_id));
            let fingerprint = r.fingerprint.to_string();
            span.record("fingerprint", fingerprint.get(..24).unwrap_or(&fingerprint));
            span.record("attempt", r.attempt.as_str());
            span.record("outcome", r.state.name());
        }
        Err(e) => {
            span.record("outcome", e.kind());
            if let Some(id) = e.execution() {
                span.record("execution_id", tracing::field::display(id));
            }
        }
    }
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
        let policy = policy::ToolPolicy::new(config.clone(), registry.clone());
        let upstream_tools =
            upstreams::UpstreamTools::new(registry.clone(), ledger.clone(), config.actors.clone());
        let notices = notices::Notices::new(
            config.console.public_url.clone(),
            config.gateway.listen.clone(),
        );
        let runs = Arc::new(runs::Runs::new(ledger.clone(), config.clone()));
        Gateway {
            ledger,
            registry,
            key,
            config,
            background: tokio_util::task::TaskTracker::new(),
            running: Default::default(),
            held: Default::default(),
            vault: None,
            runs,
            notices,
            upstream_tools,
            policy,
        }
    }

    /// The vault credential secrets come from (locked until unlocked).
    pub fn with_vault(mut self, vault: crate::vault::VaultSlot) -> Gateway {
        self.vault = Some(vault);
        self
    }

    pub fn vault(&self) -> Option<&crate::vault::VaultSlot> {
        self.vault.as_ref()
    }

    /// Why a tool's call cannot be sent now because of the vault, if it cannot.
    fn vault_refuses(&self, entry: &ToolEntry) -> Option<String> {
        entry.vault_credential.as_ref()?;
        match &self.vault {
            Some(v) if !v.is_locked() => None,
            _ => Some("the vault is locked".to_string()),
        }
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

    /// Performs (or recovers) one call, untracked: [`Gateway::call`] is the way in.
    async fn perform(&self, call: ToolCall) -> Result<CallReport, GatewayError> {
        if call.tool == EXECUTION_STATUS {
            return self.execution_status(&call).await;
        }
        let (entry, accepted, target) = self.admit(&call).await?;
        self.finish(&entry, accepted, &call, target).await
    }

    /// Accepts (or matches) a call durably and finishes it in the background; returns once the
    /// execution is recorded. The call's record is then the only way to its result (an MCP
    /// task reads it).
    pub async fn start(self: &Arc<Self>, call: ToolCall) -> Result<ExecutionSummary, GatewayError> {
        use tracing::Instrument;
        let asker = runs::asker(&self.registry, &call);
        let span = call_span(&call, asker.class);
        let (_, accepted, target) = match self.admit(&call).instrument(span.clone()).await {
            Ok(admitted) => admitted,
            Err(e) => {
                close_call_span(&span, Err(&e));
                self.runs.record_answer(asker, Err(&e));
                return Err(e);
            }
        };
        let summary = match &accepted {
            AcceptOutcome::Created(s) => s.clone(),
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
            AcceptOutcome::Created(_) => Attempt::New,
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

    /// Validates and accepts (or matches) a call, durably.
    async fn admit(
        &self,
        call: &ToolCall,
    ) -> Result<(Arc<ToolEntry>, AcceptOutcome, Value), GatewayError> {
        let entry = self
            .registry
            .get(&call.tool)
            .ok_or_else(|| GatewayError::UnknownTool(call.tool.clone()))?;
        if !self.policy.may_call(&call.actor, &call.tool) {
            return Err(GatewayError::Forbidden {
                actor: call.actor.clone(),
                tool: call.tool.clone(),
            });
        }
        if let Some(why) = entry.withheld() {
            return Err(GatewayError::Withheld {
                tool: call.tool.clone(),
                why,
            });
        }
        // Validate before anything is recorded.
        let arguments_value = Value::Object(call.arguments.clone());
        entry
            .validate(&arguments_value)
            .map_err(|errors| GatewayError::InvalidArguments {
                tool: call.tool.clone(),
                errors,
            })?;
        let invalid = |e: String| GatewayError::InvalidArguments {
            tool: call.tool.clone(),
            errors: vec![e],
        };
        let arguments =
            Arguments::from_value(arguments_value).map_err(|e| invalid(e.to_string()))?;
        // Where the request will go, checked before anything is recorded: an argument that
        // would steer it (`..`, an empty segment) is refused naming the placeholder.
        let target = self
            .target_now(&entry, &call.arguments)
            .await
            .map_err(invalid)?;
        for (what, key) in [
            ("operation key", &call.operation_key),
            ("re-issue key", &call.reissue_key),
            ("intent scope", &call.intent_scope),
        ] {
            if let Some(fault) = key.as_deref().and_then(|k| key_fault(what, k)) {
                return Err(GatewayError::InvalidKey {
                    tool: call.tool.clone(),
                    errors: vec![fault],
                });
            }
        }
        let contract = entry.contract.clone();
        let record = ActionRecord::build(
            &contract,
            &call.actor,
            call.intent_scope.as_deref(),
            &arguments,
            &self.key,
        )
        .map_err(|e| invalid(e.to_string()))?;
        let at = now();
        let then = self.first_events(&entry, call, target.clone(), at).await?;
        let mut request = AcceptRequest::new(record, &self.key, contract, at)
            .map_err(|e| invalid(e.to_string()))?
            .then(then);
        request.operation_key = call.operation_key.clone();
        request.reissue_key = call.reissue_key.clone();
        request.run_id = call.run_id.clone();
        request.client_address = call.client_address.clone();
        request.principal = call.principal.clone();
        // A caller that goes away while its request waits for the writer is recorded
        // `cancelled` instead of dispatched (contract §3 rule 6).
        let withdrawn = call
            .cancel
            .as_ref()
            .map(|_| Arc::new(std::sync::atomic::AtomicBool::new(false)));
        request.withdrawn = withdrawn.clone();
        let accepting = self.ledger.accept(request);
        let accepted = match (&call.cancel, &withdrawn) {
            (Some(cancel), Some(flag)) => {
                tokio::pin!(accepting);
                tokio::select! {
                    outcome = &mut accepting => outcome,
                    () = cancel.cancelled() => {
                        flag.store(true, std::sync::atomic::Ordering::SeqCst);
                        accepting.await
                    }
                }
            }
            _ => accepting.await,
        }
        .map_err(|e| match e.fault() {
            // Before anything was sent: the agent may simply call again later.
            Some(_) => GatewayError::NotRecorded(e),
            None => GatewayError::Ledger(e),
        })?;
        Ok((entry, accepted, target))
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
            AcceptOutcome::Created(s) if s.lifecycle.state == State::Cancelled => {
                Err(GatewayError::Cancelled)
            }
            AcceptOutcome::Created(s) if s.lifecycle.state == State::Rejected => {
                self.stored_report(s.id, Attempt::New).await
            }
            AcceptOutcome::Created(s) if s.lifecycle.state == State::AwaitingApproval => {
                self.hold_for_approval(s.id, call);
                self.notices.notify(Notice::ApprovalRequested(s.id));
                self.stored_report(s.id, Attempt::New).await
            }
            AcceptOutcome::Created(s) => {
                self.send(entry, s, call, Attempt::New, Some(target)).await
            }
            AcceptOutcome::Existing {
                decision,
                execution,
            } => {
                let prior = (execution.id, execution.run_id.clone());
                let mut report = self.recover(entry, decision, execution, call).await?;
                self.withhold_from_other_runs(prior, call, &mut report)
                    .await?;
                Ok(report)
            }
        }
    }

    async fn append(
        &self,
        id: ExecutionId,
        event: NewEvent,
    ) -> Result<ExecutionSummary, GatewayError> {
        Ok(self.ledger.append(id, event, now()).await?)
    }

    fn report(
        &self,
        s: &ExecutionSummary,
        attempt: Attempt,
        target_status: Option<u16>,
        response: Option<Value>,
    ) -> CallReport {
        let is_error = matches!(
            s.lifecycle.state,
            State::Failed
                | State::Rejected
                | State::Completed(Verdict::Rejected)
                | State::Delivered(Verdict::Rejected)
        );
        let entry = self.registry.get(&s.tool);
        let window_ends = entry
            .as_ref()
            .map(|e| s.accepted_at.saturating_add(e.contract.match_window));
        let upstream_result = entry.as_ref().is_some_and(|e| {
            matches!(
                e.contract.channel,
                postern_core::contract::ChannelSpec::Mcp(_)
            )
        });
        // The upstream lists an output schema: its structured content is the tool's own.
        let upstream_structured = entry.is_some_and(|e| e.has_output_schema());
        // An upstream that answered `isError: true` said its call failed, whatever the
        // contract records of the effect: the client is told so as it would be directly.
        let is_error = is_error
            || (upstream_result
                && response
                    .as_ref()
                    .is_some_and(|r| r.get("isError") == Some(&Value::Bool(true))));
        CallReport {
            execution_id: s.id,
            tool: s.tool.clone(),
            attempt,
            state: s.lifecycle.state,
            fingerprint: s.fingerprint,
            accepted_at: s.accepted_at,
            first_dispatched_at: s.first_dispatched_at,
            window_ends,
            target_status,
            next_step: crate::report::upstream_error_step(
                s.lifecycle.state,
                s.id,
                response.as_ref().filter(|_| upstream_result),
            )
            .or_else(|| next_step(s.lifecycle.state, s.id)),
            response,
            upstream_result,
            upstream_structured,
            decision: None,
            is_error,
        }
    }

    /// A report from the stored record (status and answer as recorded).
    async fn stored_report(
        &self,
        id: ExecutionId,
        attempt: Attempt,
    ) -> Result<CallReport, GatewayError> {
        let view = self
            .ledger
            .read()
            .execution(id)
            .await?
            .ok_or_else(|| GatewayError::UnknownExecution(id.to_string()))?;
        let status = view
            .events
            .iter()
            .rev()
            .find_map(|e| e.body.detail.get("target_status").and_then(Value::as_u64))
            .and_then(|s| u16::try_from(s).ok());
        let response = view.result.as_ref().map(|r| response_value(&r.body));
        let mut report = self.report(&view.summary, attempt, status, response);
        report.decision = approvals::decision_of(&view);
        if view.summary.lifecycle.state == State::Authorized && report.decision.is_some() {
            let id = view.summary.id;
            report.next_step = Some(format!("approved; it is being sent. If it still reads authorized (the gateway restarted before sending it), repeat the identical call: that sends it, once. Check with execution_status({id})"));
        }
        // A refusal says what to do in its own event (a locked vault: repeat once unlocked).
        if view.summary.lifecycle.state == State::Rejected {
            report.next_step = view
                .events
                .iter()
                .rev()
                .find(|e| e.body.event == EventKind::Rejected)
                .and_then(|e| e.body.detail.get("next_step"))
                .and_then(Value::as_str)
                .map(str::to_string)
                .or(report.next_step);
        }
        Ok(report)
    }

    /// An actor's execution and its report as recorded now (an MCP task's status and result).
    /// Another actor's execution is indistinguishable from a missing one.
    pub async fn recorded(
        &self,
        id: ExecutionId,
        actor: &str,
    ) -> Result<(ExecutionSummary, CallReport), GatewayError> {
        let summary = self
            .ledger
            .read()
            .summary(id)
            .await?
            .filter(|s| s.actor == actor)
            .ok_or_else(|| GatewayError::UnknownExecution(id.to_string()))?;
        let report = self.stored_report(id, Attempt::New).await?;
        Ok((summary, report))
    }

    /// Asks an execution to stop: after dispatch this is only recorded (it does not un-send).
    pub async fn request_cancel(&self, id: ExecutionId, actor: &str) -> Result<(), GatewayError> {
        let (mut summary, _) = self.recorded(id, actor).await?;
        // Twice at most: a dispatch (or a decision) that lands between the read and the append
        // is read again, so a cancellation that raced a dispatch is still recorded.
        for _ in 0..2 {
            let event = match summary.lifecycle.state {
                // Nothing was sent: the call is withdrawn, and no approval can send it now.
                State::AwaitingApproval | State::Authorized => {
                    self.held.take(id);
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
            match self.append(id, event).await {
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

    /// As [`Gateway::record_delivery`], for answers that repeat an earlier one (a replayed
    /// stream): recorded only for executions whose answer was not yet delivered, so re-reading
    /// a delivered result never grows the chain.
    pub async fn record_first_delivery(&self, ids: &[ExecutionId], delivered: bool) {
        let mut first = Vec::with_capacity(ids.len());
        for id in ids {
            if let Ok(Some(s)) = self.ledger.read().summary(*id).await {
                if matches!(s.lifecycle.state, State::Completed(_)) {
                    first.push(*id);
                }
            }
        }
        self.record_delivery(&first, delivered);
    }

    /// Records that the answer for these executions was (or was not) fully written out. Only a
    /// completed execution has a delivery to record: for any other the ledger refuses the event
    /// (an impossible transition), which is what lets this skip a read first.
    /// Nothing waits for these records: they are queued and ride a later commit.
    pub fn record_delivery(&self, ids: &[ExecutionId], delivered: bool) {
        let kind = if delivered {
            EventKind::Delivered
        } else {
            EventKind::DeliveryFailed
        };
        for id in ids {
            self.ledger.append_later(*id, NewEvent::new(kind), now());
        }
    }
}

/// The target's body as JSON when it is JSON, else as text.
fn response_value(body: &[u8]) -> Value {
    serde_json::from_slice(body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
}
