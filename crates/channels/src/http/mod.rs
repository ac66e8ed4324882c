//! The HTTP channel: one request per dispatch, no retries, no redirects, no proxy, and an
//! honest [`HttpOutcome`]. hyper's client directly (plain or over rustls: `client`, `tls`);
//! how a failure is classified is in `classify`.
//!
//! Timing: the connector (DNS, TCP, TLS handshake) is bounded by `connect_timeout`; a failure
//! there is [`HttpOutcome::NotSent`]. The whole exchange — connect, sending, waiting for the status
//! line, reading the body — is bounded by `connect_timeout + response_timeout`, so the target
//! gets at least `response_timeout` to answer once connected. When that deadline passes the
//! connector has necessarily finished (its own, earlier deadline would have ended it), so the
//! request may have been received: [`HttpOutcome::Unknown`], never `NotSent`.

mod classify;
mod client;
mod outcome;
mod tls;
mod tool;
mod url;

use std::sync::Arc;
use std::time::Duration;

use ::http::header::{HeaderName, HeaderValue, CONTENT_TYPE, USER_AGENT};
use ::http::{Method, Request, Uri};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use tokio::time::{timeout_at, Instant};

pub use crate::secret::{
    basic_token, lookahead, percent_encode, redact_answer, secret_forms, Credential, Secret,
    REDACTED,
};
pub use client::{ConnectionReuse, POOL_IDLE_TIMEOUT};
pub use outcome::{AnswerVerdict, HttpAnswer, HttpOutcome, OutcomeRules};
pub use tls::{install_default_provider, ClientIdentity, TlsProfile, TrustedRoots};
pub use tool::HttpTool;
pub use url::{check_template, render_url, render_url_for_record, EXECUTION_ID_PLACEHOLDER};

/// One request to send, fully rendered.
#[derive(Clone, Debug)]
pub struct HttpDispatch {
    pub method: String,
    /// Already rendered (see [`render_url`]): `http://` or `https://`.
    pub url: String,
    /// JSON bytes; sent with `content-type: application/json`.
    pub body: Option<Vec<u8>>,
    pub credential: Option<Credential>,
    /// Whom an `https://` request trusts and which client certificate it shows; `None` is
    /// [`TlsProfile::webpki`] (the webpki roots, no client certificate).
    pub tls: Option<Arc<TlsProfile>>,
    /// Secrets of the call itself (its `secret_fields` values): sent as the request says, and
    /// redacted, like the credential, in every form from what the target answers.
    pub also_redact: Vec<Secret>,
    /// (header name, execution id): sent as `<name>: <execution id>` when present.
    pub idempotency: Option<(String, String)>,
    /// Sent as the W3C `traceparent` header when present (and well formed).
    pub traceparent: Option<String>,
    pub connect_timeout: Duration,
    pub response_timeout: Duration,
    pub max_response_bytes: usize,
    pub outcome_rules: OutcomeRules,
}

impl HttpDispatch {
    /// A request with no body, credential or idempotency key, the webpki roots, the contract
    /// defaults for the timeouts (5 s to connect, 30 s to answer), a 1 MiB response cap and
    /// the default rules.
    pub fn new(method: impl Into<String>, url: impl Into<String>) -> Self {
        HttpDispatch {
            method: method.into(),
            url: url.into(),
            body: None,
            credential: None,
            tls: None,
            also_redact: Vec::new(),
            idempotency: None,
            traceparent: None,
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(30),
            max_response_bytes: 1 << 20,
            outcome_rules: OutcomeRules::default(),
        }
    }
}

/// A boxed, sendable future (the sender trait is used as a trait object).
pub type Sending<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = HttpOutcome> + Send + 'a>>;

/// What sends the gateway's rendered HTTP requests: [`HttpChannel`] in production; the
/// pipeline's model-based tests put a simulated target here, so every fault (refused, cut after
/// sending, no answer, crash) can be interleaved with every retry. An implementation must keep
/// the channel's promise: [`HttpOutcome::NotSent`] only when nothing can have reached the target.
pub trait HttpSender: Send + Sync {
    /// Sends an action's request once.
    fn send(&self, req: HttpDispatch) -> Sending<'_>;
    /// Sends a read (`status_query`, `precondition`) that changes nothing.
    fn read(&self, req: HttpDispatch) -> Sending<'_>;
}

impl HttpSender for HttpChannel {
    fn send(&self, req: HttpDispatch) -> Sending<'_> {
        Box::pin(self.dispatch(req))
    }

    fn read(&self, req: HttpDispatch) -> Sending<'_> {
        Box::pin(self.probe(req))
    }
}

/// The HTTP channel. Cheap to share: it keeps one client (and connection pool) per connect
/// timeout and TLS profile, and reuses it.
#[derive(Debug)]
pub struct HttpChannel {
    clients: client::Clients,
}

impl Default for HttpChannel {
    fn default() -> Self {
        Self::new()
    }
}

impl HttpChannel {
    /// A channel that reuses idle connections ([`ConnectionReuse::Pooled`]).
    pub fn new() -> Self {
        Self::with_reuse(ConnectionReuse::Pooled)
    }

    /// A channel with the given connection reuse.
    pub fn with_reuse(reuse: ConnectionReuse) -> Self {
        HttpChannel {
            clients: client::Clients::new(reuse),
        }
    }

    /// Sends `req` once and classifies what happened.
    pub async fn dispatch(&self, req: HttpDispatch) -> HttpOutcome {
        let start = Instant::now();
        let mut needles = req
            .credential
            .as_ref()
            .map(Credential::redaction_needles)
            .unwrap_or_default();
        for secret in &req.also_redact {
            needles.extend(crate::secret::secret_forms(secret.expose()));
        }
        let needles = crate::secret::sorted(needles);
        let (request, host) = match build_request(&req) {
            Ok(built) => built,
            Err(reason) => return HttpOutcome::NotSent { reason },
        };
        let tls = req.tls.clone().unwrap_or_else(TlsProfile::webpki);
        let client = self.clients.get(req.connect_timeout, &tls);
        let budget = req.connect_timeout.saturating_add(req.response_timeout);
        let deadline = start
            .checked_add(budget)
            .unwrap_or_else(|| start + Duration::from_secs(365 * 24 * 3600));

        let response = match timeout_at(deadline, client.request(request)).await {
            Err(_) => {
                return HttpOutcome::Unknown {
                    reason: format!("connected, but no answer within {budget:?}"),
                }
            }
            Ok(Err(e)) => return classify::send_error(&host, &e),
            Ok(Ok(response)) => response,
        };
        read_answer(response, &req, &needles, deadline).await
    }

    /// The same as [`dispatch`](Self::dispatch); the entry point for `status_query` and
    /// `precondition` reads, so callers say which kind of request they send.
    pub async fn probe(&self, req: HttpDispatch) -> HttpOutcome {
        self.dispatch(req).await
    }
}

/// The target's answer: its status, headers of interest and body (capped), with every needle
/// redacted. Reading the body ends at `deadline`; the status stands either way.
async fn read_answer(
    response: ::http::Response<hyper::body::Incoming>,
    req: &HttpDispatch,
    needles: &[Vec<u8>],
    deadline: Instant,
) -> HttpOutcome {
    let status = response.status().as_u16();
    let idempotency_header = req
        .idempotency
        .as_ref()
        .map(|(n, _)| n.to_ascii_lowercase());
    let headers = response
        .headers()
        .iter()
        .filter(|(name, _)| {
            outcome::header_of_interest(name.as_str())
                || idempotency_header.as_deref() == Some(name.as_str())
        })
        .map(|(name, value)| {
            let value = String::from_utf8_lossy(value.as_bytes());
            (
                name.to_string(),
                crate::secret::redact_text(&value, needles),
            )
        })
        .collect();

    // Keep enough beyond the cap that a secret starting before the cap is seen whole, in any
    // of its forms and behind any escapes: the answer is redacted whole, then cut.
    let keep = req
        .max_response_bytes
        .saturating_add(crate::secret::lookahead(needles));
    let mut body = response.into_body();
    let mut stored = Vec::new();
    let mut size: u64 = 0;
    let mut body_error = None;
    loop {
        match timeout_at(deadline, body.frame()).await {
            Err(_) => {
                body_error = Some("timed out reading the body".to_string());
                break;
            }
            Ok(Some(Err(e))) => {
                body_error = Some(format!("reading the body: {}", classify::error_chain(&e)));
                break;
            }
            Ok(None) => break,
            Ok(Some(Ok(frame))) => {
                let Ok(chunk) = frame.into_data() else {
                    continue; // trailers
                };
                size += chunk.len() as u64;
                let room = keep.saturating_sub(stored.len());
                stored.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
        }
    }
    let cap = req.max_response_bytes;
    let whole = body_error.is_none() && stored.len() as u64 == size;
    let body = crate::secret::redact_answer(&stored, cap, needles, whole);
    HttpOutcome::Answered(HttpAnswer {
        status,
        verdict: req.outcome_rules.verdict(status),
        headers,
        body,
        size,
        truncated: size > cap as u64 || body_error.is_some(),
        body_error,
    })
}

/// The request, and the host it goes to (named in TLS failures). Errors describe the URL
/// without quoting it: it may carry rendered arguments.
fn build_request(req: &HttpDispatch) -> Result<(Request<Full<Bytes>>, String), String> {
    let method = Method::from_bytes(req.method.as_bytes())
        .map_err(|_| format!("{:?} is not a valid HTTP method", req.method))?;
    let url = ::url::Url::parse(&req.url).map_err(|e| format!("the url is not valid: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "scheme {:?} is not supported: only http and https",
            url.scheme()
        ));
    }
    let host = url.host_str().unwrap_or_default().to_string();
    let uri: Uri = url
        .as_str()
        .parse()
        .map_err(|e| format!("the url is not valid: {e}"))?;
    let mut builder = Request::builder()
        .method(method)
        .uri(uri)
        .header(USER_AGENT, concat!("postern/", env!("CARGO_PKG_VERSION")));
    if req.body.is_some() {
        builder = builder.header(CONTENT_TYPE, "application/json");
    }
    if let Some((name, value)) = req.credential.as_ref().and_then(Credential::header) {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("credential header name {name:?} is not valid"))?;
        let mut value = HeaderValue::from_str(value.expose())
            .map_err(|_| "the credential is not a valid header value".to_string())?;
        value.set_sensitive(true);
        builder = builder.header(name, value);
    }
    if let Some((name, key)) = &req.idempotency {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("idempotency header name {name:?} is not valid"))?;
        let value = HeaderValue::from_str(key)
            .map_err(|_| format!("idempotency key {key:?} is not a valid header value"))?;
        builder = builder.header(name, value);
    }
    // A malformed one (it came from the client) is dropped, never a reason not to send.
    if let Some(value) = req
        .traceparent
        .as_deref()
        .and_then(|t| HeaderValue::from_str(t).ok())
    {
        builder = builder.header("traceparent", value);
    }
    let body = Full::new(Bytes::from(req.body.clone().unwrap_or_default()));
    let request = builder
        .body(body)
        .map_err(|e| format!("cannot build the request: {e}"))?;
    Ok((request, host))
}
