//! A minimal MCP client over raw HTTP (protocol 2025-06-18, session mode), for `postern demo`
//! and the end-to-end tests: it shows exactly what crosses the wire and can cut its own
//! connection mid-call, as a flaky network would.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use serde_json::{json, Value};

/// Why a call got no JSON-RPC answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("HTTP: {0}")]
    Http(#[from] reqwest::Error),
    #[error("HTTP status {status}: {body}")]
    Status { status: u16, body: String },
    #[error("no JSON-RPC response in the answer: {0}")]
    NoResponse(String),
}

pub struct McpClient {
    http: reqwest::Client,
    url: String,
    token: String,
    session: String,
    next: AtomicI64,
}

/// The JSON-RPC response in a JSON body or an SSE stream.
pub fn response_message(body: &str) -> Option<Value> {
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        return Some(v);
    }
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|v| v.get("id").is_some())
}

impl McpClient {
    /// `initialize` + `notifications/initialized` as `client_name`.
    pub async fn connect(
        url: &str,
        token: &str,
        client_name: &str,
    ) -> Result<McpClient, ClientError> {
        // reqwest is built with rustls (for `postern connect`) and takes the default provider.
        let _ = rustls::crypto::ring::default_provider().install_default();
        McpClient::connect_with(reqwest::Client::builder().build()?, url, token, client_name).await
    }

    /// As [`McpClient::connect`], over `http` (a client that trusts a private CA, say).
    pub async fn connect_with(
        http: reqwest::Client,
        url: &str,
        token: &str,
        client_name: &str,
    ) -> Result<McpClient, ClientError> {
        let mut client = McpClient {
            http,
            url: url.to_string(),
            token: token.to_string(),
            session: String::new(),
            next: AtomicI64::new(1),
        };
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": client_name, "version": env!("CARGO_PKG_VERSION")}}});
        let resp = client.post(&init.to_string()).send().await?;
        let status = resp.status().as_u16();
        let session = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = resp.text().await?;
        client.session = match (status, session) {
            (200..=299, Some(s)) => s,
            _ => return Err(ClientError::Status { status, body }),
        };
        let (status, body) = client
            .raw(
                &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string(),
                None,
            )
            .await?;
        if status >= 300 {
            return Err(ClientError::Status { status, body });
        }
        Ok(client)
    }

    /// With the bearer token; with none, an actor authenticated by its client certificate alone.
    fn authorized(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        if self.token.is_empty() {
            req
        } else {
            req.header("authorization", format!("Bearer {}", self.token))
        }
    }

    fn post(&self, body: &str) -> reqwest::RequestBuilder {
        let mut req = self
            .authorized(self.http.post(&self.url))
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body.to_string());
        if !self.session.is_empty() {
            req = req
                .header("mcp-session-id", &self.session)
                .header("mcp-protocol-version", "2025-06-18");
        }
        req
    }

    /// The `Mcp-Session-Id` the gateway gave this client.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// Ends the session (`DELETE`); the HTTP status of the answer.
    pub async fn close(&self) -> Result<u16, ClientError> {
        let resp = self
            .authorized(self.http.delete(&self.url))
            .header("mcp-session-id", &self.session)
            .header("mcp-protocol-version", "2025-06-18")
            .send()
            .await?;
        Ok(resp.status().as_u16())
    }

    /// POSTs a raw body; with a timeout, the connection is dropped when it fires.
    pub async fn raw(
        &self,
        body: &str,
        timeout: Option<Duration>,
    ) -> Result<(u16, String), ClientError> {
        let mut req = self.post(body);
        if let Some(t) = timeout {
            req = req.timeout(t);
        }
        let resp = req.send().await?;
        let status = resp.status().as_u16();
        Ok((status, resp.text().await?))
    }

    /// A `tools/call` request body with a fresh JSON-RPC id; `extra` is merged into `params`.
    pub fn request(&self, tool: &str, arguments: Value, extra: Value) -> (i64, String) {
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        let mut params = json!({"name": tool, "arguments": arguments});
        if let Value::Object(m) = extra {
            for (k, v) in m {
                params[k] = v;
            }
        }
        (
            id,
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
                .to_string(),
        )
    }

    /// A `tools/call`: the JSON-RPC response message (a result or an error).
    pub async fn call(
        &self,
        tool: &str,
        arguments: Value,
        extra: Value,
    ) -> Result<Value, ClientError> {
        let (_, body) = self.request(tool, arguments, extra);
        self.send(&body, None).await
    }

    /// POSTs a request and cuts the connection as soon as its SSE stream carried an event id
    /// (the priming event): the answer, still being made, never reaches this connection.
    /// Returns that event id.
    pub async fn post_and_cut(&self, body: &str) -> Result<String, ClientError> {
        let mut resp = self.post(body).send().await?;
        let mut seen = String::new();
        while let Some(chunk) = resp.chunk().await? {
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if let Some(id) = seen
                .lines()
                .find_map(|l| l.strip_prefix("id:").map(|v| v.trim().to_string()))
            {
                return Ok(id);
            }
        }
        Err(ClientError::NoResponse(seen))
    }

    /// Resumes a stream with `GET` and `Last-Event-ID`: the JSON-RPC response it replays and the
    /// ids of the replayed events.
    pub async fn resume(&self, last_event_id: &str) -> Result<(Value, Vec<String>), ClientError> {
        let resp = self
            .authorized(self.http.get(&self.url))
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &self.session)
            .header("mcp-protocol-version", "2025-06-18")
            .header("last-event-id", last_event_id)
            .send()
            .await?;
        let status = resp.status().as_u16();
        let text = resp.text().await?;
        let ids = text
            .lines()
            .filter_map(|l| l.strip_prefix("id:").map(|v| v.trim().to_string()))
            .collect();
        match response_message(&text) {
            Some(v) => Ok((v, ids)),
            None => Err(ClientError::Status { status, body: text }),
        }
    }

    /// Sends a prepared request body and returns its JSON-RPC response.
    pub async fn send(&self, body: &str, timeout: Option<Duration>) -> Result<Value, ClientError> {
        let (status, text) = self.raw(body, timeout).await?;
        match response_message(&text) {
            Some(v) => Ok(v),
            None if status >= 300 => Err(ClientError::Status { status, body: text }),
            None => Err(ClientError::NoResponse(text)),
        }
    }
}
