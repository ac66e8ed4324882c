//! Per-actor bounds of the HTTP front (issue 12): `tools/call` requests in flight, MCP sessions
//! held and SSE streams kept open. Each is counted on this gateway instance (replicas count
//! their own); a request over one is refused with 429 and a JSON-RPC error naming the limit,
//! before rmcp or the pipeline sees it, so nothing is recorded or sent. One agent cannot take
//! every connection, writer slot, session worker or target connection of the gateway.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use axum::http::{header, StatusCode};
use axum::response::Response;
use postern_core::config::GatewaySettings;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use serde_json::{json, Value};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::jsonrpc_error;

/// Which per-actor limit refused a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Limit {
    Calls,
    Sessions,
    Streams,
}

impl Limit {
    /// The `[gateway]` key that sets it.
    fn key(self) -> &'static str {
        match self {
            Limit::Calls => "max_calls_per_actor",
            Limit::Sessions => "max_sessions_per_actor",
            Limit::Streams => "max_streams_per_actor",
        }
    }
}

/// A request refused by a per-actor limit.
#[derive(Debug)]
pub(super) struct Refusal {
    limit: Limit,
    actor: String,
    value: usize,
}

impl Refusal {
    /// 429 with a JSON-RPC error (-32000) that names the limit and says nothing happened; for a
    /// call, also `Retry-After` (its slot comes back when an answer is written, within seconds).
    pub(super) fn response(&self, request_id: Value) -> Response {
        let Refusal {
            limit,
            actor,
            value,
        } = self;
        let key = limit.key();
        let message = match limit {
            Limit::Calls => format!(
                "actor {actor} already has {value} calls in flight (the gateway's {key}): \
                 nothing was recorded or sent; call again after Retry-After"
            ),
            Limit::Sessions => format!(
                "actor {actor} already holds {value} MCP sessions (the gateway's {key}): no \
                 session was opened and nothing was recorded; end one (DELETE /mcp with its \
                 Mcp-Session-Id) or let one expire, then try again"
            ),
            Limit::Streams => format!(
                "actor {actor} already has {value} streams open (the gateway's {key}): nothing \
                 was recorded or sent; close a stream (a GET /mcp) or let a call finish, then \
                 try again"
            ),
        };
        let mut response = jsonrpc_error(
            StatusCode::TOO_MANY_REQUESTS,
            request_id,
            -32000,
            message,
            json!({"limit": key, "value": value}),
        );
        if *limit == Limit::Calls {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, http::HeaderValue::from_static("1"));
        }
        response
    }
}

/// The per-actor limits of one front.
pub(super) struct ActorLimits {
    pub(super) calls: Slots,
    pub(super) streams: Slots,
    pub(super) sessions: SessionLimits,
}

impl ActorLimits {
    /// `sessions` is rmcp's session manager: a session it no longer holds frees its slot.
    pub(super) fn new(
        settings: &GatewaySettings,
        sessions: Arc<LocalSessionManager>,
    ) -> ActorLimits {
        let count = |n: u32| usize::try_from(n).unwrap_or(usize::MAX);
        ActorLimits {
            calls: Slots::new(Limit::Calls, count(settings.max_calls_per_actor)),
            streams: Slots::new(Limit::Streams, count(settings.max_streams_per_actor)),
            sessions: SessionLimits {
                per_actor: count(settings.max_sessions_per_actor),
                live: sessions,
                held: Mutex::new(HashMap::new()),
            },
        }
    }
}

/// What an admitted request holds while it is answered.
pub(super) struct Held<'a> {
    /// A `tools/call`'s slot, held by its response body until the answer is written or lost.
    pub(super) call: Option<OwnedSemaphorePermit>,
    /// A request that may answer with a stream (a `GET`, a JSON-RPC request): held by the
    /// response body while it is a stream, given back at once otherwise.
    pub(super) stream: Option<OwnedSemaphorePermit>,
    /// A session slot for a request that opens or restores a session.
    pub(super) session: Option<SessionAdmission<'a>>,
}

impl ActorLimits {
    /// Takes the slots a request of `actor` needs, or refuses it. `message` is a `POST`'s
    /// JSON-RPC message; `session` its `Mcp-Session-Id`.
    pub(super) async fn admit(
        &self,
        method: &http::Method,
        message: Option<&Value>,
        session: Option<&str>,
        actor: &str,
    ) -> Result<Held<'_>, Refusal> {
        let rpc_method = message
            .and_then(|m| m.get("method"))
            .and_then(Value::as_str);
        let call = match rpc_method {
            Some("tools/call") => Some(self.calls.try_acquire(actor)?),
            _ => None,
        };
        let session = if *method == http::Method::DELETE {
            // Closing a session is never refused: it is how a slot is freed.
            None
        } else if rpc_method == Some("initialize") && session.is_none() {
            self.sessions.admit(actor, None).await?
        } else if let Some(id) = session {
            self.sessions.admit(actor, Some(id)).await?
        } else {
            None
        };
        // rmcp answers a JSON-RPC request (one with an id) and a GET with an SSE stream.
        let is_request = message.is_some_and(|m| {
            m.get("method").is_some() && m.get("id").is_some_and(|id| !id.is_null())
        });
        let stream = if *method == http::Method::GET || is_request {
            Some(self.streams.try_acquire(actor)?)
        } else {
            None
        };
        Ok(Held {
            call,
            stream,
            session,
        })
    }
}

/// `per_actor` slots for each actor, each held until its permit is dropped.
pub(super) struct Slots {
    limit: Limit,
    per_actor: usize,
    by_actor: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl Slots {
    fn new(limit: Limit, per_actor: usize) -> Slots {
        Slots {
            limit,
            per_actor,
            by_actor: Mutex::new(HashMap::new()),
        }
    }

    /// A slot for `actor`, or the refusal when the actor holds all of its slots.
    pub(super) fn try_acquire(&self, actor: &str) -> Result<OwnedSemaphorePermit, Refusal> {
        let semaphore = {
            let mut map = self.by_actor.lock().unwrap_or_else(|e| e.into_inner());
            map.entry(actor.to_string())
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_actor)))
                .clone()
        };
        semaphore.try_acquire_owned().map_err(|_| Refusal {
            limit: self.limit,
            actor: actor.to_string(),
            value: self.per_actor,
        })
    }
}

/// The MCP sessions each actor holds in memory. A session is held from its `initialize` (or its
/// restore from the ledger) until rmcp lets it go: closed by `DELETE`, or idle past rmcp's
/// keep-alive (5 minutes). A session let go is restored when its client uses it again, and that
/// restore is counted (and refused over the limit) like an `initialize`.
pub(super) struct SessionLimits {
    per_actor: usize,
    live: Arc<LocalSessionManager>,
    held: Mutex<HashMap<String, ActorSessions>>,
}

#[derive(Default)]
struct ActorSessions {
    /// Sessions admitted for this actor; the ones rmcp has let go since are pruned on the next
    /// admission.
    ids: HashSet<String>,
    /// Admissions not answered yet (an `initialize`, a restore): counted, not known by id.
    admitting: usize,
}

impl SessionLimits {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, ActorSessions>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits a request of `actor` that opens a session (`initialize`: `session` is `None`) or
    /// uses `session`. `Ok(None)`: the session is in rmcp's memory, so it holds its slot already
    /// and is never refused; one that is not (closed, expired, or from before a restart) would
    /// be restored, and is admitted like a new one.
    pub(super) async fn admit(
        &self,
        actor: &str,
        session: Option<&str>,
    ) -> Result<Option<SessionAdmission<'_>>, Refusal> {
        let live = self.live.sessions.read().await;
        let mut held = self.lock();
        let sessions = held.entry(actor.to_string()).or_default();
        if let Some(id) = session {
            if live.contains_key(id) {
                if !sessions.ids.contains(id) {
                    // Restored by a request that raced a prune: counted again.
                    sessions.ids.insert(id.to_string());
                }
                return Ok(None);
            }
        }
        sessions.ids.retain(|id| live.contains_key(id.as_str()));
        if sessions.ids.len() + sessions.admitting >= self.per_actor {
            return Err(Refusal {
                limit: Limit::Sessions,
                actor: actor.to_string(),
                value: self.per_actor,
            });
        }
        sessions.admitting += 1;
        Ok(Some(SessionAdmission {
            limits: self,
            actor: actor.to_string(),
        }))
    }

    /// `session` of `actor` was closed (`DELETE`): its slot is free now.
    pub(super) fn release(&self, actor: &str, session: &str) {
        if let Some(sessions) = self.lock().get_mut(actor) {
            sessions.ids.remove(session);
        }
    }
}

/// A session slot taken for one request while it is answered; [`SessionAdmission::opened`]
/// keeps it for the session, dropping it gives it back.
pub(super) struct SessionAdmission<'a> {
    limits: &'a SessionLimits,
    actor: String,
}

impl SessionAdmission<'_> {
    /// The request opened (or restored) `session`: it holds the slot from now on.
    pub(super) fn opened(self, session: &str) {
        if let Some(sessions) = self.limits.lock().get_mut(&self.actor) {
            sessions.ids.insert(session.to_string());
        }
    }
}

impl Drop for SessionAdmission<'_> {
    fn drop(&mut self) {
        if let Some(sessions) = self.limits.lock().get_mut(&self.actor) {
            sessions.admitting = sessions.admitting.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use rmcp::transport::streamable_http_server::session::SessionManager;

    use super::*;

    #[test]
    fn slots_are_per_actor_and_come_back_when_dropped() {
        let slots = Slots::new(Limit::Streams, 1);
        let held = slots.try_acquire("a").unwrap();
        let refused = slots.try_acquire("a").unwrap_err();
        assert_eq!((refused.limit, refused.value), (Limit::Streams, 1));
        let _other = slots.try_acquire("b").expect("another actor has its own");
        drop(held);
        let _again = slots.try_acquire("a").expect("given back");
    }

    #[tokio::test]
    async fn a_session_in_memory_is_never_refused_and_one_let_go_frees_its_slot() {
        let manager = Arc::new(LocalSessionManager::default());
        let limits = SessionLimits {
            per_actor: 1,
            live: manager.clone(),
            held: Mutex::default(),
        };
        let admission = limits.admit("a", None).await.unwrap().unwrap();
        let refused = limits.admit("a", None).await.err().unwrap();
        assert_eq!(refused.limit, Limit::Sessions, "one being opened counts");
        let (id, _transport) = manager.create_session().await.unwrap();
        admission.opened(&id);
        assert!(
            limits.admit("a", Some(&id)).await.unwrap().is_none(),
            "a session in memory holds its slot already"
        );
        assert!(limits.admit("a", None).await.is_err());
        assert!(limits.admit("b", None).await.unwrap().is_some());
        manager.close_session(&id).await.unwrap();
        assert!(
            limits.admit("a", None).await.unwrap().is_some(),
            "a session let go frees its slot"
        );
    }

    #[tokio::test]
    async fn restoring_a_session_over_the_limit_is_refused_and_a_delete_never_is() {
        let manager = Arc::new(LocalSessionManager::default());
        let settings = postern_core::config::Config::parse(
            "[gateway]\nfingerprint_key = { env = \"K\" }\nmax_sessions_per_actor = 1\n",
            "t.toml",
        )
        .unwrap()
        .gateway;
        let limits = ActorLimits::new(&settings, manager.clone());
        let (id, _transport) = manager.create_session().await.unwrap();
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize"});
        let held = limits
            .admit(&http::Method::POST, Some(&init), None, "a")
            .await
            .unwrap();
        held.session.unwrap().opened(&id);
        let refused = limits
            .admit(
                &http::Method::GET,
                None,
                Some("stored-before-a-restart"),
                "a",
            )
            .await
            .err()
            .unwrap();
        assert_eq!(refused.limit, Limit::Sessions);
        let delete = limits
            .admit(
                &http::Method::DELETE,
                None,
                Some("stored-before-a-restart"),
                "a",
            )
            .await
            .unwrap();
        assert!(delete.session.is_none() && delete.stream.is_none());
    }
}
