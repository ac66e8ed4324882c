//! Per-actor bounds of the HTTP front (issues 12 and 35): `tools/call` requests in flight, MCP
//! sessions held and SSE streams kept open. Each is counted on this gateway instance (replicas
//! count their own). A bound never locks its actor out: at the session or stream cap the
//! actor's least recently used idle session (or oldest idle stream) gives way; only a request
//! that finds every slot busy is refused, with 429 and a JSON-RPC error naming the limit,
//! before rmcp or the pipeline sees it, so nothing is recorded or sent. One agent cannot take
//! every connection, writer slot, session worker or target connection of the gateway.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use postern_core::config::GatewaySettings;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use serde_json::{json, Value};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::errors::jsonrpc_error;

mod connections;
mod streams;
pub(super) use connections::ConnectionSlots;
pub(super) use streams::{StreamPermit, StreamSlots};

/// Which per-actor limit refused a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Limit {
    Calls,
    Sessions,
    Streams,
    Connections,
}

impl Limit {
    /// The `[gateway]` key that sets it.
    fn key(self) -> &'static str {
        match self {
            Limit::Calls => "max_calls_per_actor",
            Limit::Sessions => "max_sessions_per_actor",
            Limit::Streams => "max_streams_per_actor",
            Limit::Connections => "max_connections_per_actor",
        }
    }
}

/// A request refused by a per-actor limit, or naming a session the limit gave up.
#[derive(Debug)]
pub(super) enum Refusal {
    Over {
        limit: Limit,
        actor: String,
        value: usize,
    },
    /// The session was evicted to make room for a newer one of its actor: to its client it is
    /// unknown (404), as MCP prescribes, so the client initialises again.
    Evicted,
}

impl Refusal {
    fn over(limit: Limit, actor: &str, value: usize) -> Refusal {
        Refusal::Over {
            limit,
            actor: actor.to_string(),
            value,
        }
    }

    /// 429 with a JSON-RPC error (-32000) that names the limit and says nothing happened, and
    /// `Retry-After` (a call's slot comes back when an answer is written, a session's or a
    /// stream's when a request ends); 404 for an evicted session.
    pub(super) fn response(&self, request_id: Value) -> Response {
        let (limit, actor, value) = match self {
            Refusal::Over {
                limit,
                actor,
                value,
            } => (*limit, actor, value),
            Refusal::Evicted => return (StatusCode::NOT_FOUND, "unknown session").into_response(),
        };
        let key = limit.key();
        let message = match limit {
            Limit::Calls => format!(
                "actor {actor} already has {value} calls in flight (the gateway's {key}): \
                 nothing was recorded or sent; call again after Retry-After"
            ),
            Limit::Sessions => format!(
                "every one of actor {actor}'s {value} MCP sessions (the gateway's {key}) has a \
                 request in flight or a stream open, so none could give way: no session was \
                 opened and nothing was recorded; try again after Retry-After"
            ),
            Limit::Streams => format!(
                "actor {actor} already has {value} streams open, none of them idle (the \
                 gateway's {key}): nothing was recorded or sent; try again after Retry-After"
            ),
            Limit::Connections => format!(
                "actor {actor} already has {value} connections busy or request bodies in \
                 flight (the gateway's {key}): this connection closes, and nothing was \
                 recorded or sent; try again after Retry-After"
            ),
        };
        let mut response = jsonrpc_error(
            StatusCode::TOO_MANY_REQUESTS,
            request_id,
            -32000,
            message,
            json!({"limit": key, "value": value}),
        );
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, http::HeaderValue::from_static("1"));
        response
    }
}

/// The per-actor limits of one front.
pub(super) struct ActorLimits {
    pub(super) calls: Slots,
    pub(super) connections: ConnectionSlots,
    pub(super) streams: StreamSlots,
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
            connections: ConnectionSlots::new(count(settings.max_connections_per_actor)),
            streams: StreamSlots::new(count(settings.max_streams_per_actor)),
            sessions: SessionLimits::new(count(settings.max_sessions_per_actor), sessions),
        }
    }
}

/// What an admitted request holds while it is answered.
pub(super) struct Held {
    /// A `tools/call`'s slot, held by its response body until the answer is written or lost.
    pub(super) call: Option<OwnedSemaphorePermit>,
    /// A request that may answer with a stream (a `GET`, a JSON-RPC request): held by the
    /// response body while it is a stream, given back at once otherwise.
    pub(super) stream: Option<StreamPermit>,
    /// A session slot for a request that opens or restores a session, or the use of the
    /// session it names.
    pub(super) session: SessionHold,
}

impl ActorLimits {
    /// Takes the slots a request of `actor` needs, or refuses it. `message` is a `POST`'s
    /// JSON-RPC message; `session` its `Mcp-Session-Id`; `last_event_id` a `GET`'s.
    pub(super) async fn admit(
        &self,
        method: &http::Method,
        message: Option<&Value>,
        session: Option<&str>,
        last_event_id: Option<&str>,
        actor: &str,
    ) -> Result<Held, Refusal> {
        let rpc_method = message
            .and_then(|m| m.get("method"))
            .and_then(Value::as_str);
        let call = match rpc_method {
            Some("tools/call") => Some(self.calls.try_acquire(actor)?),
            _ => None,
        };
        // A standalone `GET` stream (new, or its own resumption) carries only what the server
        // sends unasked: it is idle, and neither pins its session nor keeps its stream slot
        // against a stream that carries an answer.
        let idle_stream = *method == http::Method::GET
            && last_event_id.is_none_or(|id| {
                id.rsplit_once('/')
                    .is_some_and(|(stream, _)| stream.ends_with(":common"))
            });
        // rmcp answers a JSON-RPC request (one with an id) and a GET with an SSE stream.
        let is_request = message.is_some_and(|m| {
            m.get("method").is_some() && m.get("id").is_some_and(|id| !id.is_null())
        });
        let stream = if *method == http::Method::GET || is_request {
            Some(self.streams.try_acquire(actor, idle_stream)?)
        } else {
            None
        };
        // Last: a session evicted to make room is given up only when the request is admitted.
        let session = if *method == http::Method::DELETE {
            // Closing a session is never refused: it is how a slot is freed.
            SessionHold::default()
        } else if rpc_method == Some("initialize") && session.is_none() {
            self.sessions.admit(actor, None, true).await?
        } else if let Some(id) = session {
            self.sessions.admit(actor, Some(id), !idle_stream).await?
        } else {
            SessionHold::default()
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
        semaphore
            .try_acquire_owned()
            .map_err(|_| Refusal::over(self.limit, actor, self.per_actor))
    }
}

/// The MCP sessions each actor holds in memory. A session is held from its `initialize` (or its
/// restore from the ledger) until rmcp lets it go: closed by `DELETE`, idle past rmcp's
/// keep-alive (5 minutes), or evicted. A session let go is restored when its client uses it
/// again, and that restore is counted like an `initialize`.
///
/// At the cap a new session takes the place of the actor's least recently used session that is
/// idle (no request in flight, no stream open); only when every one is busy is it refused. An
/// evicted session is unknown from then on (404), so its client initialises again.
pub(super) struct SessionLimits {
    per_actor: usize,
    live: Arc<LocalSessionManager>,
    held: Arc<Mutex<HashMap<String, ActorSessions>>>,
    /// A clock of uses: the least recently used session has the smallest tick.
    ticks: Arc<AtomicU64>,
}

/// How many evicted sessions of an actor are remembered as such (answered 404 at once, never
/// restored); older ones are unknown to rmcp and the store anyway.
const EVICTED_REMEMBERED: usize = 4096;

#[derive(Default)]
struct ActorSessions {
    /// Sessions admitted for this actor; the ones rmcp has let go since are pruned on the next
    /// admission.
    ids: HashMap<String, SessionUse>,
    /// Admissions not answered yet (an `initialize`, a restore): counted, not known by id.
    admitting: usize,
    /// Sessions evicted lately, oldest first.
    evicted: VecDeque<String>,
    evicted_ids: HashSet<String>,
}

#[derive(Default)]
struct SessionUse {
    /// Requests in flight and streams open on the session.
    busy: usize,
    last_used: u64,
}

impl ActorSessions {
    fn remember_evicted(&mut self, id: String) {
        if self.evicted.len() >= EVICTED_REMEMBERED {
            if let Some(old) = self.evicted.pop_front() {
                self.evicted_ids.remove(&old);
            }
        }
        self.evicted_ids.insert(id.clone());
        self.evicted.push_back(id);
    }

    /// The least recently used session with nothing in flight, taken out of the count.
    fn evict_idlest(&mut self) -> Option<String> {
        let id = self
            .ids
            .iter()
            .filter(|(_, u)| u.busy == 0)
            .min_by_key(|(_, u)| u.last_used)
            .map(|(id, _)| id.clone())?;
        self.ids.remove(&id);
        self.remember_evicted(id.clone());
        Some(id)
    }
}

/// What a request that names or opens a session holds of it.
#[derive(Default)]
pub(super) struct SessionHold {
    /// A slot for a session being opened or restored.
    pub(super) admission: Option<SessionAdmission>,
    /// The session is in use while this lives (held by the response body).
    pub(super) busy: Option<SessionBusy>,
    /// A session given up to make room: the caller closes it.
    pub(super) evicted: Option<String>,
}

impl SessionLimits {
    fn new(per_actor: usize, live: Arc<LocalSessionManager>) -> SessionLimits {
        SessionLimits {
            per_actor,
            live,
            held: Arc::default(),
            ticks: Arc::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, ActorSessions>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn tick(&self) -> u64 {
        self.ticks.fetch_add(1, Ordering::Relaxed)
    }

    /// Admits a request of `actor` that opens a session (`initialize`: `session` is `None`) or
    /// uses `session` (`in_use`: for a request or an answer's stream, not an idle `GET`
    /// stream). A session in rmcp's memory holds its slot already and is never refused;
    /// one that is not (closed, expired, or from before a restart) would be restored, and is
    /// admitted like a new one. An evicted session is refused as unknown.
    pub(super) async fn admit(
        &self,
        actor: &str,
        session: Option<&str>,
        in_use: bool,
    ) -> Result<SessionHold, Refusal> {
        let live = self.live.sessions.read().await;
        let tick = self.tick();
        let mut held = self.lock();
        let sessions = held.entry(actor.to_string()).or_default();
        if let Some(id) = session {
            if sessions.evicted_ids.contains(id) {
                return Err(Refusal::Evicted);
            }
            if live.contains_key(id) {
                // Restored by a request that raced a prune, it is counted again.
                let used = sessions.ids.entry(id.to_string()).or_default();
                if !in_use {
                    return Ok(SessionHold::default());
                }
                used.busy += 1;
                used.last_used = tick;
                return Ok(SessionHold {
                    busy: Some(self.busy(actor, id)),
                    ..SessionHold::default()
                });
            }
        }
        sessions.ids.retain(|id, _| live.contains_key(id.as_str()));
        let mut evicted = None;
        if sessions.ids.len() + sessions.admitting >= self.per_actor {
            evicted = Some(
                sessions
                    .evict_idlest()
                    .ok_or_else(|| Refusal::over(Limit::Sessions, actor, self.per_actor))?,
            );
        }
        sessions.admitting += 1;
        Ok(SessionHold {
            admission: Some(SessionAdmission {
                held: self.held.clone(),
                actor: actor.to_string(),
                ticks: self.ticks.clone(),
            }),
            busy: None,
            evicted,
        })
    }

    /// A use of `session` (counted already) that ends when the guard is dropped.
    fn busy(&self, actor: &str, session: &str) -> SessionBusy {
        SessionBusy {
            held: self.held.clone(),
            actor: actor.to_string(),
            session: session.to_string(),
            ticks: self.ticks.clone(),
        }
    }

    /// `session` of `actor` was closed (`DELETE`): its slot is free now.
    pub(super) fn release(&self, actor: &str, session: &str) {
        if let Some(sessions) = self.lock().get_mut(actor) {
            sessions.ids.remove(session);
        }
    }

    /// Ends an evicted session in rmcp's memory: its requests find no session from now on.
    pub(super) fn close(&self, session: String) -> impl std::future::Future<Output = ()> {
        use rmcp::transport::streamable_http_server::session::SessionManager;
        let live = self.live.clone();
        async move {
            let id = session.as_str().into();
            if let Err(e) = live.close_session(&id).await {
                tracing::warn!(error = %e, "an evicted session could not be closed");
            }
        }
    }
}

/// A session slot taken for one request while it is answered; [`SessionAdmission::opened`]
/// keeps it for the session, dropping it gives it back.
pub(super) struct SessionAdmission {
    held: Arc<Mutex<HashMap<String, ActorSessions>>>,
    actor: String,
    ticks: Arc<AtomicU64>,
}

impl SessionAdmission {
    /// The request opened (or restored) `session`: it holds the slot from now on.
    pub(super) fn opened(self, session: &str) {
        // Used now, as its `initialize` is answered: a session just opened is the newest, not
        // one admitted before others that were answered first.
        let now = self.ticks.fetch_add(1, Ordering::Relaxed);
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(sessions) = held.get_mut(&self.actor) {
            sessions.ids.insert(
                session.to_string(),
                SessionUse {
                    busy: 0,
                    last_used: now,
                },
            );
        }
    }
}

impl Drop for SessionAdmission {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(sessions) = held.get_mut(&self.actor) {
            sessions.admitting = sessions.admitting.saturating_sub(1);
        }
    }
}

/// A request in flight or a stream open on a session: while it lives, the session is not
/// evicted; when it ends, the session was last used now.
pub(super) struct SessionBusy {
    held: Arc<Mutex<HashMap<String, ActorSessions>>>,
    actor: String,
    session: String,
    ticks: Arc<AtomicU64>,
}

impl Drop for SessionBusy {
    fn drop(&mut self) {
        let now = self.ticks.fetch_add(1, Ordering::Relaxed);
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(used) = held
            .get_mut(&self.actor)
            .and_then(|s| s.ids.get_mut(&self.session))
        {
            used.busy = used.busy.saturating_sub(1);
            used.last_used = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use rmcp::transport::streamable_http_server::session::SessionManager;

    use super::*;

    fn limit_of(refusal: &Refusal) -> (Limit, usize) {
        match refusal {
            Refusal::Over { limit, value, .. } => (*limit, *value),
            Refusal::Evicted => panic!("an eviction, not a limit"),
        }
    }

    #[test]
    fn slots_are_per_actor_and_come_back_when_dropped() {
        let slots = Slots::new(Limit::Calls, 1);
        let held = slots.try_acquire("a").unwrap();
        let refused = slots.try_acquire("a").unwrap_err();
        assert_eq!(limit_of(&refused), (Limit::Calls, 1));
        let _other = slots.try_acquire("b").expect("another actor has its own");
        drop(held);
        let _again = slots.try_acquire("a").expect("given back");
    }

    /// At the cap, a new session evicts the least recently used idle one (which is unknown from
    /// then on); a busy session is never evicted, and only when every one is busy is the new
    /// session refused. Another actor's sessions are never touched.
    #[tokio::test]
    async fn at_the_cap_the_idlest_session_gives_way_and_a_busy_one_never_does() {
        let manager = Arc::new(LocalSessionManager::default());
        let limits = SessionLimits::new(2, manager.clone());
        let mut ids = Vec::new();
        for _ in 0..2 {
            let hold = limits.admit("a", None, true).await.unwrap();
            assert!(hold.evicted.is_none());
            let (id, _transport) = manager.create_session().await.unwrap();
            hold.admission.unwrap().opened(&id);
            ids.push(id.to_string());
        }
        // The first is used again (and finishes): the second is now the idlest.
        drop(limits.admit("a", Some(&ids[0]), true).await.unwrap());
        let third = limits.admit("a", None, true).await.unwrap();
        assert_eq!(third.evicted.as_deref(), Some(ids[1].as_str()));
        limits.close(ids[1].clone()).await;
        assert!(matches!(
            limits.admit("a", Some(&ids[1]), true).await,
            Err(Refusal::Evicted)
        ));
        let (id3, _t3) = manager.create_session().await.unwrap();
        third.admission.unwrap().opened(&id3);
        // Both remaining sessions busy: the next is refused, with the limit named.
        let busy0 = limits.admit("a", Some(&ids[0]), true).await.unwrap();
        let busy3 = limits.admit("a", Some(&id3), true).await.unwrap();
        let refused = limits.admit("a", None, true).await.err().unwrap();
        assert_eq!(limit_of(&refused), (Limit::Sessions, 2));
        assert!(limits
            .admit("b", None, true)
            .await
            .unwrap()
            .evicted
            .is_none());
        drop(busy3);
        let fourth = limits.admit("a", None, true).await.unwrap();
        assert_eq!(
            fourth.evicted.as_deref(),
            Some(&*id3),
            "the one that became idle"
        );
        drop(busy0);
    }

    #[tokio::test]
    async fn a_session_being_opened_counts_and_one_let_go_frees_its_slot() {
        let manager = Arc::new(LocalSessionManager::default());
        let limits = SessionLimits::new(1, manager.clone());
        let hold = limits.admit("a", None, true).await.unwrap();
        let refused = limits.admit("a", None, true).await.err().unwrap();
        assert_eq!(
            limit_of(&refused).0,
            Limit::Sessions,
            "one being opened counts"
        );
        let (id, _transport) = manager.create_session().await.unwrap();
        hold.admission.unwrap().opened(&id);
        let use_of = limits.admit("a", Some(&id), true).await.unwrap();
        assert!(
            use_of.admission.is_none() && use_of.busy.is_some(),
            "a session in memory holds its slot already"
        );
        assert!(limits.admit("a", None, true).await.is_err(), "it is busy");
        drop(use_of);
        manager.close_session(&id).await.unwrap();
        let hold = limits.admit("a", None, true).await.unwrap();
        assert!(
            hold.admission.is_some() && hold.evicted.is_none(),
            "a session let go frees its slot"
        );
    }

    #[tokio::test]
    async fn restoring_a_session_at_the_cap_evicts_an_idle_one_and_a_delete_is_never_refused() {
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
        let mut held = limits
            .admit(&http::Method::POST, Some(&init), None, None, "a")
            .await
            .unwrap();
        held.session.admission.take().unwrap().opened(&id);
        let restore = limits
            .admit(
                &http::Method::GET,
                None,
                Some("stored-before-a-restart"),
                Some("stored-before-a-restart/3"),
                "a",
            )
            .await
            .unwrap();
        assert_eq!(restore.session.evicted.as_deref(), Some(&*id));
        let delete = limits
            .admit(&http::Method::DELETE, None, Some(&id), None, "a")
            .await
            .unwrap();
        assert!(delete.session.admission.is_none() && delete.stream.is_none());
    }
}
