//! The handler's side of pass-through: who is asking (actor, client, run), which upstreams
//! they see, and the calls log's record of each read. The routing itself is in `passage`.

// Logging is deprecated by SEP-2577, but the servers in the field use it.
#![allow(deprecated)]

use rmcp::model::{
    ClientRequest, GetPromptRequestParams, GetPromptResult, ReadResourceRequestParams,
    ReadResourceResult, SetLevelRequest, SetLevelRequestParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};

use super::audience::level_of;
use super::handler::PosternMcp;
use super::passage::{pass_error, Passage};

/// A URI or name in the calls log is cut here (the log says who read what, not all of it).
const LOGGED_NAME: usize = 512;

fn logged(kind: &str, name: &str) -> String {
    let mut end = name.len().min(LOGGED_NAME);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{kind} {}", &name[..end])
}

impl PosternMcp {
    /// The client a request comes from: its session, or the stdio client (`None`: a
    /// sessionless request).
    pub(super) fn client_key(&self, extensions: &rmcp::model::Extensions) -> Option<String> {
        match extensions.get::<http::request::Parts>() {
            Some(parts) => parts
                .headers
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .map(|s| format!("session:{s}")),
            None => self.stdio_actor.as_ref().map(|_| "stdio".to_string()),
        }
    }

    /// What the actor of `ctx` sees, ready to pass requests through.
    /// Without upstreams the gateway declares none of these capabilities, and the methods are
    /// not found.
    pub(super) fn passage(
        &self,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Passage<'_>, ErrorData> {
        if self.gateway.registry().upstreams().is_empty() {
            return Err(ErrorData::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                "this gateway has no upstream MCP servers: it serves no resources, prompts, completions or logging",
                None,
            ));
        }
        let actor = self.actor(ctx)?;
        Ok(Passage {
            routes: &self.routes,
            visible: self.gateway.upstream_tools().upstreams_for(&actor),
            cancel: ctx.ct.clone(),
        })
    }

    /// Records a read in the calls log.
    async fn log_read(&self, ctx: &RequestContext<RoleServer>, what: String, ok: bool) {
        let Ok(actor) = self.actor(ctx) else { return };
        // A run id the agent got wrong is refused with its call; a read is logged without it.
        let run = self.run_id(ctx, &actor).await.ok().flatten();
        let request_id = serde_json::to_string(&ctx.id).ok();
        let outcome = if ok { "read" } else { "refused" };
        self.gateway
            .runs()
            .record_read(&actor, run, request_id, what, outcome);
    }

    pub(super) async fn relay_read_resource(
        &self,
        params: ReadResourceRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<ReadResourceResult, ErrorData> {
        let what = logged("resource", &params.uri);
        let read = self.passage(ctx)?.read_resource(params).await;
        self.log_read(ctx, what, read.is_ok()).await;
        read.map(|(result, _)| result)
    }

    pub(super) async fn relay_get_prompt(
        &self,
        params: GetPromptRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<GetPromptResult, ErrorData> {
        let what = logged("prompt", &params.name);
        let got = self.passage(ctx)?.get_prompt(params).await;
        self.log_read(ctx, what, got.is_ok()).await;
        got
    }

    /// `resources/subscribe` and `resources/unsubscribe`.
    pub(super) async fn relay_subscription(
        &self,
        uri: String,
        on: bool,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let client = self.client_key(&ctx.extensions).ok_or_else(|| {
            ErrorData::invalid_request(
                "a subscription needs a session to send its updates on (MCP 2026-07-28 subscribes with subscriptions/listen)",
                None,
            )
        })?;
        let owner = self.passage(ctx)?.resource_owner(&uri)?;
        let name = owner.upstream.name().to_string();
        if !self.audience.subscription(&client, &name, &uri, on) {
            // Already so for this client: nothing to pass on.
            return Ok(());
        }
        if on {
            owner.upstream.subscribe_resource(&uri).await.map_err(|e| {
                self.audience.subscription(&client, &name, &uri, false);
                pass_error(e)
            })
        } else {
            owner
                .upstream
                .unsubscribe_resource(&uri)
                .await
                .map_err(pass_error)
        }
    }

    /// `logging/setLevel`: the client hears messages at or above `level`; each upstream it
    /// sees is asked for the most verbose level any of its clients wants.
    pub(super) async fn relay_set_level(
        &self,
        params: SetLevelRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let passage = self.passage(ctx)?;
        let client = self.client_key(&ctx.extensions).unwrap_or_default();
        // Recorded for this client whatever its upstreams do: it filters what it hears.
        self.audience.set_level(&client, params.level, |_| false);
        for v in &passage.visible {
            if v.upstream
                .capabilities()
                .is_none_or(|c| c.logging.is_none())
            {
                continue;
            }
            let name = v.upstream.name().to_string();
            let wanted = self.audience.set_level(&client, params.level, |actor| {
                self.gateway
                    .upstream_tools()
                    .upstreams_for(actor)
                    .iter()
                    .any(|u| u.upstream.name() == name)
            });
            let level = level_of(wanted);
            let request = ClientRequest::SetLevelRequest(SetLevelRequest::new(
                SetLevelRequestParams::new(level),
            ));
            if let Err(e) = v.upstream.pass(request, &passage.cancel).await {
                tracing::info!(upstream = %name, error = %e, "an upstream did not take the log level");
            }
        }
        Ok(())
    }
}
