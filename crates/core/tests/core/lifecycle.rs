//! The state machine, checked exhaustively against the lifecycle of contract §3 written out here
//! independently of the implementation's table.

use postern_core::lifecycle::{EventKind, Lifecycle, Requires, State, TransitionError};

/// contract §3 as (from, event, to) by display names; `-` is a new execution.
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

/// contract §3 as amended by issue 21: `failed` means no request of the execution ever left, so
/// it follows only an execution's first and only dispatch.
fn history_allows(event: EventKind, dispatches: u32) -> bool {
    event != EventKind::Failed || dispatches == 1
}

#[test]
fn every_pair_is_allowed_exactly_when_the_spec_says_so() {
    let mut checked = 0;
    let mut allowed = 0;
    // A new execution (no lifecycle yet).
    for event in EventKind::ALL {
        let expected = SPEC
            .iter()
            .find(|(f, e, _)| *f == "-" && *e == event.to_string());
        match (expected, Lifecycle::start(event)) {
            (Some((_, _, to)), Ok(l)) => {
                assert_eq!(l.state.to_string(), *to);
                assert_eq!(l.dispatches, 0);
                allowed += 1;
            }
            (None, Err(e)) => assert_eq!(
                e,
                TransitionError {
                    from: None,
                    event,
                    unmet: None
                }
            ),
            (expected, got) => panic!("new --{event}--> expected {expected:?}, got {got:?}"),
        }
        checked += 1;
    }
    // Every state, with every history of dispatches that matters (none, one, several).
    for from in State::ALL {
        for dispatches in [0, 1, 2, 5] {
            let before = Lifecycle {
                state: from,
                dispatches,
                cancel_requested: false,
            };
            for event in EventKind::ALL {
                let in_table = SPEC
                    .iter()
                    .find(|(f, e, _)| *f == from.to_string() && *e == event.to_string())
                    .map(|(_, _, to)| *to);
                let got = before.next(event);
                match (in_table, got) {
                    (Some(to), Ok(after)) => {
                        assert!(
                            history_allows(event, dispatches),
                            "{from} --{event}--> after {dispatches} dispatches must be refused"
                        );
                        assert_eq!(after.state.to_string(), to, "{from} --{event}-->");
                        let counted = u32::from(event == EventKind::Dispatched);
                        assert_eq!(after.dispatches, dispatches + counted);
                        allowed += 1;
                    }
                    (Some(_), Err(e)) => {
                        assert!(
                            !history_allows(event, dispatches),
                            "{from} --{event}--> after {dispatches} dispatches must be allowed: {e}"
                        );
                        assert_eq!(e.unmet, Some(Requires::OnlyDispatch));
                        assert_eq!((e.from, e.event), (Some(from), event));
                    }
                    (None, Err(e)) => assert_eq!(
                        e,
                        TransitionError {
                            from: Some(from),
                            event,
                            unmet: None
                        }
                    ),
                    (None, Ok(after)) => {
                        panic!("{from} --{event}--> {} must be refused", after.state)
                    }
                }
                checked += 1;
            }
        }
    }
    // 18 event kinds (the `notice` among them, which no state allows) from nothing, and from
    // each of the 16 states with each of the 4 histories.
    assert_eq!(checked, 18 + 16 * 4 * 18);
    // Every row but `failed` holds for all four histories; `failed` only after one dispatch.
    assert_eq!(allowed, 1 + (SPEC.len() - 1 - 1) * 4 + 1);
}

#[test]
fn failed_after_an_earlier_dispatch_is_refused_with_the_reason() {
    use EventKind::*;
    // The issue-21 sequence: sent, unknown, re-sent, and the re-send could not connect.
    let err = Lifecycle::from_events([
        Accepted,
        Authorized,
        Dispatched,
        OutcomeUnknown,
        Dispatched,
        Failed,
    ])
    .unwrap_err();
    assert_eq!(err.unmet, Some(Requires::OnlyDispatch));
    assert!(
        err.to_string().contains("after an earlier dispatch"),
        "{err}"
    );
    // What the gateway records instead.
    let resent =
        Lifecycle::from_events([Accepted, Authorized, Dispatched, OutcomeUnknown, Dispatched])
            .unwrap();
    assert_eq!(resent.nothing_sent_event(), OutcomeUnknown);
    let l = resent.next(OutcomeUnknown).unwrap();
    assert_eq!(l.state, State::OutcomeUnknown);
    // A first and only dispatch that sent nothing is a plain failure.
    let first = Lifecycle::from_events([Accepted, Authorized, Dispatched]).unwrap();
    assert_eq!(first.nothing_sent_event(), Failed);
    assert_eq!(first.next(Failed).unwrap().state, State::Failed);
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
