//! Postern as an OAuth client of a provider, with the `oauth2` crate: the console's sign-in
//! (authorization code with PKCE), `postern login`'s device authorization grant (RFC 8628),
//! `postern connect`'s client credentials and authorization code on a loopback redirect
//! (RFC 8252), refreshes, and the resource server's introspection of opaque tokens (RFC 7662).
//! Every request for a resource server's token names that resource (RFC 8707); the console's
//! sign-in asks for an ID token only, and names none.
//!
//! The HTTP exchange is the gateway's own reqwest client (no redirects followed: an OAuth
//! endpoint that redirects is refused, not followed with credentials).

use std::time::Duration;

use oauth2::basic::{BasicErrorResponse, BasicRevocationErrorResponse, BasicTokenType};
use oauth2::{
    AuthUrl, AuthorizationCode, ClientId, ClientSecret, CsrfToken, DeviceAuthorizationUrl,
    EndpointMaybeSet, EndpointNotSet, ExtraTokenFields, IntrospectionUrl, PkceCodeChallenge,
    PkceCodeVerifier, RedirectUrl, RefreshToken, Scope, StandardRevocableToken,
    StandardTokenIntrospectionResponse, StandardTokenResponse, TokenResponse, TokenUrl,
};
use serde::{Deserialize, Serialize};

use postern_core::config::provider_url;

use crate::keys::{self, Metadata};
use crate::verified::now_secs;

/// Why a flow did not give a token. Never carries a token or a secret.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum FlowError {
    #[error("the provider's metadata: {0}")]
    Metadata(String),
    #[error("the provider has no {0} (its metadata names none)")]
    NoEndpoint(&'static str),
    #[error("the provider refused: {0}")]
    Refused(String),
    #[error("the provider could not be reached: {0}")]
    Unreachable(String),
    #[error("{0}")]
    Invalid(String),
}

/// What a token request gave. Its `Debug` shows no token.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Tokens {
    pub access_token: String,
    pub refresh_token: Option<String>,
    /// Unix seconds; `None`: the provider did not say.
    pub expires_at: Option<u64>,
    pub id_token: Option<String>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("expires_at", &self.expires_at)
            .field("refresh_token", &self.refresh_token.is_some())
            .finish_non_exhaustive()
    }
}

impl Tokens {
    /// Whether the access token is still good for `margin` more.
    pub fn fresh_for(&self, margin: Duration) -> bool {
        self.expires_at
            .is_none_or(|at| at > now_secs() + margin.as_secs())
    }
}

/// The extra fields of a token response (OpenID Connect's `id_token`) and of an introspection
/// (the claims a provider adds, such as groups). Its `Debug` shows no ID token.
#[derive(Clone, Serialize, Deserialize)]
pub struct Extra {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_token: Option<String>,
    #[serde(flatten)]
    pub other: serde_json::Map<String, serde_json::Value>,
}
impl ExtraTokenFields for Extra {}

impl std::fmt::Debug for Extra {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Extra")
            .field("id_token", &self.id_token.is_some())
            .field("claims", &self.other.keys().collect::<Vec<_>>())
            .finish()
    }
}

pub(crate) type Introspected = StandardTokenIntrospectionResponse<Extra, BasicTokenType>;

type OAuthClient = oauth2::Client<
    BasicErrorResponse,
    StandardTokenResponse<Extra, BasicTokenType>,
    Introspected,
    StandardRevocableToken,
    BasicRevocationErrorResponse,
    EndpointMaybeSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
    EndpointNotSet,
    EndpointMaybeSet,
>;

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct HttpError(String);

/// One HTTP exchange of an OAuth request over reqwest.
async fn exchange(
    http: reqwest::Client,
    request: oauth2::HttpRequest,
) -> Result<oauth2::HttpResponse, HttpError> {
    let (parts, body) = request.into_parts();
    let response = http
        .request(parts.method, parts.uri.to_string())
        .headers(parts.headers)
        .body(body)
        .send()
        .await
        .map_err(|e| HttpError(keys::without_url(&e)))?;
    let (status, headers) = (response.status(), response.headers().clone());
    let body = response
        .bytes()
        .await
        .map_err(|e| HttpError(keys::without_url(&e)))?;
    let mut out = oauth2::HttpResponse::new(body.to_vec());
    *out.status_mut() = status;
    *out.headers_mut() = headers;
    Ok(out)
}

fn refused<RE: oauth2::ErrorResponse + 'static>(
    e: oauth2::RequestTokenError<HttpError, RE>,
) -> FlowError {
    match e {
        oauth2::RequestTokenError::ServerResponse(r) => FlowError::Refused(r.to_string()),
        oauth2::RequestTokenError::Request(r) => FlowError::Unreachable(r.0),
        oauth2::RequestTokenError::Parse(e, _) => {
            FlowError::Invalid(format!("the provider's answer is not understood ({e})"))
        }
        oauth2::RequestTokenError::Other(o) => FlowError::Invalid(o),
    }
}

fn tokens(r: &StandardTokenResponse<Extra, BasicTokenType>) -> Tokens {
    Tokens {
        access_token: r.access_token().secret().clone(),
        refresh_token: r.refresh_token().map(|t| t.secret().clone()),
        expires_at: r.expires_in().map(|d| now_secs() + d.as_secs()),
        id_token: r.extra_fields().id_token.clone(),
    }
}

/// An authorization request on its way: what the callback must match and prove.
#[derive(Serialize, Deserialize)]
pub struct Pending {
    pub state: String,
    pub nonce: String,
    pub verifier: String,
}

/// A provider, as one client of it.
pub struct Provider {
    pub issuer: String,
    pub metadata: Metadata,
    client: OAuthClient,
    http: reqwest::Client,
}

impl Provider {
    /// Discovers `issuer`'s metadata, as client `client_id` (confidential with a secret).
    pub async fn discover(
        issuer: &str,
        client_id: &str,
        secret: Option<&str>,
    ) -> Result<Provider, FlowError> {
        let http = keys::http_client();
        let metadata = keys::discover(&http, issuer)
            .await
            .map_err(FlowError::Metadata)?;
        Provider::from_metadata(issuer, metadata, client_id, secret, http)
    }

    /// As client `client_id` of an issuer whose metadata is known, over `http` (a client whose
    /// connections are kept: the gateway's issuers share one).
    pub fn from_metadata(
        issuer: &str,
        metadata: Metadata,
        client_id: &str,
        secret: Option<&str>,
        http: reqwest::Client,
    ) -> Result<Provider, FlowError> {
        let mut client = oauth2::Client::new(ClientId::new(client_id.to_string()))
            .set_auth_uri_option(endpoint(
                "authorization endpoint",
                &metadata.authorization_endpoint,
                AuthUrl::new,
            )?)
            .set_token_uri_option(endpoint(
                "token endpoint",
                &metadata.token_endpoint,
                TokenUrl::new,
            )?)
            .set_device_authorization_url_option(endpoint(
                "device endpoint",
                &metadata.device_authorization_endpoint,
                DeviceAuthorizationUrl::new,
            )?)
            .set_introspection_url_option(endpoint(
                "introspection endpoint",
                &metadata.introspection_endpoint,
                IntrospectionUrl::new,
            )?);
        if let Some(secret) = secret {
            client = client.set_client_secret(ClientSecret::new(secret.to_string()));
        }
        Ok(Provider {
            issuer: issuer.to_string(),
            metadata,
            client,
            http,
        })
    }

    fn http(&self) -> impl Fn(oauth2::HttpRequest) -> ExchangeFuture + '_ {
        move |request| Box::pin(exchange(self.http.clone(), request))
    }

    /// Client credentials for `resource`.
    pub async fn client_credentials(
        &self,
        scopes: &[String],
        resource: &str,
    ) -> Result<Tokens, FlowError> {
        let request = self
            .client
            .exchange_client_credentials()
            .map_err(|_| FlowError::NoEndpoint("token endpoint"))?
            .add_scopes(scopes.iter().cloned().map(Scope::new))
            .add_extra_param("resource", resource);
        let r = request.request_async(&self.http()).await.map_err(refused)?;
        Ok(tokens(&r))
    }

    /// A new authorization request to send a person's browser to: PKCE (S256), `state`, and
    /// with `openid` among the scopes a `nonce`. `resource`: RFC 8707's parameter, when the
    /// token is for a resource server.
    pub fn authorize(
        &self,
        redirect: &str,
        scopes: &[String],
        resource: Option<&str>,
    ) -> Result<(String, Pending), FlowError> {
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let nonce = CsrfToken::new_random();
        let redirect = RedirectUrl::new(redirect.to_string())
            .map_err(|e| FlowError::Invalid(e.to_string()))?;
        let mut request = self
            .client
            .authorize_url(CsrfToken::new_random)
            .map_err(|_| FlowError::NoEndpoint("authorization endpoint"))?
            .set_redirect_uri(std::borrow::Cow::Owned(redirect))
            .set_pkce_challenge(challenge)
            .add_scopes(scopes.iter().cloned().map(Scope::new));
        if scopes.iter().any(|s| s == "openid") {
            request = request.add_extra_param("nonce", nonce.secret().clone());
        }
        if let Some(resource) = resource {
            request = request.add_extra_param("resource", resource.to_string());
        }
        let (url, state) = request.url();
        Ok((
            url.to_string(),
            Pending {
                state: state.secret().clone(),
                nonce: nonce.secret().clone(),
                verifier: verifier.secret().clone(),
            },
        ))
    }

    /// The code a redirect brought, exchanged with the PKCE verifier of its request.
    pub async fn exchange_code(
        &self,
        code: &str,
        redirect: &str,
        verifier: &str,
        resource: Option<&str>,
    ) -> Result<Tokens, FlowError> {
        let redirect = RedirectUrl::new(redirect.to_string())
            .map_err(|e| FlowError::Invalid(e.to_string()))?;
        let mut request = self
            .client
            .exchange_code(AuthorizationCode::new(code.to_string()))
            .map_err(|_| FlowError::NoEndpoint("token endpoint"))?
            .set_redirect_uri(std::borrow::Cow::Owned(redirect))
            .set_pkce_verifier(PkceCodeVerifier::new(verifier.to_string()));
        if let Some(resource) = resource {
            request = request.add_extra_param("resource", resource.to_string());
        }
        let r = request.request_async(&self.http()).await.map_err(refused)?;
        Ok(tokens(&r))
    }

    /// A new access token from a refresh token (which the provider may rotate).
    pub async fn refresh(&self, refresh: &str, resource: &str) -> Result<Tokens, FlowError> {
        let token = RefreshToken::new(refresh.to_string());
        let r = self
            .client
            .exchange_refresh_token(&token)
            .map_err(|_| FlowError::NoEndpoint("token endpoint"))?
            .add_extra_param("resource", resource)
            .request_async(&self.http())
            .await
            .map_err(refused)?;
        let mut got = tokens(&r);
        got.refresh_token = got.refresh_token.or(Some(refresh.to_string()));
        Ok(got)
    }

    /// The device authorization grant: `show` gets what the person must open and type; then
    /// the token endpoint is polled at the provider's interval until they approve, refuse, or
    /// the code expires.
    pub async fn device(
        &self,
        scopes: &[String],
        resource: &str,
        show: impl FnOnce(&str, &str, Option<&str>),
    ) -> Result<Tokens, FlowError> {
        let details: oauth2::StandardDeviceAuthorizationResponse = self
            .client
            .exchange_device_code()
            .map_err(|_| FlowError::NoEndpoint("device authorization endpoint"))?
            .add_scopes(scopes.iter().cloned().map(Scope::new))
            .add_extra_param("resource", resource)
            .request_async(&self.http())
            .await
            .map_err(refused)?;
        show(
            details.verification_uri().as_str(),
            details.user_code().secret(),
            details
                .verification_uri_complete()
                .map(|u| u.secret().as_str()),
        );
        let r = self
            .client
            .exchange_device_access_token(&details)
            .map_err(|_| FlowError::NoEndpoint("token endpoint"))?
            .add_extra_param("resource", resource)
            .request_async(&self.http(), tokio::time::sleep, None)
            .await
            .map_err(refused)?;
        Ok(tokens(&r))
    }

    /// RFC 7662: what the provider says of `token` (as this client, with its secret).
    pub(crate) async fn introspect(&self, token: &str) -> Result<Introspected, FlowError> {
        let token = oauth2::AccessToken::new(token.to_string());
        self.client
            .introspect(&token)
            .map_err(|_| FlowError::NoEndpoint("introspection endpoint"))?
            .request_async(&self.http())
            .await
            .map_err(refused)
    }
}

/// An endpoint the metadata names, if it does: https, or http on loopback.
fn endpoint<T>(
    what: &str,
    url: &Option<String>,
    make: fn(String) -> Result<T, oauth2::url::ParseError>,
) -> Result<Option<T>, FlowError> {
    let Some(url) = url else {
        return Ok(None);
    };
    if !provider_url(url) {
        return Err(FlowError::Metadata(format!(
            "its {what} {url:?} is neither https nor loopback"
        )));
    }
    make(url.clone())
        .map(Some)
        .map_err(|e| FlowError::Metadata(format!("its {what}: {e}")))
}

type ExchangeFuture = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<oauth2::HttpResponse, HttpError>> + Send>,
>;
