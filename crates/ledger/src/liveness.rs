//! Is the instance that dispatched an execution still alive? Only a stopped instance's
//! `dispatched` executions may be declared `outcome_unknown`; a live one is still waiting for
//! the target's answer.
//!
//! SQLite (one host): each instance holds an exclusive lock on its own file beside the
//! database for as long as it runs; the OS drops the lock when the process dies, even by
//! `kill -9`. PostgreSQL (several hosts): each instance heartbeats its row in `instances`; one
//! silent for longer than the lease is taken as stopped.

use std::fs::{File, OpenOptions};
use std::path::PathBuf;
use std::time::Duration;

use crate::error::LedgerError;

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
    /// checked in SQL, see `Ledger::dead_instances`.
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
