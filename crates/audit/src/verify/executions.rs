//! The executions' side of verification: each execution's events folded through core's
//! lifecycle table in `n` order (holding any that arrive ahead of their turn), and the
//! executions still waiting for an event when the log ends.

use std::collections::BTreeMap;

use postern_core::lifecycle::{EventKind, Lifecycle, TransitionError};
use postern_core::ExecutionId;

use super::EventMeta;
use crate::breaks::{Break, BreakReason};
use crate::fold::FoldMap;

/// Every execution the log names, with where its lifecycle stands.
#[derive(Default)]
pub(super) struct Executions {
    by_id: FoldMap<ExecutionId, ExecutionState>,
}

#[derive(Default)]
struct ExecutionState {
    next_n: u32,
    lifecycle: Option<Lifecycle>,
    /// Events that arrived ahead of their turn (possible when an execution spans chains).
    waiting: BTreeMap<u32, (EventKind, String, u64)>,
}

impl ExecutionState {
    /// Folds the execution's next event; what was refused, if anything. A refused event is
    /// skipped (the state stays), so one bad event is one break.
    fn advance(&mut self, event: EventKind) -> Option<Refused> {
        self.next_n += 1;
        match Lifecycle::step(self.lifecycle, event) {
            Ok(l) => {
                self.lifecycle = Some(l);
                None
            }
            Err(e) => Some(Refused(e)),
        }
    }
}

struct Refused(TransitionError);

impl Refused {
    fn of(self, execution_id: ExecutionId) -> BreakReason {
        BreakReason::ImpossibleTransition {
            execution_id,
            from: self.0.from,
            event: self.0.event,
            after_earlier_dispatch: self.0.unmet.is_some(),
        }
    }
}

impl Executions {
    /// How many executions (notices aside) the log names.
    pub(super) fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Folds one event into its execution's lifecycle; what it breaks goes to `breaks`.
    pub(super) fn fold(&mut self, e: &EventMeta<'_>, breaks: &mut Vec<Break>) {
        let b = e;
        // A notice is chained like any event but belongs to no execution's lifecycle; it is
        // its own id's only event.
        if b.event == EventKind::Notice {
            if b.n != 1 {
                breaks.push(Break {
                    chain: Some(b.chain.to_string()),
                    seq: Some(b.seq),
                    reason: BreakReason::Malformed {
                        line: 0,
                        reason: format!("notice {} is not event 1 of its id", b.execution_id),
                    },
                });
            }
            return;
        }
        let ex = self
            .by_id
            .entry(b.execution_id)
            .or_insert_with(|| ExecutionState {
                next_n: 1,
                ..Default::default()
            });
        if b.n == ex.next_n && ex.waiting.is_empty() {
            // The common case: the execution's next event, in order.
            let refused = ex.advance(b.event);
            if let Some(reason) = refused {
                breaks.push(Break {
                    chain: Some(b.chain.to_string()),
                    seq: Some(b.seq),
                    reason: reason.of(b.execution_id),
                });
            }
            return;
        }
        ex.waiting
            .insert(b.n, (b.event, b.chain.to_string(), b.seq));
        while let Some((event, chain, seq)) = ex.waiting.remove(&ex.next_n) {
            if let Some(reason) = ex.advance(event) {
                breaks.push(Break {
                    chain: Some(chain),
                    seq: Some(seq),
                    reason: reason.of(b.execution_id),
                });
            }
        }
    }

    /// Executions still waiting for an event at the end: that event is missing.
    pub(super) fn report_incomplete(&self, breaks: &mut Vec<Break>) {
        for (id, ex) in &self.by_id {
            if !ex.waiting.is_empty() {
                breaks.push(Break {
                    chain: None,
                    seq: None,
                    reason: BreakReason::MissingExecutionEvent {
                        execution_id: *id,
                        expected_n: ex.next_n,
                    },
                });
            }
        }
    }
}
