//! The audit record as stored: each chain's head, the signed checkpoints and pruned ranges,
//! and every event in storage order.

use std::path::Path;

use postern_audit::{ChainedEvent, Checkpoint};

use super::StoreReader;
use crate::db;
use crate::error::LedgerError;
use crate::rows;

impl StoreReader {
    /// Every chain with its head position.
    pub async fn chain_heads(&self) -> Result<Vec<(String, u64)>, LedgerError> {
        // SQLite's writer reads its head from the last event and leaves the head row alone, so
        // there the events say where each chain ends (an export's header once said nothing).
        let q = if self.sqlite_file.is_some() {
            "SELECT chain, MAX(seq) AS head_seq FROM events GROUP BY chain ORDER BY chain"
        } else {
            "SELECT chain, head_seq FROM chains ORDER BY chain"
        };
        sqlx::query(q)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|r| {
                Ok((
                    rows::get_str(r, "chain")?,
                    rows::get_i64(r, "head_seq")? as u64,
                ))
            })
            .collect()
    }

    /// Every chain's last event (seq and hash), from the events themselves: what an export's
    /// signed header names as the end of each chain.
    pub async fn chain_head_events(&self) -> Result<Vec<postern_audit::ChainHead>, LedgerError> {
        sqlx::query("SELECT e.chain AS chain, e.seq AS seq, e.hash AS hash FROM events e JOIN (SELECT chain, MAX(seq) AS head FROM events GROUP BY chain) h ON e.chain = h.chain AND e.seq = h.head ORDER BY e.chain")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|r| {
                Ok(postern_audit::ChainHead {
                    chain: rows::get_str(r, "chain")?,
                    seq: rows::get_i64(r, "seq")? as u64,
                    hash: rows::hash_from_hex(&rows::get_str(r, "hash")?)?,
                })
            })
            .collect()
    }

    /// Every signed checkpoint, by chain and position.
    pub async fn checkpoints(&self) -> Result<Vec<Checkpoint>, LedgerError> {
        sqlx::query(&format!(
            "SELECT {} FROM checkpoints ORDER BY chain, seq",
            rows::CHECKPOINT_COLUMNS
        ))
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(rows::checkpoint)
        .collect()
    }

    /// Every signed pruned-range statement (what retention left of removed events).
    pub async fn pruned_ranges(&self) -> Result<Vec<postern_audit::PrunedRange>, LedgerError> {
        sqlx::query("SELECT chain, from_seq, to_seq, before_hash, to_hash, at, key_id, signature FROM pruned_ranges ORDER BY chain, from_seq")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(rows::pruned_range)
            .collect()
    }

    /// Streams every event in storage order, a page at a time. A row that cannot be decoded is
    /// passed as an error with its position so a verifier can report it and go on.
    pub async fn scan_events(
        &self,
        mut each: impl FnMut(Result<ChainedEvent, (i64, String)>),
    ) -> Result<(), LedgerError> {
        if let Some(file) = &self.sqlite_file {
            return scan_sqlite_events(file, each);
        }
        let mut after: i64 = 0;
        loop {
            let q = format!(
                "SELECT * FROM (SELECT ROW_NUMBER() OVER (ORDER BY chain, seq) AS pos, {cols} FROM events ORDER BY chain, seq) AS t WHERE pos > $1 ORDER BY pos LIMIT 10000",
                cols = rows::EVENT_COLUMNS
            );
            let page = sqlx::query(&q).bind(after).fetch_all(&self.pool).await?;
            if page.is_empty() {
                return Ok(());
            }
            for row in &page {
                after = rows::get_i64(row, "pos")?;
                each(rows::event(row).map_err(|e| (after, e.to_string())));
            }
        }
    }
}

/// SQLite's event scan: in physical insertion order (rowid), so a moved row shows as a reorder;
/// one read transaction, straight through rusqlite on the caller's thread (through sqlx every
/// row crossed to its worker thread and back: ~19 µs a row, against ~2 µs here).
fn scan_sqlite_events(
    file: &Path,
    mut each: impl FnMut(Result<ChainedEvent, (i64, String)>),
) -> Result<(), LedgerError> {
    let sqlite = crate::error::sqlite_error;
    // One thread uses this connection: no mutex (column lookups by name took it every time).
    let flags =
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = rusqlite::Connection::open_with_flags(file, flags).map_err(sqlite)?;
    let mut stmt = conn
        .prepare(&format!(
            "SELECT rowid AS pos, {} FROM events ORDER BY rowid",
            rows::EVENT_COLUMNS
        ))
        .map_err(sqlite)?;
    let names: Vec<String> = stmt.column_names().iter().map(|n| n.to_string()).collect();
    let mut found = stmt.query([]).map_err(sqlite)?;
    while let Some(row) = found.next().map_err(sqlite)? {
        let pos: i64 = row.get(0).map_err(sqlite)?;
        let row = db::NamedRow { row, names: &names };
        each(rows::event(&row).map_err(|e| (pos, e.to_string())));
    }
    Ok(())
}
