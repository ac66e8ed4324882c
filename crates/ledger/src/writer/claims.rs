//! PostgreSQL: a batch's intent claims made in its opening round trip (`optimistic.rs`), so a
//! new request costs no round trip of its own. Each claim is the same `INSERT … ON CONFLICT
//! DO NOTHING` an accept makes alone, all in one statement in batch order: a row inserted
//! earlier in that statement is a conflict like any other, so of two identical requests the
//! first claims the slot and the second meets it, as one statement at a time.
//!
//! Only a plain accept claims ahead (no operation key, no re-issue key, a write). An accept
//! with a key points the intent slot at the execution it creates, which a later plain accept
//! for the same slot must meet as it would one statement at a time; so a plain accept whose
//! slot a keyed accept of the same batch also names claims the ordinary way, in turn.

use std::collections::HashSet;

use postern_core::ExecutionId;

use crate::db::SqlValue;
use crate::model::AcceptRequest;
use crate::ops::Op;

/// An accept's claim made ahead: the execution id it claimed for, and whether it got the slot.
pub(in crate::writer) struct Claim {
    pub id: ExecutionId,
    pub won: bool,
}

/// The column a won claim's execution id is returned as.
pub(super) const CLAIMED: &str = "claimed";

fn plain(req: &AcceptRequest) -> bool {
    req.operation_key.is_none() && req.reissue_key.is_none() && !req.contract.class.is_read_only()
}

fn slot(req: &AcceptRequest) -> (&str, &str, String) {
    (
        &req.record.actor,
        &req.record.intent_scope,
        req.fingerprint.to_string(),
    )
}

/// For each op of the batch, the execution id it claims ahead with, if it does.
pub(super) fn ahead(batch: &[Op]) -> Vec<Option<ExecutionId>> {
    let keyed: HashSet<_> = batch
        .iter()
        .filter_map(|op| match op {
            Op::Accept(req, _) if !plain(req) && !req.contract.class.is_read_only() => {
                Some(slot(req))
            }
            _ => None,
        })
        .collect();
    batch
        .iter()
        .map(|op| match op {
            Op::Accept(req, _) if plain(req) && !keyed.contains(&slot(req)) => {
                Some(ExecutionId::from_bytes(*uuid::Uuid::now_v7().as_bytes()))
            }
            _ => None,
        })
        .collect()
}

/// The statement claiming every slot of `ahead` (`None` if none is), returning the ids that
/// got theirs as [`CLAIMED`].
pub(super) fn statement(
    batch: &[Op],
    ahead: &[Option<ExecutionId>],
) -> Option<(String, Vec<SqlValue>)> {
    let mut sql = String::from(
        "INSERT INTO intents (actor, intent_scope, fingerprint, execution_id) VALUES ",
    );
    let mut claims: Vec<(&AcceptRequest, &ExecutionId)> = batch
        .iter()
        .zip(ahead)
        .filter_map(|(op, id)| match (op, id) {
            (Op::Accept(req, _), Some(id)) => Some((&**req, id)),
            _ => None,
        })
        .collect();
    // In slot order, so two replicas' batches claiming the same slots take them in the same
    // order and never wait for each other in a circle; stable, so of two identical requests
    // the earlier in the batch still claims first. Each key is rendered once.
    claims.sort_by_cached_key(|&(req, _)| slot(req));
    let mut params = Vec::new();
    for (req, id) in claims {
        let n = params.len();
        if n > 0 {
            sql.push_str(", ");
        }
        sql.push_str(&format!("(${}, ${}, ${}, ${})", n + 1, n + 2, n + 3, n + 4));
        let (actor, scope, fingerprint) = slot(req);
        params.extend([
            SqlValue::Text(actor.to_string()),
            SqlValue::Text(scope.to_string()),
            SqlValue::Text(fingerprint),
            SqlValue::Text(id.to_string()),
        ]);
    }
    if params.is_empty() {
        return None;
    }
    sql.push_str(&format!(
        " ON CONFLICT DO NOTHING RETURNING execution_id AS {CLAIMED}"
    ));
    Some((sql, params))
}
