//! Replica leases on PostgreSQL (issue 19): each instance renews its row's `heartbeat_at`
//! through its writer every third of the lease; an instance silent for longer than the lease
//! is taken over by exactly one survivor, which fences it (`taken_over_by`) and records its
//! `dispatched` executions `outcome_unknown` — never released, never re-sent by the scan.
//!
//! Timing assumptions (documented in ARCHITECTURE.md):
//! - A replica sends a request only while its last renewal is younger than two thirds of the
//!   lease ([`LeaseState::may_send`]); a survivor takes over only once the renewal is older
//!   than the whole lease by its own clock. The third in between absorbs clock skew between
//!   replicas and the database, which must stay under lease / 3.
//! - A commit that would dispatch reads its own instance row `FOR SHARE` in the same
//!   transaction: a taken-over (or lapsed) instance dispatches nothing, and a takeover that
//!   races the commit waits for it and then sees the execution `dispatched`.
//! - A pause between that check and the first byte on the wire longer than lease / 3 is not
//!   covered: the execution is then `outcome_unknown` on the record, which is honest (it may
//!   have been sent), and recovery by its class decides what a retry gets.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use postern_core::Timestamp;
use tokio::sync::{mpsc, oneshot, watch};

use crate::error::LedgerError;
use crate::ops::Op;
use crate::writer::now_millis;

/// This instance's hold on its lease, as the heartbeat last saw it.
pub(crate) struct LeaseState {
    /// `None` on SQLite (liveness by lock files: a live process holds its lock).
    lease: Option<Duration>,
    renewed_ms: AtomicI64,
    /// The instance that took this one over; set once, forever.
    fenced_by: Mutex<Option<String>>,
    fenced: watch::Sender<bool>,
}

/// Why this instance may not send a request now.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LeaseLost {
    #[error("this gateway instance was taken over by {0} after its lease expired")]
    TakenOver(String),
    #[error("this gateway instance could not renew its lease for {0} ms (the database is unreachable or the process was paused)")]
    Lapsed(i64),
}

impl LeaseState {
    pub fn new(lease: Option<Duration>) -> Arc<LeaseState> {
        Arc::new(LeaseState {
            lease,
            renewed_ms: AtomicI64::new(now_millis()),
            fenced_by: Mutex::new(None),
            fenced: watch::channel(false).0,
        })
    }

    /// Whether a request may leave now: not taken over, and renewed within two thirds of the
    /// lease.
    pub fn may_send(&self) -> Result<(), LeaseLost> {
        if let Some(by) = self
            .fenced_by
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            return Err(LeaseLost::TakenOver(by));
        }
        let Some(lease) = self.lease else {
            return Ok(());
        };
        let silent = now_millis() - self.renewed_ms.load(Ordering::Relaxed);
        let limit = i64::try_from(lease.as_millis() * 2 / 3).unwrap_or(i64::MAX);
        if silent > limit {
            return Err(LeaseLost::Lapsed(silent));
        }
        Ok(())
    }

    fn fence(&self, by: Option<String>) {
        let by = by.unwrap_or_else(|| "another instance".into());
        tracing::error!(taken_over_by = %by, "this gateway instance lost its lease: it dispatches nothing more");
        *self.fenced_by.lock().unwrap_or_else(|e| e.into_inner()) = Some(by);
        self.fenced.send_replace(true);
    }

    /// Resolves once this instance is taken over (never on SQLite).
    pub async fn taken_over(&self) -> String {
        let mut rx = self.fenced.subscribe();
        let _ = rx.wait_for(|f| *f).await;
        self.fenced_by
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_default()
    }
}

/// Renews the instance's lease every third of it, through the writer (see `Op::Heartbeat`):
/// while the writer cannot write, the lease runs out and another instance may take over. A
/// renewal refused because another instance took this one over fences it for good.
pub(crate) fn heartbeat(
    writer: mpsc::WeakSender<Op>,
    lease: Duration,
    state: Arc<LeaseState>,
) -> tokio::task::JoinHandle<()> {
    let every = (lease / 3).max(Duration::from_millis(100));
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            // A weak handle: the heartbeat never keeps a closing ledger's writer alive.
            let Some(writer) = writer.upgrade() else {
                return;
            };
            let (tx, rx) = oneshot::channel();
            let at = now_millis();
            if writer.send(Op::Heartbeat(Timestamp(at), tx)).await.is_err() {
                return;
            }
            drop(writer);
            match rx.await {
                Ok(Ok(())) => state.renewed_ms.store(at, Ordering::Relaxed),
                Ok(Err(LedgerError::Fenced { by, .. })) => {
                    state.fence(by);
                    return;
                }
                _ => {}
            }
        }
    })
}
