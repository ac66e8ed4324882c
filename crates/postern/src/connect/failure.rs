//! Why an attempt of a call got no answer, read from rmcp's errors: the gateway's own error
//! (passed on unchanged), a refused token, or a lost answer, and whether the request provably
//! never left the bridge.

use rmcp::model::ErrorCode;
use rmcp::transport::streamable_http_client::StreamableHttpError;
use rmcp::{ErrorData, ServiceError};

/// Why an attempt did not produce an answer.
pub(super) enum Failure {
    /// The gateway answered with a JSON-RPC error: passed through unchanged.
    Gateway(ErrorData),
    /// The remote refused the token: nothing this attempt sent was performed.
    Unauthorized(String),
    /// The answer is lost (or never came); `sent` is false when provably nothing left.
    Lost { reason: String, sent: bool },
}

pub(super) fn classify(e: &ServiceError) -> Failure {
    match e {
        // The gateway refused before accepting (a session closed under the call): re-issue.
        ServiceError::McpError(err) if err.code == ErrorCode(-32800) => Failure::Lost {
            reason: format!("cancelled by the gateway: {}", err.message),
            sent: true,
        },
        ServiceError::McpError(err) if !synthesized(err) => Failure::Gateway(err.clone()),
        ServiceError::TransportSend(_) if e.auth_challenge().is_some() => {
            Failure::Unauthorized("the remote refused the bridge's token (HTTP 401)".to_string())
        }
        ServiceError::TransportSend(t) => Failure::Lost {
            reason: chain(t.error.as_ref()),
            sent: !connect_refused(t.error.as_ref()),
        },
        other => Failure::Lost {
            reason: other.to_string(),
            sent: true,
        },
    }
}

/// An error rmcp's client made up for a response it did not get (not the gateway's).
pub(super) fn synthesized(e: &ErrorData) -> bool {
    e.message == "streamable HTTP session was re-initialized before the response arrived"
}

type HttpError = StreamableHttpError<reqwest::Error>;

/// The remote said the session is gone (404) and rmcp could not re-initialize it in place.
pub(super) fn session_gone(e: &ServiceError) -> bool {
    // A response stream that closed early (`TransportClosed`) costs that one call only; the
    // session stays, and other calls in flight on it are left alone.
    let ServiceError::TransportSend(t) = e else {
        return false;
    };
    matches!(
        t.error.downcast_ref::<HttpError>(),
        Some(
            StreamableHttpError::SessionExpired
                | StreamableHttpError::ReinitializationFailed(_)
                | StreamableHttpError::SessionRecoveryTimeout
                | StreamableHttpError::TransportChannelClosed
        )
    )
}

pub(super) fn init_chain(e: &rmcp::service::ClientInitializeError) -> String {
    match e {
        rmcp::service::ClientInitializeError::TransportError { error, context } => {
            format!("{context}: {}", chain(error.error.as_ref()))
        }
        other => chain(other),
    }
}

/// An error and its causes, `a: b: c`.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = String::new();
    let mut source = Some(e);
    while let Some(cur) = source {
        let text = cur.to_string();
        if !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
        // rmcp's `Client` variant does not name the HTTP client's error as its source.
        source = match cur.downcast_ref::<HttpError>() {
            Some(StreamableHttpError::Client(r)) => Some(r),
            _ => cur.source(),
        };
    }
    out
}

/// The connection was refused: provably nothing of this attempt reached the gateway.
fn connect_refused(e: &(dyn std::error::Error + 'static)) -> bool {
    postern_channels::mcp::not_taken(e)
}
