//! One `tools/call` as the pipeline takes it (already authenticated), its cancellation, and
//! the checks on the keys an agent chooses.

use postern_core::terminal_text::acts_on_terminal;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

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
    let bad = key.chars().find(|&c| acts_on_terminal(c))?;
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
