//! Operators sign in with the organisation's identity provider (`[console.sign_in]`): OpenID
//! Connect's authorization code flow with PKCE (S256), `state` and `nonce`, as a confidential
//! client. The request in flight is a cookie (`postern_sso`, `SameSite=Lax` so it comes back
//! with the provider's redirect, MACed so it cannot be forged or edited); the callback checks
//! the `state`, exchanges the code with the PKCE verifier, verifies the ID token (signature by
//! the issuer's key set, `iss`, `aud` = the client, `exp`, `nonce`) and matches its claims to
//! one `[[operator]]`'s `claims`. A person whose claims are an actor's is refused, as an
//! actor's token is. The session that follows is the same cookie a token log-in gets.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use maud::html;
use postern_core::config::{Principal, SignIn};
use postern_identity::{Issuers, Pending, Provider};
use serde::Deserialize;

use crate::session::{cookie, mac, safe_next, same};
use crate::{page, ConsoleState};

const PENDING_COOKIE: &str = "postern_sso";
/// How long a person has at the provider before the sign-in must start again.
const PENDING_SECS: u64 = 600;

/// What the console's sign-in needs.
pub struct SignInSetup {
    settings: SignIn,
    /// The client secret, resolved (for the code exchange only).
    secret: String,
    /// The key of this sign-in's cookies and of the sessions of operators who have no static
    /// token. Derived from a secret only the gateway holds, never from the client secret,
    /// which the provider (and its administrators) know too.
    own_key: String,
    /// The gateway's issuers (their metadata and key sets).
    issuers: Issuers,
}

impl SignInSetup {
    /// `gateway_secret`: a secret every replica of this gateway holds and no one else (the
    /// fingerprint key): only a key derived from it is kept.
    pub fn new(settings: SignIn, secret: String, issuers: Issuers, gateway_secret: &str) -> Self {
        SignInSetup {
            settings,
            secret,
            own_key: mac(gateway_secret, &["postern console sign-in key"]),
            issuers,
        }
    }

    /// The MAC key for `purpose`: every replica with the config agrees, and rotating the
    /// gateway's secret ends those sessions.
    pub(crate) fn key(&self, purpose: &str) -> String {
        mac(&self.own_key, &["postern console sign-in", purpose])
    }
}

pub(crate) fn routes() -> Router<Arc<ConsoleState>> {
    Router::new()
        .route("/ui/login/sso", get(begin))
        .route("/ui/login/callback", get(callback))
}

#[derive(Deserialize)]
struct Begin {
    next: Option<String>,
}

/// `scheme://host` the browser reached the console at (the redirect URI's base).
fn base(st: &ConsoleState, headers: &HeaderMap) -> String {
    let config = st.gateway.config();
    if let Some(url) = &config.console.public_url {
        return url.clone();
    }
    let scheme = match st.sessions.secure() {
        true => "https",
        false => "http",
    };
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or(&config.gateway.listen);
    format!("{scheme}://{host}")
}

fn failure(status: StatusCode, text: &str) -> Response {
    page::message(status, None, "Sign-in failed", text)
}

/// A failed callback: the request in flight is over.
fn failed(st: &ConsoleState, status: StatusCode, text: &str) -> Response {
    let mut response = failure(status, text);
    end_pending(st, &mut response);
    response
}

/// Clears the cookie of the sign-in in flight (it has been answered, one way or the other).
fn end_pending(st: &ConsoleState, response: &mut Response) {
    let ended = st
        .sessions
        .cookie_header(PENDING_COOKIE, "", 0, "/ui/login", "Lax");
    if let Ok(v) = ended.parse() {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
}

async fn provider(setup: &SignInSetup) -> Result<Provider, String> {
    let metadata = setup
        .issuers
        .metadata(&setup.settings.issuer)
        .await
        .map_err(|e| e.to_string())?;
    Provider::from_metadata(
        &setup.settings.issuer,
        metadata,
        &setup.settings.client_id,
        Some(&setup.secret),
        setup.issuers.http().clone(),
    )
    .map_err(|e| e.to_string())
}

async fn begin(
    State(st): State<Arc<ConsoleState>>,
    headers: HeaderMap,
    Query(q): Query<Begin>,
) -> Response {
    let Some(setup) = &st.sign_in else {
        return failure(
            StatusCode::NOT_FOUND,
            "This console has no [console.sign_in].",
        );
    };
    let provider = match provider(setup).await {
        Ok(p) => p,
        Err(why) => {
            tracing::warn!(reason = %why, "the console's identity provider cannot be reached");
            return failure(
                StatusCode::BAD_GATEWAY,
                &format!("The identity provider cannot be reached: {why}"),
            );
        }
    };
    let mut scopes = vec!["openid".to_string()];
    scopes.extend(setup.settings.scopes.iter().cloned());
    let redirect = format!("{}/ui/login/callback", base(&st, &headers));
    let (url, pending) = match provider.authorize(&redirect, &scopes, None) {
        Ok(started) => started,
        Err(why) => return failure(StatusCode::BAD_GATEWAY, &why.to_string()),
    };
    let next = safe_next(q.next.as_deref());
    let value = seal(setup, &pending, &next);
    let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, url)]).into_response();
    let cookie =
        st.sessions
            .cookie_header(PENDING_COOKIE, &value, PENDING_SECS, "/ui/login", "Lax");
    if let Ok(v) = cookie.parse() {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
    response
}

/// The request in flight as a cookie value: its parts, hex-encoded, and their MAC.
fn seal(setup: &SignInSetup, p: &Pending, next: &str) -> String {
    let expiry = (crate::session::now_ms() / 1000 + PENDING_SECS as i64).to_string();
    let parts = [&p.state, &p.nonce, &p.verifier, &hex::encode(next), &expiry];
    let m = mac(&setup.key("pending"), &parts.map(String::as_str));
    format!("{}.{m}", parts.map(String::as_str).join("."))
}

/// The request a cookie value proves (and where to go after), if it is intact and not stale.
fn unseal(setup: &SignInSetup, value: &str) -> Option<(Pending, String)> {
    let parts: Vec<&str> = value.split('.').collect();
    let [state, nonce, verifier, next, expiry, m] = parts.as_slice() else {
        return None;
    };
    let expected = mac(
        &setup.key("pending"),
        &[state, nonce, verifier, next, expiry],
    );
    if !same(&expected, m) || expiry.parse::<i64>().ok()? < crate::session::now_ms() / 1000 {
        return None;
    }
    let next = String::from_utf8(hex::decode(next).ok()?).ok()?;
    Some((
        Pending {
            state: state.to_string(),
            nonce: nonce.to_string(),
            verifier: verifier.to_string(),
        },
        next,
    ))
}

#[derive(Deserialize)]
struct Callback {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

async fn callback(
    State(st): State<Arc<ConsoleState>>,
    headers: HeaderMap,
    Query(q): Query<Callback>,
) -> Response {
    let Some(setup) = &st.sign_in else {
        return failure(
            StatusCode::NOT_FOUND,
            "This console has no [console.sign_in].",
        );
    };
    let Some((pending, next)) = cookie(&headers, PENDING_COOKIE).and_then(|v| unseal(setup, v))
    else {
        return failure(StatusCode::FORBIDDEN, "This sign-in was not started from this browser, or it took longer than 10 minutes: sign in again.");
    };
    if let Some(error) = q.error.as_deref() {
        let text = format!(
            "The identity provider refused: {}",
            page::shown(&format!(
                "{error} {}",
                q.error_description.as_deref().unwrap_or("")
            ))
        );
        return failed(&st, StatusCode::FORBIDDEN, &text);
    }
    let (Some(code), Some(state)) = (q.code.as_deref(), q.state.as_deref()) else {
        return failed(
            &st,
            StatusCode::BAD_REQUEST,
            "The provider's answer has no code.",
        );
    };
    if !same(state, &pending.state) {
        return failed(&st, StatusCode::FORBIDDEN, "The answer's state is not this sign-in's: it was started elsewhere (a forged or replayed link). Sign in again.");
    }
    let principal = match finish(&st, setup, &headers, code, &pending).await {
        Ok(p) => p,
        Err((status, why)) => {
            tracing::info!(reason = %why, "a console sign-in was refused");
            return failed(&st, status, &why);
        }
    };
    let operator = match operator_of(&st, &principal) {
        Ok(operator) => operator,
        Err(why) => {
            tracing::info!(reason = %why, "a console sign-in matched no operator");
            return failed(&st, StatusCode::FORBIDDEN, &why);
        }
    };
    tracing::info!(operator = %operator, subject = %principal.subject, "an operator signed in to the console with the identity provider");
    let mut response = landing(&next);
    end_pending(&st, &mut response);
    st.sessions.start(&operator, &mut response);
    response
}

/// The code exchanged, and the ID token verified: whom it names.
async fn finish(
    st: &ConsoleState,
    setup: &SignInSetup,
    headers: &HeaderMap,
    code: &str,
    pending: &Pending,
) -> Result<Principal, (StatusCode, String)> {
    let gateway = |why: String| (StatusCode::BAD_GATEWAY, why);
    let provider = provider(setup).await.map_err(gateway)?;
    let redirect = format!("{}/ui/login/callback", base(st, headers));
    let tokens = provider
        .exchange_code(code, &redirect, &pending.verifier, None)
        .await
        .map_err(|e| gateway(format!("the code could not be exchanged: {e}")))?;
    let id_token = tokens
        .id_token
        .ok_or_else(|| gateway("the provider sent no ID token".into()))?;
    setup
        .issuers
        .verify_id_token(
            &setup.settings.issuer,
            &id_token,
            &setup.settings.client_id,
            &pending.nonce,
        )
        .await
        .map_err(|e| {
            (
                StatusCode::FORBIDDEN,
                format!("the ID token is refused: {e}"),
            )
        })
}

/// The one operator whose claims `p` meets (never an actor).
fn operator_of(st: &ConsoleState, p: &Principal) -> Result<String, String> {
    let config = st.gateway.config();
    let who = format!("{:?} (subject {:?})", p.issuer, p.subject);
    if let Some(actor) = config
        .actors
        .iter()
        .find(|a| a.claims.as_ref().is_some_and(|c| c.matches(p)))
    {
        return Err(format!(
            "{who} is actor {:?}: the console is for operators only.",
            actor.name
        ));
    }
    let matching: Vec<&str> = config
        .operators
        .iter()
        .filter(|o| o.claims.as_ref().is_some_and(|c| c.matches(p)))
        .map(|o| o.name.as_str())
        .collect();
    match matching.as_slice() {
        [name] => Ok(name.to_string()),
        [] => Err(format!("{who} is signed in at the provider but is no operator of this gateway (no [[operator]] claims match).")),
        _ => Err(format!("{who} matches several operators ({}): their claims must be exclusive.", matching.join(", "))),
    }
}

/// A same-site step to `next`: the session cookie is `SameSite=Strict`, and a browser does not
/// send it on a navigation a cross-site redirect (the provider's) started.
fn landing(next: &str) -> Response {
    let body = html! {
        section.login {
            h1 { "Signed in" }
            p { a #continue href=(next) { "Continue to the console" } }
        }
    };
    let mut response = page::layout("Signed in", None, "", body).into_response();
    let refresh = format!("0;url={next}");
    if let Ok(v) = refresh.parse() {
        response.headers_mut().insert(header::REFRESH, v);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Who holds the provider's client secret (the provider's administrators) cannot mint a
    /// pending sign-in or a session: the keys come from the gateway's own secret.
    #[test]
    fn the_client_secret_keys_nothing() {
        let settings = SignIn {
            issuer: "https://id.example".into(),
            client_id: "console".into(),
            client_secret: postern_core::config::SecretRef::Env("S".into()),
            scopes: vec![],
        };
        let issuers = Issuers::new(&[], Default::default());
        let client_secret = "the-client-secret-the-provider-knows";
        let setup = SignInSetup::new(settings, client_secret.into(), issuers, "gateway-only");
        let pending = Pending {
            state: "s".into(),
            nonce: "n".into(),
            verifier: "v".into(),
        };
        let sealed = seal(&setup, &pending, "/ui/runs");
        assert!(unseal(&setup, &sealed).is_some());
        let forged_key = mac(client_secret, &["postern console sign-in", "pending"]);
        let parts: Vec<&str> = sealed.rsplitn(2, '.').collect();
        let fields: Vec<&str> = parts[1].split('.').collect();
        let forged = format!("{}.{}", parts[1], mac(&forged_key, &fields));
        assert!(unseal(&setup, &forged).is_none());
        assert_ne!(
            setup.key("session dana"),
            mac(client_secret, &["postern console sign-in", "session dana"])
        );
    }
}
