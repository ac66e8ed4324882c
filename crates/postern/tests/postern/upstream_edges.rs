//! Issue 15, the edges of upstream exposure: a whole upstream served under one default
//! contract (`expose = "all"`), and an upstream that misbehaves on the wire.

use std::process::Command;

use postern_demo::upstream::Journal;
use serde_json::{json, Value};

use crate::harness::{eventually, execution, Dir, Mcp, Served, BILLING_TOKEN};
use crate::upstream::{
    calls_for, list, stdio_upstream, upstream_journal, wait_available, wait_listed, GATEWAY,
};

/// `expose = "all"`: every tool the upstream lists is served as `books_<name>` under the
/// default contract (irreversible, here approved by an operator on every call), except one a
/// `[[tool]]` re-exports (served only under that contract) and one whose name a `[[tool]]`
/// already has (not served, and the operators' view says why). The upstream's annotations are
/// shown and recorded, never trusted; actors name the served tools by prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_exposed_whole_serves_its_other_tools_under_the_default_contract() {
    let dir = Dir::new("up-all");
    let journal = upstream_journal(&dir.0);
    let config = format!(
        r#"{GATEWAY}tools = ["invoice", "books_*"]

[[actor]]
name = "ops"
token = {{ file = "ops.token" }}
tools = ["invoice"]

[[operator]]
name = "alice"
token = {{ file = "alice.token" }}

{}expose = "all"
approval = "every_call"

[[tool]]
name = "invoice"
class = "irreversible"
match_window = "10m"
mcp = {{ server = "books", tool = "create_invoice" }}

[[tool]]
name = "books_invoice_status"
class = "read_only"
http = {{ method = "GET", url = "http://127.0.0.1:9/status" }}
"#,
        stdio_upstream(&journal)
    );
    crate::harness::write_private(&dir.0.join("alice.token"), crate::harness::ALICE_TOKEN);
    let served = Served::start(&dir.0, &config);
    wait_listed(&served.url).await;
    let tools = list(&served.url).await;
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(
        names,
        [
            "invoice",
            "books_invoice_status",
            "books_set_status",
            "execution_status"
        ],
        "{tools:?}"
    );
    let set_status = &tools[2];
    // The default class decides (irreversible: destructive), whatever the upstream claims.
    assert_eq!(
        set_status["annotations"]["destructiveHint"], true,
        "{set_status}"
    );
    assert_eq!(
        set_status["annotations"]["idempotentHint"], false,
        "{set_status}"
    );
    let claimed = &set_status["_meta"]["io.postern/upstream-annotations"];
    assert_eq!(claimed["idempotentHint"], true, "{set_status}");
    assert_eq!(
        set_status["description"],
        "Set an order's status (idempotent)"
    );

    let view = crate::harness::operator_json(&served, &["upstream", "list"]);
    let books = &view["upstreams"][0];
    let not_served = books["not_served"].as_array().unwrap();
    assert_eq!(not_served.len(), 1, "{view}");
    assert_eq!(not_served[0]["tool"], "invoice_status");
    assert!(
        not_served[0]["why"].as_str().unwrap().contains("taken"),
        "{view}"
    );
    assert!(
        books["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["tool"] == "set_status" && t["state"] == "serving"),
        "{view}"
    );

    // Actor isolation by prefix: ops may not call it, and nothing is sent.
    let ops = Mcp::connect(&served.url, crate::harness::OPS_TOKEN).await;
    let refused = ops
        .call(
            "books_set_status",
            json!({"order": "o-ops", "status": "paid"}),
            json!({}),
        )
        .await;
    assert!(refused["error"].is_object(), "{refused}");
    // The explicit contract is the only way to create_invoice.
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let hidden = mcp
        .call(
            "books_create_invoice",
            json!({"customer": "x", "amount": 1}),
            json!({}),
        )
        .await;
    assert!(hidden["error"].is_object(), "{hidden}");

    // The default contract's approval holds: nothing is sent until alice approves.
    let args = json!({"order": "o-all", "status": "paid"});
    let first = mcp.call("books_set_status", args.clone(), json!({})).await;
    let ex = execution(&first);
    assert_eq!(ex["state"], "awaiting_approval", "{first}");
    let id = ex["execution_id"].as_str().unwrap().to_string();
    assert_eq!(calls_for(&journal, "o-all"), 0);
    let (code, _, err) = crate::harness::operator(&served, &["approvals", "approve", &id]);
    assert_eq!(code, 0, "{err}");
    eventually("the approved call reaches the upstream", || {
        calls_for(&journal, "o-all") == 1
    })
    .await;
    let done = mcp.call("books_set_status", args, json!({})).await;
    assert_eq!(execution(&done)["state"], "completed", "{done}");
    assert_eq!(execution(&done)["execution_id"], id.as_str());
    assert_eq!(calls_for(&journal, "o-all"), 1);
    assert_eq!(
        Journal::calls(&journal)[0].execution_id.as_deref(),
        Some(id.as_str())
    );
    assert_eq!(calls_for(&journal, "o-ops") + calls_for(&journal, "x"), 0);

    // The record names the channel and target, and keeps the upstream's claim beside it.
    let shown = crate::harness::activity(&dir.0, &["show", &id]);
    assert_eq!(shown["record"]["channel"], "mcp", "{shown}");
    assert_eq!(shown["record"]["target"], "books/set_status", "{shown}");
    assert!(
        shown["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["detail"]["upstream_annotations"]["idempotentHint"] == true),
        "{shown}"
    );
    let store = served.store();
    let text = Command::new(env!("CARGO_BIN_EXE_postern"))
        .args(["activity", "show", &id, "--store", &store])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("untrusted"), "{text}");
    crate::harness::assert_store_verifies(&dir.0, &served);
}

/// An upstream that misbehaves on the wire: a tool whose input schema is not an object schema
/// is refused before anything is sent, and an answer that is not JSON-RPC is never taken for
/// one: the call was handed over, so its outcome is unknown (irreversible: a person reviews).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_from_an_upstream_is_unknown_and_a_non_object_schema_is_refused() {
    let dir = Dir::new("up-garbage");
    let journal = upstream_journal(&dir.0);
    let script = crate::foreign::repo_root().join("tests/interop/bad_upstream.py");
    let (interop, own) = (script.parent().unwrap(), journal.parent().unwrap());
    // The system's python3 (standard library only), which the sandbox's user may run.
    let config = format!(
        r#"{GATEWAY}
[upstream.bad]
command = ["/usr/bin/python3", {script:?}, {journal:?}]
timeout = "1500ms"
sandbox = {{ read = [{interop:?}], write = [{own:?}] }}

[[tool]]
name = "echo"
class = "irreversible"
match_window = "10m"
mcp = {{ server = "bad", tool = "echo_schema" }}

[[tool]]
name = "garbage"
class = "irreversible"
match_window = "10m"
mcp = {{ server = "bad", tool = "garbage" }}
"#,
        journal = journal.to_str().unwrap()
    );
    let served = Served::start(&dir.0, &config);
    wait_available(&served.url, "garbage").await;
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let echo = mcp.call("echo", json!({}), json!({})).await;
    assert!(echo.to_string().contains("not an object schema"), "{echo}");
    assert!(!journal.exists(), "nothing was sent for echo");

    let resp = mcp.call("garbage", json!({"n": 1}), json!({})).await;
    let ex = execution(&resp);
    assert_eq!(ex["state"], "outcome_unknown", "{resp}");
    assert_eq!(
        std::fs::read_to_string(&journal).unwrap().lines().count(),
        1
    );
    // The retry does not send it again: the record decides (irreversible: a person reviews).
    let again = mcp.call("garbage", json!({"n": 1}), json!({})).await;
    assert_eq!(
        execution(&again)["execution_id"],
        ex["execution_id"],
        "{again}"
    );
    assert_eq!(execution(&again)["state"], "needs_review", "{again}");
    assert_eq!(
        std::fs::read_to_string(&journal).unwrap().lines().count(),
        1
    );
}

/// `read_only = [patterns]` under `expose = "all"`: a tool whose name matches is served as a read
/// (performed on every call, never matched to an earlier one), every other one under the
/// default class; the upstream's annotations decide nothing, and the operators' view says which
/// class each tool has and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_patterns_serve_matching_tools_as_reads() {
    let dir = Dir::new("up-reads");
    let journal = upstream_journal(&dir.0);
    let config = format!(
        r#"{GATEWAY}tools = ["books_*"]

[[operator]]
name = "alice"
token = {{ file = "alice.token" }}

{}expose = "all"
read_only = ["invoice_*", "*_report"]
"#,
        stdio_upstream(&journal)
    );
    crate::harness::write_private(&dir.0.join("alice.token"), crate::harness::ALICE_TOKEN);
    let served = Served::start(&dir.0, &config);
    wait_available(&served.url, "books_create_invoice").await;
    let tools = list(&served.url).await;
    let tool = |name: &str| {
        tools
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} not listed: {tools:?}"))
            .clone()
    };
    assert_eq!(
        tool("books_invoice_status")["annotations"]["readOnlyHint"],
        true
    );
    assert_eq!(
        tool("books_create_invoice")["annotations"]["readOnlyHint"],
        false
    );
    assert_eq!(
        tool("books_create_invoice")["annotations"]["destructiveHint"],
        true
    );
    // A read is performed on every call: two identical calls are two executions, both new.
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let args = json!({"execution_id": "exe_nothing"});
    let first = mcp
        .call("books_invoice_status", args.clone(), json!({}))
        .await;
    let second = mcp.call("books_invoice_status", args, json!({})).await;
    let ids: Vec<&Value> = [&first, &second]
        .iter()
        .map(|r| &execution(r)["execution_id"])
        .collect();
    assert_ne!(ids[0], ids[1], "{first}\n{second}");
    assert_eq!(execution(&second)["attempt"], "new", "{second}");
    // The operators' view: each tool's class and why.
    let base = served.url.trim_end_matches("/mcp");
    let http = crate::harness::http_client();
    let view = crate::harness::ops_get(&http, &format!("{base}/ops/upstreams")).await;
    let shown = |t: &str| {
        view["upstreams"][0]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["tool"] == t)
            .unwrap_or_else(|| panic!("{t}: {view}"))
            .clone()
    };
    assert_eq!(shown("invoice_status")["class"], "read_only", "{view}");
    assert_eq!(
        shown("invoice_status")["class_why"],
        "matches read_only pattern \"invoice_*\"",
        "{view}"
    );
    assert_eq!(shown("set_status")["class"], "irreversible", "{view}");
    assert_eq!(
        shown("set_status")["class_why"],
        "the upstream's default_class",
        "{view}"
    );
    served.stop();
}
