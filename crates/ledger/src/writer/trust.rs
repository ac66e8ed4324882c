//! The signer signs only what it wrote (issue 47). Whoever can write the store can rewrite
//! events and recompute every later hash; a signer that signed whatever head it read back
//! would vouch for that history. So:
//! - the writer keeps the head it committed (in memory); when a transaction finds another head
//!   in the store, the stored chain must run on from the committed one (the event at its seq
//!   still has its hash, every later event links and hashes), else signing stops;
//! - before its first signature after start-up it checks the same from the last checkpoint it
//!   signed before (the store's latest with its key, held to the witness's latest when one is
//!   kept) to the stored head;
//! - each checkpoint names the one signed before it (in memory), so a deleted one is a gap.
//!
//! Refusing to sign never stops the gateway: calls are still recorded, and the refusal is on
//! `postern status`, a metric and the error log until an operator looks.

use std::sync::{Arc, Mutex};

use postern_audit::{event_hash, Checkpoint, CheckpointLink, GENESIS_HASH};

use super::commit::Head;
use super::Writer;
use crate::db::{params, WriteConn};
use crate::error::LedgerError;
use crate::rows;

/// Whether the gateway may still sign its chain, shared by the writer and the ledger's
/// readers (status, metrics).
#[derive(Debug, Default)]
pub struct SigningTrust {
    refused: Mutex<Option<String>>,
}

impl SigningTrust {
    /// Why checkpoints are no longer signed, if they are not.
    pub fn refused(&self) -> Option<String> {
        self.refused.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// Stops signing for good (until a restart re-checks), saying why once.
    pub(crate) fn refuse(&self, why: String) {
        let Ok(mut refused) = self.refused.lock() else {
            return;
        };
        if refused.is_none() {
            tracing::error!(
                "postern: the audit chain in the store is not the one this gateway wrote, so it signs no checkpoint any more: {why}"
            );
            *refused = Some(why);
        }
    }
}

/// What the writer knows of its own chain between transactions.
#[derive(Default)]
pub(crate) struct OwnChain {
    /// The head this writer last committed, or read and found joined to it; `None` before
    /// the first transaction.
    pub committed: Option<Head>,
    /// Whether the chain was checked from the last earlier checkpoint since start-up.
    pub start_checked: bool,
    /// The last checkpoint of the chain that is committed: the next one names it.
    pub last_checkpoint: Option<CheckpointLink>,
    /// The checkpoint the open transaction signed (it becomes `last_checkpoint` at commit).
    pub signing: Option<Checkpoint>,
    pub trust: Arc<SigningTrust>,
    /// The latest checkpoint a witness outside the store holds for this chain.
    pub witnessed: Option<Checkpoint>,
    /// Told of each committed checkpoint (the witness).
    pub sink: Option<CheckpointSink>,
}

/// Receives every checkpoint once its transaction committed (the witness).
#[derive(Clone)]
pub struct CheckpointSink(pub Arc<dyn Fn(&Checkpoint) + Send + Sync>);

impl std::fmt::Debug for CheckpointSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CheckpointSink")
    }
}

impl<C: WriteConn> Writer<C> {
    /// Takes the head a transaction read from the store: when it is not the one this writer
    /// committed, the stored chain must run on from it.
    pub(super) async fn adopt_head(&mut self, loaded: Head) -> Result<(), LedgerError> {
        let check = self.cfg.signing_key.is_some() && self.own.trust.refused().is_none();
        match self.own.committed {
            Some(committed) if committed != loaded && check => {
                if let Err(why) = self.joins(committed, loaded).await? {
                    self.own.trust.refuse(why);
                }
            }
            _ => {}
        }
        self.own.committed = Some(loaded);
        Ok(())
    }

    /// A transaction committed: the checkpoint it signed is the one the next names.
    pub(super) fn committed(&mut self) {
        self.own.committed = Some(self.head);
        if let Some(c) = self.own.signing.take() {
            self.own.last_checkpoint = Some(c.link());
            if let Some(sink) = &self.own.sink {
                (sink.0)(&c);
            }
        }
    }

    /// A transaction ended without a known commit: what it signed is forgotten, and when the
    /// commit's fate is unknown the next checkpoint first reads the last one back.
    pub(super) fn not_committed(&mut self, fate_unknown: bool) {
        if self.own.signing.take().is_some() && fate_unknown {
            self.own.start_checked = false;
        }
    }

    /// Whether a checkpoint of the head may be signed now: refused once the store was seen
    /// rewritten; checked from the last earlier checkpoint on the first; and the last
    /// checkpoint this writer knows must still be the store's last (or one a process sharing
    /// the chain signed after it, naming it).
    pub(super) async fn may_sign(&mut self) -> Result<(), LedgerError> {
        if let Some(why) = self.own.trust.refused() {
            return Err(LedgerError::SigningRefused(why));
        }
        let verdict = if self.own.start_checked {
            self.follow_stored_checkpoints().await?
        } else {
            self.check_since_start().await?
        };
        if let Err(why) = verdict {
            self.own.trust.refuse(why.clone());
            return Err(LedgerError::SigningRefused(why));
        }
        Ok(())
    }

    async fn check_since_start(&mut self) -> Result<Result<(), String>, LedgerError> {
        let from = match self.last_signed_before().await? {
            Ok(from) => from,
            Err(why) => return Ok(Err(why)),
        };
        let start = from
            .as_ref()
            .map_or((0, GENESIS_HASH), |c| (c.seq, c.head_hash));
        if let Err(why) = self.joins(start, self.stored_head()).await? {
            return Ok(Err(why));
        }
        self.own.last_checkpoint = from.map(|c| c.link());
        self.own.start_checked = true;
        Ok(Ok(()))
    }

    async fn follow_stored_checkpoints(&mut self) -> Result<Result<(), String>, LedgerError> {
        let stored = self.latest_stored_checkpoint().await?;
        let known = self.own.last_checkpoint;
        match (stored, known) {
            (Some(s), Some(k)) if s.link() == k => Ok(Ok(())),
            (Some(s), k) if s.prev == k && k.is_none_or(|k| s.seq > k.seq) => {
                // Signed by another process sharing this chain (an export), after ours.
                self.own.last_checkpoint = Some(s.link());
                Ok(Ok(()))
            }
            (None, None) => Ok(Ok(())),
            (_, Some(k)) => Ok(Err(format!(
                "the checkpoint at seq {} this gateway signed is no longer the store's last",
                k.seq
            ))),
            (Some(s), None) => Ok(Err(format!(
                "a checkpoint at seq {} appeared that names no checkpoint this gateway signed",
                s.seq
            ))),
        }
    }

    /// The store's latest checkpoint of this chain with this gateway's key (a stored one
    /// whose signature fails is reported, not used).
    async fn latest_stored_checkpoint(&mut self) -> Result<Option<Checkpoint>, LedgerError> {
        let Some(key) = self.cfg.signing_key.clone() else {
            return Err(LedgerError::NoSigningKey);
        };
        let public = key.verifying_key();
        let q = format!(
            "SELECT {} FROM checkpoints WHERE chain = $1 AND key_id = $2 ORDER BY seq DESC LIMIT 1",
            rows::CHECKPOINT_COLUMNS
        );
        match self
            .conn
            .query_opt(&q, params![&self.cfg.chain, public.key_id()])
            .await?
        {
            Some(row) => {
                let c = rows::checkpoint(&row)?;
                if public.verifies(&c) {
                    Ok(Some(c))
                } else {
                    Err(LedgerError::SigningRefused(format!(
                        "the stored checkpoint at seq {} does not carry this gateway's signature",
                        c.seq
                    )))
                }
            }
            None => Ok(None),
        }
    }

    /// The head as the store holds it in the open transaction: events this transaction
    /// linked but has not written yet are this writer's own.
    fn stored_head(&self) -> Head {
        self.pending
            .first()
            .map_or(self.head, |(e, _)| (e.body.seq - 1, e.prev_hash))
    }

    /// The last checkpoint of this chain signed with this gateway's key, held to the
    /// witness's: the witness may not know of one the store lacks.
    async fn last_signed_before(
        &mut self,
    ) -> Result<Result<Option<Checkpoint>, String>, LedgerError> {
        let stored = match self.latest_stored_checkpoint().await {
            Ok(c) => c,
            Err(LedgerError::SigningRefused(why)) => return Ok(Err(why)),
            Err(e) => return Err(e),
        };
        if let Some(w) = self.own.witnessed.clone() {
            let kept = match &stored {
                Some(s) if s.seq >= w.seq => {
                    self.stored_checkpoint_at(w.seq).await? == Some(w.link())
                }
                _ => false,
            };
            if !kept {
                return Ok(Err(format!(
                    "the witness holds the checkpoint at seq {} that the store no longer has",
                    w.seq
                )));
            }
        }
        Ok(Ok(stored))
    }

    async fn stored_checkpoint_at(
        &mut self,
        seq: u64,
    ) -> Result<Option<CheckpointLink>, LedgerError> {
        let q = format!(
            "SELECT {} FROM checkpoints WHERE chain = $1 AND seq = $2",
            rows::CHECKPOINT_COLUMNS
        );
        match self
            .conn
            .query_opt(&q, params![&self.cfg.chain, seq as i64])
            .await?
        {
            Some(row) => Ok(Some(rows::checkpoint(&row)?.link())),
            None => Ok(None),
        }
    }

    /// Whether the stored chain runs from `from` (committed or checked by this writer) to
    /// `to`: `Err` says where it does not. One event a round trip: this runs only when the
    /// head moved behind the writer's back, and once after start-up.
    async fn joins(&mut self, from: Head, to: Head) -> Result<Result<(), String>, LedgerError> {
        if to.0 < from.0 {
            return Ok(Err(format!(
                "the chain's head went back from seq {} to seq {}",
                from.0, to.0
            )));
        }
        if from.0 > 0 {
            match self.stored_event_hash(from.0).await? {
                Some(h) if h == from.1 => {}
                Some(_) => {
                    return Ok(Err(format!(
                    "the event at seq {} no longer has the hash this gateway committed or signed",
                    from.0
                )))
                }
                None if self.pruned_to(from).await? => {}
                None => {
                    return Ok(Err(format!(
                        "the event at seq {} this gateway committed or signed is gone",
                        from.0
                    )))
                }
            }
        }
        let (mut seq, mut prev) = (from.0 + 1, from.1);
        while seq <= to.0 {
            if let Some((to_seq, to_hash)) = self.pruned_from(seq, prev).await? {
                (seq, prev) = (to_seq + 1, to_hash);
                continue;
            }
            let q = format!(
                "SELECT {} FROM events WHERE chain = $1 AND seq = $2",
                rows::EVENT_COLUMNS
            );
            let Some(row) = self
                .conn
                .query_opt(&q, params![&self.cfg.chain, seq as i64])
                .await?
            else {
                return Ok(Err(format!("the event at seq {seq} is missing")));
            };
            let e = rows::event(&row)?;
            let intact = event_hash(&prev, &e.body).is_ok_and(|h| h == e.hash);
            if e.prev_hash != prev || !intact {
                return Ok(Err(format!(
                    "the event at seq {seq} does not link to or hash as the chain before it"
                )));
            }
            (seq, prev) = (seq + 1, e.hash);
        }
        if prev != to.1 {
            return Ok(Err(format!(
                "the chain's head at seq {} is not the hash of its last event",
                to.0
            )));
        }
        Ok(Ok(()))
    }

    async fn stored_event_hash(&mut self, seq: u64) -> Result<Option<[u8; 32]>, LedgerError> {
        let row = self
            .conn
            .query_opt(
                "SELECT hash FROM events WHERE chain = $1 AND seq = $2",
                params![&self.cfg.chain, seq as i64],
            )
            .await?;
        row.map(|r| rows::hash_from_hex(&rows::get_str(&r, "hash")?))
            .transpose()
    }

    /// Whether a signed pruned range ends at `head` with its hash.
    async fn pruned_to(&mut self, head: Head) -> Result<bool, LedgerError> {
        let row = self
            .conn
            .query_opt(
                "SELECT to_hash FROM pruned_ranges WHERE chain = $1 AND to_seq = $2",
                params![&self.cfg.chain, head.0 as i64],
            )
            .await?;
        Ok(match row {
            Some(r) => rows::hash_from_hex(&rows::get_str(&r, "to_hash")?)? == head.1,
            None => false,
        })
    }

    /// A pruned range starting at `seq` after `prev`, signed with this gateway's key: where
    /// it ends.
    async fn pruned_from(&mut self, seq: u64, prev: [u8; 32]) -> Result<Option<Head>, LedgerError> {
        let q = "SELECT chain, from_seq, to_seq, before_hash, to_hash, at, key_id, signature FROM pruned_ranges WHERE chain = $1 AND from_seq = $2";
        let Some(row) = self
            .conn
            .query_opt(q, params![&self.cfg.chain, seq as i64])
            .await?
        else {
            return Ok(None);
        };
        let r = rows::pruned_range(&row)?;
        let signed = self
            .cfg
            .signing_key
            .as_ref()
            .is_some_and(|k| r.is_signed_by(&k.verifying_key()));
        Ok((signed && r.before_hash == prev).then_some((r.to, r.to_hash)))
    }
}
