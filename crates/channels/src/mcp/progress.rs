//! A call's progress reports, all handed on before its answer.
//!
//! rmcp reads a link's messages in order but hands each notification to a task of its own, so
//! a call's answer can be delivered before the task carrying its last progress report has run
//! (on a loaded machine, for milliseconds). Waiting for "no report for a while" drops reports
//! under load. Instead the link's transport counts each call's reports as they are read
//! ([`Counted`]), before rmcp sees the answer that follows them, and the handler counts them as
//! they are handed on: once the answer is in, the call waits until the two agree
//! ([`ProgressRoute::settled`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{ProgressToken, ServerJsonRpcMessage, ServerNotification};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::RoleClient;

use crate::channel::ProgressSink;

/// The longest an answer waits for its reports to be handed on (a handler that never runs
/// must not hold the answer back for good).
const MOST: Duration = Duration::from_secs(2);

/// Where one call's progress reports go, and how many of them the link has read and handed on.
#[derive(Clone)]
pub(super) struct ProgressRoute {
    pub sink: ProgressSink,
    read: Arc<AtomicU64>,
    handed_on: Arc<AtomicU64>,
}

impl ProgressRoute {
    pub fn new(sink: ProgressSink) -> ProgressRoute {
        ProgressRoute {
            sink,
            read: Arc::default(),
            handed_on: Arc::default(),
        }
    }

    /// Hands one report on (the link's notification handler).
    pub fn hand_on(&self, report: crate::channel::Progress) {
        (self.sink)(report);
        self.handed_on.fetch_add(1, Ordering::Release);
    }

    /// Waits until every report read before now has been handed on (bounded by [`MOST`]).
    pub async fn settled(&self) {
        let read = self.read.load(Ordering::Acquire);
        let waited = tokio::time::timeout(MOST, async {
            while self.handed_on.load(Ordering::Acquire) < read {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await;
        if waited.is_err() {
            tracing::warn!(
                read,
                handed_on = self.handed_on.load(Ordering::Acquire),
                "a call's progress reports were not all handed on before its answer"
            );
        }
    }
}

/// The progress routes of the calls in flight on a link, by their requests' progress tokens.
pub(super) type ProgressRoutes = Arc<Mutex<HashMap<ProgressToken, ProgressRoute>>>;

/// A link's transport that counts each call's progress reports as they are read.
pub(super) struct Counted<T> {
    inner: T,
    routes: ProgressRoutes,
}

impl<T> Counted<T> {
    pub fn new(inner: T, routes: ProgressRoutes) -> Counted<T> {
        Counted { inner, routes }
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Counted<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let message = self.inner.receive().await;
        if let Some(ServerJsonRpcMessage::Notification(n)) = &message {
            if let ServerNotification::ProgressNotification(p) = &n.notification {
                let routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(route) = routes.get(&p.params.progress_token) {
                    route.read.fetch_add(1, Ordering::Release);
                }
            }
        }
        message
    }

    fn close(&mut self) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}
