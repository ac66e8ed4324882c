//! The rmcp server handler: each MCP request of a session (or of stdio) turned into the
//! pipeline's calls — `tools/call` into a [`postern_pipeline::ToolCall`] (in `call`), the rest passed to the upstreams or
//! answered here — and the request extensions the layers in front of it leave for it.

use std::future::Future;
use std::sync::Arc;

use postern_core::contract::EXECUTION_STATUS;
use postern_core::ActionClass;
use postern_ledger::Run;
#[allow(deprecated)]
// logging/setLevel: deprecated by SEP-2577, used by the servers in the field
use rmcp::model::SetLevelRequestParams;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CompleteRequestParams,
    CompleteResult, GetPromptRequestParams, GetPromptResponse, GetTaskParams, GetTaskResult,
    Implementation, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ServerCapabilities, ServerConfig, SubscribeRequestParams, SubscriptionFilter, Tool,
    UnsubscribeRequestParams,
};
use rmcp::service::{MaybeSendFuture, NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{json, Value};

use postern_core::config::Principal;
use tokio_util::sync::CancellationToken;

use postern_pipeline::execution_status_schema;
use postern_pipeline::GatewayError;
use postern_pipeline::{now, Gateway};

use super::delivery::DeliverySlot;
use super::errors::to_error;
use super::result::tool_result;
use super::tool_list::{annotations, listed_tool};
use super::{audience, auth, passage, questions, tasks};

/// The authenticated caller of an HTTP request.
#[derive(Clone, Debug)]
pub(crate) struct Actor(pub String);

/// Parameters rmcp's model does not carry (`params.idempotencyKey`), read from the raw body.
#[derive(Clone, Debug, Default)]
pub(crate) struct RawParams {
    pub idempotency_key: Option<String>,
}

/// Fires when the client of a sessionless (2026-07-28) request goes away before its answer
/// was written: for that protocol a disconnect is a cancellation (contract §3 rule 6). Requests
/// in a session are not cancelled by a disconnect: their stream can be resumed.
#[derive(Clone, Debug)]
pub(crate) struct Disconnected(pub CancellationToken);

/// The rmcp server handler.
#[derive(Clone)]
pub struct PosternMcp {
    pub(crate) gateway: Arc<Gateway>,
    /// Over stdio there is no token: the configured actor.
    pub(crate) stdio_actor: Option<String>,
    /// The clients that hear the upstreams' notifications.
    pub(crate) audience: Arc<audience::Audience>,
    /// Where resource URIs are served, learned from the upstreams' lists.
    pub(crate) routes: Arc<passage::ResourceRoutes>,
}

impl PosternMcp {
    /// A handler (cloned for every session) over `gateway`'s tools and upstreams.
    pub fn new(gateway: Arc<Gateway>, stdio_actor: Option<String>) -> PosternMcp {
        PosternMcp {
            audience: audience::Audience::start(gateway.clone()),
            routes: Arc::default(),
            gateway,
            stdio_actor,
        }
    }

    pub(crate) fn actor(&self, ctx: &RequestContext<RoleServer>) -> Result<String, ErrorData> {
        ctx.extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.extensions.get::<Actor>())
            .map(|a| a.0.clone())
            .or_else(|| self.stdio_actor.clone())
            .ok_or_else(|| ErrorData::invalid_request("no authenticated actor", None))
    }

    /// The run (Sessions log) this request belongs to, recorded on first sight.
    pub(crate) async fn run_id(
        &self,
        ctx: &RequestContext<RoleServer>,
        actor: &str,
    ) -> Result<Option<String>, String> {
        // A run an agent names is its actor's (checked, before anything of it is recorded).
        let explicit = ctx
            .meta
            .get("io.postern/run")
            .and_then(Value::as_str)
            .map(|run| postern_pipeline::agent_run(actor, run))
            .transpose()?;
        let session = ctx
            .extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.headers.get("mcp-session-id"))
            .and_then(|v| v.to_str().ok())
            .map(|s| format!("mcp-session:{s}"));
        let Some(id) = explicit.or(session).or_else(|| {
            self.stdio_actor
                .as_ref()
                .map(|_| postern_pipeline::Runs::stdio_run_id().to_string())
        }) else {
            return Ok(None);
        };
        if !self.gateway.runs().is_open(&id) {
            let info = ctx.peer.peer_info();
            let run = Run {
                client_name: info.as_ref().map(|i| i.client_info.name.clone()),
                client_version: info.as_ref().map(|i| i.client_info.version.clone()),
                client_address: auth::client_address(&ctx.extensions).map(|a| a.to_string()),
                principal: ctx
                    .extensions
                    .get::<http::request::Parts>()
                    .and_then(|p| p.extensions.get::<Principal>())
                    .map(|p| postern_ledger::RunPrincipal {
                        issuer: p.issuer.clone(),
                        subject: p.subject.clone(),
                        client_id: p.client_id.clone(),
                    }),
                protocol_version: ctx.protocol_version().map(|v| v.to_string()),
                ..Run::new(
                    id.clone(),
                    actor.to_string(),
                    if self.stdio_actor.is_some() {
                        "stdio".into()
                    } else {
                        "streamable-http".into()
                    },
                    now(),
                )
            };
            self.gateway.runs().open(run).await;
        }
        Ok(Some(id))
    }
}

impl ServerHandler for PosternMcp {
    #[allow(deprecated)] // logging: deprecated by SEP-2577, used by the servers in the field
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_tasks()
            .build();
        if !self.gateway.registry().upstreams().is_empty() {
            // What passes through from upstreams (see `passage`).
            let passed: ServerCapabilities = serde_json::from_value(json!({
                "resources": {"subscribe": true, "listChanged": true},
                "prompts": {"listChanged": true},
                "completions": {},
                "logging": {}
            }))
            .unwrap_or_default();
            capabilities.resources = passed.resources;
            capabilities.prompts = passed.prompts;
            capabilities.completions = passed.completions;
            capabilities.logging = passed.logging;
        }
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("postern", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Every call gets an execution id and a durable record. A repeated identical call is matched to the earlier execution instead of acting twice; \
                 results say so in _meta[\"io.postern/execution\"] (and structuredContent.execution unless the tool has an outputSchema). A new, separate action is an identical call after the tool's match window, or one the host sends with a new idempotencyKey (params.idempotencyKey or _meta[\"io.postern/idempotency-key\"]).",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let actor = self.actor(&ctx)?;
        let mut tools: Vec<Tool> = self
            .gateway
            .policy()
            .tools_for(&actor)
            // A tool its upstream changed is not offered until an operator accepts it.
            .filter(|t| t.withheld.is_none())
            .map(listed_tool)
            .collect();
        let status_schema = execution_status_schema()
            .as_object()
            .cloned()
            .unwrap_or_default();
        tools.push(
            Tool::new(EXECUTION_STATUS, "The durable record of an execution you started: state, timeline and the target's answer", status_schema)
                .with_annotations(annotations(ActionClass::ReadOnly).open_world(false)),
        );
        Ok(ListToolsResult::with_all_items(tools))
    }

    fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<CallToolResponse, ErrorData>> + MaybeSendFuture + '_ {
        // Boxed, as every handler here that awaits: rmcp moves the handler's future into a task
        // per request and between the task's stages, and that future is as large as the largest
        // of all the handlers' futures. Unboxed, `tools/call` held the whole gateway call inline
        // (about 250,000 instructions of `memcpy` per call, docs/performance.md); boxed, a
        // pointer moves.
        Box::pin(self.call_tool_unboxed(request, ctx))
    }

    async fn on_initialized(&self, ctx: NotificationContext<RoleServer>) {
        let Some(client) = self.client_key(&ctx.extensions) else {
            return;
        };
        let actor = ctx
            .extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.extensions.get::<Actor>())
            .map(|a| a.0.clone())
            .or_else(|| self.stdio_actor.clone());
        if let Some(actor) = actor {
            self.audience.join(client, actor, ctx.peer);
        }
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        // Changed lists; resource updates are the 2025 protocols' resources/subscribe.
        let mut accepted = requested.clone();
        accepted.resource_subscriptions = None;
        Some(accepted)
    }

    fn listen(
        &self,
        ctx: SubscriptionContext,
    ) -> impl Future<Output = Result<(), ErrorData>> + MaybeSendFuture + '_ {
        Box::pin(async move {
            let actor = self.actor(ctx.request_context())?;
            let client = format!("listen:{}", questions::next_request());
            self.audience
                .listen(client.clone(), actor, ctx.sink().clone());
            ctx.cancelled().await;
            self.audience.leave(&client);
            Ok(())
        })
    }

    fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ListResourcesResult, ErrorData>> + MaybeSendFuture + '_ {
        Box::pin(async move { self.passage(&ctx)?.list_resources(request).await })
    }

    fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ListResourceTemplatesResult, ErrorData>> + MaybeSendFuture + '_
    {
        Box::pin(async move { self.passage(&ctx)?.list_resource_templates(request).await })
    }

    fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ReadResourceResponse, ErrorData>> + MaybeSendFuture + '_ {
        Box::pin(async move {
            self.relay_read_resource(request, &ctx)
                .await
                .map(ReadResourceResponse::Complete)
        })
    }

    #[allow(deprecated)] // resources/subscribe: the 2025 protocols' way, which clients use
    fn subscribe(
        &self,
        request: SubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<(), ErrorData>> + MaybeSendFuture + '_ {
        Box::pin(async move { self.relay_subscription(request.uri, true, &ctx).await })
    }

    #[allow(deprecated)]
    fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<(), ErrorData>> + MaybeSendFuture + '_ {
        Box::pin(async move { self.relay_subscription(request.uri, false, &ctx).await })
    }

    fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ListPromptsResult, ErrorData>> + MaybeSendFuture + '_ {
        Box::pin(async move { self.passage(&ctx)?.list_prompts(request).await })
    }

    fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<GetPromptResponse, ErrorData>> + MaybeSendFuture + '_ {
        Box::pin(async move {
            self.relay_get_prompt(request, &ctx)
                .await
                .map(GetPromptResponse::Complete)
        })
    }

    fn complete(
        &self,
        request: CompleteRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<CompleteResult, ErrorData>> + MaybeSendFuture + '_ {
        Box::pin(async move { self.passage(&ctx)?.complete(request).await })
    }

    #[allow(deprecated)]
    fn set_level(
        &self,
        request: SetLevelRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<(), ErrorData>> + MaybeSendFuture + '_ {
        Box::pin(async move { self.relay_set_level(request, &ctx).await })
    }

    fn get_task(
        &self,
        request: GetTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<GetTaskResult, ErrorData>> + MaybeSendFuture + '_ {
        Box::pin(async move {
            let actor = self.actor(&ctx)?;
            let slot = ctx
                .extensions
                .get::<http::request::Parts>()
                .and_then(|p| p.extensions.get::<DeliverySlot>());
            tasks::get(&self.gateway, &actor, &request.task_id, |report| {
                // The task's result travels in this response: its delivery is recorded like a call's,
                // once (polling a delivered task records nothing more).
                if let Some(slot) = slot {
                    if !matches!(report.state, postern_core::State::Delivered(_)) {
                        slot.carry(&self.gateway, report.execution_id);
                    }
                }
                serde_json::to_value(tool_result(report))
                    .ok()
                    .and_then(|v| v.as_object().cloned())
                    .unwrap_or_default()
            })
            .await
        })
    }

    fn cancel_task(
        &self,
        request: CancelTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<(), ErrorData>> + MaybeSendFuture + '_ {
        Box::pin(async move {
            let actor = self.actor(&ctx)?;
            let id = tasks::parse_task_id(&request.task_id)?;
            match self.gateway.request_cancel(id, &actor).await {
                Err(GatewayError::UnknownExecution(_)) => {
                    Err(tasks::unknown_task(&request.task_id))
                }
                other => other.map_err(to_error),
            }
        })
    }
}

/// Serves MCP over stdin/stdout for a local agent, as the configured actor.
pub async fn serve_stdio(gateway: Arc<Gateway>, actor: String) -> Result<(), GatewayError> {
    use rmcp::ServiceExt;
    let service = PosternMcp::new(gateway.clone(), Some(actor))
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| GatewayError::Internal(format!("stdio: {e}")))?;
    let ended = service.waiting().await;
    // The client went away (or the transport broke): its run ends here.
    let run = postern_pipeline::Runs::stdio_run_id();
    if let Err(e) = gateway
        .runs()
        .end(run, postern_ledger::RunEnd::TransportClosed)
        .await
    {
        tracing::warn!(run = %run, error = %e, "the stdio run's end could not be recorded");
    }
    ended.map_err(|e| GatewayError::Internal(format!("stdio: {e}")))?;
    Ok(())
}
