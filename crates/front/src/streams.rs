//! Resumable streams: rmcp's `EventStore` and `SessionStore` over the ledger, so a client that
//! reconnects with `Last-Event-ID` gets the events it missed (the tool result above all), also
//! after a gateway restart or from another replica on the same PostgreSQL.
//!
//! Event ids are `<stream id>/<n>`; stream ids are rmcp's random UUIDs (or
//! `<session id>:common` for a session's standalone stream), so an id is not guessable. Each
//! stream is bound to the session and actor that opened it ([`DurableStreams::claim`]); the
//! front checks that binding before rmcp sees a `Last-Event-ID` ([`DurableStreams::may_resume`]),
//! because rmcp itself replays whatever id it is given.
//!
//! A stream is written to the ledger only once its client went away before its end
//! ([`DurableStreams::abandoned`]): a stream delivered whole is never resumed, and its answer's
//! delivery is in the record already, so the hot path pays nothing for resumability. From the
//! cut on, every event of the stream is written, sharing the ledger's next commit. Losing one in
//! a crash costs a replay, never an action — the execution's result is in its own durable
//! record and a re-issued call recovers it.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use postern_core::{ExecutionId, Timestamp};
use postern_ledger::{Ledger, StreamEvent, StreamOwner, StreamWrite};
use rmcp::model::{ServerJsonRpcMessage, ServerResult};
use rmcp::transport::streamable_http_server::session::{
    EventId, EventStore, EventStoreError, EventStream, ServerSseMessage,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;

use live::Live;
use postern_pipeline::{now, Gateway};
use replay::Replay;
pub(crate) use sessions::DurableSessions;

mod live;
mod replay;
mod sessions;

/// The event as stored: rmcp's message and retry hint, without the id (derived from the row).
#[derive(Serialize, Deserialize)]
struct StoredSse {
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<ServerJsonRpcMessage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_ms: Option<u64>,
}

/// One event as replayed, with the execution whose answer it carries.
#[derive(Clone)]
struct Replayed {
    sse: ServerSseMessage,
    execution: Option<ExecutionId>,
}

/// What delivery needs of one stored event.
#[derive(Debug, PartialEq)]
pub(crate) enum StoredEvent {
    /// A JSON-RPC response or error, to the request with this id (`None`: an error without one).
    Response(Option<Value>),
    /// A request, a notification or a priming event.
    Other,
}

impl StoredEvent {
    /// An event's message (`None`: a priming event), as delivery reads it.
    pub(crate) fn of(message: Option<&ServerJsonRpcMessage>) -> StoredEvent {
        match message {
            Some(ServerJsonRpcMessage::Response(r)) => {
                StoredEvent::Response(Some(r.id.clone().into_json_value()))
            }
            Some(ServerJsonRpcMessage::Error(e)) => {
                StoredEvent::Response(e.id.clone().map(|id| id.into_json_value()))
            }
            _ => StoredEvent::Other,
        }
    }
}

/// The ledger-backed event and session store of the Streamable HTTP front.
pub(crate) struct DurableStreams {
    gateway: Arc<Gateway>,
    live: Live,
    /// MCP session id → the actor it belongs to, as far as this instance has seen.
    session_actors: std::sync::Mutex<std::collections::HashMap<String, String>>,
}

/// Splits `<stream id>/<n>`.
fn parse_event_id(id: &str) -> Option<(&str, u64)> {
    let (stream, n) = id.rsplit_once('/')?;
    Some((stream, n.parse().ok()?))
}

/// The ledger row of one event.
fn row_of(stream_id: &str, n: u64, r: &Replayed, last: bool, at: Timestamp) -> Option<StreamEvent> {
    let payload = serde_json::to_string(&StoredSse {
        message: r.sse.message.as_deref().cloned(),
        retry_ms: r
            .sse
            .retry
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    })
    .ok()?;
    Some(StreamEvent {
        stream_id: stream_id.to_string(),
        n,
        payload,
        execution_id: r.execution,
        last,
        at,
    })
}

/// The execution whose tool result this message carries.
fn execution_of(message: &ServerJsonRpcMessage) -> Option<ExecutionId> {
    let ServerJsonRpcMessage::Response(response) = message else {
        return None;
    };
    let ServerResult::CallToolResult(result) = &response.result else {
        return None;
    };
    result
        .structured_content
        .as_ref()?
        .pointer("/execution/execution_id")
        .and_then(Value::as_str)?
        .parse()
        .ok()
}

fn is_final(stream_id: &str, message: Option<&ServerJsonRpcMessage>) -> bool {
    // A request's stream ends with its response; a session's standalone stream never ends.
    !stream_id.ends_with(":common")
        && matches!(
            message,
            Some(ServerJsonRpcMessage::Response(_) | ServerJsonRpcMessage::Error(_))
        )
}

impl DurableStreams {
    pub(crate) fn new(gateway: Arc<Gateway>) -> DurableStreams {
        DurableStreams {
            gateway,
            live: Live::default(),
            session_actors: Default::default(),
        }
    }

    fn ledger(&self) -> &Arc<Ledger> {
        self.gateway.ledger()
    }

    /// Event `event_id` as this process stored it, for delivery to tell an answer's frame by
    /// its id instead of parsing the frame (~15,000 instructions a call, issue 52); `None` when
    /// it is not in this process's memory (the frame is read then).
    pub(crate) fn stored(&self, event_id: &str) -> Option<StoredEvent> {
        let (stream_id, n) = parse_event_id(event_id)?;
        let live = self.live.get(stream_id)?;
        let s = live.lock().unwrap_or_else(|e| e.into_inner());
        let (_, event) = s.events.iter().rev().find(|(m, _)| *m == n)?;
        Some(StoredEvent::of(event.sse.message.as_deref()))
    }

    /// Records the session and actor a request stream belongs to (seen in its first event id).
    pub(crate) fn claim(&self, event_id: &str, session: Option<String>, actor: String) {
        let Some((stream_id, _)) = parse_event_id(event_id) else {
            return;
        };
        let live = self.live.get_or_create(stream_id);
        let mut s = live.lock().unwrap_or_else(|e| e.into_inner());
        if s.owner.is_none() {
            s.owner = Some((session, actor));
        }
    }

    /// The client of this stream went away before its end: from now on the stream is kept in
    /// the ledger (owner, events so far, and every later event), so it can be resumed after a
    /// restart or on another replica.
    pub(crate) fn abandoned(&self, event_id: &str) {
        let Some((stream_id, _)) = parse_event_id(event_id) else {
            return;
        };
        let Some(live) = self.live.get(stream_id) else {
            return;
        };
        let mut s = live.lock().unwrap_or_else(|e| e.into_inner());
        if s.durable.is_some() {
            return;
        }
        // One queue per durable stream, drained by one task: the owner lands first, then the
        // events in their order, so a replay elsewhere never sees a gap it would skip for good.
        let (queue, mut pending) = mpsc::unbounded_channel::<StreamWrite>();
        if let Some((session, actor)) = s.owner.clone() {
            let _ = queue.send(StreamWrite::Owner(StreamOwner {
                stream_id: stream_id.to_string(),
                session_id: session,
                actor,
                at: now(),
            }));
        }
        for ((n, replayed), at) in s.events.iter().zip(&s.stored_at) {
            let last = s.finished && *n + 1 == s.next;
            if let Some(row) = row_of(stream_id, *n, replayed, last, *at) {
                let _ = queue.send(StreamWrite::Event(row));
            }
        }
        s.durable = Some(queue);
        let ledger = self.ledger().clone();
        tokio::spawn(async move {
            while let Some(first) = pending.recv().await {
                let mut batch = vec![first];
                while let Ok(more) = pending.try_recv() {
                    batch.push(more);
                }
                if let Err(e) = ledger.record_streams(batch).await {
                    // The answers are recorded with their executions; only resuming these
                    // streams' events after a restart is lost.
                    tracing::warn!(error = %e, "stream events could not be stored; those streams cannot be resumed after a restart");
                }
            }
        });
    }

    /// Whether `actor` may use MCP session `session`: the session belongs to the actor whose
    /// token opened it. A session nobody claimed yet (opened before this rule) is claimed now.
    pub(crate) async fn session_is_actors(&self, session: &str, actor: &str) -> bool {
        if let Some(owner) = self
            .session_actors
            .lock()
            .ok()
            .and_then(|m| m.get(session).cloned())
        {
            return owner == actor;
        }
        match self.ledger().read().mcp_session_actor(session).await {
            Ok(Some(owner)) => {
                let mine = owner == actor;
                self.remember_owner(session, &owner);
                mine
            }
            Ok(None) => {
                self.claim_session(session, actor).await;
                true
            }
            // Storage unreachable: refuse rather than let another actor in.
            Err(_) => false,
        }
    }

    /// Caches a session's owner (the first claim stays); the cache is bounded, the ledger
    /// holds every owner.
    fn remember_owner(&self, session: &str, actor: &str) {
        if let Ok(mut m) = self.session_actors.lock() {
            if m.len() >= REMEMBERED && !m.contains_key(session) {
                m.clear();
            }
            m.entry(session.to_string())
                .or_insert_with(|| actor.to_string());
        }
    }

    /// Records that `session` belongs to `actor` (the first claim stays).
    pub(crate) async fn claim_session(&self, session: &str, actor: &str) {
        self.remember_owner(session, actor);
        let write = StreamWrite::SessionActor {
            id: session.to_string(),
            actor: actor.to_string(),
            at: now(),
        };
        if let Err(e) = self.ledger().record_stream_now(write).await {
            tracing::warn!(error = %e, "a session's owner could not be stored; another replica will not know it");
        }
    }

    /// Whether this session and actor may resume from `event_id`. Ids that are not ours
    /// (rmcp's own `0` priming id) are left to rmcp, which replays nothing for them.
    pub(crate) async fn may_resume(
        &self,
        event_id: &str,
        session: Option<&str>,
        actor: &str,
    ) -> bool {
        let Some((stream_id, _)) = parse_event_id(event_id) else {
            return true;
        };
        if let Some(common_of) = stream_id.strip_suffix(":common") {
            return session == Some(common_of);
        }
        let live_owner = self
            .live
            .get(stream_id)
            .and_then(|s| s.lock().ok().and_then(|s| s.owner.clone()));
        let owner = match live_owner {
            Some(o) => Some(o),
            // No flush first: an unknown id must not cost a commit (a cheap way to stall the
            // writer). A cut stream's owner is queued ahead of its events.
            None => match self.ledger().read().stream_owner(stream_id).await {
                Ok(found) => found.map(|o| (o.session_id, o.actor)),
                Err(_) => None,
            },
        };
        owner.is_some_and(|(s, a)| s.as_deref() == session && a == actor)
    }

    fn decode(event: &StreamEvent) -> Option<Replayed> {
        let stored: StoredSse = serde_json::from_str(&event.payload).ok()?;
        let mut sse = match (stored.message, stored.retry_ms) {
            (Some(message), _) => ServerSseMessage::from_message(message),
            (None, retry) => ServerSseMessage::retry(Duration::from_millis(retry.unwrap_or(0))),
        };
        sse.retry = stored.retry_ms.map(Duration::from_millis);
        sse.event_id = Some(format!("{}/{}", event.stream_id, event.n));
        Some(Replayed {
            sse,
            execution: event.execution_id,
        })
    }
}

#[async_trait::async_trait]
impl EventStore for DurableStreams {
    async fn store_event(
        &self,
        stream_id: &str,
        event: &ServerSseMessage,
    ) -> Result<EventId, EventStoreError> {
        let message = event.message.as_deref();
        let execution = message.and_then(execution_of);
        let last = is_final(stream_id, message);
        let live = self.live.get_or_create(stream_id);
        let n = {
            let mut s = live.lock().unwrap_or_else(|e| e.into_inner());
            let n = s.next;
            s.next += 1;
            s.touched = Some(Instant::now());
            let mut sse = event.clone();
            sse.event_id = Some(format!("{stream_id}/{n}"));
            let replayed = Replayed { sse, execution };
            s.watchers.retain(|w| w.send(replayed.clone()).is_ok());
            s.events.push((n, replayed));
            if last {
                s.finished = true;
                // Dropping the senders ends every live replay after this event.
                s.watchers.clear();
            }
            let at = now();
            if let Some(queue) = &s.durable {
                // Serialised only for a stream being kept: a stream delivered whole never is.
                let (_, replayed) = &s.events[s.events.len() - 1];
                if let Some(row) = row_of(stream_id, n, replayed, last, at) {
                    let _ = queue.send(StreamWrite::Event(row));
                }
            }
            s.stored_at.push(at);
            n
        };
        Ok(format!("{stream_id}/{n}"))
    }

    async fn replay_events_after(
        &self,
        last_event_id: &str,
    ) -> Result<EventStream, EventStoreError> {
        let (stream_id, after) = parse_event_id(last_event_id)
            .ok_or_else(|| format!("not a Postern event id: {last_event_id:?}"))?;
        metrics::counter!(postern_pipeline::telemetry::STREAM_RESUMES).increment(1);
        let mut queue = VecDeque::new();
        let mut live_rx = None;
        if let Some(live) = self.live.get(stream_id) {
            let mut s = live.lock().unwrap_or_else(|e| e.into_inner());
            queue.extend(
                s.events
                    .iter()
                    .filter(|(n, _)| *n > after)
                    .map(|(_, r)| r.clone()),
            );
            if !s.finished {
                let (tx, rx) = mpsc::unbounded_channel();
                s.watchers.push(tx);
                live_rx = Some(rx);
            }
        } else {
            // Not carried here (a restart, or another replica): what the ledger holds. A stream
            // still running elsewhere is picked up by the client's next reconnect.
            self.ledger().flush().await?;
            for event in self
                .ledger()
                .read()
                .stream_events_after(stream_id, Some(after))
                .await?
            {
                queue.extend(Self::decode(&event));
            }
        }
        Ok(Box::pin(Replay::new(queue, live_rx, self.gateway.clone())))
    }
}
/// How many session ids the front remembers before it forgets them all (a cache over the
/// ledger, which holds the truth).
pub(crate) const REMEMBERED: usize = 10_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_ids_split_at_the_last_slash() {
        assert_eq!(
            parse_event_id("0b6c-4e/7"),
            Some(("0b6c-4e", 7)),
            "a request stream"
        );
        assert_eq!(
            parse_event_id("s-1:common/12"),
            Some(("s-1:common", 12)),
            "a session's standalone stream"
        );
        assert_eq!(parse_event_id("0"), None, "rmcp's own priming id");
        assert_eq!(parse_event_id("x/y"), None);
    }
}
