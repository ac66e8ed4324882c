//! Operators' log-in: the session cookie, the CSRF token of every form, and the gate in front
//! of every page.
//!
//! The cookie is `hex(operator).expiry_ms.nonce.mac`, the MAC an HMAC-SHA256 keyed with the
//! operator's own token, so it needs no server-side table (any replica with the config checks
//! it) and rotating a token ends that operator's sessions. A log-out ends the session on the
//! replica it was made on (the nonce is remembered until it would have expired) and clears the
//! cookie in the browser.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Extension, Form, Router};
use hmac::{Hmac, Mac};
use maud::html;
use serde::Deserialize;
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::page::{self, OperatorSession};
use crate::ConsoleState;

const COOKIE: &str = "postern_session";
const LOGIN_COOKIE: &str = "postern_login";
/// The largest form a page posts (a reason is at most a few kilobytes).
const MAX_FORM: usize = 64 * 1024;

pub(crate) struct Sessions {
    /// token → operator
    operators: HashMap<String, String>,
    /// operator → token (the MAC key of their sessions)
    keys: HashMap<String, String>,
    actor_tokens: Vec<String>,
    ttl: Duration,
    secure: bool,
    /// Nonces of sessions logged out here, with their expiry.
    ended: Mutex<HashMap<String, i64>>,
}

pub(crate) fn mac(key: &str, parts: &[&str]) -> String {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key.as_bytes()).expect("any key length");
    for p in parts {
        m.update(p.as_bytes());
        m.update(b"\0");
    }
    hex::encode(m.finalize().into_bytes())
}

pub(crate) fn same(a: &str, b: &str) -> bool {
    bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

pub(crate) fn random_hex() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the OS has randomness");
    hex::encode(bytes)
}

pub(crate) fn now_ms() -> i64 {
    postern_pipeline::now().0
}

/// A cookie's value from the request's `Cookie` headers.
pub(crate) fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

impl Sessions {
    /// `signed_in`: the session keys of operators who sign in with the identity provider and
    /// have no static token (derived from the sign-in's client secret).
    pub fn new(
        operators: HashMap<String, String>,
        signed_in: HashMap<String, String>,
        actor_tokens: Vec<String>,
        ttl: Duration,
        secure: bool,
    ) -> Sessions {
        let mut keys: HashMap<String, String> = signed_in;
        keys.extend(operators.iter().map(|(t, n)| (n.clone(), t.clone())));
        Sessions {
            operators,
            keys,
            actor_tokens,
            ttl,
            secure,
            ended: Mutex::default(),
        }
    }

    fn set_cookie(&self, name: &str, value: &str, max_age: u64) -> String {
        self.cookie_header(name, value, max_age, "/ui", "Strict")
    }

    pub(crate) fn secure(&self) -> bool {
        self.secure
    }

    /// A `Set-Cookie` value (`HttpOnly`, `Secure` over HTTPS).
    pub(crate) fn cookie_header(
        &self,
        name: &str,
        value: &str,
        max_age: u64,
        path: &str,
        same_site: &str,
    ) -> String {
        format!(
            "{name}={value}; Path={path}; HttpOnly; SameSite={same_site}; Max-Age={max_age}{}",
            if self.secure { "; Secure" } else { "" }
        )
    }

    /// Starts a session for `operator` on `response` (its cookie, and the log-in form's
    /// cleared).
    pub(crate) fn start(&self, operator: &str, response: &mut Response) -> bool {
        let Some(value) = self.issue(operator) else {
            return false;
        };
        for c in [
            self.set_cookie(COOKIE, &value, self.ttl.as_secs()),
            self.set_cookie(LOGIN_COOKIE, "", 0),
        ] {
            if let Ok(v) = c.parse() {
                response.headers_mut().append(header::SET_COOKIE, v);
            }
        }
        true
    }

    /// A new session's cookie for `operator`.
    fn issue(&self, operator: &str) -> Option<String> {
        let key = self.keys.get(operator)?;
        let expires = now_ms() + i64::try_from(self.ttl.as_millis()).unwrap_or(i64::MAX / 2);
        let (name, expiry, nonce) = (hex::encode(operator), expires.to_string(), random_hex());
        let m = mac(key, &["session", operator, &expiry, &nonce]);
        Some(format!("{name}.{expiry}.{nonce}.{m}"))
    }

    /// The session a cookie value proves, if it is valid now.
    fn check(&self, value: &str) -> Option<OperatorSession> {
        let mut parts = value.split('.');
        let (name, expiry, nonce, m) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let operator = String::from_utf8(hex::decode(name).ok()?).ok()?;
        let key = self.keys.get(&operator)?;
        if parts.next().is_some() || !same(&mac(key, &["session", &operator, expiry, nonce]), m) {
            return None;
        }
        if expiry.parse::<i64>().ok()? <= now_ms() {
            return None;
        }
        if self
            .ended
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(nonce)
        {
            return None;
        }
        let csrf = mac(key, &["csrf", nonce]);
        Some(OperatorSession {
            operator,
            csrf: csrf[..32].to_string(),
        })
    }

    fn end(&self, value: &str) {
        let mut parts = value.split('.');
        if let (Some(_), Some(expiry), Some(nonce)) = (parts.next(), parts.next(), parts.next()) {
            let mut ended = self.ended.lock().unwrap_or_else(|e| e.into_inner());
            let now = now_ms();
            ended.retain(|_, until| *until > now);
            ended.insert(nonce.to_string(), expiry.parse().unwrap_or(now));
        }
    }

    fn operator_of(&self, token: &str) -> Option<String> {
        // Every token is compared (no early exit on a match).
        let mut found = None;
        for (t, name) in &self.operators {
            if same(t, token) {
                found = Some(name.clone());
            }
        }
        found
    }

    fn is_actor(&self, token: &str) -> bool {
        self.actor_tokens
            .iter()
            .fold(false, |seen, t| seen | same(t, token))
    }
}

/// Where a log-in may send the operator back to: a console path, never another site, and
/// never a control character (a CR or LF cannot go in a `Location` header: the redirect would
/// fail).
pub(crate) fn safe_next(next: Option<&str>) -> String {
    let console_path = |n: &str| {
        (n == "/ui" || n.starts_with("/ui/") || n.starts_with("/ui?"))
            && !n.contains('\\')
            && !n.chars().any(char::is_control)
    };
    match next {
        Some(n) if console_path(n) => n.into(),
        _ => "/ui/approvals".into(),
    }
}

fn login_redirect(next: &str, why: &str) -> Response {
    let next = url_escape(next);
    Redirect::to(&format!("/ui/login?next={next}&why={why}")).into_response()
}

/// Percent-encodes a query value.
pub(crate) fn url_escape(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Whether a browser's `Origin` (when it sent one) is this console's own.
fn same_origin(headers: &HeaderMap, public_url: Option<&str>) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let host = origin.split_once("://").map_or(origin, |(_, h)| h);
    let own = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    let public = public_url.map(|u| u.split_once("://").map_or(u, |(_, h)| h));
    Some(host) == own || Some(host) == public
}

/// The gate of every page but the log-in: a valid session, and on a form post a valid CSRF
/// token (and no foreign `Origin`). Nothing is decided for a post that fails it.
pub(crate) async fn require_operator(
    State(st): State<Arc<ConsoleState>>,
    req: Request,
    next: Next,
) -> Response {
    let session = cookie(req.headers(), COOKIE).and_then(|v| st.sessions.check(v));
    let Some(session) = session else {
        let back = if req.method() == Method::GET {
            req.uri()
                .path_and_query()
                .map_or("/ui", |p| p.as_str())
                .to_string()
        } else {
            req.headers()
                .get(header::REFERER)
                .and_then(|v| v.to_str().ok())
                .and_then(|r| r.find("/ui").map(|i| r[i..].to_string()))
                .unwrap_or_else(|| "/ui/approvals".into())
        };
        let why = if req.method() == Method::GET {
            "login"
        } else {
            "expired"
        };
        return login_redirect(&safe_next(Some(&back)), why);
    };
    let mut req = req;
    if req.method() == Method::POST {
        let forged = |why: &str| {
            page::message(
                StatusCode::FORBIDDEN,
                Some(&session),
                "Refused: this form was not sent from the console",
                why,
            )
        };
        if !same_origin(
            req.headers(),
            st.gateway.config().console.public_url.as_deref(),
        ) {
            return forged("The request came from another site (its Origin is not this console's). Nothing was decided.");
        }
        let (parts, body) = req.into_parts();
        let Ok(bytes) = axum::body::to_bytes(body, MAX_FORM).await else {
            return page::message(
                StatusCode::PAYLOAD_TOO_LARGE,
                Some(&session),
                "Refused",
                "The form is too large. Nothing was decided.",
            );
        };
        let fields: Vec<(String, String)> =
            serde_urlencoded::from_bytes(&bytes).unwrap_or_default();
        let presented = fields
            .iter()
            .find(|(k, _)| k == "csrf")
            .map(|(_, v)| v.as_str());
        if !presented.is_some_and(|t| same(t, &session.csrf)) {
            return forged("The form carries no valid CSRF token (it is forged, replayed from another session, or from before a log-in). Nothing was decided: reload the page and decide again.");
        }
        req = Request::from_parts(parts, Body::from(bytes));
    }
    req.extensions_mut().insert(session);
    next.run(req).await
}

#[derive(Deserialize)]
struct LoginQuery {
    next: Option<String>,
    why: Option<String>,
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
    login_nonce: String,
    next: Option<String>,
}

pub(crate) fn routes() -> Router<Arc<ConsoleState>> {
    Router::new().route("/ui/login", get(login_page).post(login))
}

fn login_form(st: &ConsoleState, status: StatusCode, next: &str, note: Option<&str>) -> Response {
    let nonce = random_hex();
    let body = html! {
        section.login {
            h1 { "Postern console" }
            @if let Some(note) = note { p.notice role="alert" { (note) } }
            form method="post" action="/ui/login" {
                input type="hidden" name="login_nonce" value=(nonce);
                input type="hidden" name="next" value=(next);
                label for="token" { "Operator token" }
                input #token type="password" name="token" autocomplete="current-password" required autofocus;
                button type="submit" { "Log in" }
            }
            p.hint { "Operators log in with their own token ([[operator]] in postern.toml). An agent's token cannot." }
            @if st.sign_in.is_some() {
                p { a #sso href=(format!("/ui/login/sso?next={}", url_escape(next))) { "Sign in with your identity provider" } }
            }
        }
    };
    let mut response = (status, page::layout("Log in", None, "", body)).into_response();
    if let Ok(v) = st.sessions.set_cookie(LOGIN_COOKIE, &nonce, 600).parse() {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
    response
}

async fn login_page(
    State(st): State<Arc<ConsoleState>>,
    axum::extract::Query(q): axum::extract::Query<LoginQuery>,
) -> Response {
    let note = match q.why.as_deref() {
        Some("expired") => Some("Your session has expired or is missing: the decision was NOT applied. Log in and decide again."),
        Some("logout") => Some("Logged out."),
        _ => None,
    };
    login_form(&st, StatusCode::OK, &safe_next(q.next.as_deref()), note)
}

async fn login(
    State(st): State<Arc<ConsoleState>>,
    headers: HeaderMap,
    Form(f): Form<LoginForm>,
) -> Response {
    let next = safe_next(f.next.as_deref());
    // An empty nonce proves nothing: a cleared cookie is empty too.
    let nonce_ok = !f.login_nonce.is_empty()
        && cookie(&headers, LOGIN_COOKIE).is_some_and(|c| same(c, &f.login_nonce));
    if !nonce_ok {
        return login_form(
            &st,
            StatusCode::FORBIDDEN,
            &next,
            Some("The log-in form expired or was not sent from this console: try again."),
        );
    }
    let token = f.token.trim();
    let Some(operator) = st.sessions.operator_of(token).filter(|_| !token.is_empty()) else {
        let (status, note) = if st.sessions.is_actor(token) {
            (
                StatusCode::FORBIDDEN,
                "That is an agent's (actor's) token: the console is for operators only.",
            )
        } else {
            (StatusCode::UNAUTHORIZED, "Unknown operator token.")
        };
        return login_form(&st, status, &next, Some(note));
    };
    let mut response = Redirect::to(&next).into_response();
    if !st.sessions.start(&operator, &mut response) {
        return login_form(
            &st,
            StatusCode::UNAUTHORIZED,
            &next,
            Some("Unknown operator."),
        );
    }
    tracing::info!(operator = %operator, "an operator logged in to the console");
    response
}

pub(crate) async fn logout(
    State(st): State<Arc<ConsoleState>>,
    Extension(_session): Extension<OperatorSession>,
    headers: HeaderMap,
) -> Response {
    if let Some(v) = cookie(&headers, COOKIE) {
        st.sessions.end(v);
    }
    let mut response = Redirect::to("/ui/login?why=logout").into_response();
    if let Ok(v) = st.sessions.set_cookie(COOKIE, "", 0).parse() {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sessions(ttl: Duration) -> Sessions {
        let ops = HashMap::from([("op-token-0123456789".to_string(), "olga".to_string())]);
        Sessions::new(
            ops,
            HashMap::new(),
            vec!["actor-token-0123456".into()],
            ttl,
            false,
        )
    }

    #[test]
    fn a_session_is_bound_to_its_operator_and_expiry() {
        let s = sessions(Duration::from_secs(60));
        let v = s.issue("olga").unwrap();
        let got = s.check(&v).unwrap();
        assert_eq!(got.operator, "olga");
        // Any change to the cookie is refused.
        let mut parts: Vec<String> = v.split('.').map(String::from).collect();
        parts[1] = (parts[1].parse::<i64>().unwrap() + 1).to_string();
        assert!(s.check(&parts.join(".")).is_none());
        assert!(s
            .check(&v.replace(&hex::encode("olga"), &hex::encode("eve")))
            .is_none());
        // Another session has another CSRF token.
        let other = s.check(&s.issue("olga").unwrap()).unwrap();
        assert_ne!(other.csrf, got.csrf);
        s.end(&v);
        assert!(s.check(&v).is_none());
        let expired = sessions(Duration::from_millis(0));
        assert!(expired.check(&expired.issue("olga").unwrap()).is_none());
    }

    #[test]
    fn only_console_paths_are_followed() {
        assert_eq!(safe_next(Some("https://evil.example")), "/ui/approvals");
        assert_eq!(safe_next(Some("//evil.example/ui")), "/ui/approvals");
        assert_eq!(safe_next(Some("/ui/runs")), "/ui/runs");
        assert_eq!(safe_next(Some("/ui?x=1")), "/ui?x=1");
        assert_eq!(safe_next(Some("/uievil")), "/ui/approvals");
        assert_eq!(safe_next(Some("/ui/a\\b")), "/ui/approvals");
        for bad in [
            "/ui/runs\r\nSet-Cookie: x=1",
            "/ui/\t",
            "/ui/\u{7f}",
            "/ui/\u{85}",
        ] {
            assert_eq!(safe_next(Some(bad)), "/ui/approvals", "{bad:?}");
        }
    }
}
