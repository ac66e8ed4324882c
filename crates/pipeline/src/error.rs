//! Why a call was refused. Every variant is refused *before* anything is recorded, except
//! `Conflict` (which changes nothing) and `Ledger`.

use postern_core::{ExecutionId, Timestamp};

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("unknown tool {0:?}")]
    UnknownTool(String),
    #[error("actor {actor:?} may not call tool {tool:?}")]
    Forbidden { actor: String, tool: String },
    /// The tool's arguments do not fit its input schema or its target (the model can correct
    /// them: the front answers with an error result, not a protocol error).
    #[error("invalid arguments for {tool}: {}", errors.join("; "))]
    InvalidArguments { tool: String, errors: Vec<String> },
    /// A key or scope of the request's metadata (not the tool's arguments) is unusable.
    #[error("invalid arguments for {tool}: {}", errors.join("; "))]
    InvalidKey { tool: String, errors: Vec<String> },
    #[error("operation key {key:?} was already used for a different request (execution {original}, accepted at {accepted_at}); nothing was changed. Use a new key for a new action, or repeat the original arguments to get its result")]
    Conflict {
        key: String,
        original: ExecutionId,
        accepted_at: Timestamp,
    },
    #[error("cancelled: this call sent nothing (an earlier dispatch of the same execution, if any, keeps its recorded outcome)")]
    Cancelled,
    #[error("execution {execution} is {state}: there is nothing left to cancel")]
    NotCancellable {
        execution: ExecutionId,
        state: &'static str,
    },
    #[error("unknown execution {0}")]
    UnknownExecution(String),
    #[error("ledger: {0}")]
    Ledger(#[from] postern_ledger::LedgerError),
    #[error("the call could not be recorded, so nothing was sent ({0}); call again later")]
    NotRecorded(postern_ledger::LedgerError),
    #[error("the configuration asks for what this build does not do: {}", .0.join("; "))]
    Unenforced(Vec<String>),
    #[error("actor {actor:?} is authorized per run (session_approval = \"required\"), and this call names no run of its own: call within an MCP session, or send _meta[\"io.postern/run\"]; nothing was recorded or sent")]
    NoRun { actor: String },
    #[error("run {run} was revoked by {by} at {at}: nothing was recorded or sent; a new run (a new MCP session) must be authorized again")]
    RunRevoked {
        run: String,
        by: String,
        at: postern_core::Timestamp,
    },
    #[error("tool {tool:?} is withheld: {why}; nothing was recorded or sent")]
    Withheld { tool: String, why: String },
    /// An operator's decision that was not recorded (nothing changed).
    #[error("{0}")]
    Decision(Box<crate::decision::DecisionError>),
    #[error("{0}")]
    Internal(String),
}

impl From<crate::decision::DecisionError> for GatewayError {
    fn from(e: crate::decision::DecisionError) -> GatewayError {
        GatewayError::Decision(Box::new(e))
    }
}

impl GatewayError {
    /// A short, stable name for the kind of refusal (a metrics label, the calls log): never
    /// the arguments or anything else the caller sent.
    pub fn kind(&self) -> &'static str {
        match self {
            GatewayError::UnknownTool(_) => "unknown_tool",
            GatewayError::Forbidden { .. } => "forbidden",
            GatewayError::InvalidArguments { .. } | GatewayError::InvalidKey { .. } => {
                "invalid_arguments"
            }
            GatewayError::Conflict { .. } => "key_conflict",
            GatewayError::Cancelled => "cancelled",
            GatewayError::NotCancellable { .. } => "not_cancellable",
            GatewayError::UnknownExecution(_) => "unknown_execution",
            GatewayError::Ledger(_) => "ledger",
            GatewayError::NotRecorded(_) => "not_recorded",
            GatewayError::Unenforced(_) => "unenforced",
            GatewayError::NoRun { .. } => "no_run",
            GatewayError::RunRevoked { .. } => "run_revoked",
            GatewayError::Withheld { .. } => "withheld",
            GatewayError::Decision(_) => "decision",
            GatewayError::Internal(_) => "internal",
        }
    }

    /// The execution a refusal names, if any (a key conflict names the original).
    pub fn execution(&self) -> Option<ExecutionId> {
        match self {
            GatewayError::Conflict { original, .. } => Some(*original),
            GatewayError::NotCancellable { execution, .. } => Some(*execution),
            _ => None,
        }
    }
}
