//! Postern's MCP front: Streamable HTTP at `/mcp` and stdio, its own HTTP listener
//! ([`listener`]: caps, timeouts, body rate, TLS, the PROXY protocol), the operator API `/ops`
//! ([`ops`]), the OAuth resource server's metadata, elicitation and durable streams. It turns MCP
//! requests into the pipeline's [`ToolCall`](postern_pipeline::ToolCall)s and the pipeline's
//! reports into MCP results.
//!
//! A request to `/mcp` passes, in order: `admission` (authentication — static tokens, client
//! certificates, an issuer's tokens through `oauth` — the actor's limits, session ownership, the
//! strict body), `forward` (delivery tracking, the stream's claim, the slots held until the
//! response ends), rmcp's transport, and `handler` (the MCP methods). This file only assembles
//! them; no module reaches back up to it.
//!
//! Architecture invariant: this is the only crate of the gateway's server side that knows MCP
//! wire types (the channels crate speaks MCP to upstreams on its own side of the `Channel`
//! trait); the pipeline below it never sees an rmcp type. A call's fate is decided by the
//! ledger's record and the core's recovery decision, never by the transport (JSON-RPC ids and
//! sessions are evidence, not keys).

use std::sync::Arc;

use axum::middleware;
use axum::Router;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};

mod admission;
mod audience;
mod auth;
mod call;
mod delivery;
mod elicit;
mod errors;
mod forward;
mod handler;
mod limits;
pub mod listener;
mod oauth;
pub mod ops;
mod passage;
mod plain;
mod progress;
mod questions;
mod relay;
mod result;
mod state;
mod streams;
mod tasks;
mod tool_list;

pub use auth::{vouch, Tokens};
pub use handler::{serve_stdio, PosternMcp};
pub use oauth::ResourceServer;

use auth::ActorCredentials;
use limits::ActorLimits;
use state::FrontState;
use streams::{DurableSessions, DurableStreams};
use tokio_util::sync::CancellationToken;

use postern_pipeline::Gateway;

/// The HTTP application: `/mcp`, the operator API `/ops` and `/healthz`. Cancelling `shutdown`
/// ends every open stream, so a graceful stop does not wait on clients.
pub fn router(gateway: Arc<Gateway>, tokens: Tokens, shutdown: CancellationToken) -> Router {
    let actor_tokens: Vec<String> = tokens.actors.keys().cloned().collect();
    let ops = ops::router(
        gateway.clone(),
        tokens.operators,
        actor_tokens,
        tokens.resource_server.clone(),
    );
    let oauth = tokens.resource_server.clone();
    let tokens = tokens.actors;
    let max_body = usize::try_from(gateway.config().gateway.max_body_bytes).unwrap_or(usize::MAX);
    let hosts = postern_core::hosts::allowed_hosts(&gateway.config().gateway.listen);
    let mut config = StreamableHttpServerConfig::default()
        .with_cancellation_token(shutdown)
        .with_max_request_body_bytes(max_body)
        .with_allowed_hosts(hosts);
    // DNS-rebinding protection: a request that carries an Origin (a browser) must come from a
    // loopback page or a configured origin; a rebound foreign page never passes. Agents send none.
    let mut origins: Vec<String> = [
        "http://localhost:*",
        "http://127.0.0.1:*",
        "http://[::1]:*",
        "https://localhost:*",
        "https://127.0.0.1:*",
        "https://[::1]:*",
    ]
    .map(String::from)
    .to_vec();
    origins.extend(gateway.config().gateway.allowed_origins.iter().cloned());
    config = config
        .with_allowed_origins(origins)
        .enforce_origin_validation();
    // Sessions and their streams outlive a restart (and move between replicas on PostgreSQL).
    let streams = Arc::new(DurableStreams::new(gateway.clone()));
    config.session_store = Some(Arc::new(DurableSessions::new(gateway.ledger().clone())));
    let sessions = Arc::new(LocalSessionManager::default().with_event_store(streams.clone()));
    let limits = ActorLimits::new(&gateway.config().gateway, sessions.clone());
    let handler = PosternMcp::new(gateway.clone(), None);
    let service: StreamableHttpService<PosternMcp, LocalSessionManager> =
        StreamableHttpService::new(move || Ok(handler.clone()), sessions, config);
    let credentials = ActorCredentials::new(tokens, &gateway.config().actors);
    let state = Arc::new(FrontState {
        gateway,
        streams,
        credentials,
        oauth: oauth.clone(),
        max_body,
        limits,
    });
    // rmcp's own `Service::call` clones the whole service per request, its config's host and
    // origin lists included (about fifty allocations); one shared service costs one `Arc` clone.
    let service = std::sync::Arc::new(service);
    let mcp = tower::service_fn(move |request: axum::extract::Request| {
        let service = service.clone();
        Box::pin(async move { Ok::<_, std::convert::Infallible>(service.handle(request).await) })
    });
    let app = Router::new()
        .nest_service("/mcp", mcp)
        .layer(middleware::from_fn_with_state(state, admission::guard))
        .merge(ops)
        .route("/healthz", axum::routing::get(|| async { "ok" }));
    match oauth {
        Some(server) => app.merge(oauth::routes(server)),
        None => app,
    }
}
