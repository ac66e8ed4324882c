//! Plain answers as `application/json` (issue 48 point 7). rmcp answers every request as SSE;
//! clients bound an SSE event (the Python SDK at 1 MiB), so a large answer in one event fails
//! where the same answer as a JSON body passes. Streamable HTTP lets the server pick either.
//!
//! A stream is kept wherever it serves something: a call with a `progressToken`, and any call
//! whose first message is not its answer (a progress report, a log line, a question the upstream
//! asks the client) stay SSE, its events passed on unchanged. So do calls of a tool that is not
//! read-only: their stream's event ids are how a client that lost the connection resumes and
//! gets the outcome of an action (contract §3), which a JSON body cannot offer. A read-only
//! call loses nothing by it: a lost answer is read again. Only such a call, with nothing to
//! travel before its answer, is answered as JSON: the SSE body rmcp made is read up to the
//! answer's event, and that event's data becomes the body.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use http_body::Frame;
use postern_core::ActionClass;
use serde_json::Value;

use postern_pipeline::Gateway;

/// The id of the request to answer as JSON, if it is a plain one: a `tools/call` of a
/// read-only tool, without a `progressToken`, from a client that accepts JSON.
pub(super) fn plain_call(gateway: &Gateway, headers: &HeaderMap, message: &Value) -> Option<Value> {
    if message.get("method").and_then(Value::as_str) != Some("tools/call") {
        return None;
    }
    let id = message.get("id").filter(|id| !id.is_null())?;
    let params = message.get("params")?;
    if params.pointer("/_meta/progressToken").is_some() {
        return None;
    }
    let tool = params.get("name").and_then(Value::as_str)?;
    let read_only = gateway
        .registry()
        .get(tool)
        .is_some_and(|e| e.contract.class == ActionClass::ReadOnly);
    (read_only && accepts_json(headers)).then(|| id.clone())
}

/// Whether `Accept` lists `application/json` (or `application/*`, `*/*`) with a weight above 0.
fn accepts_json(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|range| {
            let mut parts = range.split(';').map(str::trim);
            let essence = parts.next().unwrap_or_default().to_ascii_lowercase();
            let weighted_out = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            !weighted_out
                && matches!(
                    essence.as_str(),
                    "application/json" | "application/*" | "*/*"
                )
        })
}

/// The response to the plain request `id`: rmcp's SSE answer read up to its first message;
/// the answer as a JSON body if that message is it, else the stream as it came (what was read,
/// then the rest).
pub(super) async fn as_json(response: Response, id: &Value) -> Response {
    let is_sse = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if response.status() != StatusCode::OK || !is_sse {
        return response;
    }
    let (mut parts, mut body) = response.into_parts();
    let mut read: VecDeque<Bytes> = VecDeque::new();
    let mut pending: Vec<u8> = Vec::new();
    let answer = loop {
        let next =
            std::future::poll_fn(|cx| http_body::Body::poll_frame(Pin::new(&mut body), cx)).await;
        let Some(Ok(frame)) = next else {
            break None;
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        pending.extend_from_slice(&data);
        read.push_back(data);
        match first_message(&mut pending) {
            Scan::More => continue,
            Scan::Message(text) if is_answer_to(&text, id) => break Some(text),
            Scan::Message(_) => break None,
        }
    };
    match answer {
        Some(text) => {
            parts.headers.remove(header::CONTENT_LENGTH);
            parts.headers.remove(header::CACHE_CONTROL);
            parts.headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            Response::from_parts(parts, Body::from(text))
        }
        None => Response::from_parts(parts, Body::new(Prefixed { read, rest: body })),
    }
}

/// A body whose first frames were read already: those, then the rest.
struct Prefixed {
    read: VecDeque<Bytes>,
    rest: Body,
}

impl http_body::Body for Prefixed {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        match this.read.pop_front() {
            Some(data) => Poll::Ready(Some(Ok(Frame::data(data)))),
            None => Pin::new(&mut this.rest).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.read.is_empty() && self.rest.is_end_stream()
    }
}

enum Scan {
    /// No event with a message yet (a priming event, a keep-alive, an incomplete event).
    More,
    /// The data of the first event that carries one.
    Message(String),
}

/// Takes whole events off the front of `pending` until one carries data.
fn first_message(pending: &mut Vec<u8>) -> Scan {
    while let Some(end) = pending.windows(2).position(|w| w == b"\n\n") {
        let event: Vec<u8> = pending.drain(..end + 2).collect();
        let text = String::from_utf8_lossy(&event);
        let data: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|l| l.strip_prefix(' ').unwrap_or(l))
            .collect();
        let data = data.join("\n");
        if !data.trim().is_empty() {
            return Scan::Message(data);
        }
    }
    Scan::More
}

/// Whether `text` is the JSON-RPC response (result or error) to request `id`.
fn is_answer_to(text: &str, id: &Value) -> bool {
    serde_json::from_str::<Value>(text).is_ok_and(|m| {
        m.get("method").is_none()
            && (m.get("result").is_some() || m.get("error").is_some())
            && m.get("id") == Some(id)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sse(frames: &[&str]) -> Response {
        let read = frames.iter().map(|f| Bytes::from(f.to_string())).collect();
        Response::builder()
            .header(header::CONTENT_TYPE, "text/event-stream")
            .body(Body::new(Prefixed {
                read,
                rest: Body::empty(),
            }))
            .unwrap()
    }

    async fn text(response: Response) -> (String, String) {
        let ctype = response.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .to_string();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (ctype, String::from_utf8(bytes.to_vec()).unwrap())
    }

    const PRIMING: &str = "id: s/0\nretry: 3000\ndata:\n\n";
    const ANSWER: &str =
        "id: s/1\ndata: {\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{\"content\":[]}}\n\n";
    const LOG: &str = "id: s/1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\n\n";

    #[tokio::test]
    async fn the_answer_first_is_a_json_body_anything_before_it_keeps_the_stream() {
        // Split across frames, after a priming event and a keep-alive.
        let (ctype, body) = text(
            as_json(
                sse(&[PRIMING, ": keep-alive\n\n", &ANSWER[..20], &ANSWER[20..]]),
                &json!(4),
            )
            .await,
        )
        .await;
        assert_eq!(ctype, "application/json");
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap(),
            json!({"jsonrpc": "2.0", "id": 4, "result": {"content": []}})
        );
        // A log line first: the stream, every byte of it.
        let (ctype, body) = text(as_json(sse(&[PRIMING, LOG, ANSWER]), &json!(4)).await).await;
        assert_eq!(ctype, "text/event-stream");
        assert_eq!(body, format!("{PRIMING}{LOG}{ANSWER}"));
        // Another request's answer is not this one's.
        let (ctype, _) = text(as_json(sse(&[ANSWER]), &json!(5)).await).await;
        assert_eq!(ctype, "text/event-stream");
    }

    #[test]
    fn json_must_be_acceptable() {
        let mut h = HeaderMap::new();
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        assert!(accepts_json(&h));
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("text/event-stream, application/json;q=0"),
        );
        assert!(!accepts_json(&h));
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("text/event-stream"),
        );
        assert!(!accepts_json(&h));
    }
}
