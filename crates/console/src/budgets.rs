//! Budgets (issue 53): each `[[budget]]`, its limits, and its use now per scope, with a meter
//! and when it frees up — the page an operator opens when an approval names a budget.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use maud::html;

use crate::approvals::refused;
use crate::page::{self, shown, time, OperatorSession};
use crate::ConsoleState;

pub(crate) fn routes() -> Router<Arc<ConsoleState>> {
    Router::new().route("/ui/budgets", get(list))
}

async fn list(
    State(st): State<Arc<ConsoleState>>,
    Extension(s): Extension<OperatorSession>,
) -> Response {
    let budgets = match st.gateway.operator().budgets().await {
        Ok(b) => b,
        Err(e) => return refused(e, &s),
    };
    let body = html! {
        h1 { "Budgets" }
        p.hint { "Limits on effects: executions sent (or that may have been) in a rolling window, per scope. Past one, a call waits for an approval or is refused; nothing is sent." }
        @if budgets.is_empty() { p { "No [[budget]] is configured." } }
        @for b in &budgets {
            section.budget id={"budget-" (b.name)} {
                h2 { (shown(&b.name)) }
                p {
                    "At most "
                    @if let Some(max) = b.max_calls { strong { (max) " calls" } }
                    @if b.max_calls.is_some() && b.sum.is_some() { " and " }
                    @if let Some((argument, max)) = &b.sum { strong { (shown(max)) } " summed over " code { (shown(argument)) } }
                    " per " (b.window_seconds) "s of " (shown(&b.tools.join(", ")))
                    "; past it: " strong { (b.on_exhausted) } "."
                }
                @if b.scopes.is_empty() {
                    p.hint { "Nothing counted in the window." }
                } @else {
                    table.budgets {
                        thead { tr { th { "Scope" } th { "Calls" } th { "Sum" } th { "Used" } th { "Frees up" } } }
                        tbody {
                            @for u in &b.scopes {
                                tr {
                                    td { @if u.scope.is_empty() { "all calls" } @else { (shown(&u.scope)) } }
                                    td { (u.calls) @if let Some(max) = b.max_calls { " of " (max) } }
                                    td { @if let Some((_, max)) = &b.sum { (shown(&u.sum)) " of " (shown(max)) } @else { "–" } }
                                    td {
                                        meter min="0" max="1" low="0.8" high="0.99" optimum="0" value=(format!("{:.3}", u.used.min(1.0))) {}
                                        " " (format!("{:.0}%", u.used * 100.0))
                                    }
                                    td { @if let Some(at) = &u.frees_at { (time(at)) } @else { "–" } }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    page::layout("Budgets", Some(&s), "budgets", body).into_response()
}
