//! Sessionless (2026-07-28) calls whose client goes away (contract §3 rule 6): after dispatch the
//! execution runs on and the re-issued call gets its record; before the accept was written it is
//! recorded `cancelled`, nothing sent.

use std::time::Duration;

use postern_demo::target::Mode;
use serde_json::{json, Value};

use super::sse::{http, response_in, SseReader};
use super::{
    all_executions, completed, event_names, has, open_ledger, setup, wait_for_the_execution,
    PATIENCE, SLOW,
};
use crate::harness::{execution, posts, BILLING_TOKEN};

/// A `tools/call` of protocol 2026-07-28: no session, the version and capabilities in `_meta`,
/// the SEP-2243 headers beside it.
fn sessionless_call(
    client: &reqwest::Client,
    url: &str,
    rpc_id: i64,
    arguments: Value,
) -> reqwest::RequestBuilder {
    let body = json!({"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call", "params": {
        "name": "create_invoice",
        "arguments": arguments,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}
        }
    }});
    client
        .post(url)
        .bearer_auth(BILLING_TOKEN)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "create_invoice")
        .body(body.to_string())
}

/// The JSON-RPC response of a sessionless call (a JSON body or an SSE stream).
async fn sessionless_answer(resp: reqwest::Response, rpc_id: i64) -> Value {
    let status = resp.status().as_u16();
    let json = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if json {
        let body = resp.text().await.unwrap();
        panic!("a JSON answer with status {status}: {body}");
    }
    assert_eq!(status, 200);
    response_in(&SseReader::new(resp).rest().await, rpc_id)
}

/// Case 4a: a sessionless call whose client goes away after dispatch runs on; the identical
/// call re-issued gets the recorded result: one execution, one invoice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessionless_call_abandoned_after_dispatch_runs_on() {
    let (target, _dir, served, _) = setup("resume-stateless-after").await;
    target.state.set_mode(Mode::SlowOnce(SLOW));
    let args = json!({"customer": "gone-co", "amount": 26});
    let client = http();
    let pending = tokio::spawn(sessionless_call(&client, &served.url, 1, args.clone()).send());
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while posts(&target.state) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the call never reached the target"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The client goes away while the target works.
    pending.abort();
    let _ = pending.await;

    let ledger = open_ledger(&served).await;
    let (id, names) =
        wait_for_the_execution(&ledger, "the abandoned call to complete", completed).await;
    assert!(
        has(&names, "cancel_requested"),
        "the disconnect after dispatch is recorded (and only recorded): {names:?}"
    );
    assert_eq!(target.state.count_for("gone-co"), 1);

    let again = sessionless_call(&http(), &served.url, 2, args)
        .send()
        .await
        .unwrap();
    let answer = sessionless_answer(again, 2).await;
    let ex = execution(&answer);
    assert_eq!(ex["execution_id"], id.to_string(), "{answer}");
    assert_eq!(ex["attempt"], "recovered", "{answer}");
    assert_eq!(ex["state"], "completed", "{answer}");
    assert_eq!(target.state.count_for("gone-co"), 1);
    assert_eq!(posts(&target.state), 1);
    assert_eq!(all_executions(&ledger).await.len(), 1);
}

/// Case 4b: a sessionless call whose client goes away before its accept is written is
/// recorded `cancelled`, and nothing reaches the target. The test holds the ledger's write lock
/// so the writer reaches the accept only after the client left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessionless_call_abandoned_before_dispatch_is_cancelled() {
    use sqlx::Connection;

    let (target, _dir, served, _) = setup("resume-stateless-before").await;
    let path = served.dir.join("ledger.db");
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&path)
        .busy_timeout(PATIENCE);
    let mut lock = sqlx::SqliteConnection::connect_with(&options)
        .await
        .unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut lock)
        .await
        .unwrap();

    let client = http();
    let pending = tokio::spawn(
        sessionless_call(
            &client,
            &served.url,
            1,
            json!({"customer": "left-co", "amount": 3}),
        )
        .send(),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!pending.is_finished(), "the call waits for the ledger");
    pending.abort();
    let _ = pending.await;
    // The gateway sees the connection close; then the writer gets the file.
    tokio::time::sleep(Duration::from_millis(300)).await;
    sqlx::query("ROLLBACK").execute(&mut lock).await.unwrap();
    drop(lock);

    let ledger = open_ledger(&served).await;
    let (id, names) =
        wait_for_the_execution(&ledger, "the abandoned call's record", |n| n.len() >= 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let names_later = event_names(&ledger, id).await;
    assert_eq!(names, names_later, "nothing happens after the cancellation");
    assert_eq!(names, ["accepted", "cancelled"], "{names:?}");
    let summary = &all_executions(&ledger).await[0];
    assert_eq!(summary.lifecycle.state.as_str(), "cancelled");
    assert_eq!(summary.first_dispatched_at, None);
    assert_eq!(target.state.count_for("left-co"), 0);
    assert!(
        target.state.requests().is_empty(),
        "nothing reached the target: {:?}",
        target.state.requests()
    );
}
