//! [`McpTool`]: one upstream tool bound to a contract, as a [`Channel`].

use std::sync::Arc;
use std::time::Duration;

use postern_core::contract::{McpSpec, StatusTool, ToolErrorVerdict};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest, RequestMetaObject,
    ServerResult,
};
use rmcp::service::PeerRequestOptions;
use rmcp::{Peer, RoleClient, ServiceError};
use serde_json::{json, Map, Value};

use super::client::InFlight;
use super::progress::ProgressRoute;
use super::{Upstream, EXECUTION_ID_META};
use crate::channel::{Action, Answer, AnswerVerdict, Channel, Outcome, Pending, Question, Reading};
use crate::secret::redact_answer;

/// One upstream tool under a contract.
pub struct McpTool {
    pub(super) upstream: Arc<Upstream>,
    pub(super) tool: String,
    pub(super) timeout: Duration,
    pub(super) max_duration: Duration,
    pub(super) on_tool_error: ToolErrorVerdict,
    status_tool: Option<StatusTool>,
    pub(super) max_response_bytes: usize,
    /// The tool's contract says it only reads: an answer over the cap still reaches the caller.
    pub(super) reads: bool,
}

impl McpTool {
    pub fn new(
        upstream: Arc<Upstream>,
        spec: &McpSpec,
        status_tool: Option<StatusTool>,
        reads: bool,
    ) -> McpTool {
        McpTool {
            upstream,
            tool: spec.tool.clone(),
            timeout: spec.timeout,
            max_duration: spec.max_duration.max(spec.timeout),
            on_tool_error: spec.on_tool_error,
            status_tool,
            max_response_bytes: spec.max_response_bytes,
            reads,
        }
    }

    pub fn upstream(&self) -> &Arc<Upstream> {
        &self.upstream
    }

    /// The upstream's name for the tool.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// Why the tool cannot be called although the link is up: the upstream does not list it.
    fn unlisted(&self) -> Option<String> {
        let state = self.upstream.state();
        if state.up.is_err() || state.tools.iter().any(|t| t.name == self.tool) {
            return None;
        }
        Some(format!(
            "upstream {} does not list a tool {:?} now",
            self.upstream.name(),
            self.tool
        ))
    }

    /// How long a call waits: `timeout` from its sending or its last progress report (a call
    /// runs as long as its upstream keeps it alive), never past `max_duration`.
    fn patience(&self) -> PeerRequestOptions {
        PeerRequestOptions::with_timeout(self.timeout)
            .reset_timeout_on_progress()
            .with_max_total_timeout(self.max_duration)
    }

    /// One `tools/call` of `tool`, handed to the live link once.
    async fn call(&self, tool: &str, arguments: Map<String, Value>, action: &Action<'_>) -> Call {
        // A link that is (re)connecting is waited for, up to the upstream's startup_timeout.
        let peer = match self.upstream.live_peer().await {
            Ok(peer) => peer,
            Err(why) => return Call::NotSent(why),
        };
        let mut meta = RequestMetaObject::new();
        meta.insert(EXECUTION_ID_META.into(), json!(action.execution_id));
        if let Some(traceparent) = &action.traceparent {
            // MCP's trace-context convention: W3C `traceparent` in the request's `_meta`.
            meta.insert("traceparent".into(), json!(traceparent));
        }
        let mut params = CallToolRequestParams::new(tool.to_string());
        params.meta = Some(meta);
        params.arguments = Some(arguments);
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        // The caller's client answers the upstream's questions while the call is in flight;
        // what Postern refuses the upstream meanwhile is noted on the call.
        let in_flight = InFlight {
            asker: action.asker.clone(),
            ..InFlight::default()
        };
        let key = NEXT_ASKER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Ok(mut askers) = self.upstream.askers.lock() {
            askers.insert(key, in_flight.clone());
        }
        let asking = AskerGuard {
            upstream: &self.upstream,
            key,
        };
        let (peer, handle) = match peer
            .send_request_with_option(request.clone(), self.patience())
            .await
        {
            Ok(handle) => (peer, handle),
            // The link's loop was gone: the request never entered it, so it is safe to hand
            // it once to the next link (a restarted server), if one comes within the bound.
            Err(_) => match self.upstream.live_peer().await {
                Ok(next) => match next
                    .send_request_with_option(request, self.patience())
                    .await
                {
                    Ok(handle) => (next, handle),
                    Err(e) => return Call::NotSent(self.closed_before_taking(e)),
                },
                Err(why) => return Call::NotSent(why),
            },
        };
        let token = handle.progress_token.clone();
        let route = action.progress.clone().map(ProgressRoute::new);
        if let (Some(route), Ok(mut routes)) = (&route, self.upstream.progress.lock()) {
            routes.insert(token.clone(), route.clone());
        }
        let answer =
            super::passage::answer(&peer, handle, &action.cancel, self.upstream.name()).await;
        if let Some(route) = &route {
            route.settled().await;
        }
        if let Ok(mut routes) = self.upstream.progress.lock() {
            routes.remove(&token);
        }
        drop(asking);
        match answer {
            Err(e) if refused_before_sending(&e) => Call::NotTaken(e, peer),
            answer => Call::Answered(answer, in_flight.refusals()),
        }
    }

    fn closed_before_taking(&self, e: ServiceError) -> String {
        format!(
            "upstream {}: the link had closed before it took the request ({e})",
            self.upstream.name()
        )
    }

    pub(super) fn answer(
        &self,
        result: &CallToolResult,
        verdict: AnswerVerdict,
        action: &Action<'_>,
    ) -> Answer {
        let bytes = serde_json::to_vec(result).unwrap_or_default();
        let cap = self.max_response_bytes;
        let body = redact_answer(&bytes, usize::MAX, &action.redaction_needles(), true);
        let size = body.len() as u64;
        if body.len() <= cap {
            return Answer {
                status: None,
                verdict,
                body,
                size,
                truncated: false,
                whole: None,
            };
        }
        // A cut JSON text is not JSON: the stored answer says what happened instead.
        let digest = postern_core::hexdigits::encode(postern_core::digest::sha256(&body));
        let note = if self.reads {
            format!("the upstream's result was {size} bytes, over this tool's {cap}-byte max_response_bytes: it was given to the caller whole and not stored (a read is performed again on every call)")
        } else {
            format!("the upstream's result was {size} bytes, over this tool's {cap}-byte max_response_bytes: it was not stored, and the caller got this note; raise max_response_bytes for the tool or its upstream to keep such answers")
        };
        let stored = serde_json::to_vec(&json!({
            "truncated": true,
            "size": size,
            "sha256": digest,
            "note": note,
        }))
        .unwrap_or_default();
        Answer {
            status: None,
            verdict,
            body: stored,
            size,
            truncated: true,
            whole: self.reads.then_some(body),
        }
    }
}

/// Numbers the askers registered on links (unique within the process).
static NEXT_ASKER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Takes a call's asker off its link when the call ends, however it ends.
struct AskerGuard<'a> {
    upstream: &'a Upstream,
    key: u64,
}

impl Drop for AskerGuard<'_> {
    fn drop(&mut self) {
        if let Ok(mut askers) = self.upstream.askers.lock() {
            askers.remove(&self.key);
        }
    }
}

// One value per call, matched at once: boxing the answer would buy nothing.
#[allow(clippy::large_enum_variant)]
enum Call {
    NotSent(String),
    /// The link's server refused the request untaken (a refused connection, a session it no
    /// longer knows): the link it was sent on must end.
    NotTaken(ServiceError, Peer<RoleClient>),
    /// The answer, and what Postern refused the upstream while the call was in flight.
    Answered(Result<ServerResult, ServiceError>, Vec<String>),
}

/// Whether a failed link error proves nothing was taken: an HTTP connection that was refused,
/// or a session the server no longer knows.
pub(super) fn refused_before_sending(e: &ServiceError) -> bool {
    let ServiceError::TransportSend(e) = e else {
        return false;
    };
    super::session_guard::not_taken(e.error.as_ref())
}

impl Channel for McpTool {
    fn target(
        &self,
        _arguments: &Map<String, Value>,
        _secret: &dyn Fn(&str) -> bool,
    ) -> Result<Value, String> {
        // The upstream's own annotations as it lists them now: recorded so that an
        // investigation sees what the upstream claimed (untrusted: the class decides).
        let state = self.upstream.state();
        let annotations = state
            .tools
            .iter()
            .find(|t| t.name == self.tool)
            .and_then(|t| t.annotations.clone());
        let mut target = json!({"target": {"upstream": self.upstream.name(), "tool": self.tool}});
        if let Some(a) = annotations {
            target["upstream_annotations"] = a;
        }
        Ok(target)
    }

    fn send<'a>(&'a self, action: Action<'a>) -> Pending<'a, Outcome> {
        Box::pin(async move {
            let name = self.upstream.name();
            if let Some(why) = self.unlisted() {
                return Outcome::NotSent { reason: why };
            }
            let mut call = self
                .call(&self.tool, action.arguments.clone(), &action)
                .await;
            if let Call::NotTaken(e, old) = &call {
                // A restarted server that did not take the request: a new session, now rather
                // than at the next timeout, and the request handed to it once.
                tracing::info!(upstream = %name, error = %e, "the upstream did not take the request; sending it once on a new link");
                self.upstream.relink.notify_one();
                self.upstream.link_ended(old).await;
                call = self
                    .call(&self.tool, action.arguments.clone(), &action)
                    .await;
            }
            match call {
                Call::NotSent(reason) => Outcome::NotSent { reason },
                Call::NotTaken(e, _) => {
                    // Not taken on the new link either: nothing was applied.
                    self.upstream.relink.notify_one();
                    Outcome::NotSent {
                        reason: format!(
                            "upstream {name} did not take the request ({e}); nothing was applied"
                        ),
                    }
                }
                Call::Answered(answer, refused) => self.outcome(answer, &refused, &action),
            }
        })
    }

    fn ask<'a>(&'a self, question: Question, action: Action<'a>) -> Option<Pending<'a, Reading>> {
        let status = match question {
            Question::Status => self.status_tool.as_ref()?,
            Question::Precondition | Question::Marker => return None,
        };
        Some(Box::pin(async move {
            let arguments = fill(&status.arguments, action.arguments, action.execution_id);
            match self.call(&status.tool, arguments, &action).await {
                Call::Answered(Ok(ServerResult::CallToolResult(result)), _) => {
                    let applied = result
                        .structured_content
                        .as_ref()
                        .and_then(|v| v.get("applied"))
                        .and_then(Value::as_bool);
                    match (applied, result.is_error) {
                        (Some(true), _) | (None, None | Some(false)) => {
                            Reading::Yes(self.answer(&result, AnswerVerdict::Applied, &action))
                        }
                        (Some(false), _) | (None, Some(true)) => Reading::NotFound,
                    }
                }
                _ => Reading::NoAnswer,
            }
        }))
    }

    fn unavailable(&self) -> Option<String> {
        self.upstream.peer().err().or_else(|| self.unlisted())
    }
}

/// The status tool's arguments: a string `"{execution_id}"` becomes the id, `"{name}"` the
/// call's argument `name` (when it has one); everything else is kept.
fn fill(
    template: &Map<String, Value>,
    arguments: &Map<String, Value>,
    id: &str,
) -> Map<String, Value> {
    template
        .iter()
        .map(|(k, v)| {
            let filled = match v
                .as_str()
                .and_then(|s| s.strip_prefix('{')?.strip_suffix('}'))
            {
                Some("execution_id") => json!(id),
                Some(name) => arguments.get(name).cloned().unwrap_or_else(|| v.clone()),
                None => v.clone(),
            };
            (k.clone(), filled)
        })
        .collect()
}

pub(super) fn result_kind(r: &ServerResult) -> &'static str {
    match r {
        ServerResult::CreateTaskResult(_) => "task",
        ServerResult::InputRequiredResult(_) => "request for input",
        _ => "result of another kind",
    }
}
