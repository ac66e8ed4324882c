//! Why a link failed, in the operator's words: "connection refused", "HTTP 401", the server's
//! own message. rmcp's transport errors name their transport by its Rust type
//! (`Transport [CountedProgress<rmcp::transport::worker::WorkerTransport<…>>] error: …`), which
//! tells an operator nothing; the cause under it is what is said here, never the type.

use std::error::Error;

use rmcp::service::ClientInitializeError;
use rmcp::transport::streamable_http_client::StreamableHttpError;
use rmcp::transport::DynamicTransportError;
use rmcp::ServiceError;

/// The most of a server's own text (an error body) a reason quotes.
const QUOTED: usize = 240;

/// Why initialising the link failed.
pub(super) fn initialize(e: &ClientInitializeError) -> String {
    match e {
        ClientInitializeError::TransportError { error, .. } => transport(error),
        ClientInitializeError::ConnectionClosed(_) => {
            "the server closed the connection before answering initialize".into()
        }
        ClientInitializeError::JsonRpcError(e) => format!(
            "the server refused initialize: {} (JSON-RPC {})",
            quoted(&e.message),
            e.code.0
        ),
        ClientInitializeError::ExpectedInitResponse(_)
        | ClientInitializeError::ExpectedInitResult(_) => {
            "the server's answer to initialize was not an initialize result".into()
        }
        other => quoted(&other.to_string()),
    }
}

/// Why a request on a live link failed.
pub(super) fn service(e: &ServiceError) -> String {
    match e {
        ServiceError::TransportSend(error) => transport(error),
        ServiceError::McpError(e) => format!("{} (JSON-RPC {})", quoted(&e.message), e.code.0),
        other => other.to_string(),
    }
}

/// The cause under a transport error (its transport's type name left out).
pub(super) fn transport(e: &DynamicTransportError) -> String {
    cause(e.error.as_ref())
}

/// The first error of the chain this module can say in words, or the first one's own text.
fn cause(e: &(dyn Error + 'static)) -> String {
    if let Some(e) = e.downcast_ref::<DynamicTransportError>() {
        return transport(e);
    }
    if let Some(e) = e.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
        return http(e);
    }
    if let Some(e) = e.downcast_ref::<reqwest::Error>() {
        return request(e);
    }
    if let Some(e) = e.downcast_ref::<std::io::Error>() {
        return io(e);
    }
    quoted(&e.to_string())
}

fn http(e: &StreamableHttpError<reqwest::Error>) -> String {
    match e {
        StreamableHttpError::Client(e) => request(e),
        StreamableHttpError::Io(e) => io(e),
        StreamableHttpError::HttpStatus(s) => format!("HTTP {}", s.status),
        StreamableHttpError::AuthRequired(a) => format!(
            "HTTP 401: the server asks for authentication ({})",
            quoted(&a.www_authenticate_header)
        ),
        StreamableHttpError::InsufficientScope(s) => format!(
            "HTTP 403: the credential's scope is not enough ({})",
            quoted(&s.www_authenticate_header)
        ),
        // rmcp words these "HTTP 401 Unauthorized: <the server's body>".
        StreamableHttpError::UnexpectedServerResponse(text) => quoted(text),
        StreamableHttpError::SessionExpired => {
            "the server no longer knows the link's session (HTTP 404)".into()
        }
        other => quoted(&other.to_string()),
    }
}

/// A request that got no HTTP answer: refused, unreachable, timed out.
fn request(e: &reqwest::Error) -> String {
    let mut innermost: &(dyn Error + 'static) = e;
    while let Some(next) = innermost.source() {
        if let Some(e) = next.downcast_ref::<std::io::Error>() {
            if e.kind() == std::io::ErrorKind::ConnectionRefused {
                return "connection refused".into();
            }
        }
        innermost = next;
    }
    let what = quoted(&innermost.to_string());
    if e.is_timeout() {
        format!("no answer in time ({what})")
    } else if e.is_connect() {
        format!("cannot connect ({what})")
    } else if let Some(status) = e.status() {
        format!("HTTP {}", status.as_u16())
    } else {
        what
    }
}

fn io(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
        std::io::ErrorKind::BrokenPipe => "the server's input was closed (broken pipe)".into(),
        _ => quoted(&e.to_string()),
    }
}

/// A server's (or a library's) text on one line, at most [`QUOTED`] characters.
fn quoted(text: &str) -> String {
    let line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(QUOTED) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line,
    }
}
