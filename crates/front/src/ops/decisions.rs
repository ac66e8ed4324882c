//! The operators' decisions on one execution: reading what awaits them, approving bound to
//! the fingerprint shown, denying, and resolving a review with its reason.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use postern_core::lifecycle::Resolution;
use postern_pipeline::DecisionError;
use serde::Deserialize;

use super::{answer, body, error, refused, Operator, OpsState};

pub(super) async fn approval(State(st): State<Arc<OpsState>>, Path(id): Path<String>) -> Response {
    let unknown = || DecisionError::Unknown(id.chars().take(64).collect()).into();
    match id.parse() {
        Ok(parsed) => answer(st.gateway.operator().pending_decision(parsed).await),
        Err(_) => refused(unknown()),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ApproveBody {
    /// The fingerprint the operator was shown: an approval is bound to it.
    fingerprint: String,
    reason: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DenyBody {
    reason: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResolveBody {
    resolution: String,
    reason: String,
}

pub(super) async fn approve(
    State(st): State<Arc<OpsState>>,
    Extension(Operator(operator)): Extension<Operator>,
    Path(id): Path<String>,
    raw: axum::body::Bytes,
) -> Response {
    let b: ApproveBody = match body(&raw) {
        Ok(b) => b,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    answer(
        st.gateway
            .operator()
            .approve(&id, &operator, &b.fingerprint, reason(b.reason))
            .await,
    )
}

pub(super) async fn deny(
    State(st): State<Arc<OpsState>>,
    Extension(Operator(operator)): Extension<Operator>,
    Path(id): Path<String>,
    raw: axum::body::Bytes,
) -> Response {
    let b: DenyBody = match body(&raw) {
        Ok(b) => b,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    answer(
        st.gateway
            .operator()
            .deny(&id, &operator, reason(b.reason))
            .await,
    )
}

pub(super) async fn resolve(
    State(st): State<Arc<OpsState>>,
    Extension(Operator(operator)): Extension<Operator>,
    Path(id): Path<String>,
    raw: axum::body::Bytes,
) -> Response {
    let b: ResolveBody = match body(&raw) {
        Ok(b) => b,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    let resolution = match b.resolution.as_str() {
        "applied" => Resolution::Applied,
        "not_applied" => Resolution::NotApplied,
        _ => {
            return error(
                StatusCode::BAD_REQUEST,
                "resolution must be \"applied\" or \"not_applied\"",
            )
        }
    };
    let Some(why) = reason(Some(b.reason)) else {
        return error(
            StatusCode::BAD_REQUEST,
            "a resolution needs a reason (what was checked, and where)",
        );
    };
    answer(
        st.gateway
            .operator()
            .resolve_review(&id, &operator, resolution, why)
            .await,
    )
}

/// A reason as recorded: trimmed, at most 1,000 characters, none if empty.
fn reason(text: Option<String>) -> Option<String> {
    text.map(|t| t.trim().chars().take(1000).collect::<String>())
        .filter(|t| !t.is_empty())
}
