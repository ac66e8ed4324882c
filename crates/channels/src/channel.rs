//! The one interface every channel implements, and the one outcome it reports.
//!
//! A [`Channel`] is built once per tool (its templates checked, its TLS profile or upstream
//! link chosen); the pipeline hands it an [`Action`] — the execution id, the validated
//! arguments, the credential it resolved (from the config or the vault) and the call's own
//! secrets — and gets an [`Outcome`]. The pipeline never looks inside a channel: it asks for
//! the record's target, sends, and asks the two read-only questions recovery may ask
//! ([`Question`]), whatever the channel is.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::secret::{Credential, Secret};

/// A boxed, sendable future (channels are used as trait objects).
pub type Pending<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a dispatch came to, as a claim about the target that the ledger records. Never an
/// error type: every way a dispatch can end is one of these.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Provably nothing reached the target (refused before writing, a spawn that failed, an
    /// upstream that is down, a request that could not be built). Retryable.
    NotSent { reason: String },
    /// It may have reached the target and no definitive answer came back.
    Unknown { reason: String },
    /// The target answered; the verdict says what the answer means for the effect.
    Answered(Answer),
}

impl Outcome {
    /// A short stable name (a metrics label): `not_sent`, `unknown`, `applied`, `rejected`.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::NotSent { .. } => "not_sent",
            Outcome::Unknown { .. } => "unknown",
            Outcome::Answered(a) => match a.verdict {
                AnswerVerdict::Applied => "applied",
                AnswerVerdict::Rejected { .. } => "rejected",
                AnswerVerdict::Unknown => "unknown",
            },
        }
    }
}

/// What the target answered, with every secret the channel knows redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct Answer {
    /// The HTTP status, for the HTTP channel; `None` where the channel has no status code.
    pub status: Option<u16>,
    pub verdict: AnswerVerdict,
    /// The body as stored and returned (JSON where the target sent JSON), capped.
    pub body: Vec<u8>,
    /// How many bytes the target sent.
    pub size: u64,
    /// The stored body is not the whole answer.
    pub truncated: bool,
    /// A read's whole answer when it is over the cap: given to the caller, never stored (the
    /// stored body is a note of its size and digest; nothing needs it to recover a read).
    pub whole: Option<Vec<u8>>,
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Answer")
            .field("status", &self.status)
            .field("verdict", &self.verdict)
            .field("body", &String::from_utf8_lossy(&self.body))
            .field("size", &self.size)
            .field("truncated", &self.truncated)
            .finish()
    }
}

/// What the target's answer says about the effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AnswerVerdict {
    /// The effect happened.
    Applied,
    /// The target refused: nothing was applied. `retryable` when trying again later may
    /// succeed (e.g. 429), so such a rejection never blocks a new execution.
    Rejected { retryable: bool },
    /// The answer does not say whether the effect happened (e.g. a 500, an MCP tool error).
    Unknown,
}

/// One dispatch of one execution, as the pipeline hands it to the channel.
#[derive(Clone)]
pub struct Action<'a> {
    /// Sent with every dispatch of the execution (an idempotency key, `_meta`), so a
    /// cooperating target can de-duplicate.
    pub execution_id: &'a str,
    /// The execution's intent fingerprint (hex): an SSH marker records it, so that recovery
    /// reads only a marker of the same intent.
    pub intent: &'a str,
    pub arguments: &'a Map<String, Value>,
    /// The tool's credential as resolved for this dispatch (config or vault).
    pub credential: Option<Credential>,
    /// The call's `secret_fields` values: never returned in what the target answers.
    pub secrets: Vec<Secret>,
    /// Fired by the pipeline when the caller cancels after dispatch: a channel that can pass
    /// the cancellation on (MCP's `notifications/cancelled`) does; the outcome is still
    /// whatever the target answers.
    pub cancel: CancellationToken,
    /// Where the target's progress reports go, if the caller asked for them.
    pub progress: Option<ProgressSink>,
    /// The caller's client, for the questions a target asks it during the call (an upstream
    /// MCP server's sampling, elicitation and roots requests).
    pub asker: Option<ClientAsker>,
    /// The W3C `traceparent` of this dispatch (the gateway's span, or the client's when no
    /// tracer runs): sent as the `traceparent` header over HTTP and in `_meta` over MCP, so
    /// the target's own spans join the agent's trace. Never a secret, never part of the intent.
    pub traceparent: Option<String>,
    /// Where the execution's first `dispatched` event says it went ([`Channel::target`] as
    /// recorded): a re-send and a recovery question go where the record says, not where the
    /// channel would send a new call today (an SSH host's marker directory). `None` when the
    /// pipeline did not look it up for this action.
    pub recorded_target: Option<Value>,
}

impl Action<'_> {
    /// Every form of every secret this action's answer must not carry: the call's secret
    /// arguments and the credential.
    pub fn redaction_needles(&self) -> Vec<Vec<u8>> {
        let mut needles: Vec<Vec<u8>> = self
            .secrets
            .iter()
            .flat_map(|s| crate::secret::secret_forms(s.expose()))
            .collect();
        if let Some(c) = &self.credential {
            needles.extend(c.redaction_needles());
        }
        crate::secret::sorted(needles)
    }
}

/// A progress report from the target, passed on to the caller.
#[derive(Clone, Debug, PartialEq)]
pub struct Progress {
    pub progress: f64,
    pub total: Option<f64>,
    pub message: Option<String>,
}

/// Receives the progress reports of one dispatch.
pub type ProgressSink = Arc<dyn Fn(Progress) + Send + Sync>;

/// The calling client, as a target may question it during a call: MCP's server-to-client
/// requests (`sampling/createMessage`, `elicitation/create`, `roots/list`), passed as the
/// JSON-RPC method and params; the answer is the client's result, or why there is none.
/// Puts one question (method, params) to the client.
pub type AskFn = dyn Fn(String, Value) -> Pending<'static, Result<Value, AskRefused>> + Send + Sync;

#[derive(Clone)]
pub struct ClientAsker {
    /// Names the client (its session): requests in flight from one client can share a question.
    pub client: String,
    pub ask: Arc<AskFn>,
}

impl std::fmt::Debug for ClientAsker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientAsker")
            .field("client", &self.client)
            .finish()
    }
}

/// Why a client question got no answer: a JSON-RPC error code and a message for the target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AskRefused {
    pub code: i32,
    pub message: String,
    /// Postern refused it (the client did not declare what it needs, could not be reached),
    /// not the client. Either way an error the upstream answers after it follows from the
    /// refusal, and the call is recorded rejected, not unknown.
    pub by_gateway: bool,
}

/// A read-only question recovery asks the target about an execution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Question {
    /// Was this execution (its key) applied? (`status_query`, `status_tool`)
    Status,
    /// Does the precondition of a conditional write still hold?
    Precondition,
    /// What does the host's durable marker of this execution say (ssh)? `Yes`: it finished
    /// (the answer is its exit code and output); `NotFound`: the command never started; `No`:
    /// it started and died unfinished, or the marker holds another intent; `NoAnswer`:
    /// unreachable, or still running after a bounded wait.
    Marker,
}

/// What the target said to a [`Question`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reading {
    /// Yes: the execution is known (applied), or the precondition holds.
    Yes(Answer),
    /// The target said it does not know the execution (HTTP 404; a status tool's "not
    /// applied").
    NotFound,
    /// Another definitive no (HTTP 4xx).
    No,
    /// Nothing definitive: not sent, no answer, a 5xx, an error.
    NoAnswer,
}

/// A channel bound to one tool. Implementations keep the crate's promise:
/// [`Outcome::NotSent`] only when nothing can have reached the target.
pub trait Channel: Send + Sync {
    /// Where the action goes, as its `dispatched` event records it (secret arguments shown as
    /// `***` by `secret`), after checking that every request the call may make renders.
    fn target(
        &self,
        arguments: &Map<String, Value>,
        secret: &dyn Fn(&str) -> bool,
    ) -> Result<Value, String>;

    /// Sends the action once.
    fn send<'a>(&'a self, action: Action<'a>) -> Pending<'a, Outcome>;

    /// Asks a read-only question, if the tool's contract has one (`None`: it has not).
    fn ask<'a>(&'a self, question: Question, action: Action<'a>) -> Option<Pending<'a, Reading>>;

    /// Why calls cannot be sent at all right now (an upstream that is down), if so.
    fn unavailable(&self) -> Option<String> {
        None
    }

    /// What the channel must learn from its target before a call's `dispatched` event can
    /// name where it goes (an SSH host's absolute marker directory), learned once; `None` when
    /// nothing is left to learn. The pipeline awaits it before [`Channel::target`].
    /// `credential` gives the tool's credential (only asked for when something is left).
    fn locate<'a>(
        &'a self,
        _credential: &dyn Fn() -> Option<Credential>,
    ) -> Option<Pending<'a, ()>> {
        None
    }
}
