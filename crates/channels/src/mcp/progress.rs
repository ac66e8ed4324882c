//! A call's progress reports, all handed on before its answer.
//!
//! rmcp reads a connection's messages in order but hands each notification to a task of its
//! own, so a call's answer can be delivered before the task carrying its last progress report
//! has run (on a loaded machine, for milliseconds). Waiting for "no report for a while" drops
//! reports under load. Instead the transport counts the reports as they are read
//! ([`CountedProgress`]), before rmcp sees the answer that follows them, and the handler counts
//! them as it hands them on: once the answer is in, the caller waits until the two agree
//! ([`handed_on`]). The gateway's upstream links count per call ([`ProgressRoute`]);
//! `postern connect` counts for its one connection.

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
    sink: ProgressSink,
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

    /// Waits until every report read before now has been handed on.
    pub async fn settled(&self) {
        handed_on(&self.read, &self.handed_on).await;
    }
}

/// Waits until `handed_on` reaches what `read` says now (bounded by [`MOST`]).
pub async fn handed_on(read: &AtomicU64, handed_on: &AtomicU64) {
    let read = read.load(Ordering::Acquire);
    let waited = tokio::time::timeout(MOST, async {
        while handed_on.load(Ordering::Acquire) < read {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    if waited.is_err() {
        tracing::warn!(
            read,
            handed_on = handed_on.load(Ordering::Acquire),
            "a call's progress reports were not all handed on before its answer"
        );
    }
}

/// The progress routes of the calls in flight on a link, by their requests' progress tokens.
pub(super) type ProgressRoutes = Arc<Mutex<HashMap<ProgressToken, ProgressRoute>>>;

/// What a [`CountedProgress`] transport calls with each progress report's token as it reads it.
pub type OnProgressRead = Box<dyn Fn(&ProgressToken) + Send + Sync>;

/// A client transport that tells of each progress report as it is read.
pub struct CountedProgress<T> {
    inner: T,
    on_read: OnProgressRead,
}

impl<T> CountedProgress<T> {
    pub fn new(inner: T, on_read: OnProgressRead) -> CountedProgress<T> {
        CountedProgress { inner, on_read }
    }

    /// Counts into the route of the report's call (the gateway's upstream links).
    pub(super) fn by_route(inner: T, routes: ProgressRoutes) -> CountedProgress<T> {
        let on_read = move |token: &ProgressToken| {
            let routes = routes.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(route) = routes.get(token) {
                route.read.fetch_add(1, Ordering::Release);
            }
        };
        CountedProgress::new(inner, Box::new(on_read))
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for CountedProgress<T> {
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
                (self.on_read)(&p.params.progress_token);
            }
        }
        message
    }

    fn close(&mut self) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}
