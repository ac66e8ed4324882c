//! Acceptance 7: an approval request reaches a client that declared URL-mode elicitation, in
//! both protocol eras, as a raw MCP client over Streamable HTTP sees it; the URL carries only
//! the execution id; the client's `accept` approves nothing. The Python SDK, which declares no
//! URL elicitation, gets the pending result.

use serde_json::{json, Value};

use super::{base, pay, setup};
use crate::harness::{operator_json, posts, BILLING_TOKEN};
use crate::resume::sse::{http, SseReader};

/// The approval page's URL must be `{base}/ui/approvals/exe_…` and nothing more.
fn only_an_id(url: &str, base: &str) -> String {
    let id = url
        .strip_prefix(&format!("{base}/ui/approvals/"))
        .unwrap_or_else(|| panic!("{url} is not an approval page of {base}"));
    assert!(
        id.starts_with("exe_") && id.len() == 30,
        "only an opaque id: {url}"
    );
    assert!(
        !url.contains('?') && !url.contains("customer") && !url.contains("token"),
        "{url}"
    );
    id.to_string()
}

fn still_waiting(served: &crate::harness::Served, id: &str) {
    let pending = operator_json(served, &["approvals", "list"]);
    let found = pending["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["execution_id"] == id)
        .unwrap_or_else(|| panic!("{id} no longer pending: {pending}"))
        .clone();
    assert_eq!(found["state"], "awaiting_approval");
    assert!(found["decided"].is_null(), "{found}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_elicitation_in_a_session_approves_nothing() {
    let s = setup("ui-elicit-session").await;
    let base = base(&s.served);
    let url = &s.served.url;
    let client = http();
    let post = |body: Value, session: Option<&str>| {
        let mut r = client
            .post(url)
            .bearer_auth(BILLING_TOKEN)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(sid) = session {
            r = r
                .header("mcp-session-id", sid)
                .header("mcp-protocol-version", "2025-11-25");
        }
        r
    };
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {"elicitation": {"url": {}}},
        "clientInfo": {"name": "raw-elicitation-client", "version": "1"}}});
    let r = post(init, None).send().await.unwrap();
    let sid = r.headers()["mcp-session-id"].to_str().unwrap().to_string();
    SseReader::new(r).rest().await;
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(
        post(note, Some(&sid))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        202
    );

    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "pay_invoice", "arguments": pay("elicit-co", 6)}});
    let mut stream = SseReader::new(post(call, Some(&sid)).send().await.unwrap());
    // The call's stream first asks the client to open the approval page.
    let ask = loop {
        let e = stream
            .next()
            .await
            .expect("an elicitation before the result");
        if let Some(m) = e.message().filter(|m| m["method"] == "elicitation/create") {
            break m;
        }
    };
    assert_eq!(ask["params"]["mode"], "url", "{ask}");
    let id = only_an_id(ask["params"]["url"].as_str().unwrap(), &base);
    assert_eq!(ask["params"]["elicitationId"], id.as_str());
    still_waiting(&s.served, &id);
    // The agent (not a person) accepts: that decides nothing.
    let answer = json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept"}});
    let r = post(answer, Some(&sid)).send().await.unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let result = loop {
        let e = stream.next().await.expect("the call's result");
        if let Some(m) = e.message().filter(|m| m["id"] == 1) {
            break m;
        }
    };
    let ex = &result["result"]["structuredContent"]["execution"];
    assert_eq!(ex["execution_id"], id.as_str(), "{result}");
    assert_eq!(
        ex["state"], "awaiting_approval",
        "accepting the elicitation approved nothing: {result}"
    );
    still_waiting(&s.served, &id);
    assert_eq!(posts(&s.target.state), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_required_result_carries_the_url_elicitation_at_2026_07_28() {
    let s = setup("ui-elicit-mrtr").await;
    let base = base(&s.served);
    let client = http();
    let call = |extra: Value| {
        let mut params = json!({"name": "pay_invoice", "arguments": pay("mrtr-co", 6),
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"url": {}}},
            "io.modelcontextprotocol/clientInfo": {"name": "raw-mrtr-client", "version": "1"}
        }});
        for (k, v) in extra.as_object().unwrap() {
            params[k] = v.clone();
        }
        client
            .post(&s.served.url)
            .bearer_auth(BILLING_TOKEN)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "pay_invoice")
            .body(
                json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params})
                    .to_string(),
            )
    };
    let answer = |r: reqwest::Response| async move {
        let events = SseReader::new(r).rest().await;
        events
            .iter()
            .find_map(|e| e.message().filter(|m| m["id"] == 7))
            .expect("a response")
    };
    let first = answer(call(json!({})).send().await.unwrap()).await;
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    let ask = &result["inputRequests"]["postern_approval"];
    assert_eq!(ask["method"], "elicitation/create", "{first}");
    assert_eq!(ask["params"]["mode"], "url");
    let id = only_an_id(ask["params"]["url"].as_str().unwrap(), &base);
    still_waiting(&s.served, &id);

    // The retry with the client's answer (accept) and the echoed state: the same execution,
    // still waiting; nothing approved, nothing sent.
    let retry = json!({
        "inputResponses": {"postern_approval": {"action": "accept"}},
        "requestState": result["requestState"],
    });
    let second = answer(call(retry).send().await.unwrap()).await;
    let ex = &second["result"]["structuredContent"]["execution"];
    assert_eq!(ex["execution_id"], id.as_str(), "{second}");
    assert_eq!(ex["state"], "awaiting_approval", "{second}");
    still_waiting(&s.served, &id);
    assert_eq!(posts(&s.target.state), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_without_url_elicitation_gets_the_pending_result() {
    crate::interop::require_sdk().await;
    let s = setup("ui-elicit-sdk").await;
    let script = crate::foreign::repo_root().join("tests/interop/python_sdk.py");
    let mut command =
        crate::interop::python3(&[script.to_str().unwrap(), &s.served.url, BILLING_TOKEN]);
    command.env("POSTERN_SDK_APPROVAL_TOOL", "pay_invoice");
    let out = crate::foreign::output(command).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find(|l| l.starts_with("approval pending: exe_"))
        .unwrap_or_else(|| panic!("{stdout}"));
    still_waiting(&s.served, line.trim_start_matches("approval pending: "));
    assert_eq!(
        posts(&s.target.state),
        1,
        "only the SDK's create_invoice was sent"
    );
}
