//! Runs (the Sessions log): who ran, with which client, since when, authorized by whom, how
//! many calls; authorize or revoke a run.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use maud::html;

use crate::approvals::refused;
use crate::page::OperatorSession;
use crate::page::{self, csrf, short, shown, shown_or, time};
use crate::ConsoleState;

/// The newest runs shown.
const SHOWN: u32 = 200;

pub(crate) fn routes() -> Router<Arc<ConsoleState>> {
    Router::new()
        .route("/ui/runs", get(list))
        .route("/ui/runs/{id}/authorize", post(authorize))
        .route("/ui/runs/{id}/revoke", post(revoke))
}

async fn list(
    State(st): State<Arc<ConsoleState>>,
    Extension(s): Extension<OperatorSession>,
) -> Response {
    let runs = match st.gateway.runs().views(SHOWN).await {
        Ok(r) => r,
        Err(e) => return refused(e, &s),
    };
    let mut calls = Vec::with_capacity(runs.len());
    for r in &runs {
        calls.push(
            st.gateway
                .ledger()
                .read()
                .calls_in(&r.run_id, 1000)
                .await
                .map(|c| c.len())
                .unwrap_or_default(),
        );
    }
    let body = html! {
        h1 { "Runs" }
        p.hint { "One row per agent run (an MCP session, a stdio process, or a run id the agent named), newest first." }
        table.runs {
            thead { tr {
                th { "Run" } th { "Actor" } th { "Client" } th { "Protocol" } th { "Started" }
                th { "Ended" } th { "Authorization" } th { "Calls" } th { "Decide" }
            } }
            tbody {
                @for (r, n) in runs.iter().zip(&calls) {
                    tr id={"run-" (r.run_id)} {
                        td { (short(&r.run_id, 14)) }
                        td { (shown(&r.actor)) }
                        td {
                            (shown_or(r.client.as_deref(), "–")) " " (shown_or(r.client_version.as_deref(), ""))
                            @if let Some(from) = &r.client_address { " " small { "from " (shown(from)) } }
                            @if let Some(p) = &r.principal {
                                br; small { "for " (shown(p["subject"].as_str().unwrap_or("?"))) " of " (shown(p["issuer"].as_str().unwrap_or("?"))) }
                            }
                        }
                        td { (shown_or(r.protocol_version.as_deref(), "–")) " " small { (r.transport) } }
                        td { (time(&r.started_at)) }
                        td { @if let Some(at) = &r.ended_at { (time(at)) " " small { (r.end_reason.unwrap_or("")) } } @else { "open" } }
                        td.authorization {
                            (r.authorization)
                            @if let Some(by) = &r.authorized_by { " by " strong { (shown(by)) } }
                            @if let Some(by) = &r.revoked_by { " (revoked by " strong { (shown(by)) } ")" }
                            @if !r.requires_authorization { small { " (not required)" } }
                        }
                        td { (n) }
                        td.actions {
                            @if r.requires_authorization && r.authorization == "pending" {
                                form method="post" action={"/ui/runs/" (r.run_id) "/authorize"} {
                                    (csrf(&s)) button.approve type="submit" { "Authorize" }
                                }
                            }
                            @if r.authorization != "revoked" {
                                form method="post" action={"/ui/runs/" (r.run_id) "/revoke"} {
                                    (csrf(&s)) button.deny type="submit" { "Revoke" }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    page::layout("Runs", Some(&s), "runs", body).into_response()
}

async fn authorize(
    State(st): State<Arc<ConsoleState>>,
    Extension(s): Extension<OperatorSession>,
    Path(id): Path<String>,
) -> Response {
    match st.gateway.operator().authorize_run(&id, &s.operator).await {
        Ok(_) => Redirect::to("/ui/runs").into_response(),
        Err(e) => refused(e, &s),
    }
}

async fn revoke(
    State(st): State<Arc<ConsoleState>>,
    Extension(s): Extension<OperatorSession>,
    Path(id): Path<String>,
) -> Response {
    match st.gateway.operator().revoke_run(&id, &s.operator).await {
        Ok(_) => Redirect::to("/ui/runs").into_response(),
        Err(e) => refused(e, &s),
    }
}
