//! Postern and an organisation's identity provider (issue 50), both ways.
//!
//! As an OAuth 2.1 resource server: each `[[issuer]]`'s metadata is discovered under its URL
//! (`/.well-known/openid-configuration`, else RFC 8414's `oauth-authorization-server`), its key
//! set (JWKS) fetched and cached; a JWT access token is verified with the `jsonwebtoken` crate —
//! signature by the key its `kid` names, an algorithm the issuer allows (asymmetric only),
//! `iss`, `aud`, `exp`, `nbf` with the issuer's leeway — and read into a [`Principal`]. An opaque
//! token is introspected (RFC 7662) where an issuer is configured to. A verified token is
//! remembered (a hash of it, never the token) until it would stop being accepted, at most
//! [`postern_core::config::LONGEST_BELIEF`].
//!
//! The key set is fetched at most once per `jwks_refresh` however many unknown `kid`s arrive (a
//! flood of made-up kids cannot make Postern hammer the provider), and the keys it holds stay in
//! use while the provider cannot be reached.
//!
//! As an OAuth client ([`Provider`]): the console's sign-in, `postern login`'s device grant and
//! `postern connect`'s client credentials and loopback sign-in, with the `oauth2` crate.
//!
//! Architecture invariant: the only crate that knows JWT, JWK, OAuth's messages and the
//! providers' metadata. It knows nothing of actors, tools, requests, cookies or the record: it
//! turns a token into a principal or a [`TokenError`], and its callers decide what the principal
//! may do. A token is never stored, logged or put in an error: errors name the check that
//! failed.

mod client;
mod keys;
mod verified;

use std::collections::HashMap;
use std::sync::Arc;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use postern_core::config::{Issuer, Principal};
use serde_json::Value;

pub use client::{FlowError, Pending, Provider, Tokens};
use keys::IssuerKeys;
pub use keys::Metadata;
use verified::Verified;

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
    #[error("the token is not active (issuer {0:?} says so when asked: revoked, expired or never issued)")]
    Inactive(String),
    #[error("issuer {issuer:?} could not be asked about the token: {reason}")]
    IntrospectionFailed { issuer: String, reason: String },
    #[error("issuer {0:?} is being asked about as many tokens as it may be at once; try again")]
    Busy(String),
    #[error("the token is bound to a key (cnf: DPoP or mutual TLS); Postern checks no proof of possession, so it does not take it as a bearer token")]
    Bound,
    #[error("the provider says this is a {0:?} token, not an access token")]
    NotAnAccessToken(String),
    #[error("the ID token's nonce is not the one this sign-in sent")]
    Nonce,
}

/// The issuers whose tokens this gateway accepts.
#[derive(Clone)]
pub struct Issuers {
    issuers: Vec<Arc<IssuerKeys>>,
    /// Each introspecting issuer's client secret, by issuer URL.
    secrets: Arc<HashMap<String, String>>,
    verified: Arc<Verified>,
    /// The introspections' HTTP client (one, so its connections are kept).
    http: reqwest::Client,
    /// Introspections in flight at most (a flood of made-up opaque tokens cannot turn into a
    /// flood of requests to the provider).
    asking: Arc<tokio::sync::Semaphore>,
}

/// Introspections in flight at once, across issuers.
const MAX_INTROSPECTIONS: usize = 16;

impl Issuers {
    /// No I/O: each issuer's keys are fetched on first need (or by [`Issuers::warm`]).
    /// `secrets`: the client secret of each issuer that has `introspection`, by its URL.
    pub fn new(issuers: &[Issuer], secrets: HashMap<String, String>) -> Issuers {
        let http = keys::http_client();
        Issuers {
            issuers: issuers
                .iter()
                .map(|i| Arc::new(IssuerKeys::new(i.clone(), http.clone())))
                .collect(),
            secrets: Arc::new(secrets),
            verified: Arc::new(Verified::new()),
            http: http.clone(),
            asking: Arc::new(tokio::sync::Semaphore::new(MAX_INTROSPECTIONS)),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.issuers.is_empty()
    }

    /// Whether an opaque (non-JWT) token may be one of these issuers' (one introspects).
    pub fn introspects(&self) -> bool {
        self.issuers
            .iter()
            .any(|i| i.issuer.introspection.is_some())
    }

    /// The issuers' URLs (the protected-resource metadata's `authorization_servers`).
    pub fn urls(&self) -> Vec<String> {
        self.issuers.iter().map(|i| i.issuer.url.clone()).collect()
    }

    /// Fetches every issuer's metadata and keys now (at start-up); one that cannot be reached is
    /// logged and tried again when a token of it arrives.
    pub async fn warm(&self) {
        for issuer in &self.issuers {
            if let Err(reason) = issuer.refresh(false).await {
                tracing::warn!(issuer = %issuer.issuer.url, %reason, "an issuer's keys could not be fetched at start-up; tokens it signs are refused until they can");
            }
        }
    }

    /// Verifies `token` for `resource` (the audience unless the issuer names one): a JWT
    /// against its issuer's keys (fetched when it names a key not seen yet), any other token
    /// by introspection. A token verified before is believed until it would stop being
    /// accepted, and at most [`postern_core::config::LONGEST_BELIEF`].
    pub async fn verify(&self, token: &str, resource: &str) -> Result<Principal, TokenError> {
        if let Some(principal) = self.verified.get(token, resource) {
            return Ok(principal);
        }
        let (principal, until) = if looks_like_jwt(token) {
            let (issuer, header) = self.issuer_of(token)?;
            let key = issuer.key(header.kid.as_deref(), true).await?;
            let audience = issuer.issuer.audience.as_deref().unwrap_or(resource);
            let (principal, claims) = check(&issuer.issuer, token, header.alg, &key, audience)?;
            (principal, until(&issuer.issuer, &claims))
        } else {
            self.introspect(token, resource).await?
        };
        self.verified.keep(token, resource, &principal, until);
        Ok(principal)
    }

    /// As [`Issuers::verify`], with what is already held only (no I/O): the tokens verified
    /// before, and JWTs signed by keys held.
    pub fn verify_cached(&self, token: &str, resource: &str) -> Result<Principal, TokenError> {
        if let Some(principal) = self.verified.get(token, resource) {
            return Ok(principal);
        }
        let (issuer, header) = self.issuer_of(token)?;
        let key = issuer.cached_key(header.kid.as_deref())?;
        let audience = issuer.issuer.audience.as_deref().unwrap_or(resource);
        check(&issuer.issuer, token, header.alg, &key, audience).map(|(p, _)| p)
    }

    /// An OpenID Connect ID token from `issuer` for client `client_id`, carrying `nonce`: the
    /// person it names (the console's sign-in).
    pub async fn verify_id_token(
        &self,
        issuer: &str,
        token: &str,
        client_id: &str,
        nonce: &str,
    ) -> Result<Principal, TokenError> {
        let (keys, header) = self.issuer_of(token)?;
        if keys.issuer.url != issuer {
            return Err(TokenError::UnknownIssuer(keys.issuer.url.clone()));
        }
        let key = keys.key(header.kid.as_deref(), true).await?;
        let (principal, claims) = check(&keys.issuer, token, header.alg, &key, client_id)?;
        // OpenID Connect Core §3.1.3.7: with several audiences, `azp` must name this client;
        // whenever it is present it must.
        let several = claims
            .get("aud")
            .and_then(Value::as_array)
            .is_some_and(|a| a.len() > 1);
        match claims.get("azp").and_then(Value::as_str) {
            Some(azp) if azp != client_id => return Err(TokenError::Audience(client_id.into())),
            None if several => return Err(TokenError::MissingClaim("azp".into())),
            _ => {}
        }
        let sent = claims.get("nonce").and_then(Value::as_str).unwrap_or("");
        if nonce.is_empty() || !bool_eq(sent.as_bytes(), nonce.as_bytes()) {
            return Err(TokenError::Nonce);
        }
        Ok(principal)
    }

    /// The HTTP client the issuers are reached with (its connections kept).
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// The issuer's metadata (discovered when first asked).
    pub async fn metadata(&self, issuer: &str) -> Result<Metadata, FlowError> {
        let keys = self
            .issuers
            .iter()
            .find(|i| i.issuer.url == issuer)
            .ok_or_else(|| FlowError::Metadata(format!("{issuer:?} is not an [[issuer]]")))?;
        keys.metadata().await.map_err(FlowError::Metadata)
    }

    /// Asks the introspecting issuer (there is at most one: an opaque token names no issuer,
    /// and asking several would hand one provider another's tokens) about an opaque token. A
    /// token it refused is refused from memory for [`verified::REFUSED_FOR`]; when
    /// [`MAX_INTROSPECTIONS`] questions are already in flight the token is not asked about
    /// ([`TokenError::Busy`]) rather than queued behind a flood.
    async fn introspect(
        &self,
        token: &str,
        resource: &str,
    ) -> Result<(Principal, u64), TokenError> {
        let Some((keys, introspection)) = self
            .issuers
            .iter()
            .find_map(|i| Some((i, i.issuer.introspection.as_ref()?)))
        else {
            return Err(TokenError::Malformed(
                "not a JWT, and no [[issuer]] introspects opaque tokens".into(),
            ));
        };
        let issuer = &keys.issuer;
        if self.verified.was_refused(token, resource) {
            return Err(TokenError::Inactive(issuer.url.clone()));
        }
        let Ok(_turn) = self.asking.try_acquire() else {
            return Err(TokenError::Busy(issuer.url.clone()));
        };
        let failed = |reason: String| TokenError::IntrospectionFailed {
            issuer: issuer.url.clone(),
            reason,
        };
        let metadata = keys.metadata().await.map_err(failed)?;
        let secret = self.secrets.get(&issuer.url).map(String::as_str);
        let provider = Provider::from_metadata(
            &issuer.url,
            metadata,
            &introspection.client_id,
            secret,
            self.http.clone(),
        )
        .map_err(|e| failed(e.to_string()))?;
        let answer = provider
            .introspect(token)
            .await
            .map_err(|e| failed(e.to_string()))?;
        introspected(issuer, &answer, resource).inspect_err(|_| {
            self.verified.refuse(token, resource);
        })
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
            .issuers
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

fn bool_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    bool::from(a.ct_eq(b))
}

/// Until when a verified JWT is accepted: its `exp` plus the issuer's leeway.
fn until(issuer: &Issuer, claims: &Value) -> u64 {
    claims.get("exp").and_then(Value::as_u64).unwrap_or(0) + issuer.leeway.as_secs()
}

/// An introspection's answer: active, of this issuer, for `resource`, not expired; with the
/// time it may be believed until (the issuer's `introspection_cache`, at most the token's end).
fn introspected(
    issuer: &Issuer,
    answer: &client::Introspected,
    resource: &str,
) -> Result<(Principal, u64), TokenError> {
    use oauth2::TokenIntrospectionResponse;
    let now = verified::now_secs();
    let exp = answer
        .exp()
        .map(|t| u64::try_from(t.timestamp()).unwrap_or(0));
    if !answer.active() || exp.is_some_and(|e| e + issuer.leeway.as_secs() <= now) {
        return Err(TokenError::Inactive(issuer.url.clone()));
    }
    // A refresh token (or any other kind) the provider calls active is still no access token;
    // a DPoP-bound one needs a proof Postern does not check.
    match answer.token_type().map(|t| t.as_ref().to_ascii_lowercase()) {
        None => {}
        Some(t) if t == "bearer" => {}
        Some(t) if t == "dpop" => return Err(TokenError::Bound),
        Some(t) => return Err(TokenError::NotAnAccessToken(t)),
    }
    if answer.extra_fields().other.contains_key("cnf") {
        return Err(TokenError::Bound);
    }
    if answer
        .iss()
        .is_some_and(|i| i.trim_end_matches('/') != issuer.url)
    {
        return Err(TokenError::Inactive(issuer.url.clone()));
    }
    // RFC 7662 makes `aud` optional; a token that names no audience could be anyone's.
    let audience = issuer.audience.as_deref().unwrap_or(resource);
    if !answer
        .aud()
        .is_some_and(|a| a.iter().any(|a| a == audience))
    {
        return Err(TokenError::Audience(audience.to_string()));
    }
    let mut claims = Value::Object(answer.extra_fields().other.clone());
    // A client-credentials token may name no subject (RFC 7662 makes `sub` optional): its
    // subject is the client, as RFC 9068 has it for JWTs.
    let subject = answer.sub().or(answer.client_id().map(|c| c.as_str()));
    claims["sub"] = subject.map(Value::from).unwrap_or(Value::Null);
    if let Some(c) = answer.client_id() {
        claims["client_id"] = Value::from(c.as_str());
    }
    if let Some(scopes) = answer.scopes() {
        let words: Vec<&str> = scopes.iter().map(|s| s.as_str()).collect();
        claims["scope"] = Value::from(words.join(" "));
    }
    if claims.get("sub").and_then(Value::as_str).is_none() {
        return Err(TokenError::MissingClaim("sub".into()));
    }
    let cached = now + issuer.introspection_cache.as_secs();
    Ok((
        principal(issuer, &claims),
        exp.map_or(cached, |e| e.min(cached)),
    ))
}

/// Checks the signature and the claims (for `audience`), and reads the principal.
fn check(
    issuer: &Issuer,
    token: &str,
    alg: Algorithm,
    key: &jsonwebtoken::DecodingKey,
    audience: &str,
) -> Result<(Principal, Value), TokenError> {
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
    if data.claims.get("cnf").is_some() {
        return Err(TokenError::Bound);
    }
    Ok((principal(issuer, &data.claims), data.claims))
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
