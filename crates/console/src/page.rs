//! The page frame (navigation, log-out), the security headers every answer gets, the embedded
//! assets, and small pieces the pages share (times, messages).

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use maud::{html, Markup, DOCTYPE};

use crate::ConsoleState;

const CSS: &str = include_str!("assets/console.css");
const JS: &str = include_str!("assets/console.js");

/// Scripts and styles only from the console's own files: no inline script or style runs, so an
/// injected one would not either.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

pub(crate) fn asset_routes() -> Router<Arc<ConsoleState>> {
    Router::new()
        .route(
            "/ui/assets/console.css",
            get(|| async { ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], CSS) }),
        )
        .route(
            "/ui/assets/console.js",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
                    JS,
                )
            }),
        )
}

/// The hosts the console answers to: `/mcp`'s (loopback names, the listen host) and the host
/// of `[console] public_url`, the address operators are sent to.
pub(crate) fn allowed_hosts(gateway: &postern_pipeline::Gateway) -> Vec<String> {
    let config = gateway.config();
    let mut hosts = postern_core::hosts::allowed_hosts(&config.gateway.listen);
    if let Some(url) = config.console.public_url.as_deref() {
        let rest = url.split_once("://").map_or(url, |(_, r)| r);
        hosts.push(
            rest.split(['/', '?', '#'])
                .next()
                .unwrap_or(rest)
                .to_string(),
        );
    }
    hosts
}

/// Refuses a request whose `Host` is foreign (DNS rebinding), as `/mcp` does, before anything
/// else: the log-in and the CSRF `Origin` check trust `Host` to be the console's own.
pub(crate) async fn known_host(
    State(st): State<Arc<ConsoleState>>,
    req: Request,
    next: Next,
) -> Response {
    use crate::hosts::refuse_host;
    match refuse_host(req.uri(), req.headers(), &st.hosts) {
        Some(refusal) => refusal,
        None => next.run(req).await,
    }
}

/// The headers of every console answer, and its server time (`Server-Timing: app;dur=ms`).
pub(crate) async fn headers(req: Request, next: Next) -> Response {
    let started = Instant::now();
    let mut response = next.run(req).await;
    let h = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "same-origin"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        h.insert(name, HeaderValue::from_static(value));
    }
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    if let Ok(v) = HeaderValue::from_str(&format!("app;dur={ms:.2}")) {
        h.insert("server-timing", v);
    }
    response
}

const SECTIONS: [(&str, &str); 6] = [
    ("approvals", "Approvals"),
    ("runs", "Runs"),
    ("activity", "Activity"),
    ("reviews", "Reviews"),
    ("audit", "Audit"),
    ("budgets", "Budgets"),
];

/// The operator a page is shown to, and the CSRF token their forms carry.
#[derive(Clone, Debug)]
pub(crate) struct OperatorSession {
    pub operator: String,
    pub csrf: String,
}

/// A whole page: `active` names the section shown in the navigation.
pub(crate) fn layout(
    title: &str,
    session: Option<&OperatorSession>,
    active: &str,
    body: Markup,
) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Postern" }
                link rel="stylesheet" href="/ui/assets/console.css";
                script src="/ui/assets/console.js" defer {}
            }
            body {
                @if let Some(s) = session {
                    header.top {
                        a.brand href="/ui/approvals" { "Postern" }
                        nav aria-label="Sections" {
                            @for (id, name) in SECTIONS {
                                @if id == active {
                                    a href={"/ui/" (id)} aria-current="page" { (name) }
                                } @else {
                                    a href={"/ui/" (id)} { (name) }
                                }
                            }
                        }
                        form.logout method="post" action="/ui/logout" {
                            (csrf(s))
                            span.who { "operator " strong { (s.operator) } }
                            button type="submit" { "Log out" }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// The hidden CSRF field every form carries.
pub(crate) fn csrf(s: &OperatorSession) -> Markup {
    html! { input type="hidden" name="csrf" value=(s.csrf); }
}

/// A time as UTC text; the page's script shows it in the viewer's zone, UTC on hover.
pub(crate) fn time(at: &str) -> Markup {
    html! { time datetime=(at) title={"UTC " (at)} { (at.replace('T', " ").replace(".000Z", "Z")) } }
}

/// A time the page counts towards (an approval's expiry).
pub(crate) fn countdown(at: &str) -> Markup {
    html! { time.countdown datetime=(at) title={"UTC " (at)} { "until " (at) } }
}

/// A page that only says something (a refusal, a conflict).
pub(crate) fn message(
    status: StatusCode,
    session: Option<&OperatorSession>,
    title: &str,
    text: &str,
) -> Response {
    let body = html! {
        section.message {
            h1 { (title) }
            p role="alert" { (shown(text)) }
            p { a href="/ui/approvals" { "Back to the console" } }
        }
    };
    (status, layout(title, session, "", body)).into_response()
}

/// A string Postern did not write (an agent's, a target's, an upstream's), as a person may
/// read it: every character that changes what is seen (controls, bidi overrides and isolates,
/// zero-width and other invisible format characters) written as `\u{…}`, a backslash as `\\`,
/// as the CLI shows it (`postern_core::terminal_text`); maud then escapes it for HTML.
pub(crate) fn shown(s: &str) -> String {
    postern_core::terminal_text::escaped(s).into_owned()
}

/// [`shown`] for an optional string, `none` when absent.
pub(crate) fn shown_or(s: Option<&str>, none: &str) -> String {
    s.map_or_else(|| none.to_string(), shown)
}

/// A JSON value as indented text (shown in `<pre>`, escaped like every value): characters that
/// change what is seen are JSON escapes (`\u202e`), so `"\u202e1234"` never reads `4321`.
pub(crate) fn pretty(v: &serde_json::Value) -> String {
    let text = serde_json::to_string_pretty(v).unwrap_or_default();
    postern_core::terminal_text::escaped_json(&text).into_owned()
}

/// The first characters of a long id ([`shown`]), the whole in its title.
pub(crate) fn short(id: &str, n: usize) -> Markup {
    let id = shown(id);
    let head: String = id.chars().take(n).collect();
    html! { code title=(id) { (head) @if id.chars().count() > n { "…" } } }
}
