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

use postern_audit::{Checkpoint, CheckpointLink, GENESIS_HASH};
use postern_core::{hexdigits, Timestamp};

use super::transaction::{Head, Transaction};

/// How many checkpoints another process may have signed between two of this writer's before
/// following them back is given up (it then refuses, saying so).
const MAX_FOREIGN_CHECKPOINTS: usize = 10_000;
use super::chain_check::StoredChain;
use crate::db::{params, WriteConn};
use crate::error::LedgerError;

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
    /// The checkpoints the open transaction signed, of this chain (the last becomes
    /// `last_checkpoint` at commit) or of a chain taken over.
    pub signing: Vec<Checkpoint>,
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

impl OwnChain {
    /// A transaction committed with `head`: the last checkpoint it signed of `chain` is the
    /// one the next names; each goes to the witness.
    pub(super) fn committed(&mut self, head: Head, chain: &str) {
        self.committed = Some(head);
        for c in std::mem::take(&mut self.signing) {
            if let Some(sink) = &self.sink {
                (sink.0)(&c);
            }
            if c.chain == chain {
                self.last_checkpoint = Some(c.link());
                if self.sink.is_some() {
                    self.witnessed = Some(c);
                }
            }
        }
    }

    /// A transaction ended without a known commit: what it signed is forgotten, and when the
    /// commit's fate is unknown the next checkpoint first reads the last one back.
    pub(super) fn not_committed(&mut self, fate_unknown: bool) {
        let signed = !std::mem::take(&mut self.signing).is_empty();
        if signed && fate_unknown {
            self.start_checked = false;
        }
    }

    /// The checkpoint of `chain` the open transaction already signed, if any: a second one
    /// names it, with no check against the store (which holds it uncommitted).
    pub(super) fn signed_in_transaction(&self, chain: &str) -> Option<CheckpointLink> {
        let own = self.signing.iter().rev();
        own.filter(|c| c.chain == chain)
            .map(Checkpoint::link)
            .next()
    }
}

/// The writer's part that signs: it borrows the open transaction and what the writer knows
/// of its own chain, and checks the stored chain ([`StoredChain`]) before it vouches for it.
pub(super) struct Signer<'w, C> {
    pub(super) tx: &'w mut Transaction<C>,
    pub(super) own: &'w mut OwnChain,
}

impl<C: WriteConn> Signer<'_, C> {
    /// The stored chains, read over the writer's connection.
    fn stored(&mut self) -> StoredChain<'_, C> {
        StoredChain {
            conn: &mut self.tx.conn,
            key: self.tx.cfg.signing_key.as_deref(),
        }
    }

    /// Signs a checkpoint of the head, if it holds anything not yet vouched for and
    /// [`Signer::may_sign`] allows it.
    pub(super) async fn checkpoint(
        &mut self,
        now: Timestamp,
    ) -> Result<Option<Checkpoint>, LedgerError> {
        let key = self
            .tx
            .cfg
            .signing_key
            .clone()
            .ok_or(LedgerError::NoSigningKey)?;
        // A second checkpoint in one transaction names the first (still uncommitted).
        let in_transaction = self.own.signed_in_transaction(&self.tx.cfg.chain);
        match (in_transaction, self.own.trust.refused()) {
            (_, Some(why)) => return Err(LedgerError::SigningRefused(why)),
            (None, None) => self.may_sign().await?,
            (Some(_), None) => {}
        }
        let last = in_transaction.or(self.own.last_checkpoint);
        if self.tx.head.0 == 0 || last.is_some_and(|l| l.seq == self.tx.head.0) {
            // Nothing new to vouch for (the head is already signed).
            return Ok(None);
        }
        let c = key.checkpoint(&self.tx.cfg.chain, self.tx.head, now, last)?;
        self.store_checkpoint(&c).await?;
        self.tx.appended_since_checkpoint = 0;
        Ok(Some(c))
    }

    /// Writes a checkpoint this transaction signed (it counts once committed).
    pub(super) async fn store_checkpoint(&mut self, c: &Checkpoint) -> Result<(), LedgerError> {
        let prev = c
            .prev
            .map(|p| (p.seq as i64, hexdigits::encode(p.head_hash)));
        self.tx.later("INSERT INTO checkpoints (chain, seq, head_hash, at, key_id, signature, prev_seq, prev_hash) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING", params![&c.chain, c.seq as i64, hexdigits::encode(c.head_hash), c.at.0, &c.key_id, &c.signature, prev.as_ref().map(|p| p.0), prev.map(|p| p.1)]).await?;
        self.own.signing.push(c.clone());
        Ok(())
    }

    /// Takes the head a transaction read from the store: when it is not the one this writer
    /// committed, the stored chain must run on from it.
    pub(super) async fn adopt_head(&mut self, loaded: Head) -> Result<(), LedgerError> {
        let check = self.tx.cfg.signing_key.is_some() && self.own.trust.refused().is_none();
        match self.own.committed {
            Some(committed) if committed != loaded && check => {
                let chain = self.tx.cfg.chain.clone();
                if let Err(why) = self.stored().joins(&chain, committed, loaded).await? {
                    self.own.trust.refuse(why);
                }
            }
            _ => {}
        }
        self.own.committed = Some(loaded);
        Ok(())
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
        let (chain, head) = (self.tx.cfg.chain.clone(), self.tx.stored_head());
        if let Err(why) = self.stored().joins(&chain, start, head).await? {
            return Ok(Err(why));
        }
        self.own.last_checkpoint = from.map(|c| c.link());
        self.own.start_checked = true;
        Ok(Ok(()))
    }

    /// The store's last checkpoint of this chain must be the one this writer signed last, or
    /// lead back to it through the checkpoints another process sharing the chain (an export,
    /// a second gateway on one SQLite file) signed since, each naming the one before.
    async fn follow_stored_checkpoints(&mut self) -> Result<Result<(), String>, LedgerError> {
        let chain = self.tx.cfg.chain.clone();
        let known = self.own.last_checkpoint;
        let Some(latest) = self.stored().latest_stored_checkpoint(&chain).await? else {
            return Ok(match known {
                None => Ok(()),
                Some(k) => Err(format!(
                    "the checkpoint at seq {} this gateway signed is gone from the store",
                    k.seq
                )),
            });
        };
        let mut at = latest.clone();
        for _ in 0..MAX_FOREIGN_CHECKPOINTS {
            if Some(at.link()) == known || (known.is_none() && at.prev.is_none()) {
                self.own.last_checkpoint = Some(latest.link());
                return Ok(Ok(()));
            }
            let before = match (at.prev, known) {
                (Some(p), Some(k)) if p.seq >= k.seq => p,
                (Some(p), None) => p,
                _ => break,
            };
            match self.signed_checkpoint_at(&chain, before).await? {
                Some(c) => at = c,
                None => break,
            }
        }
        Ok(Err(match known {
            Some(k) => format!(
                "the checkpoint at seq {} this gateway signed is no longer in the store's chain of checkpoints (its last is at seq {})",
                k.seq, latest.seq
            ),
            None => format!(
                "a checkpoint at seq {} appeared that leads back to no checkpoint this gateway knows",
                latest.seq
            ),
        }))
    }

    /// The stored checkpoint `link` names, if it is there, as named, with this key's
    /// signature.
    async fn signed_checkpoint_at(
        &mut self,
        chain: &str,
        link: CheckpointLink,
    ) -> Result<Option<Checkpoint>, LedgerError> {
        let Some(key) = self.tx.cfg.signing_key.clone() else {
            return Err(LedgerError::NoSigningKey);
        };
        let c = self.stored().stored_checkpoint_at(chain, link.seq).await?;
        Ok(c.filter(|c| c.link() == link && key.verifying_key().verifies(c)))
    }

    /// The last checkpoint of this chain signed with this gateway's key, held to the
    /// witness's: the witness may not know of one the store lacks.
    async fn last_signed_before(
        &mut self,
    ) -> Result<Result<Option<Checkpoint>, String>, LedgerError> {
        let chain = self.tx.cfg.chain.clone();
        let stored = match self.stored().latest_stored_checkpoint(&chain).await {
            Ok(c) => c,
            Err(LedgerError::SigningRefused(why)) => return Ok(Err(why)),
            Err(e) => return Err(e),
        };
        if let Some(w) = self.own.witnessed.clone() {
            let kept = match &stored {
                Some(s) if s.seq >= w.seq => {
                    self.stored()
                        .stored_checkpoint_at(&chain, w.seq)
                        .await?
                        .map(|c| c.link())
                        == Some(w.link())
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

    /// Signs the head of the chain of an instance this one just took over (PostgreSQL: each
    /// instance writes its own chain, and a stopped one never signs its tail again), once the
    /// stored chain is checked from its last checkpoint with this key. A chain that does not
    /// check out is left unsigned and said, without stopping this instance's own signing.
    pub(super) async fn sign_taken_over(
        &mut self,
        chain: &str,
        now: postern_core::Timestamp,
    ) -> Result<(), LedgerError> {
        let Some(key) = self.tx.cfg.signing_key.clone() else {
            return Ok(());
        };
        let Some(head) = self.stored().stored_chain_head(chain).await? else {
            return Ok(());
        };
        let last = match self.stored().latest_stored_checkpoint(chain).await {
            Ok(last) => last,
            Err(LedgerError::SigningRefused(why)) => {
                tracing::error!("postern: the taken-over chain {chain} is left unsigned: {why}");
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let from = last
            .as_ref()
            .map_or((0, GENESIS_HASH), |c| (c.seq, c.head_hash));
        if head.0 == 0 || from.0 == head.0 {
            return Ok(());
        }
        if let Err(why) = self.stored().joins(chain, from, head).await? {
            tracing::error!("postern: the taken-over chain {chain} is left unsigned: {why}");
            return Ok(());
        }
        let c = key.checkpoint(chain, head, now, last.map(|c| c.link()))?;
        self.store_checkpoint(&c).await
    }
}
