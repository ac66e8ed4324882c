//! The bridge as the agent's MCP server: what it declares (the gateway's capabilities and
//! instructions), its tools listed and called through the bridge's recovery, and the agent's
//! reads (resources, prompts, completions, the log level) passed to the gateway, each sent again
//! once on a new session if the first was lost.

// Logging is deprecated by SEP-2577, but the servers in the field use it.
#![allow(deprecated)]

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientRequest, CompleteRequest, CompleteRequestParams,
    CompleteResult, GetPromptRequest, GetPromptRequestParams, GetPromptResponse, Implementation,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ReadResourceRequest, ReadResourceRequestParams, ReadResourceResponse,
    RequestOptionalParam, ServerCapabilities, ServerConfig, ServerResult, SetLevelRequest,
    SetLevelRequestParams, SubscribeRequest, SubscribeRequestParams, UnsubscribeRequest,
    UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceError};
use serde_json::Value;

use crate::connect::failure::{synthesized, Failure};
use crate::connect::{Bridge, REFUSED_META};

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
                Ok(Err(ServiceError::McpError(e))) if !synthesized(&e) => return Err(e),
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
