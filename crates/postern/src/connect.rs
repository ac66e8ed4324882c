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

use anyhow::{Context, Result};
use clap::Args;
use postern_core::duration::parse_duration;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ErrorCode, ProgressToken,
    RequestMetaObject, ServerCapabilities, Tool,
};
use rmcp::{ErrorData, Peer, RoleClient, ServiceError, ServiceExt};
use serde_json::Value;

mod answers;
mod attempt;
mod edge;
mod failure;
mod passthrough;
mod remote;
mod session;

use answers::{annotate, is_in_progress, not_known, Observed};
use attempt::{still_running, Attempted, Waiting};
use failure::{session_gone, synthesized, Failure};
use passthrough::BridgeClient;
use remote::{remote_from, Remote};
use session::Session;

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

impl Bridge {
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
