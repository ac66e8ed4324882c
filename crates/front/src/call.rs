//! `tools/call`, served: an MCP request turned into the pipeline's [`ToolCall`], run as a call
//! or (when it may wait for a person) as a task, and its report turned into the MCP answer.

use postern_core::config::Principal;
use postern_core::contract::EXECUTION_STATUS;
use rmcp::model::{CallToolRequestParams, CallToolResponse, CreateTaskResult};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::Value;

use postern_pipeline::{Cancellation, ToolCall};

use super::delivery::DeliverySlot;
use super::handler::{Disconnected, PosternMcp, RawParams};
use super::result::tool_result;
use super::{auth, elicit, errors, progress, questions, tasks};

impl PosternMcp {
    /// `tools/call`, served (boxed by [`rmcp::ServerHandler::call_tool`]).
    pub(crate) async fn call_tool_unboxed(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let actor = self.actor(&ctx)?;
        let run_id = self
            .run_id(&ctx, &actor)
            .await
            .map_err(|fault| ErrorData::invalid_params(fault, None))?;
        let parts = ctx.extensions.get::<http::request::Parts>();
        let operation_key = ctx
            .meta
            .get("io.postern/idempotency-key")
            .and_then(Value::as_str)
            .map(str::to_string)
            .or_else(|| {
                parts
                    .and_then(|p| p.extensions.get::<RawParams>())
                    .and_then(|r| r.idempotency_key.clone())
            });
        // Cancelled by `notifications/cancelled` (rmcp's token) or, without a session, by the
        // client going away.
        let cancel = Cancellation::new(
            ctx.ct.clone(),
            parts
                .and_then(|p| p.extensions.get::<Disconnected>())
                .map(|d| d.0.clone())
                .unwrap_or_default(),
        );
        let retried_with_input = request.input_responses.is_some();
        let relay = progress::ProgressRelay::of(&ctx);
        let call = ToolCall {
            actor: actor.clone(),
            tool: request.name.to_string(),
            arguments: request.arguments.unwrap_or_default(),
            operation_key,
            reissue_key: ctx
                .meta
                .get("io.postern/reissue-key")
                .and_then(Value::as_str)
                .map(str::to_string),
            intent_scope: ctx
                .meta
                .get("io.postern/intent-scope")
                .and_then(Value::as_str)
                .map(str::to_string),
            run_id,
            client_address: auth::client_address(&ctx.extensions).map(|a| a.to_string()),
            principal: ctx
                .extensions
                .get::<http::request::Parts>()
                .and_then(|p| p.extensions.get::<Principal>())
                .cloned(),
            request_id: serde_json::to_string(&ctx.id).ok(),
            // MCP's trace-context convention: W3C trace context in the request's `_meta`.
            trace_parent: ctx
                .meta
                .get("traceparent")
                .and_then(Value::as_str)
                .map(str::to_string),
            cancel: Some(cancel),
            progress: relay.as_ref().map(|(_, sink)| sink.clone()),
            asker: Some(questions::client_asker(
                &ctx,
                self.client_key(&ctx.extensions)
                    .unwrap_or_else(|| format!("request:{}", questions::next_request())),
            )),
        };
        // A call that may wait for a person is served as a task too.
        let wants_task = (self.gateway.policy().is_long_running(&call.tool)
            || self.gateway.policy().asks_approval(&call.tool))
            && ctx
                .client_capabilities()
                .is_some_and(|c| c.supports_tasks());
        if wants_task {
            // A task outlives its request: no disconnect cancels it (tasks/cancel asks).
            let call = ToolCall {
                cancel: None,
                ..call
            };
            let summary = match Box::pin(self.gateway.start(call)).await {
                Ok(summary) => summary,
                Err(refused) => return errors::refused_call(refused),
            };
            return Ok(CallToolResponse::Task(CreateTaskResult::new(
                tasks::task_of(&summary, self.gateway.is_running(summary.id)),
            )));
        }
        // Counted by the gateway's tracker: a graceful stop waits for the call to record its end.
        let polling = call.tool == EXECUTION_STATUS;
        // Boxed (as the task's start above and the question below): inline, the gateway's
        // whole call would make this future kilobytes large, and rmcp moves it several times.
        let report = Box::pin(self.gateway.call(call)).await;
        if let Some((relay, _)) = relay {
            // Every progress report goes out before the answer.
            relay.drain().await;
        }
        let report = match report {
            Ok(report) => report,
            Err(refused) => return errors::refused_call(refused),
        };
        let asked = elicit::ask_in_client(&self.gateway, &ctx, retried_with_input, &report, &actor);
        if let Some(response) = Box::pin(asked).await {
            return Ok(response);
        }
        if let Some(slot) = parts.and_then(|p| p.extensions.get::<DeliverySlot>()) {
            // A status poll delivers the result at most once: later polls of a delivered
            // execution would otherwise append a `delivered` event per read, forever.
            if !(polling && matches!(report.state, postern_core::State::Delivered(_))) {
                slot.carry(&self.gateway, report.execution_id);
            }
        }
        Ok(tool_result(&report).into())
    }
}
