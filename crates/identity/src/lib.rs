//! Postern's identity from an organisation's provider (issue 50): the OAuth 2.1 resource-server
//! check of a JWT access token. Each `[[issuer]]`'s metadata is discovered under its URL
//! (`/.well-known/openid-configuration`, else RFC 8414's `oauth-authorization-server`), its key
//! set (JWKS) fetched and cached; a token is verified with the `jsonwebtoken` crate — signature
//! by the key its `kid` names, an algorithm the issuer allows (asymmetric only), `iss`, `aud`,
//! `exp`, `nbf` with the issuer's leeway — and read into a [`Principal`].
//!
//! The key set is fetched at most once per `jwks_refresh` however many unknown `kid`s arrive (a
//! flood of made-up kids cannot make Postern hammer the provider), and the keys it holds stay in
//! use while the provider cannot be reached.
//!
//! Architecture invariant: the only crate that knows JWT, JWK and the providers' metadata. It
//! knows nothing of actors, tools, requests or the record: it turns a token into a principal or
//! a [`TokenError`], and the front decides what the principal may do. A token is never stored,
//! logged or put in an error: errors name the check that failed.

mod keys;

use std::sync::Arc;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use postern_core::config::{Issuer, Principal};
use serde_json::Value;

use keys::IssuerKeys;

/// Why a token was not accepted. None of these carries any part of the token.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum TokenError {
    #[error("the token is not a JWT ({0})")]
    Malformed(String),
    #[error("the token's issuer {0:?} is not an [[issuer]] of this gateway")]
    UnknownIssuer(String),
    #[error("the token is signed with {alg}, which issuer {issuer:?} is not allowed (algorithms: {allowed})")]
    Algorithm {
        alg: String,
        issuer: String,
        allowed: String,
    },
    #[error("the token names key {kid:?}, which issuer {issuer:?} does not publish (its key set was fetched again at most once per jwks_refresh)")]
    UnknownKey { kid: String, issuer: String },
    #[error("issuer {issuer:?}'s keys cannot be fetched ({reason}), and no key it published before verifies this token")]
    KeysUnavailable { issuer: String, reason: String },
    #[error("the token's signature does not verify")]
    Signature,
    #[error("the token has expired")]
    Expired,
    #[error("the token is not valid yet (nbf)")]
    NotYetValid,
    #[error("the token is not for this resource: its aud is not {0:?}")]
    Audience(String),
    #[error("the token lacks the {0:?} claim")]
    MissingClaim(String),
    #[error("the token is not valid ({0})")]
    Invalid(String),
}

/// The issuers whose tokens this gateway accepts.
#[derive(Clone, Default)]
pub struct Issuers(Vec<Arc<IssuerKeys>>);

impl Issuers {
    /// No I/O: each issuer's keys are fetched on first need (or by [`Issuers::warm`]).
    pub fn new(issuers: &[Issuer]) -> Issuers {
        let http = keys::http_client();
        Issuers(
            issuers
                .iter()
                .map(|i| Arc::new(IssuerKeys::new(i.clone(), http.clone())))
                .collect(),
        )
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The issuers' URLs (the protected-resource metadata's `authorization_servers`).
    pub fn urls(&self) -> Vec<String> {
        self.0.iter().map(|i| i.issuer.url.clone()).collect()
    }

    /// Fetches every issuer's metadata and keys now (at start-up); one that cannot be reached is
    /// logged and tried again when a token of it arrives.
    pub async fn warm(&self) {
        for issuer in &self.0 {
            if let Err(reason) = issuer.refresh(false).await {
                tracing::warn!(issuer = %issuer.issuer.url, %reason, "an issuer's keys could not be fetched at start-up; tokens it signs are refused until they can");
            }
        }
    }

    /// Verifies `token` for `resource` (the audience unless the issuer names one), fetching
    /// the issuer's keys when the token names a key not seen yet.
    pub async fn verify(&self, token: &str, resource: &str) -> Result<Principal, TokenError> {
        let (issuer, header) = self.issuer_of(token)?;
        let key = issuer.key(header.kid.as_deref(), true).await?;
        check(&issuer.issuer, token, header.alg, &key, resource)
    }

    /// As [`Issuers::verify`], with the keys already held only (no I/O).
    pub fn verify_cached(&self, token: &str, resource: &str) -> Result<Principal, TokenError> {
        let (issuer, header) = self.issuer_of(token)?;
        let key = issuer.cached_key(header.kid.as_deref())?;
        check(&issuer.issuer, token, header.alg, &key, resource)
    }

    /// The issuer a token claims, and its header (its algorithm allowed by that issuer).
    fn issuer_of(
        &self,
        token: &str,
    ) -> Result<(&Arc<IssuerKeys>, jsonwebtoken::Header), TokenError> {
        // Only to find which issuer's keys to check it with: nothing is believed before that.
        let claims: Value = jsonwebtoken::dangerous::insecure_decode_claims(token)
            .map_err(|e| TokenError::Malformed(reason(e.kind())))?;
        let iss = claims.get("iss").and_then(Value::as_str).unwrap_or("");
        let issuer = self
            .0
            .iter()
            .find(|i| i.issuer.url == iss)
            .ok_or_else(|| TokenError::UnknownIssuer(iss.chars().take(200).collect()))?;
        // The header's `alg` as written (`none` is no algorithm jsonwebtoken can even name).
        let alg = header_alg(token);
        if !issuer.issuer.algorithms.contains(&alg) {
            return Err(TokenError::Algorithm {
                alg: alg.chars().take(20).collect(),
                issuer: issuer.issuer.url.clone(),
                allowed: issuer.issuer.algorithms.join(", "),
            });
        }
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| TokenError::Malformed(reason(e.kind())))?;
        Ok((issuer, header))
    }
}

/// The `alg` a token's header names, as written ("" when there is none to read).
fn header_alg(token: &str) -> String {
    use base64::Engine;
    let header = token.split('.').next().unwrap_or("");
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(header.trim_end_matches('='))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
        .and_then(|h| h.get("alg").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_default()
}

/// Checks the signature and the claims, and reads the principal.
fn check(
    issuer: &Issuer,
    token: &str,
    alg: Algorithm,
    key: &jsonwebtoken::DecodingKey,
    resource: &str,
) -> Result<Principal, TokenError> {
    let audience = issuer.audience.as_deref().unwrap_or(resource);
    let mut v = Validation::new(alg);
    v.algorithms = vec![alg];
    v.set_issuer(&[&issuer.url]);
    v.set_audience(&[audience]);
    v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
    v.leeway = issuer.leeway.as_secs();
    v.validate_nbf = true;
    let data = jsonwebtoken::decode::<Value>(token, key, &v).map_err(|e| match e.kind() {
        ErrorKind::InvalidSignature => TokenError::Signature,
        ErrorKind::ExpiredSignature => TokenError::Expired,
        ErrorKind::ImmatureSignature => TokenError::NotYetValid,
        ErrorKind::InvalidAudience => TokenError::Audience(audience.to_string()),
        ErrorKind::MissingRequiredClaim(c) => TokenError::MissingClaim(c.clone()),
        other => TokenError::Invalid(reason(other)),
    })?;
    Ok(principal(issuer, &data.claims))
}

fn principal(issuer: &Issuer, claims: &Value) -> Principal {
    let text = |name: &str| claims.get(name).and_then(Value::as_str).map(str::to_string);
    Principal {
        issuer: issuer.url.clone(),
        subject: text("sub").unwrap_or_default(),
        // RFC 9068's `client_id`; OpenID's `azp` (Keycloak, Entra v2); Okta's `cid`; Entra v1's
        // `appid`.
        client_id: ["client_id", "azp", "cid", "appid"]
            .into_iter()
            .find_map(text),
        groups: strings(claims.get(&issuer.groups_claim)),
        scopes: strings(claims.get("scope").or_else(|| claims.get("scp"))),
    }
}

/// A claim that is a list of strings, or one string of space-separated words.
fn strings(claim: Option<&Value>) -> Vec<String> {
    match claim {
        Some(Value::String(s)) => s.split_whitespace().map(str::to_string).collect(),
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    }
}

/// A jsonwebtoken error's kind, in words that hold nothing of the token.
fn reason(kind: &ErrorKind) -> String {
    match kind {
        ErrorKind::InvalidToken => "not three base64url parts".to_string(),
        ErrorKind::InvalidAlgorithmName => {
            "its alg is not a signing algorithm (alg: none is refused)".to_string()
        }
        ErrorKind::Base64(_) => "bad base64url".to_string(),
        ErrorKind::Json(_) => "a part is not JSON".to_string(),
        ErrorKind::Utf8(_) => "a part is not UTF-8".to_string(),
        ErrorKind::InvalidIssuer => "iss".to_string(),
        ErrorKind::InvalidAlgorithm => "its alg does not match the key".to_string(),
        ErrorKind::InvalidKeyFormat | ErrorKind::InvalidEcdsaKey | ErrorKind::InvalidRsaKey(_) => {
            "its key does not suit its alg".to_string()
        }
        other => format!("{other:?}").chars().take(60).collect(),
    }
}

/// Whether `token` has the shape of a JWT (three dot-separated parts): static tokens are looked
/// up as they are, these are verified.
pub fn looks_like_jwt(token: &str) -> bool {
    token.split('.').count() == 3 && token.starts_with("eyJ")
}
