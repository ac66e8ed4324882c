//! Audit: each chain's head, the last signed checkpoint, and "verify now", which runs the
//! same verifier as `postern audit verify --store` over the store, read-only.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use maud::{html, Markup};
use postern_audit::Verifier;
use postern_ledger::StoreReader;

use crate::page::OperatorSession;
use crate::page::{self, csrf, time};
use crate::ConsoleState;

pub(crate) fn routes() -> Router<Arc<ConsoleState>> {
    Router::new()
        .route("/ui/audit", get(show))
        .route("/ui/audit/verify", post(verify))
}

async fn overview(st: &ConsoleState, s: &OperatorSession) -> Result<Markup, String> {
    let ledger = st.gateway.ledger();
    let heads = ledger
        .read()
        .chain_heads()
        .await
        .map_err(|e| e.to_string())?;
    let checkpoints = ledger
        .read()
        .checkpoints()
        .await
        .map_err(|e| e.to_string())?;
    let last = checkpoints.iter().max_by_key(|c| c.at.0);
    Ok(html! {
        h1 { "Audit" }
        h2 { "Chains" }
        table.chains {
            thead { tr { th { "Chain (one per gateway instance)" } th { "Head (events)" } } }
            tbody { @for (chain, head) in &heads { tr { td { code { (chain) } } td { (head) } } } }
        }
        h2 { "Last signed checkpoint" }
        @if let Some(c) = last {
            dl.facts {
                dt { "Chain" } dd { code { (c.chain) } }
                dt { "Up to event" } dd { (c.seq) }
                dt { "Signed at" } dd { (time(&c.at.to_string())) }
                dt { "Key id" } dd { code { (c.key_id) } }
                dt { "Head hash" } dd { code { (hex::encode(c.head_hash)) } }
            }
        } @else {
            p { "No checkpoint is signed yet" @if st.verifying_key.is_none() { " (no [gateway] signing_key is configured)" } "." }
        }
        form method="post" action="/ui/audit/verify" {
            (csrf(s))
            button type="submit" disabled[st.verifying_key.is_none()] { "Verify now" }
        }
    })
}

async fn show(
    State(st): State<Arc<ConsoleState>>,
    Extension(s): Extension<OperatorSession>,
) -> Response {
    match overview(&st, &s).await {
        Ok(body) => page::layout("Audit", Some(&s), "audit", body).into_response(),
        Err(e) => page::message(
            StatusCode::SERVICE_UNAVAILABLE,
            Some(&s),
            "The record cannot be read",
            &e,
        ),
    }
}

async fn verify(
    State(st): State<Arc<ConsoleState>>,
    Extension(s): Extension<OperatorSession>,
) -> Response {
    let Some(key) = st.verifying_key else {
        return page::message(StatusCode::CONFLICT, Some(&s), "Nothing to verify against", "No [gateway] signing_key is configured: checkpoints are not signed, so the chain cannot be verified against a key.");
    };
    let started = std::time::Instant::now();
    let report = match StoreReader::open(&st.store_url).await {
        Ok(store) => store.verify(Verifier::new(key), |_, _| {}).await,
        Err(e) => Err(e),
    };
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            return page::message(
                StatusCode::SERVICE_UNAVAILABLE,
                Some(&s),
                "The verifier could not read the store",
                &e.to_string(),
            )
        }
    };
    tracing::info!(operator = %s.operator, valid = report.is_valid(), "the audit record was verified from the console");
    let head = match overview(&st, &s).await {
        Ok(h) => h,
        Err(e) => html! { p { (e) } },
    };
    let body = html! {
        (head)
        section.report #report {
            h2 { "Verification " @if report.is_valid() { span.ok { "VALID" } } @else { span.bad { "INVALID" } } }
            p { "By " (s.operator) ", in " (format!("{:.1}", started.elapsed().as_secs_f64() * 1000.0)) " ms." }
            pre { (report.to_string()) }
        }
    };
    page::layout("Audit", Some(&s), "audit", body).into_response()
}
