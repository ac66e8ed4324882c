//! The operator console: `/ui` on the gateway's own listener. Server-rendered HTML (maud
//! templates, which escape every value), a little plain JavaScript for live updates and local
//! times, and nothing from outside the binary (the gateway usually sits on a private network).
//!
//! - **Log-in** with an operator's token (`[[operator]]`); an actor's token is refused. The
//!   session is a cookie (`HttpOnly`, `SameSite=Strict`, path `/ui`) that carries the operator,
//!   its expiry and a nonce, MACed with that operator's token: every replica with the same
//!   config accepts it, and changing an operator's token ends their sessions.
//! - **Sign-in with the identity provider** (`[console.sign_in]`): OpenID Connect's code flow
//!   with PKCE, `state` and `nonce`; the ID token's claims are matched to an `[[operator]]`'s
//!   `claims` ([`sign_in`]). The session is the same cookie, MACed with a key derived from the
//!   sign-in's client secret for an operator who has no token. Logging out ends it.
//! - **Forms** decide (approve, deny, authorize, revoke, resolve, verify): every one carries a
//!   CSRF token derived from the session; a post without it, or with another session's, is
//!   answered 403 and decides nothing. A post from an expired session goes to the log-in page,
//!   its decision not applied. Decisions go through the same gateway calls as `/ops`, so the
//!   first recorded wins and the other page says who decided and when.
//! - **Pages**: Approvals (live over SSE), Runs, Activity with each execution's timeline and
//!   the five investigation answers, Reviews, Audit (head, last checkpoint, verify now),
//!   Budgets (each `[[budget]]`'s use per scope, and when it frees up).
//! - **Host**: a request naming a `Host` other than a loopback name, the listen host or
//!   `public_url`'s is refused 403 before anything else (DNS rebinding), as on `/mcp`.
//! - **Headers**: `Content-Security-Policy` without `unsafe-inline` (scripts and styles only
//!   from `/ui/assets`), `X-Frame-Options: DENY`, `no-store`, and a `Server-Timing` header
//!   with the page's server time.
//! - **Webhooks** (`[[approver.webhook]]`): each new approval request is POSTed, signed with
//!   HMAC-SHA256 over a timestamp and the body, retried with backoff; failures show on the
//!   Approvals page. [`webhook::SignatureCheck`] is the receivers' verification helper.
//!
//! Architecture invariant: the console knows HTML, cookies and forms, not MCP; it reads and
//! decides only through [`postern_pipeline::Gateway`]'s operator calls and the ledger's reads,
//! never by writing events itself.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use postern_audit::VerifyingKey;
use postern_pipeline::Gateway;

mod activity;
mod approvals;
mod audit;
mod budgets;
mod hosts;
mod live;
mod page;
mod runs;
mod session;
mod sign_in;
pub mod webhook;

pub use sign_in::SignInSetup;
pub use webhook::{SignatureCheck, WebhookTarget};

/// Why a console operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    #[error("the webhook client could not be built: {0}")]
    Client(String),
    #[error("signature refused: {0}")]
    Signature(&'static str),
}

/// What the console needs besides the gateway.
pub struct ConsoleSetup {
    /// operator token → operator name
    pub operators: HashMap<String, String>,
    /// actors' tokens, only to tell an actor the console is not theirs
    pub actor_tokens: Vec<String>,
    /// The store the audit verifier reads (read-only, as `postern audit verify --store`).
    pub store_url: String,
    /// The public half of the checkpoint signing key, for "verify now".
    pub verifying_key: Option<VerifyingKey>,
    /// Whether the cookie is `Secure` (the console is reached over HTTPS).
    pub secure_cookie: bool,
    /// The approval webhooks, their secrets resolved.
    pub webhooks: Vec<WebhookTarget>,
    /// Sign-in with the identity provider (`[console.sign_in]`).
    pub sign_in: Option<SignInSetup>,
}

pub(crate) struct ConsoleState {
    pub gateway: Arc<Gateway>,
    pub sessions: session::Sessions,
    pub store_url: String,
    pub verifying_key: Option<VerifyingKey>,
    pub deliveries: Arc<webhook::Deliveries>,
    pub sign_in: Option<SignInSetup>,
    pub live: live::Live,
    /// The `Host` values the console answers to ([`page::allowed_hosts`]).
    pub hosts: Vec<String>,
}

/// The console: its routes, and the webhook announcer to start beside them.
pub struct Console {
    state: Arc<ConsoleState>,
    webhooks: Vec<WebhookTarget>,
}

impl Console {
    pub fn new(gateway: Arc<Gateway>, setup: ConsoleSetup) -> Console {
        let ttl = gateway.config().console.session_ttl;
        // Operators who sign in with the provider and hold no static token: their sessions'
        // key comes from the sign-in's secret.
        let signed_in = setup
            .sign_in
            .as_ref()
            .map(|s| {
                gateway
                    .config()
                    .operators
                    .iter()
                    .filter(|o| o.token.is_none() && o.claims.is_some())
                    .map(|o| (o.name.clone(), s.key(&format!("session {}", o.name))))
                    .collect()
            })
            .unwrap_or_default();
        let state = Arc::new(ConsoleState {
            live: live::Live::start(gateway.clone()),
            hosts: page::allowed_hosts(&gateway),
            gateway,
            sessions: session::Sessions::new(
                setup.operators,
                signed_in,
                setup.actor_tokens,
                ttl,
                setup.secure_cookie,
            ),
            store_url: setup.store_url,
            verifying_key: setup.verifying_key,
            deliveries: Arc::default(),
            sign_in: setup.sign_in,
        });
        Console {
            state,
            webhooks: setup.webhooks,
        }
    }

    /// The `/ui` routes.
    pub fn router(&self) -> Router {
        let state = self.state.clone();
        let authed = Router::new()
            .merge(approvals::routes())
            .merge(runs::routes())
            .merge(activity::routes())
            .merge(audit::routes())
            .merge(budgets::routes())
            .route("/ui/events", axum::routing::get(live::events))
            .route("/ui/logout", axum::routing::post(session::logout))
            .route(
                "/ui",
                axum::routing::get(|| async { axum::response::Redirect::to("/ui/approvals") }),
            )
            .layer(axum::middleware::from_fn_with_state(
                state.clone(),
                session::require_operator,
            ));
        Router::new()
            .merge(authed)
            .merge(session::routes())
            .merge(sign_in::routes())
            .merge(page::asset_routes())
            .layer(axum::middleware::from_fn_with_state(
                state.clone(),
                page::known_host,
            ))
            .layer(axum::middleware::from_fn(page::headers))
            .with_state(state)
    }

    /// Announces every new approval request to the webhooks until `stop` (a no-op without any).
    pub fn start_webhooks(
        &self,
        stop: tokio_util::sync::CancellationToken,
    ) -> Result<(), ConsoleError> {
        webhook::start(
            self.state.gateway.clone(),
            self.webhooks.clone(),
            self.state.deliveries.clone(),
            stop,
        )
    }
}
