//! The `Host` rule against DNS rebinding, one for every route a browser reaches: the front hands
//! `postern_core::hosts::allowed_hosts` to rmcp, which applies it to `/mcp`; the console applies the
//! same list with [`refuse_host`], which decides as rmcp does (rmcp keeps its check private).

use axum::http::uri::Authority;
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

/// A host as compared: without IPv6 brackets, lower case.
fn normalize(host: &str) -> String {
    host.trim_matches(['[', ']']).to_ascii_lowercase()
}

/// Whether `host` is one of `allowed`: the same host, and the same port where the entry names
/// one (an entry without a port admits any).
pub fn host_allowed(host: &Authority, allowed: &[String]) -> bool {
    let (name, port) = (normalize(host.host()), host.port_u16());
    allowed.iter().map(|a| a.trim()).any(|a| {
        let (a_name, a_port) = match Authority::try_from(a) {
            Ok(auth) => (normalize(auth.host()), auth.port_u16()),
            // A bare IPv6 address (`::1`) is no authority: the whole entry is the host.
            Err(_) => (normalize(a), None),
        };
        !a.is_empty() && a_name == name && a_port.is_none_or(|p| port == Some(p))
    })
}

/// `None` when the request's `Host` (or HTTP/2 `:authority`) is allowed; otherwise the answer
/// `/mcp` gives: 400 for a missing or malformed one, 403 for a foreign one.
pub fn refuse_host(uri: &Uri, headers: &HeaderMap, allowed: &[String]) -> Option<Response> {
    let host = match headers.get(header::HOST) {
        Some(v) => v.to_str().ok().and_then(|h| Authority::try_from(h).ok()),
        None => uri.authority().cloned(),
    };
    let text = match host {
        None => (
            StatusCode::BAD_REQUEST,
            "Bad Request: missing or invalid Host header",
        ),
        Some(h) if host_allowed(&h, allowed) => return None,
        Some(h) => {
            tracing::warn!(host = %h, "refused a request with a foreign Host (possible DNS rebinding)");
            (
                StatusCode::FORBIDDEN,
                "Forbidden: Host header is not allowed",
            )
        }
    };
    Some(text.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(host: &str) -> bool {
        let list: Vec<String> = ["localhost", "127.0.0.1", "::1", "[::1]", "gw.internal:8443"]
            .map(String::from)
            .to_vec();
        host_allowed(&Authority::try_from(host).unwrap(), &list)
    }

    #[test]
    fn loopback_names_pass_and_foreign_hosts_do_not() {
        assert!(allowed("127.0.0.1:8750"));
        assert!(allowed("LocalHost:1"));
        assert!(allowed("[::1]:8750"));
        assert!(allowed("gw.internal:8443"));
        assert!(!allowed("gw.internal:8444"), "an entry's port is required");
        assert!(!allowed("evil.example:8750"));
        assert!(!allowed("127.0.0.1.evil.example"));
    }
}
