//! The raw client of the resume tests: an MCP session over HTTP whose streams can be read
//! event by event, cut after their priming event and resumed with `Last-Event-ID`.

use serde_json::{json, Value};

use super::PATIENCE;

pub(crate) fn http() -> reqwest::Client {
    // No pooling: dropping a response closes its connection, as a lost network would.
    crate::harness::http_builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

/// One server-sent event.
#[derive(Clone, Debug, Default)]
pub(crate) struct Event {
    pub(super) id: Option<String>,
    pub(crate) data: String,
}

impl Event {
    pub(crate) fn message(&self) -> Option<Value> {
        serde_json::from_str(&self.data).ok()
    }
}

/// Reads an SSE body incrementally, event by event, as it arrives.
pub(crate) struct SseReader {
    pub(super) response: reqwest::Response,
    pub(super) buf: Vec<u8>,
}

impl SseReader {
    pub(crate) fn new(response: reqwest::Response) -> SseReader {
        let ctype = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        assert!(
            ctype.starts_with("text/event-stream"),
            "expected an SSE answer, got status {} with content-type {ctype:?}",
            response.status()
        );
        SseReader {
            response,
            buf: Vec::new(),
        }
    }

    /// The next event (comments and keep-alives skipped); `None` when the body ended.
    pub(crate) async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let frame: Vec<u8> = self.buf.drain(..end + 2).collect();
                let text = String::from_utf8(frame).unwrap();
                let mut event = Event::default();
                let mut fields = false;
                for line in text.lines() {
                    let (name, value) = line.split_once(':').unwrap_or((line, ""));
                    let value = value.strip_prefix(' ').unwrap_or(value);
                    match name {
                        "" => continue, // a comment
                        "id" => event.id = Some(value.to_string()),
                        "data" => {
                            if !event.data.is_empty() {
                                event.data.push('\n');
                            }
                            event.data.push_str(value);
                        }
                        _ => {}
                    }
                    fields = true;
                }
                if fields {
                    return Some(event);
                }
                continue;
            }
            let chunk = tokio::time::timeout(PATIENCE, self.response.chunk())
                .await
                .expect("the SSE stream stalled")
                .expect("reading the SSE stream");
            match chunk {
                Some(bytes) => self.buf.extend_from_slice(&bytes),
                None => return None,
            }
        }
    }

    /// Every remaining event, until the server ends the body.
    pub(crate) async fn rest(mut self) -> Vec<Event> {
        let mut all = Vec::new();
        while let Some(e) = self.next().await {
            all.push(e);
        }
        all
    }
}

/// A legacy MCP client (one session) over raw HTTP.
pub(super) struct Session {
    pub(super) http: reqwest::Client,
    pub(super) url: String,
    pub(super) token: String,
    pub(super) version: String,
    pub(super) id: String,
}

impl Session {
    /// `initialize` (+ `notifications/initialized`) with protocol `version`.
    pub(super) async fn open(url: &str, token: &str, version: &str) -> Session {
        let http = http();
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {},
            "clientInfo": {"name": "resume-tests", "version": "1"}}});
        let resp = http
            .post(url)
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(init.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        let id = resp
            .headers()
            .get("mcp-session-id")
            .expect("initialize answers with a session id")
            .to_str()
            .unwrap()
            .to_string();
        let events = SseReader::new(resp).rest().await;
        let answer = events
            .iter()
            .find_map(|e| e.message().filter(|m| m.get("id").is_some()))
            .expect("an initialize result");
        assert_eq!(answer["result"]["protocolVersion"], version, "{answer}");
        let session = Session {
            http,
            url: url.to_string(),
            token: token.to_string(),
            version: version.to_string(),
            id,
        };
        let resp = session
            .post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 202);
        session
    }

    pub(super) fn post(&self, body: &Value) -> reqwest::RequestBuilder {
        self.http
            .post(&self.url)
            .bearer_auth(&self.token)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-session-id", &self.id)
            .header("mcp-protocol-version", &self.version)
            .body(body.to_string())
    }

    /// POSTs `tools/call` with JSON-RPC id `rpc_id`; the answer's SSE stream.
    pub(super) async fn call(&self, rpc_id: i64, tool: &str, arguments: Value) -> SseReader {
        let body = json!({"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}});
        let resp = self.post(&body).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        SseReader::new(resp)
    }

    /// `GET /mcp` with `Last-Event-ID`, as this session (its id and token).
    pub(super) async fn resume(&self, last_event_id: &str) -> reqwest::Response {
        resume(
            &self.http,
            &self.url,
            &self.token,
            Some(&self.id),
            last_event_id,
        )
        .await
    }
}

/// `GET /mcp` with `Last-Event-ID`, with any token and session (or none).
pub(super) async fn resume(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    session: Option<&str>,
    last_event_id: &str,
) -> reqwest::Response {
    let mut req = http
        .get(url)
        .bearer_auth(token)
        .header("accept", "text/event-stream")
        .header("last-event-id", last_event_id);
    if let Some(s) = session {
        req = req.header("mcp-session-id", s);
    }
    tokio::time::timeout(PATIENCE, req.send())
        .await
        .expect("the resume request stalled")
        .unwrap()
}

/// The first event carrying an id: the stream's priming event, `<stream uuid>/0`.
pub(super) async fn priming(stream: &mut SseReader) -> String {
    let event = stream
        .next()
        .await
        .expect("the stream ended before any event");
    let id = event.id.clone().expect("the first event carries an id");
    let (stream_id, n) = id.rsplit_once('/').expect("a `<stream>/<n>` event id");
    assert_eq!(n, "0", "the priming event is the stream's first: {id}");
    assert_eq!(stream_id.len(), 36, "a stream id is a UUID: {id}");
    assert!(
        event.message().is_none(),
        "the priming event carries no message: {event:?}"
    );
    id
}

/// The stream id of a `<stream>/<n>` event id.
pub(super) fn stream_of(event_id: &str) -> &str {
    event_id.rsplit_once('/').unwrap().0
}

/// The replayed events continue the stream after its priming event: `<stream>/1`, `/2`, ….
pub(super) fn assert_continues(events: &[Event], stream: &str) {
    assert!(!events.is_empty(), "nothing was replayed");
    for (i, e) in events.iter().enumerate() {
        assert_eq!(
            e.id.as_deref(),
            Some(format!("{stream}/{}", i + 1).as_str()),
            "replayed event {i} of {events:?}"
        );
    }
}

/// The JSON-RPC response with id `rpc_id` among the events.
pub(super) fn response_in(events: &[Event], rpc_id: i64) -> Value {
    events
        .iter()
        .filter_map(Event::message)
        .find(|m| m["id"] == rpc_id && (m.get("result").is_some() || m.get("error").is_some()))
        .unwrap_or_else(|| panic!("no response to request {rpc_id} in {events:?}"))
}
