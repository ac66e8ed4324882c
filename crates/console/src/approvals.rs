//! Approvals: pending requests newest first, live; one request's own page (where URL
//! elicitations and webhooks lead); Approve and Deny as plain forms.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Form, Router};
use maud::{html, Markup};
use postern_core::lifecycle::State as LifecycleState;
use postern_core::ExecutionId;
use postern_pipeline::{DecisionError, GatewayError, PendingDecision};
use serde::Deserialize;

use crate::page::OperatorSession;
use crate::page::{self, countdown, csrf, pretty, short, shown, shown_or, time};
use crate::ConsoleState;

/// Rows per page.
pub(crate) const PAGE: u32 = 50;

pub(crate) fn routes() -> Router<Arc<ConsoleState>> {
    Router::new()
        .route("/ui/approvals", get(list))
        .route("/ui/approvals/rows", get(rows))
        .route("/ui/approvals/{id}", get(one))
        .route("/ui/approvals/{id}/approve", post(approve))
        .route("/ui/approvals/{id}/deny", post(deny))
        .route("/ui/reviews", get(reviews))
        .route("/ui/reviews/{id}/resolve", post(resolve))
}

#[derive(Deserialize, Default)]
pub(crate) struct PageQuery {
    pub before: Option<String>,
    pub decided: Option<String>,
}

/// A `before` cursor, or a 400 naming what is wrong with it.
pub(crate) fn cursor(
    before: Option<&str>,
    s: &OperatorSession,
) -> Result<Option<ExecutionId>, Box<Response>> {
    match before.filter(|b| !b.is_empty()) {
        None => Ok(None),
        Some(b) => b.parse().map(Some).map_err(|_| {
            Box::new(page::message(
                StatusCode::BAD_REQUEST,
                Some(s),
                "Bad page cursor",
                &format!("{b:?} is not an execution id (exe_…)."),
            ))
        }),
    }
}

/// A gateway error as a page: conflicts say who decided first, and when.
pub(crate) fn refused(e: GatewayError, s: &OperatorSession) -> Response {
    let (status, text) = match &e {
        // Expired is 410 as on `/ops`, also once the sweep has recorded it denied (by nobody).
        GatewayError::Decision(d) if d.expired() => (
            StatusCode::GONE,
            format!("The request expired: {e}. Your decision was not applied."),
        ),
        GatewayError::Decision(d) => match d.as_ref() {
            DecisionError::NotAwaiting {
                decided: Some(d), ..
            }
            | DecisionError::NotUnderReview {
                decided: Some(d), ..
            } => (
                StatusCode::CONFLICT,
                format!(
                    "Already {} by {} at {}{}. Your decision was not applied.",
                    d.decision.replace('_', " "),
                    d.by.as_deref().unwrap_or("nobody (it expired)"),
                    d.at,
                    d.reason
                        .as_deref()
                        .map(|r| format!(" (reason: {r})"))
                        .unwrap_or_default()
                ),
            ),
            DecisionError::Unknown(_) | DecisionError::UnknownRun(_) => {
                (StatusCode::NOT_FOUND, e.to_string())
            }
            _ => (StatusCode::CONFLICT, e.to_string()),
        },
        GatewayError::NotRecorded(_) => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let title = if status == StatusCode::CONFLICT {
        "Not applied: already decided"
    } else {
        "Not applied"
    };
    page::message(status, Some(s), title, &text)
}

fn row(st: &ConsoleState, s: &OperatorSession, p: &PendingDecision) -> Markup {
    let id = &p.execution_id;
    let delivery = p
        .execution_id
        .parse()
        .ok()
        .and_then(|id| st.deliveries.view(id));
    html! {
        tr id={"row-" (id)} {
            td {
                a href={"/ui/approvals/" (id)} { (short(id, 16)) }
                div.tool { (shown(&p.tool)) }
            }
            td { (shown(&p.actor)) }
            td { @if let Some(run) = &p.run_id { (short(run, 12)) } @else { "–" } }
            td { pre.record { (pretty(&p.record)) } }
            td { (short(&p.fingerprint, 22)) }
            td { (time(&p.since)) }
            td { @if let Some(at) = &p.expires_at { (countdown(at)) } }
            td.webhook {
                @if let Some(d) = &delivery {
                    @if d.failed { span.bad title=(d.detail) { "webhook failed" } }
                    @else if d.delivered { span.ok { "webhook delivered" } }
                    @else { span { "webhook retrying" } }
                }
            }
            td.actions { (decision_forms(s, p)) }
        }
    }
}

fn decision_forms(s: &OperatorSession, p: &PendingDecision) -> Markup {
    let id = &p.execution_id;
    html! {
        form.approve method="post" action={"/ui/approvals/" (id) "/approve"} {
            (csrf(s))
            input type="hidden" name="fingerprint" value=(p.fingerprint);
            input type="text" name="reason" placeholder="reason (optional)" aria-label="Reason to approve";
            button.approve type="submit" { "Approve" }
        }
        form.deny method="post" action={"/ui/approvals/" (id) "/deny"} {
            (csrf(s))
            input type="text" name="reason" placeholder="reason (optional)" aria-label="Reason to deny";
            button.deny type="submit" { "Deny" }
        }
    }
}

async fn table_body(
    st: &ConsoleState,
    s: &OperatorSession,
    before: Option<ExecutionId>,
) -> Result<(Markup, Option<String>), GatewayError> {
    let pending = st
        .gateway
        .operator()
        .pending_page(LifecycleState::AwaitingApproval, PAGE, before)
        .await?;
    let older = (pending.len() == PAGE as usize)
        .then(|| pending.last().map(|p| p.execution_id.clone()))
        .flatten();
    let body = html! {
        @for p in &pending { (row(st, s, p)) }
        @if pending.is_empty() {
            tr.empty { td colspan="9" { "Nothing waits for approval." } }
        }
    };
    Ok((body, older))
}

async fn list(
    State(st): State<Arc<ConsoleState>>,
    Extension(s): Extension<OperatorSession>,
    Query(q): Query<PageQuery>,
) -> Response {
    let before = match cursor(q.before.as_deref(), &s) {
        Ok(b) => b,
        Err(r) => return *r,
    };
    let (body, older) = match table_body(&st, &s, before).await {
        Ok(x) => x,
        Err(e) => return refused(e, &s),
    };
    let waiting = st
        .gateway
        .ledger()
        .read()
        .health(postern_pipeline::now())
        .await
        .map(|h| h.awaiting_approval)
        .unwrap_or_default();
    let decided = match q.decided.as_deref().and_then(|d| d.parse().ok()) {
        Some(id) => st.gateway.operator().pending_decision(id).await.ok(),
        None => None,
    };
    let rows_url = format!(
        "/ui/approvals/rows{}",
        q.before
            .as_deref()
            .map(|b| format!("?before={}", crate::session::url_escape(b)))
            .unwrap_or_default()
    );
    let page = html! {
        h1 { "Approvals " span.count #pending-count { (waiting) " pending" } }
        @if let Some(d) = &decided { (decided_panel(d)) }
        p.hint { "Newest first. Each row is the exact canonical record that will be sent (secret fields appear only as keyed hashes). This page updates itself." }
        table.approvals {
            thead { tr {
                th { "Request" } th { "Actor" } th { "Run" } th { "Record" } th { "Fingerprint" }
                th { "Waiting since" } th { "Expires" } th { "Webhook" } th { "Decision" }
            } }
            tbody #approval-rows data-live=(rows_url) { (body) }
        }
        @if let Some(o) = older { p.paging { a href={"/ui/approvals?before=" (o)} { "Older requests →" } } }
    };
    page::layout("Approvals", Some(&s), "approvals", page).into_response()
}

fn decided_panel(p: &PendingDecision) -> Markup {
    html! {
        section.decided #decided role="status" {
            h2 { "Decided" }
            p {
                a href={"/ui/executions/" (p.execution_id)} { (short(&p.execution_id, 16)) }
                " " strong { (shown(&p.tool)) } " by " (shown(&p.actor)) ": now " strong.state { (p.state) }
            }
            @if let Some(d) = &p.decided {
                p.decision {
                    (d.decision.replace('_', " ")) " by " strong.by { (shown_or(d.by.as_deref(), "nobody (expired)")) }
                    " at " (time(&d.at))
                    @if let Some(r) = &d.reason { " — " (shown(r)) }
                }
            }
        }
    }
}

/// The rows alone: what the live page swaps in when something changed.
async fn rows(
    State(st): State<Arc<ConsoleState>>,
    Extension(s): Extension<OperatorSession>,
    Query(q): Query<PageQuery>,
) -> Response {
    let before = match cursor(q.before.as_deref(), &s) {
        Ok(b) => b,
        Err(r) => return *r,
    };
    match table_body(&st, &s, before).await {
        Ok((body, _)) => {
            let waiting = st
                .gateway
                .ledger()
                .read()
                .health(postern_pipeline::now())
                .await
                .map(|h| h.awaiting_approval)
                .unwrap_or_default();
            ([("postern-pending", waiting.to_string())], body).into_response()
        }
        Err(e) => refused(e, &s),
    }
}

async fn one(
    State(st): State<Arc<ConsoleState>>,
    Extension(s): Extension<OperatorSession>,
    Path(id): Path<String>,
) -> Response {
    let Ok(parsed) = id.parse::<ExecutionId>() else {
        return page::message(
            StatusCode::NOT_FOUND,
            Some(&s),
            "No such request",
            "That is not an approval request's id.",
        );
    };
    let p = match st.gateway.operator().pending_decision(parsed).await {
        Ok(p) => p,
        Err(e) => return refused(e, &s),
    };
    let awaiting = p.state == LifecycleState::AwaitingApproval.display_name();
    let body = html! {
        h1 { "Approval request " (short(&p.execution_id, 16)) }
        dl.facts {
            dt { "Tool" } dd { strong { (shown(&p.tool)) } }
            dt { "Actor" } dd { (shown(&p.actor)) }
            dt { "Run" } dd { (shown_or(p.run_id.as_deref(), "–")) }
            dt { "State" } dd.state { (p.state) }
            dt { "Fingerprint" } dd { code { (p.fingerprint) } }
            dt { "Waiting since" } dd { (time(&p.since)) }
            @if let Some(at) = &p.expires_at { dt { "Expires" } dd { (countdown(at)) } }
        }
        h2 { "The record that will be sent" }
        pre.record { (pretty(&p.record)) }
        h2 { "The request as it will be sent" }
        @if let Some(request) = &p.request {
            p.hint { "Every argument as the agent gave it (secret ones as ***). Non-semantic fields are sent but are not part of the record or its fingerprint, so they are not what you approve." }
            dl.facts {
                dt { "Target" } dd { pre.record { (pretty(&request["target"])) } }
                dt { "Arguments" } dd { pre.record { (pretty(&request["arguments"])) } }
                dt { "Non-semantic" } dd { (non_semantic(request)) }
            }
        } @else {
            p.hint { "This gateway does not hold the call's arguments now (it restarted since the call): an approval applies to the record above, and the next identical call supplies them." }
        }
        @if awaiting {
            div.actions #decide { (decision_forms(&s, &p)) }
        } @else {
            (decided_panel(&p))
        }
        p { a href={"/ui/executions/" (p.execution_id)} { "Timeline of this execution" } }
    };
    page::layout("Approval request", Some(&s), "approvals", body).into_response()
}

#[derive(Deserialize)]
struct ApproveForm {
    fingerprint: String,
    reason: Option<String>,
}

#[derive(Deserialize)]
struct ReasonForm {
    reason: Option<String>,
}

/// The non-semantic fields a held request carries, or a dash.
fn non_semantic(request: &serde_json::Value) -> String {
    let names: Vec<&str> = request["non_semantic"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(serde_json::Value::as_str)
        .collect();
    if names.is_empty() {
        "–".to_string()
    } else {
        names.into_iter().map(shown).collect::<Vec<_>>().join(", ")
    }
}

/// A reason as recorded: trimmed, at most 1,000 characters, none if empty.
pub(crate) fn reason(text: Option<String>) -> Option<String> {
    text.map(|t| t.trim().chars().take(1000).collect::<String>())
        .filter(|t| !t.is_empty())
}

async fn approve(
    State(st): State<Arc<ConsoleState>>,
    Extension(s): Extension<OperatorSession>,
    Path(id): Path<String>,
    Form(f): Form<ApproveForm>,
) -> Response {
    match st
        .gateway
        .operator()
        .approve(&id, &s.operator, &f.fingerprint, reason(f.reason))
        .await
    {
        Ok(_) => Redirect::to(&format!("/ui/approvals?decided={id}")).into_response(),
        Err(e) => refused(e, &s),
    }
}

async fn deny(
    State(st): State<Arc<ConsoleState>>,
    Extension(s): Extension<OperatorSession>,
    Path(id): Path<String>,
    Form(f): Form<ReasonForm>,
) -> Response {
    match st
        .gateway
        .operator()
        .deny(&id, &s.operator, reason(f.reason))
        .await
    {
        Ok(_) => Redirect::to(&format!("/ui/approvals?decided={id}")).into_response(),
        Err(e) => refused(e, &s),
    }
}

async fn reviews(
    State(st): State<Arc<ConsoleState>>,
    Extension(s): Extension<OperatorSession>,
    Query(q): Query<PageQuery>,
) -> Response {
    let before = match cursor(q.before.as_deref(), &s) {
        Ok(b) => b,
        Err(r) => return *r,
    };
    let pending = match st
        .gateway
        .operator()
        .pending_page(LifecycleState::NeedsReview, PAGE, before)
        .await
    {
        Ok(p) => p,
        Err(e) => return refused(e, &s),
    };
    let resolved = match q.decided.as_deref().and_then(|d| d.parse().ok()) {
        Some(id) => st.gateway.operator().pending_decision(id).await.ok(),
        None => None,
    };
    let body = html! {
        h1 { "Reviews " span.count { (pending.len()) @if pending.len() == PAGE as usize { "+" } " pending" } }
        @if let Some(d) = &resolved { (decided_panel(d)) }
        p.hint { "Executions whose outcome the gateway could not establish and must not guess: check the target, then record what you found." }
        @if pending.is_empty() { p.empty { "Nothing needs review." } }
        @for p in &pending {
            article.review id={"review-" (p.execution_id)} {
                h2 { a href={"/ui/executions/" (p.execution_id)} { (short(&p.execution_id, 16)) } " " (shown(&p.tool)) " by " (shown(&p.actor)) }
                p { "Under review since " (time(&p.since)) ". Fingerprint " (short(&p.fingerprint, 22)) }
                pre.record { (pretty(&p.record)) }
                form.resolve method="post" action={"/ui/reviews/" (p.execution_id) "/resolve"} {
                    (csrf(&s))
                    fieldset {
                        legend { "What happened on the target?" }
                        label { input type="radio" name="resolution" value="applied" required; " Applied" }
                        label { input type="radio" name="resolution" value="not_applied"; " Not applied" }
                    }
                    input type="text" name="reason" required placeholder="what you checked, and where" aria-label="Reason";
                    button type="submit" { "Resolve" }
                }
            }
        }
        @if pending.len() == PAGE as usize {
            @if let Some(last) = pending.last() { p.paging { a href={"/ui/reviews?before=" (last.execution_id)} { "Older →" } } }
        }
    };
    page::layout("Reviews", Some(&s), "reviews", body).into_response()
}

#[derive(Deserialize)]
struct ResolveForm {
    resolution: Option<String>,
    reason: Option<String>,
}

async fn resolve(
    State(st): State<Arc<ConsoleState>>,
    Extension(s): Extension<OperatorSession>,
    Path(id): Path<String>,
    Form(f): Form<ResolveForm>,
) -> Response {
    use postern_core::lifecycle::Resolution;
    let resolution = match f.resolution.as_deref() {
        Some("applied") => Resolution::Applied,
        Some("not_applied") => Resolution::NotApplied,
        _ => {
            return page::message(
                StatusCode::BAD_REQUEST,
                Some(&s),
                "Not applied",
                "Choose Applied or Not applied.",
            )
        }
    };
    let Some(why) = reason(f.reason) else {
        return page::message(
            StatusCode::BAD_REQUEST,
            Some(&s),
            "Not applied",
            "A resolution needs a reason: what you checked, and where.",
        );
    };
    match st
        .gateway
        .operator()
        .resolve_review(&id, &s.operator, resolution, why)
        .await
    {
        Ok(_) => Redirect::to(&format!("/ui/reviews?decided={id}")).into_response(),
        Err(e) => refused(e, &s),
    }
}
