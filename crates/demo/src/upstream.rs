//! A small, real upstream MCP server (rmcp's server, stdio or Streamable HTTP): what
//! `postern demo` and the upstream tests put behind Postern. `postern demo-upstream` runs it.
//!
//! Tools: `create_invoice {customer, amount, delay_ms?}` (an irreversible effect),
//! `set_status {order, status, delay_ms?}` (idempotent) and `invoice_status {execution_id}`
//! (answers `{"applied": bool}`: whether a call with that execution id was applied — the status
//! tool of a contract). A negative amount is refused with JSON-RPC `-32602`, nothing applied.
//!
//! Honest failure: every effect is written to the journal (and synced) BEFORE the optional
//! `delay_ms` wait and the answer, so a server killed during the wait has applied the call and
//! never answered it. The journal (JSON lines: `start` with the pid, one `call` per applied
//! call with the execution id from `_meta` and the arguments, `cancelled` when a client's
//! `notifications/cancelled` ended a wait) is how a test counts calls.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{json, Map, Value};

/// One applied call, as the journal has it.
#[derive(Clone, Debug, PartialEq)]
pub struct JournalCall {
    pub tool: String,
    pub execution_id: Option<String>,
    /// The W3C `traceparent` the call carried in `_meta` (the gateway's span).
    pub traceparent: Option<String>,
    pub arguments: Value,
}

/// The upstream's journal file.
#[derive(Clone, Debug)]
pub struct Journal {
    /// `None`: nothing is written (the benchmark's upstream: calls are only counted).
    path: Option<PathBuf>,
    lock: Arc<Mutex<()>>,
    applied: Arc<std::sync::atomic::AtomicU64>,
}

impl Journal {
    pub fn new(path: impl Into<PathBuf>) -> Journal {
        Journal {
            path: Some(path.into()),
            lock: Arc::default(),
            applied: Arc::default(),
        }
    }

    /// A journal that writes nothing.
    pub fn none() -> Journal {
        Journal {
            path: None,
            lock: Arc::default(),
            applied: Arc::default(),
        }
    }

    fn append(&self, line: &Value) -> std::io::Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        writeln!(f, "{line}")?;
        f.sync_data()
    }

    fn lines(path: &Path) -> Vec<Value> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Every applied call so far.
    pub fn calls(path: &Path) -> Vec<JournalCall> {
        Self::lines(path)
            .into_iter()
            .filter(|l| l["event"] == "call")
            .map(|l| JournalCall {
                tool: l["tool"].as_str().unwrap_or_default().to_string(),
                execution_id: l["execution_id"].as_str().map(str::to_string),
                traceparent: l["traceparent"].as_str().map(str::to_string),
                arguments: l["arguments"].clone(),
            })
            .collect()
    }

    /// The execution ids whose calls were cancelled while they waited.
    pub fn cancelled(path: &Path) -> Vec<String> {
        Self::lines(path)
            .into_iter()
            .filter(|l| l["event"] == "cancelled")
            .filter_map(|l| l["execution_id"].as_str().map(str::to_string))
            .collect()
    }

    /// The pid of the last server started on this journal.
    pub fn last_pid(path: &Path) -> Option<u32> {
        Self::lines(path)
            .into_iter()
            .rev()
            .find(|l| l["event"] == "start")
            .and_then(|l| l["pid"].as_u64())
            .and_then(|p| u32::try_from(p).ok())
    }

    fn applied(&self, execution_id: &str) -> bool {
        self.path.as_deref().is_some_and(|p| {
            Self::calls(p)
                .iter()
                .any(|c| c.execution_id.as_deref() == Some(execution_id))
        })
    }
}

/// The server.
#[derive(Clone)]
pub struct DemoUpstream {
    journal: Journal,
    /// `create_invoice`'s description (a test changes it to see the tool withheld).
    description: String,
}

impl DemoUpstream {
    /// A server writing to `journal`; `DEMO_UPSTREAM_DESCRIPTION` replaces the invoice tool's
    /// description.
    pub fn new(journal: Journal) -> DemoUpstream {
        let description = std::env::var("DEMO_UPSTREAM_DESCRIPTION")
            .unwrap_or_else(|_| "Create an invoice for a customer".to_string());
        let _ = journal.append(&json!({"event": "start", "pid": std::process::id()}));
        DemoUpstream {
            journal,
            description,
        }
    }

    fn tools(&self) -> Vec<Tool> {
        let schema = |v: Value| match v {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        vec![
            Tool::new(
                "create_invoice",
                self.description.clone(),
                schema(json!({
                    "type": "object",
                    "required": ["customer", "amount"],
                    "properties": {
                        "customer": {"type": "string"},
                        "amount": {"type": "integer"},
                        "delay_ms": {"type": "integer", "minimum": 0}
                    }
                })),
            ),
            Tool::new(
                "set_status",
                "Set an order's status (idempotent)",
                schema(json!({
                    "type": "object",
                    "required": ["order", "status"],
                    "properties": {
                        "order": {"type": "string"},
                        "status": {"type": "string"},
                        "delay_ms": {"type": "integer", "minimum": 0}
                    }
                })),
            )
            // A claim the gateway shows and never trusts: the contract's class decides.
            .annotate(
                ToolAnnotations::new()
                    .read_only(false)
                    .destructive(false)
                    .idempotent(true),
            ),
            Tool::new(
                "invoice_status",
                "Whether the call with this execution id was applied",
                schema(json!({
                    "type": "object",
                    "required": ["execution_id"],
                    "properties": {"execution_id": {"type": "string"}}
                })),
            )
            .annotate(ToolAnnotations::new().read_only(true)),
        ]
    }

    async fn apply(
        &self,
        request: &CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let meta = &ctx.meta;
        let arguments = request.arguments.clone().unwrap_or_default();
        let execution_id = meta
            .get("io.postern/execution-id")
            .and_then(Value::as_str)
            .map(str::to_string);
        let tool = request.name.as_ref();
        match tool {
            "invoice_status" => {
                let id = arguments
                    .get("execution_id")
                    .and_then(Value::as_str)
                    .ok_or_else(|| ErrorData::invalid_params("execution_id is required", None))?;
                let applied = self.journal.applied(id);
                let mut result = CallToolResult::success(vec![ContentBlock::text(format!(
                    "applied: {applied}"
                ))]);
                result.structured_content = Some(json!({"applied": applied}));
                return Ok(result);
            }
            "create_invoice" | "set_status" => {}
            other => {
                return Err(ErrorData::invalid_params(
                    format!("no tool {other:?}"),
                    None,
                ))
            }
        }
        if tool == "create_invoice"
            && arguments.get("amount").and_then(Value::as_i64).unwrap_or(0) < 0
        {
            return Err(ErrorData::invalid_params(
                "amount must not be negative",
                None,
            ));
        }
        let traceparent = meta.get("traceparent").and_then(Value::as_str);
        let line = json!({"event": "call", "tool": tool, "execution_id": execution_id, "traceparent": traceparent, "arguments": arguments});
        self.journal
            .append(&line)
            .map_err(|e| ErrorData::internal_error(format!("journal: {e}"), None))?;
        // Applied and synced: only now the (optional) wait, then the answer.
        if let Some(ms) = arguments.get("delay_ms").and_then(Value::as_u64) {
            // A caller that asked for progress hears that the work is under way.
            if let Some(token) = meta.get_progress_token() {
                let mut progress = rmcp::model::ProgressNotificationParam::new(token, 1.0);
                progress.total = Some(2.0);
                progress.message = Some("applied; finishing".into());
                let _ = ctx.peer.notify_progress(progress).await;
            }
            // A cancellation (`notifications/cancelled`) ends the wait and is journalled; the
            // effect stays applied, and rmcp sends no answer to a cancelled request.
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(ms)) => {}
                () = ctx.ct.cancelled() => {
                    let line = json!({"event": "cancelled", "tool": tool, "execution_id": execution_id});
                    let _ = self.journal.append(&line);
                    return Err(ErrorData::internal_error("cancelled by the client", None));
                }
            }
        }
        let n = 1 + self
            .journal
            .applied
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut result =
            CallToolResult::success(vec![ContentBlock::text(format!("{tool} #{n} done"))]);
        let mut structured = json!({"tool": tool, "n": n, "arguments": arguments});
        // `pad_bytes`: an answer as large as asked (the gateway's cap is tested with it).
        if let Some(pad) = arguments.get("pad_bytes").and_then(Value::as_u64) {
            structured["pad"] = json!("x".repeat(usize::try_from(pad).unwrap_or(0).min(8 << 20)));
        }
        result.structured_content = Some(structured);
        Ok(result)
    }
}

/// The one resource the demo upstream serves (what a resource read through Postern is
/// measured and tested with).
pub const PRICE_LIST_URI: &str = "demo://books/price-list";

impl ServerHandler for DemoUpstream {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, ErrorData> {
        let resource = rmcp::model::Resource::new(PRICE_LIST_URI, "price-list");
        Ok(rmcp::model::ListResourcesResult::with_all_items(vec![
            resource,
        ]))
    }

    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, ErrorData> {
        if request.uri != PRICE_LIST_URI {
            return Err(ErrorData::resource_not_found(
                format!("no resource {}", request.uri),
                None,
            ));
        }
        let text = rmcp::model::ResourceContents::text(
            "invoice: 1.00\nstatus change: 0.10\n",
            PRICE_LIST_URI,
        );
        Ok(rmcp::model::ReadResourceResponse::Complete(
            rmcp::model::ReadResourceResult::new(vec![text]),
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // rmcp hands the request's `_meta` over in the context.
        self.apply(&request, &ctx)
            .await
            .map(CallToolResponse::Complete)
    }
}

/// Serves on stdin/stdout until the client goes away.
pub async fn serve_stdio(journal: Journal) -> Result<(), String> {
    use rmcp::ServiceExt;
    let service = DemoUpstream::new(journal)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| format!("stdio: {e}"))?;
    service.waiting().await.map_err(|e| e.to_string())?;
    Ok(())
}

/// Serves Streamable HTTP at `/mcp` on `listener` until the process ends.
pub async fn serve_http(
    listener: tokio::net::TcpListener,
    journal: Journal,
) -> std::io::Result<()> {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
    let server = DemoUpstream::new(journal);
    let service: StreamableHttpService<DemoUpstream, LocalSessionManager> =
        StreamableHttpService::new(
            move || Ok(server.clone()),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default(),
        );
    let app = axum::Router::new().nest_service("/mcp", service);
    // Small SSE writes must not wait for delayed ACKs (Nagle): 40 ms a call otherwise.
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app).await
}
