//! What the writer is asked to do ([`Op`]), how its answers go back ([`Done`]), and which
//! requests may wait for a later commit ([`Deferral`]).

use postern_audit::Checkpoint;
use postern_core::{EventKind, ExecutionId, Timestamp};
use tokio::sync::oneshot;

use crate::error::{LedgerError, StorageFault};
use crate::model::Pruned;
use crate::model::{
    AcceptOutcome, AcceptRequest, ExecutionSummary, NewEvent, Run, RunDecision, ToolPin,
};
use crate::streams::StreamWrite;

pub(crate) type Reply<T> = oneshot::Sender<Result<T, LedgerError>>;

pub(crate) enum Op {
    Accept(Box<AcceptRequest>, Reply<AcceptOutcome>),
    Append(
        ExecutionId,
        Box<NewEvent>,
        Timestamp,
        Reply<ExecutionSummary>,
    ),
    /// Marks an execution `outcome_unknown` if it is still `dispatched` by the given owner.
    Abandoned(ExecutionId, String, Timestamp, Reply<bool>),
    Checkpoint(Timestamp, Reply<Option<Checkpoint>>),
    StartRun(Box<Run>, Reply<()>),
    EndRun(String, Timestamp, crate::model::RunEnd, Reply<()>),
    /// Records an operator's decision about a run (if not already recorded): whether it was.
    DecideRun(String, RunDecision, String, Timestamp, Reply<bool>),
    /// Sets a tool's pin (`Some`) and chains a `notice` event with the detail, in one commit.
    Notice(
        Option<Box<ToolPin>>,
        serde_json::Value,
        Timestamp,
        Reply<()>,
    ),
    /// Transport state for resumable streams (never waited on by an action).
    Stream(Vec<StreamWrite>, Reply<()>),
    /// Commits whatever is queued; replies once it is durable.
    Flush(Reply<()>),
    /// Removes executions past their retention (see `writer::prune`).
    Prune(Vec<(ExecutionId, u32)>, Timestamp, Reply<Pruned>),
    /// PostgreSQL: renews this instance's lease. It goes through the writer so that an
    /// instance whose writer cannot write stops renewing, and a replica takes over.
    Heartbeat(Timestamp, Reply<()>),
    /// Claims the takeover of an instance whose lease expired before the cutoff: whether this
    /// instance is the one that took it over.
    TakeOver(String, Timestamp, Timestamp, Reply<bool>),
}

/// How long records nothing waits on may be held back before they are committed.
pub(crate) const LAZY_HOLD: std::time::Duration = std::time::Duration::from_millis(50);

impl Op {
    /// Answers an op that could not even get a transaction (or whose batch broke before it
    /// was written): nothing of it was recorded.
    pub fn refuse(self, why: &(StorageFault, String)) {
        let err = || LedgerError::storage(why.0, why.1.clone());
        match self {
            Op::Accept(_, tx) => drop(tx.send(Err(err()))),
            Op::Append(_, _, _, tx) => drop(tx.send(Err(err()))),
            Op::Abandoned(_, _, _, tx)
            | Op::DecideRun(_, _, _, _, tx)
            | Op::TakeOver(_, _, _, tx) => drop(tx.send(Err(err()))),
            Op::Checkpoint(_, tx) => drop(tx.send(Err(err()))),
            Op::Prune(_, _, tx) => drop(tx.send(Err(err()))),
            Op::StartRun(_, tx)
            | Op::Notice(_, _, _, tx)
            | Op::EndRun(_, _, _, tx)
            | Op::Stream(_, tx)
            | Op::Flush(tx)
            | Op::Heartbeat(_, tx) => drop(tx.send(Err(err()))),
        }
    }

    /// A record nothing waits on before acting: a delivery, appended after the answer left.
    pub fn can_wait(&self) -> bool {
        match self {
            Op::Append(_, ev, _, _) => {
                matches!(ev.kind, EventKind::Delivered | EventKind::DeliveryFailed)
            }
            Op::Stream(..) => true,
            _ => false,
        }
    }
}

/// Records nothing waits on (deliveries, stream state) are held back for up to `LAZY_HOLD` and
/// then ride an urgent commit together, instead of adding their pages to every accept (or
/// spending an fsync alone).
#[derive(Default)]
pub(crate) struct Deferral {
    held: Vec<Op>,
    oldest: Option<std::time::Instant>,
}

impl Deferral {
    /// Takes newly arrived ops and returns what must be committed now (possibly nothing):
    /// every urgent op, plus the held ones once they are due (or `force`d).
    pub fn sort(&mut self, ops: Vec<Op>, max_batch: usize, force: bool) -> Vec<Op> {
        let (lazy, urgent): (Vec<Op>, Vec<Op>) = ops.into_iter().partition(Op::can_wait);
        if !lazy.is_empty() && self.oldest.is_none() {
            self.oldest = Some(std::time::Instant::now());
        }
        self.held.extend(lazy);
        let due = force
            || self.oldest.is_some_and(|t| t.elapsed() >= LAZY_HOLD)
            || self.held.len() >= max_batch
            || urgent.iter().any(|op| matches!(op, Op::Flush(_)));
        let mut commit = urgent;
        if due {
            self.oldest = None;
            commit.append(&mut self.held);
        }
        commit
    }

    /// When the held ops must be committed even if nothing urgent comes.
    pub fn due_at(&self) -> Option<std::time::Instant> {
        self.oldest.map(|t| t + LAZY_HOLD)
    }
}

/// What running an op came to, before it is paired with its reply ([`Op::answer`]): the op
/// itself stays whole, so a batch can be run again (see `writer/optimistic.rs`).
pub(crate) enum Outcome {
    Accept(Result<AcceptOutcome, LedgerError>),
    Append(Result<ExecutionSummary, LedgerError>),
    Bool(Result<bool, LedgerError>),
    Checkpoint(Result<Option<Checkpoint>, LedgerError>),
    Unit(Result<(), LedgerError>),
    Prune(Result<Pruned, LedgerError>),
}

impl Outcome {
    pub fn is_ok(&self) -> bool {
        match self {
            Outcome::Accept(r) => r.is_ok(),
            Outcome::Append(r) => r.is_ok(),
            Outcome::Bool(r) => r.is_ok(),
            Outcome::Checkpoint(r) => r.is_ok(),
            Outcome::Unit(r) => r.is_ok(),
            Outcome::Prune(r) => r.is_ok(),
        }
    }
}

impl Op {
    /// Pairs the op's reply with what running it came to (`Writer::process` gives each op its
    /// own kind of outcome; a mismatch would be a writer bug, answered as one).
    pub fn answer(self, outcome: Outcome) -> Done {
        use Outcome as O;
        match (self, outcome) {
            (Op::Accept(_, tx), O::Accept(r)) => Done::Accept(tx, r),
            (Op::Append(_, _, _, tx), O::Append(r)) => Done::Append(tx, r),
            (
                Op::Abandoned(_, _, _, tx)
                | Op::DecideRun(_, _, _, _, tx)
                | Op::TakeOver(_, _, _, tx),
                O::Bool(r),
            ) => Done::Abandoned(tx, r),
            (Op::Checkpoint(_, tx), O::Checkpoint(r)) => Done::Checkpoint(tx, r),
            (Op::Prune(_, _, tx), O::Prune(r)) => Done::Prune(tx, r),
            (
                Op::StartRun(_, tx)
                | Op::Notice(_, _, _, tx)
                | Op::EndRun(_, _, _, tx)
                | Op::Stream(_, tx)
                | Op::Flush(tx)
                | Op::Heartbeat(_, tx),
                O::Unit(r),
            ) => Done::Unit(tx, r),
            (op, _) => {
                let why = (
                    StorageFault::Corrupt,
                    "the writer paired a request with another kind of answer".to_string(),
                );
                op.refuse(&why);
                Done::Nothing
            }
        }
    }
}

pub(crate) enum Done {
    /// Already answered.
    Nothing,
    Accept(Reply<AcceptOutcome>, Result<AcceptOutcome, LedgerError>),
    Append(
        Reply<ExecutionSummary>,
        Result<ExecutionSummary, LedgerError>,
    ),
    Abandoned(Reply<bool>, Result<bool, LedgerError>),
    Checkpoint(
        Reply<Option<Checkpoint>>,
        Result<Option<Checkpoint>, LedgerError>,
    ),
    Unit(Reply<()>, Result<(), LedgerError>),
    Prune(Reply<Pruned>, Result<Pruned, LedgerError>),
}

impl Done {
    pub fn is_ok(&self) -> bool {
        match self {
            Done::Nothing => false,
            Done::Accept(_, r) => r.is_ok(),
            Done::Append(_, r) => r.is_ok(),
            Done::Abandoned(_, r) => r.is_ok(),
            Done::Checkpoint(_, r) => r.is_ok(),
            Done::Unit(_, r) => r.is_ok(),
            Done::Prune(_, r) => r.is_ok(),
        }
    }

    /// Sends the result, or `failure` if the batch's commit failed.
    pub fn send(self, failure: Option<&(StorageFault, String)>) {
        let fail =
            |(fault, msg): &(StorageFault, String)| LedgerError::storage(*fault, msg.clone());
        macro_rules! reply {
            ($tx:expr, $r:expr) => {{
                let r = match failure {
                    Some(m) => Err(fail(m)),
                    None => $r,
                };
                // The caller may have gone away; its write stands either way.
                let _ = $tx.send(r);
            }};
        }
        match self {
            Done::Nothing => {}
            Done::Accept(tx, r) => reply!(tx, r),
            Done::Append(tx, r) => reply!(tx, r),
            Done::Abandoned(tx, r) => reply!(tx, r),
            Done::Checkpoint(tx, r) => reply!(tx, r),
            Done::Unit(tx, r) => reply!(tx, r),
            Done::Prune(tx, r) => reply!(tx, r),
        }
    }
}
