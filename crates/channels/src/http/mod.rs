//! The HTTP channel: one request per dispatch, no retries, no redirects, no proxy, and an
//! honest [`HttpOutcome`].
//!
//! Timing: the connector (DNS, TCP, TLS) is bounded by `connect_timeout`; a failure there is
//! [`HttpOutcome::NotSent`]. The whole exchange — connect, sending, waiting for the status
//! line, reading the body — is bounded by `connect_timeout + response_timeout`, so the target
//! gets at least `response_timeout` to answer once connected. When that deadline passes the
//! connector has necessarily finished (its own, earlier deadline would have ended it), so the
//! request may have been received: [`HttpOutcome::Unknown`], never `NotSent`.

mod credential;
mod outcome;
mod redact;
mod url;

use std::collections::HashMap;
use std::error::Error as _;
use std::sync::Mutex;
use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue, CONTENT_TYPE, USER_AGENT};
use reqwest::{Client, Method, Url};
use tokio::time::{timeout_at, Instant};

pub use credential::{basic_token, secret_forms, Credential, Secret};
pub use outcome::{AnswerVerdict, HttpAnswer, HttpOutcome, OutcomeRules};
pub use redact::REDACTED;
pub use url::{
    check_template, percent_encode, render_url, render_url_for_record, EXECUTION_ID_PLACEHOLDER,
};

use crate::ChannelError;

/// One request to send, fully rendered.
#[derive(Clone, Debug)]
pub struct HttpDispatch {
    pub method: String,
    /// Already rendered (see [`render_url`]). Only `http://` is supported by this build.
    pub url: String,
    /// JSON bytes; sent with `content-type: application/json`.
    pub body: Option<Vec<u8>>,
    pub credential: Option<Credential>,
    /// Secrets of the call itself (its `secret_fields` values): sent as the request says, and
    /// redacted, like the credential, in every form from what the target answers.
    pub also_redact: Vec<Secret>,
    /// (header name, execution id): sent as `<name>: <execution id>` when present.
    pub idempotency: Option<(String, String)>,
    pub connect_timeout: Duration,
    pub response_timeout: Duration,
    pub max_response_bytes: usize,
    pub outcome_rules: OutcomeRules,
}

impl HttpDispatch {
    /// A request with no body, credential or idempotency key, the contract defaults for the
    /// timeouts (5 s to connect, 30 s to answer), a 1 MiB response cap and the default rules.
    pub fn new(method: impl Into<String>, url: impl Into<String>) -> Self {
        HttpDispatch {
            method: method.into(),
            url: url.into(),
            body: None,
            credential: None,
            also_redact: Vec::new(),
            idempotency: None,
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

/// The HTTP channel. Cheap to share: clients are kept per connect timeout (reqwest sets that
/// timeout per client) and reused.
#[derive(Debug)]
pub struct HttpChannel {
    clients: Mutex<HashMap<Duration, Client>>,
}

const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

impl HttpChannel {
    pub fn new() -> Result<Self, ChannelError> {
        let client = build_client(DEFAULT_CONNECT_TIMEOUT)?;
        Ok(HttpChannel {
            clients: Mutex::new(HashMap::from([(DEFAULT_CONNECT_TIMEOUT, client)])),
        })
    }

    /// Sends `req` once and classifies what happened.
    pub async fn dispatch(&self, req: HttpDispatch) -> HttpOutcome {
        let start = Instant::now();
        let client = match self.client(req.connect_timeout) {
            Ok(client) => client,
            Err(e) => return not_sent(e.to_string()),
        };
        let mut needles = req
            .credential
            .as_ref()
            .map(Credential::redaction_needles)
            .unwrap_or_default();
        for secret in &req.also_redact {
            needles.extend(credential::secret_forms(secret.expose()));
        }
        let needles = credential::sorted(needles);
        let request = match build_request(&client, &req) {
            Ok(request) => request,
            Err(reason) => return not_sent(reason),
        };
        let budget = req.connect_timeout.saturating_add(req.response_timeout);
        let deadline = start
            .checked_add(budget)
            .unwrap_or_else(|| start + Duration::from_secs(365 * 24 * 3600));

        let mut response = match timeout_at(deadline, client.execute(request)).await {
            Err(_) => {
                return HttpOutcome::Unknown {
                    reason: format!("connected, but no answer within {budget:?}"),
                }
            }
            Ok(Err(e)) => return classify_send_error(&e),
            Ok(Ok(response)) => response,
        };

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
                (name.to_string(), redact::redact_text(&value, &needles))
            })
            .collect();

        // Keep enough beyond the cap that a secret starting before the cap is seen whole.
        let longest = needles.first().map_or(0, Vec::len);
        let keep = req
            .max_response_bytes
            .saturating_add(longest.saturating_sub(1));
        let mut stored = Vec::new();
        let mut size: u64 = 0;
        let mut body_error = None;
        loop {
            match timeout_at(deadline, response.chunk()).await {
                Err(_) => {
                    body_error = Some("timed out reading the body".to_string());
                    break;
                }
                Ok(Err(e)) => {
                    body_error = Some(format!("reading the body: {}", error_chain(&e)));
                    break;
                }
                Ok(Ok(None)) => break,
                Ok(Ok(Some(chunk))) => {
                    size += chunk.len() as u64;
                    let room = keep.saturating_sub(stored.len());
                    stored.extend_from_slice(&chunk[..chunk.len().min(room)]);
                }
            }
        }
        let cap = req.max_response_bytes;
        let body = redact::redact(&stored, cap, cap, &needles);
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

    /// The same as [`dispatch`](Self::dispatch); the entry point for `status_query` and
    /// `precondition` reads, so callers say which kind of request they send.
    pub async fn probe(&self, req: HttpDispatch) -> HttpOutcome {
        self.dispatch(req).await
    }

    fn client(&self, connect_timeout: Duration) -> Result<Client, ChannelError> {
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(client) = clients.get(&connect_timeout) {
            return Ok(client.clone());
        }
        let client = build_client(connect_timeout)?;
        clients.insert(connect_timeout, client.clone());
        Ok(client)
    }
}

fn build_client(connect_timeout: Duration) -> Result<Client, ChannelError> {
    Client::builder()
        .connect_timeout(connect_timeout)
        .redirect(reqwest::redirect::Policy::none())
        .retry(reqwest::retry::never())
        .no_proxy()
        .referer(false)
        // A fresh connection for every request: a kept-alive connection that the target
        // closes while the request is being written would turn a failure that could have been
        // NotSent into Unknown.
        .pool_max_idle_per_host(0)
        .build()
        .map_err(|e| ChannelError::Client {
            reason: error_chain(&e),
        })
}

fn build_request(client: &Client, req: &HttpDispatch) -> Result<reqwest::Request, String> {
    let method = Method::from_bytes(req.method.as_bytes())
        .map_err(|_| format!("{:?} is not a valid HTTP method", req.method))?;
    // The URL may carry rendered arguments: errors describe it without quoting it.
    let url = Url::parse(&req.url).map_err(|e| format!("the url is not valid: {e}"))?;
    if url.scheme() != "http" {
        return Err(format!(
            "scheme {:?} is not supported: this build dials plain http only (no TLS backend)",
            url.scheme()
        ));
    }
    let mut builder = client
        .request(method, url)
        .header(USER_AGENT, concat!("postern/", env!("CARGO_PKG_VERSION")));
    if let Some(body) = &req.body {
        builder = builder
            .header(CONTENT_TYPE, "application/json")
            .body(body.clone());
    }
    if let Some(credential) = &req.credential {
        let (name, value) = credential.header();
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
    builder
        .build()
        .map_err(|e| format!("cannot build the request: {}", error_chain(&e)))
}

/// A send error: the connector's errors happened before any byte of the request existed on a
/// connection; everything else happened after the connection was up.
fn classify_send_error(e: &reqwest::Error) -> HttpOutcome {
    if e.is_connect() {
        let what = if e.is_timeout() {
            "connect timed out"
        } else {
            "cannot connect"
        };
        not_sent(format!("{what}: {}", error_chain(e)))
    } else if e.is_builder() {
        not_sent(format!("cannot build the request: {}", error_chain(e)))
    } else {
        HttpOutcome::Unknown {
            reason: format!(
                "connection failed after it was established: {}",
                error_chain(e)
            ),
        }
    }
}

fn not_sent(reason: String) -> HttpOutcome {
    HttpOutcome::NotSent { reason }
}

/// The error and its causes, without the URL (which may carry rendered arguments).
fn error_chain(e: &reqwest::Error) -> String {
    let mut text = String::new();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause = cause.to_string();
        if !text.ends_with(&cause) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&cause);
        }
        source = source.and_then(|s| s.source());
    }
    if text.is_empty() {
        // No cause to name: reqwest's own text, with the URL left out.
        let kind = if e.is_body() {
            "body error"
        } else if e.is_decode() {
            "decode error"
        } else if e.is_request() {
            "request error"
        } else {
            "error"
        };
        text.push_str(kind);
    }
    text
}
