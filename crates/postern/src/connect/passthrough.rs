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
    ClientConfig, ClientRequest, CompleteRequest, CompleteRequestParams, CompleteResult,
    CreateMessageRequest, CreateMessageRequestParams, CreateMessageResult, ElicitRequest,
    ElicitRequestParams, ElicitResult, GetPromptRequest, GetPromptRequestParams, GetPromptResponse,
    Implementation, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListRootsRequest, ListRootsResult, ListToolsResult, LoggingMessageNotificationParam,
    PaginatedRequestParams, ProgressNotificationParam, ProgressToken, ReadResourceRequest,
    ReadResourceRequestParams, ReadResourceResponse, RequestOptionalParam,
    ResourceUpdatedNotificationParam, ServerCapabilities, ServerConfig, ServerRequest,
    ServerResult, SetLevelRequest, SetLevelRequestParams, SubscribeRequest, SubscribeRequestParams,
    UnsubscribeRequest, UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RequestContext};
use rmcp::{ClientHandler, ErrorData, Peer, RoleClient, RoleServer, ServerHandler, ServiceError};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{Bridge, Failure, REFUSED_META};

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

/// The upstream-facing `tasks` capability aside, the bridge declares what the gateway does.
fn bridged_capabilities(gateway: &ServerCapabilities) -> ServerCapabilities {
    let mut capabilities = gateway.clone();
    // Tasks are the gateway's business with its own clients; the bridge answers each call.
    capabilities.extensions = None;
    if capabilities.tools.is_none() {
        capabilities.tools = Some(Default::default());
    }
    capabilities
}

impl Bridge {
    /// One read passed to the gateway; sent again once on a new session if the first was lost.
    async fn pass(
        &self,
        request: ClientRequest,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<ServerResult, ErrorData> {
        self.0.client.knows(&ctx.peer);
        let budget = self.0.timing.attempt;
        let mut last = String::new();
        for _ in 0..2 {
            let (generation, peer) = match self.peer(budget).await {
                Ok(p) => p,
                Err(Failure::Gateway(e)) => return Err(e),
                Err(Failure::Unauthorized(m)) => return Err(ErrorData::invalid_request(m, None)),
                Err(Failure::Lost { reason, .. }) => {
                    last = reason;
                    continue;
                }
            };
            match tokio::time::timeout(budget, peer.send_request(request.clone())).await {
                Ok(Ok(result)) => return Ok(result),
                Ok(Err(ServiceError::McpError(e))) if !super::synthesized(&e) => return Err(e),
                Ok(Err(e)) => {
                    last = e.to_string();
                    if self.needs_rebuild(&peer, &e) {
                        self.discard(generation).await;
                    }
                }
                Err(_) => last = "no answer".into(),
            }
        }
        Err(ErrorData::internal_error(
            format!(
                "postern connect: the gateway at {} did not answer: {last}",
                self.0.remote.url
            ),
            None,
        ))
    }
}

/// The result a passed request must have, or the error that it had another.
macro_rules! expect {
    ($result:expr, $variant:ident) => {
        match $result? {
            ServerResult::$variant(r) => Ok(r),
            _ => Err(ErrorData::internal_error(
                "postern connect: the gateway answered with a result of another kind",
                None,
            )),
        }
    };
}

fn listing<M: Default>(
    request: Option<PaginatedRequestParams>,
) -> RequestOptionalParam<M, PaginatedRequestParams> {
    RequestOptionalParam {
        method: M::default(),
        params: request,
        extensions: Default::default(),
    }
}

impl ServerHandler for Bridge {
    fn get_info(&self) -> ServerConfig {
        let mut instructions = self.0.instructions.clone().unwrap_or_default();
        instructions.push_str(
            " (Bridged by postern connect: a call whose answer is lost in transit is re-issued and \
             matched by the gateway to the same execution.)",
        );
        ServerConfig::new(bridged_capabilities(&self.0.capabilities))
            .with_server_info(Implementation::new(
                "postern-connect",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(instructions.trim_start().to_string())
    }

    async fn on_initialized(&self, ctx: NotificationContext<RoleServer>) {
        self.0.client.knows(&ctx.peer);
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.0.client.knows(&ctx.peer);
        Ok(ListToolsResult::with_all_items(self.tools().await?))
    }

    async fn call_tool(
        &self,
        mut request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.0.client.knows(&ctx.peer);
        if let Some(reason) = ctx.meta.0.get(REFUSED_META).and_then(Value::as_str) {
            return Err(ErrorData::invalid_params(
                format!("invalid request: {reason}"),
                None,
            ));
        }
        request.meta = Some(self.forwarded_meta(&ctx.meta));
        self.call(request, ctx.meta.get_progress_token(), ctx.ct.clone())
            .await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let r = self
            .pass(ClientRequest::ListResourcesRequest(listing(request)), &ctx)
            .await;
        expect!(r, ListResourcesResult)
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let r = self
            .pass(
                ClientRequest::ListResourceTemplatesRequest(listing(request)),
                &ctx,
            )
            .await;
        expect!(r, ListResourceTemplatesResult)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let r = self
            .pass(
                ClientRequest::ReadResourceRequest(ReadResourceRequest::new(request)),
                &ctx,
            )
            .await;
        expect!(r, ReadResourceResult).map(ReadResourceResponse::Complete)
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.pass(
            ClientRequest::SubscribeRequest(SubscribeRequest::new(request)),
            &ctx,
        )
        .await
        .map(|_| ())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.pass(
            ClientRequest::UnsubscribeRequest(UnsubscribeRequest::new(request)),
            &ctx,
        )
        .await
        .map(|_| ())
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let r = self
            .pass(ClientRequest::ListPromptsRequest(listing(request)), &ctx)
            .await;
        expect!(r, ListPromptsResult)
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let r = self
            .pass(
                ClientRequest::GetPromptRequest(GetPromptRequest::new(request)),
                &ctx,
            )
            .await;
        expect!(r, GetPromptResult).map(GetPromptResponse::Complete)
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let r = self
            .pass(
                ClientRequest::CompleteRequest(CompleteRequest::new(request)),
                &ctx,
            )
            .await;
        expect!(r, CompleteResult)
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.pass(
            ClientRequest::SetLevelRequest(SetLevelRequest::new(request)),
            &ctx,
        )
        .await
        .map(|_| ())
    }
}
