//! One issuer's keys: its metadata discovered once, its key set fetched when needed — at most
//! once per `jwks_refresh` — and kept in use while the provider cannot be reached.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::DecodingKey;
use postern_core::config::Issuer;
use serde_json::Value;
use tokio::time::Instant;

use super::TokenError;

/// How long one fetch (metadata or key set) may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

pub(super) fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(FETCH_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap_or_default()
}

/// An issuer and what is known of its keys.
pub(crate) struct IssuerKeys {
    pub(crate) issuer: Issuer,
    http: reqwest::Client,
    held: RwLock<Held>,
    /// One fetch at a time; whoever waited finds the keys it brought.
    fetching: tokio::sync::Mutex<()>,
}

/// What an issuer's metadata says (OpenID Connect discovery or RFC 8414).
#[derive(Clone, Debug, Default)]
pub struct Metadata {
    pub jwks_uri: String,
    pub authorization_endpoint: Option<String>,
    pub token_endpoint: Option<String>,
    pub device_authorization_endpoint: Option<String>,
    pub introspection_endpoint: Option<String>,
    pub end_session_endpoint: Option<String>,
}

#[derive(Default)]
struct Held {
    metadata: Option<Metadata>,
    keys: HashMap<String, Arc<DecodingKey>>,
    /// The keys without a `kid` (used when a token names none and there is exactly one).
    unnamed: Vec<Arc<DecodingKey>>,
    /// When a fetch a token asked for was last tried (the rate limit's clock).
    tried: Option<Instant>,
    /// When the keys held were fetched (a set older than [`IssuerKeys::max_age`] is fetched
    /// again before it is used, so a key the issuer withdrew stops being trusted).
    fetched: Option<Instant>,
    /// Why the last fetch failed, if it did.
    failure: Option<String>,
}

impl IssuerKeys {
    pub(crate) fn new(issuer: Issuer, http: reqwest::Client) -> IssuerKeys {
        IssuerKeys {
            issuer,
            http,
            held: RwLock::new(Held::default()),
            fetching: tokio::sync::Mutex::new(()),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Held> {
        self.held.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The key `kid` names among those held.
    pub(crate) fn cached_key(&self, kid: Option<&str>) -> Result<Arc<DecodingKey>, TokenError> {
        let held = self.read();
        let found = match kid {
            Some(kid) => held.keys.get(kid).cloned(),
            None if held.unnamed.len() + held.keys.len() == 1 => {
                held.unnamed.first().or(held.keys.values().next()).cloned()
            }
            None => None,
        };
        found.ok_or_else(|| match &held.failure {
            Some(reason) => TokenError::KeysUnavailable {
                issuer: self.issuer.url.clone(),
                reason: reason.clone(),
            },
            _ => TokenError::UnknownKey {
                kid: kid.unwrap_or("(none)").chars().take(100).collect(),
                issuer: self.issuer.url.clone(),
            },
        })
    }

    /// The key `kid` names, fetching the key set first when it is not held, or when the set
    /// held is older than [`IssuerKeys::max_age`] — either at most once per `jwks_refresh`.
    pub(crate) async fn key(
        &self,
        kid: Option<&str>,
        may_fetch: bool,
    ) -> Result<Arc<DecodingKey>, TokenError> {
        let held = self.cached_key(kid);
        if !may_fetch || (held.is_ok() && !self.stale()) {
            return held;
        }
        let _one = self.fetching.lock().await;
        // Another request may have fetched while this one waited.
        let held = self.cached_key(kid);
        if (held.is_err() || self.stale()) && self.may_fetch_now() {
            if let Err(reason) = self.refresh(true).await {
                tracing::warn!(issuer = %self.issuer.url, %reason, "an issuer's key set could not be fetched; the keys held stay in use");
            }
        }
        self.cached_key(kid)
    }

    /// How old a held key set may be: five `jwks_refresh`, at most five minutes.
    fn max_age(&self) -> Duration {
        (self.issuer.jwks_refresh * 5).min(postern_core::config::LONGEST_BELIEF)
    }

    fn stale(&self) -> bool {
        self.read()
            .fetched
            .is_none_or(|at| at.elapsed() >= self.max_age())
    }

    fn may_fetch_now(&self) -> bool {
        self.read()
            .tried
            .is_none_or(|at| at.elapsed() >= self.issuer.jwks_refresh)
    }

    /// Discovers the metadata (once) and fetches the key set; on failure the keys held stay.
    /// `asked`: a token asked for it, so it counts against `jwks_refresh` (a fetch at start-up
    /// does not: the first token after a provider that was down at start-up fetches at once).
    pub(crate) async fn refresh(&self, asked: bool) -> Result<(), String> {
        let fetched = self.fetch().await;
        let mut held = self.held.write().unwrap_or_else(|e| e.into_inner());
        if asked {
            held.tried = Some(Instant::now());
        }
        match fetched {
            Ok((metadata, keys, unnamed)) => {
                held.metadata = Some(metadata);
                held.keys = keys;
                held.unnamed = unnamed;
                held.tried = Some(Instant::now());
                held.fetched = Some(Instant::now());
                held.failure = None;
                Ok(())
            }
            Err(reason) => {
                held.failure = Some(reason.clone());
                Err(reason)
            }
        }
    }

    #[allow(clippy::type_complexity)]
    async fn fetch(
        &self,
    ) -> Result<
        (
            Metadata,
            HashMap<String, Arc<DecodingKey>>,
            Vec<Arc<DecodingKey>>,
        ),
        String,
    > {
        let known = self.read().metadata.clone();
        let metadata = match known {
            Some(m) => m,
            None => self.discover().await?,
        };
        let jwks_uri = &metadata.jwks_uri;
        let set: JwkSet = self.get_json(jwks_uri).await.and_then(|v| {
            serde_json::from_value(v).map_err(|e| format!("{jwks_uri}: not a JWK set ({e})"))
        })?;
        let (mut keys, mut unnamed) = (HashMap::new(), Vec::new());
        for jwk in &set.keys {
            // A key of a type or use jsonwebtoken cannot verify with is skipped, not fatal.
            let Ok(key) = DecodingKey::from_jwk(jwk) else {
                continue;
            };
            match &jwk.common.key_id {
                Some(kid) => {
                    keys.insert(kid.clone(), Arc::new(key));
                }
                None => unnamed.push(Arc::new(key)),
            }
        }
        Ok((metadata, keys, unnamed))
    }

    /// The issuer's metadata, discovered now if it has not been (at most once per
    /// `jwks_refresh` while discovery fails).
    pub(crate) async fn metadata(&self) -> Result<Metadata, String> {
        if let Some(m) = self.read().metadata.clone() {
            return Ok(m);
        }
        let _one = self.fetching.lock().await;
        if self.read().metadata.is_none() && self.may_fetch_now() {
            let _ = self.refresh(true).await;
        }
        let held = self.read();
        held.metadata.clone().ok_or_else(|| {
            held.failure
                .clone()
                .unwrap_or_else(|| format!("{}: no metadata yet", self.issuer.url))
        })
    }

    async fn discover(&self) -> Result<Metadata, String> {
        discover(&self.http, &self.issuer.url).await
    }

    async fn get_json(&self, url: &str) -> Result<Value, String> {
        get_json(&self.http, url).await
    }
}

/// An issuer's metadata: OpenID Connect discovery, else RFC 8414. It must name this issuer
/// exactly (a provider that answers for another is not believed).
pub(crate) async fn discover(http: &reqwest::Client, url: &str) -> Result<Metadata, String> {
    let oidc = format!(
        "{}/.well-known/openid-configuration",
        url.trim_end_matches('/')
    );
    let metadata = match get_json(http, &oidc).await {
        Ok(m) => m,
        Err(first) => get_json(http, &rfc8414(url))
            .await
            .map_err(|second| format!("{first}; {second}"))?,
    };
    if metadata.get("issuer").and_then(Value::as_str) != Some(url) {
        return Err(format!("the metadata under {url} names another issuer"));
    }
    let text = |name: &str| {
        metadata
            .get(name)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    Ok(Metadata {
        jwks_uri: text("jwks_uri")
            .ok_or_else(|| format!("the metadata of {url} has no jwks_uri"))?,
        authorization_endpoint: text("authorization_endpoint"),
        token_endpoint: text("token_endpoint"),
        device_authorization_endpoint: text("device_authorization_endpoint"),
        introspection_endpoint: text("introspection_endpoint"),
        end_session_endpoint: text("end_session_endpoint"),
    })
}

pub(crate) async fn get_json(http: &reqwest::Client, url: &str) -> Result<Value, String> {
    let response = http
        .get(url)
        .send()
        .await
        .map_err(|e| format!("{url}: {}", without_url(&e)))?;
    if !response.status().is_success() {
        return Err(format!("{url}: HTTP {}", response.status().as_u16()));
    }
    response
        .json()
        .await
        .map_err(|e| format!("{url}: not JSON ({})", without_url(&e)))
}

/// RFC 8414 §3: the well-known segment goes between the host and the issuer's path.
fn rfc8414(issuer: &str) -> String {
    let issuer = issuer.trim_end_matches('/');
    let (scheme, rest) = issuer.split_once("://").unwrap_or(("https", issuer));
    let (host, path) = rest.split_once('/').map_or((rest, ""), |(h, p)| (h, p));
    let path = if path.is_empty() {
        String::new()
    } else {
        format!("/{path}")
    };
    format!("{scheme}://{host}/.well-known/oauth-authorization-server{path}")
}

pub(crate) fn without_url(e: &reqwest::Error) -> String {
    let e = e.to_string();
    e.split(" for url").next().unwrap_or(&e).to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc8414_puts_the_well_known_segment_before_the_path() {
        assert_eq!(
            super::rfc8414("https://id.example/realms/acme"),
            "https://id.example/.well-known/oauth-authorization-server/realms/acme"
        );
        assert_eq!(
            super::rfc8414("https://id.example"),
            "https://id.example/.well-known/oauth-authorization-server"
        );
    }
}
