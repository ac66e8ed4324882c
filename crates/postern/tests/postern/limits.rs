//! Bounds on what a caller can put into the record (issue 12): operation keys, re-issue keys,
//! intent scopes and run ids are 1 to 256 bytes; and each actor has its own token.

use postern_gateway::demo_target::InvoiceApi;
use serde_json::json;

use crate::harness::{config, Dir, Mcp, Served, BILLING_TOKEN, OPS_TOKEN};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_scopes_and_run_ids_are_bounded() {
    let target = InvoiceApi::start().await.unwrap();
    let dir = Dir::new("limits");
    let served = Served::start(&dir.0, &config(&format!("http://{}", target.addr)));
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let long = "k".repeat(257);
    for (meta, named) in [
        ("io.postern/idempotency-key", "operation key"),
        ("io.postern/reissue-key", "re-issue key"),
        ("io.postern/intent-scope", "intent scope"),
        ("io.postern/run", "run id"),
    ] {
        let r = mcp
            .call(
                "create_invoice",
                json!({"customer": "limits-co", "amount": 1}),
                json!({"_meta": {meta: long}}),
            )
            .await;
        assert_eq!(r["error"]["code"], -32602, "{meta}: {r}");
        let message = r["error"]["message"].as_str().unwrap();
        assert!(message.contains(named), "{message}");
        assert!(message.contains("256 bytes"), "{message}");
        assert!(!message.contains(&long), "the value is not echoed");
    }
    assert!(target.state.requests().is_empty());
    // 256 bytes is fine.
    let ok = mcp
        .call(
            "create_invoice",
            json!({"customer": "limits-co", "amount": 1}),
            json!({"_meta": {"io.postern/idempotency-key": "k".repeat(256)}}),
        )
        .await;
    assert!(ok["result"].is_object(), "{ok}");
}

#[test]
fn two_actors_with_one_token_are_refused_at_start_up() {
    let dir = Dir::new("same-token");
    crate::harness::prepare(&dir.0, &config("http://127.0.0.1:9"));
    std::fs::write(dir.0.join("ops.token"), BILLING_TOKEN).unwrap();
    assert_ne!(BILLING_TOKEN, OPS_TOKEN);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_postern"))
        .args(["serve", "-c", dir.0.join("postern.toml").to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("actors billing and ops have the same token"),
        "{stderr}"
    );
    assert!(!stderr.contains(BILLING_TOKEN), "{stderr}");
}

/// Issue 12: one actor's in-flight calls are bounded (`max_calls_per_actor`); one more is a 429
/// with `Retry-After` and a JSON-RPC error saying nothing was recorded or sent. Other actors are
/// not held up, and the slot comes back when the answer is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actor_over_its_call_limit_gets_429_and_others_do_not() {
    use postern_gateway::demo_target::Mode;
    let target = InvoiceApi::start().await.unwrap();
    let dir = Dir::new("call-limit");
    let text = config(&format!("http://{}", target.addr))
        .replace("[gateway]\n", "[gateway]\nmax_calls_per_actor = 1\n")
        .replace("response_timeout = \"1s\"", "response_timeout = \"10s\"");
    let served = Served::start(&dir.0, &text);
    let billing = std::sync::Arc::new(Mcp::connect(&served.url, BILLING_TOKEN).await);
    let ops = Mcp::connect(&served.url, OPS_TOKEN).await;
    target
        .state
        .set_mode(Mode::SlowOnce(std::time::Duration::from_secs(2)));
    let slow = {
        let billing = billing.clone();
        tokio::spawn(async move {
            billing
                .call(
                    "create_invoice",
                    json!({"customer": "slow-co", "amount": 1}),
                    json!({}),
                )
                .await
        })
    };
    crate::harness::eventually("the slow call to reach the target", || {
        crate::harness::posts(&target.state) == 1
    })
    .await;
    let second = billing.request(
        "create_invoice",
        json!({"customer": "second-co", "amount": 1}),
        json!({}),
    );
    let (status, body) = billing.raw(&second, None).await.unwrap();
    assert_eq!(status, 429, "{body}");
    let error: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(error["error"]["code"], -32000, "{body}");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("nothing was recorded or sent"),
        "{message}"
    );
    // Another actor is not held up by billing's limit.
    let other = ops
        .call(
            "create_invoice",
            json!({"customer": "ops-co", "amount": 1}),
            json!({}),
        )
        .await;
    assert!(other["result"].is_object(), "{other}");
    // The slow call completes, and its slot is free again.
    let first = slow.await.unwrap();
    assert!(first["result"].is_object(), "{first}");
    let again = billing
        .call(
            "create_invoice",
            json!({"customer": "second-co", "amount": 1}),
            json!({}),
        )
        .await;
    assert!(again["result"].is_object(), "{again}");
    assert_eq!(target.state.count_for("second-co"), 1);
}

/// Issue 12: every `execution_status` poll of a delivered execution used to append another
/// `delivered` event, forever. A poll records a delivery only the first time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_a_delivered_execution_does_not_grow_its_record() {
    let target = InvoiceApi::start().await.unwrap();
    let dir = Dir::new("poll-delivery");
    let served = Served::start(&dir.0, &config(&format!("http://{}", target.addr)));
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let r = mcp
        .call(
            "create_invoice",
            json!({"customer": "poll-co", "amount": 1}),
            json!({}),
        )
        .await;
    let id = crate::harness::execution(&r)["execution_id"]
        .as_str()
        .unwrap()
        .to_string();
    // Let the call's own delivery be recorded first.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    for _ in 0..5 {
        let s = mcp
            .call("execution_status", json!({"execution_id": id}), json!({}))
            .await;
        assert!(s["result"].is_object(), "{s}");
    }
    served.stop();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_postern"))
        .args(["activity", "show", &id, "--json", "--store"])
        .arg(format!("sqlite://{}", dir.0.join("ledger.db").display()))
        .output()
        .unwrap();
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let delivered = shown["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "delivered")
        .count();
    assert_eq!(delivered, 1, "{shown}");
}
