//! A real `postern serve` process in front of a real invoice API, and a raw MCP client that can
//! cut its own connection.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use serde_json::{json, Value};

pub const BILLING_TOKEN: &str = "billing-token-0123456789abcdef";
pub const OPS_TOKEN: &str = "ops-token-0123456789abcdef0123";

pub struct Dir(pub PathBuf);

impl Dir {
    pub fn new(tag: &str) -> Dir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let d = std::env::temp_dir().join(format!("postern-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The test configuration: tools in front of the invoice API at `target`.
pub fn config(target: &str) -> String {
    format!(
        r#"
[gateway]
store = "sqlite://ledger.db"
fingerprint_key = {{ file = "fp.key" }}
signing_key = {{ file = "signing.key" }}
attach_wait = "10s"
max_body_bytes = 65536

[[actor]]
name = "billing"
token = {{ file = "billing.token" }}

[[actor]]
name = "ops"
token = {{ file = "ops.token" }}

[[tool]]
name = "create_invoice"
description = "Create an invoice"
class = "idempotent_write"
match_window = "10m"
input_schema = {{ type = "object", required = ["customer", "amount"], additionalProperties = false, properties = {{ customer = {{ type = "string" }}, amount = {{ type = "integer" }} }} }}
http = {{ method = "POST", url = "{target}/invoices", response_timeout = "1s" }}
recovery = {{ status_query = {{ method = "GET", url = "{target}/invoices?idempotency_key={{execution_id}}" }} }}

[[tool]]
name = "create_invoice_resend"
description = "Create an invoice (recovered by re-sending with the same key)"
class = "idempotent_write"
match_window = "10m"
input_schema = {{ type = "object", required = ["customer", "amount"], properties = {{ customer = {{ type = "string" }}, amount = {{ type = "integer" }} }} }}
http = {{ method = "POST", url = "{target}/invoices", response_timeout = "1s" }}

[[tool]]
name = "send_wire"
description = "Send money (irreversible)"
class = "irreversible"
match_window = "10m"
input_schema = {{ type = "object", required = ["customer", "amount"], properties = {{ customer = {{ type = "string" }}, amount = {{ type = "integer" }} }} }}
http = {{ method = "POST", url = "{target}/invoices", response_timeout = "1s" }}

[[tool]]
name = "list_invoices"
description = "List invoices"
class = "read_only"
http = {{ method = "GET", url = "{target}/invoices" }}
"#
    )
}

pub struct Served {
    child: Child,
    pub url: String,
    pub dir: PathBuf,
}

impl Served {
    /// Writes the config and keys into `dir` (once) and starts `postern serve` on a free port.
    pub fn start(dir: &Path, config_text: &str) -> Served {
        let write = |name: &str, text: &str| {
            let p = dir.join(name);
            if !p.exists() {
                std::fs::write(p, text).unwrap();
            }
        };
        write("postern.toml", config_text);
        write(
            "fp.key",
            "7f3a1e0b6a2d4f5e7c9b0a1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f",
        );
        write(
            "signing.key",
            "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        );
        write("billing.token", BILLING_TOKEN);
        write("ops.token", OPS_TOKEN);
        let mut child = Command::new(env!("CARGO_BIN_EXE_postern"))
            .args([
                "serve",
                "-c",
                dir.join("postern.toml").to_str().unwrap(),
                "--listen",
                "127.0.0.1:0",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .trim()
            .strip_prefix("postern listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
            .to_string();
        Served {
            child,
            url,
            dir: dir.to_path_buf(),
        }
    }

    /// `kill -9`.
    pub fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    pub fn store(&self) -> String {
        format!("sqlite://{}", self.dir.join("ledger.db").display())
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A minimal MCP client over raw HTTP (2025-06-18, session mode), so a test can cut the
/// connection mid-call and re-issue with a new JSON-RPC id.
pub struct Mcp {
    http: reqwest::Client,
    url: String,
    token: String,
    session: String,
    next: AtomicI64,
}

pub fn sse_message(body: &str) -> Value {
    // A JSON body, or an SSE stream whose data line carries the response.
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        return v;
    }
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|v| v.get("id").is_some())
        .unwrap_or_else(|| panic!("no JSON-RPC response in {body:?}"))
}

impl Mcp {
    pub async fn connect(url: &str, token: &str) -> Mcp {
        let http = reqwest::Client::builder().build().unwrap();
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "postern-tests", "version": "1.0"}}});
        let resp = http
            .post(url)
            .header("authorization", format!("Bearer {token}"))
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(init.to_string())
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success(), "initialize: {}", resp.status());
        let session = resp
            .headers()
            .get("mcp-session-id")
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let _ = resp.text().await.unwrap();
        let mcp = Mcp {
            http,
            url: url.to_string(),
            token: token.to_string(),
            session,
            next: AtomicI64::new(1),
        };
        let (status, _) = mcp
            .raw(
                &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string(),
                None,
            )
            .await
            .unwrap();
        assert!(status < 300, "initialized: {status}");
        mcp
    }

    /// POSTs a raw body; `None` timeout waits for the whole answer.
    pub async fn raw(
        &self,
        body: &str,
        timeout: Option<Duration>,
    ) -> Result<(u16, String), reqwest::Error> {
        let mut req = self
            .http
            .post(&self.url)
            .header("authorization", format!("Bearer {}", self.token))
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-session-id", &self.session)
            .header("mcp-protocol-version", "2025-06-18")
            .body(body.to_string());
        if let Some(t) = timeout {
            req = req.timeout(t);
        }
        let resp = req.send().await?;
        let status = resp.status().as_u16();
        Ok((status, resp.text().await?))
    }

    pub fn request(&self, tool: &str, arguments: Value, extra: Value) -> String {
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        let mut params = json!({"name": tool, "arguments": arguments});
        if let Value::Object(m) = extra {
            for (k, v) in m {
                params[k] = v;
            }
        }
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}).to_string()
    }

    /// A `tools/call`, returning the JSON-RPC response message.
    pub async fn call(&self, tool: &str, arguments: Value, extra: Value) -> Value {
        let (status, body) = self
            .raw(&self.request(tool, arguments, extra), None)
            .await
            .unwrap();
        assert_eq!(status, 200, "{body}");
        sse_message(&body)
    }
}

/// `result.structuredContent.execution` of a successful response.
pub fn execution(response: &Value) -> &Value {
    &response["result"]["structuredContent"]["execution"]
}

/// Waits until `f` holds (bounded), polling.
pub async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..200 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out waiting for {what}");
}
