//! Retention inside the writer's transaction: an execution past its retention goes whole (its
//! record, result, intent slot and keys, and, when checkpoints are signed, its events). The
//! events leave signed pruned ranges behind, merged with their neighbours, so the chain still
//! verifies across the gap.

use crate::model::Pruned;
use postern_audit::{PrunedRange, SigningKey};
use postern_core::{hexdigits, ExecutionId, Timestamp};

use super::budgets::Charged;
use super::transaction::Transaction;
use crate::db::{params, RowAccess, SqlValue, WriteConn};
use crate::error::LedgerError;
use crate::recall::Recall;
use crate::rows;

/// The writer's part that prunes: it borrows the connection, the summaries the open
/// transaction remembers, and what it must not prune (another chain, the head).
pub(super) struct Pruner<'t, C> {
    conn: &'t mut C,
    /// This instance's chain: only its events go.
    chain: &'t str,
    /// Signs the pruned ranges; without it events are kept (executions still go).
    key: Option<&'t SigningKey>,
    /// The head's seq: the event the next append links to stays.
    head: u64,
    recall: &'t mut Option<Recall>,
}

/// The rows that point at an execution being pruned, by their own keys.
struct Keys {
    actor: String,
    intent_scope: String,
    fingerprint: String,
    operation_key: Option<String>,
    /// Its budgets' charges, uncounted as it goes.
    charged: Charged,
}

/// One event of an execution being pruned.
struct Gone {
    seq: u64,
    hash: [u8; 32],
    prev_hash: [u8; 32],
}

impl<'t, C: WriteConn> Pruner<'t, C> {
    /// The pruner of the open transaction.
    pub(super) fn over(tx: &'t mut Transaction<C>) -> Pruner<'t, C> {
        Pruner {
            conn: &mut tx.conn,
            chain: &tx.cfg.chain,
            key: tx.cfg.signing_key.as_deref(),
            head: tx.head.0,
            recall: &mut tx.recall,
        }
    }

    /// Prunes the planned executions that are still as planned (`n` events, a final state):
    /// one that moved on since, or whose events reach another chain or this chain's head
    /// (which the next append links to), is left for a later round.
    pub(super) async fn prune(
        &mut self,
        plan: &[(ExecutionId, u32)],
        now: Timestamp,
    ) -> Result<Pruned, LedgerError> {
        let prune_events = self.key.is_some();
        let mut ids = Vec::new();
        let mut gone = Vec::new();
        for &(id, n) in plan {
            if let Some((keys, events)) = self.prunable(id, n, prune_events).await? {
                ids.push((id, keys));
                gone.extend(events);
            }
        }
        gone.sort_by_key(|g| g.seq);
        let events = gone.len() as u64;
        if prune_events {
            for range in runs(&gone) {
                self.replace_events(range, now).await?;
            }
        }
        for (id, keys) in &ids {
            let id_text = id.to_string();
            // Every delete finds its rows by a key (a scan per execution was what made a
            // prune of thousands hold the writer for seconds).
            let deletes: [(&str, &[SqlValue]); 6] = [
                ("DELETE FROM results WHERE execution_id = $1", params![&id_text]),
                (
                    "DELETE FROM intents WHERE actor = $1 AND intent_scope = $2 AND fingerprint = $3 AND execution_id = $4",
                    params![&keys.actor, &keys.intent_scope, &keys.fingerprint, &id_text],
                ),
                (
                    "DELETE FROM operation_keys WHERE actor = $1 AND key = $2 AND execution_id = $3",
                    params![&keys.actor, &keys.operation_key, &id_text],
                ),
                ("DELETE FROM reissue_keys WHERE execution_id = $1", params![&id_text]),
                ("DELETE FROM calls WHERE execution_id = $1", params![&id_text]),
                ("DELETE FROM executions WHERE id = $1", params![&id_text]),
            ];
            for (sql, values) in keys.charged.uncounting(&id_text) {
                self.conn.exec(sql, &values).await?;
            }
            for (sql, values) in deletes {
                self.conn.exec(sql, values).await?;
            }
            if let Some(recall) = self.recall.as_mut() {
                recall.forget(*id);
            }
        }
        Ok(Pruned {
            executions: ids.len() as u64,
            events: if prune_events { events } else { 0 },
        })
    }

    /// The execution's keys and events if it may go now, else `None`.
    async fn prunable(
        &mut self,
        id: ExecutionId,
        n: u32,
        with_events: bool,
    ) -> Result<Option<(Keys, Vec<Gone>)>, LedgerError> {
        let id_text = id.to_string();
        let Some(row) = self
            .conn
            .query_opt(
                "SELECT n, actor, intent_scope, fingerprint, operation_key, budget_keys, budget_at FROM executions WHERE id = $1",
                params![&id_text],
            )
            .await?
        else {
            return Ok(None);
        };
        if rows::get_i64(&row, "n")? != i64::from(n) {
            return Ok(None);
        }
        let keys = Keys {
            actor: rows::get_str(&row, "actor")?,
            intent_scope: rows::get_str(&row, "intent_scope")?,
            fingerprint: rows::get_str(&row, "fingerprint")?,
            operation_key: row.opt_text("operation_key")?,
            charged: Charged::from_row(&row)?,
        };
        if !with_events {
            return Ok(Some((keys, Vec::new())));
        }
        let mut events = Vec::with_capacity(n as usize);
        for k in 1..=n {
            let Some(row) = self
                .conn
                .query_opt(
                    "SELECT chain, seq, hash, prev_hash FROM events WHERE execution_id = $1 AND n = $2",
                    params![&id_text, i64::from(k)],
                )
                .await?
            else {
                return Ok(None);
            };
            let seq = u64::try_from(rows::get_i64(&row, "seq")?)
                .map_err(|e| LedgerError::Corrupt(e.to_string()))?;
            if rows::get_str(&row, "chain")? != self.chain || seq >= self.head {
                return Ok(None);
            }
            events.push(Gone {
                seq,
                hash: rows::hash_from_hex(&rows::get_str(&row, "hash")?)?,
                prev_hash: rows::hash_from_hex(&rows::get_str(&row, "prev_hash")?)?,
            });
        }
        Ok(Some((keys, events)))
    }

    /// Deletes the events `from..=to` (seq, hash before, hash of the last), merging the range
    /// with pruned ranges that touch it, and signs the merged range.
    async fn replace_events(
        &mut self,
        (from, to, before_hash, to_hash): (u64, u64, [u8; 32], [u8; 32]),
        now: Timestamp,
    ) -> Result<(), LedgerError> {
        let chain = self.chain.to_string();
        let (mut from, mut to, mut before_hash, mut to_hash) = (from, to, before_hash, to_hash);
        if let Some(row) = self
            .conn
            .query_opt(
                "SELECT from_seq, before_hash FROM pruned_ranges WHERE chain = $1 AND to_seq = $2",
                params![&chain, from as i64 - 1],
            )
            .await?
        {
            from = rows::get_i64(&row, "from_seq")? as u64;
            before_hash = rows::hash_from_hex(&rows::get_str(&row, "before_hash")?)?;
        }
        if let Some(row) = self
            .conn
            .query_opt(
                "SELECT to_seq, to_hash FROM pruned_ranges WHERE chain = $1 AND from_seq = $2",
                params![&chain, to as i64 + 1],
            )
            .await?
        {
            to = rows::get_i64(&row, "to_seq")? as u64;
            to_hash = rows::hash_from_hex(&rows::get_str(&row, "to_hash")?)?;
        }
        let key = self.key.ok_or(LedgerError::NoSigningKey)?;
        let range = PrunedRange::sign(key, &chain, (from, to), before_hash, to_hash, now)?;
        let (lo, hi) = (from as i64, to as i64);
        for sql in [
            "DELETE FROM events WHERE chain = $1 AND seq >= $2 AND seq <= $3",
            "DELETE FROM pruned_ranges WHERE chain = $1 AND from_seq >= $2 AND to_seq <= $3",
            // Inside the range only its last hash is left to check a checkpoint against.
            "DELETE FROM checkpoints WHERE chain = $1 AND seq >= $2 AND seq < $3",
        ] {
            self.conn.exec(sql, params![&chain, lo, hi]).await?;
        }
        self.conn
            .exec(
                "INSERT INTO pruned_ranges (chain, from_seq, to_seq, before_hash, to_hash, at, key_id, signature) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                params![
                    &chain,
                    lo,
                    hi,
                    hexdigits::encode(range.before_hash),
                    hexdigits::encode(range.to_hash),
                    range.at.0,
                    &range.key_id,
                    &range.signature
                ],
            )
            .await?;
        Ok(())
    }
}

/// Consecutive seqs as ranges: (first, last, hash before the first, hash of the last).
fn runs(gone: &[Gone]) -> Vec<(u64, u64, [u8; 32], [u8; 32])> {
    let mut out: Vec<(u64, u64, [u8; 32], [u8; 32])> = Vec::new();
    for g in gone {
        match out.last_mut() {
            Some(last) if last.1 + 1 == g.seq => {
                last.1 = g.seq;
                last.3 = g.hash;
            }
            _ => out.push((g.seq, g.seq, g.prev_hash, g.hash)),
        }
    }
    out
}
