//! The state machine, checked exhaustively against the lifecycle of DESIGN §3 written out here
//! independently of the implementation's table.

use postern_core::lifecycle::{apply, EventKind, Lifecycle, State, TransitionError};

/// DESIGN §3 as (from, event, to) by display names; `-` is a new execution.
const SPEC: &[(&str, &str, &str)] = &[
    ("-", "accepted", "accepted"),
    ("accepted", "approval_requested", "awaiting_approval"),
    ("accepted", "authorized", "authorized"),
    ("accepted", "rejected", "rejected"),
    ("accepted", "cancelled", "cancelled"),
    ("awaiting_approval", "authorized", "authorized"),
    ("awaiting_approval", "denied", "denied"),
    ("awaiting_approval", "rejected", "rejected"),
    ("awaiting_approval", "cancelled", "cancelled"),
    ("authorized", "dispatched", "dispatched"),
    ("authorized", "rejected", "rejected"),
    ("authorized", "cancelled", "cancelled"),
    ("dispatched", "cancel_requested", "dispatched"),
    ("dispatched", "completed(applied)", "completed(applied)"),
    ("dispatched", "completed(rejected)", "completed(rejected)"),
    ("dispatched", "failed", "failed"),
    ("dispatched", "outcome_unknown", "outcome_unknown"),
    ("outcome_unknown", "cancel_requested", "outcome_unknown"),
    ("outcome_unknown", "dispatched", "dispatched"),
    (
        "outcome_unknown",
        "completed(applied)",
        "completed(applied)",
    ),
    (
        "outcome_unknown",
        "completed(rejected)",
        "completed(rejected)",
    ),
    ("outcome_unknown", "review_required", "needs_review"),
    ("needs_review", "resolved(applied)", "resolved(applied)"),
    (
        "needs_review",
        "resolved(not_applied)",
        "resolved(not_applied)",
    ),
    ("completed(applied)", "delivered", "delivered(applied)"),
    ("completed(rejected)", "delivered", "delivered(rejected)"),
    (
        "completed(applied)",
        "delivery_failed",
        "completed(applied)",
    ),
    (
        "completed(rejected)",
        "delivery_failed",
        "completed(rejected)",
    ),
    ("delivered(applied)", "delivered", "delivered(applied)"),
    ("delivered(rejected)", "delivered", "delivered(rejected)"),
    (
        "delivered(applied)",
        "delivery_failed",
        "delivered(applied)",
    ),
    (
        "delivered(rejected)",
        "delivery_failed",
        "delivered(rejected)",
    ),
];

#[test]
fn every_pair_is_allowed_exactly_when_the_spec_says_so() {
    let froms = std::iter::once(None).chain(State::ALL.into_iter().map(Some));
    let mut checked = 0;
    let mut allowed = 0;
    for from in froms {
        for event in EventKind::ALL {
            let from_name = from.map_or("-".to_string(), |s| s.to_string());
            let expected = SPEC
                .iter()
                .find(|(f, e, _)| *f == from_name && *e == event.to_string())
                .map(|(_, _, to)| *to);
            let got = apply(from, event);
            match (expected, got) {
                (Some(to), Ok(state)) => {
                    assert_eq!(state.to_string(), to, "{from_name} --{event}-->");
                    allowed += 1;
                }
                (None, Err(e)) => assert_eq!(e, TransitionError { from, event }),
                (Some(to), Err(_)) => panic!("{from_name} --{event}--> {to} must be allowed"),
                (None, Ok(state)) => panic!("{from_name} --{event}--> {state} must be refused"),
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 17 * 17);
    assert_eq!(allowed, SPEC.len());
}

#[test]
fn the_enumerations_are_complete_and_distinct() {
    let states: std::collections::HashSet<_> = State::ALL.iter().collect();
    assert_eq!(states.len(), State::ALL.len());
    let events: std::collections::HashSet<_> = EventKind::ALL.iter().collect();
    assert_eq!(events.len(), EventKind::ALL.len());
    // Every state is reachable from a new execution.
    for s in State::ALL {
        assert!(
            SPEC.iter().any(|(_, _, to)| *to == s.to_string()),
            "{s} unreachable"
        );
    }
}

#[test]
fn lifecycle_folds_events_and_counts_dispatches() {
    use EventKind::*;
    let l = Lifecycle::from_events([
        Accepted,
        Authorized,
        Dispatched,
        CancelRequested,
        OutcomeUnknown,
        Dispatched,
    ])
    .unwrap();
    assert_eq!(l.state, State::Dispatched);
    assert_eq!(l.dispatches, 2);
    assert!(l.cancel_requested);
    let err = Lifecycle::from_events([Accepted, Dispatched]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "impossible transition: dispatched in state accepted"
    );
    assert!(Lifecycle::from_events([]).is_err());
}

#[test]
fn display_states_tell_delivery_apart_from_completion() {
    use postern_core::lifecycle::Verdict;
    assert_eq!(
        State::Completed(Verdict::Applied).display_name(),
        "completed_result_not_delivered"
    );
    assert_eq!(
        State::Delivered(Verdict::Applied).display_name(),
        "completed"
    );
    assert_eq!(State::OutcomeUnknown.display_name(), "outcome_unknown");
}

#[test]
fn names_round_trip() {
    for e in EventKind::ALL {
        assert_eq!(e.to_string().parse::<EventKind>().unwrap(), e);
    }
    for s in State::ALL {
        assert_eq!(s.to_string().parse::<State>().unwrap(), s);
    }
    assert!("exploded".parse::<EventKind>().is_err());
}
