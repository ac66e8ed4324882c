//! Two honest echo endpoints of the invoice API ([`crate::target`]), as real APIs have them,
//! for the redaction tests (issue 49):
//! what an agent can make a target say back about the request Postern sent for it.
//!
//! - `POST /echo/escaped` answers `{"body": …, "authorization": …}`: the request body (as
//!   text) and its `Authorization` header, written as System.Text.Json writes JSON by default:
//!   `+`, `<`, `>`, `&`, `'`, `` ` `` and `"` as `\u00XX` (upper-case hex), everything outside
//!   ASCII as `\uXXXX`. The body comes first, so a longer body moves the header later.
//! - `POST /echo/base64` answers the whole request as it arrived (request line, headers, blank
//!   line, body) base64-encoded, as text. The length of the query moves the header's alignment.

use axum::body::Bytes;
use axum::http::{header, HeaderMap, Method, Uri};
use axum::response::{IntoResponse, Response};

/// `POST /echo/escaped`.
pub(crate) async fn escaped(headers: HeaderMap, body: Bytes) -> Response {
    let authorization = headers
        .get(header::AUTHORIZATION)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let text = format!(
        "{{\"body\":\"{}\",\"authorization\":\"{}\"}}",
        system_text_json_escape(&String::from_utf8_lossy(&body)),
        system_text_json_escape(&authorization)
    );
    ([(header::CONTENT_TYPE, "application/json")], text).into_response()
}

/// `POST /echo/base64`.
pub(crate) async fn base64(method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let mut request = format!("{method} {uri} HTTP/1.1\r\n").into_bytes();
    for (name, value) in &headers {
        request.extend_from_slice(name.as_str().as_bytes());
        request.extend_from_slice(b": ");
        request.extend_from_slice(value.as_bytes());
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"\r\n");
    request.extend_from_slice(&body);
    (
        [(header::CONTENT_TYPE, "text/plain")],
        encode_base64(&request),
    )
        .into_response()
}

/// A JSON string's contents as System.Text.Json's default encoder writes them.
pub fn system_text_json_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            ' '..='~' if !"\"+<>&'`".contains(c) => out.push(c),
            c => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04X}"));
                }
            }
        }
    }
    out
}

/// Standard base64 (RFC 4648 §4), padded.
pub fn encode_base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for group in bytes.chunks(3) {
        let mut n = 0u32;
        for (i, &b) in group.iter().enumerate() {
            n |= u32::from(b) << (16 - 8 * i);
        }
        for i in 0..4 {
            if i <= group.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 0x3f) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_as_system_text_json_and_rfc_4648() {
        assert_eq!(
            system_text_json_escape("Bearer a+b/c=\"é😀"),
            "Bearer a\\u002Bb/c=\\u0022\\u00E9\\uD83D\\uDE00"
        );
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(encode_base64(plain.as_bytes()), encoded);
        }
    }
}
