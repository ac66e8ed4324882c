//! What happens to an HTTP request before rmcp sees it ([`guard`]): it is authenticated and
//! counted against its actor's limits, the session and stream it names must be its actor's, its
//! body is read and strictly parsed, and an idle session the session cap gave up is ended.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::model::ErrorCode;
use serde_json::Value;

use postern_core::config::Principal;

use super::auth;
use super::elicit::FIRST_SESSIONLESS_VERSION;
use super::errors::jsonrpc_error;
use super::forward::{self, ReadBody};
use super::handler::RawParams;
use super::listener::{Peer, Seat};
use super::state::FrontState;

/// Authenticates, bounds and strictly parses the request, then tracks whether the answer was
/// fully written.
pub(super) async fn guard(
    State(st): State<Arc<FrontState>>,
    mut req: Request,
    next: Next,
) -> Response {
    let peer = req.extensions().get::<Peer>().copied();
    let identified = auth::identify(
        &st.credentials,
        st.oauth.as_deref(),
        req.headers(),
        peer.as_ref(),
    )
    .await;
    let actor = match identified {
        Ok((actor, principal)) => {
            // An issuer's token the listener's quick check could not verify yet: the
            // connection is an agent's all the same, and does not give way at a cap.
            if let Some(seat) = req.extensions().get::<Arc<Seat>>() {
                seat.authenticated();
            }
            // The call's record names whom the agent acted for (never the token).
            if let Some(principal) = principal {
                req.extensions_mut().insert(principal);
            }
            actor
        }
        Err(refused) => return refused,
    };
    let session = req
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    if let Err(refused) = check_ownership(&st, req.headers(), session.as_deref(), &actor).await {
        return refused;
    }
    // Counted before the body is read: one actor's slow bodies cannot hold every connection.
    let seat = req.extensions().get::<Arc<Seat>>().cloned();
    let body_permit = match st.limits.connections.admit(seat.as_ref(), &actor) {
        Ok(permit) => permit,
        Err(refusal) => {
            let client = req.extensions().get::<Peer>().and_then(|p| p.address);
            tracing::debug!(
                actor,
                ?client,
                "refused at max_connections_per_actor; the connection closes"
            );
            if let Some(seat) = &seat {
                seat.refuse();
            }
            return refusal.response(Value::Null);
        }
    };
    let (parts, body) = req.into_parts();
    let read = match read_body(&st, &parts, body).await {
        Ok(read) => read,
        Err(refused) => return refused,
    };
    drop(body_permit);
    if let (Some(oauth), Some(principal)) = (&st.oauth, parts.extensions.get::<Principal>()) {
        let message = read.message.as_ref();
        if let Some(refused) = oauth.insufficient_scope(&parts.headers, principal, message) {
            return refused;
        }
    }
    let mut held = match st
        .limits
        .admit(
            &parts.method,
            read.message.as_ref(),
            session.as_deref(),
            parts
                .headers
                .get("last-event-id")
                .and_then(|v| v.to_str().ok()),
            &actor,
        )
        .await
    {
        Ok(held) => held,
        Err(refusal) => return refusal.response(read.request_id()),
    };
    if let Some(victim) = held.session.evicted.take() {
        evict_session(&st, &actor, victim);
    }
    forward::forward(&st, next, parts, read, held, session, actor).await
}

/// Gives up `session`, the least recently used idle session of `actor`, to make room for a new
/// one: its next request finds no session (404); rmcp forgets it, and the Sessions log and the
/// stored session state follow, in the background. What the record promises stays: its
/// executions, results and approvals belong to the actor, not to the session.
pub(super) fn evict_session(st: &FrontState, actor: &str, session: String) {
    metrics::counter!(postern_pipeline::telemetry::SESSION_EVICTIONS).increment(1);
    tracing::debug!(actor, session = %session, "an idle session was evicted at max_sessions_per_actor");
    // Its requests are refused as unknown from now on (`front::limits`), so rmcp may forget it
    // in the background: the new session's `initialize` never waits for the old one's worker.
    let closing = st.limits.sessions.close(session.clone());
    let gateway = st.gateway.clone();
    tokio::spawn(async move {
        closing.await;
        let run = format!("mcp-session:{session}");
        if let Err(e) = gateway
            .runs()
            .end(&run, postern_ledger::RunEnd::Evicted)
            .await
        {
            tracing::warn!(error = %e, "an evicted session's end could not be recorded in the Sessions log");
        }
        let drop = postern_ledger::StreamWrite::DropSession(session);
        if let Err(e) = gateway.ledger().record_stream(drop).await {
            tracing::warn!(error = %e, "an evicted session's stored state could not be dropped");
        }
    });
}

/// 404 unless the session and the stream to resume (`Last-Event-ID`) belong to `actor`.
pub(super) async fn check_ownership(
    st: &FrontState,
    headers: &http::HeaderMap,
    session: Option<&str>,
    actor: &str,
) -> Result<(), Response> {
    if let Some(id) = session {
        // A session belongs to the actor that opened it: to anyone else it does not exist.
        if !st.streams.session_is_actors(id, actor).await {
            return Err((StatusCode::NOT_FOUND, "unknown session").into_response());
        }
    }
    if let Some(last) = headers.get("last-event-id").and_then(|v| v.to_str().ok()) {
        // rmcp replays whatever id it is handed; a stream is only ever resumed by its owner.
        if !st.streams.may_resume(last, session, actor).await {
            return Err((
                StatusCode::NOT_FOUND,
                "no resumable stream with this Last-Event-ID belongs to this session",
            )
                .into_response());
        }
    }
    Ok(())
}

/// Why a body could not be read: too slow (`408`, and the connection closes), too large
/// (`413`), or the client went away.
fn unread(e: &axum::Error, max_body: usize, parts: &http::request::Parts) -> Response {
    if let Some(slow) = crate::listener::pace::too_slow(e) {
        let client = parts
            .extensions
            .get::<crate::listener::Peer>()
            .and_then(|p| p.address);
        tracing::debug!(%slow, ?client, "a request body was too slow; its connection closes");
        let what = format!("{slow}: nothing was recorded or sent");
        return (StatusCode::REQUEST_TIMEOUT, what).into_response();
    }
    (
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("request body is over the {max_body} byte limit"),
    )
        .into_response()
}

/// Reads a `POST` body (bounded by `max_body_bytes`) and parses it strictly: duplicate keys,
/// inexact numbers and malformed JSON are refused here, naming where.
pub(super) async fn read_body(
    st: &FrontState,
    parts: &http::request::Parts,
    body: Body,
) -> Result<ReadBody, Response> {
    if parts.method != http::Method::POST {
        return Ok(ReadBody {
            body,
            message: None,
            raw: RawParams::default(),
            sessionless: false,
        });
    }
    let bytes = match axum::body::to_bytes(body, st.max_body).await {
        Ok(bytes) => bytes,
        Err(e) => return Err(unread(&e, st.max_body, parts)),
    };
    let v = match postern_core::canon::parse_strict(&String::from_utf8_lossy(&bytes)) {
        Ok(v) => v,
        Err(postern_core::canon::CanonError::Malformed {
            line,
            column,
            reason,
        }) => {
            return Err(jsonrpc_error(
                StatusCode::BAD_REQUEST,
                Value::Null,
                -32700,
                format!("parse error at line {line}, column {column}: {reason}"),
                Value::Null,
            ));
        }
        Err(e) => {
            // Valid JSON for serde_json, but ambiguous as an action: refuse it, naming where.
            let id = serde_json::from_slice::<Value>(&bytes)
                .ok()
                .and_then(|v| v.get("id").cloned())
                .unwrap_or(Value::Null);
            return Err(jsonrpc_error(
                StatusCode::OK,
                id,
                ErrorCode::INVALID_PARAMS.0,
                format!("invalid request: {e}"),
                Value::Null,
            ));
        }
    };
    let params = v.get("params");
    let raw = RawParams {
        idempotency_key: params
            .and_then(|p| p.get("idempotencyKey"))
            .and_then(Value::as_str)
            .map(str::to_string),
    };
    // As rmcp routes it: `initialize` is always a session's; otherwise the version in `_meta`,
    // else the header, decides (2026-07-28 and later have no sessions).
    let version = params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get("io.modelcontextprotocol/protocolVersion"))
        .and_then(Value::as_str)
        .or_else(|| {
            parts
                .headers
                .get("mcp-protocol-version")
                .and_then(|v| v.to_str().ok())
        });
    let sessionless = v.get("method").and_then(Value::as_str) != Some("initialize")
        && version.is_some_and(|v| v >= FIRST_SESSIONLESS_VERSION);
    Ok(ReadBody {
        body: Body::from(bytes),
        message: Some(v),
        raw,
        sessionless,
    })
}
