//! The store's side of the signer's checks (`trust.rs`), for any chain: whether the stored
//! events run from a head this writer vouches for to another, and which checkpoints are
//! stored. One row a round trip: these run when a head moved behind the writer's back, once
//! after start-up, and when another instance's chain is taken over.

use postern_audit::{event_hash, Checkpoint, SigningKey};

use super::transaction::Head;
use crate::db::{params, WriteConn};
use crate::error::LedgerError;
use crate::rows;

/// The stored chains as the signer checks them, read over the writer's connection (inside its
/// open transaction, if one is open).
pub(super) struct StoredChain<'c, C> {
    pub(super) conn: &'c mut C,
    /// This gateway's signing key: only checkpoints and pruned ranges it signed are followed.
    pub(super) key: Option<&'c SigningKey>,
}

impl<C: WriteConn> StoredChain<'_, C> {
    /// The store's latest checkpoint of this chain with this gateway's key (a stored one
    /// whose signature fails is reported, not used).
    pub(super) async fn latest_stored_checkpoint(
        &mut self,
        chain: &str,
    ) -> Result<Option<Checkpoint>, LedgerError> {
        let Some(key) = self.key else {
            return Err(LedgerError::NoSigningKey);
        };
        let public = key.verifying_key();
        let q = format!(
            "SELECT {} FROM checkpoints WHERE chain = $1 AND key_id = $2 ORDER BY seq DESC LIMIT 1",
            rows::CHECKPOINT_COLUMNS
        );
        match self
            .conn
            .query_opt(&q, params![chain, public.key_id()])
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

    pub(super) async fn stored_checkpoint_at(
        &mut self,
        chain: &str,
        seq: u64,
    ) -> Result<Option<Checkpoint>, LedgerError> {
        let q = format!(
            "SELECT {} FROM checkpoints WHERE chain = $1 AND seq = $2",
            rows::CHECKPOINT_COLUMNS
        );
        match self.conn.query_opt(&q, params![chain, seq as i64]).await? {
            Some(row) => Ok(Some(rows::checkpoint(&row)?)),
            None => Ok(None),
        }
    }

    /// Whether the stored chain runs from `from` (committed or checked by this writer) to
    /// `to`: `Err` says where it does not. One event a round trip: this runs only when the
    /// head moved behind the writer's back, and once after start-up.
    pub(super) async fn joins(
        &mut self,
        chain: &str,
        from: Head,
        to: Head,
    ) -> Result<Result<(), String>, LedgerError> {
        if to.0 < from.0 {
            return Ok(Err(format!(
                "the chain's head went back from seq {} to seq {}",
                from.0, to.0
            )));
        }
        if from.0 > 0 {
            match self.stored_event_hash(chain, from.0).await? {
                Some(h) if h == from.1 => {}
                Some(_) => {
                    return Ok(Err(format!(
                    "the event at seq {} no longer has the hash this gateway committed or signed",
                    from.0
                )))
                }
                None if self.pruned_to(chain, from).await? => {}
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
            if let Some((to_seq, to_hash)) = self.pruned_from(chain, seq, prev).await? {
                (seq, prev) = (to_seq + 1, to_hash);
                continue;
            }
            let q = format!(
                "SELECT {} FROM events WHERE chain = $1 AND seq = $2",
                rows::EVENT_COLUMNS
            );
            let Some(row) = self.conn.query_opt(&q, params![chain, seq as i64]).await? else {
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

    async fn stored_event_hash(
        &mut self,
        chain: &str,
        seq: u64,
    ) -> Result<Option<[u8; 32]>, LedgerError> {
        let row = self
            .conn
            .query_opt(
                "SELECT hash FROM events WHERE chain = $1 AND seq = $2",
                params![chain, seq as i64],
            )
            .await?;
        row.map(|r| rows::hash_from_hex(&rows::get_str(&r, "hash")?))
            .transpose()
    }

    /// Whether a signed pruned range ends at `head` with its hash.
    async fn pruned_to(&mut self, chain: &str, head: Head) -> Result<bool, LedgerError> {
        let row = self
            .conn
            .query_opt(
                "SELECT to_hash FROM pruned_ranges WHERE chain = $1 AND to_seq = $2",
                params![chain, head.0 as i64],
            )
            .await?;
        Ok(match row {
            Some(r) => rows::hash_from_hex(&rows::get_str(&r, "to_hash")?)? == head.1,
            None => false,
        })
    }

    /// A pruned range starting at `seq` after `prev`, signed with this gateway's key: where
    /// it ends.
    async fn pruned_from(
        &mut self,
        chain: &str,
        seq: u64,
        prev: [u8; 32],
    ) -> Result<Option<Head>, LedgerError> {
        let q = "SELECT chain, from_seq, to_seq, before_hash, to_hash, at, key_id, signature FROM pruned_ranges WHERE chain = $1 AND from_seq = $2";
        let Some(row) = self.conn.query_opt(q, params![chain, seq as i64]).await? else {
            return Ok(None);
        };
        let r = rows::pruned_range(&row)?;
        let signed = self.key.is_some_and(|k| r.is_signed_by(&k.verifying_key()));
        Ok((signed && r.before_hash == prev).then_some((r.to, r.to_hash)))
    }

    /// A chain's head as its row holds it (PostgreSQL keeps one row a chain); `None` when
    /// the chain has no row.
    pub(super) async fn stored_chain_head(
        &mut self,
        chain: &str,
    ) -> Result<Option<Head>, LedgerError> {
        let row = self
            .conn
            .query_opt(
                "SELECT head_seq, head_hash FROM chains WHERE chain = $1",
                params![chain],
            )
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let seq = u64::try_from(rows::get_i64(&row, "head_seq")?)
            .map_err(|e| LedgerError::Corrupt(e.to_string()))?;
        Ok(Some((
            seq,
            rows::hash_from_hex(&rows::get_str(&row, "head_hash")?)?,
        )))
    }
}
