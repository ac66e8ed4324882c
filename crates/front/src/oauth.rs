//! The front as an OAuth 2.1 resource server for `/mcp` (issue 50). A bearer token that is a
//! JWT is verified against the `[[issuer]]`s (`postern-identity`) for `/mcp`'s resource URL
//! (RFC 8707: `[gateway] public_url` + `/mcp`, else the scheme and `Host` the request came
//! with), and its principal is matched to the one actor whose `claims` it meets. The protected
//! resource metadata (RFC 9728) is served at `/.well-known/oauth-protected-resource` and its
//! `/mcp`-suffixed form, and every 401 of `/mcp` points to it in `WWW-Authenticate`, which is
//! how a hosted client finds the authorization server.
//!
//! A token is never kept: the principal (issuer, subject, client id) is what the record gets,
//! and the token itself is never passed to an upstream or a target (each has its own
//! credentials).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use postern_core::config::{CertificateFingerprint, ClaimMatch, Config, Issuer, Principal};
use postern_identity::{Issuers, TokenError};
use serde_json::json;

use super::listener::Peer;

/// The issuers, and which principals are which actors.
pub struct ResourceServer {
    issuers: Issuers,
    /// The issuers' settings (the scopes each tool needs).
    settings: Vec<Issuer>,
    /// (what the token must say, the actor, the certificate the actor is pinned to)
    actors: Vec<(ClaimMatch, String, Option<CertificateFingerprint>)>,
    /// (what the token must say, the operator)
    operators: Vec<(ClaimMatch, String)>,
    public_url: Option<String>,
    /// SHA-256 of every static token: never sent to a provider to be introspected.
    statics: HashSet<[u8; 32]>,
    /// The listener's scheme and address, for a request whose `Host` is not one of ours.
    scheme: &'static str,
    listen: String,
    hosts: Vec<String>,
}

impl std::fmt::Debug for ResourceServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceServer")
            .field("issuers", &self.issuers.urls())
            .finish_non_exhaustive()
    }
}

impl ResourceServer {
    /// `None` when no `[[issuer]]` is configured. `secrets`: each introspecting issuer's client
    /// secret by URL; `statics`: every static token (actors' and operators'), which are never
    /// sent to a provider to be introspected.
    pub fn new<'a>(
        config: &Config,
        secrets: HashMap<String, String>,
        statics: impl Iterator<Item = &'a String>,
    ) -> Option<Arc<ResourceServer>> {
        if config.issuers.is_empty() {
            return None;
        }
        let actors = config
            .actors
            .iter()
            .filter_map(|a| {
                let claims = a.claims.clone()?;
                Some((claims, a.name.clone(), a.client_cert_fingerprint))
            })
            .collect();
        let operators = config
            .operators
            .iter()
            .filter_map(|o| Some((o.claims.clone()?, o.name.clone())))
            .collect();
        let g = &config.gateway;
        Some(Arc::new(ResourceServer {
            operators,
            issuers: Issuers::new(&config.issuers, secrets),
            statics: statics.map(|t| digest(t)).collect(),
            settings: config.issuers.clone(),
            actors,
            public_url: g.public_url.clone(),
            scheme: if g.tls.is_some() { "https" } else { "http" },
            listen: g.listen.clone(),
            hosts: postern_core::hosts::allowed_hosts(&g.listen),
        }))
    }

    /// The issuers (the console's sign-in verifies ID tokens with their keys).
    pub fn issuers(&self) -> &Issuers {
        &self.issuers
    }

    /// Whether `token` is for the issuers to verify: a JWT, or, where an issuer introspects,
    /// any token that is not a static one.
    fn verifiable<'t>(&self, token: &'t str) -> Option<&'t str> {
        let opaque = || self.issuers.introspects() && !self.statics.contains(&digest(token));
        (postern_identity::looks_like_jwt(token) || opaque()).then_some(token)
    }

    /// Fetches the issuers' keys (at start-up).
    pub async fn warm(&self) {
        self.issuers.warm().await;
    }

    /// `scheme://host` this gateway is reached at, for a request with `headers`.
    fn base(&self, headers: &http::HeaderMap) -> String {
        if let Some(url) = &self.public_url {
            return url.clone();
        }
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .filter(|h| {
                let name = h.rsplit_once(':').map_or(*h, |(n, _)| n);
                self.hosts.iter().any(|a| a.eq_ignore_ascii_case(name))
            });
        format!("{}://{}", self.scheme, host.unwrap_or(&self.listen))
    }

    /// `/ops`'s resource URL (an operator's token is for it, not for `/mcp`).
    pub fn ops_resource(&self, headers: &http::HeaderMap) -> String {
        format!("{}/ops", self.base(headers))
    }

    /// `/mcp`'s resource URL (the audience a token must carry unless its issuer names one).
    pub fn resource(&self, headers: &http::HeaderMap) -> String {
        format!("{}/mcp", self.base(headers))
    }

    /// `WWW-Authenticate`'s `resource_metadata` parameter for a request with `headers`.
    fn metadata_parameter(&self, headers: &http::HeaderMap) -> String {
        format!(
            "resource_metadata=\"{}/.well-known/oauth-protected-resource/mcp\"",
            self.base(headers)
        )
    }

    /// A `tools/call` whose token lacks a scope its tool needs (`[[issuer]] tool_scopes`): 403
    /// `insufficient_scope` naming every scope the tool needs (RFC 6750 §3.1; how an MCP client
    /// knows to ask for more), before anything is recorded or sent.
    pub fn insufficient_scope(
        &self,
        headers: &http::HeaderMap,
        principal: &Principal,
        message: Option<&serde_json::Value>,
    ) -> Option<Response> {
        let message = message?;
        if message.get("method")?.as_str()? != "tools/call" {
            return None;
        }
        let tool = message.get("params")?.get("name")?.as_str()?;
        let issuer = self.settings.iter().find(|i| i.url == principal.issuer)?;
        let missing = issuer.missing_scopes(tool, &principal.scopes);
        if missing.is_empty() {
            return None;
        }
        let needed = issuer.missing_scopes(tool, &[]).join(" ");
        let text = format!(
            "insufficient_scope: tool {tool:?} needs the scope {needed}; the token lacks {}: nothing was recorded or sent",
            missing.join(" ")
        );
        let mut refused = (StatusCode::FORBIDDEN, text).into_response();
        let challenge = format!(
            "Bearer error=\"insufficient_scope\", scope=\"{needed}\", {}",
            self.metadata_parameter(headers)
        );
        if let Ok(value) = HeaderValue::from_str(&challenge) {
            refused
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        }
        Some(refused)
    }

    /// Points a 401 of `/mcp` at the protected resource metadata (RFC 9728 §5.1).
    pub fn challenge(&self, headers: &http::HeaderMap, response: &mut Response) {
        if response.status() != StatusCode::UNAUTHORIZED {
            return;
        }
        let parameter = self.metadata_parameter(headers);
        if let Ok(value) = HeaderValue::from_str(&format!("Bearer {parameter}")) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        }
    }

    /// The actor a JWT bearer token stands for, and its principal; `None` when the bearer is
    /// not a JWT (a static token, or none).
    pub async fn actor(
        &self,
        headers: &http::HeaderMap,
        peer: Option<&Peer>,
    ) -> Option<Result<(String, Principal), Response>> {
        let token = bearer(headers).and_then(|t| self.verifiable(t))?;
        let verified = self.issuers.verify(token, &self.resource(headers)).await;
        Some(match verified {
            Ok(principal) => self
                .actor_of(principal, peer)
                .map_err(|why| (StatusCode::FORBIDDEN, why).into_response()),
            Err(why) => {
                if let Some(unavailable) = unavailable(&why) {
                    return Some(Err(unavailable));
                }
                tracing::info!(reason = %why, "a bearer token was refused");
                let mut refused =
                    (StatusCode::UNAUTHORIZED, format!("invalid_token: {why}")).into_response();
                self.challenge(headers, &mut refused);
                Err(refused)
            }
        })
    }

    /// The operator a JWT bearer token on `/ops` stands for (its audience: `/ops`'s URL unless
    /// the issuer names one); `None` when the bearer is not a JWT. A token whose principal is
    /// also an actor's is refused: an agent must never decide on its own calls.
    pub async fn operator(&self, headers: &http::HeaderMap) -> Option<Result<String, String>> {
        let token = bearer(headers).and_then(|t| self.verifiable(t))?;
        let resource = self.ops_resource(headers);
        let principal = match self.issuers.verify(token, &resource).await {
            Ok(principal) => principal,
            Err(why @ TokenError::IntrospectionFailed { .. }) => {
                tracing::warn!(reason = %why, "an operator's token could not be checked");
                return Some(Err("invalid_token: the token could not be checked now (its issuer cannot be asked); try again".into()));
            }
            Err(why) => return Some(Err(format!("invalid_token: {why}"))),
        };
        let who = format!("subject {:?} of {}", principal.subject, principal.issuer);
        if let Some((_, actor, _)) = self.actors.iter().find(|(c, _, _)| c.matches(&principal)) {
            return Some(Err(format!(
                "{who} is actor {actor:?}: an actor's token cannot decide approvals or reviews"
            )));
        }
        let matching: Vec<&String> = self
            .operators
            .iter()
            .filter(|(c, _)| c.matches(&principal))
            .map(|(_, name)| name)
            .collect();
        Some(match matching.as_slice() {
            [name] => Ok((*name).clone()),
            [] => Err(format!(
                "{who} is no operator's: no [[operator]] claims match the token"
            )),
            _ => Err(format!(
                "{who} matches several operators: make their claims exclusive"
            )),
        })
    }

    /// Whether a bearer token proves an actor with what is already held (the tokens verified
    /// before, the keys): the listener's question for a connection on a slot kept for agents,
    /// with no I/O there.
    pub fn vouches(&self, headers: &http::HeaderMap, peer: &Peer) -> bool {
        bearer(headers)
            .and_then(|t| self.verifiable(t))
            .and_then(|t| self.issuers.verify_cached(t, &self.resource(headers)).ok())
            .is_some_and(|p| self.actor_of(p, Some(peer)).is_ok())
    }

    /// The one actor whose claims `principal` meets, or why there is none (a 403's words).
    fn actor_of(
        &self,
        principal: Principal,
        peer: Option<&Peer>,
    ) -> Result<(String, Principal), String> {
        let matching: Vec<_> = self
            .actors
            .iter()
            .filter(|(claims, _, _)| claims.matches(&principal))
            .collect();
        let who = format!(
            "subject {:?} of {} (client {:?})",
            principal.subject,
            principal.issuer,
            principal.client_id.as_deref().unwrap_or("-")
        );
        let forbidden = Err;
        match matching.as_slice() {
            [] => forbidden(format!(
                "{who} is no actor's: no [[actor]] claims match the token"
            )),
            [(_, actor, pin)] => {
                let presented = peer.and_then(|p| p.client_certificate);
                if pin.is_some() && presented != *pin {
                    return forbidden(format!("actor {actor:?} also needs the client certificate its client_cert_fingerprint names"));
                }
                Ok((actor.clone(), principal))
            }
            several => {
                let names: Vec<&str> = several.iter().map(|(_, a, _)| a.as_str()).collect();
                forbidden(format!(
                    "{who} matches several actors ({}): make their claims exclusive",
                    names.join(", ")
                ))
            }
        }
    }

    /// The protected resource metadata of `/mcp` (or `/ops`) for a request with `headers`.
    fn metadata(&self, headers: &http::HeaderMap, ops: bool) -> Response {
        let resource = match ops {
            true => self.ops_resource(headers),
            false => self.resource(headers),
        };
        let body = json!({
            "resource": resource,
            "authorization_servers": self.issuers.urls(),
            "bearer_methods_supported": ["header"],
            "resource_name": "Postern",
        });
        (
            [
                (header::CONTENT_TYPE, "application/json"),
                (header::CACHE_CONTROL, "max-age=300"),
            ],
            body.to_string(),
        )
            .into_response()
    }
}

/// `/.well-known/oauth-protected-resource` and its `/mcp`- and `/ops`-suffixed forms (the
/// last is how `postern login` finds the provider operators sign in with).
pub fn routes(server: Arc<ResourceServer>) -> Router {
    let serve = |server: Arc<ResourceServer>, ops: bool| {
        axum::routing::get(move |headers: http::HeaderMap| {
            let server = server.clone();
            async move { server.metadata(&headers, ops) }
        })
    };
    Router::new()
        .route(
            "/.well-known/oauth-protected-resource",
            serve(server.clone(), false),
        )
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            serve(server.clone(), false),
        )
        .route(
            "/.well-known/oauth-protected-resource/ops",
            serve(server, true),
        )
}

/// A token that could not be checked now (not refused): 503, saying only that (the reason,
/// which may name the provider's address, goes to the log).
fn unavailable(why: &TokenError) -> Option<Response> {
    let text = match why {
        TokenError::Busy(_) => "the token could not be checked now: its issuer is being asked about as many tokens as it may be at once; retry in a second",
        TokenError::IntrospectionFailed { .. } => "the token could not be checked now: its issuer cannot be asked; retry later",
        _ => return None,
    };
    tracing::warn!(reason = %why, "a bearer token could not be checked now");
    Some(
        (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "1")],
            text,
        )
            .into_response(),
    )
}

/// The token of a request's `Authorization: Bearer` header (RFC 6750), if it has one.
pub(super) fn bearer(headers: &http::HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

fn digest(token: &str) -> [u8; 32] {
    postern_core::digest::sha256(token.as_bytes())
}
