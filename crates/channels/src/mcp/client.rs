//! The client side of one upstream link: what Postern tells the server about itself, and what
//! it does with the server's notifications (a changed list, progress of a call, a log message,
//! an updated resource) and with its questions during a call (sampling, elicitation, roots).
//!
//! Postern declares upstream exactly what it can pass on: sampling, elicitation (form and URL)
//! and roots. A question is passed to the client of the call in flight on this link; with no
//! call in flight, `roots/list` is answered with no roots (the link serves many clients, none
//! of whose roots apply to all) and the others are refused. With calls of several clients in
//! flight the link cannot tell which one asked (MCP does not say), and refuses too, saying so.

// Logging, sampling and roots are deprecated by SEP-2577, but the servers in the field use them.
#![allow(deprecated)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult,
    ElicitRequestParams, ElicitResult, ErrorCode, Implementation, ListRootsResult,
    LoggingMessageNotificationParam, ProgressNotificationParam, ResourceUpdatedNotificationParam,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ClientHandler, ErrorData, RoleClient};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::json;
use tokio::sync::{broadcast, Notify};

use super::progress::ProgressRoutes;
use crate::channel::{ClientAsker, Progress};

/// The calls in flight on a link, by a number each call holds.
pub(super) type Askers = Arc<Mutex<HashMap<u64, InFlight>>>;

/// One call in flight on a link: the client that answers the upstream's questions during it
/// (if it has one), and the questions of the upstream that got no answer during it (Postern
/// refused them, or the client did).
#[derive(Clone, Default)]
pub(super) struct InFlight {
    pub asker: Option<ClientAsker>,
    pub refused: Arc<Mutex<Vec<String>>>,
}

impl InFlight {
    fn refuse(&self, method: &str, why: &str) {
        let why = why.strip_prefix("Postern: ").unwrap_or(why);
        if let Ok(mut r) = self.refused.lock() {
            r.push(format!("{method} ({why})"));
        }
    }

    /// The upstream's questions that got no answer during the call, in order.
    pub fn refusals(&self) -> Vec<String> {
        self.refused.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

/// What an upstream tells its clients outside any answer: the front passes it on to the
/// clients that see the upstream.
#[derive(Clone, Debug)]
pub enum UpstreamEvent {
    /// `notifications/message`.
    Log(LoggingMessageNotificationParam),
    /// `notifications/resources/updated` of a resource someone subscribed to.
    ResourceUpdated(String),
    /// `notifications/resources/list_changed`.
    ResourcesChanged,
    /// `notifications/prompts/list_changed`.
    PromptsChanged,
}

#[derive(Clone)]
pub(super) struct LinkClient {
    /// Woken by `notifications/tools/list_changed`: the link reads the list again.
    pub refresh: Arc<Notify>,
    pub progress: ProgressRoutes,
    pub askers: Askers,
    pub events: broadcast::Sender<UpstreamEvent>,
}

/// The capabilities Postern declares to every upstream (and `postern connect` to its gateway):
/// those it can pass on to a caller.
pub fn forwarded_capabilities() -> ClientCapabilities {
    serde_json::from_value(json!({
        "sampling": {},
        "elicitation": {"form": {}, "url": {}},
        "roots": {}
    }))
    .unwrap_or_default()
}

impl LinkClient {
    /// The one client of the calls in flight (and its call), or why there is none to ask.
    /// A refusal is noted on every call in flight: one of them asked.
    fn caller(&self, method: &str) -> Result<Option<InFlight>, ErrorData> {
        let calls = self
            .askers
            .lock()
            .map_err(|_| ErrorData::internal_error("the gateway's link state is poisoned", None))?;
        let mut asking = calls.values().filter(|c| c.asker.is_some());
        let Some(first) = asking.next() else {
            if method != "roots/list" {
                let why = format!(
                    "Postern passes {method} only to the client of a call in flight, and none is"
                );
                calls.values().for_each(|c| c.refuse(method, &why));
            }
            return Ok(None);
        };
        let client = |c: &InFlight| c.asker.as_ref().map(|a| a.client.clone());
        if asking.any(|c| client(c) != client(first)) {
            let why = format!("Postern: {method} came while calls of several clients were in flight on this link; MCP does not say which call asked, so it is not passed to any");
            calls.values().for_each(|c| c.refuse(method, &why));
            return Err(ErrorData::new(ErrorCode::INVALID_REQUEST, why, None));
        }
        Ok(Some(first.clone()))
    }

    async fn ask<P: Serialize, R: DeserializeOwned>(
        &self,
        method: &str,
        params: &P,
        call: InFlight,
    ) -> Result<R, ErrorData> {
        let params = serde_json::to_value(params)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let Some(asker) = &call.asker else {
            return Err(Self::no_call(method));
        };
        let answer = (asker.ask)(method.to_string(), params).await.map_err(|r| {
            let who = if r.by_gateway {
                ""
            } else {
                "the client refused it: "
            };
            call.refuse(method, &format!("{who}{}", r.message));
            ErrorData::new(ErrorCode(r.code), r.message, None)
        })?;
        serde_json::from_value(answer).map_err(|e| {
            ErrorData::internal_error(format!("the client's answer to {method}: {e}"), None)
        })
    }

    fn no_call(method: &str) -> ErrorData {
        ErrorData::new(
            ErrorCode::INVALID_REQUEST,
            format!("Postern passes {method} only to the client of a call in flight, and none is"),
            None,
        )
    }

    fn tell(&self, event: UpstreamEvent) {
        // No receiver (no front listening) is fine: nobody to tell.
        let _ = self.events.send(event);
    }
}

impl ClientHandler for LinkClient {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            forwarded_capabilities(),
            Implementation::new("postern", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        const METHOD: &str = "sampling/createMessage";
        match self.caller(METHOD)? {
            Some(call) => self.ask(METHOD, &params, call).await,
            None => Err(Self::no_call(METHOD)),
        }
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        const METHOD: &str = "elicitation/create";
        match self.caller(METHOD)? {
            Some(call) => self.ask(METHOD, &params, call).await,
            None => Err(Self::no_call(METHOD)),
        }
    }

    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        const METHOD: &str = "roots/list";
        match self.caller(METHOD)? {
            Some(call) => self.ask(METHOD, &json!({}), call).await,
            None => Ok(ListRootsResult::default()),
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.refresh.notify_one();
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tell(UpstreamEvent::ResourcesChanged);
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tell(UpstreamEvent::PromptsChanged);
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.tell(UpstreamEvent::Log(params));
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.tell(UpstreamEvent::ResourceUpdated(params.uri));
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let route = self
            .progress
            .lock()
            .ok()
            .and_then(|routes| routes.get(&params.progress_token).cloned());
        if let Some(route) = route {
            route.hand_on(Progress {
                progress: params.progress,
                total: params.total,
                message: params.message,
            });
        }
    }
}
