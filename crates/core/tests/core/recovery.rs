//! The recovery decision for every (prior state × class) cell of contract §4 and every
//! operation-key case.

use postern_core::class::ActionClass;
use postern_core::lifecycle::{Lifecycle, State, Verdict};
use postern_core::recovery::{
    decide, IncomingRequest, NewReason, PriorExecution, RecoveryDecision as D, UnknownFallback as F,
};
use postern_core::{ExecutionId, Fingerprint, Timestamp};

use crate::support::contract_of;

const T0: i64 = 1_800_000_000_000;

fn id() -> ExecutionId {
    ExecutionId::from_bytes([7; 16])
}

fn fp(b: u8) -> Fingerprint {
    Fingerprint::from_bytes([b; 32])
}

fn prior(state: State) -> PriorExecution {
    PriorExecution {
        execution_id: id(),
        fingerprint: fp(1),
        actor: "billing-agent".into(),
        intent_scope: "billing-agent".into(),
        operation_key: None,
        lifecycle: Lifecycle {
            state,
            dispatches: 1,
            cancel_requested: false,
        },
        accepted_at: Timestamp(T0),
        state_since: Timestamp(T0 + 5),
        rejection_retryable: false,
    }
}

fn incoming(after_ms: i64) -> IncomingRequest<'static> {
    IncomingRequest {
        fingerprint: fp(1),
        actor: "billing-agent",
        intent_scope: "billing-agent",
        operation_key: None,
        reissue_of_prior: false,
        now: Timestamp(T0 + after_ms),
    }
}

/// contract §4's two tables, written out by hand.
fn expected(state: State, class: ActionClass, status_query: bool) -> D {
    let execution_id = id();
    if class == ActionClass::ReadOnly {
        return D::New {
            reason: NewReason::ReadOnly,
        };
    }
    match state {
        State::Accepted | State::Authorized => D::Continue { execution_id },
        State::AwaitingApproval => D::AwaitApproval {
            execution_id,
            since: Timestamp(T0 + 5),
        },
        State::Dispatched => D::Attach { execution_id },
        State::Completed(verdict) => D::ReturnResult {
            execution_id,
            verdict,
            delivered_before: false,
        },
        State::Delivered(verdict) => D::ReturnResult {
            execution_id,
            verdict,
            delivered_before: true,
        },
        State::Denied => D::ReturnDenial { execution_id },
        State::NeedsReview => D::ReturnReview { execution_id },
        // Both resolutions are what a retry is told (issue 14): after `not_applied` a new
        // action needs a new operation key.
        State::Resolved(resolution) => D::ReturnResolution {
            execution_id,
            resolution,
        },
        State::Failed | State::Rejected | State::Cancelled => D::New {
            reason: NewReason::PriorNotPerformed,
        },
        State::OutcomeUnknown => D::RecoverUnknown {
            execution_id,
            status_query_first: status_query,
            fallback: match class {
                ActionClass::IdempotentWrite => F::RedispatchSameKey,
                ActionClass::ConditionalWrite => F::RedispatchIfPreconditionHolds,
                ActionClass::Irreversible => F::Review,
                ActionClass::RemoteCommand => F::QueryMarker,
                ActionClass::ReadOnly => unreachable!(),
            },
        },
    }
}

#[test]
fn every_prior_state_times_every_class() {
    let mut cells = 0;
    for class in ActionClass::ALL {
        for status_query in [false, true] {
            if status_query && class == ActionClass::RemoteCommand {
                continue; // ssh tools are recovered through the marker, not an HTTP query
            }
            let contract = contract_of(class, status_query);
            for state in State::ALL {
                let got = decide(Some(&prior(state)), &incoming(1_000), &contract);
                assert_eq!(
                    got,
                    expected(state, class, status_query),
                    "{class} × {state} (status_query={status_query})"
                );
                cells += 1;
            }
        }
    }
    assert_eq!(cells, 16 * 9);
}

#[test]
fn no_prior_means_a_new_execution() {
    assert_eq!(
        decide(
            None,
            &incoming(0),
            &contract_of(ActionClass::IdempotentWrite, true)
        ),
        D::New {
            reason: NewReason::NoPrior
        }
    );
}

#[test]
fn a_retryable_rejection_never_blocks_a_new_call() {
    let contract = contract_of(ActionClass::IdempotentWrite, false);
    for state in [
        State::Completed(Verdict::Rejected),
        State::Delivered(Verdict::Rejected),
    ] {
        let mut p = prior(state);
        p.rejection_retryable = true;
        assert_eq!(
            decide(Some(&p), &incoming(1), &contract),
            D::New {
                reason: NewReason::PriorNotPerformed
            }
        );
    }
}

#[test]
fn matching_is_bounded_by_actor_scope_fingerprint_and_window() {
    let contract = contract_of(ActionClass::IdempotentWrite, false); // window 10 min
    let p = prior(State::Delivered(Verdict::Applied));
    let mut other_actor = incoming(1);
    other_actor.actor = "ops-agent";
    assert_eq!(
        decide(Some(&p), &other_actor, &contract),
        D::New {
            reason: NewReason::DifferentActor
        }
    );
    let mut other_scope = incoming(1);
    other_scope.intent_scope = "ticket-42";
    assert_eq!(
        decide(Some(&p), &other_scope, &contract),
        D::New {
            reason: NewReason::DifferentScope
        }
    );
    let mut other_fp = incoming(1);
    other_fp.fingerprint = fp(2);
    assert_eq!(
        decide(Some(&p), &other_fp, &contract),
        D::New {
            reason: NewReason::DifferentIntent
        }
    );
    assert!(matches!(
        decide(Some(&p), &incoming(599_999), &contract),
        D::ReturnResult { .. }
    ));
    assert_eq!(
        decide(Some(&p), &incoming(600_000), &contract),
        D::New {
            reason: NewReason::OutsideWindow
        }
    );
    let mut zero = contract.clone();
    zero.match_window = std::time::Duration::ZERO;
    assert_eq!(
        decide(Some(&p), &incoming(0), &zero),
        D::New {
            reason: NewReason::OutsideWindow
        }
    );
    // A call still waiting for a person is matched whatever the window (issue 14): a retry
    // after it never makes a second approval request, nor is an approved call approved twice.
    let waiting = prior(State::AwaitingApproval);
    assert!(matches!(
        decide(Some(&waiting), &incoming(3_600_000), &contract),
        D::AwaitApproval { .. }
    ));
    assert!(matches!(
        decide(Some(&waiting), &incoming(0), &zero),
        D::AwaitApproval { .. }
    ));
    assert!(matches!(
        decide(
            Some(&prior(State::Authorized)),
            &incoming(3_600_000),
            &contract
        ),
        D::Continue { .. }
    ));
}

#[test]
fn operation_keys() {
    let contract = contract_of(ActionClass::IdempotentWrite, false); // window 10 min, retention 1 day
    let mut p = prior(State::Delivered(Verdict::Applied));
    p.operation_key = Some("order-17".into());
    let keyed = |after: i64, key: &'static str, f: u8| IncomingRequest {
        fingerprint: fp(f),
        operation_key: Some(key),
        ..incoming(after)
    };
    // Same key, same intent: matched for the whole retention, past the window.
    assert!(matches!(
        decide(Some(&p), &keyed(3_600_000, "order-17", 1), &contract),
        D::ReturnResult { .. }
    ));
    // Same key, different intent: a conflict naming the original, whatever its state.
    for state in State::ALL {
        let mut q = p.clone();
        q.lifecycle.state = state;
        assert_eq!(
            decide(Some(&q), &keyed(1, "order-17", 2), &contract),
            D::Conflict { original: id() },
            "{state}"
        );
    }
    // Past retention the key is free again.
    assert_eq!(
        decide(Some(&p), &keyed(86_400_000, "order-17", 2), &contract),
        D::New {
            reason: NewReason::KeyExpired
        }
    );
    // A new key is the explicit way to ask for a second, separate action.
    assert_eq!(
        decide(Some(&p), &keyed(1, "order-18", 1), &contract),
        D::New {
            reason: NewReason::NewOperationKey
        }
    );
    let unkeyed_prior = prior(State::Delivered(Verdict::Applied));
    assert_eq!(
        decide(Some(&unkeyed_prior), &keyed(1, "order-18", 1), &contract),
        D::New {
            reason: NewReason::NewOperationKey
        }
    );
    // Without a key, a keyed prior is still matched by fingerprint inside the window.
    assert!(matches!(
        decide(Some(&p), &incoming(1), &contract),
        D::ReturnResult { .. }
    ));
    // Keys do not make reads matchable.
    assert_eq!(
        decide(
            Some(&p),
            &keyed(1, "order-17", 2),
            &contract_of(ActionClass::ReadOnly, false)
        ),
        D::New {
            reason: NewReason::ReadOnly
        }
    );
    // Another actor's key is not this actor's key.
    let mut other = keyed(1, "order-17", 2);
    other.actor = "ops-agent";
    assert_eq!(
        decide(Some(&p), &other, &contract),
        D::New {
            reason: NewReason::DifferentActor
        }
    );
}

/// A bridge's re-issue key (issue 22): it finds the same request whatever the window, and a key
/// that matches nothing never asks for a new action (the fingerprint decides as usual).
#[test]
fn reissue_keys() {
    let contract = contract_of(ActionClass::Irreversible, false); // window 10 min, retention 1 day
    let p = prior(State::Delivered(Verdict::Applied));
    let reissue = |after: i64, f: u8| IncomingRequest {
        fingerprint: fp(f),
        reissue_of_prior: true,
        ..incoming(after)
    };
    // Past the window, the re-issue of the same request is still that request.
    assert!(matches!(
        decide(Some(&p), &reissue(3_600_000, 1), &contract),
        D::ReturnResult { .. }
    ));
    // The same request cannot change its arguments: a conflict naming the original.
    assert_eq!(
        decide(Some(&p), &reissue(1, 2), &contract),
        D::Conflict { original: id() }
    );
    // Past retention it is free again.
    assert_eq!(
        decide(Some(&p), &reissue(86_400_000, 1), &contract),
        D::New {
            reason: NewReason::KeyExpired
        }
    );
    // A prior that sent nothing never blocks: the re-issue becomes a new execution.
    let failed = prior(State::Failed);
    assert_eq!(
        decide(Some(&failed), &reissue(1, 1), &contract),
        D::New {
            reason: NewReason::PriorNotPerformed
        }
    );
}
