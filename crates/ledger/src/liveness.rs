//! Is the instance that dispatched an execution still alive? Only a stopped instance's
//! `dispatched` executions may be declared `outcome_unknown`; a live one is still waiting for
//! the target's answer.
//!
//! SQLite (one host): each instance holds an exclusive lock on its own file beside the
//! database for as long as it runs; the OS drops the lock when the process dies, even by
//! `kill -9`. PostgreSQL (several hosts): each instance heartbeats its row in `instances`; one
//! silent for longer than the lease is taken as stopped.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use postern_core::Timestamp;
use sqlx::AnyPool;

use crate::error::LedgerError;
use crate::lease::LeaseLost;
use crate::ops::Op;
use crate::write_path::WritePath;
use crate::writer::now_millis;
use crate::{db, rows, Ledger, RecoveryReport};

pub(crate) enum Liveness {
    LockFiles { dir: PathBuf, _own: File },
    Heartbeat { lease: Duration },
}

impl Liveness {
    pub fn lock_files(db_path: &str, instance: &str) -> Result<Liveness, LedgerError> {
        let dir = PathBuf::from(format!("{db_path}.instances"));
        std::fs::create_dir_all(&dir)?;
        let own = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(format!("{instance}.lock")))?;
        own.try_lock().map_err(|e| {
            LedgerError::Io(std::io::Error::other(format!(
                "cannot lock own instance file: {e}"
            )))
        })?;
        Ok(Liveness::LockFiles { dir, _own: own })
    }

    /// For lock files: whether `instance` is gone (its lock can be taken). Heartbeats are
    /// checked in SQL (the takeover scan).
    pub fn lock_file_dead(&self, instance: &str) -> bool {
        let Liveness::LockFiles { dir, .. } = self else {
            return false;
        };
        let path = dir.join(format!("{instance}.lock"));
        match OpenOptions::new().write(true).open(&path) {
            Err(_) => true,
            Ok(f) => match f.try_lock() {
                Ok(()) => {
                    // Dead: clean up its file (harmless if another scanner got there first).
                    drop(f);
                    let _ = std::fs::remove_file(&path);
                    true
                }
                Err(_) => false,
            },
        }
    }
}

/// An instance row as the takeover scan reads it.
struct InstanceRow {
    heartbeat_at: i64,
    taken_over_by: Option<String>,
}

/// The takeover scan's part of a ledger: it reads the store and records through the writer.
struct Takeover<'l> {
    pool: &'l AnyPool,
    liveness: &'l Liveness,
    /// This instance: its own executions are never taken over.
    instance: &'l str,
    writes: &'l WritePath,
}

impl Takeover<'_> {
    /// Records `outcome_unknown` for every execution a stopped instance left `dispatched`.
    async fn scan(&self) -> Result<RecoveryReport, LedgerError> {
        let rows = sqlx::query("SELECT id, owner FROM executions WHERE state = 'dispatched'")
            .fetch_all(self.pool)
            .await?;
        let mut report = RecoveryReport::default();
        if rows.is_empty() {
            return Ok(report);
        }
        let cutoff = match &self.liveness {
            Liveness::Heartbeat { lease } => {
                Some(now_millis() - i64::try_from(lease.as_millis()).unwrap_or(i64::MAX))
            }
            Liveness::LockFiles { .. } => None,
        };
        let mut instances: HashMap<String, InstanceRow> = HashMap::new();
        if cutoff.is_some() {
            for r in sqlx::query("SELECT id, heartbeat_at, taken_over_by FROM instances")
                .fetch_all(self.pool)
                .await?
            {
                instances.insert(
                    rows::get_str(&r, "id")?,
                    InstanceRow {
                        heartbeat_at: rows::get_i64(&r, "heartbeat_at")?,
                        taken_over_by: db::RowAccess::opt_text(&r, "taken_over_by")?,
                    },
                );
            }
        }
        let mut claimed: HashMap<String, bool> = HashMap::new();
        for row in rows {
            let id = rows::parse_id(&rows::get_str(&row, "id")?)?;
            let Some(owner) = db::RowAccess::opt_text(&row, "owner")? else {
                continue;
            };
            if owner == self.instance {
                continue;
            }
            let ours = match cutoff {
                None => self.liveness.lock_file_dead(&owner),
                Some(cutoff) => match claimed.get(&owner) {
                    Some(ours) => *ours,
                    None => {
                        let ours = self.claim(&owner, &instances, cutoff).await?;
                        claimed.insert(owner.clone(), ours);
                        ours
                    }
                },
            };
            if ours
                && self
                    .writes
                    .call(|tx| Op::Abandoned(id, owner, Timestamp(now_millis()), tx))
                    .await?
            {
                report.marked_unknown.push(id);
            }
        }
        Ok(report)
    }

    /// Whether this instance takes over `owner`'s executions: its lease expired (or its row is
    /// gone) and this instance claimed it, or claimed it before, or its claimant is gone too.
    async fn claim(
        &self,
        owner: &str,
        instances: &HashMap<String, InstanceRow>,
        cutoff: i64,
    ) -> Result<bool, LedgerError> {
        let dead = |i: &str| instances.get(i).is_none_or(|r| r.heartbeat_at < cutoff);
        let Some(row) = instances.get(owner) else {
            // Closed (its row deleted) with executions still dispatched: anyone records them.
            return Ok(true);
        };
        if row.heartbeat_at >= cutoff {
            return Ok(false);
        }
        match &row.taken_over_by {
            Some(by) if *by == self.instance => Ok(true),
            Some(by) => Ok(dead(by)),
            None => {
                let (owner, now) = (owner.to_string(), Timestamp(now_millis()));
                let won = self
                    .writes
                    .call(|tx| Op::TakeOver(owner.clone(), Timestamp(cutoff), now, tx))
                    .await?;
                if won {
                    tracing::warn!(instance = %owner, "took over a gateway instance whose lease expired: its dispatched executions are recorded outcome_unknown");
                }
                Ok(won)
            }
        }
    }
}

impl Ledger {
    /// The recovery scan: every execution left `dispatched` by a stopped instance is recorded
    /// `outcome_unknown` (and reported). Nothing is retried here. On PostgreSQL a stopped
    /// instance is one whose lease expired: the first survivor to claim it (`TakeOver`) takes
    /// its executions over, or any survivor when that claimant is gone too; each execution is
    /// recorded once whoever races (the writer re-checks state and owner under a row lock).
    pub async fn recover(&self) -> Result<RecoveryReport, LedgerError> {
        let takeover = Takeover {
            pool: &self.pool,
            liveness: &self.liveness,
            instance: &self.instance,
            writes: &self.writes,
        };
        takeover.scan().await
    }

    /// Runs the takeover scan every half lease (PostgreSQL) or every few seconds (SQLite,
    /// where a crashed process's lock is gone at once), for as long as the ledger lives.
    pub fn keep_taking_over(self: &Arc<Self>) {
        let every = match &self.liveness {
            Liveness::Heartbeat { lease } => (*lease / 2).max(Duration::from_millis(100)),
            Liveness::LockFiles { .. } => Duration::from_secs(5),
        };
        let ledger = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(ledger) = ledger.upgrade() else {
                    return;
                };
                match ledger.recover().await {
                    Ok(r) => {
                        for id in r.marked_unknown {
                            tracing::warn!(execution_id = %id, "taken over from a stopped gateway instance: now outcome_unknown (a retry recovers it by its class)");
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "the takeover scan could not run"),
                }
            }
        });
    }

    /// Whether this instance may send a request now (see `lease`): it holds its lease.
    pub fn may_send(&self) -> Result<(), LeaseLost> {
        self.lease.may_send()
    }

    /// Resolves once another instance took this one over (never on SQLite): the process
    /// should stop, and a restarted one rejoins as a new instance.
    pub async fn taken_over(&self) -> String {
        self.lease.taken_over().await
    }
}
