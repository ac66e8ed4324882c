//! An operator's decision as recorded ([`Decided`]), and why one was not ([`DecisionError`]).

use postern_core::{ExecutionId, Timestamp};
use serde::Serialize;

/// Why an operator's decision was not recorded. Nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum DecisionError {
    #[error("no execution {0}")]
    Unknown(String),
    #[error("execution {id} is {state}, not awaiting approval{}", decided.as_ref().map(|d| format!(": already decided {d}")).unwrap_or_default())]
    NotAwaiting {
        id: ExecutionId,
        state: &'static str,
        decided: Option<Decided>,
    },
    #[error("the approval names fingerprint {given}, but execution {id} has {actual}: these are not the arguments shown for approval; nothing was approved")]
    FingerprintMismatch {
        id: ExecutionId,
        given: String,
        actual: String,
    },
    #[error("the approval request of {id} expired at {at}: it is recorded denied (expired), which an identical retry is told; a new action is a call after the tool's match window, or one the host sends with a new idempotency key")]
    Expired { id: ExecutionId, at: Timestamp },
    #[error("execution {id} waits for its run {run} to be authorized first: postern sessions authorize {run}")]
    RunNotAuthorized { id: ExecutionId, run: String },
    #[error("no run {0} in the Sessions log")]
    UnknownRun(String),
    #[error("run {run} is already {what}{}", if by.is_empty() { String::new() } else { format!(" by {by} at {at}") })]
    RunDecided {
        run: String,
        what: &'static str,
        by: String,
        at: Timestamp,
    },
    #[error("execution {id} is {state}, not needs_review{}", decided.as_ref().map(|d| format!(": already resolved {d}")).unwrap_or_default())]
    NotUnderReview {
        id: ExecutionId,
        state: &'static str,
        decided: Option<Decided>,
    },
}

impl DecisionError {
    /// Whether a decision came too late because the request expired: this attempt found it
    /// due, or the expiry sweep had already recorded it `denied` by nobody (the only denial
    /// without an operator). Both are 410 Gone, never 409, on `/ops` and the console.
    pub fn expired(&self) -> bool {
        match self {
            DecisionError::Expired { .. } => true,
            DecisionError::NotAwaiting {
                decided: Some(d), ..
            } => d.decision == "denied" && d.by.is_none(),
            _ => false,
        }
    }
}

/// A recorded human decision: who, when, what and why.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Decided {
    /// `approved`, `denied`, `resolved_applied`, `resolved_not_applied`.
    pub decision: String,
    /// The operator; `None` for an approval request that expired.
    pub by: Option<String>,
    pub at: String,
    pub reason: Option<String>,
}

impl std::fmt::Display for Decided {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "({}) by {} at {}",
            self.decision,
            self.by.as_deref().unwrap_or("nobody (expired)"),
            self.at
        )?;
        if let Some(r) = &self.reason {
            write!(f, ": {r}")?;
        }
        Ok(())
    }
}
