//! `postern connect URL`: a stdio MCP server for a local agent (a desktop client, an IDE) that
//! bridges to a remote Postern over Streamable HTTP.
//!
//! The bridge decides nothing about actions; it only makes sure a lost answer is recovered
//! rather than invented. Every agent request without an operation key gets a re-issue key of
//! the bridge's (`io.postern/reissue-key`). A `tools/call` whose answer is lost (connection cut,
//! timeout, transport error, session gone) is re-issued as a NEW JSON-RPC request with the same
//! tool, arguments and `_meta`: the gateway finds the execution an earlier attempt reached by
//! that key (or the operation key), whatever the match window, and answers from its record. An
//! answer that says the execution is still in progress is polled the same way. When the bounded
//! recovery time runs out, the agent gets a plain result that says the outcome is not known to
//! the bridge and not to start the call as a new action; never an error it would retry as a new
//! action, never an invented success. Errors the gateway itself returned (conflict, invalid
//! arguments) are passed through unchanged. An annotation states only what the bridge saw.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use postern_core::duration::parse_duration;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorCode,
    ProgressToken, RequestMetaObject, ServerCapabilities, Tool,
};
use rmcp::service::RunningService;
use rmcp::transport::common::client_side_sse::NeverRetry;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransportConfig, StreamableHttpError,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ErrorData, Peer, RoleClient, ServiceError, ServiceExt};
use serde_json::{json, Value};

mod attempt;
mod edge;
mod passthrough;
mod remote;

use attempt::{still_running, Attempted, Waiting};
use passthrough::BridgeClient;
use remote::{remote_from, Remote};

/// The operation key in a request's `_meta` (the gateway's name for it).
pub(crate) const KEY_META: &str = "io.postern/idempotency-key";
/// The run (Sessions log) a request belongs to.
const RUN_META: &str = "io.postern/run";
/// The bridge's key for every attempt of one agent request (when the agent gave no operation
/// key): the gateway finds the execution an earlier attempt reached, whatever the window.
const REISSUE_META: &str = "io.postern/reissue-key";
/// Set by [`edge`] on a `tools/call` whose raw JSON the gateway would refuse.
pub(crate) const REFUSED_META: &str = "io.postern.connect/refused";

#[derive(Args)]
pub struct ConnectArgs {
    /// The remote gateway's MCP endpoint, e.g. https://gateway.example:8750/mcp or
    /// http://127.0.0.1:8750/mcp (without a path, /mcp is used).
    pub url: String,
    /// Refused: anything after the URL (a token pasted there would be echoed by a parse error).
    #[arg(hide = true)]
    pub extra: Vec<String>,
    /// With an https:// URL: a PEM file of the CA(s) that signed the gateway's certificate,
    /// trusted instead of the built-in (webpki) roots.
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<std::path::PathBuf>,
    /// The environment variable that holds the bearer token.
    #[arg(long, value_name = "NAME", default_value = "POSTERN_TOKEN")]
    pub token_env: String,
    /// Refused: a token on the command line is readable by every user of the machine.
    #[arg(long, hide = true)]
    pub token: Option<String>,
    /// Get the token from the gateway's identity provider as this OAuth client instead of
    /// from the environment: client credentials with --client-secret-env, else a sign-in in
    /// the browser (authorization code with PKCE on a loopback redirect). The token is kept
    /// (0600, under $XDG_STATE_HOME/postern/tokens) and refreshed; it is never printed.
    #[arg(long, value_name = "ID")]
    pub client_id: Option<String>,
    /// With --client-id: the environment variable that holds the client's secret (a headless
    /// agent's client credentials).
    #[arg(long, value_name = "NAME", requires = "client_id")]
    pub client_secret_env: Option<String>,
    /// With --client-id: a scope to ask for (repeatable).
    #[arg(long = "scope", value_name = "SCOPE", requires = "client_id")]
    pub scopes: Vec<String>,
    /// How long one attempt of a call waits for its answer before it is re-issued.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration)]
    pub attempt_timeout: Duration,
    /// How long a call whose answer is lost keeps being re-issued before the bridge reports its
    /// outcome as not known. Keep it below the tools' match windows.
    #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = duration)]
    pub recovery_time: Duration,
    /// Log every re-issued call on standard error.
    #[arg(long, short)]
    pub verbose: bool,
}

fn duration(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.to_string())
}

pub fn run(a: &ConnectArgs) -> Result<i32> {
    let remote = remote_from(a)?;
    let timing = Timing {
        attempt: a.attempt_timeout.max(Duration::from_millis(100)),
        recovery: a.recovery_time,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let bridge = Bridge::start(remote, timing, a.verbose).await?;
        let input = edge::spawn(tokio::io::stdin());
        let server = bridge
            .clone()
            .serve((input, tokio::io::stdout()))
            .await
            .context("serving MCP on standard input/output")?;
        let _ = server.waiting().await;
        bridge.close().await;
        Ok(0)
    })
}

#[derive(Clone, Copy)]
struct Timing {
    attempt: Duration,
    recovery: Duration,
}

/// One client session with the remote gateway.
struct Session {
    generation: u64,
    service: RunningService<RoleClient, BridgeClient>,
}

/// How long `tools/list` answers are reused.
const TOOLS_TTL: Duration = Duration::from_secs(60);
/// Pause before the first re-issue; doubled up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const MAX_PAUSE: Duration = Duration::from_secs(2);

#[derive(Clone)]
struct Bridge(Arc<Inner>);

struct Inner {
    remote: Remote,
    timing: Timing,
    verbose: bool,
    /// Held while a session is built, so concurrent calls share one rebuild.
    session: tokio::sync::Mutex<Option<Session>>,
    generations: AtomicU64,
    tools: Mutex<Option<(Instant, Vec<Tool>)>>,
    instructions: Option<String>,
    /// What the gateway declared: the bridge passes the same on.
    capabilities: ServerCapabilities,
    /// The bridge's client side: notifications and questions to the agent.
    client: BridgeClient,
    /// One run in the gateway's Sessions log for this bridge process, whatever sessions it
    /// needs underneath.
    run_id: String,
    /// Numbers the agent's requests: `<run>:<n>` is a request's re-issue key.
    requests: AtomicU64,
}

/// Why an attempt did not produce an answer.
enum Failure {
    /// The gateway answered with a JSON-RPC error: passed through unchanged.
    Gateway(ErrorData),
    /// The remote refused the token: nothing this attempt sent was performed.
    Unauthorized(String),
    /// The answer is lost (or never came); `sent` is false when provably nothing left.
    Lost { reason: String, sent: bool },
}

impl Bridge {
    /// Connects once (retrying transport failures for a short bounded time) so that a wrong
    /// URL or token is reported at start, not at the agent's first call.
    async fn start(remote: Remote, timing: Timing, verbose: bool) -> Result<Bridge> {
        let deadline = Instant::now() + timing.recovery.min(Duration::from_secs(15));
        let mut pause = FIRST_PAUSE;
        let client = BridgeClient::default();
        let service = loop {
            match tokio::time::timeout(timing.attempt, connect(&remote, &client)).await {
                Ok(Ok(s)) => break s,
                Ok(Err(e)) if e.auth_challenge().is_some() => bail!(
                    "{} refused the token (HTTP 401): check the token in the environment",
                    remote.url
                ),
                // Not a passing fault: trying again would only repeat it.
                Ok(Err(e)) if init_chain(&e).contains("invalid peer certificate") => bail!(
                    "{} presented a TLS certificate this bridge does not trust ({}); if a \
                     private CA signed it, name that CA's PEM file with --ca-file",
                    remote.url,
                    init_chain(&e)
                ),
                Ok(Err(e)) if Instant::now() + pause >= deadline => {
                    bail!(
                        "cannot open an MCP session with {}: {}",
                        remote.url,
                        init_chain(&e)
                    )
                }
                Err(_) if Instant::now() + pause >= deadline => bail!(
                    "cannot open an MCP session with {}: no answer within {:?}",
                    remote.url,
                    timing.attempt
                ),
                _ => {}
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_PAUSE);
        };
        let instructions = service.peer_info().and_then(|i| i.instructions.clone());
        let capabilities = service
            .peer_info()
            .map(|i| i.capabilities.clone())
            .unwrap_or_default();
        let run_id = format!("connect:{}", random_hex());
        Ok(Bridge(Arc::new(Inner {
            remote,
            timing,
            verbose,
            session: tokio::sync::Mutex::new(Some(Session {
                generation: 0,
                service,
            })),
            generations: AtomicU64::new(1),
            tools: Mutex::new(None),
            instructions,
            capabilities,
            client,
            run_id,
            requests: AtomicU64::new(1),
        })))
    }

    /// The current session's peer, building a new session if there is none or it is closed.
    async fn peer(&self, budget: Duration) -> Result<(u64, Peer<RoleClient>), Failure> {
        let mut slot = self.0.session.lock().await;
        if let Some(s) = slot.as_ref() {
            if !s.service.is_transport_closed() {
                return Ok((s.generation, s.service.peer().clone()));
            }
        }
        if let Some(old) = slot.take() {
            retire(old);
        }
        let built = tokio::time::timeout(budget, connect(&self.0.remote, &self.0.client)).await;
        let service = match built {
            Ok(Ok(s)) => s,
            Ok(Err(e)) if e.auth_challenge().is_some() => {
                return Err(Failure::Unauthorized(format!(
                    "{} refused the bridge's token (HTTP 401)",
                    self.0.remote.url
                )))
            }
            Ok(Err(e)) => {
                return Err(Failure::Lost {
                    reason: format!("cannot open a session: {}", init_chain(&e)),
                    sent: false,
                })
            }
            Err(_) => {
                return Err(Failure::Lost {
                    reason: "cannot open a session: no answer".into(),
                    sent: false,
                })
            }
        };
        let generation = self.0.generations.fetch_add(1, Ordering::Relaxed);
        if self.0.verbose {
            crate::messages::say(format_args!(
                "postern connect: new session with {}",
                self.0.remote.url
            ));
        }
        let peer = service.peer().clone();
        *slot = Some(Session {
            generation,
            service,
        });
        Ok((generation, peer))
    }

    /// Drops session `generation` if it is still the current one (the next call builds anew).
    async fn discard(&self, generation: u64) {
        let mut slot = self.0.session.lock().await;
        if slot.as_ref().is_some_and(|s| s.generation == generation) {
            if let Some(old) = slot.take() {
                retire(old);
            }
        }
    }

    async fn close(&self) {
        if let Some(s) = self.0.session.lock().await.take() {
            let _ = tokio::time::timeout(Duration::from_secs(3), s.service.cancel()).await;
        }
    }

    async fn tools(&self) -> Result<Vec<Tool>, ErrorData> {
        let changed = self.0.client.tools_changed.swap(false, Ordering::Relaxed);
        if let Some((at, tools)) = self.0.tools.lock().ok().and_then(|t| t.clone()) {
            if at.elapsed() < TOOLS_TTL && !changed {
                return Ok(tools);
            }
        }
        let deadline = Instant::now() + self.0.timing.recovery;
        let mut pause = FIRST_PAUSE;
        let mut last = String::new();
        while Instant::now() < deadline {
            let budget = self.0.timing.attempt.min(deadline - Instant::now());
            match self.peer(budget).await {
                Ok((generation, peer)) => {
                    match tokio::time::timeout(budget, peer.list_all_tools()).await {
                        Ok(Ok(tools)) => {
                            if let Ok(mut t) = self.0.tools.lock() {
                                *t = Some((Instant::now(), tools.clone()));
                            }
                            return Ok(tools);
                        }
                        Ok(Err(ServiceError::McpError(e))) if !synthesized(&e) => return Err(e),
                        Ok(Err(e)) => {
                            last = e.to_string();
                            if self.needs_rebuild(&peer, &e) {
                                self.discard(generation).await;
                            }
                        }
                        Err(_) => last = "no answer".into(),
                    }
                }
                Err(Failure::Unauthorized(m)) => return Err(ErrorData::invalid_request(m, None)),
                Err(Failure::Lost { reason, .. }) => last = reason,
                Err(Failure::Gateway(e)) => return Err(e),
            }
            // A stale list is better than none: tools change rarely.
            if let Some((_, tools)) = self.0.tools.lock().ok().and_then(|t| t.clone()) {
                return Ok(tools);
            }
            tokio::time::sleep(pause.min(deadline.saturating_duration_since(Instant::now()))).await;
            pause = (pause * 2).min(MAX_PAUSE);
        }
        Err(ErrorData::internal_error(
            format!(
                "postern connect: the gateway at {} did not list its tools: {last}",
                self.0.remote.url
            ),
            None,
        ))
    }

    /// One `tools/call` until a definitive answer or the recovery time runs out. An attempt
    /// with no answer in time is not cancelled: it keeps waiting (its progress still reaches
    /// the agent) while re-issues attach to the same execution, and whichever answers first
    /// is the answer. A gateway that says the execution is still in progress extends the
    /// recovery time: the call lasts as long as the gateway says it runs. Only the agent's
    /// own cancellation cancels it.
    async fn call(
        &self,
        params: CallToolRequestParams,
        progress: Option<ProgressToken>,
        cancel: tokio_util::sync::CancellationToken,
    ) -> Result<CallToolResponse, ErrorData> {
        let started = Instant::now();
        let mut deadline = started + self.0.timing.recovery;
        let mut pause = FIRST_PAUSE;
        let mut attempts = 0u32;
        let mut maybe_sent = false;
        let mut last_problem;
        let mut in_progress: Option<CallToolResult> = None;
        // The first attempt that outlived its budget, still waiting for its answer.
        let mut running: Option<Waiting<'_>> = None;
        // What the bridge itself saw of each attempt: the only facts an annotation may state.
        let mut seen = Observed::default();
        let cancelled = || ErrorData::new(ErrorCode(-32800), "cancelled by the client", None);
        // The waiting attempt's answer when it came during a pause.
        let mut came = None;
        loop {
            let budget = self
                .0
                .timing
                .attempt
                .min(deadline.saturating_duration_since(Instant::now()))
                .max(Duration::from_millis(50));
            let next = match came.take() {
                Some(o) => Attempted::Done(o),
                None => {
                    attempts += 1;
                    tokio::select! {
                        () = cancel.cancelled() => return Err(cancelled()),
                        o = still_running(&mut running) => Attempted::Done(o),
                        a = self.attempt(params.clone(), progress.clone(), budget, cancel.clone()) => a,
                    }
                }
            };
            let outcome = match next {
                Attempted::Done(o) => o,
                Attempted::Waiting(answer, failure) => {
                    running.get_or_insert(answer);
                    Err(failure)
                }
            };
            match outcome {
                Ok(CallToolResponse::Complete(result)) if is_in_progress(&result) => {
                    maybe_sent = true;
                    last_problem = "the gateway reports the execution still in progress".into();
                    seen.answered(&result, "the gateway answered that it is still in progress");
                    in_progress = Some(result);
                    deadline = deadline.max(Instant::now() + self.0.timing.recovery);
                }
                Ok(CallToolResponse::Complete(result)) => {
                    seen.answered(&result, "the gateway answered");
                    return Ok(annotate(result, &seen).into());
                }
                Ok(other) => return Ok(other),
                Err(Failure::Gateway(e)) => return Err(e),
                Err(Failure::Unauthorized(m)) if !maybe_sent => {
                    return Err(ErrorData::invalid_request(
                        format!("{m}; nothing was performed"),
                        None,
                    ))
                }
                Err(Failure::Unauthorized(m)) => {
                    seen.lost(&m, false);
                    last_problem = m;
                    break;
                }
                Err(Failure::Lost { reason, sent, .. }) => {
                    seen.lost(&reason, sent);
                    maybe_sent |= sent;
                    last_problem = reason;
                }
            }
            if Instant::now() + pause >= deadline {
                break;
            }
            if self.0.verbose {
                crate::messages::say(format_args!(
                    "postern connect: {} attempt {attempts}: {last_problem}; calling again",
                    params.name
                ));
            }
            tokio::select! {
                () = cancel.cancelled() => return Err(cancelled()),
                o = still_running(&mut running) => came = Some(o),
                () = tokio::time::sleep(pause) => {}
            }
            pause = (pause * 2).min(MAX_PAUSE);
        }
        // Out of time. A real "in progress" answer from the gateway is the best truth there is.
        if let Some(result) = in_progress {
            return Ok(annotate(result, &seen).into());
        }
        Ok(self.out_of_time(&params.name, attempts, started, &last_problem, maybe_sent))
    }

    /// The agent's answer when the recovery time ran out with no answer from the gateway.
    fn out_of_time(
        &self,
        tool: &str,
        attempts: u32,
        started: Instant,
        last_problem: &str,
        maybe_sent: bool,
    ) -> CallToolResponse {
        crate::messages::say(format_args!(
            "postern connect: {tool}: no answer after {attempts} attempts in {:?}: {last_problem}",
            started.elapsed()
        ));
        not_known(
            tool,
            &self.0.remote.url,
            attempts,
            started.elapsed(),
            last_problem,
            maybe_sent,
        )
        .into()
    }

    fn needs_rebuild(&self, peer: &Peer<RoleClient>, e: &ServiceError) -> bool {
        peer.is_transport_closed() || session_gone(e)
    }

    /// The agent's `_meta`, minus what belongs to the agent↔bridge hop, plus the bridge's run.
    fn forwarded_meta(&self, meta: &RequestMetaObject) -> RequestMetaObject {
        let mut out = RequestMetaObject::new();
        for (k, v) in meta.0.iter() {
            if k != "progressToken"
                && !k.starts_with("io.modelcontextprotocol/")
                && k != REFUSED_META
            {
                out.0.insert(k.clone(), v.clone());
            }
        }
        if !out.0.contains_key(RUN_META) {
            out.0
                .insert(RUN_META.into(), Value::String(self.0.run_id.clone()));
        }
        // One key per agent request, the same on every re-issue of it. An agent's own operation
        // key already does this (and more), so it is left alone.
        if !out.0.contains_key(KEY_META) && !out.0.contains_key(REISSUE_META) {
            let n = self.0.requests.fetch_add(1, Ordering::Relaxed);
            out.0.insert(
                REISSUE_META.into(),
                Value::String(format!("{}:{n}", self.0.run_id)),
            );
        }
        out
    }
}

/// Opens one client session with the gateway. Resumption of a broken response stream is
/// bounded: one immediate `GET` with `Last-Event-ID` (rmcp's default policy retries forever,
/// waiting the server's 3 s `retry:` each time); after that the call is re-issued instead.
async fn connect(
    remote: &Remote,
    client: &BridgeClient,
) -> Result<RunningService<RoleClient, BridgeClient>, rmcp::service::ClientInitializeError> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(remote.url.clone())
        .auth_header(remote.bearer().await)
        .reinit_on_expired_session(true);
    config.retry_config = Arc::new(NeverRetry::default());
    let transport = StreamableHttpClientTransport::with_client(remote.http.clone(), config);
    let transport =
        postern_channels::mcp::CountedProgress::new(transport, client.count_progress_read());
    client.clone().serve(transport).await
}

/// Closes a session in the background (its `DELETE` must not hold up the caller).
fn retire(old: Session) {
    tokio::spawn(async move {
        let _ = tokio::time::timeout(Duration::from_secs(5), old.service.cancel()).await;
    });
}

fn classify(e: &ServiceError) -> Failure {
    match e {
        // The gateway refused before accepting (a session closed under the call): re-issue.
        ServiceError::McpError(err) if err.code == ErrorCode(-32800) => Failure::Lost {
            reason: format!("cancelled by the gateway: {}", err.message),
            sent: true,
        },
        ServiceError::McpError(err) if !synthesized(err) => Failure::Gateway(err.clone()),
        ServiceError::TransportSend(_) if e.auth_challenge().is_some() => {
            Failure::Unauthorized("the remote refused the bridge's token (HTTP 401)".to_string())
        }
        ServiceError::TransportSend(t) => Failure::Lost {
            reason: chain(t.error.as_ref()),
            sent: !connect_refused(t.error.as_ref()),
        },
        other => Failure::Lost {
            reason: other.to_string(),
            sent: true,
        },
    }
}

/// An error rmcp's client made up for a response it did not get (not the gateway's).
fn synthesized(e: &ErrorData) -> bool {
    e.message == "streamable HTTP session was re-initialized before the response arrived"
}

type HttpError = StreamableHttpError<reqwest::Error>;

/// The remote said the session is gone (404) and rmcp could not re-initialize it in place.
fn session_gone(e: &ServiceError) -> bool {
    // A response stream that closed early (`TransportClosed`) costs that one call only; the
    // session stays, and other calls in flight on it are left alone.
    let ServiceError::TransportSend(t) = e else {
        return false;
    };
    matches!(
        t.error.downcast_ref::<HttpError>(),
        Some(
            StreamableHttpError::SessionExpired
                | StreamableHttpError::ReinitializationFailed(_)
                | StreamableHttpError::SessionRecoveryTimeout
                | StreamableHttpError::TransportChannelClosed
        )
    )
}

fn init_chain(e: &rmcp::service::ClientInitializeError) -> String {
    match e {
        rmcp::service::ClientInitializeError::TransportError { error, context } => {
            format!("{context}: {}", chain(error.error.as_ref()))
        }
        other => chain(other),
    }
}

/// An error and its causes, `a: b: c`.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = String::new();
    let mut source = Some(e);
    while let Some(cur) = source {
        let text = cur.to_string();
        if !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
        // rmcp's `Client` variant does not name the HTTP client's error as its source.
        source = match cur.downcast_ref::<HttpError>() {
            Some(StreamableHttpError::Client(r)) => Some(r),
            _ => cur.source(),
        };
    }
    out
}

/// The connection was refused: provably nothing of this attempt reached the gateway.
fn connect_refused(e: &(dyn std::error::Error + 'static)) -> bool {
    postern_channels::mcp::not_taken(e)
}

/// The gateway's execution record in a result: always in `_meta`, and in `structuredContent`
/// unless the tool's upstream gives structured content of its own.
fn execution(result: &CallToolResult) -> Option<&serde_json::Map<String, Value>> {
    result
        .meta
        .as_ref()
        .and_then(|m| m.0.get("io.postern/execution"))
        .or_else(|| result.structured_content.as_ref()?.get("execution"))?
        .as_object()
}

/// The gateway's answer says the execution has not reached an end yet.
fn is_in_progress(result: &CallToolResult) -> bool {
    execution(result)
        .and_then(|e| e.get("state"))
        .and_then(Value::as_str)
        .is_some_and(|s| matches!(s, "accepted" | "authorized" | "dispatched"))
}

/// What the bridge observed of one call's attempts, in order.
#[derive(Default)]
struct Observed {
    /// One line per attempt: what came back, or why nothing did.
    attempts: Vec<String>,
    /// Execution ids the gateway named in its answers, in order, without repeats.
    executions: Vec<String>,
}

impl Observed {
    fn lost(&mut self, reason: &str, sent: bool) {
        let left = if sent {
            "the request had left the bridge"
        } else {
            "the request provably did not reach the gateway"
        };
        let n = self.attempts.len() + 1;
        self.attempts
            .push(format!("attempt {n}: no answer ({reason}; {left})"));
    }

    fn answered(&mut self, result: &CallToolResult, what: &str) {
        let field = |name: &str| {
            execution(result)
                .and_then(|e| e.get(name))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let n = self.attempts.len() + 1;
        let line = match (field("execution_id"), field("attempt")) {
            (Some(id), attempt) => {
                if !self.executions.contains(&id) {
                    self.executions.push(id.clone());
                }
                let how = attempt.map_or(String::new(), |a| format!(", its `attempt` field: {a}"));
                format!("attempt {n}: {what}, naming execution {id}{how}")
            }
            (None, _) => format!("attempt {n}: {what}, naming no execution"),
        };
        self.attempts.push(line);
    }
}

/// When the answer took more than one attempt, says what the bridge saw and nothing more: how
/// many times it sent the call, what happened to each attempt, which execution ids the gateway
/// named. What the gateway or the target did with an attempt whose answer was lost is not
/// something the bridge saw, so it is not said.
fn annotate(mut result: CallToolResult, seen: &Observed) -> CallToolResult {
    if seen.attempts.len() <= 1 {
        return result;
    }
    let note = format!(
        "postern connect sent this call {} times (each re-issue with the same arguments and \
         re-issue key): {}.",
        seen.attempts.len(),
        seen.attempts.join("; ")
    );
    result.content.push(ContentBlock::text(note.clone()));
    if let Some(Value::Object(s)) = result.structured_content.as_mut() {
        s.insert(
            "bridge".into(),
            json!({
                "attempts": seen.attempts.len(),
                "reissued": true,
                "observed": seen.attempts,
                "executions_named": seen.executions,
                "note": note,
            }),
        );
    }
    result
}

/// The answer after the recovery time ran out with no word from the gateway.
fn not_known(
    tool: &str,
    url: &str,
    attempts: u32,
    waited: Duration,
    last_problem: &str,
    maybe_sent: bool,
) -> CallToolResult {
    let secs = waited.as_secs();
    if !maybe_sent {
        let text = format!(
            "{tool}: not performed: the gateway at {url} could not be reached ({attempts} \
             attempts in {secs}s; last problem: {last_problem}). Nothing was sent; it is safe to \
             call again."
        );
        let mut r = CallToolResult::error(vec![ContentBlock::text(text.clone())]);
        r.structured_content = Some(json!({
            "execution": {"execution_id": null, "tool": tool, "state": "not_sent", "next_step": text},
            "bridge": {"attempts": attempts, "waited_ms": waited.as_millis() as u64, "last_problem": last_problem},
        }));
        return r;
    }
    let text = format!(
        "{tool}: outcome not known to postern connect: the gateway at {url} gave no answer in \
         {secs}s ({attempts} attempts; last problem: {last_problem}). The call may or may not have \
         been performed. Do not start it as a new action: repeat this identical call (same tool, \
         same arguments, same idempotency key) and the gateway answers from its record if it \
         matches the earlier one (by the idempotency key, or by the arguments within the tool's \
         match window)."
    );
    let mut r = CallToolResult::success(vec![ContentBlock::text(text.clone())]);
    r.structured_content = Some(json!({
        "execution": {"execution_id": null, "tool": tool, "state": "unknown_to_bridge", "next_step": text},
        "bridge": {"attempts": attempts, "waited_ms": waited.as_millis() as u64, "last_problem": last_problem},
    }));
    r
}

fn random_hex() -> String {
    let mut b = [0u8; 8];
    let _ = getrandom::fill(&mut b);
    hex::encode(b)
}
