//! The names of states and events, as stored and shown (verdict included or not), the list
//! of every one of them, and reading a name back.

use std::fmt;

use super::{EventKind, Resolution, State, Verdict};
use super::{EventKind as E, State as S};

impl State {
    pub const ALL: [State; 16] = [
        S::Accepted,
        S::AwaitingApproval,
        S::Authorized,
        S::Denied,
        S::Rejected,
        S::Cancelled,
        S::Dispatched,
        S::Failed,
        S::OutcomeUnknown,
        S::NeedsReview,
        S::Completed(Verdict::Applied),
        S::Completed(Verdict::Rejected),
        S::Delivered(Verdict::Applied),
        S::Delivered(Verdict::Rejected),
        S::Resolved(Resolution::Applied),
        S::Resolved(Resolution::NotApplied),
    ];

    /// The stored name (also used in the ledger's `state` column).
    pub fn as_str(self) -> &'static str {
        match self {
            S::Accepted => "accepted",
            S::AwaitingApproval => "awaiting_approval",
            S::Authorized => "authorized",
            S::Denied => "denied",
            S::Rejected => "rejected",
            S::Cancelled => "cancelled",
            S::Dispatched => "dispatched",
            S::Failed => "failed",
            S::OutcomeUnknown => "outcome_unknown",
            S::NeedsReview => "needs_review",
            S::Completed(_) => "completed",
            S::Delivered(_) => "delivered",
            S::Resolved(_) => "resolved",
        }
    }

    /// The state as shown to agents and operators. A completed execution whose answer never
    /// reached the agent is `completed_result_not_delivered`: the action happened, only the
    /// answer was lost (calling it a failure would be a lie).
    pub fn display_name(self) -> &'static str {
        match self {
            S::Completed(_) => "completed_result_not_delivered",
            S::Delivered(_) => "completed",
            other => other.as_str(),
        }
    }
}

impl State {
    /// The full name as stored and shown, verdict included (`completed(applied)`).
    pub fn name(self) -> &'static str {
        match self {
            S::Completed(Verdict::Applied) => "completed(applied)",
            S::Completed(Verdict::Rejected) => "completed(rejected)",
            S::Delivered(Verdict::Applied) => "delivered(applied)",
            S::Delivered(Verdict::Rejected) => "delivered(rejected)",
            S::Resolved(Resolution::Applied) => "resolved(applied)",
            S::Resolved(Resolution::NotApplied) => "resolved(not_applied)",
            other => other.as_str(),
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl EventKind {
    pub const ALL: [EventKind; 18] = [
        E::Accepted,
        E::ApprovalRequested,
        E::Authorized,
        E::Denied,
        E::Rejected,
        E::Cancelled,
        E::CancelRequested,
        E::Dispatched,
        E::Completed(Verdict::Applied),
        E::Completed(Verdict::Rejected),
        E::Failed,
        E::OutcomeUnknown,
        E::ReviewRequired,
        E::Resolved(Resolution::Applied),
        E::Resolved(Resolution::NotApplied),
        E::Delivered,
        E::DeliveryFailed,
        E::Notice,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            E::Accepted => "accepted",
            E::ApprovalRequested => "approval_requested",
            E::Authorized => "authorized",
            E::Denied => "denied",
            E::Rejected => "rejected",
            E::Cancelled => "cancelled",
            E::CancelRequested => "cancel_requested",
            E::Dispatched => "dispatched",
            E::Completed(_) => "completed",
            E::Failed => "failed",
            E::OutcomeUnknown => "outcome_unknown",
            E::ReviewRequired => "review_required",
            E::Resolved(_) => "resolved",
            E::Delivered => "delivered",
            E::DeliveryFailed => "delivery_failed",
            E::Notice => "notice",
        }
    }
}

impl EventKind {
    /// The full name as stored and shown, verdict included (`completed(applied)`).
    pub fn name(self) -> &'static str {
        match self {
            E::Completed(Verdict::Applied) => "completed(applied)",
            E::Completed(Verdict::Rejected) => "completed(rejected)",
            E::Resolved(Resolution::Applied) => "resolved(applied)",
            E::Resolved(Resolution::NotApplied) => "resolved(not_applied)",
            other => other.as_str(),
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An event name that is not one of the lifecycle's (as printed by `Display`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown lifecycle event {0:?}")]
pub struct UnknownEvent(pub String);

/// Finds the item whose name is `s` (names are static: parsing allocates nothing).
fn by_name<T: Copy>(
    all: &[T],
    name: impl Fn(T) -> &'static str,
    s: &str,
) -> Result<T, UnknownEvent> {
    all.iter()
        .copied()
        .find(|x| name(*x) == s)
        .ok_or_else(|| UnknownEvent(s.chars().take(64).collect()))
}

impl std::str::FromStr for EventKind {
    type Err = UnknownEvent;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        by_name(&EventKind::ALL, EventKind::name, s)
    }
}

impl std::str::FromStr for State {
    type Err = UnknownEvent;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        by_name(&State::ALL, State::name, s)
    }
}
