//! What `postern connect` passes between the agent and the gateway besides tool calls: the
//! gateway's notifications (progress of a call, log messages, resource updates, changed
//! lists) go to the agent; its questions during a call (sampling, elicitation, roots) are put to
//! the agent and answered with what the agent says; and the agent's reads (resources, prompts,
//! completions, the log level) go to the gateway. None of these is an action: a read whose
//! session is lost is sent again once on a new session, never recovered like a call.

// Logging, sampling and roots are deprecated by SEP-2577, but the servers in the field use them.
#![allow(deprecated)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, CancelledNotificationParam,
    ClientConfig, ClientRequest, CreateMessageRequest, CreateMessageRequestParams,
    CreateMessageResult, ElicitRequest, ElicitRequestParams, ElicitResult, Implementation,
    ListRootsRequest, ListRootsResult, LoggingMessageNotificationParam, ProgressNotificationParam,
    ProgressToken, ResourceUpdatedNotificationParam, ServerRequest, ServerResult,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RequestContext};
use rmcp::{ClientHandler, ErrorData, Peer, RoleClient, RoleServer, ServiceError};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

mod server;

/// The agent's side, once it is known, and the calls whose progress it asked for.
#[derive(Clone, Default)]
pub(crate) struct BridgeClient {
    agent: Arc<Mutex<Option<Peer<RoleServer>>>>,
    /// The gateway's progress token of a call in flight → the agent's, and its reports' counts.
    progress: ProgressRoutes,
    /// Set when the gateway says its tools changed (the bridge lists them again).
    pub tools_changed: Arc<std::sync::atomic::AtomicBool>,
}

/// The gateway's progress token of each call in flight → where its reports go.
type ProgressRoutes = Arc<Mutex<HashMap<ProgressToken, PassedProgress>>>;

/// One call's progress on its way to the agent: the agent's token, and how many of the
/// gateway's reports were read and passed on (see `postern_channels::mcp::handed_on`).
#[derive(Clone)]
struct PassedProgress {
    agent_token: ProgressToken,
    read: Arc<AtomicU64>,
    passed: Arc<AtomicU64>,
}

impl BridgeClient {
    /// The agent's peer (learned from its first request or its `initialized`).
    pub(crate) fn knows(&self, peer: &Peer<RoleServer>) {
        if let Ok(mut agent) = self.agent.lock() {
            if agent.is_none() {
                *agent = Some(peer.clone());
            }
        }
    }

    /// What the transport calls as it reads each progress notification from the gateway.
    pub(crate) fn count_progress_read(&self) -> postern_channels::mcp::OnProgressRead {
        let routes = self.progress.clone();
        Box::new(move |token| {
            if let Some(route) = routes.lock().ok().and_then(|r| r.get(token).cloned()) {
                route.read.fetch_add(1, Ordering::Release);
            }
        })
    }

    fn agent(&self) -> Option<Peer<RoleServer>> {
        self.agent.lock().ok().and_then(|a| a.clone())
    }

    async fn ask<R: DeserializeOwned>(&self, request: ServerRequest) -> Result<R, ErrorData> {
        let agent = self.agent().ok_or_else(|| {
            ErrorData::invalid_request("postern connect: no agent is connected yet", None)
        })?;
        let answer = agent.send_request(request).await.map_err(|e| match e {
            ServiceError::McpError(e) => e,
            other => ErrorData::internal_error(format!("the agent did not answer: {other}"), None),
        })?;
        serde_json::to_value(answer)
            .and_then(serde_json::from_value)
            .map_err(|e| ErrorData::internal_error(format!("the agent's answer: {e}"), None))
    }

    fn tell<F>(&self, send: impl FnOnce(Peer<RoleServer>) -> F)
    where
        F: std::future::Future<Output = Result<(), ServiceError>> + Send + 'static,
    {
        if let Some(agent) = self.agent() {
            let sent = send(agent);
            tokio::spawn(async move {
                let _ = sent.await;
            });
        }
    }

    /// One `tools/call` on `peer`, its progress passed to the agent under `agent_token`.
    /// Dropped before its answer, it tells the gateway the request is cancelled only when the
    /// agent cancelled it (`agent_cancel`): the bridge never cancels a call of its own accord
    /// (a re-issue attaches to the running execution instead).
    pub(crate) async fn call_tool(
        &self,
        peer: Peer<RoleClient>,
        params: CallToolRequestParams,
        agent_token: Option<ProgressToken>,
        agent_cancel: CancellationToken,
    ) -> Result<CallToolResponse, ServiceError> {
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let mut handle = peer
            .send_request_with_option(request, PeerRequestOptions::no_options())
            .await?;
        let routed = agent_token.map(|agent_token| {
            let route = PassedProgress {
                agent_token,
                read: Arc::default(),
                passed: Arc::default(),
            };
            if let Ok(mut routes) = self.progress.lock() {
                routes.insert(handle.progress_token.clone(), route.clone());
            }
            (handle.progress_token.clone(), route)
        });
        let mut pending = Pending {
            peer: peer.clone(),
            id: Some(handle.id.clone()),
            agent_cancel,
            route: routed
                .as_ref()
                .map(|(token, _)| (self.progress.clone(), token.clone())),
        };
        let answer = (&mut handle.rx)
            .await
            .unwrap_or(Err(ServiceError::TransportClosed));
        pending.id = None;
        if let Some((token, route)) = routed {
            // The last reports may still be on their way to the agent: they go first.
            postern_channels::mcp::handed_on(&route.read, &route.passed).await;
            if let Ok(mut routes) = self.progress.lock() {
                routes.remove(&token);
            }
        }
        match answer? {
            ServerResult::CallToolResult(r) => Ok(CallToolResponse::Complete(r)),
            ServerResult::InputRequiredResult(r) => Ok(CallToolResponse::InputRequired(r)),
            ServerResult::CreateTaskResult(r) => Ok(CallToolResponse::Task(r)),
            _ => Err(ServiceError::UnexpectedResponse),
        }
    }
}

/// A request whose answer has not come: dropped after the agent cancelled, it is cancelled at
/// the gateway; dropped otherwise (the bridge has its answer from a re-issue), it is only
/// forgotten.
struct Pending {
    peer: Peer<RoleClient>,
    id: Option<rmcp::model::RequestId>,
    agent_cancel: CancellationToken,
    route: Option<(ProgressRoutes, ProgressToken)>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        if let Some((routes, token)) = self.route.take() {
            if let Ok(mut routes) = routes.lock() {
                routes.remove(&token);
            }
        }
        if !self.agent_cancel.is_cancelled() {
            return;
        }
        let peer = self.peer.clone();
        tokio::spawn(async move {
            let note = CancelledNotificationParam::new(
                Some(id),
                Some("the agent cancelled the request".into()),
            );
            let _ = peer.notify_cancelled(note).await;
        });
    }
}

impl ClientHandler for BridgeClient {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            postern_channels::mcp::forwarded_capabilities(),
            Implementation::new("postern-connect", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        self.ask(ServerRequest::CreateMessageRequest(
            CreateMessageRequest::new(params),
        ))
        .await
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.ask(ServerRequest::ElicitRequest(ElicitRequest::new(params)))
            .await
    }

    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        self.ask(ServerRequest::ListRootsRequest(ListRootsRequest::default()))
            .await
    }

    async fn on_progress(
        &self,
        mut params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let route = self
            .progress
            .lock()
            .ok()
            .and_then(|r| r.get(&params.progress_token).cloned());
        if let Some(route) = route {
            params.progress_token = route.agent_token.clone();
            // In order, before the answer: awaited here, where notifications are handled in turn.
            if let Some(agent) = self.agent() {
                let _ = agent.notify_progress(params).await;
            }
            route.passed.fetch_add(1, Ordering::Release);
        }
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.tell(|agent| async move { agent.notify_logging_message(params).await });
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.tell(|agent| async move { agent.notify_resource_updated(params).await });
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tell(|agent| async move { agent.notify_resource_list_changed().await });
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tell(|agent| async move { agent.notify_prompt_list_changed().await });
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.tell(|agent| async move { agent.notify_tool_list_changed().await });
    }
}
