//! MCP tasks (`io.modelcontextprotocol/tasks`) for a long-running tool, end to end (issue #5): a
//! real `postern serve` process on a real SQLite ledger file, in front of the real invoice API,
//! spoken to over raw HTTP in the stateless MCP 2026-07-28 protocol (every request carries its
//! protocol version and client capabilities in `_meta`).
//!
//! - A task-augmented call returns a task whose id is the execution id, already in the ledger;
//!   the gateway stopped by SIGTERM drains it; restarted on the same ledger and port, `tasks/get`
//!   answers `completed` with the tool result. Another actor, or a made-up id, gets an error.
//! - A client that does not declare tasks gets an ordinary result from the same tool.
//! - `tasks/cancel` of a completed task is refused; of a dispatched one it is recorded
//!   (`cancel_requested`) and the execution still completes: a cancellation does not un-send.
//!
//! The gateway processes are started here rather than through `harness::Served`: these tests
//! send SIGTERM (not SIGINT), check the exit status and its time, and restart on the same port.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use postern_demo::target::{InvoiceApi, InvoiceApiHandle, Mode};
use serde_json::{json, Value};

use crate::harness::{
    config, execution, posts, prepare, sse_message, Dir, Mcp, Served, BILLING_TOKEN, OPS_TOKEN,
};

/// How long the target takes to answer the slow call.
const SLOW: Duration = Duration::from_secs(3);
const TASKS: &str = "io.modelcontextprotocol/tasks";
const TOOL: &str = "create_invoice_later";

/// The harness's tools, plus one declared long-running (served as a task to clients that
/// declare tasks). Its response timeout is well above [`SLOW`].
fn tasks_config(target: &InvoiceApiHandle) -> String {
    let target = format!("http://{}", target.addr);
    let mut text = config(&target);
    text.push_str(&format!(
        r#"
[[tool]]
name = "{TOOL}"
description = "Create an invoice (long-running: served as an MCP task)"
class = "idempotent_write"
long_running = true
match_window = "10m"
input_schema = {{ type = "object", required = ["customer", "amount"], additionalProperties = false, properties = {{ customer = {{ type = "string" }}, amount = {{ type = "integer" }} }} }}
http = {{ method = "POST", url = "{target}/invoices", response_timeout = "30s" }}
recovery = {{ status_query = {{ method = "GET", url = "{target}/invoices?idempotency_key={{execution_id}}" }} }}
"#
    ));
    text
}

/// A stateless (MCP 2026-07-28) client over raw HTTP, declaring the tasks extension or not.
struct Client {
    http: reqwest::Client,
    url: String,
    token: &'static str,
    tasks: bool,
    next: AtomicI64,
}

impl Client {
    fn new(url: &str, token: &'static str, tasks: bool) -> Client {
        Client {
            http: crate::harness::http_client(),
            url: url.to_string(),
            token,
            tasks,
            next: AtomicI64::new(1),
        }
    }

    /// One request: the JSON-RPC response message (a result or an error).
    async fn rpc(&self, method: &str, mut params: Value) -> Value {
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        let capabilities = if self.tasks {
            json!({"extensions": {TASKS: {}}})
        } else {
            json!({})
        };
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": capabilities,
        });
        // SEP-2243: the method and its target (tool name or task id) as headers too.
        let name = params
            .get("name")
            .or_else(|| params.get("taskId"))
            .and_then(Value::as_str)
            .map(str::to_string);
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut req = self
            .http
            .post(&self.url)
            .bearer_auth(self.token)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method);
        if let Some(name) = name {
            req = req.header("mcp-name", name);
        }
        let resp = req.body(body.to_string()).send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        let message = sse_message(&text);
        assert_eq!(
            message["id"], id,
            "{method}: HTTP {status}, not the answer to this request: {text}"
        );
        message
    }

    async fn call(&self, tool: &str, arguments: Value) -> Value {
        self.rpc("tools/call", json!({"name": tool, "arguments": arguments}))
            .await
    }

    async fn get(&self, task_id: &str) -> Value {
        self.rpc("tasks/get", json!({"taskId": task_id})).await
    }

    async fn cancel(&self, task_id: &str) -> Value {
        self.rpc("tasks/cancel", json!({"taskId": task_id})).await
    }
}

/// `postern activity show ID --json` on the ledger file: the execution as recorded.
fn activity_show(dir: &Path, id: &str) -> Value {
    let store = format!("sqlite://{}", dir.join("ledger.db").display());
    let out = Command::new(env!("CARGO_BIN_EXE_postern"))
        .args(["activity", "show", id, "--json", "--store", &store])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "postern activity show {id}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn event_names(shown: &Value) -> Vec<String> {
    shown["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_string())
        .collect()
}

/// Calls the long-running tool as a task while the target is slow; checks the task it gets and
/// that its execution is already in the ledger, dispatched. Returns the task id.
async fn start_slow_task(client: &Client, dir: &Path, target: &InvoiceApi, args: Value) -> String {
    target.set_mode(Mode::SlowOnce(SLOW));
    let created = client.call(TOOL, args).await;
    let task = &created["result"];
    assert_eq!(task["resultType"], "task", "{created}");
    assert_eq!(task["status"], "working", "{created}");
    let id = task["taskId"].as_str().unwrap().to_string();
    assert!(id.starts_with("exe_"), "{created}");
    // The task is returned once its execution is durably recorded.
    let shown = activity_show(dir, &id);
    assert_eq!(shown["execution_id"], id.as_str(), "{shown}");
    assert_eq!(shown["tool"], TOOL, "{shown}");
    assert_eq!(shown["actor"], "billing", "{shown}");
    assert_eq!(shown["state"], "dispatched", "{shown}");
    id
}

/// A `tasks/get` answer of a task still running.
fn assert_working(got: &Value, id: &str) {
    assert_eq!(got["result"]["taskId"], id, "{got}");
    assert_eq!(got["result"]["status"], "working", "{got}");
    assert!(got["result"].get("result").is_none(), "{got}");
}

/// A `tasks/get` answer of a completed task, with the tool result of `customer`'s invoice.
fn assert_completed(got: &Value, id: &str, customer: &str) {
    let task = &got["result"];
    assert_eq!(task["taskId"], id, "{got}");
    assert_eq!(task["status"], "completed", "{got}");
    let result = &task["result"];
    assert_eq!(result["isError"], false, "{got}");
    let ex = &result["structuredContent"]["execution"];
    assert_eq!(ex["execution_id"], id, "{got}");
    assert_eq!(ex["state"], "completed", "{got}");
    assert_eq!(ex["outcome"], "applied", "{got}");
    assert_eq!(ex["target_status"], 201, "{got}");
    let response = &result["structuredContent"]["response"];
    assert_eq!(response["customer"], customer, "{got}");
    assert_eq!(response["idempotency_key"], id, "{got}");
}

/// Issue #5: a task-augmented call can be polled with `tasks/get` across a gateway restart
/// until completed; only its owner can see it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_is_polled_across_a_graceful_restart_until_completed() {
    let target = InvoiceApi::start().await.unwrap();
    let dir = Dir::new("tasks-restart");
    prepare(&dir.0, &tasks_config(&target));
    let mut first = Served::spawn(&dir.0, "127.0.0.1:0");
    let billing = Client::new(&first.url, BILLING_TOKEN, true);

    let called = Instant::now();
    let id = start_slow_task(
        &billing,
        &dir.0,
        &target.state,
        json!({"customer": "task-co", "amount": 500}),
    )
    .await;
    assert_working(&billing.get(&id).await, &id);

    // SIGTERM while the target is still working: the gateway drains the execution, then exits 0.
    assert!(
        called.elapsed() < SLOW,
        "the target answered before the gateway was stopped ({:?}): the test proves nothing",
        called.elapsed()
    );
    let status = first.terminate();
    assert_eq!(status.code(), Some(0), "postern serve exited with {status}");
    assert!(
        called.elapsed() >= SLOW,
        "exited after {:?}, before the target could have answered",
        called.elapsed()
    );
    let shown = activity_show(&dir.0, &id);
    let names = event_names(&shown);
    assert!(
        names.iter().any(|n| n == "completed(applied)"),
        "the drained execution's end is recorded: {names:?}"
    );
    assert!(!names.iter().any(|n| n == "outcome_unknown"), "{names:?}");

    // Restarted on the same ledger file and port, the task reads completed, with its result.
    let second = Served::spawn(&dir.0, first.addr());
    assert_eq!(second.url, first.url);
    let got = billing.get(&id).await;
    assert_completed(&got, &id, "task-co");
    assert_eq!(target.state.count_for("task-co"), 1);
    assert_eq!(posts(&target.state), 1);
    // The result reached its owner in that answer: the delivery is recorded.
    let mut delivered = false;
    for _ in 0..50 {
        if event_names(&activity_show(&dir.0, &id))
            .iter()
            .any(|n| n.starts_with("delivered"))
        {
            delivered = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(delivered, "{:?}", event_names(&activity_show(&dir.0, &id)));

    // Another actor's task is indistinguishable from a missing one; so is a made-up id.
    let ops = Client::new(&second.url, OPS_TOKEN, true);
    let foreign = ops.get(&id).await;
    assert_eq!(foreign["error"]["code"], -32602, "{foreign}");
    let message = foreign["error"]["message"].as_str().unwrap();
    assert!(message.contains("unknown task"), "{foreign}");
    assert!(foreign.get("result").is_none(), "{foreign}");
    assert!(!foreign.to_string().contains("task-co"), "{foreign}");
    for made_up in ["exe_00000000000000000000000000", "exe_nope", "task-1"] {
        let got = billing.get(made_up).await;
        assert_eq!(got["error"]["code"], -32602, "{made_up}: {got}");
        assert!(
            got["error"]["message"]
                .as_str()
                .unwrap()
                .contains("unknown task"),
            "{made_up}: {got}"
        );
    }
    // Nor can another actor cancel it (nor learn its state from the refusal).
    let foreign_cancel = ops.cancel(&id).await;
    assert_eq!(foreign_cancel["error"]["code"], -32602, "{foreign_cancel}");
    let message = foreign_cancel["error"]["message"].as_str().unwrap();
    assert!(message.contains("unknown"), "{foreign_cancel}");
    assert!(!message.contains("completed"), "{foreign_cancel}");

    let mut second = second;
    let status = second.terminate();
    assert_eq!(status.code(), Some(0), "postern serve exited with {status}");
    assert_eq!(posts(&target.state), 1);
}

/// A client that does not declare tasks gets an ordinary result from a long-running tool;
/// `tasks/cancel` of a dispatched task is recorded and the execution still completes (it does
/// not un-send); of a completed task it is refused with a clear error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_cancel_and_clients_without_tasks() {
    let target = InvoiceApi::start().await.unwrap();
    let dir = Dir::new("tasks-cancel");
    prepare(&dir.0, &tasks_config(&target));
    let mut gateway = Served::spawn(&dir.0, "127.0.0.1:0");

    // Without the tasks extension: a synchronous tool result, whatever the protocol era.
    let plain = Client::new(&gateway.url, BILLING_TOKEN, false);
    let answer = plain
        .call(TOOL, json!({"customer": "plain-co", "amount": 1}))
        .await;
    assert!(
        answer["result"]
            .get("resultType")
            .is_none_or(|t| t != "task"),
        "{answer}"
    );
    assert!(answer["result"].get("taskId").is_none(), "{answer}");
    assert_eq!(execution(&answer)["state"], "completed", "{answer}");
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    let legacy = Mcp::connect(&gateway.url, BILLING_TOKEN).await;
    let answer = legacy
        .call(
            TOOL,
            json!({"customer": "legacy-co", "amount": 2}),
            json!({}),
        )
        .await;
    assert!(answer["result"].get("taskId").is_none(), "{answer}");
    assert_eq!(execution(&answer)["state"], "completed", "{answer}");
    // tasks/* need the client to have declared the extension: -32021, naming it.
    let undeclared = plain.get("exe_00000000000000000000000000").await;
    assert_eq!(undeclared["error"]["code"], -32021, "{undeclared}");
    assert!(
        undeclared["error"]["data"]["requiredCapabilities"]["extensions"]
            .get(TASKS)
            .is_some(),
        "{undeclared}"
    );

    // A dispatched task: the cancellation is accepted and recorded, and changes nothing sent.
    let billing = Client::new(&gateway.url, BILLING_TOKEN, true);
    let id = start_slow_task(
        &billing,
        &dir.0,
        &target.state,
        json!({"customer": "cancel-co", "amount": 3}),
    )
    .await;
    let cancelled = billing.cancel(&id).await;
    assert!(cancelled.get("error").is_none(), "{cancelled}");
    assert_eq!(cancelled["result"]["resultType"], "complete", "{cancelled}");
    let shown = activity_show(&dir.0, &id);
    assert!(
        event_names(&shown).iter().any(|n| n == "cancel_requested"),
        "{shown}"
    );
    assert_eq!(shown["state"], "dispatched", "{shown}");
    assert_working(&billing.get(&id).await, &id);

    let deadline = Instant::now() + SLOW + Duration::from_secs(10);
    let got = loop {
        let got = billing.get(&id).await;
        if got["result"]["status"] != "working" {
            break got;
        }
        assert!(Instant::now() < deadline, "still working: {got}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_completed(&got, &id, "cancel-co");
    let names = event_names(&activity_show(&dir.0, &id));
    let cancel_at = names.iter().position(|n| n == "cancel_requested");
    let completed_at = names.iter().position(|n| n == "completed(applied)");
    assert!(
        matches!((cancel_at, completed_at), (Some(c), Some(d)) if c < d),
        "{names:?}"
    );
    assert_eq!(target.state.count_for("cancel-co"), 1);

    // A completed task has nothing left to cancel.
    let refused = billing.cancel(&id).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&id) && message.contains("nothing left to cancel"),
        "{refused}"
    );
    assert_completed(&billing.get(&id).await, &id, "cancel-co");

    assert_eq!(posts(&target.state), 3);

    // An operation key reused with other arguments is a conflict naming the first execution,
    // never a task for it; nothing reaches the target.
    let keyed = |amount: u64| {
        json!({"name": TOOL, "arguments": {"customer": "keyed-co", "amount": amount},
               "idempotencyKey": "task-key-1"})
    };
    let first = billing.rpc("tools/call", keyed(10)).await;
    let first_id = first["result"]["taskId"].as_str().unwrap().to_string();
    let clash = billing.rpc("tools/call", keyed(11)).await;
    assert_eq!(clash["error"]["code"], -32010, "{clash}");
    assert_eq!(
        clash["error"]["data"]["original_execution_id"],
        first_id.as_str(),
        "{clash}"
    );
    assert!(clash.get("result").is_none(), "{clash}");
    for _ in 0..100 {
        if billing.get(&first_id).await["result"]["status"] == "completed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(target.state.count_for("keyed-co"), 1);
    assert_eq!(posts(&target.state), 4);
    let status = gateway.terminate();
    assert_eq!(status.code(), Some(0), "postern serve exited with {status}");
}

/// Issue 14: a task-capable client calling a tool that waits for a per-use approval gets a
/// task at once; it reads `working` until an operator approves, then the result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_awaiting_approval_is_a_task_until_approved() {
    let target = InvoiceApi::start().await.unwrap();
    let dir = Dir::new("tasks-approval");
    let operator_token = "tasks-operator-token-0123456789";
    crate::harness::write_private(&dir.0.join("op.token"), operator_token);
    let mut text = tasks_config(&target);
    text.push_str(&format!(
        r#"
[[operator]]
name = "olga"
token = {{ file = "op.token" }}

[[tool]]
name = "approved_invoice"
class = "idempotent_write"
approval = "every_call"
match_window = "10m"
http = {{ method = "POST", url = "http://{}/invoices" }}
"#,
        target.addr
    ));
    let served = Served::start(&dir.0, &text);
    let client = Client::new(&served.url, BILLING_TOKEN, true);
    let created = client
        .call(
            "approved_invoice",
            json!({"customer": "task-approval", "amount": 4}),
        )
        .await;
    let task = &created["result"];
    assert_eq!(task["resultType"], "task", "{created}");
    let id = task["taskId"].as_str().unwrap().to_string();
    assert_working(&client.get(&id).await, &id);
    assert!(target.state.requests().is_empty());
    let out = Command::new(env!("CARGO_BIN_EXE_postern"))
        .args(["approvals", "approve", &id, "--gateway", &served.url])
        .env("POSTERN_OPERATOR_TOKEN", operator_token)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut done = Value::Null;
    for _ in 0..100 {
        done = client.get(&id).await;
        if done["result"]["status"] == "completed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_completed(&done, &id, "task-approval");

    // A task still waiting can be withdrawn: cancelled, and no approval can send it.
    let second = client
        .call(
            "approved_invoice",
            json!({"customer": "task-withdrawn", "amount": 5}),
        )
        .await;
    let second_id = second["result"]["taskId"].as_str().unwrap().to_string();
    let cancelled = client.cancel(&second_id).await;
    assert!(cancelled.get("error").is_none(), "{cancelled}");
    let out = Command::new(env!("CARGO_BIN_EXE_postern"))
        .args(["approvals", "approve", &second_id, "--gateway", &served.url])
        .env("POSTERN_OPERATOR_TOKEN", operator_token)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cancelled"));
    assert_eq!(target.state.count_for("task-withdrawn"), 0);
}
