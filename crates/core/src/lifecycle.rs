//! The execution lifecycle (contract §3): one table of states and allowed transitions.
//!
//! The ledger refuses to write, and the offline audit verifier reports, any event that is not a
//! row of [`TRANSITIONS`] (or whose row's [`Requires`] the execution's history does not meet).
//! Both fold events through [`Lifecycle`]; there is no second copy of these rules.
//!
//! `failed` means *no request of this execution ever left*. A state alone cannot say that (a
//! re-dispatched execution is `dispatched` again), so the `dispatched --failed-->` row requires
//! that this dispatch is the execution's only one: after an earlier dispatch may have reached
//! the target, "this attempt sent nothing" is not "nothing was applied", and the execution can
//! only stay `outcome_unknown` or settle as completed, reviewed or resolved.

use serde::{Deserialize, Serialize};

pub use names::UnknownEvent;

mod names;

/// What the target said about a dispatched request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The effect happened.
    Applied,
    /// The target answered that nothing was applied (e.g. a 422).
    Rejected,
}

/// A human's answer to an execution under review.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Resolution {
    Applied,
    NotApplied,
}

/// The durable state of an execution, derived from its events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state", content = "verdict")]
pub enum State {
    Accepted,
    AwaitingApproval,
    Authorized,
    Denied,
    /// Refused before anything was sent (invalid input, vault locked, policy).
    Rejected,
    Cancelled,
    /// Durable before the first byte leaves; the idempotency key is fixed from here on.
    Dispatched,
    /// Provably nothing reached the target (connection refused, DNS, TLS).
    Failed,
    OutcomeUnknown,
    NeedsReview,
    /// The target's answer is durable; the agent has not (yet) been answered.
    Completed(Verdict),
    /// The answer was fully written to the agent at least once.
    Delivered(Verdict),
    Resolved(Resolution),
}

/// What happened to an execution: one row of the append-only event log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "event", content = "verdict")]
pub enum EventKind {
    Accepted,
    ApprovalRequested,
    Authorized,
    Denied,
    Rejected,
    Cancelled,
    /// A cancellation that arrived after dispatch: recorded, but it does not un-send.
    CancelRequested,
    Dispatched,
    Completed(Verdict),
    Failed,
    OutcomeUnknown,
    ReviewRequired,
    Resolved(Resolution),
    Delivered,
    DeliveryFailed,
    /// A gateway-level fact chained into the audit log outside any execution's lifecycle (an
    /// upstream tool pinned, changed, accepted): recorded under an id of its own, as event 1,
    /// and no state allows it as a transition.
    Notice,
}

use EventKind as E;
use State as S;

/// A fact of the execution's history that a transition needs beyond its current state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Requires {
    /// The state is enough.
    Nothing,
    /// The execution was dispatched exactly once: no earlier request of it can have left.
    OnlyDispatch,
}

/// Every allowed transition: (state before, or `None` for a new execution; event; state after;
/// what the history must also show).
pub const TRANSITIONS: &[(Option<State>, EventKind, State, Requires)] = &[
    (None, E::Accepted, S::Accepted, Requires::Nothing),
    (
        Some(S::Accepted),
        E::ApprovalRequested,
        S::AwaitingApproval,
        Requires::Nothing,
    ),
    (
        Some(S::Accepted),
        E::Authorized,
        S::Authorized,
        Requires::Nothing,
    ),
    (
        Some(S::Accepted),
        E::Rejected,
        S::Rejected,
        Requires::Nothing,
    ),
    (
        Some(S::Accepted),
        E::Cancelled,
        S::Cancelled,
        Requires::Nothing,
    ),
    (
        Some(S::AwaitingApproval),
        E::Authorized,
        S::Authorized,
        Requires::Nothing,
    ),
    (
        Some(S::AwaitingApproval),
        E::Denied,
        S::Denied,
        Requires::Nothing,
    ),
    (
        Some(S::AwaitingApproval),
        E::Rejected,
        S::Rejected,
        Requires::Nothing,
    ),
    (
        Some(S::AwaitingApproval),
        E::Cancelled,
        S::Cancelled,
        Requires::Nothing,
    ),
    (
        Some(S::Authorized),
        E::Dispatched,
        S::Dispatched,
        Requires::Nothing,
    ),
    (
        Some(S::Authorized),
        E::Rejected,
        S::Rejected,
        Requires::Nothing,
    ),
    (
        Some(S::Authorized),
        E::Cancelled,
        S::Cancelled,
        Requires::Nothing,
    ),
    (
        Some(S::Dispatched),
        E::CancelRequested,
        S::Dispatched,
        Requires::Nothing,
    ),
    (
        Some(S::Dispatched),
        E::Completed(Verdict::Applied),
        S::Completed(Verdict::Applied),
        Requires::Nothing,
    ),
    (
        Some(S::Dispatched),
        E::Completed(Verdict::Rejected),
        S::Completed(Verdict::Rejected),
        Requires::Nothing,
    ),
    (
        Some(S::Dispatched),
        E::Failed,
        S::Failed,
        Requires::OnlyDispatch,
    ),
    (
        Some(S::Dispatched),
        E::OutcomeUnknown,
        S::OutcomeUnknown,
        Requires::Nothing,
    ),
    (
        Some(S::OutcomeUnknown),
        E::CancelRequested,
        S::OutcomeUnknown,
        Requires::Nothing,
    ),
    // Re-dispatch of the SAME execution (same idempotency key) or a probe's answer.
    (
        Some(S::OutcomeUnknown),
        E::Dispatched,
        S::Dispatched,
        Requires::Nothing,
    ),
    (
        Some(S::OutcomeUnknown),
        E::Completed(Verdict::Applied),
        S::Completed(Verdict::Applied),
        Requires::Nothing,
    ),
    (
        Some(S::OutcomeUnknown),
        E::Completed(Verdict::Rejected),
        S::Completed(Verdict::Rejected),
        Requires::Nothing,
    ),
    (
        Some(S::OutcomeUnknown),
        E::ReviewRequired,
        S::NeedsReview,
        Requires::Nothing,
    ),
    (
        Some(S::NeedsReview),
        E::Resolved(Resolution::Applied),
        S::Resolved(Resolution::Applied),
        Requires::Nothing,
    ),
    (
        Some(S::NeedsReview),
        E::Resolved(Resolution::NotApplied),
        S::Resolved(Resolution::NotApplied),
        Requires::Nothing,
    ),
    (
        Some(S::Completed(Verdict::Applied)),
        E::Delivered,
        S::Delivered(Verdict::Applied),
        Requires::Nothing,
    ),
    (
        Some(S::Completed(Verdict::Rejected)),
        E::Delivered,
        S::Delivered(Verdict::Rejected),
        Requires::Nothing,
    ),
    (
        Some(S::Completed(Verdict::Applied)),
        E::DeliveryFailed,
        S::Completed(Verdict::Applied),
        Requires::Nothing,
    ),
    (
        Some(S::Completed(Verdict::Rejected)),
        E::DeliveryFailed,
        S::Completed(Verdict::Rejected),
        Requires::Nothing,
    ),
    // A recovered call answers again from the record; each copy's delivery is recorded.
    (
        Some(S::Delivered(Verdict::Applied)),
        E::Delivered,
        S::Delivered(Verdict::Applied),
        Requires::Nothing,
    ),
    (
        Some(S::Delivered(Verdict::Rejected)),
        E::Delivered,
        S::Delivered(Verdict::Rejected),
        Requires::Nothing,
    ),
    (
        Some(S::Delivered(Verdict::Applied)),
        E::DeliveryFailed,
        S::Delivered(Verdict::Applied),
        Requires::Nothing,
    ),
    (
        Some(S::Delivered(Verdict::Rejected)),
        E::DeliveryFailed,
        S::Delivered(Verdict::Rejected),
        Requires::Nothing,
    ),
];

/// An event that the lifecycle does not allow in the current state (or history).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("impossible transition: {event} in state {}{}", from.map_or("(new)".to_string(), |s| s.to_string()), match unmet {
    Some(Requires::OnlyDispatch) => " after an earlier dispatch (a request of this execution may have reached the target, so it cannot be `failed`; it stays unknown until it is settled)",
    _ => "",
})]
pub struct TransitionError {
    pub from: Option<State>,
    pub event: EventKind,
    /// The table has the row, but the history does not meet what it requires.
    pub unmet: Option<Requires>,
}

/// The row for `event` in state `from`, if the table has one.
pub fn row(from: Option<State>, event: EventKind) -> Option<(State, Requires)> {
    TRANSITIONS
        .iter()
        .find(|(f, e, _, _)| *f == from && *e == event)
        .map(|(_, _, to, requires)| (*to, *requires))
}

impl State {
    /// The target's (or the reviewer's) verdict, where there is one.
    pub fn outcome(self) -> Option<&'static str> {
        match self {
            S::Completed(Verdict::Applied)
            | S::Delivered(Verdict::Applied)
            | S::Resolved(Resolution::Applied) => Some("applied"),
            S::Completed(Verdict::Rejected) | S::Delivered(Verdict::Rejected) => Some("rejected"),
            S::Resolved(Resolution::NotApplied) => Some("not_applied"),
            _ => None,
        }
    }

    /// No further event can change what happened (deliveries may still be recorded).
    pub fn is_final(self) -> bool {
        matches!(
            self,
            S::Denied
                | S::Rejected
                | S::Cancelled
                | S::Failed
                | S::Completed(_)
                | S::Delivered(_)
                | S::Resolved(_)
        )
    }
}

/// An execution's lifecycle folded from its events: the current state plus the facts the
/// recovery decision and the views need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lifecycle {
    pub state: State,
    /// How many times the execution was dispatched (re-dispatches reuse the same key).
    pub dispatches: u32,
    pub cancel_requested: bool,
}

impl Lifecycle {
    /// A new execution's lifecycle from its first event.
    pub fn start(event: EventKind) -> Result<Lifecycle, TransitionError> {
        match row(None, event) {
            Some((state, Requires::Nothing)) => Ok(Lifecycle {
                state,
                dispatches: 0,
                cancel_requested: false,
            }),
            found => Err(TransitionError {
                from: None,
                event,
                unmet: found.map(|(_, r)| r),
            }),
        }
    }

    /// The lifecycle after `event`, from `before` (`None`: a new execution).
    pub fn step(before: Option<Lifecycle>, event: EventKind) -> Result<Lifecycle, TransitionError> {
        match before {
            None => Lifecycle::start(event),
            Some(l) => l.next(event),
        }
    }

    /// Folds a sequence of events, refusing the first impossible one.
    pub fn from_events(
        events: impl IntoIterator<Item = EventKind>,
    ) -> Result<Lifecycle, TransitionError> {
        let mut lifecycle: Option<Lifecycle> = None;
        for event in events {
            lifecycle = Some(Lifecycle::step(lifecycle, event)?);
        }
        lifecycle.ok_or(TransitionError {
            from: None,
            event: E::Accepted,
            unmet: None,
        })
    }

    /// The lifecycle after one more event.
    pub fn next(self, event: EventKind) -> Result<Lifecycle, TransitionError> {
        let refused = |unmet| TransitionError {
            from: Some(self.state),
            event,
            unmet,
        };
        let (state, requires) = row(Some(self.state), event).ok_or_else(|| refused(None))?;
        let met = match requires {
            Requires::Nothing => true,
            Requires::OnlyDispatch => self.dispatches == 1,
        };
        if !met {
            return Err(refused(Some(requires)));
        }
        Ok(Lifecycle {
            state,
            dispatches: self.dispatches + u32::from(event == E::Dispatched),
            cancel_requested: self.cancel_requested || event == E::CancelRequested,
        })
    }

    /// What to record when the current dispatch provably sent nothing (refused connection, a
    /// URL that could not be built, a caller gone before the first byte): `failed` only if it
    /// is the execution's only dispatch; after an earlier dispatch the execution may still have
    /// been applied, so it goes back to `outcome_unknown` (never "nothing sent").
    pub fn nothing_sent_event(self) -> EventKind {
        if self.dispatches <= 1 {
            E::Failed
        } else {
            E::OutcomeUnknown
        }
    }
}
