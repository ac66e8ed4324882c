//! `postern serve` end to end: a real gateway process, a real invoice API that counts effects by
//! customer, and MCP clients (raw HTTP, and rmcp's own client).

use std::time::Duration;

use postern_demo::target::{InvoiceApi, Mode};
use postern_ledger::{Ledger, LedgerOptions, ListFilter};
use serde_json::{json, Value};

use crate::harness::{
    config, eventually, execution, posts, sse_message, Dir, Mcp, Served, BILLING_TOKEN, OPS_TOKEN,
};

async fn setup(tag: &str) -> (postern_demo::target::InvoiceApiHandle, Dir, Served) {
    let target = InvoiceApi::start().await.unwrap();
    let dir = Dir::new(tag);
    let served = Served::start(&dir.0, &config(&format!("http://{}", target.addr)));
    (target, dir, served)
}

async fn executions(store: &str) -> Vec<postern_ledger::ExecutionSummary> {
    let (ledger, _) = Ledger::open(store, LedgerOptions::default()).await.unwrap();
    ledger
        .read()
        .list(&ListFilter {
            limit: 1000,
            ..Default::default()
        })
        .await
        .unwrap()
}

/// 1. The answer is lost after the target created the invoice; a retry on a fresh connection
/// with a new JSON-RPC id gets the recorded result, marked recovered: one invoice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_answer_is_recovered_not_repeated() {
    let (target, _dir, served) = setup("lost").await;
    target
        .state
        .set_mode(Mode::SlowOnce(Duration::from_millis(600)));
    let first = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let req = first.request(
        "create_invoice",
        json!({"customer": "acme", "amount": 1250}),
        json!({}),
    );
    // The client gives up while the target is still working: the connection is cut.
    assert!(first
        .raw(&req, Some(Duration::from_millis(200)))
        .await
        .is_err());
    eventually("the target to create the invoice", || {
        target.state.count_for("acme") == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let again = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let resp = again
        .call(
            "create_invoice",
            json!({"amount": 1250, "customer": "acme"}),
            json!({}),
        )
        .await;
    let ex = execution(&resp);
    assert_eq!(ex["attempt"], "recovered", "{resp}");
    assert_eq!(ex["state"], "completed", "{resp}");
    assert_eq!(
        resp["result"]["structuredContent"]["response"]["customer"],
        "acme"
    );
    assert_eq!(target.state.count_for("acme"), 1);
    assert_eq!(posts(&target.state), 1);
    let all = executions(&served.store()).await;
    assert_eq!(all.len(), 1);
    assert_eq!(ex["execution_id"], all[0].id.to_string());
    // The lost delivery was recorded before the recovered one.
    let (ledger, _) = Ledger::open(&served.store(), LedgerOptions::default())
        .await
        .unwrap();
    let view = ledger.read().execution(all[0].id).await.unwrap().unwrap();
    let names: Vec<&str> = view.events.iter().map(|e| e.body.event.name()).collect();
    assert!(names.contains(&"delivery_failed"), "{names:?}");
}

/// 2. The same operation key with another amount is a conflict naming the first execution;
/// nothing reaches the target and the first invoice is unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operation_key_reused_for_another_intent_is_a_conflict() {
    let (target, _dir, served) = setup("conflict").await;
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let first = mcp
        .call(
            "create_invoice",
            json!({"customer": "acme", "amount": 100}),
            json!({"idempotencyKey": "order-7"}),
        )
        .await;
    let original = execution(&first)["execution_id"]
        .as_str()
        .unwrap()
        .to_string();
    let conflict = mcp
        .call(
            "create_invoice",
            json!({"customer": "acme", "amount": 999}),
            json!({"idempotencyKey": "order-7"}),
        )
        .await;
    assert_eq!(conflict["error"]["code"], -32010, "{conflict}");
    assert!(
        conflict["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&original),
        "{conflict}"
    );
    assert_eq!(conflict["error"]["data"]["original_execution_id"], original);
    // The same key through `_meta` is the same key.
    let via_meta = mcp
        .call(
            "create_invoice",
            json!({"customer": "acme", "amount": 999}),
            json!({"_meta": {"io.postern/idempotency-key": "order-7"}}),
        )
        .await;
    assert_eq!(via_meta["error"]["code"], -32010, "{via_meta}");
    assert_eq!(posts(&target.state), 1);
    assert_eq!(target.state.invoices()[0].amount, 100);
    assert_eq!(executions(&served.store()).await.len(), 1);
}

/// 3. The target applies the request and never answers: the result is a non-error
/// `outcome_unknown` with a next step; retrying an irreversible tool sends nothing and returns
/// `needs_review`; retrying an idempotent write re-sends with the SAME Idempotency-Key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_outcome_is_recovered_by_class() {
    let (target, _dir, served) = setup("unknown").await;
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;

    target.state.set_mode(Mode::HangOnce);
    let wire = mcp
        .call(
            "send_wire",
            json!({"customer": "wire-co", "amount": 5}),
            json!({}),
        )
        .await;
    assert_eq!(wire["result"]["isError"], Value::Bool(false), "{wire}");
    assert_eq!(execution(&wire)["state"], "outcome_unknown", "{wire}");
    assert!(
        execution(&wire)["next_step"]
            .as_str()
            .unwrap()
            .contains("Do not retry"),
        "{wire}"
    );
    let before = posts(&target.state);
    let retry = mcp
        .call(
            "send_wire",
            json!({"customer": "wire-co", "amount": 5}),
            json!({}),
        )
        .await;
    assert_eq!(execution(&retry)["state"], "needs_review", "{retry}");
    assert_eq!(
        execution(&retry)["execution_id"],
        execution(&wire)["execution_id"]
    );
    assert_eq!(
        posts(&target.state),
        before,
        "an irreversible retry sends nothing"
    );

    target.state.set_mode(Mode::HangOnce);
    let first = mcp
        .call(
            "create_invoice_resend",
            json!({"customer": "resend-co", "amount": 7}),
            json!({}),
        )
        .await;
    assert_eq!(execution(&first)["state"], "outcome_unknown", "{first}");
    let retry = mcp
        .call(
            "create_invoice_resend",
            json!({"customer": "resend-co", "amount": 7}),
            json!({}),
        )
        .await;
    assert_eq!(execution(&retry)["state"], "completed", "{retry}");
    assert_eq!(execution(&retry)["attempt"], "recovered");
    let keys: Vec<Option<String>> = target
        .state
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.body.contains("resend-co"))
        .map(|r| r.idempotency_key.clone())
        .collect();
    assert_eq!(keys.len(), 2, "re-sent once");
    assert_eq!(keys[0], keys[1], "with the same Idempotency-Key");
    assert_eq!(
        keys[0].as_deref(),
        execution(&first)["execution_id"].as_str()
    );
    assert_eq!(target.state.count_for("resend-co"), 1);
}

/// 4. `kill -9` of the gateway after dispatch, before the result is recorded; restart; the
/// retry is recovered through the tool's status query: one invoice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_killed_mid_call_recovers_through_the_status_query() {
    let target = InvoiceApi::start().await.unwrap();
    let dir = Dir::new("kill9");
    let text = config(&format!("http://{}", target.addr))
        .replace("response_timeout = \"1s\"", "response_timeout = \"30s\"");
    let served = Served::start(&dir.0, &text);
    target.state.set_mode(Mode::HangAfterCreate);
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let req = mcp.request(
        "create_invoice",
        json!({"customer": "crash-co", "amount": 42}),
        json!({}),
    );
    let pending = tokio::spawn(async move { mcp.raw(&req, Some(Duration::from_secs(20))).await });
    eventually("the target to apply the request", || {
        target.state.count_for("crash-co") == 1
    })
    .await;
    served.kill9();
    let _ = pending.await;
    target.state.set_mode(Mode::Normal);

    let restarted = Served::start(&dir.0, &text);
    let mcp = Mcp::connect(&restarted.url, BILLING_TOKEN).await;
    let resp = mcp
        .call(
            "create_invoice",
            json!({"customer": "crash-co", "amount": 42}),
            json!({}),
        )
        .await;
    assert_eq!(execution(&resp)["state"], "completed", "{resp}");
    assert_eq!(execution(&resp)["attempt"], "recovered");
    assert_eq!(target.state.count_for("crash-co"), 1);
    assert_eq!(
        posts(&target.state),
        1,
        "recovered by a GET, nothing re-sent"
    );
    let all = executions(&restarted.store()).await;
    assert_eq!(all.len(), 1);
    let (ledger, _) = Ledger::open(&restarted.store(), LedgerOptions::default())
        .await
        .unwrap();
    let names: Vec<&str> = ledger
        .read()
        .execution(all[0].id)
        .await
        .unwrap()
        .unwrap()
        .events
        .iter()
        .map(|e| e.body.event.name())
        .collect::<Vec<_>>()
        .into_iter()
        .collect();
    assert!(
        names.contains(&"outcome_unknown") && names.contains(&"completed(applied)"),
        "{names:?}"
    );
}

/// 5. Fifty concurrent identical calls make one request to the target and share one execution;
/// two actors make two; a read-only tool runs every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_identical_calls_make_one_request() {
    let (target, _dir, served) = setup("fifty").await;
    target
        .state
        .set_mode(Mode::SlowOnce(Duration::from_millis(300)));
    let mcp = std::sync::Arc::new(Mcp::connect(&served.url, BILLING_TOKEN).await);
    let calls: Vec<_> = (0..50)
        .map(|_| {
            let mcp = mcp.clone();
            tokio::spawn(async move {
                mcp.call(
                    "create_invoice",
                    json!({"customer": "fifty-co", "amount": 50}),
                    json!({}),
                )
                .await
            })
        })
        .collect();
    let mut ids = std::collections::HashSet::new();
    for c in calls {
        let resp = c.await.unwrap();
        assert_eq!(execution(&resp)["state"], "completed", "{resp}");
        ids.insert(
            execution(&resp)["execution_id"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    assert_eq!(ids.len(), 1);
    assert_eq!(posts(&target.state), 1);

    let ops = Mcp::connect(&served.url, OPS_TOKEN).await;
    let other = ops
        .call(
            "create_invoice",
            json!({"customer": "fifty-co", "amount": 50}),
            json!({}),
        )
        .await;
    assert!(!ids.contains(execution(&other)["execution_id"].as_str().unwrap()));
    assert_eq!(target.state.count_for("fifty-co"), 2);

    let a = mcp.call("list_invoices", json!({}), json!({})).await;
    let b = mcp.call("list_invoices", json!({}), json!({})).await;
    assert_ne!(execution(&a)["execution_id"], execution(&b)["execution_id"]);
    assert_eq!(execution(&b)["attempt"], "new");
    assert_eq!(
        target
            .state
            .requests()
            .iter()
            .filter(|r| r.method == "GET")
            .count(),
        2
    );
}

/// 6. Bad input gets a clear error and no execution is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_before_anything_is_recorded() {
    let (target, _dir, served) = setup("bad").await;
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let schema = mcp
        .call(
            "create_invoice",
            json!({"customer": "acme", "amount": "lots"}),
            json!({}),
        )
        .await;
    // Arguments the schema refuses are a tool error the model can correct (MCP 2025-11-25),
    // not a protocol error; an unknown tool stays one.
    assert_eq!(schema["result"]["isError"], true, "{schema}");
    assert!(
        schema["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("/amount"),
        "{schema}"
    );
    let unknown = mcp.call("delete_everything", json!({}), json!({})).await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    assert!(unknown["error"]["message"]
        .as_str()
        .unwrap()
        .contains("unknown tool \"delete_everything\""));

    let http = crate::harness::http_client();
    let body = mcp.request(
        "create_invoice",
        json!({"customer": "acme", "amount": 1}),
        json!({}),
    );
    for auth in [None, Some("Bearer not-a-token")] {
        let mut r = http
            .post(&served.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.clone());
        if let Some(a) = auth {
            r = r.header("authorization", a);
        }
        assert_eq!(r.send().await.unwrap().status().as_u16(), 401);
    }
    let big = mcp.request(
        "create_invoice",
        json!({"customer": "x".repeat(70_000), "amount": 1}),
        json!({}),
    );
    assert_eq!(mcp.raw(&big, None).await.unwrap().0, 413);
    let (status, text) = mcp
        .raw("{\"jsonrpc\": \"2.0\", \"id\": 9, \"method\": ", None)
        .await
        .unwrap();
    assert_eq!(status, 400);
    assert_eq!(sse_message(&text)["error"]["code"], -32700, "{text}");
    let dup = "{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"tools/call\",\"params\":{\"name\":\"create_invoice\",\"arguments\":{\"customer\":\"acme\",\"amount\":5,\"amount\":500}}}";
    let (_, text) = mcp.raw(dup, None).await.unwrap();
    let dup = sse_message(&text);
    assert_eq!(dup["error"]["code"], -32602, "{dup}");
    assert!(
        dup["error"]["message"]
            .as_str()
            .unwrap()
            .contains("duplicate object key \"amount\""),
        "{dup}"
    );

    assert!(executions(&served.store()).await.is_empty());
    assert!(target.state.requests().is_empty());
}

/// rmcp's own client lists the tools (with annotations from the class) and calls one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_client_lists_and_calls() {
    use rmcp::model::CallToolRequestParams;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::ServiceExt;

    let (target, _dir, served) = setup("rmcp").await;
    postern_channels::http::install_default_provider();
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(served.url.clone())
            .auth_header(BILLING_TOKEN),
    );
    let client = ().serve(transport).await.unwrap();
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "create_invoice",
            "create_invoice_resend",
            "send_wire",
            "list_invoices",
            "execution_status"
        ]
    );
    let wire = tools.iter().find(|t| t.name == "send_wire").unwrap();
    assert_eq!(
        wire.annotations.as_ref().unwrap().destructive_hint,
        Some(true)
    );
    let args = json!({"customer": "rmcp-co", "amount": 3})
        .as_object()
        .unwrap()
        .clone();
    let result = client
        .call_tool(CallToolRequestParams::new("create_invoice").with_arguments(args))
        .await
        .unwrap();
    let structured = result.structured_content.unwrap();
    assert_eq!(structured["execution"]["state"], "completed");
    let id = structured["execution"]["execution_id"]
        .as_str()
        .unwrap()
        .to_string();
    let args = json!({"execution_id": id}).as_object().unwrap().clone();
    let status = client
        .call_tool(CallToolRequestParams::new("execution_status").with_arguments(args))
        .await
        .unwrap();
    let record = status.structured_content.unwrap();
    assert_eq!(record["execution"]["execution_id"], id.as_str());
    assert_eq!(
        record["response"]["record"]["arguments"]["customer"],
        "rmcp-co"
    );
    assert_eq!(target.state.count_for("rmcp-co"), 1);
    client.cancel().await.unwrap();
    // The run was recorded in the Sessions log with the client's identity.
    let (ledger, _) = Ledger::open(&served.store(), LedgerOptions::default())
        .await
        .unwrap();
    let runs = ledger.read().runs(10).await.unwrap();
    assert!(
        runs.iter()
            .any(|r| r.actor == "billing" && r.client_name.is_some()),
        "{runs:?}"
    );
}
