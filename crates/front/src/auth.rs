//! Who is calling: an HTTP request's actor, from its bearer token, the client certificate of
//! its TLS connection ([`Peer`]), or both.
//!
//! An actor is authenticated by every credential it has configured: an actor with a token and
//! no `client_cert_fingerprint` by its token (on any connection); one with only a fingerprint
//! by its certificate; one with both only by the two together. A token and a certificate that
//! name different actors are refused rather than one of them chosen.

use std::sync::Arc;

use super::oauth::ResourceServer;
use std::collections::HashMap;

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use postern_core::config::{Actor, CertificateFingerprint};

use super::listener::Peer;
use super::oauth::bearer;

/// The credentials the front accepts: bearer tokens and pinned client certificates.
pub(super) struct ActorCredentials {
    /// bearer token → actor
    tokens: HashMap<String, String>,
    /// client certificate → actor, and whether that actor also has a token
    certificates: HashMap<CertificateFingerprint, (String, bool)>,
    /// actors that must also present their client certificate
    pinned: HashMap<String, CertificateFingerprint>,
}

impl ActorCredentials {
    pub(super) fn new(tokens: HashMap<String, String>, actors: &[Actor]) -> ActorCredentials {
        let mut certificates = HashMap::new();
        let mut pinned = HashMap::new();
        for actor in actors {
            if let Some(fingerprint) = actor.client_cert_fingerprint {
                let has_token = tokens.values().any(|a| a == &actor.name);
                certificates.insert(fingerprint, (actor.name.clone(), has_token));
                pinned.insert(actor.name.clone(), fingerprint);
            }
        }
        ActorCredentials {
            tokens,
            certificates,
            pinned,
        }
    }

    /// The actor the request's credentials prove, or why there is none.
    pub(super) fn authenticate(
        &self,
        headers: &http::HeaderMap,
        peer: Option<&Peer>,
    ) -> Result<String, Unauthenticated> {
        if headers.get_all(header::AUTHORIZATION).iter().count() > 1 {
            return Err(Unauthenticated::SeveralTokens);
        }
        let presented = peer.and_then(|p| p.client_certificate);
        let by_certificate = presented.and_then(|f| self.certificates.get(&f));
        match bearer(headers) {
            Some(token) => {
                let actor = holder_of(&self.tokens, token)
                    .cloned()
                    .ok_or(Unauthenticated::MissingOrUnknown)?;
                if let Some(pin) = self.pinned.get(&actor) {
                    if presented != Some(*pin) {
                        return Err(Unauthenticated::CertificateRequired);
                    }
                }
                match by_certificate {
                    Some((other, _)) if other != &actor => Err(Unauthenticated::Mismatch),
                    _ => Ok(actor),
                }
            }
            None => match by_certificate {
                Some((actor, false)) => Ok(actor.clone()),
                Some((_, true)) => Err(Unauthenticated::MissingOrUnknown),
                None => Err(Unauthenticated::MissingOrUnknown),
            },
        }
    }
}

/// Whose token `presented` is, of `tokens` (token, holder), compared in constant time against
/// every token: a hash-map lookup would let response times hint at a token's prefix.
pub(super) fn holder_of<'a, H>(
    tokens: impl IntoIterator<Item = (&'a String, H)>,
    presented: &str,
) -> Option<H> {
    use subtle::ConstantTimeEq;
    let mut found = None;
    for (token, holder) in tokens {
        if bool::from(token.as_bytes().ct_eq(presented.as_bytes())) {
            found = Some(holder);
        }
    }
    found
}

/// Why a request is not authenticated.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Unauthenticated {
    /// Which one would count is the proxy's guess against ours: refused instead.
    SeveralTokens,
    MissingOrUnknown,
    /// The token's actor is pinned to a client certificate this connection did not present.
    CertificateRequired,
    /// The token and the client certificate belong to different actors.
    Mismatch,
}

impl IntoResponse for Unauthenticated {
    fn into_response(self) -> Response {
        let unauthorized = |message: &'static str| {
            (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer realm=\"postern\"")],
                message,
            )
                .into_response()
        };
        match self {
            Unauthenticated::SeveralTokens => (
                StatusCode::BAD_REQUEST,
                "several Authorization headers: send exactly one",
            )
                .into_response(),
            Unauthenticated::MissingOrUnknown => unauthorized("missing or unknown bearer token"),
            Unauthenticated::CertificateRequired => unauthorized(
                "this actor authenticates with its token and its client certificate: connect with the certificate its client_cert_fingerprint names",
            ),
            Unauthenticated::Mismatch => unauthorized(
                "the bearer token and the client certificate belong to different actors",
            ),
        }
    }
}

/// The actor a `/mcp` request's credentials prove — a static token or client certificate, else
/// a JWT access token of an `[[issuer]]` (with its principal) — or the refusal to answer with
/// (a 401 points to the protected resource metadata when issuers are configured).
pub(super) async fn identify(
    credentials: &ActorCredentials,
    oauth: Option<&super::oauth::ResourceServer>,
    headers: &http::HeaderMap,
    peer: Option<&Peer>,
) -> Result<(String, Option<postern_core::config::Principal>), Response> {
    let refused = match credentials.authenticate(headers, peer) {
        Ok(actor) => return Ok((actor, None)),
        Err(refused) => refused,
    };
    let Some(oauth) = oauth else {
        return Err(refused.into_response());
    };
    if refused == Unauthenticated::MissingOrUnknown {
        if let Some(verified) = oauth.actor(headers, peer).await {
            return verified.map(|(actor, principal)| (actor, Some(principal)));
        }
    }
    let mut response = refused.into_response();
    oauth.challenge(headers, &mut response);
    Err(response)
}

/// Whether a request authenticates as an actor (token or client certificate, as `/mcp` checks)
/// or an operator (token): what a connection on a kept slot must prove ([`super::listener::probation`]).
pub fn vouch(gateway: &postern_pipeline::Gateway, tokens: &Tokens) -> super::listener::Vouch {
    let actors = ActorCredentials::new(tokens.actors.clone(), &gateway.config().actors);
    let operators = tokens.operators.clone();
    let oauth = tokens.resource_server.clone();
    std::sync::Arc::new(move |headers, peer| {
        if actors.authenticate(headers, Some(peer)).is_ok() {
            return true;
        }
        if oauth.as_ref().is_some_and(|o| o.vouches(headers, peer)) {
            return true;
        }
        bearer(headers).is_some_and(|p| holder_of(&operators, p).is_some())
    })
}

/// The address the request's client connected from (behind a trusted proxy, the one its PROXY
/// header named).
pub(super) fn client_address(extensions: &rmcp::model::Extensions) -> Option<std::net::IpAddr> {
    extensions
        .get::<http::request::Parts>()
        .and_then(|p| p.extensions.get::<Peer>())
        .and_then(|peer| peer.address)
}

/// The bearer tokens the front accepts, resolved from their secret references.
#[derive(Clone, Debug, Default)]
pub struct Tokens {
    /// token → actor (for `/mcp`)
    pub actors: HashMap<String, String>,
    /// token → operator (for `/ops`)
    pub operators: HashMap<String, String>,
    /// JWT access tokens from the `[[issuer]]`s (for `/mcp`); `None` without issuers.
    pub resource_server: Option<Arc<ResourceServer>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use postern_core::config::SessionApproval;

    fn actor(name: &str, pin: Option<u8>) -> Actor {
        Actor {
            name: name.to_string(),
            token: None,
            client_cert_fingerprint: pin.map(|b| CertificateFingerprint([b; 32])),
            session_approval: SessionApproval::Auto,
            claims: None,
            tools: None,
        }
    }

    fn credentials() -> ActorCredentials {
        let tokens = HashMap::from([
            ("token-of-only-token-actor".to_string(), "t".to_string()),
            ("token-of-both-actor-xxxxxx".to_string(), "both".to_string()),
        ]);
        ActorCredentials::new(
            tokens,
            &[
                actor("t", None),
                actor("cert", Some(1)),
                actor("both", Some(2)),
            ],
        )
    }

    fn headers(token: Option<&str>) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        if let Some(t) = token {
            h.insert(
                header::AUTHORIZATION,
                format!("Bearer {t}").parse().unwrap(),
            );
        }
        h
    }

    fn peer(b: Option<u8>) -> Peer {
        Peer {
            client_certificate: b.map(|b| CertificateFingerprint([b; 32])),
            address: None,
        }
    }

    #[test]
    fn every_configured_credential_is_required_and_none_other_decides() {
        use Unauthenticated::*;
        let c = credentials();
        let auth = |token, cert| c.authenticate(&headers(token), Some(&peer(cert)));
        let token_only = Some("token-of-only-token-actor");
        let both = Some("token-of-both-actor-xxxxxx");
        // A token actor, with or without an unrelated certificate.
        assert_eq!(auth(token_only, None), Ok("t".into()));
        assert_eq!(auth(token_only, Some(9)), Ok("t".into()));
        // A certificate-only actor.
        assert_eq!(auth(None, Some(1)), Ok("cert".into()));
        assert_eq!(auth(None, Some(9)), Err(MissingOrUnknown));
        assert_eq!(auth(None, None), Err(MissingOrUnknown));
        // An actor with both: neither alone.
        assert_eq!(auth(both, Some(2)), Ok("both".into()));
        assert_eq!(auth(both, None), Err(CertificateRequired));
        assert_eq!(auth(both, Some(1)), Err(CertificateRequired));
        assert_eq!(auth(None, Some(2)), Err(MissingOrUnknown));
        // A token and a certificate of different actors.
        assert_eq!(auth(token_only, Some(1)), Err(Mismatch));
        assert_eq!(
            auth(Some("nope-nope-nope-nope"), Some(1)),
            Err(MissingOrUnknown)
        );
        // Without TLS there is no peer certificate at all.
        assert_eq!(c.authenticate(&headers(token_only), None), Ok("t".into()));
    }
}
