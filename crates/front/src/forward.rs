//! The layer after admission: hands the request to rmcp and wraps the response so its
//! delivery is recorded, its stream bound to its session and actor, its slots held until it
//! ends, and a closed session's `DELETE` answered 204.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use serde_json::Value;

use tokio_util::sync::CancellationToken;

use super::delivery::{DeliverySlot, GoneBeforeAnswer, StreamClaim, TrackedBody};
use super::handler::{Actor, Disconnected, RawParams};
use super::limits::Held;
use super::plain;
/// Hands the admitted request to rmcp and wraps the response so its delivery is recorded, its
/// stream bound to its session and actor, and its slots held until it ends.
use super::state::FrontState;

pub(crate) async fn forward(
    st: &FrontState,
    next: Next,
    mut parts: http::request::Parts,
    read: ReadBody,
    held: Held,
    session: Option<String>,
    actor: String,
) -> Response {
    // The response frame to this request's id carries its answer (`None`: a `GET` stream,
    // where any response frame does).
    let answers = read
        .message
        .as_ref()
        .and_then(|m| m.get("id"))
        .filter(|id| !id.is_null())
        .cloned();
    // A plain read-only call is answered as JSON when nothing else travels before its answer.
    let plain = read
        .message
        .as_ref()
        .filter(|_| parts.method == http::Method::POST)
        .and_then(|m| plain::plain_call(&st.gateway, &parts.headers, m));
    let ReadBody {
        body,
        raw,
        sessionless,
        ..
    } = read;
    let slot = DeliverySlot::default();
    let is_post = parts.method == http::Method::POST;
    let disconnect = sessionless.then(CancellationToken::new);
    if let Some(token) = &disconnect {
        parts.extensions.insert(Disconnected(token.clone()));
        if let Ok(mut st) = slot.0.lock() {
            st.on_lost = Some(token.clone());
        }
    }
    parts.extensions.insert(Actor(actor.clone()));
    parts.extensions.insert(raw);
    parts.extensions.insert(slot.clone());
    let is_delete = parts.method == http::Method::DELETE;
    // If the client goes away before the response even starts (rmcp may hold the headers until
    // the handler returns), this future is dropped here: the answer was lost all the same.
    let mut early_exit = GoneBeforeAnswer {
        slot: Some(slot.clone()),
        gateway: st.gateway.clone(),
    };
    let mut response = next.run(Request::from_parts(parts, body)).await;
    if let Some(id) = &plain {
        response = plain::as_json(response, id).await;
    }
    early_exit.slot = None;
    let (mut parts, body) = response.into_parts();
    let created = parts
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    if session.is_none() {
        if let Some(opened) = &created {
            st.streams.claim_session(opened, &actor).await;
        }
    }
    if let Some(admission) = held.session.admission {
        if let Some(id) = created.as_deref().or(session.as_deref()) {
            if parts.status.is_success() {
                admission.opened(id);
            }
        }
    }
    if is_delete && parts.status.is_success() {
        if let Some(id) = &session {
            st.limits.sessions.release(&actor, id);
        }
    }
    if is_delete && parts.status == StatusCode::ACCEPTED {
        // The session is closed when rmcp answers; "accepted for later" would be untrue (and
        // clients expect 200 or 204).
        parts.status = StatusCode::NO_CONTENT;
    }
    let is_sse = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    // The session of a new stream: the one just created (initialize) or the caller's.
    let claim = (is_post && is_sse).then(|| StreamClaim {
        streams: st.streams.clone(),
        session: if sessionless {
            None
        } else {
            created.or(session)
        },
        actor,
    });
    // Only a stream is kept open; any other answer gives its slot back at once.
    let stream_slot = held.stream.filter(|_| is_sse);
    let tracked = TrackedBody {
        inner: body,
        slot,
        gateway: st.gateway.clone(),
        finished: false,
        claim,
        claimed: None,
        call_slot: held.call,
        evicted: stream_slot
            .as_ref()
            .and_then(|permit| permit.ended())
            .map(|token| Box::pin(token.cancelled_owned())),
        stream_slot,
        answers,
        handed: false,
        session_busy: held.session.busy,
    };
    Response::from_parts(parts, Body::new(tracked))
}

/// A request's body, read and strictly parsed when it is a `POST`.
pub(crate) struct ReadBody {
    pub(crate) body: Body,
    /// The JSON-RPC message of a `POST`.
    pub(crate) message: Option<Value>,
    pub(crate) raw: RawParams,
    /// A 2026-07-28 (sessionless) request: a disconnect cancels it.
    pub(crate) sessionless: bool,
}

impl ReadBody {
    pub(crate) fn request_id(&self) -> Value {
        self.message
            .as_ref()
            .and_then(|m| m.get("id").cloned())
            .unwrap_or(Value::Null)
    }
}
