//! Activity: executions with filters, paged newest first; each opens its timeline (every
//! lifecycle event on a line, the calls that reached it, the five investigation answers).

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use maud::{html, Markup};
use postern_core::{ExecutionId, Timestamp};
use postern_ledger::ListFilter;
use postern_pipeline::investigate::{investigate, Investigation};
use serde::Deserialize;

use crate::approvals::{cursor, PAGE};
use crate::page::OperatorSession;
use crate::page::{self, pretty, short, shown, shown_or, time};
use crate::session::url_escape;
use crate::ConsoleState;

pub(crate) fn routes() -> Router<Arc<ConsoleState>> {
    Router::new()
        .route("/ui/activity", get(list))
        .route("/ui/executions/{id}", get(timeline))
}

#[derive(Deserialize, Default)]
struct Filters {
    actor: Option<String>,
    tool: Option<String>,
    state: Option<String>,
    /// `YYYY-MM-DDTHH:MM` (UTC), as a `datetime-local` field sends it.
    from: Option<String>,
    to: Option<String>,
    before: Option<String>,
}

fn given(v: &Option<String>) -> Option<String> {
    v.as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
}

/// `YYYY-MM-DDTHH:MM[:SS]` in UTC as a timestamp, or what is wrong with it.
fn utc(text: &str) -> Result<Timestamp, String> {
    let bad = || format!("{text:?} is not a time of the form 2026-12-03T14:30 (UTC)");
    let (date, clock) = text.split_once(['T', ' ']).ok_or_else(bad)?;
    let d: Vec<i64> = date
        .split('-')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .map_err(|_| bad())?;
    let c: Vec<i64> = clock
        .trim_end_matches('Z')
        .split(':')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .map_err(|_| bad())?;
    let (&[y, m, day], [h, min, rest @ ..]) = (d.as_slice(), c.as_slice()) else {
        return Err(bad());
    };
    let sec = rest.first().copied().unwrap_or(0);
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || *h > 23 || *min > 59 || sec > 60 {
        return Err(bad());
    }
    // Howard Hinnant's days-from-civil.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Ok(Timestamp(
        ((days * 86_400) + h * 3600 + min * 60 + sec) * 1000,
    ))
}

const STATES: [&str; 14] = [
    "awaiting_approval",
    "authorized",
    "dispatched",
    "completed",
    "delivered",
    "failed",
    "rejected",
    "denied",
    "cancelled",
    "outcome_unknown",
    "needs_review",
    "resolved",
    "delivery_failed",
    "accepted",
];

async fn list(
    State(st): State<Arc<ConsoleState>>,
    Extension(s): Extension<OperatorSession>,
    Query(f): Query<Filters>,
) -> Response {
    let bad = |why: String| page::message(StatusCode::BAD_REQUEST, Some(&s), "Bad filter", &why);
    let before = match cursor(f.before.as_deref(), &s) {
        Ok(b) => b,
        Err(r) => return *r,
    };
    let state = given(&f.state);
    if let Some(st) = &state {
        if !STATES.contains(&st.as_str()) {
            return bad(format!(
                "{st:?} is not a state; one of {}",
                STATES.join(", ")
            ));
        }
    }
    let mut filter = ListFilter {
        actor: given(&f.actor),
        tool: given(&f.tool),
        state,
        before,
        limit: PAGE,
        ..ListFilter::default()
    };
    for (field, slot) in [
        (&f.from, &mut filter.accepted_from),
        (&f.to, &mut filter.accepted_to),
    ] {
        if let Some(text) = given(field) {
            match utc(&text) {
                Ok(t) => *slot = Some(t),
                Err(why) => return bad(why),
            }
        }
    }
    let found = match st.gateway.ledger().read().list(&filter).await {
        Ok(f) => f,
        Err(e) => return bad(e.to_string()),
    };
    let mut next = String::new();
    for (k, v) in [
        ("actor", &f.actor),
        ("tool", &f.tool),
        ("state", &f.state),
        ("from", &f.from),
        ("to", &f.to),
    ] {
        if let Some(v) = given(v) {
            next.push_str(&format!("{k}={}&", url_escape(&v)));
        }
    }
    let older = (found.len() == PAGE as usize)
        .then(|| found.last().map(|e| e.id))
        .flatten();
    let value = |v: &Option<String>| v.clone().unwrap_or_default();
    let body = html! {
        h1 { "Activity" }
        form.filters method="get" action="/ui/activity" {
            label { "Actor " input type="text" name="actor" value=(value(&f.actor)); }
            label { "Tool " input type="text" name="tool" value=(value(&f.tool)); }
            label { "State "
                select name="state" {
                    option value="" { "any" }
                    @for name in STATES {
                        option value=(name) selected[f.state.as_deref() == Some(name)] { (name) }
                    }
                }
            }
            label { "From (UTC) " input type="datetime-local" name="from" value=(value(&f.from)); }
            label { "To (UTC) " input type="datetime-local" name="to" value=(value(&f.to)); }
            button type="submit" { "Filter" }
        }
        table.activity {
            thead { tr { th { "Execution" } th { "Accepted" } th { "Actor" } th { "Tool" } th { "State" } th { "Sent" } th { "Key" } } }
            tbody {
                @for e in &found {
                    tr {
                        td { a href={"/ui/executions/" (e.id)} { (short(&e.id.to_string(), 16)) } }
                        td { (time(&e.accepted_at.to_string())) }
                        td { (shown(&e.actor)) }
                        td { (shown(&e.tool)) }
                        td.state { (e.lifecycle.state.name()) }
                        td { (e.lifecycle.dispatches) "×" }
                        td { @if let Some(k) = &e.operation_key { (short(k, 16)) } @else { "–" } }
                    }
                }
                @if found.is_empty() { tr.empty { td colspan="7" { "No execution matches." } } }
            }
        }
        @if let Some(o) = older { p.paging { a href={"/ui/activity?" (next) "before=" (o)} { "Older →" } } }
    };
    page::layout("Activity", Some(&s), "activity", body).into_response()
}

/// The facts of an event worth a glance on the line (the rest is in the record's detail).
fn event_facts(detail: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    for key in [
        "status",
        "target_status",
        "via",
        "reason",
        "approved_by",
        "denied_by",
        "resolved_by",
        "error",
    ] {
        if let Some(v) = detail.get(key).filter(|v| !v.is_null()) {
            let text = v.as_str().map_or_else(|| v.to_string(), str::to_string);
            out.push(format!(
                "{}: {}",
                key.replace('_', " "),
                shown(&text.chars().take(160).collect::<String>())
            ));
        }
    }
    out
}

fn line(found: &Investigation) -> Markup {
    html! {
        ol.timeline aria-label="Lifecycle events" {
            @for e in &found.view.events {
                @let kind = e.body.event.name();
                li class={"event " (e.body.event.as_str())} {
                    span.n { (e.body.n) }
                    strong.kind { (kind) }
                    (time(&e.body.at.to_string()))
                    @for fact in event_facts(&e.body.detail) { span.fact { (fact) } }
                }
            }
        }
    }
}

async fn timeline(
    State(st): State<Arc<ConsoleState>>,
    Extension(s): Extension<OperatorSession>,
    Path(id): Path<String>,
) -> Response {
    let Ok(parsed) = id.parse::<ExecutionId>() else {
        return page::message(
            StatusCode::NOT_FOUND,
            Some(&s),
            "No such execution",
            "That is not an execution id (exe_…).",
        );
    };
    let found = match investigate(st.gateway.ledger().as_ref(), parsed).await {
        Ok(Some(f)) => f,
        Ok(None) => {
            return page::message(
                StatusCode::NOT_FOUND,
                Some(&s),
                "No such execution",
                &format!("No execution {parsed} in this store."),
            )
        }
        Err(e) => {
            return page::message(
                StatusCode::SERVICE_UNAVAILABLE,
                Some(&s),
                "The record cannot be read",
                &e.to_string(),
            )
        }
    };
    let v = &found.view.summary;
    let t = &found.trace;
    let body = html! {
        h1 { "Execution " (short(&t.execution_id, 16)) }
        dl.facts {
            dt { "Tool" } dd { strong { (shown(&t.tool)) } " (" (v.class.as_str()) ")" }
            dt { "Actor" } dd { (shown(&t.actor)) }
            dt { "State" } dd.state #state { (t.state) }
            dt { "Sent" } dd { (v.lifecycle.dispatches) " time(s)" }
            dt { "Fingerprint" } dd { code { (t.fingerprint) } }
            dt { "Operation key" } dd { (shown_or(v.operation_key.as_deref(), "–")) }
            dt { "Run" } dd { (shown_or(v.run_id.as_deref(), "–")) }
        }
        h2 { "Timeline" }
        (line(&found))
        h2 { "Calls that reached it" }
        table.calls {
            thead { tr { th { "At" } th { "Run" } th { "JSON-RPC id" } th { "How" } th { "Told" } th { "Replica" } } }
            tbody {
                @for c in &found.calls {
                    tr {
                        td { (time(&c.at.to_string())) }
                        td { (shown_or(c.run_id.as_deref(), "–")) }
                        td { code { (shown_or(c.request_id.as_deref(), "–")) } }
                        td.attempt { (c.attempt) }
                        td { (postern_pipeline::investigate::told(&c.outcome)) }
                        td { (c.instance) }
                    }
                }
                @if found.calls.is_empty() { tr.empty { td colspan="6" { "No call is recorded for it." } } }
            }
        }
        h2 { "What happened" }
        ol.answers #answers {
            @for a in &t.answers {
                li {
                    h3 { (shown(a.question)) }
                    p.answer { (shown(&a.answer)) }
                    @if !a.evidence.is_empty() {
                        details {
                            summary { "Evidence (" (a.evidence.len()) ")" }
                            ul { @for e in &a.evidence {
                                li { (shown(&e.what)) @if let Some(at) = &e.at { " — " (time(at)) } @if let Some(n) = e.event { " (event " (n) ")" } }
                            } }
                        }
                    }
                }
            }
        }
        h2 { "The canonical record" }
        pre.record { (pretty(&found.view.record)) }
    };
    page::layout("Execution", Some(&s), "activity", body).into_response()
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_times_parse_as_a_datetime_local_field_sends_them() {
        assert_eq!(super::utc("1970-01-01T00:00").unwrap().0, 0);
        assert_eq!(
            super::utc("2026-12-03T14:30").unwrap().to_string(),
            "2026-12-03T14:30:00.000Z"
        );
        assert_eq!(
            super::utc("2024-02-29T23:59:59").unwrap().to_string(),
            "2024-02-29T23:59:59.000Z"
        );
        assert!(super::utc("2026-13-01T00:00").is_err());
        assert!(super::utc("yesterday").is_err());
    }
}
