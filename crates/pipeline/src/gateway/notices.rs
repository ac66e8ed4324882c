//! What people are told: a new approval request, or a decision that changes what waits for
//! them. The console's live page and the approval webhooks listen here; nothing in the
//! pipeline waits on a listener (a notice no one hears is dropped, the ledger still has it).

use std::sync::OnceLock;

use postern_core::lifecycle::State;
use postern_core::ExecutionId;
use postern_ledger::ListFilter;
use tokio::sync::broadcast;

use super::approvals::PendingDecision;
use super::Gateway;
use crate::error::GatewayError;

/// A change a person may need to see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notice {
    /// A new execution waits for an operator's approval (per use, or its run's authorization).
    ApprovalRequested(ExecutionId),
    /// A decision was recorded (approval, denial, expiry, review, run) for this execution or run.
    Decided,
}

/// The gateway's notice board and the console's address: what people are told, and where
/// they decide. Reached through [`Gateway::notices`].
pub struct Notices {
    board: broadcast::Sender<Notice>,
    /// Where people reach the console: `[console] public_url`, else the listener's bound
    /// address (known once it is bound).
    console_base: OnceLock<String>,
    /// `[console] public_url`.
    public_url: Option<String>,
    /// `[gateway] listen`, until the listener is bound.
    listen: String,
}

impl Notices {
    pub(crate) fn new(public_url: Option<String>, listen: String) -> Notices {
        Notices {
            board: broadcast::channel(1024).0,
            console_base: OnceLock::new(),
            public_url,
            listen,
        }
    }

    /// Tells whoever listens; a notice with no listener is dropped.
    pub(crate) fn notify(&self, notice: Notice) {
        let _ = self.board.send(notice);
    }

    /// Every notice from now on (a slow listener misses some and is told how many: it then
    /// re-reads the ledger).
    pub fn subscribe(&self) -> broadcast::Receiver<Notice> {
        self.board.subscribe()
    }

    /// Sets the console's address from the bound listener, unless `[console] public_url`
    /// names one. Only the first call counts.
    pub fn set_console_base(&self, listener_url: &str) {
        let base = self
            .public_url
            .clone()
            .unwrap_or_else(|| listener_url.trim_end_matches('/').to_string());
        let _ = self.console_base.set(base);
    }

    /// The page where an operator decides on execution `id`. The URL carries the execution id
    /// only (a random UUIDv7: no arguments, no actor, no credential) and grants nothing: the
    /// page asks for an operator's log-in.
    pub fn approval_url(&self, id: ExecutionId) -> String {
        let base = self
            .console_base
            .get()
            .cloned()
            .or_else(|| self.public_url.clone())
            .unwrap_or_else(|| format!("http://{}", self.listen));
        format!("{base}/ui/approvals/{id}")
    }
}

impl Gateway {
    /// What people are told, and where they decide.
    pub fn notices(&self) -> &Notices {
        &self.notices
    }

    /// One page of the executions in `state` (awaiting approval, or under review), newest
    /// first, older than `before` when given.
    pub async fn pending_page(
        &self,
        state: State,
        limit: u32,
        before: Option<ExecutionId>,
    ) -> Result<Vec<PendingDecision>, GatewayError> {
        let filter = ListFilter {
            state: Some(state.as_str().to_string()),
            limit,
            before,
            ..ListFilter::default()
        };
        let mut out = Vec::new();
        for s in self.ledger.read().list(&filter).await? {
            if let Ok(p) = self.pending_decision(s.id).await {
                out.push(p);
            }
        }
        Ok(out)
    }

    /// How many executions in `state` are older than `before` (all of them without it): what
    /// a page ending at `before` leaves out.
    pub async fn pending_count(
        &self,
        state: State,
        before: Option<ExecutionId>,
    ) -> Result<u64, GatewayError> {
        let filter = ListFilter {
            state: Some(state.as_str().to_string()),
            before,
            ..ListFilter::default()
        };
        Ok(self.ledger.read().count(&filter).await?)
    }
}
