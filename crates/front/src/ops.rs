//! The operator API (`/ops`, JSON) on the MCP listener: pending approvals and reviews, and the
//! operators' decisions on them, which wake nothing but the ledger (a waiting call reads its
//! execution's record). Authenticated by operators' own bearer tokens (`[[operator]]`): an
//! actor's token is refused with 403, so an agent can never approve its own call; an unknown
//! token gets 401.
//!
//! | request | answer |
//! |---|---|
//! | `GET /ops/approvals?before=&limit=` | `{"approvals": [PendingDecision…], "more", "next_before"}` awaiting approval, newest first, a page (at most 1,000) and how many older ones it leaves out |
//! | `GET /ops/approvals/{id}` | one execution's `PendingDecision`, whatever its state |
//! | `POST /ops/approvals/{id}/approve` `{"fingerprint", "reason"?}` | the decision recorded |
//! | `POST /ops/approvals/{id}/deny` `{"reason"?}` | the decision recorded |
//! | `GET /ops/status` | the gateway at a glance ([`postern_pipeline::telemetry::Status`]) |
//! | `GET /metrics` | Prometheus text: calls, events, latencies, the store's waiting executions |
//! | `GET /ops/runs` | `{"runs": [RunView…]}`, the Sessions log, newest first |
//! | `GET /ops/runs/{id}` | the run (how it ended, if it did) and its calls with their attempts |
//! | `POST /ops/runs/{id}/authorize` | the run authorized once; its waiting calls are sent |
//! | `POST /ops/runs/{id}/revoke` | the run revoked: its waiting calls denied, its next refused |
//! | `GET /ops/vault` | `{"configured", "locked", "names"}` |
//! | `POST /ops/vault/unlock` `{"passphrase"}` | unlocked (403 a wrong passphrase, nothing unlocked) |
//! | `POST /ops/vault/lock` | locked: the secrets and key are dropped from memory |
//! | `GET /ops/reviews?before=&limit=` | `{"reviews": [PendingDecision…], "more", "next_before"}` under review, paged as approvals |
//! | `POST /ops/reviews/{id}/resolve` `{"resolution": "applied"\|"not_applied", "reason"}` | the resolution recorded |
//! | `GET /ops/upstreams` | `{"upstreams": [UpstreamView…]}`: links and their tools' pins |
//! | `POST /ops/upstreams/{name}/tools/{tool}/accept` `{"digest"?}` | the listed version accepted |
//!
//! A decision that is not recorded gets `{"error": "…"}`: 404 unknown execution, 409 already
//! decided (naming by whom and when) or another fingerprint, 410 expired, 400 a bad body.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use postern_core::lifecycle::State as LifecycleState;
use serde::Deserialize;
use serde_json::json;

use decisions::{approval, approve, deny, resolve};
use postern_pipeline::GatewayError;
use postern_pipeline::{DecisionError, Gateway};
use vault::{vault_lock, vault_state, vault_unlock};

mod decisions;
mod vault;

/// The operator a request authenticated as.
#[derive(Clone, Debug)]
struct Operator(String);

struct OpsState {
    gateway: Arc<Gateway>,
    /// bearer token → operator
    operators: HashMap<String, String>,
    /// actors' tokens, only to tell an actor it may not decide (403 rather than 401)
    actor_tokens: Vec<String>,
    /// Operators' access tokens from the `[[issuer]]`s.
    oauth: Option<Arc<crate::oauth::ResourceServer>>,
}

/// The `/ops` routes.
pub(super) fn router(
    gateway: Arc<Gateway>,
    operators: HashMap<String, String>,
    actor_tokens: Vec<String>,
    oauth: Option<Arc<crate::oauth::ResourceServer>>,
) -> Router {
    let state = Arc::new(OpsState {
        gateway,
        operators,
        actor_tokens,
        oauth,
    });
    Router::new()
        .route("/ops/approvals", get(approvals))
        .route("/ops/approvals/{id}", get(approval))
        .route("/ops/approvals/{id}/approve", post(approve))
        .route("/ops/approvals/{id}/deny", post(deny))
        .route("/ops/status", get(status))
        .route("/metrics", get(metrics_text))
        .route("/ops/runs", get(runs))
        .route("/ops/runs/{id}", get(run))
        .route("/ops/runs/{id}/authorize", post(authorize_run))
        .route("/ops/runs/{id}/revoke", post(revoke_run))
        .route("/ops/vault", get(vault_state))
        .route("/ops/vault/unlock", post(vault_unlock))
        .route("/ops/vault/lock", post(vault_lock))
        .route("/ops/reviews", get(reviews))
        .route("/ops/reviews/{id}/resolve", post(resolve))
        .route("/ops/upstreams", get(upstreams))
        .route("/ops/budgets", get(budgets))
        .route(
            "/ops/upstreams/{name}/tools/{tool}/accept",
            post(accept_tool),
        )
        .layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .with_state(state)
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({"error": message.into()}))).into_response()
}

async fn authenticate(State(st): State<Arc<OpsState>>, mut req: Request, next: Next) -> Response {
    let presented = crate::oauth::bearer(req.headers()).unwrap_or("");
    let operator = crate::auth::holder_of(&st.operators, presented).cloned();
    let is_actor =
        crate::auth::holder_of(st.actor_tokens.iter().map(|t| (t, ())), presented).is_some();
    let operator = match (operator, &st.oauth) {
        (None, Some(oauth)) if !is_actor => match oauth.operator(req.headers()).await {
            Some(Ok(name)) => Some(name),
            Some(Err(why)) => {
                let status = match why.starts_with("invalid_token") {
                    true => StatusCode::UNAUTHORIZED,
                    false => StatusCode::FORBIDDEN,
                };
                return error(status, why);
            }
            None => None,
        },
        (operator, _) => operator,
    };
    match operator {
        Some(name) if !presented.is_empty() => {
            req.extensions_mut().insert(Operator(name));
            next.run(req).await
        }
        _ if is_actor && !presented.is_empty() => error(
            StatusCode::FORBIDDEN,
            "an actor's token cannot decide approvals or reviews: use an operator's token ([[operator]])",
        ),
        _ => error(
            StatusCode::UNAUTHORIZED,
            "missing or unknown operator token (Authorization: Bearer …)",
        ),
    }
}

/// A pipeline error as the operator API answers it.
fn refused(e: GatewayError) -> Response {
    let status = match &e {
        GatewayError::Decision(d) if d.expired() => StatusCode::GONE,
        GatewayError::Decision(d) => match d.as_ref() {
            DecisionError::Unknown(_) | DecisionError::UnknownRun(_) => StatusCode::NOT_FOUND,
            DecisionError::Expired { .. } => StatusCode::GONE,
            DecisionError::NotAwaiting { .. }
            | DecisionError::NotUnderReview { .. }
            | DecisionError::RunDecided { .. }
            | DecisionError::RunNotAuthorized { .. }
            | DecisionError::FingerprintMismatch { .. } => StatusCode::CONFLICT,
        },
        GatewayError::NotRecorded(_) => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    error(status, e.to_string())
}

fn answer<T: serde::Serialize>(result: Result<T, GatewayError>) -> Response {
    match result {
        Ok(v) => Json(v).into_response(),
        Err(e) => refused(e),
    }
}

/// A JSON body (none is `{}`), or what is wrong with it.
fn body<T: serde::de::DeserializeOwned>(raw: &[u8]) -> Result<T, String> {
    let raw = if raw.is_empty() {
        b"{}".as_slice()
    } else {
        raw
    };
    serde_json::from_slice(raw).map_err(|e| format!("bad request body: {e}"))
}

/// A page of a list: at most `limit` (default and most [`PAGE_MAX`]) entries older than
/// `before` (an execution id, the last of the previous page).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PageQuery {
    before: Option<String>,
    limit: Option<u32>,
}

/// The most entries one page of `/ops/approvals` or `/ops/reviews` holds.
const PAGE_MAX: u32 = 1000;

/// Executions in `state`, newest first, one page under `key`, with how many older ones the
/// page leaves out (`more`) and the `before` that asks for them (`next_before`).
async fn pending_page(st: &OpsState, state: LifecycleState, key: &str, q: PageQuery) -> Response {
    let before = match q.before.as_deref().filter(|b| !b.is_empty()) {
        None => None,
        Some(b) => match b.parse() {
            Ok(id) => Some(id),
            Err(_) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("before: {b:?} is not an execution id"),
                )
            }
        },
    };
    let limit = q.limit.unwrap_or(PAGE_MAX).clamp(1, PAGE_MAX);
    let page = async {
        let pending = st
            .gateway
            .operator()
            .pending_page(state, limit, before)
            .await?;
        let last = pending.last().and_then(|p| p.execution_id.parse().ok());
        let more = match last {
            Some(last) if pending.len() == limit as usize => {
                st.gateway
                    .operator()
                    .pending_count(state, Some(last))
                    .await?
            }
            _ => 0,
        };
        let next = (more > 0).then(|| last.map(|l: postern_core::ExecutionId| l.to_string()));
        let mut page = json!({"more": more, "next_before": next.flatten()});
        page[key] = serde_json::to_value(pending).unwrap_or_default();
        Ok::<_, GatewayError>(page)
    };
    answer(page.await)
}

async fn approvals(State(st): State<Arc<OpsState>>, Query(q): Query<PageQuery>) -> Response {
    pending_page(&st, LifecycleState::AwaitingApproval, "approvals", q).await
}

async fn reviews(State(st): State<Arc<OpsState>>, Query(q): Query<PageQuery>) -> Response {
    pending_page(&st, LifecycleState::NeedsReview, "reviews", q).await
}

async fn status(State(st): State<Arc<OpsState>>) -> Response {
    Json(st.gateway.operator().status().await).into_response()
}

async fn metrics_text(State(st): State<Arc<OpsState>>) -> Response {
    metrics_response(&st.gateway).await
}

/// `[telemetry] metrics_listen`'s application: `GET /metrics` only, without a token (bind it
/// where only Prometheus can reach it). Nothing else of the gateway is served there.
pub async fn serve_metrics_only(
    listener: tokio::net::TcpListener,
    gateway: Arc<Gateway>,
) -> std::io::Result<()> {
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let gateway = gateway.clone();
            async move { metrics_response(&gateway).await }
        }),
    );
    axum::serve(listener, app).await
}

/// The Prometheus text exposition (version 0.0.4), or 404 when this process keeps no metrics.
pub(crate) async fn metrics_response(gateway: &Gateway) -> Response {
    if !postern_pipeline::telemetry::metrics_installed() {
        return error(
            StatusCode::NOT_FOUND,
            "metrics are not enabled in this process",
        );
    }
    match postern_pipeline::telemetry::render(&gateway.operator().status().await) {
        Some(text) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            "metrics are not enabled in this process",
        ),
    }
}

async fn runs(State(st): State<Arc<OpsState>>) -> Response {
    answer(
        st.gateway
            .runs()
            .views(200)
            .await
            .map(|r| json!({"runs": r})),
    )
}

async fn run(State(st): State<Arc<OpsState>>, Path(id): Path<String>) -> Response {
    answer(st.gateway.runs().with_calls(&id, 1000).await)
}

async fn authorize_run(
    State(st): State<Arc<OpsState>>,
    Extension(Operator(operator)): Extension<Operator>,
    Path(id): Path<String>,
) -> Response {
    answer(st.gateway.operator().authorize_run(&id, &operator).await)
}

async fn revoke_run(
    State(st): State<Arc<OpsState>>,
    Extension(Operator(operator)): Extension<Operator>,
    Path(id): Path<String>,
) -> Response {
    answer(st.gateway.operator().revoke_run(&id, &operator).await)
}

async fn budgets(State(st): State<Arc<OpsState>>) -> Response {
    let budgets = st.gateway.operator().budgets().await;
    answer(budgets.map(|b| json!({ "budgets": b })))
}

async fn upstreams(State(st): State<Arc<OpsState>>) -> Response {
    Json(json!({"upstreams": st.gateway.upstream_tools().upstream_views()})).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AcceptBody {
    digest: Option<String>,
}

async fn accept_tool(
    State(st): State<Arc<OpsState>>,
    Extension(Operator(operator)): Extension<Operator>,
    Path((name, tool)): Path<(String, String)>,
    raw: axum::body::Bytes,
) -> Response {
    let b: AcceptBody = if raw.is_empty() {
        AcceptBody { digest: None }
    } else {
        match body(&raw) {
            Ok(b) => b,
            Err(_) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "expected {\"digest\": \"…\"} or no body",
                )
            }
        }
    };
    match st
        .gateway
        .upstream_tools()
        .accept_upstream_tool(&name, &tool, b.digest.as_deref(), &operator)
        .await
    {
        Ok(digest) => {
            Json(json!({"upstream": name, "tool": tool, "digest": digest, "accepted_by": operator}))
                .into_response()
        }
        Err(GatewayError::UnknownTool(t)) => {
            error(StatusCode::NOT_FOUND, format!("no re-exported tool {t}"))
        }
        Err(e) => error(StatusCode::CONFLICT, e.to_string()),
    }
}
