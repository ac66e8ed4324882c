//! Requests passed through to an upstream that are not side effects — resource reads and
//! lists, prompts, completions, the log level — and resource subscriptions. Nothing here is
//! an execution: a passed request is sent once, answered or not, and never recorded as acted.

// resources/subscribe: the 2025 protocols' way, which the servers in the field use.
#![allow(deprecated)]

use std::time::Duration;

use rmcp::model::{
    CancelledNotification, CancelledNotificationParam, ClientNotification, ClientRequest,
    ErrorData, ServerCapabilities, ServerResult, SubscribeRequest, SubscribeRequestParams,
    UnsubscribeRequest, UnsubscribeRequestParams,
};
use rmcp::service::{PeerRequestOptions, RequestHandle};
use rmcp::{Peer, RoleClient, ServiceError};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::client::UpstreamEvent;
use super::Upstream;

/// Why a passed request has no answer.
#[derive(Clone, Debug, thiserror::Error)]
pub enum PassError {
    /// The upstream is down (or stayed down for its `startup_timeout`): nothing was sent.
    #[error("{0}")]
    Down(String),
    /// The upstream answered with a JSON-RPC error, passed on as it is.
    #[error("the upstream answered {}: {}", .0.code.0, .0.message)]
    Refused(ErrorData),
    /// Sent, and no answer came (timeout, link lost, cancelled).
    #[error("{0}")]
    Lost(String),
}

impl Upstream {
    /// What the upstream declared when the link came up; `None` while it is down.
    pub fn capabilities(&self) -> Option<ServerCapabilities> {
        let peer = self.peer().ok()?;
        peer.peer_info().map(|info| info.capabilities.clone())
    }

    /// Notifications the upstream sends outside any answer.
    pub fn events(&self) -> broadcast::Receiver<UpstreamEvent> {
        self.events.subscribe()
    }

    /// The live peer, waiting (at most `startup_timeout`) for a link that is connecting —
    /// including one whose transport has just closed while its state still says up (a
    /// restarted server): the supervisor is about to open the next one.
    pub(super) async fn live_peer(&self) -> Result<Peer<RoleClient>, String> {
        let deadline = tokio::time::Instant::now() + self.startup_timeout;
        let mut state = self.subscribe();
        loop {
            let why = match self.peer() {
                Ok(peer) => return Ok(peer),
                Err(why) => why,
            };
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Err(why);
            }
            // A state change wakes this at once; the short bound covers the moment between a
            // transport closing and the supervisor saying so.
            let _ =
                tokio::time::timeout(left.min(Duration::from_millis(25)), state.changed()).await;
        }
    }

    /// Waits (at most `startup_timeout`) until the link `old` has ended, so that the next
    /// request goes on its successor.
    pub(super) async fn link_ended(&self, old: &Peer<RoleClient>) {
        let deadline = tokio::time::Instant::now() + self.startup_timeout;
        while !old.is_transport_closed() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Passes one request to the upstream and waits for its answer (at most the upstream's
    /// timeout). `cancel` passes the caller's cancellation on as `notifications/cancelled`.
    pub async fn pass(
        &self,
        request: ClientRequest,
        cancel: &CancellationToken,
    ) -> Result<ServerResult, PassError> {
        let peer = self.live_peer().await.map_err(PassError::Down)?;
        let handle = peer
            .send_request_with_option(
                request,
                PeerRequestOptions::with_timeout(self.request_timeout),
            )
            .await
            .map_err(|e| PassError::Down(format!("upstream {}: {e}", self.name())))?;
        match answer(&peer, handle, cancel, self.name()).await {
            Ok(result) => Ok(result),
            Err(ServiceError::McpError(e)) => Err(PassError::Refused(e)),
            Err(e) => Err(PassError::Lost(format!("upstream {}: {e}", self.name()))),
        }
    }

    /// Subscribes to updates of `uri` for one more client (upstream on the first).
    pub async fn subscribe_resource(&self, uri: &str) -> Result<(), PassError> {
        let first = {
            let mut subs = self.subscriptions.lock().unwrap_or_else(|e| e.into_inner());
            let count = subs.entry(uri.to_string()).or_default();
            *count += 1;
            *count == 1
        };
        if !first {
            return Ok(());
        }
        let request = ClientRequest::SubscribeRequest(SubscribeRequest::new(
            SubscribeRequestParams::new(uri),
        ));
        let sent = self.pass(request, &CancellationToken::new()).await;
        if sent.is_err() {
            self.forget_subscription(uri);
        }
        sent.map(|_| ())
    }

    /// One client fewer subscribed to `uri` (unsubscribed upstream after the last).
    pub async fn unsubscribe_resource(&self, uri: &str) -> Result<(), PassError> {
        if !self.forget_subscription(uri) {
            return Ok(());
        }
        let request = ClientRequest::UnsubscribeRequest(UnsubscribeRequest::new(
            UnsubscribeRequestParams::new(uri),
        ));
        self.pass(request, &CancellationToken::new())
            .await
            .map(|_| ())
    }

    /// Counts one subscription of `uri` off; whether it was the last.
    fn forget_subscription(&self, uri: &str) -> bool {
        let mut subs = self.subscriptions.lock().unwrap_or_else(|e| e.into_inner());
        match subs.get_mut(uri) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            Some(_) => {
                subs.remove(uri);
                true
            }
            None => false,
        }
    }

    /// After a (re)connection: the new server instance knows no subscriptions yet.
    pub(super) async fn subscribe_again(&self, peer: &Peer<RoleClient>) {
        let uris: Vec<String> = self
            .subscriptions
            .lock()
            .map(|s| s.keys().cloned().collect())
            .unwrap_or_default();
        for uri in uris {
            let request = ClientRequest::SubscribeRequest(SubscribeRequest::new(
                SubscribeRequestParams::new(uri.clone()),
            ));
            if let Err(e) = peer.send_request(request).await {
                tracing::warn!(upstream = %self.name(), uri = %uri, error = %e, "a resource subscription could not be renewed on the new link");
            }
        }
    }
}

/// Waits for the answer to a request handed to the link: until it comes, the link ends, the
/// request's own timeout passes (sent with it: rmcp extends it on each progress report when
/// asked to, cancels the request upstream when it passes), or (once) the caller cancels, which
/// is passed on upstream.
pub(super) async fn answer(
    peer: &Peer<RoleClient>,
    handle: RequestHandle<RoleClient>,
    cancel: &CancellationToken,
    upstream: &str,
) -> Result<ServerResult, ServiceError> {
    let id = handle.id.clone();
    let waiting = handle.await_response();
    tokio::pin!(waiting);
    let mut cancel_sent = false;
    loop {
        tokio::select! {
            r = &mut waiting => return r,
            () = cancel.cancelled(), if !cancel_sent => {
                cancel_sent = true;
                let note = CancelledNotification::new(CancelledNotificationParam::new(
                    Some(id.clone()),
                    Some("the caller cancelled the request".into()),
                ));
                if let Err(e) = peer.send_notification(ClientNotification::from(note)).await {
                    tracing::info!(upstream, error = %e, "a cancellation could not be passed upstream; the outcome is what the upstream answers");
                }
            }
        }
    }
}
